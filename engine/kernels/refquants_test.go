package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refTypes are the weight types that run on the pure-Go reference only and have a
// quantizer of ours; latticeTypes those without one.
var (
	refTypes     = []Type{Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS, TQ1_0, TQ2_0}
	latticeTypes = []Type{IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M}
)

// fillRow fills an encoded row of typ: Gaussian weights of the given scale
// quantized, or for the lattice types random blocks (randomBlocks).
func fillRow(r *rand.Rand, typ Type, row []byte, scale float64) {
	if CanQuantize(typ) {
		QuantizeRow(row, typ, randRow(r, len(row)/typ.BlockBytes()*typ.BlockSize(), scale))
		return
	}
	copy(row, randomBlocks(r, typ, len(row)/typ.BlockBytes()))
}

// actFloats returns activation row t of a as the floats its quantized blocks
// stand for (d·q): what the weights are really multiplied with.
func actFloats(a *acts, t int) []float32 {
	x := make([]float32, 0, a.cols)
	switch a.typ {
	case Q8_0:
		nb := a.cols / qk0
		for _, b := range a.q8[t*nb : (t+1)*nb] {
			for _, q := range b.qs {
				x = append(x, b.d*float32(q))
			}
		}
	case Q8_1:
		nb := a.cols / qk0
		for _, b := range a.q81[t*nb : (t+1)*nb] {
			for _, q := range b.qs {
				x = append(x, b.d*float32(q))
			}
		}
	case Q8_K:
		nb := a.cols / qkK
		for _, b := range a.q8k[t*nb : (t+1)*nb] {
			for _, q := range b.qs {
				x = append(x, b.d*float32(q))
			}
		}
	}
	return x
}

// dotError returns |dot - Σ w·x| / Σ|w·x| in float64 for a weight row (as
// DequantizeRow decodes it) and activations x.
func dotError(t *testing.T, typ Type, row []byte, x []float32, dot float32) float64 {
	t.Helper()
	w := make([]float32, len(x))
	DequantizeRow(w, typ, row)
	var want, norm float64
	for i := range w {
		p := float64(w[i]) * float64(x[i])
		want += p
		norm += math.Abs(p)
	}
	return math.Abs(float64(dot)-want) / norm
}

// TestRefDotMatchesDequantize checks each reference-only type's dot product (its
// integer sums against the activation format llama.cpp uses for it) against the
// float64 product of the dequantized weights with the dequantized activations: the
// two differ only by float rounding (and, for Q4_1/Q5_1, the f16 rounding of Q8_1's
// block sum s). The test proves it would catch a misaddressed block: the same check
// on the row with its blocks rotated by one (block b meets activation block b+1),
// or with a block's bytes zeroed (skipped), fails by far.
func TestRefDotMatchesDequantize(t *testing.T) {
	for _, typ := range append(refTypes, latticeTypes...) {
		t.Run(typ.String(), func(t *testing.T) {
			tol := 1e-6 // measured: 1e-8 (Q8_0, Q8_K activations)
			if VecDotType(typ) == Q8_1 {
				tol = 2e-4 // measured: up to 6e-5 (Q8_1's block sum s is rounded to f16)
			}
			r := rand.New(rand.NewPCG(21, uint64(typ)))
			const cols = 1024
			bb := typ.BlockBytes()
			row := make([]byte, typ.RowBytes(cols))
			w := randRow(r, cols, 0.1)
			for i := range w {
				w[i] += 0.03 // a common offset, so that the mins of Q4_1/Q5_1/K-quants matter
			}
			if CanQuantize(typ) {
				QuantizeRow(row, typ, w)
			} else {
				row = randomBlocks(r, typ, cols/qkK)
			}
			const nTok = 4 // the misaddressed variants must fail on at least one
			x := randRow(r, nTok*cols, 1)
			var a acts
			a.prepare(typ, x, nTok, cols)
			if a.typ != VecDotType(typ) {
				t.Fatalf("activations %v, want %v", a.typ, VecDotType(typ))
			}
			rot := append(append([]byte(nil), row[bb:]...), row[:bb]...)
			skip := append([]byte(nil), row...)
			clear(skip[2*bb : 3*bb])
			var worst, rotErr, skipErr float64
			for tk := 0; tk < nTok; tk++ {
				xq := actFloats(&a, tk)
				e := dotError(t, typ, row, xq, dotRow(typ, row, &a, tk))
				worst = max(worst, e)
				if e > tol {
					t.Fatalf("token %d: relative error %.3g > %g", tk, e, tol)
				}
				// The misaddressed variants must fail the same check.
				rotErr = max(rotErr, dotError(t, typ, row, xq, dotRow(typ, rot, &a, tk)))
				skipErr = max(skipErr, dotError(t, typ, row, xq, dotRow(typ, skip, &a, tk)))
			}
			t.Logf("%v: relative error %.3g; misaddressed: %.3g (off by one block), %.3g (a block skipped)", typ, worst, rotErr, skipErr)
			if rotErr < 10*tol {
				t.Errorf("off-by-one block: relative error only %.3g", rotErr)
			}
			if skipErr < 10*tol {
				t.Errorf("skipped block: relative error only %.3g", skipErr)
			}
		})
	}
}

