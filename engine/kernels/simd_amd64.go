//go:build !purego

package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// CPU features the kernels use, read once (golang.org/x/sys/cpu checks both the
// CPUID bits and that the OS saves the vector registers). A package variable so
// that the tests can switch paths.
var (
	useAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	useAVX512 = useAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
)

// The row slices are checked to hold all their blocks before the assembly reads
// them (a short row panics like the Go code would).

func dotQ4KRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ4KRowGeneric(row, y)
	}
	_ = row[n*144-1]
	if useAVX512 {
		return dotQ4KAVX512(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
	}
	return dotQ4KAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotQ4KRows sets out[t] = dotQ4KRow(row, y[t*nb:(t+1)*nb]) for each
// t < len(out): one weight row against several activation rows (a batch of
// tokens), the AVX2 kernels taking eight, four or two at a time and unpacking
// each weight block once for them. Every out[t] has the bits dotQ4KRow gives.
// (With AVX-512, MatMul takes the tiles of tile_amd64.go instead.)
//
// Past the last whole eight, 6-7 tokens left go through the 8-token kernel again
// over the last eight, and 3 left (after the fours) through the 4-token kernel
// over the last four: computing some outputs twice, with the same bits, costs
// less than the narrower kernels (BenchmarkKTokens: the kernels of 4, 2 and 1
// tokens take about 1.2, 2.3 and 2.8 times the 8-token kernel's time per token).
func dotQ4KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	t, n := 0, len(out)
	if useAVX2 && !useAVX512 && nb > 0 && n > 1 {
		_, _ = row[nb*144-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		for ; t+8 <= n; t += 8 {
			dotQ4KAVX2x8(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		if n >= 8 && n-t >= 6 {
			dotQ4KAVX2x8(&row[0], (*byte)(unsafe.Pointer(&y[(n-8)*nb])), nb, stride, &out[n-8])
			t = n
		}
		for ; t+4 <= n; t += 4 {
			dotQ4KAVX2x4(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		if n >= 4 && n-t == 3 {
			dotQ4KAVX2x4(&row[0], (*byte)(unsafe.Pointer(&y[(n-4)*nb])), nb, stride, &out[n-4])
			t = n
		}
		for ; t+2 <= n; t += 2 {
			dotQ4KAVX2x2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < n; t++ {
		out[t] = dotQ4KRow(row, y[t*nb:(t+1)*nb])
	}
}

// dotQ5KRow is dotQ4KRow for Q5_K weights (AVX2 only: no one-token AVX-512 or
// tile kernel; dotQ5KRows has AVX-512 kernels of 16 and 8 tokens).
func dotQ5KRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ5KRowGeneric(row, y)
	}
	_ = row[n*176-1]
	return dotQ5KAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotQ5KRows is dotQ4KRows for Q5_K weights: two tokens at a time with AVX2;
// with AVX-512 the kernels of 16 and 8 tokens (dotQ5KAVX512x16, x8) first, with
// dotQ6KRows' reuse of them over the last tokens. Q5_K's tiles lack llama.cpp's
// 8-lane order (issue 32); these keep it, and every kernel here gives each token
// dotQ5KRowGeneric's bits, so they mix freely.
func dotQ5KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n > 1 {
		_, _ = row[nb*176-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		if useAVX512 {
			for ; t+16 <= n; t += 16 {
				dotQ5KAVX512x16(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
			}
			if n >= 16 && n-t >= 12 {
				dotQ5KAVX512x16(&row[0], (*byte)(unsafe.Pointer(&y[(n-16)*nb])), nb, stride, &out[n-16])
				t = n
			}
			for ; t+8 <= n; t += 8 {
				dotQ5KAVX512x8(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
			}
			if n >= 8 && n-t >= 6 {
				dotQ5KAVX512x8(&row[0], (*byte)(unsafe.Pointer(&y[(n-8)*nb])), nb, stride, &out[n-8])
				t = n
			}
		}
		for ; t+2 <= n; t += 2 {
			dotQ5KAVX2x2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < n; t++ {
		out[t] = dotQ5KRow(row, y[t*nb:(t+1)*nb])
	}
}

// pairsQ6K reports whether acts.prepare lays out acts.q6P, the activations by
// pairs of tokens, for a product of rows tokens by weights of type wt: for Q6_K's
// AVX-512 kernel of 16 tokens, dotQ6KAVX512x16p.
func pairsQ6K(wt Type, rows int) bool {
	return wt == Q6_K && useAVX512 && rows >= 16
}

// dotQ6KRowsPairs is dotQ6KRows for tokens t0, t0+1, … of a (which has q6P):
// 16 tokens at a time from an even one through dotQ6KAVX512x16p, the last
// 12-15 through it again from an even token (rewriting outputs with the same
// bits), the others through dotQ6KRows. Every token gets dotQ6KRow's bits.
func dotQ6KRowsPairs(out []float32, row []byte, a *acts, t0, nb int) {
	t, n := 0, len(out)
	if t0%2 == 0 && nb > 0 && n >= 16 {
		ps := nb * q6KPairBytes
		_, _ = row[nb*210-1], a.q6P[(t0+n)/2*ps-1]
		for ; t+16 <= n; t += 16 {
			dotQ6KAVX512x16p(&row[0], &a.q6P[(t0+t)/2*ps], nb, ps, &out[t])
		}
		if n-t >= 12 {
			t = (n - 16) &^ 1
			dotQ6KAVX512x16p(&row[0], &a.q6P[(t0+t)/2*ps], nb, ps, &out[t])
			t += 16
		}
	}
	if t < n {
		dotQ6KRows(out[t:], row, a.q8k[(t0+t)*nb:], nb)
	}
}

// dotQ6KRows is dotQ4KRows for Q6_K weights, with the AVX2 kernels of 8, 4 and
// 2 tokens and the same reuse of the 8- and 4-token kernels over the last tokens.
// With AVX-512 the kernels of 16 and 8 tokens (dotQ6KAVX512x16, x8) come first,
// x9 for exactly 9 tokens left, and the 4-token one is dotQ6KAVX512x4: Q6_K's tiles lack llama.cpp's 8-lane
// order (issue 32); these keep it, and every kernel here gives each token
// dotQ6KRowGeneric's bits, so they mix freely.
func dotQ6KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n > 1 {
		_, _ = row[nb*210-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		if useAVX512 {
			for ; t+16 <= n; t += 16 {
				dotQ6KAVX512x16(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
			}
			if n >= 16 && n-t >= 12 {
				dotQ6KAVX512x16(&row[0], (*byte)(unsafe.Pointer(&y[(n-16)*nb])), nb, stride, &out[n-16])
				t = n
			}
			if n-t == 9 {
				// A k = 8 verification step's 9 positions in one pass over the
				// row: 0.93× the CPU of x8 and a one-token pass
				// (BenchmarkQ6KNineTokens, Zen4, load 26, 4 pairs).
				dotQ6KAVX512x9(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
				t = n
			}
			for ; t+8 <= n; t += 8 {
				dotQ6KAVX512x8(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
			}
			if n >= 8 && n-t >= 6 {
				dotQ6KAVX512x8(&row[0], (*byte)(unsafe.Pointer(&y[(n-8)*nb])), nb, stride, &out[n-8])
				t = n
			}
		}
		for ; t+8 <= n; t += 8 {
			dotQ6KAVX2x8(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		if n >= 8 && n-t >= 6 {
			dotQ6KAVX2x8(&row[0], (*byte)(unsafe.Pointer(&y[(n-8)*nb])), nb, stride, &out[n-8])
			t = n
		}
		for ; t+4 <= n; t += 4 {
			q6KTokens4(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		if n >= 4 && n-t == 3 {
			q6KTokens4(&row[0], (*byte)(unsafe.Pointer(&y[(n-4)*nb])), nb, stride, &out[n-4])
			t = n
		}
		for ; t+2 <= n; t += 2 {
			dotQ6KAVX2x2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < n; t++ {
		out[t] = dotQ6KRow(row, y[t*nb:(t+1)*nb])
	}
}

// q6KTokens4 is the Q6_K kernel of 4 tokens: AVX-512 (dotQ6KAVX512x4) or AVX2,
// the bits of the one-token kernels either way. Called directly, not through a
// func value, which would make the callers' stack buffers escape.
func q6KTokens4(x, y *byte, n, stride int, out *float32) {
	if useAVX512 {
		dotQ6KAVX512x4(x, y, n, stride, out)
	} else {
		dotQ6KAVX2x4(x, y, n, stride, out)
	}
}

// dotQ8_0Rows is dotQ4KRows for Q8_0 weights (dot0Rows).
func dotQ8_0Rows(out []float32, row []byte, y []q8Block, nb int) {
	dot0Rows(Q8_0, out, row, y, nb)
}

func dotQ6KRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ6KRowGeneric(row, y)
	}
	_ = row[n*210-1]
	if useAVX512 {
		return dotQ6KAVX512(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
	}
	return dotQ6KAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// The Q8_0 and Q4_0 kernels have the reference's numerics (an exact integer sum
// and a scale per block); with AVX-512, MatMul takes the outer-product tiles of
// tile_amd64.go for groups of 16 rows.

func dotQ8_0Row(row []byte, y []q8Block) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ8_0RowGeneric(row, y)
	}
	_ = row[n*34-1]
	return dotQ8_0AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

func dotQ4_0Row(row []byte, y []q8Block) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ4_0RowGeneric(row, y)
	}
	_ = row[n*18-1]
	return dotQ4_0AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// The float kernels take whole groups of 8 elements; the last len(x)%8 are
// added afterwards in Go, in element order.

func dotF32Row(row []byte, x []float32) float32 {
	n := len(x) &^ 7
	if n == 0 || !useAVX2 {
		return dotF32RowGeneric(row, x)
	}
	_ = row[4*len(x)-1]
	s := dotF32AVX2(&row[0], &x[0], n) // AVX-512 gains nothing: load bound
	return addF32Tail(s, row, x, n)
}

// addF32Tail is s plus row[i]·x[i] for i from n to len(x), in element order
// (unfused): dotF32Row's last len(x)%8 elements, which the multi-token F32
// kernels' callers add the same way.
func addF32Tail(s float32, row []byte, x []float32, n int) float32 {
	for i := n; i < len(x); i++ {
		s += math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:])) * x[i]
	}
	return s
}

func dotF16Row(row []byte, x []float32) float32 {
	n := len(x) &^ 7
	if n == 0 || !useAVX2 {
		return dotF16RowGeneric(row, x)
	}
	_ = row[2*len(x)-1]
	var s float32
	if useAVX512 {
		s = dotF16AVX512(&row[0], &x[0], n)
	} else {
		s = dotF16AVX2(&row[0], &x[0], n)
	}
	for i := n; i < len(x); i++ {
		s += f16Table[le16(row[2*i:])] * x[i]
	}
	return s
}

func dotBF16Row(row []byte, x []float32) float32 {
	n := len(x) &^ 7
	if n == 0 || !useAVX2 {
		return dotBF16RowGeneric(row, x)
	}
	_ = row[2*len(x)-1]
	var s float32
	if useAVX512 {
		s = dotBF16AVX512(&row[0], &x[0], n)
	} else {
		s = dotBF16AVX2(&row[0], &x[0], n)
	}
	for i := n; i < len(x); i++ {
		s += BF16ToF32(le16(row[2*i:])) * x[i]
	}
	return s
}

// simdLevels names the kernel paths this CPU can run, for the tests and
// benchmarks; setSIMD selects one and returns a function restoring the default.
func simdLevels() []string {
	l := []string{"generic"}
	if useAVX2 {
		l = append(l, "avx2")
	}
	if useAVX512 {
		l = append(l, "avx512")
	}
	if useVNNI16 {
		l = append(l, "avx512vbmi")
	}
	return l
}

// setSIMD's "avx512" is AVX-512 without VBMI (Q4_K's tokens through the
// VPMADDUBSW kernels), "avx512vbmi" with it (the VPDPBUSD kernels on permuted
// quants).
func setSIMD(level string) (restore func()) {
	a, b, c, d := useAVX2, useAVX512, useVNNI16, useBF16DP
	useAVX2 = level == "avx2" || level == "avx512" || level == "avx512vbmi"
	useAVX512 = level == "avx512" || level == "avx512vbmi"
	useVNNI16 = level == "avx512vbmi" && c
	useBF16DP = useAVX512 && cpu.X86.HasAVX512BF16 && d
	return func() { useAVX2, useAVX512, useVNNI16, useBF16DP = a, b, c, d }
}

func simdAvailable() bool { return useAVX2 }

// dotQ5_0Row and dotIQ4NLRow: AVX2 (with AVX-512, MatMul takes their 16-row
// decoding tiles and, for prompts, repacks both into Q8_0); the reference's bits.
func dotQ5_0Row(row []byte, y []q8Block) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ5_0RowGeneric(row, y)
	}
	_ = row[n*22-1]
	return dotQ5_0AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

func dotIQ4NLRow(row []byte, y []q8Block) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotIQ4NLRowGeneric(row, y)
	}
	_ = row[n*18-1]
	return dotIQ4_NLAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotIQ4XSRow: AVX2 (prompts: the 16-row tiles of tile_amd64.go); the
// reference's bits.
func dotIQ4XSRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotIQ4XSRowGeneric(row, y)
	}
	_ = row[n*136-1]
	return dotIQ4XSAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotQ4_1Row: AVX2 (with AVX-512 too); the reference's bits, llama.cpp's order.
func dotQ4_1Row(row []byte, y []q8_1Block) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ4_1RowGeneric(row, y)
	}
	_ = row[n*20-1]
	return dotQ4_1AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotQ2KRow: AVX2 (prompts: the 16-row tiles of tile_amd64.go); the reference's
// bits.
func dotQ2KRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ2KRowGeneric(row, y)
	}
	_ = row[n*84-1]
	return dotQ2KAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotF32VecDot is dotF32VecDotGeneric through dotF32VecDotAVX2 (with AVX-512
// too: the same bits).
func dotF32VecDot(row []byte, x []float32) float32 {
	if !useAVX2 || len(x) == 0 {
		return dotF32VecDotGeneric(row, x)
	}
	_ = row[4*len(x)-1]
	return dotF32VecDotAVX2(&row[0], &x[0], len(x))
}

// dotQ3KRows is dotQ6KRows for Q3_K weights: with AVX-512, 8 and 4 tokens at a
// time through dotQ3KAVX512x8 and x4 (6-7 tokens left as the last 8 again);
// with AVX2, 4 tokens through dotQ3KAVX2x4; 3 tokens left as the last 4 again,
// 2 through dotQ3KAVX2x2, one through dotQ3KRow. Each token gets the one-token
// kernel's bits, llama.cpp's.
func dotQ3KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n > 1 {
		_, _ = row[nb*110-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		if useAVX512 {
			for ; t+8 <= n; t += 8 {
				dotQ3KAVX512x8(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
			}
			if n >= 8 && n-t >= 6 {
				dotQ3KAVX512x8(&row[0], (*byte)(unsafe.Pointer(&y[(n-8)*nb])), nb, stride, &out[n-8])
				t = n
			}
		}
		for ; t+4 <= n; t += 4 {
			dotQ3KTokens4(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		if n >= 4 && n-t == 3 {
			dotQ3KTokens4(&row[0], (*byte)(unsafe.Pointer(&y[(n-4)*nb])), nb, stride, &out[n-4])
			t = n
		}
		for ; t+2 <= n; t += 2 {
			dotQ3KAVX2x2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < n; t++ {
		out[t] = dotQ3KRow(row, y[t*nb:(t+1)*nb])
	}
}

// dotQ3KTokens4 is dotQ3KAVX512x4 or, without AVX-512, dotQ3KAVX2x4 (called
// directly, not through a func value, through which out would escape).
func dotQ3KTokens4(x, y *byte, nb, stride int, out *float32) {
	if useAVX512 {
		dotQ3KAVX512x4(x, y, nb, stride, out)
		return
	}
	dotQ3KAVX2x4(x, y, nb, stride, out)
}

// dotQ3KRow: AVX2 only (with AVX-512 too); the reference's bits, llama.cpp's.
func dotQ3KRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ3KRowGeneric(row, y)
	}
	_ = row[n*110-1]
	return dotQ3KAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotQ5_1Row: AVX2 only; the reference's bits.
func dotQ5_1Row(row []byte, y []q8_1Block) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotQ5_1RowGeneric(row, y)
	}
	_ = row[n*24-1]
	return dotQ5_1AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// dotTQ2_0Row and dotTQ1_0Row: AVX2 only; the reference's bits.
func dotTQ2_0Row(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotTQ2_0Block, 66, row, y)
	}
	_ = row[n*66-1]
	return dotTQ2_0AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

func dotTQ1_0Row(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotTQ1_0Block, 54, row, y)
	}
	_ = row[n*54-1]
	return dotTQ1_0AVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n)
}

// The lattice types' row kernels: AVX2 only, the grid passed in. IQ2_XXS,
// IQ2_XS, IQ2_S and IQ3_XXS have the block reference's bits, IQ3_S and IQ1_S
// those of dotIQ3SRowGeneric and dotIQ1SRowGeneric (ggml's float order).
func dotIQ2XXSRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotIQ2XXSBlock, 66, row, y)
	}
	_ = row[n*66-1]
	if v, ok := latticeDecRow(IQ2_XXS, row, y); ok {
		return v
	}
	return dotIQ2XXSAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
}

func dotIQ2XSRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotIQ2XSBlock, 74, row, y)
	}
	_ = row[n*74-1]
	if v, ok := latticeDecRow(IQ2_XS, row, y); ok {
		return v
	}
	return dotIQ2XSAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
}

func dotIQ2SRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotIQ2SBlock, 82, row, y)
	}
	_ = row[n*82-1]
	if v, ok := latticeDecRow(IQ2_S, row, y); ok {
		return v
	}
	return dotIQ2SAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq2sGrid[0])))
}

