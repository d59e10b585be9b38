package kernels

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

func randRow(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

func TestHalfConversions(t *testing.T) {
	for _, c := range []struct {
		f    float32
		f16  uint16
		bf16 uint16
	}{
		{0, 0, 0},
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{0.5, 0x3800, 0x3f00},
		{65504, 0x7bff, 0x4780},
		{1.0 / 3, 0x3555, 0x3eab},
	} {
		if got := F32ToF16(c.f); got != c.f16 {
			t.Errorf("F32ToF16(%v) = %#x, want %#x", c.f, got, c.f16)
		}
		if got := F32ToBF16(c.f); got != c.bf16 {
			t.Errorf("F32ToBF16(%v) = %#x, want %#x", c.f, got, c.bf16)
		}
	}
	if F16ToF32(0x3c00) != 1 || BF16ToF32(0x3f80) != 1 {
		t.Error("half to float32 of 1")
	}
	if nan := F32ToBF16(float32(math.NaN())); BF16ToF32(nan) == BF16ToF32(nan) {
		t.Error("bf16 NaN lost")
	}
}

// TestDequantKnownBlocks builds blocks byte by byte from the ggml layouts and checks
// every decoded element.
func TestDequantKnownBlocks(t *testing.T) {
	t.Run("Q8_0", func(t *testing.T) {
		blk := make([]byte, 34)
		put16(blk, 0x3800) // 0.5
		for j := 0; j < 32; j++ {
			blk[2+j] = byte(int8(j - 16))
		}
		y := make([]float32, 32)
		DequantizeRow(y, Q8_0, blk)
		for j, v := range y {
			if want := 0.5 * float32(j-16); v != want {
				t.Fatalf("y[%d] = %v, want %v", j, v, want)
			}
		}
	})
	t.Run("Q4_0", func(t *testing.T) {
		blk := make([]byte, 18)
		put16(blk, 0x4000) // 2
		for j := 0; j < 16; j++ {
			blk[2+j] = byte(j) | byte(15-j)<<4
		}
		y := make([]float32, 32)
		DequantizeRow(y, Q4_0, blk)
		for j := 0; j < 16; j++ {
			if y[j] != 2*float32(j-8) || y[j+16] != 2*float32(7-j) {
				t.Fatalf("element %d: %v %v", j, y[j], y[j+16])
			}
		}
	})
	t.Run("Q4_K", func(t *testing.T) {
		blk := make([]byte, 144)
		put16(blk, 0x3c00)     // d 1
		put16(blk[2:], 0x3800) // dmin 0.5
		sc := [8]uint8{1, 2, 3, 4, 41, 52, 63, 17}
		mn := [8]uint8{5, 6, 7, 8, 60, 33, 9, 48}
		s := blk[4:16]
		for j := 0; j < 4; j++ {
			s[j] = sc[j] | (sc[j+4]>>4)<<6
			s[j+4] = mn[j] | (mn[j+4]>>4)<<6
			s[j+8] = sc[j+4]&15 | (mn[j+4]&15)<<4
		}
		q := func(e int) uint8 { return uint8((e * 7) % 16) }
		for e := 0; e < 256; e++ {
			c, r := e/64, e%64
			if r < 32 {
				blk[16+32*c+r] |= q(e)
			} else {
				blk[16+32*c+r-32] |= q(e) << 4
			}
		}
		y := make([]float32, 256)
		DequantizeRow(y, Q4_K, blk)
		for e, v := range y {
			j := e / 32
			if want := float32(sc[j])*float32(q(e)) - 0.5*float32(mn[j]); v != want {
				t.Fatalf("y[%d] = %v, want %v", e, v, want)
			}
		}
	})
	t.Run("Q6_K", func(t *testing.T) {
		blk := make([]byte, 210)
		put16(blk[208:], 0x3400) // d 0.25
		for j := 0; j < 16; j++ {
			blk[192+j] = byte(int8(j - 8))
		}
		q := func(e int) int { return (e * 5) % 64 }
		for e := 0; e < 256; e++ {
			h, r := e/128, e%128
			k, l := r/32, r%32
			lo := byte(q(e) & 15)
			if k >= 2 {
				lo <<= 4
			}
			blk[64*h+l+32*(k&1)] |= lo
			blk[128+32*h+l] |= byte(q(e)>>4) << (2 * k)
		}
		y := make([]float32, 256)
		DequantizeRow(y, Q6_K, blk)
		for e, v := range y {
			if want := 0.25 * float32(e/16-8) * float32(q(e)-32); v != want {
				t.Fatalf("y[%d] = %v, want %v", e, v, want)
			}
		}
	})
}

// TestQuantizeRoundTrip bounds the relative RMS error of each quantizer on Gaussian
// rows, and checks that quantizing is deterministic and that a zero row stays zero.
func TestQuantizeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		typ    Type
		maxRel float64
	}{
		{F32, 0}, {F16, 1e-3}, {BF16, 8e-3}, {Q8_0, 0.01}, {Q6_K, 0.03}, {Q4_0, 0.12}, {Q4_K, 0.1},
		{Q4_1, 0.12}, {Q5_0, 0.06}, {Q5_1, 0.06}, {IQ4_NL, 0.1}, {Q2_K, 0.4}, {Q3_K, 0.2}, {Q5_K, 0.05},
		{IQ4_XS, 0.1}, {TQ1_0, 0.9}, {TQ2_0, 0.9}, // ternary: only ±max|x| and 0 (TestTernaryExact)
	} {
		t.Run(c.typ.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			const n = 1024
			x := randRow(r, n, 0.7)
			x[3] = 4 // an outlier
			enc := make([]byte, c.typ.RowBytes(n))
			QuantizeRow(enc, c.typ, x)
			enc2 := make([]byte, len(enc))
			QuantizeRow(enc2, c.typ, x)
			if string(enc) != string(enc2) {
				t.Fatal("quantizer not deterministic")
			}
			y := make([]float32, n)
			DequantizeRow(y, c.typ, enc)
			var se, sx float64
			for i := range x {
				d := float64(y[i] - x[i])
				se += d * d
				sx += float64(x[i]) * float64(x[i])
			}
			rel := math.Sqrt(se / sx)
			t.Logf("%v relative RMS error %.4f", c.typ, rel)
			if rel > c.maxRel {
				t.Errorf("relative RMS error %.4f > %v", rel, c.maxRel)
			}
			zero := make([]float32, n)
			QuantizeRow(enc, c.typ, zero)
			DequantizeRow(y, c.typ, enc)
			for i, v := range y {
				if v != 0 {
					t.Fatalf("zero row decodes to %v at %d", v, i)
				}
			}
		})
	}
}

