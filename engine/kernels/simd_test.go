package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// The assembly reads the activation blocks by fixed offsets (see _asm/main.go).
func TestSIMDBlockLayout(t *testing.T) {
	var b q8Block
	var k q8KBlock
	var b1 q8_1Block
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"q8Block size", unsafe.Sizeof(b), 40},
		{"q8Block.d", unsafe.Offsetof(b.d), 0},
		{"q8Block.c", unsafe.Offsetof(b.c), 4},
		{"q8Block.qs", unsafe.Offsetof(b.qs), 8},
		{"q8KBlock size", unsafe.Sizeof(k), 292},
		{"q8KBlock.d", unsafe.Offsetof(k.d), 0},
		{"q8KBlock.qs", unsafe.Offsetof(k.qs), 4},
		{"q8KBlock.bsums", unsafe.Offsetof(k.bsums), 260},
		{"q8_1Block size", unsafe.Sizeof(b1), 40},
		{"q8_1Block.d", unsafe.Offsetof(b1.d), 0},
		{"q8_1Block.s", unsafe.Offsetof(b1.s), 4},
		{"q8_1Block.qs", unsafe.Offsetof(b1.qs), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d: regenerate _asm with the new layout", c.name, c.got, c.want)
		}
	}
}

// unitRoundoff is 2⁻²⁴, float32's unit roundoff.
const unitRoundoff = 1.0 / (1 << 24)

// guarded returns a copy of b placed at offset off in a buffer whose other bytes
// are 0xff (a NaN as f16 or f32), so that a kernel reading outside b poisons its
// result; check reports whether the buffer is unchanged.
func guarded(b []byte, off int) (in []byte, check func() bool) {
	buf := make([]byte, len(b)+off+64)
	for i := range buf {
		buf[i] = 0xff
	}
	copy(buf[off:], b)
	orig := append([]byte(nil), buf...)
	return buf[off : off+len(b) : off+len(b)], func() bool { return string(buf) == string(orig) }
}

// weightRow builds a row of nb blocks of t: "quantized" encodes random floats,
// "random" is random bytes, "0x00"/"0x80"/"0xff" are every byte that value
// (all-zero, most negative or largest quants and scales). The f16 block scales
// are then set to random finite values, or 1 when unit is set.
func weightRow(r *rand.Rand, t Type, nb int, mode string, unit bool) []byte {
	row := make([]byte, t.RowBytes(nb*t.BlockSize()))
	switch mode {
	case "quantized":
		QuantizeRow(row, t, randRow(r, nb*t.BlockSize(), 1))
		if !unit {
			return row
		}
	case "random":
		for i := range row {
			row[i] = byte(r.Uint32())
		}
	default:
		var v byte
		fmt.Sscanf(mode, "0x%x", &v)
		for i := range row {
			row[i] = v
		}
	}
	var fields []int // offsets of the f16 scales within a block
	switch t {
	case Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS:
		fields = []int{0}
	case Q4_1, Q5_1:
		fields = []int{0, 2}
	case Q2_K:
		fields = []int{80, 82}
	case Q3_K:
		fields = []int{108}
	case Q4_K, Q5_K:
		fields = []int{0, 2}
	case Q6_K:
		fields = []int{208}
	}
	bb := t.BlockBytes()
	for b := 0; b < nb; b++ {
		for _, f := range fields {
			d := float32(1)
			if !unit {
				d = float32(r.NormFloat64())
			}
			put16(row[b*bb+f:], F32ToF16(d))
		}
	}
	return row
}

// q8Acts builds nb Q8_0 activation blocks for weights of type t (which sets
// their c): "quantized" random floats, "random" quants in [-127, 127]
// (quantActQ8_0 never makes -128, which the sign trick of the Q8_0 kernel relies
// on), "max" all 127, "min" all -127.
func q8Acts(r *rand.Rand, t Type, nb int, mode string, unit bool) []q8Block {
	shift := actShift(t, 1)
	y := make([]q8Block, nb)
	for b := range y {
		switch mode {
		case "quantized":
			quantActQ8_0(&y[b], randRow(r, qk0, 1), shift)
		default:
			y[b].d = RoundF16(float32(r.NormFloat64()))
			var sum int32
			for j := range y[b].qs {
				y[b].qs[j] = map[string]int8{"random": int8(r.IntN(255) - 127), "max": 127, "min": -127}[mode]
				sum += int32(y[b].qs[j])
			}
			y[b].c = -(sum << shift)
		}
		if unit {
			y[b].d = 1
		}
	}
	return y
}

// q8KActs builds nb Q8_K activation blocks as q8Acts, with "min" all -128 (the
// K-quant kernels take the whole int8 range) and the bsums recomputed.
func q8KActs(r *rand.Rand, nb int, mode string, unit bool) []q8KBlock {
	y := make([]q8KBlock, nb)
	for b := range y {
		switch mode {
		case "quantized":
			quantActQ8K(&y[b], randRow(r, qkK, 1))
		default:
			y[b].d = float32(r.NormFloat64() / 127)
			for j := range y[b].qs {
				y[b].qs[j] = map[string]int8{"random": int8(r.Uint32()), "max": 127, "min": -128}[mode]
			}
			for j := range y[b].bsums {
				var s int16
				for _, q := range y[b].qs[16*j : 16*j+16] {
					s += int16(q)
				}
				y[b].bsums[j] = s
			}
		}
		if unit {
			y[b].d = 1
		}
	}
	return y
}