func dotIQ3XXSRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotIQ3XXSBlock, 98, row, y)
	}
	_ = row[n*98-1]
	return dotIQ3XXSAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq3xxsGrid[0])))
}

func dotIQ3SRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotIQ3SRowGeneric(row, y)
	}
	_ = row[n*110-1]
	return dotIQ3SAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq3sGrid[0])))
}

func dotIQ1SRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotIQ1SRowGeneric(row, y)
	}
	_ = row[n*50-1]
	return dotIQ1SAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq1sGrid[0])))
}

func dotIQ1MRow(row []byte, y []q8KBlock) float32 {
	n := len(y)
	if n == 0 || !useAVX2 {
		return dotKRowGeneric(dotIQ1MBlock, 56, row, y)
	}
	_ = row[n*56-1]
	if v, ok := latticeDecRow(IQ1_M, row, y); ok {
		return v
	}
	return dotIQ1MAVX2(&row[0], (*byte)(unsafe.Pointer(&y[0])), n, (*byte)(unsafe.Pointer(&iq1mWGrid[0])))
}

// dotTQ1_0Rows sets out[t] = dotTQ1_0Row(row, y[t*nb:(t+1)*nb]) for each t <
// len(out), two tokens at a time through dotTQ1_0AVX2x2 (each block's trits
// found once for both): the same bits.
func dotTQ1_0Rows(out []float32, row []byte, y []q8KBlock, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n > 1 {
		_, _ = row[nb*54-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		for ; t+2 <= n; t += 2 {
			dotTQ1_0AVX2x2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < n; t++ {
		out[t] = dotTQ1_0Row(row, y[t*nb:(t+1)*nb])
	}
}

// dotIQ3SRows sets out[t] = dotIQ3SRow(row, y[t*nb:(t+1)*nb]) for each t <
// len(out), through dotLatticeRows' kernels: the same bits.
func dotIQ3SRows(out []float32, row []byte, y []q8KBlock, nb int) {
	dotLatticeRows(IQ3_S, out, row, y, nb)
}

// dotLatticeRows sets out[t] = the row dot of typ (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) of row and y[t*nb:(t+1)*nb] for each t <
// len(out): with AVX-512, eight tokens at a time through the type's …AVX512x8
// kernel (all but IQ1_S and IQ1_M; BMI2 too; 6-7 left: the last eight again); IQ1_M eight at a time
// through dotIQ1MAVX2x8 (any level); then four tokens at a time
// through the type's …x4 kernel, then two through its …x2, each group's grid
// entries, signs and scales decoded once for the tokens: the same bits. Three
// tokens left after the fours go through the 4-token kernel again over the last
// four (the same bits, computed twice). The
// kernels are called directly (not through a function value) so that out does
// not escape.
func dotLatticeRows(typ Type, out []float32, row []byte, y []q8KBlock, nb int) {
	bb := typ.BlockBytes()
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n > 1 {
		_, _ = row[nb*bb-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		x := &row[0]
		if useAVX512 && cpu.X86.HasBMI2 && typ != IQ1_M && typ != IQ1_S {
			for ; t+8 <= n; t += 8 {
				latticeAVX512x8(typ, x, (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
			}
			if n >= 8 && n-t >= 6 {
				latticeAVX512x8(typ, x, (*byte)(unsafe.Pointer(&y[(n-8)*nb])), nb, stride, &out[n-8])
				t = n
			}
		}
		if typ == IQ1_M {
			for ; t+8 <= n; t += 8 {
				dotIQ1MAVX2x8(x, (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t], (*byte)(unsafe.Pointer(&iq1mWGrid[0])))
			}
		}
		for ; t+4 <= n; t += 4 {
			latticeAVX2x4(typ, x, (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		if n >= 4 && n-t == 3 {
			latticeAVX2x4(typ, x, (*byte)(unsafe.Pointer(&y[(n-4)*nb])), nb, stride, &out[n-4])
			t = n
		}
		for ; t+2 <= n; t += 2 {
			latticeAVX2x2(typ, x, (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < n; t++ {
		yt := y[t*nb : (t+1)*nb]
		switch typ {
		case IQ2_XXS:
			out[t] = dotIQ2XXSRow(row, yt)
		case IQ2_XS:
			out[t] = dotIQ2XSRow(row, yt)
		case IQ2_S:
			out[t] = dotIQ2SRow(row, yt)
		case IQ3_XXS:
			out[t] = dotIQ3XXSRow(row, yt)
		case IQ3_S:
			out[t] = dotIQ3SRow(row, yt)
		case IQ1_S:
			out[t] = dotIQ1SRow(row, yt)
		case IQ1_M:
			out[t] = dotIQ1MRow(row, yt)
		}
	}
}

// latticeAVX512x8 calls typ's eight-token AVX-512 kernel (not IQ1_S or IQ1_M).
func latticeAVX512x8(typ Type, x, y *byte, nb, stride int, o *float32) {
	switch typ {
	case IQ2_XXS:
		dotIQ2XXSAVX512x8(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
	case IQ2_XS:
		dotIQ2XSAVX512x8(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
	case IQ2_S:
		dotIQ2SAVX512x8(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2sGrid[0])))
	case IQ3_XXS:
		dotIQ3XXSAVX512x8(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq3xxsGrid[0])))
	case IQ3_S:
		dotIQ3SAVX512x8(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq3sGrid[0])))
	}
}

// latticeAVX2x4 calls typ's four-token kernel.
func latticeAVX2x4(typ Type, x, y *byte, nb, stride int, o *float32) {
	switch typ {
	case IQ2_XXS:
		dotIQ2XXSAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
	case IQ2_XS:
		dotIQ2XSAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
	case IQ2_S:
		dotIQ2SAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2sGrid[0])))
	case IQ3_XXS:
		dotIQ3XXSAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq3xxsGrid[0])))
	case IQ3_S:
		dotIQ3SAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq3sGrid[0])))
	case IQ1_S:
		dotIQ1SAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq1sGrid[0])))
	case IQ1_M:
		dotIQ1MAVX2x4(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq1mWGrid[0])))
	}
}