var weightTypes = append(append([]Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K}, refTypes...), latticeTypes...)

// TestMatMul compares MatMul with a float64 product of the dequantized weights, and
// checks that every output is bit-identical whatever the batch and thread count.
func TestMatMul(t *testing.T) {
	tol := map[Type]float64{F32: 1e-5, F16: 2e-3, BF16: 1e-2}
	for _, typ := range weightTypes {
		if typ.BlockSize() > 1 {
			tol[typ] = 2e-2 // the activations' 8-bit quantization
		}
	}
	for _, typ := range weightTypes {
		t.Run(typ.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(typ)))
			const rows, cols, nTok = 37, 512, 5
			w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
			for i := 0; i < rows; i++ {
				fillRow(r, typ, w.Row(i), 0.1)
			}
			if err := w.Check(); err != nil {
				t.Fatal(err)
			}
			x := randRow(r, nTok*cols, 1)
			dst := make([]float32, nTok*rows)
			MatMul(dst, w, x, nTok)
			wf := make([]float32, cols)
			for i := 0; i < rows; i++ {
				DequantizeRow(wf, typ, w.Row(i))
				for tk := 0; tk < nTok; tk++ {
					var want, norm float64
					for k := range wf {
						p := float64(wf[k]) * float64(x[tk*cols+k])
						want += p
						norm += math.Abs(p)
					}
					if d := math.Abs(float64(dst[tk*rows+i]) - want); d > tol[typ]*norm {
						t.Fatalf("row %d token %d: %v, want %v (|diff| %g > %g)", i, tk, dst[tk*rows+i], want, d, tol[typ]*norm)
					}
				}
			}
			// One token at a time, on one thread, must give the same bits.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			for tk := 0; tk < nTok; tk++ {
				one := make([]float32, rows)
				MatMul(one, w, x[tk*cols:(tk+1)*cols], 1)
				for i := range one {
					if math.Float32bits(one[i]) != math.Float32bits(dst[tk*rows+i]) {
						t.Fatalf("token %d row %d: alone %v, in batch %v", tk, i, one[i], dst[tk*rows+i])
					}
				}
			}
		})
	}
}

// TestMatMulParallelSplit checks a matrix big enough to be split over goroutines
// against the same product computed a row at a time.
func TestMatMulParallelSplit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols, nTok = 301, 256, 3
	w := Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: make([]byte, rows*Q4_K.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		QuantizeRow(w.Row(i), Q4_K, randRow(r, cols, 0.1))
	}
	x := randRow(r, nTok*cols, 1)
	dst := make([]float32, nTok*rows)
	MatMul(dst, w, x, nTok)
	for i := 0; i < rows; i++ {
		one := make([]float32, nTok)
		sub := Matrix{Type: Q4_K, Rows: 1, Cols: cols, Data: w.Row(i)}
		MatMul(one, sub, x, nTok)
		for tk := range one {
			if math.Float32bits(one[tk]) != math.Float32bits(dst[tk*rows+i]) {
				t.Fatalf("row %d token %d differs", i, tk)
			}
		}
	}
}