// absDot is Σ|wᵢ·xᵢ| in float64 over the dequantized weights (for Q4_K and Q5_K
// the scale and min parts counted separately), the scale of the rounding error
// allowed.
func absDot(t Type, row []byte, x []float32) float64 {
	n := len(x)
	parts := [][]byte{row}
	if t == Q4_K || t == Q5_K || t == Q2_K { // d·s·q with dmin zeroed, then dmin·m with d zeroed
		a, b := append([]byte(nil), row...), append([]byte(nil), row...)
		off := 0 // of d; dmin follows
		if t == Q2_K {
			off = 80
		}
		for i := 0; i < len(row); i += t.BlockBytes() {
			put16(a[i+off+2:], 0)
			put16(b[i+off:], 0)
		}
		parts = [][]byte{a, b}
	}
	var s float64
	w := make([]float32, n)
	for _, p := range parts {
		DequantizeRow(w, t, p)
		for i, v := range w {
			s += math.Abs(float64(v) * float64(x[i]))
		}
	}
	return s
}

func q8Floats(y []q8Block) []float32 {
	x := make([]float32, 0, len(y)*qk0)
	for _, b := range y {
		for _, q := range b.qs {
			x = append(x, b.d*float32(q))
		}
	}
	return x
}

func q8KFloats(y []q8KBlock) []float32 {
	x := make([]float32, 0, len(y)*qkK)
	for _, b := range y {
		for _, q := range b.qs {
			x = append(x, b.d*float32(q))
		}
	}
	return x
}

var simdBlockCounts = []int{1, 2, 3, 7, 8, 9, 64}

type rowDot struct {
	typ Type
	ref func(row []byte) float32 // the reference on the case's activations
	got func(row []byte) float32 // the dispatching kernel
	x   []float32                // the activations as floats, for absDot
}

// checkRowDot runs one case through the reference and every kernel path: rows at
// offsets 0..3 in guarded buffers must give bit-identical results (the result
// depends only on the inputs), equal to the reference within the rounding bound
// tol·Σ|wx| (exactly when exact is set), without touching the guards; the AVX2
// and AVX-512 paths must agree bit for bit.
func checkRowDot(t *testing.T, name string, row []byte, d rowDot, tol float64, exact bool) {
	t.Helper()
	want := d.ref(row)
	bound := tol * absDot(d.typ, row, d.x)
	var simd []float32 // the results of the assembly paths
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		var first float32
		for off := 0; off < 4; off++ {
			in, intact := guarded(row, off)
			got := d.got(in)
			if again := d.got(in); math.Float32bits(again) != math.Float32bits(got) {
				t.Errorf("%s %s: second call %v, first %v", name, level, again, got)
			}
			if !intact() {
				t.Errorf("%s %s: input buffer modified", name, level)
			}
			if off == 0 {
				first = got
			} else if math.Float32bits(got) != math.Float32bits(first) {
				t.Errorf("%s %s: offset %d gives %v, offset 0 %v", name, level, off, got, first)
			}
		}
		if diff := math.Abs(float64(first) - float64(want)); exact && first != want || !(diff <= bound) {
			t.Errorf("%s %s: %v, reference %v (diff %g, bound %g, exact %v)", name, level, first, want, diff, bound, exact)
		}
		if level != "generic" {
			simd = append(simd, first)
		}
		restore()
	}
	// The AVX-512 kernels keep the AVX2 kernels' operations and order.
	for _, v := range simd {
		if math.Float32bits(v) != math.Float32bits(simd[0]) {
			t.Errorf("%s: assembly paths differ: %v", name, simd)
			break
		}
	}
}

// TestSIMDQuantRowDots runs the quantized row dots over block counts × weight
// patterns × activation patterns, with random and unit scales. With unit scales
// every block's result is an integer below 2²⁴ (or, for the K-quants, computed by
// the same float operations as the reference), so the integer parts must match
// exactly.
func TestSIMDQuantRowDots(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rowModes := []string{"quantized", "random", "0x00", "0x80", "0xff"}
	actModes := []string{"quantized", "random", "max", "min"}
	for _, typ := range []Type{Q4_K, Q5_K, Q8_0, Q6_K, Q4_0, Q5_0, IQ4_NL, IQ4_XS, Q4_1, Q5_1, Q2_K, Q3_K} {
		for _, nb := range simdBlockCounts {
			for _, rm := range rowModes {
				for _, am := range actModes {
					for _, unit := range []bool{false, true} {
						name := fmt.Sprintf("%v/%d/%s/%s/unit=%v", typ, nb, rm, am, unit)
						row := weightRow(r, typ, nb, rm, unit)
						var d rowDot
						d.typ = typ
						switch typ {
						case Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K:
							// A Go slice of blocks inside a larger one: also
							// tests a y that is not the start of its array.
							all := q8KActs(r, nb+2, am, unit)
							y := all[1 : nb+1 : nb+1]
							d.x = q8KFloats(y)
							if typ == Q4_K {
								d.ref = func(row []byte) float32 { return dotQ4KRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ4KRow(row, y) }
							} else if typ == Q5_K {
								d.ref = func(row []byte) float32 { return dotQ5KRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ5KRow(row, y) }
							} else if typ == IQ4_XS {
								d.ref = func(row []byte) float32 { return dotIQ4XSRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotIQ4XSRow(row, y) }
							} else if typ == Q2_K {
								d.ref = func(row []byte) float32 { return dotQ2KRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ2KRow(row, y) }
							} else if typ == Q3_K {
								d.ref = func(row []byte) float32 { return dotQ3KRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ3KRow(row, y) }
							} else {
								d.ref = func(row []byte) float32 { return dotQ6KRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ6KRow(row, y) }
							}
						case Q4_1, Q5_1:
							all := q8_1Acts(r, nb+2, am, unit)
							y := all[1 : nb+1 : nb+1]
							d.x = q8_1Floats(y)
							d.ref = func(row []byte) float32 { return dotQ4_1RowGeneric(row, y) }
							d.got = func(row []byte) float32 { return dotQ4_1Row(row, y) }
							if typ == Q5_1 {
								d.ref = func(row []byte) float32 { return dotQ5_1RowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ5_1Row(row, y) }
							}
						default:
							all := q8Acts(r, typ, nb+2, am, unit)
							y := all[1 : nb+1 : nb+1]
							d.x = q8Floats(y)
							switch typ {
							case Q8_0:
								d.ref = func(row []byte) float32 { return dotQ8_0RowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ8_0Row(row, y) }
							case Q5_0:
								d.ref = func(row []byte) float32 { return dotQ5_0RowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ5_0Row(row, y) }
							case IQ4_NL:
								d.ref = func(row []byte) float32 { return dotIQ4NLRowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotIQ4NLRow(row, y) }
							default:
								d.ref = func(row []byte) float32 { return dotQ4_0RowGeneric(row, y) }
								d.got = func(row []byte) float32 { return dotQ4_0Row(row, y) }
							}
						}
						// The kernels compute the reference's operations.
						tol := 2 * float64(nb+8) * unitRoundoff
						checkRowDot(t, name, row, d, tol, true)
					}
				}
			}
		}
	}
}

