package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// kvCase is a paged cache of n positions, kvh KV heads of hd values, stored as kt
// and vt in blocks of bt positions, with the float32 values it was written from.
type kvCase struct {
	kt, vt       KVType
	hd, kvh, bt  int
	n            int
	ks, vs       [][]uint16
	kf, vf       []float32 // position-major rows of kvh·hd values
	kstride, vst int
}

func newKVCase(rng *rand.Rand, kt, vt KVType, hd, kvh, bt, n int) *kvCase {
	c := &kvCase{kt: kt, vt: vt, hd: hd, kvh: kvh, bt: bt, n: n}
	row := hd * kvh
	c.kstride, c.vst = kt.Units(row), vt.Units(row)
	c.kf, c.vf = make([]float32, n*row), make([]float32, n*row)
	for i := range c.kf {
		c.kf[i] = float32(rng.NormFloat64())
		c.vf[i] = float32(rng.NormFloat64())
	}
	c.page(bt)
	return c
}

// page lays the rows out in blocks of bt positions.
func (c *kvCase) page(bt int) {
	row := c.hd * c.kvh
	c.bt, c.ks, c.vs = bt, nil, nil
	for b := 0; b*bt < c.n; b++ {
		kb, vb := make([]uint16, bt*c.kstride), make([]uint16, bt*c.vst)
		for t := 0; t < bt && b*bt+t < c.n; t++ {
			j := b*bt + t
			PutKVRow(kb[t*c.kstride:(t+1)*c.kstride], c.kt, c.kf[j*row:(j+1)*row])
			PutKVRow(vb[t*c.vst:(t+1)*c.vst], c.vt, c.vf[j*row:(j+1)*row])
		}
		c.ks, c.vs = append(c.ks, kb), append(c.vs, vb)
	}
}

func (c *kvCase) attend(out, q []float32, h, n int, scale float32) {
	AttendBlocksKV(out, q, c.ks, c.vs, c.kt, c.vt, c.kt.Units(h*c.hd), c.vt.Units(h*c.hd), c.kstride, c.vst, c.bt, n, scale)
}

// exactAttention is attention in float64 over the unquantized values.
func (c *kvCase) exactAttention(q []float32, h, n int, scale float32) []float64 {
	row := c.hd * c.kvh
	s := make([]float64, n)
	mx := math.Inf(-1)
	for j := range s {
		for i := 0; i < c.hd; i++ {
			s[j] += float64(q[i]) * float64(c.kf[j*row+h*c.hd+i])
		}
		s[j] *= float64(scale)
		mx = math.Max(mx, s[j])
	}
	out := make([]float64, c.hd)
	var sum float64
	for j := range s {
		p := math.Exp(s[j] - mx)
		sum += p
		for i := range out {
			out[i] += p * float64(c.vf[j*row+h*c.hd+i])
		}
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

var kvTypePairs = [][2]KVType{{KVQ8_0, KVQ8_0}, {KVQ4_0, KVQ4_0}, {KVQ8_0, KVF16}, {KVF16, KVQ8_0}, {KVQ8_0, KVQ4_0}}

func TestParseKVType(t *testing.T) {
	for _, c := range []struct {
		in   string
		want KVType
	}{{"", KVF16}, {"f16", KVF16}, {"q8_0", KVQ8_0}, {"q4_0", KVQ4_0}} {
		if got, err := ParseKVType(c.in); err != nil || got != c.want || (c.in != "" && got.String() != c.in) {
			t.Errorf("ParseKVType(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"q8", "Q8_0", "f32", "q4_1", "bf16"} {
		if _, err := ParseKVType(bad); !errors.Is(err, ErrKVType) {
			t.Errorf("ParseKVType(%q): %v, want ErrKVType", bad, err)
		}
	}
	if err := CheckKVType(KVQ8_0, 80); !errors.Is(err, ErrKVType) {
		t.Errorf("q8_0 with head size 80: %v, want ErrKVType", err)
	}
	if err := CheckKVType(KVF16, 80); err != nil {
		t.Errorf("f16 with head size 80: %v", err)
	}
}

// TestPutKVRowRoundTrip: a stored row decodes to its values within half a
// quantization step of its block (d/2; d = max|x|/127 for Q8_0, max|x|/8 for Q4_0)
// and the sizes are ggml's (34 and 18 bytes per 32 values).
func TestPutKVRowRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	if KVQ8_0.Units(64)*2 != 2*34 || KVQ4_0.Units(64)*2 != 2*18 || KVF16.Units(64) != 64 {
		t.Fatalf("row sizes %d %d %d", KVQ8_0.Units(64), KVQ4_0.Units(64), KVF16.Units(64))
	}
	for _, typ := range []KVType{KVF16, KVQ8_0, KVQ4_0} {
		x := make([]float32, 128)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 3)
		}
		row := make([]uint16, typ.Units(len(x)))
		PutKVRow(row, typ, x)
		y := make([]float32, len(x))
		KVRow(y, typ, row)
		for b := 0; b < len(x)/32; b++ {
			var amax float64
			for _, v := range x[b*32 : (b+1)*32] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			tol := map[KVType]float64{KVF16: amax / 1024, KVQ8_0: amax / 127 * 0.51, KVQ4_0: amax / 8 * 0.51}[typ] + 1e-3*amax/127
			if typ == KVQ4_0 {
				tol = amax / 8 // the value of largest magnitude maps to -8 exactly; the others within one step
			}
			for i := b * 32; i < (b+1)*32; i++ {
				if d := math.Abs(float64(y[i] - x[i])); d > tol {
					t.Fatalf("%v: value %d: %v decodes to %v (off by %g > %g)", typ, i, x[i], y[i], d, tol)
				}
			}
		}
	}
}

// TestAttendBlocksKVNearExact: attention over a quantized cache stays near exact
// float64 attention over the values written (and q8_0 nearer than q4_0), for heads
// of 64 and 128 and long and short spans.
func TestAttendBlocksKVNearExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tol := map[KVType]float64{KVF16: 0.01, KVQ8_0: 0.03, KVQ4_0: 0.5} // q4_0: half a step of max|x|/8 on V alone
	for _, hd := range []int{64, 128} {
		for _, pr := range append(kvTypePairs, [2]KVType{KVF16, KVF16}) {
			c := newKVCase(rng, pr[0], pr[1], hd, 2, 16, 300)
			scale := float32(1 / math.Sqrt(float64(hd)))
			var worst float64
			for _, n := range []int{1, 7, 300} {
				for h := 0; h < 2; h++ {
					q := make([]float32, hd)
					for i := range q {
						q[i] = float32(rng.NormFloat64() * 2)
					}
					out := make([]float32, hd)
					c.attend(out, q, h, n, scale)
					want := c.exactAttention(q, h, n, scale)
					for i := range out {
						worst = math.Max(worst, math.Abs(float64(out[i])-want[i]))
					}
				}
			}
			lim := max(tol[pr[0]], tol[pr[1]])
			t.Logf("hd %d K %v V %v: max |error| %.3g (limit %g)", hd, pr[0], pr[1], worst, lim)
			if worst > lim || math.IsNaN(worst) {
				t.Errorf("hd %d K %v V %v: max |error| %.3g > %g", hd, pr[0], pr[1], worst, lim)
			}
		}
	}
}