func TestOps(t *testing.T) {
	x := []float32{1, -2, 3, -4}
	y := make([]float32, 4)
	RMSNorm(y, x, []float32{1, 1, 2, 2}, 0)
	rms := math.Sqrt((1 + 4 + 9 + 16) / 4.0)
	for i, want := range []float64{1 / rms, -2 / rms, 6 / rms, -8 / rms} {
		if math.Abs(float64(y[i])-want) > 1e-6 {
			t.Errorf("RMSNorm[%d] = %v, want %v", i, y[i], want)
		}
	}
	s := []float32{1, 2, 3}
	Softmax(s)
	e := []float64{math.Exp(-2), math.Exp(-1), 1}
	z := e[0] + e[1] + e[2]
	for i := range s {
		if math.Abs(float64(s[i])-e[i]/z) > 1e-6 {
			t.Errorf("Softmax[%d] = %v", i, s[i])
		}
	}
	// RoPE at position 0 is the identity; at position p it rotates pair 0 by p rad.
	cos, sin := make([]float32, 2), make([]float32, 2)
	for _, neox := range []bool{false, true} {
		RoPECache(cos, sin, 0, 4, 10000, 1, nil)
		v := []float32{1, 2, 3, 4}
		RoPE(v, 1, 4, 4, cos, sin, neox)
		if v[0] != 1 || v[1] != 2 || v[2] != 3 || v[3] != 4 {
			t.Errorf("RoPE at 0 (neox %v): %v", neox, v)
		}
		RoPECache(cos, sin, 3, 4, 10000, 1, nil)
		v = []float32{1, 0, 0, 0}
		RoPE(v, 1, 4, 4, cos, sin, neox)
		a, b := 0, 1
		if neox {
			a, b = 0, 2
		}
		if math.Abs(float64(v[a])-math.Cos(3)) > 1e-6 || math.Abs(float64(v[b])-math.Sin(3)) > 1e-6 {
			t.Errorf("RoPE at 3 (neox %v): %v", neox, v)
		}
	}
	g := []float32{0, 2}
	SwiGLU(g, g, []float32{5, 3})
	if g[0] != 0 || math.Abs(float64(g[1])-3*2/(1+math.Exp(-2))) > 1e-6 {
		t.Errorf("SwiGLU: %v", g)
	}
}

func TestAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const hd, n, stride = 16, 9, 32
	k, v := make([]uint16, n*stride), make([]uint16, n*stride)
	for i := range k {
		k[i] = F32ToF16(float32(r.NormFloat64()))
		v[i] = F32ToF16(float32(r.NormFloat64()))
	}
	q := randRow(r, hd, 1)
	out := make([]float32, hd)
	Attend(out, q, k, v, n, stride, 0.25)
	p := make([]float64, n)
	var z float64
	for j := range p {
		var s float64
		for i := 0; i < hd; i++ {
			s += float64(q[i]) * float64(F16ToF32(k[j*stride+i]))
		}
		p[j] = math.Exp(0.25 * s)
		z += p[j]
	}
	for i := 0; i < hd; i++ {
		var want float64
		for j := range p {
			want += p[j] / z * float64(F16ToF32(v[j*stride+i]))
		}
		if math.Abs(float64(out[i])-want) > 5e-3 {
			t.Errorf("out[%d] = %v, want %v", i, out[i], want)
		}
	}
}

// TestMatMulGuards runs odd shapes with guard values around the output and an
// activation slice that does not start at the beginning of its array.
func TestMatMulGuards(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, typ := range weightTypes {
		for _, shape := range [][3]int{{1, 256, 1}, {3, 256, 2}, {7, 512, 3}, {33, 768, 1}} {
			rows, cols, nTok := shape[0], shape[1], shape[2]
			w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
			for i := 0; i < rows; i++ {
				fillRow(r, typ, w.Row(i), 0.1)
			}
			backing := randRow(r, nTok*cols+5, 1)
			x := backing[5:]
			const guard = float32(-12345)
			buf := make([]float32, nTok*rows+8)
			for i := range buf {
				buf[i] = guard
			}
			dst := buf[4 : 4+nTok*rows]
			MatMul(dst, w, x, nTok)
			for i := range buf {
				inside := i >= 4 && i < 4+nTok*rows
				if inside == (buf[i] == guard) {
					t.Fatalf("%v %v: element %d = %v (inside %v)", typ, shape, i, buf[i], inside)
				}
			}
		}
	}
}

func TestRoPECacheScaling(t *testing.T) {
	cos, sin := make([]float32, 4), make([]float32, 4)
	// Pair i turns by pos·base^(-2i/8)·scale/factor[i].
	RoPECache(cos, sin, 5, 8, 100, 0.5, []float32{1, 2, 4, 8})
	for i := 0; i < 4; i++ {
		theta := 5 * math.Pow(100, -2*float64(i)/8) * 0.5 / math.Pow(2, float64(i))
		if math.Abs(float64(cos[i])-math.Cos(theta)) > 1e-6 || math.Abs(float64(sin[i])-math.Sin(theta)) > 1e-6 {
			t.Errorf("pair %d: cos %v sin %v, want angle %v", i, cos[i], sin[i], theta)
		}
	}
}