// kRowKernels are row dots against Q8_K activations, with the offset of the
// block's f16 scale and their reference: ref, or the type's block dot summed in
// order (dotKRowGeneric).
var kRowKernels = []struct {
	typ  Type
	got  func([]byte, []q8KBlock) float32
	dOff int
	ref  func([]byte, []q8KBlock) float32
}{
	{TQ2_0, dotTQ2_0Row, 64, nil},
	{TQ1_0, dotTQ1_0Row, 52, nil},
	{IQ2_XXS, dotIQ2XXSRow, 0, nil},
	{IQ2_XS, dotIQ2XSRow, 0, nil},
	{IQ2_S, dotIQ2SRow, 0, nil},
	{IQ3_XXS, dotIQ3XXSRow, 0, nil},
	{IQ3_S, dotIQ3SRow, 0, dotIQ3SRowGeneric},
	{IQ1_S, dotIQ1SRow, 0, dotIQ1SRowGeneric},
	{IQ1_M, dotIQ1MRow, 0, nil},
}

// kRow is a row of nb blocks of typ: "quantized" Gaussian weights (types with
// a quantizer), "random" bytes or every byte v ("0xv"), with a random or unit
// f16 scale in each block (IQ1_M's spread over its scale words' top nibbles).
func kRow(r *rand.Rand, typ Type, nb int, mode string, unit bool, dOff int) []byte {
	row := make([]byte, typ.RowBytes(nb*qkK))
	switch mode {
	case "quantized":
		QuantizeRow(row, typ, randRow(r, nb*qkK, 1))
		if !unit {
			return row
		}
	case "random":
		for i := range row {
			row[i] = byte(r.Uint32())
		}
	default:
		var v byte
		fmt.Sscanf(mode, "0x%x", &v)
		for i := range row {
			row[i] = v
		}
	}
	bb := typ.BlockBytes()
	for b := 0; b < nb; b++ {
		d := uint16(0x3c00) // 1
		if !unit {
			d = F32ToF16(float32(r.NormFloat64()))
		}
		blk := row[b*bb : (b+1)*bb]
		if typ == IQ1_M {
			for k := 0; k < 4; k++ {
				blk[48+2*k+1] = blk[48+2*k+1]&0x0f | byte(d>>(4*k)&0xf)<<4
			}
			continue
		}
		put16(blk[dOff:], d)
	}
	return row
}

// noMinus128 replaces the quants -128 of y by -127 (and sets the bsums again):
// quantActQ8K never makes -128, which the lattice kernels' sign flips rely on
// (as ggml's do).
func noMinus128(y []q8KBlock) {
	for b := range y {
		for j, q := range y[b].qs {
			if q == -128 {
				y[b].qs[j] = -127
			}
		}
		for j := range y[b].bsums {
			var s int16
			for _, q := range y[b].qs[16*j : 16*j+16] {
				s += int16(q)
			}
			y[b].bsums[j] = s
		}
	}
}

// TestSIMDKRowDotsMatchReference: the row kernels of kRowKernels give the block
// reference's bits (dotKRowGeneric) on every SIMD level, over block counts ×
// weight patterns × activation patterns with random and unit scales.
func TestSIMDKRowDotsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 33))
	actModes := []string{"quantized", "random", "max", "min"}
	for _, k := range kRowKernels {
		rowModes := []string{"random", "0x00", "0x55", "0xaa", "0xff"}
		if CanQuantize(k.typ) {
			rowModes = append(rowModes, "quantized")
		}
		ref := k.ref
		if ref == nil {
			block := refCodecOf(k.typ).dotK
			ref = func(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(block, k.typ.BlockBytes(), row, y) }
		}
		for _, nb := range simdBlockCounts {
			for _, rm := range rowModes {
				for _, am := range actModes {
					for _, unit := range []bool{false, true} {
						name := fmt.Sprintf("%v/%d/%s/%s/unit=%v", k.typ, nb, rm, am, unit)
						row := kRow(r, k.typ, nb, rm, unit, k.dOff)
						all := q8KActs(r, nb+2, am, unit)
						noMinus128(all)
						y := all[1 : nb+1 : nb+1]
						d := rowDot{typ: k.typ, x: q8KFloats(y)}
						d.ref = func(row []byte) float32 { return ref(row, y) }
						d.got = func(row []byte) float32 { return k.got(row, y) }
						checkRowDot(t, name, row, d, 2*float64(nb+8)*unitRoundoff, true)
					}
				}
			}
		}
	}
}