// TestAttendBlocksKVPagingAndTiles: a quantized cache's attention is the same bits
// however it is paged (blocks of 4, 16, 64 positions, or one span), through
// AttendBlocksTileKV as through AttendBlocksKV, at every SIMD level (the assembly
// gives its references' bits): a sequence's result depends on its positions only.
func TestAttendBlocksKVPagingAndTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const kvh, n, heads = 2, 150, 3
	for _, tc := range []struct {
		pr [2]KVType
		hd int
	}{{kvTypePairs[0], 64}, {kvTypePairs[1], 64}, {kvTypePairs[2], 64}, {kvTypePairs[3], 64}, {kvTypePairs[4], 64},
		{kvTypePairs[0], 96}, {kvTypePairs[1], 96}, {kvTypePairs[0], 128}} { // 96: pairs of blocks and one more
		pr, hd := tc.pr, tc.hd
		t.Run(fmt.Sprint(pr[0], "-", pr[1], "/", hd), func(t *testing.T) {
			c := newKVCase(rng, pr[0], pr[1], hd, kvh, 16, n)
			scale := float32(0.125)
			ld := heads * hd
			pos := []int32{0, 5, 63, 64, 100, n - 1}
			q := make([]float32, len(pos)*ld)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			var ref []float32
			for _, level := range simdLevels() {
				restore := setSIMD(level)
				for _, bt := range []int{16, 4, 64, n} {
					c.page(bt)
					for h := 0; h < kvh; h++ {
						got := make([]float32, len(pos)*ld)
						for i, p := range pos {
							for g := 0; g < heads; g++ {
								o := i*ld + g*hd
								c.attend(got[o:o+hd], q[o:o+hd], h, int(p)+1, scale)
							}
						}
						tile := make([]float32, len(pos)*ld)
						AttendBlocksTileKV(tile, q, ld, hd, heads, pos, c.ks, c.vs, c.kt, c.vt, c.kt.Units(h*hd), c.vt.Units(h*hd), c.kstride, c.vst, bt, scale)
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(tile[i]) {
								t.Fatalf("%s, blocks of %d, head %d: tile %v, one at a time %v at %d", level, bt, h, tile[i], got[i], i)
							}
						}
						if h == 0 {
							if ref == nil {
								ref = got
								continue
							}
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
									t.Fatalf("%s, blocks of %d: %v, want %v (the first layout's) at %d", level, bt, got[i], ref[i], i)
								}
							}
						}
					}
				}
				restore()
			}
		})
	}
}