// latticeAVX2x2 calls typ's two-token kernel.
func latticeAVX2x2(typ Type, x, y *byte, nb, stride int, o *float32) {
	switch typ {
	case IQ2_XXS:
		dotIQ2XXSAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
	case IQ2_XS:
		dotIQ2XSAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
	case IQ2_S:
		dotIQ2SAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq2sGrid[0])))
	case IQ3_XXS:
		dotIQ3XXSAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq3xxsGrid[0])))
	case IQ3_S:
		dotIQ3SAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq3sGrid[0])))
	case IQ1_S:
		dotIQ1SAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq1sGrid[0])))
	case IQ1_M:
		dotIQ1MAVX2x2(x, y, nb, stride, o, (*byte)(unsafe.Pointer(&iq1mWGrid[0])))
	}
}

// dotQ4_1Rows sets out[t] = dotQ4_1Row(row, y[t*nb:(t+1)*nb]) for each t <
// len(out): four tokens at a time (then two) through dotQ4_1AVX2t4 (t2), each
// block's quants unpacked once for the tokens: the same bits.
func dotQ4_1Rows(out []float32, row []byte, y []q8_1Block, nb int) {
	t := 0
	if useAVX2 && nb > 0 && len(out) > 1 {
		_, _ = row[nb*20-1], y[len(out)*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		for ; t+4 <= len(out); t += 4 {
			dotQ4_1AVX2t4(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		for ; t+2 <= len(out); t += 2 {
			dotQ4_1AVX2t2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < len(out); t++ {
		out[t] = dotQ4_1Row(row, y[t*nb:(t+1)*nb])
	}
}

// dotQ5_1Rows is dotQ4_1Rows for Q5_1 (dotQ5_1AVX2t4, t2).
func dotQ5_1Rows(out []float32, row []byte, y []q8_1Block, nb int) {
	t := 0
	if useAVX2 && nb > 0 && len(out) > 1 {
		_, _ = row[nb*24-1], y[len(out)*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		for ; t+4 <= len(out); t += 4 {
			dotQ5_1AVX2t4(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
		for ; t+2 <= len(out); t += 2 {
			dotQ5_1AVX2t2(&row[0], (*byte)(unsafe.Pointer(&y[t*nb])), nb, stride, &out[t])
		}
	}
	for ; t < len(out); t++ {
		out[t] = dotQ5_1Row(row, y[t*nb:(t+1)*nb])
	}
}