// TestSIMDFloatRowDots runs the float row dots over lengths that are not
// multiples of the 32-element step or of 8, with random and extreme values.
func TestSIMDFloatRowDots(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []Type{F16, BF16, F32} {
		for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 72, 127, 129, 257, 2048, 2051} {
			for _, mode := range []string{"random", "max", "ints"} {
				src := randRow(r, n, 1)
				x := randRow(r, n, 1)
				switch mode {
				case "max": // the largest finite f16 with large activations
					for i := range src {
						src[i] = 65504 * float32(1-2*(i&1))
						x[i] = float32(1 << 10)
					}
				case "ints": // small integers: every rounding is exact
					for i := range src {
						src[i] = float32(r.IntN(17) - 8)
						x[i] = float32(r.IntN(17) - 8)
					}
				}
				for i, v := range x { // activations in the weight's format
					if typ == F16 {
						x[i] = RoundF16(v)
					} else if typ == BF16 {
						x[i] = RoundBF16(v)
					}
				}
				row := make([]byte, typ.RowBytes(n))
				QuantizeRow(row, typ, src)
				xs := append(make([]float32, 1, n+2), x...) // an interior, unaligned-by-4 slice
				xs = append(xs, float32(math.NaN()))
				xv := xs[1 : n+1 : n+1]
				d := rowDot{typ: typ, x: xv}
				switch typ {
				case F16:
					d.ref = func(row []byte) float32 { return dotF16RowGeneric(row, xv) }
					d.got = func(row []byte) float32 { return dotF16Row(row, xv) }
				case BF16:
					d.ref = func(row []byte) float32 { return dotBF16RowGeneric(row, xv) }
					d.got = func(row []byte) float32 { return dotBF16Row(row, xv) }
				case F32:
					d.ref = func(row []byte) float32 { return dotF32RowGeneric(row, xv) }
					d.got = func(row []byte) float32 { return dotF32Row(row, xv) }
				}
				tol := float64(n/8+n/64+16) * unitRoundoff
				checkRowDot(t, fmt.Sprintf("%v/%d/%s", typ, n, mode), row, d, tol, mode == "ints")
			}
		}
	}
}

// TestSIMDMatMulRows checks the kernels on the activations MatMul prepares, for
// rows of a real-sized matrix.
func TestSIMDMatMulRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const cols = 2048
	x := randRow(r, cols, 1)
	for _, typ := range []Type{Q4_K, Q8_0, Q6_K, Q4_0, F16, BF16, F32} {
		var a acts
		a.prepare(typ, x, 1, cols)
		row := make([]byte, typ.RowBytes(cols))
		QuantizeRow(row, typ, randRow(r, cols, 0.1))
		want := dotRow(typ, row, &a, 0)
		var got float32
		var ax []float32
		switch typ {
		case Q4_K:
			got, ax = dotQ4KRow(row, a.q8k), q8KFloats(a.q8k)
		case Q6_K:
			got, ax = dotQ6KRow(row, a.q8k), q8KFloats(a.q8k)
		case Q8_0:
			got, ax = dotQ8_0Row(row, a.q8), q8Floats(a.q8)
		case Q4_0:
			got, ax = dotQ4_0Row(row, a.q8), q8Floats(a.q8)
		case F16:
			got, ax = dotF16Row(row, a.f), a.f
		case BF16:
			got, ax = dotBF16Row(row, a.f), a.f
		case F32:
			got, ax = dotF32Row(row, a.f), a.f
		}
		bound := float64(cols/8+16) * unitRoundoff * absDot(typ, row, ax)
		if diff := math.Abs(float64(got) - float64(want)); !(diff <= bound) {
			t.Errorf("%v: %v, dotRow %v (diff %g, bound %g)", typ, got, want, diff, bound)
		}
	}
}

// BenchmarkRowDot measures each kernel path on rows of 2048 and 8192 columns;
// the bytes are the weight row's.
func BenchmarkRowDot(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []Type{Q4_K, Q8_0, Q6_K, Q4_0, F16, BF16, F32} {
		for _, cols := range []int{2048, 8192} {
			x := randRow(r, cols, 1)
			var a acts
			a.prepare(typ, x, 1, cols)
			row := make([]byte, typ.RowBytes(cols))
			QuantizeRow(row, typ, randRow(r, cols, 0.1))
			var f func() float32
			switch typ {
			case Q4_K:
				f = func() float32 { return dotQ4KRow(row, a.q8k) }
			case Q6_K:
				f = func() float32 { return dotQ6KRow(row, a.q8k) }
			case Q8_0:
				f = func() float32 { return dotQ8_0Row(row, a.q8) }
			case Q4_0:
				f = func() float32 { return dotQ4_0Row(row, a.q8) }
			case F16:
				f = func() float32 { return dotF16Row(row, a.f) }
			case BF16:
				f = func() float32 { return dotBF16Row(row, a.f) }
			case F32:
				f = func() float32 { return dotF32Row(row, a.f) }
			}
			for _, level := range simdLevels() {
				b.Run(fmt.Sprintf("%v/%d/%s", typ, cols, level), func(b *testing.B) {
					defer setSIMD(level)()
					b.SetBytes(int64(len(row)))
					var s float32
					for b.Loop() {
						s += f()
					}
					sink = s
				})
			}
		}
	}
}