// TestAttendBlocksTileKVGroupsOfHeads: a GQA group of 1 to 5 query heads over a
// quantized cache (over a quantized V, the heads' accumulator updates sharing each
// V row's dequantization, attnAccumGroup…AVX2, in groups of 2, 3 and 4; the next
// block prefetched) gives each head the bits it gets on its own through
// AttendBlocksKV, at every SIMD level: one
// decode token, and tokens at positions that end inside, at and past a block
// boundary (the group leaves the shared kernel where its heads' positions part).
func TestAttendBlocksTileKVGroupsOfHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	const hd, kvh, n = 64, 2, 200
	pairs := append(kvTypePairs, [2]KVType{KVF16, KVQ4_0}, [2]KVType{KVQ4_0, KVQ8_0})
	for _, pr := range pairs {
		c := newKVCase(rng, pr[0], pr[1], hd, kvh, 16, n)
		for _, heads := range []int{1, 2, 3, 4, 5} {
			for _, pos := range [][]int32{{n - 1}, {40, 47, 48, 60}} {
				t.Run(fmt.Sprint(pr[0], "-", pr[1], "/heads", heads, "/", pos), func(t *testing.T) {
					ld := heads * hd
					q := make([]float32, len(pos)*ld)
					for i := range q {
						q[i] = float32(rng.NormFloat64()) * float32(1+i/hd%3) // the heads' maxima rise at different positions
					}
					for _, level := range simdLevels() {
						restore := setSIMD(level)
						for h := 0; h < kvh; h++ {
							want := make([]float32, len(q))
							for i, p := range pos {
								for g := 0; g < heads; g++ {
									o := i*ld + g*hd
									c.attend(want[o:o+hd], q[o:o+hd], h, int(p)+1, 0.125)
								}
							}
							got := make([]float32, len(q))
							AttendBlocksTileKV(got, q, ld, hd, heads, pos, c.ks, c.vs, c.kt, c.vt, c.kt.Units(h*hd), c.vt.Units(h*hd), c.kstride, c.vst, c.bt, 0.125)
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%s, KV head %d: tile %v, one head at a time %v at %d", level, h, got[i], want[i], i)
								}
							}
						}
						restore()
					}
				})
			}
		}
	}
}

// TestAccumQuantMatchesGeneric: the V accumulation's dispatch (assembly where there
// is some) gives its Generic reference's bits, for many scales.
func TestAccumQuantMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []KVType{KVQ8_0, KVQ4_0} {
		for _, hd := range []int{32, 64, 128, 256} {
			x := make([]float32, hd)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 4)
			}
			row := make([]uint16, typ.Units(hd))
			PutKVRow(row, typ, x)
			a, b := make([]float32, hd), make([]float32, hd)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
				b[i] = a[i]
			}
			for k := 0; k < 20; k++ {
				vs := float32(rng.Float64())
				if typ == KVQ8_0 {
					accumQ8_0(a, unitBytes(row), vs)
					accumQ8_0Generic(b, unitBytes(row), vs)
				} else {
					accumQ4_0(a, unitBytes(row), vs)
					accumQ4_0Generic(b, unitBytes(row), vs)
				}
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("%v hd %d: %v, generic %v at %d", typ, hd, a[i], b[i], i)
				}
			}
		}
	}
}

// TestAttendBlocksKVDoesNotAllocate: attention over quantized blocks, one head, a
// tile of heads and a token's KV heads together, allocates nothing (its states
// live on the stack).
func TestAttendBlocksKVDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what escapes")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, pr := range kvTypePairs {
		c := newKVCase(rng, pr[0], pr[1], 64, 2, 16, 200)
		q := make([]float32, 3*64*2)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		out := make([]float32, len(q))
		pos := []int32{150, 199}
		if n := testing.AllocsPerRun(10, func() { c.attend(out[:64], q[:64], 1, 200, 0.125) }); n != 0 {
			t.Errorf("%v/%v AttendBlocksKV: %v allocations", pr[0], pr[1], n)
		}
		if n := testing.AllocsPerRun(10, func() {
			AttendBlocksTileKV(out, q, 3*64, 64, 3, pos, c.ks, c.vs, c.kt, c.vt, 0, 0, c.kstride, c.vst, c.bt, 0.125)
		}); n != 0 {
			t.Errorf("%v/%v AttendBlocksTileKV: %v allocations", pr[0], pr[1], n)
		}
		if n := testing.AllocsPerRun(10, func() {
			AttendBlocksTileKVHeads(out, q, 64, 3, 2, 199, c.ks, c.vs, c.kt, c.vt, 0, 0, c.kstride, c.vst, c.bt, 0.125)
		}); n != 0 {
			t.Errorf("%v/%v AttendBlocksTileKVHeads: %v allocations", pr[0], pr[1], n)
		}
	}
}