// TestTernaryExact: a row of ternary weights {-c, 0, c} (what TQ1_0 and TQ2_0 are
// for) survives quantization exactly, c being f16-representable, with every element
// in its place.
func TestTernaryExact(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const n, c = 512, 0.375
	x := make([]float32, n)
	for i := range x {
		x[i] = c * float32(r.IntN(3)-1)
	}
	x[7], x[300] = c, -c // max|x| = c in both blocks
	for _, typ := range []Type{TQ1_0, TQ2_0} {
		enc := make([]byte, typ.RowBytes(n))
		QuantizeRow(enc, typ, x)
		y := make([]float32, n)
		DequantizeRow(y, typ, enc)
		for i := range x {
			if y[i] != x[i] {
				t.Fatalf("%v: element %d decodes to %v, want %v", typ, i, y[i], x[i])
			}
		}
	}
}

// fuzzRefDecoder feeds arbitrary bytes (untrusted file contents: hostile scales,
// NaN and infinite f16s, any indices) as a row of 1 to 16 blocks of typ, in a slice
// with no capacity past the row, to the decoder and the dot product: neither may
// panic or read past the row, both are deterministic, and for the types without a
// min term (whose dot product is d·Σ scale·q·y with nothing to cancel) a finite dot
// product agrees with the float64 product of the decoded weights.
func fuzzRefDecoder(f *testing.F, typ Type) {
	bb := typ.BlockBytes()
	f.Add([]byte{1, 2, 3})
	f.Add(bytesOf(0xff, bb))
	f.Add(bytesOf(0x7b, 3*bb))
	f.Add(bytesOf(0x3c, 2*bb+5))
	f.Fuzz(func(t *testing.T, data []byte) {
		bs := typ.BlockSize()
		nb := max(1, min(len(data)/bb, 16))
		buf := make([]byte, nb*bb)
		copy(buf, data)
		row := buf[:len(buf):len(buf)]
		y := make([]float32, nb*bs)
		DequantizeRow(y, typ, row)
		y2 := make([]float32, nb*bs)
		DequantizeRow(y2, typ, row)
		r := rand.New(rand.NewPCG(uint64(nb), 5))
		var a acts
		a.prepare(typ, randRow(r, nb*bs, 1), 1, nb*bs)
		got := dotRow(typ, row, &a, 0)
		if again := dotRow(typ, row, &a, 0); math.Float32bits(again) != math.Float32bits(got) {
			t.Fatalf("dot product not deterministic: %v then %v", got, again)
		}
		finite := !math.IsNaN(float64(got)) && !math.IsInf(float64(got), 0)
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(y2[i]) {
				t.Fatalf("decoder not deterministic at %d: %v then %v", i, y[i], y2[i])
			}
			finite = finite && !math.IsNaN(float64(y[i])) && !math.IsInf(float64(y[i]), 0)
		}
		switch typ {
		case Q4_1, Q5_1, Q2_K, Q5_K:
			return
		}
		if !finite {
			return
		}
		x := actFloats(&a, 0)
		var want, norm float64
		for i := range y {
			p := float64(y[i]) * float64(x[i])
			want += p
			norm += math.Abs(p)
		}
		if math.IsInf(want, 0) || norm > math.MaxFloat32/4 {
			return
		}
		if d := math.Abs(float64(got) - want); d > 4*float64(nb+8)*unitRoundoff*norm {
			t.Fatalf("dot %v, decoded weights give %v (|diff| %g, Σ|w·x| %g)", got, want, d, norm)
		}
	})
}

func FuzzDecodeQ4_1(f *testing.F)    { fuzzRefDecoder(f, Q4_1) }
func FuzzDecodeQ5_0(f *testing.F)    { fuzzRefDecoder(f, Q5_0) }
func FuzzDecodeQ5_1(f *testing.F)    { fuzzRefDecoder(f, Q5_1) }
func FuzzDecodeIQ4_NL(f *testing.F)  { fuzzRefDecoder(f, IQ4_NL) }
func FuzzDecodeQ2_K(f *testing.F)    { fuzzRefDecoder(f, Q2_K) }
func FuzzDecodeQ3_K(f *testing.F)    { fuzzRefDecoder(f, Q3_K) }
func FuzzDecodeQ5_K(f *testing.F)    { fuzzRefDecoder(f, Q5_K) }
func FuzzDecodeIQ4_XS(f *testing.F)  { fuzzRefDecoder(f, IQ4_XS) }
func FuzzDecodeTQ1_0(f *testing.F)   { fuzzRefDecoder(f, TQ1_0) }
func FuzzDecodeTQ2_0(f *testing.F)   { fuzzRefDecoder(f, TQ2_0) }
func FuzzDecodeIQ2_XXS(f *testing.F) { fuzzRefDecoder(f, IQ2_XXS) }
func FuzzDecodeIQ2_XS(f *testing.F)  { fuzzRefDecoder(f, IQ2_XS) }
func FuzzDecodeIQ2_S(f *testing.F)   { fuzzRefDecoder(f, IQ2_S) }
func FuzzDecodeIQ3_XXS(f *testing.F) { fuzzRefDecoder(f, IQ3_XXS) }
func FuzzDecodeIQ3_S(f *testing.F)   { fuzzRefDecoder(f, IQ3_S) }
func FuzzDecodeIQ1_S(f *testing.F)   { fuzzRefDecoder(f, IQ1_S) }
func FuzzDecodeIQ1_M(f *testing.F)   { fuzzRefDecoder(f, IQ1_M) }