// BenchmarkKRowDot: the row kernels of kRowKernels on every SIMD level (generic:
// the pure-Go reference), one row of 2048 weights against its activations.
func BenchmarkKRowDot(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 9))
	const cols = 2048
	var a acts
	a.prepare(Q4_K, randRow(r, cols, 1), 1, cols)
	for _, k := range kRowKernels {
		row := kRow(r, k.typ, cols/qkK, "random", false, k.dOff)
		for _, level := range simdLevels() {
			b.Run(fmt.Sprintf("%v/%s", k.typ, level), func(b *testing.B) {
				defer setSIMD(level)()
				b.SetBytes(int64(len(row)))
				var s float32
				for b.Loop() {
					s += k.got(row, a.q8k)
				}
				sink = s
			})
		}
	}
}

var sink float32

// A row shorter than its activations panics (index out of range) before the
// assembly could read past it, as the Go reference does.
func TestSIMDShortRowPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	yk := q8KActs(r, 2, "random", false)
	y := q8Acts(r, Q8_0, 2, "random", false)
	x := randRow(r, 16, 1)
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Q4_K", func() { dotQ4KRow(make([]byte, 2*144-1), yk) }},
		{"Q5_K", func() { dotQ5KRow(make([]byte, 2*176-1), yk) }},
		{"IQ4_XS", func() { dotIQ4XSRow(make([]byte, 2*136-1), yk) }},
		{"Q4_1", func() { dotQ4_1Row(make([]byte, 2*20-1), make([]q8_1Block, 2)) }},
		{"Q5_1", func() { dotQ5_1Row(make([]byte, 2*24-1), make([]q8_1Block, 2)) }},
		{"TQ2_0", func() { dotTQ2_0Row(make([]byte, 2*66-1), yk) }},
		{"TQ1_0", func() { dotTQ1_0Row(make([]byte, 2*54-1), yk) }},
		{"IQ2_XXS", func() { dotIQ2XXSRow(make([]byte, 2*66-1), yk) }},
		{"IQ2_XS", func() { dotIQ2XSRow(make([]byte, 2*74-1), yk) }},
		{"IQ2_S", func() { dotIQ2SRow(make([]byte, 2*82-1), yk) }},
		{"IQ3_XXS", func() { dotIQ3XXSRow(make([]byte, 2*98-1), yk) }},
		{"IQ3_S", func() { dotIQ3SRow(make([]byte, 2*110-1), yk) }},
		{"IQ1_S", func() { dotIQ1SRow(make([]byte, 2*50-1), yk) }},
		{"IQ1_M", func() { dotIQ1MRow(make([]byte, 2*56-1), yk) }},
		{"Q2_K", func() { dotQ2KRow(make([]byte, 2*84-1), yk) }},
		{"Q3_K", func() { dotQ3KRow(make([]byte, 2*110-1), yk) }},
		{"Q6_K", func() { dotQ6KRow(make([]byte, 2*210-1), yk) }},
		{"Q8_0", func() { dotQ8_0Row(make([]byte, 2*34-1), y) }},
		{"Q4_0", func() { dotQ4_0Row(make([]byte, 2*18-1), y) }},
		{"Q5_0", func() { dotQ5_0Row(make([]byte, 2*22-1), y) }},
		{"IQ4_NL", func() { dotIQ4NLRow(make([]byte, 2*18-1), y) }},
		{"F32", func() { dotF32Row(make([]byte, 4*16-1), x) }},
		{"F16", func() { dotF16Row(make([]byte, 2*16-1), x) }},
		{"BF16", func() { dotBF16Row(make([]byte, 2*16-1), x) }},
	} {
		for _, level := range simdLevels() {
			func() {
				defer setSIMD(level)()
				defer func() {
					if recover() == nil {
						t.Errorf("%s %s: short row did not panic", c.name, level)
					}
				}()
				c.f()
			}()
		}
	}
}

// FuzzSIMDRowDot feeds arbitrary weight bytes (untrusted file contents: any
// scale, NaN and infinities included) to every kernel path and the reference,
// with fixed random activations. Results must agree within the rounding bound
// (the K-quants exactly), NaN or infinite weights give a NaN or infinite result
// on every path, and only sums near the float32 range may overflow on one path
// and not the other.
func FuzzSIMDRowDot(f *testing.F) {
	f.Add(byte(0), []byte{1, 2, 3})
	f.Add(byte(1), bytesOf(0xff, 300))
	f.Add(byte(2), bytesOf(0x80, 144*3))
	f.Add(byte(3), bytesOf(0x7b, 210*2))
	f.Add(byte(4), bytesOf(0x3c, 64))
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		types := []Type{Q4_K, Q6_K, Q8_0, Q4_0, F16, BF16, F32, Q5_K, Q5_0, IQ4_NL, IQ4_XS, Q2_K, Q3_K}
		typ := types[int(which)%len(types)]
		bs, bb := typ.BlockSize(), typ.BlockBytes()
		nb := max(1, min(len(data)/bb, 64))
		row := make([]byte, nb*bb)
		copy(row, data)
		r := rand.New(rand.NewPCG(uint64(nb), 11))
		var ref, got func() float32
		var xf []float32 // the activations as floats
		switch typ {
		case Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K:
			y := q8KActs(r, nb, "quantized", false)
			xf = q8KFloats(y)
			ref, got = func() float32 { return dotQ4KRowGeneric(row, y) }, func() float32 { return dotQ4KRow(row, y) }
			if typ == Q5_K {
				ref, got = func() float32 { return dotQ5KRowGeneric(row, y) }, func() float32 { return dotQ5KRow(row, y) }
			}
			if typ == IQ4_XS {
				ref, got = func() float32 { return dotIQ4XSRowGeneric(row, y) }, func() float32 { return dotIQ4XSRow(row, y) }
			}
			if typ == Q2_K {
				ref, got = func() float32 { return dotQ2KRowGeneric(row, y) }, func() float32 { return dotQ2KRow(row, y) }
			}
			if typ == Q3_K {
				ref, got = func() float32 { return dotQ3KRowGeneric(row, y) }, func() float32 { return dotQ3KRow(row, y) }
			}
			if typ == Q6_K {
				ref, got = func() float32 { return dotQ6KRowGeneric(row, y) }, func() float32 { return dotQ6KRow(row, y) }
			}
		case Q8_0, Q4_0, Q5_0, IQ4_NL:
			y := q8Acts(r, Q8_0, nb, "quantized", false)
			xf = q8Floats(y)
			ref, got = func() float32 { return dotQ8_0RowGeneric(row, y) }, func() float32 { return dotQ8_0Row(row, y) }
			switch typ {
			case Q4_0:
				ref, got = func() float32 { return dotQ4_0RowGeneric(row, y) }, func() float32 { return dotQ4_0Row(row, y) }
			case Q5_0:
				ref, got = func() float32 { return dotQ5_0RowGeneric(row, y) }, func() float32 { return dotQ5_0Row(row, y) }
			case IQ4_NL:
				ref, got = func() float32 { return dotIQ4NLRowGeneric(row, y) }, func() float32 { return dotIQ4NLRow(row, y) }
			}
		default:
			x := randRow(r, nb*bs, 1)
			xf = x
			switch typ {
			case F16:
				ref, got = func() float32 { return dotF16RowGeneric(row, x) }, func() float32 { return dotF16Row(row, x) }
			case BF16:
				ref, got = func() float32 { return dotBF16RowGeneric(row, x) }, func() float32 { return dotBF16Row(row, x) }
			default:
				ref, got = func() float32 { return dotF32RowGeneric(row, x) }, func() float32 { return dotF32Row(row, x) }
			}
		}
		want := float64(ref())
		tol := 2 * float64(nb+8) * unitRoundoff
		if bs == 1 {
			tol = float64(nb/8+nb/64+16) * unitRoundoff
		}
		abs := absDot(typ, row, xf)
		finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			g := float64(got())
			restore()
			switch {
			case typ == Q4_K || typ == Q5_K || typ == Q6_K || typ == IQ4_XS || typ == Q2_K || typ == Q3_K:
				// The reference's operations in its order: its bits.
				if g != want && !(math.IsNaN(g) && math.IsNaN(want)) {
					t.Fatalf("%v %s: %v, reference %v", typ, level, g, want)
				}
			case !finite(abs):
				// A NaN or infinite weight: NaN or ±Inf, whatever the order.
				if finite(g) || finite(want) {
					t.Fatalf("%v %s: %v, reference %v", typ, level, g, want)
				}
			case finite(g) && finite(want):
				if bound := tol * abs; !(math.Abs(g-want) <= bound) {
					t.Fatalf("%v %s: %v, reference %v (bound %g)", typ, level, g, want, bound)
				}
			case abs < math.MaxFloat32/4:
				// Only a sum near the float32 range may overflow in one
				// order and not the other.
				t.Fatalf("%v %s: %v, reference %v", typ, level, g, want)
			}
		}
	})
}

func bytesOf(v byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = v
	}
	return b
}

// TestSIMDKRows checks the batched K-quant kernels: each output is the bits of
// the single-row kernel and of the reference, for batches that are and are not
// multiples of 4, and nothing is written around the outputs.
func TestSIMDKRows(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const guard = -12345.5
	for _, c := range []struct {
		typ  Type
		rows func([]float32, []byte, []q8KBlock, int)
		one  func([]byte, []q8KBlock) float32
		ref  func([]byte, []q8KBlock) float32
	}{
		{Q4_K, dotQ4KRows, dotQ4KRow, dotQ4KRowGeneric},
		{Q5_K, dotQ5KRows, dotQ5KRow, dotQ5KRowGeneric},
		{Q6_K, dotQ6KRows, dotQ6KRow, dotQ6KRowGeneric},
	} {
		for _, nb := range []int{1, 3, 8} {
			for _, nTok := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16} {
				for _, am := range []string{"quantized", "random", "min"} {
					name := fmt.Sprintf("%v/%d/%d/%s", c.typ, nb, nTok, am)
					row := weightRow(r, c.typ, nb, "random", false)
					y := q8KActs(r, nb*nTok, am, false)
					for _, level := range simdLevels() {
						restore := setSIMD(level)
						buf := make([]float32, nTok+2)
						for i := range buf {
							buf[i] = guard
						}
						c.rows(buf[1:nTok+1], row, y, nb)
						if buf[0] != guard || buf[nTok+1] != guard {
							t.Errorf("%s %s: guard overwritten: %v", name, level, buf)
						}
						for tok := 0; tok < nTok; tok++ {
							yt := y[tok*nb : (tok+1)*nb]
							want := c.one(row, yt)
							if got := buf[1+tok]; math.Float32bits(got) != math.Float32bits(want) {
								t.Errorf("%s %s: token %d: %v, single-row kernel %v", name, level, tok, got, want)
							}
							if ref := c.ref(row, yt); ref != want {
								t.Errorf("%s %s: token %d: %v, reference %v", name, level, tok, want, ref)
							}
						}
						restore()
					}
				}
			}
		}
	}
}

// BenchmarkBatchRows measures a weight row against 16 activation rows, batched
// and one by one (the bytes are the weight row's, once per token).
func BenchmarkBatchRows(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	const cols, nTok = 2048, 16
	out := make([]float32, nTok)
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0} {
		var a acts
		a.prepare(typ, randRow(r, cols*nTok, 1), nTok, cols)
		row := make([]byte, typ.RowBytes(cols))
		QuantizeRow(row, typ, randRow(r, cols, 0.1))
		nb := cols / typ.BlockSize()
		var batched, single func()
		switch typ {
		case Q4_K:
			batched = func() { dotQ4KRows(out, row, a.q8k, nb) }
			single = func() {
				for t := range out {
					out[t] = dotQ4KRow(row, a.q8k[t*nb:(t+1)*nb])
				}
			}
		case Q6_K:
			batched = func() { dotQ6KRows(out, row, a.q8k, nb) }
			single = func() {
				for t := range out {
					out[t] = dotQ6KRow(row, a.q8k[t*nb:(t+1)*nb])
				}
			}
		case Q8_0:
			batched = func() { dotQ8_0Rows(out, row, a.q8, nb) }
			single = func() {
				for t := range out {
					out[t] = dotQ8_0Row(row, a.q8[t*nb:(t+1)*nb])
				}
			}
		}
		for _, level := range simdLevels() {
			for _, c := range []struct {
				name string
				f    func()
			}{{"batched", batched}, {"single", single}} {
				b.Run(fmt.Sprintf("%v/%s/%s", typ, c.name, level), func(b *testing.B) {
					defer setSIMD(level)()
					b.SetBytes(int64(len(row) * nTok))
					for b.Loop() {
						c.f()
					}
				})
			}
		}
	}
}

// TestSIMDDotRows checks dotRows on the activations MatMul prepares, for every
// weight type, batch sizes that are and are not multiples of 4 and odd block
// counts: each token gets the bits of its row kernel (dotRow for the types
// without one), and nothing is written around the outputs.
func TestSIMDDotRows(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	const guard = -12345.5
	for _, typ := range []Type{Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS, Q4_1, Q5_1, Q2_K, Q3_K, F16, BF16, F32} {
		colsList := []int{256, 768}
		if typ.BlockSize() == qk0 || typ.BlockSize() == 1 {
			colsList = append(colsList, 32, 224)
		}
		for _, cols := range colsList {
			row := make([]byte, typ.RowBytes(cols))
			QuantizeRow(row, typ, randRow(r, cols, 0.1))
			for _, nTok := range []int{1, 3, 4, 6, 9} {
				var a acts
				a.prepare(typ, randRow(r, cols*nTok, 1), nTok, cols)
				single := func(tok int) float32 {
					switch typ {
					case Q4_K:
						nb := cols / qkK
						return dotQ4KRow(row, a.q8k[tok*nb:(tok+1)*nb])
					case Q5_K:
						nb := cols / qkK
						return dotQ5KRow(row, a.q8k[tok*nb:(tok+1)*nb])
					case Q6_K:
						nb := cols / qkK
						return dotQ6KRow(row, a.q8k[tok*nb:(tok+1)*nb])
					case Q8_0:
						nb := cols / qk0
						return dotQ8_0Row(row, a.q8[tok*nb:(tok+1)*nb])
					}
					return dotRow(typ, row, &a, tok)
				}
				for _, level := range simdLevels() {
					restore := setSIMD(level)
					buf := make([]float32, nTok+2)
					for i := range buf {
						buf[i] = guard
					}
					dotRows(typ, row, &a, buf[1:nTok+1])
					if buf[0] != guard || buf[nTok+1] != guard {
						t.Errorf("%v %d cols %d tokens %s: guard overwritten: %v", typ, cols, nTok, level, buf)
					}
					for tok, got := range buf[1 : nTok+1] {
						if want := single(tok); math.Float32bits(got) != math.Float32bits(want) {
							t.Errorf("%v %d cols %d tokens %s: token %d: %v, row kernel %v", typ, cols, nTok, level, tok, got, want)
						}
					}
					restore()
				}
			}
		}
	}
}

// q8_1Acts builds nb Q8_1 activation blocks as q8Acts does Q8_0 ones ("min": all
// -127), s the f16 of d·Σqs.
func q8_1Acts(r *rand.Rand, nb int, mode string, unit bool) []q8_1Block {
	y := make([]q8_1Block, nb)
	for b := range y {
		if mode == "quantized" {
			quantActQ8_1(&y[b], randRow(r, qk0, 1))
		} else {
			var sum int32
			for j := range y[b].qs {
				y[b].qs[j] = map[string]int8{"random": int8(r.IntN(255) - 127), "max": 127, "min": -127}[mode]
				sum += int32(y[b].qs[j])
			}
			y[b].d = RoundF16(float32(r.NormFloat64()))
			y[b].s = RoundF16(y[b].d * float32(sum))
		}
		if unit {
			y[b].d = 1
			y[b].s = 0
			for _, q := range y[b].qs {
				y[b].s += float32(q)
			}
		}
	}
	return y
}

func q8_1Floats(y []q8_1Block) []float32 {
	x := make([]float32, 0, len(y)*qk0)
	for _, b := range y {
		for _, q := range b.qs {
			x = append(x, b.d*float32(q))
		}
	}
	return x
}

// TestQx1Rows: dotQ5_1Rows and dotQ4_1Rows (four and two tokens at a time
// through one unpacking of each block) give every token the reference's bits
// (dotQ5_1RowGeneric, dotQ4_1RowGeneric), for token counts that leave every
// remainder, with random, extreme and quantized blocks.
func TestQx1Rows(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(75, 76))
	for _, c := range []struct {
		typ       Type
		rows      func(out []float32, row []byte, y []q8_1Block, nb int)
		reference func(row []byte, y []q8_1Block) float32
	}{
		{Q5_1, dotQ5_1Rows, dotQ5_1RowGeneric},
		{Q4_1, dotQ4_1Rows, dotQ4_1RowGeneric},
	} {
		for _, nb := range []int{1, 3, 24} {
			for _, wm := range []string{"quantized", "random", "0xff", "0x00"} {
				for _, am := range []string{"quantized", "random", "min", "max"} {
					w := weightRow(r, c.typ, nb, wm, false)
					for _, nTok := range []int{1, 2, 3, 4, 5, 7, 9} {
						y := q8_1Acts(r, nTok*nb, am, false)
						out := make([]float32, nTok)
						c.rows(out, w, y, nb)
						for tk, v := range out {
							want := c.reference(w, y[tk*nb:(tk+1)*nb])
							if math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%v nb %d weights %s acts %s, %d tokens: token %d = %v, reference %v", c.typ, nb, wm, am, nTok, tk, v, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestLatticeRowsTokens: dotLatticeRows (IQ3_S eight tokens at a time with
// AVX-512, four and two through the …x4 and …x2 kernels, each group decoded once
// for them, leftovers over the last eight or four again) gives every token the
// block reference's bits (IQ3_S: dotIQ3SRowGeneric's, ggml's order) on every
// SIMD level, for token counts 1 to 17 and random and extreme blocks.
func TestLatticeRowsTokens(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(77, 78))
	for _, typ := range []Type{IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M} {
		bb := typ.BlockBytes()
		ref := func(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(refCodecOf(typ).dotK, bb, row, y) }
		switch typ {
		case IQ3_S:
			ref = dotIQ3SRowGeneric
		case IQ1_S:
			ref = dotIQ1SRowGeneric
		}
		for _, nb := range []int{1, 3} {
			for _, wm := range []byte{0, 0xff, 0x5a, 1} {
				// Activations as quantActQ8K makes them: never -128, which
				// the kernels' sign trick (VPSIGNB) relies on.
				for _, am := range []string{"quantized", "max"} {
					row := make([]byte, nb*bb)
					for i := range row {
						if wm == 1 {
							row[i] = byte(r.Uint32())
						} else {
							row[i] = wm
						}
					}
					for b := 0; b < nb; b++ { // a finite f16 scale where the type keeps it whole
						if typ != IQ1_M {
							put16(row[b*bb:], F32ToF16(float32(r.NormFloat64())))
						}
					}
					for nTok := 1; nTok <= 17; nTok++ {
						y := q8KActs(r, nTok*nb, am, false)
						for _, level := range simdLevels() {
							restore := setSIMD(level)
							const guard = -12345.5
							buf := make([]float32, nTok+2)
							for i := range buf {
								buf[i] = guard
							}
							out := buf[1 : nTok+1]
							dotLatticeRows(typ, out, row, y, nb)
							if buf[0] != guard || buf[nTok+1] != guard {
								t.Fatalf("%v nb %d tokens %d: guard overwritten: %v", typ, nb, nTok, buf)
							}
							for tk, v := range out {
								want := ref(row, y[tk*nb:(tk+1)*nb])
								if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
									t.Fatalf("%v %s nb %d weights %#x acts %s: token %d of %d = %v, reference %v", typ, level, nb, wm, am, tk, nTok, v, want)
								}
							}
							restore()
						}
					}
				}
			}
		}
	}
}

// TestTQ1_0RowsTokens: dotTQ1_0Rows (two tokens at a time through
// dotTQ1_0AVX2x2, each block's trits found once for both) gives every token the
// block reference's bits for token counts 1 to 5, and writes only its outputs.
func TestTQ1_0RowsTokens(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(79, 80))
	const guard = -12345.5
	for _, nb := range []int{1, 3} {
		for _, wm := range []string{"quantized", "random", "0xff", "0x00"} {
			for _, am := range []string{"quantized", "max", "min"} {
				row := kRow(r, TQ1_0, nb, wm, false, 52)
				for nTok := 1; nTok <= 5; nTok++ {
					y := q8KActs(r, nTok*nb, am, false)
					buf := make([]float32, nTok+2)
					for i := range buf {
						buf[i] = guard
					}
					dotTQ1_0Rows(buf[1:nTok+1], row, y, nb)
					if buf[0] != guard || buf[nTok+1] != guard {
						t.Fatalf("nb %d tokens %d: guard overwritten: %v", nb, nTok, buf)
					}
					for tk := 0; tk < nTok; tk++ {
						want := dotKRowGeneric(dotTQ1_0Block, 54, row, y[tk*nb:(tk+1)*nb])
						if v := buf[1+tk]; math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
							t.Fatalf("nb %d weights %s acts %s: token %d of %d = %v, reference %v", nb, wm, am, tk, nTok, v, want)
						}
					}
				}
			}
		}
	}
}
