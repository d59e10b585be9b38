package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttnChunkF32MatchesReference: the chunk kernel of every SIMD level gives the
// bits of attnChunkF32Generic, for chunks of 1 to 64 positions, a first chunk
// (running maximum −Inf) and later ones with a running maximum above and below the
// chunk's scores, and NaN in the key rows past m (which a tile's later queries
// leave there), with a guard after the accumulator.
func TestAttnChunkF32MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	const hd = 64
	for _, m := range []int{1, 2, 7, 15, 16, 17, 33, 48, 63, 64} {
		for _, prev := range []float32{float32(math.Inf(-1)), -3, 0.5, 40} {
			q := make([]float32, hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64()) * 0.7
			}
			kf, vf := make([]float32, attnF32Chunk*hd), make([]float32, attnF32Chunk*hd)
			for i := range kf {
				kf[i], vf[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*3)
				if i >= m*hd {
					kf[i], vf[i] = float32(math.NaN()), float32(math.NaN())
				}
			}
			acc0 := make([]float32, hd+1)
			st0 := [2]float32{prev, 0}
			if !math.IsInf(float64(prev), -1) {
				st0[1] = 1 + rng.Float32()*5
				for i := range acc0[:hd] {
					acc0[i] = float32(rng.NormFloat64())
				}
			}
			acc0[hd] = -7
			var want []float32
			var wantSt [2]float32
			for _, level := range simdLevels() {
				restore := setSIMD(level)
				acc := append([]float32(nil), acc0...)
				st := st0
				var p [attnF32Chunk]float32
				attnChunkF32(q, kf, vf, hd, m, acc[:hd], &st, &p)
				restore()
				if acc[hd] != -7 {
					t.Fatalf("m %d %s: wrote past the accumulator", m, level)
				}
				if want == nil {
					want, wantSt = acc, st
					continue
				}
				if math.Float32bits(st[0]) != math.Float32bits(wantSt[0]) || math.Float32bits(st[1]) != math.Float32bits(wantSt[1]) {
					t.Fatalf("m %d prev %v %s: max, sum %v, reference %v", m, prev, level, st, wantSt)
				}
				for i := range want {
					if math.Float32bits(acc[i]) != math.Float32bits(want[i]) {
						t.Fatalf("m %d prev %v %s: acc[%d] = %v, reference %v", m, prev, level, i, acc[i], want[i])
					}
				}
			}
		}
	}
}

// f32Case is a paged KV cache of n positions and a run of query tokens for the
// float32-mode tests.
type f32Case struct {
	hd, group, kvHeads, bt int
	ks, vs                 [][]uint16
	q                      []float32
	pos                    []int32
}

func newF32Case(rng *rand.Rand, hd, group, kvHeads, bt, tokens, first int) *f32Case {
	c := &f32Case{hd: hd, group: group, kvHeads: kvHeads, bt: bt}
	kvd, ld := kvHeads*hd, group*kvHeads*hd
	n := first + tokens
	for b := 0; b*bt < n; b++ {
		kb, vb := make([]uint16, bt*kvd), make([]uint16, bt*kvd)
		for i := range kb {
			kb[i], vb[i] = F32ToF16(float32(rng.NormFloat64())), F32ToF16(float32(rng.NormFloat64()*2))
		}
		c.ks, c.vs = append(c.ks, kb), append(c.vs, vb)
	}
	c.q = make([]float32, tokens*ld)
	for i := range c.q {
		c.q[i] = float32(rng.NormFloat64() * 1.5)
	}
	c.pos = make([]int32, tokens)
	for i := range c.pos {
		c.pos[i] = int32(first + i)
	}
	return c
}

// TestAttendBlocksTileF32MatchesDecode: every head of every token of a float32-mode
// tile gets the bits that token gets decoded alone (AttendBlocksF32, one query, on
// the generic code), at every SIMD level, whether the run is one call or split
// into calls of 3 or 1 tokens, for head sizes 64, 128 and 72, GQA groups of 1 to
// 20 heads (more queries than a tile), pages of 7 to 128 positions and runs that
// start and end on, before and after chunk boundaries. The outputs are also within
// 1e-4 of attention computed in float64, so the numerics are attention's.
func TestAttendBlocksTileF32MatchesDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	type tc struct{ hd, group, kvHeads, bt, tokens, first int }
	cases := []tc{
		{64, 1, 2, 16, 20, 0}, {64, 4, 2, 16, 9, 55}, {64, 3, 2, 64, 70, 60}, {64, 4, 1, 32, 40, 100},
		{64, 8, 1, 7, 5, 126}, {64, 20, 1, 16, 2, 40}, {128, 4, 2, 64, 6, 60}, {128, 1, 1, 8, 4, 7},
		{72, 4, 1, 16, 5, 30}, {64, 4, 1, 128, 3, 191},
	}
	for _, c := range cases {
		fc := newF32Case(rng, c.hd, c.group, c.kvHeads, c.bt, c.tokens, c.first)
		heads := c.group * c.kvHeads
		ld, kvd := heads*c.hd, c.kvHeads*c.hd
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		want := make([]float32, len(fc.q))
		restore := setSIMD("generic")
		for i := range fc.pos {
			for h := 0; h < heads; h++ {
				o := i*ld + h*c.hd
				AttendBlocksF32(want[o:o+c.hd], fc.q[o:o+c.hd], fc.ks, fc.vs, (h/c.group)*c.hd, kvd, c.bt, int(fc.pos[i])+1, scale)
				exact := attnFloat64(fc, i, h, scale)
				for d, x := range exact {
					if math.Abs(float64(want[o+d])-x) > 1e-4*(1+math.Abs(x)) {
						restore()
						t.Fatalf("%+v: token %d head %d out[%d] = %v, float64 attention %v", c, i, h, d, want[o+d], x)
					}
				}
			}
		}
		restore()
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			for _, split := range []int{c.tokens, 3, 1} {
				got := make([]float32, len(fc.q)+1)
				got[len(fc.q)] = -7
				for i0 := 0; i0 < c.tokens; i0 += split {
					i1 := min(c.tokens, i0+split)
					for kvh := 0; kvh < c.kvHeads; kvh++ {
						o := i0*ld + kvh*c.group*c.hd
						AttendBlocksTileF32(got[o:], fc.q[o:], ld, c.hd, c.group, fc.pos[i0:i1], fc.ks, fc.vs, kvh*c.hd, kvd, c.bt, scale)
					}
				}
				if got[len(fc.q)] != -7 {
					restore()
					t.Fatalf("%+v %s: wrote past out", c, level)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						restore()
						t.Fatalf("%+v %s split %d: token %d head %d out[%d] = %v, decoded alone %v",
							c, level, split, i/ld, (i%ld)/c.hd, i%c.hd, got[i], want[i])
					}
				}
			}
			restore()
		}
	}
}

// attnFloat64 is head h of token i of the case's attention in float64.
func attnFloat64(c *f32Case, i, h int, scale float32) []float64 {
	kvd, ld := c.kvHeads*c.hd, c.group*c.kvHeads*c.hd
	off := (h / c.group) * c.hd
	q := c.q[i*ld+h*c.hd:][:c.hd]
	n := int(c.pos[i]) + 1
	s := make([]float64, n)
	mx := math.Inf(-1)
	for j := range s {
		k := c.ks[j/c.bt][(j%c.bt)*kvd+off:]
		for d, x := range q {
			s[j] += float64(x) * float64(f16Table[k[d]])
		}
		s[j] *= float64(scale)
		mx = math.Max(mx, s[j])
	}
	out := make([]float64, c.hd)
	sum := 0.0
	for j := range s {
		p := math.Exp(s[j] - mx)
		sum += p
		v := c.vs[j/c.bt][(j%c.bt)*kvd+off:]
		for d := range out {
			out[d] += p * float64(f16Table[v[d]])
		}
	}
	for d := range out {
		out[d] /= sum
	}
	return out
}

// BenchmarkAttendBlocksTileF32: BenchmarkAttendBlocksTile's run (16 tokens at 2,048
// positions, head size 64, groups of 4) in float32 mode, and one token decoded
// there, in ns per head and position.
func BenchmarkAttendBlocksTileF32(b *testing.B) {
	rng := rand.New(rand.NewPCG(45, 46))
	const hd, group, kvHeads, bt, first = 64, 4, 4, 16, 2032
	for _, tokens := range []int{16, 1} {
		c := newF32Case(rng, hd, group, kvHeads, bt, tokens, first)
		ld, kvd := group*kvHeads*hd, kvHeads*hd
		out := make([]float32, len(c.q))
		perHead := float64(tokens * group * kvHeads * (first + tokens/2))
		b.Run(fmt.Sprintf("tokens=%d", tokens), func(b *testing.B) {
			for b.Loop() {
				for kvh := 0; kvh < kvHeads; kvh++ {
					AttendBlocksTileF32(out[kvh*group*hd:], c.q[kvh*group*hd:], ld, hd, group, c.pos, c.ks, c.vs, kvh*hd, kvd, bt, 0.125)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*perHead), "ns/pos")
		})
	}
}

// TestAttendBlocksTileF32DirectMatchesConverting: a tile whose chunks are read from
// the binary16 cache by each query's kernel (attnChunkF32F16) gives the bits of the
// same tile converting each chunk to float32 scratch first, for tiles of 1 to 16
// queries (decode steps and short runs, GQA groups of 1 to 8), pages of 16 to 128
// positions and of 48 (chunks across pages), runs ending before, on and after chunk
// boundaries, with NaN in the cache rows past the last position (which the
// kernel reads and must mask).
func TestAttendBlocksTileF32DirectMatchesConverting(t *testing.T) {
	requireSIMD(t, "avx512") // attnF32Direct(64, 16): attnChunkF32F16AVX512
	rng := rand.New(rand.NewPCG(47, 48))
	type tc struct{ group, kvHeads, bt, tokens, first int }
	cases := []tc{
		{1, 2, 16, 1, 0}, {3, 2, 16, 1, 63}, {3, 1, 16, 1, 64}, {3, 2, 16, 1, 200}, {4, 1, 32, 1, 127},
		{2, 2, 64, 2, 95}, {8, 1, 128, 2, 300}, {3, 1, 48, 1, 150}, {4, 2, 48, 3, 61}, {1, 1, 16, 16, 17},
		{4, 1, 16, 4, 2040},
	}
	const hd = 64
	for _, c := range cases {
		fc := newF32Case(rng, hd, c.group, c.kvHeads, c.bt, c.tokens, c.first)
		n := c.first + c.tokens
		kvd := c.kvHeads * hd
		last := len(fc.ks) - 1
		for i := (n - last*c.bt) * kvd; i < len(fc.ks[last]); i++ {
			fc.ks[last][i], fc.vs[last][i] = 0x7e00, 0x7e00 // NaN
		}
		heads := c.group * c.kvHeads
		ld := heads * hd
		run := func(directMax int) []float32 {
			got := make([]float32, len(fc.q))
			for kvh := 0; kvh < c.kvHeads; kvh++ {
				o := kvh * c.group * hd
				attendBlocksTileF32(got[o:], fc.q[o:], ld, hd, c.group, fc.pos, fc.ks, fc.vs, kvh*hd, kvd, c.bt, 0.125, directMax)
			}
			return got
		}
		want, got := run(0), run(attnTileMax)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: token %d head %d out[%d] = %v direct, %v converted", c, i/ld, (i%ld)/hd, i%hd, got[i], want[i])
			}
			if math.IsNaN(float64(got[i])) {
				t.Fatalf("%+v: out[%d] is NaN", c, i)
			}
		}
	}
}

// BenchmarkAttendDecodeModes: one decode token at 2,048 cached positions, head size
// 64, 4 KV heads in GQA groups of 3 (the 125m preset's layout), in ns per head and
// position: binary16 mode (AttendBlocksTile) and float32 mode with the chunks read
// directly (the default for such tiles) or converted to scratch first, each as one
// tile per KV head ("tile") and head by head ("head", AttendBlocks and
// AttendBlocksF32's single-query tiles).
func BenchmarkAttendDecodeModes(b *testing.B) {
	rng := rand.New(rand.NewPCG(49, 50))
	const hd, group, kvHeads, bt, first = 64, 3, 4, 16, 2047
	c := newF32Case(rng, hd, group, kvHeads, bt, 1, first)
	heads, kvd := group*kvHeads, kvHeads*hd
	ld := heads * hd
	out := make([]float32, len(c.q))
	perHead := float64(heads * (first + 1))
	for _, mode := range []string{"f16", "f32-direct", "f32-convert"} {
		for _, shape := range []string{"tile", "head"} {
			directMax := attnTileMax
			if mode == "f32-convert" {
				directMax = 0
			}
			b.Run(mode+"/"+shape, func(b *testing.B) {
				for b.Loop() {
					for kvh := 0; kvh < kvHeads; kvh++ {
						o := kvh * group * hd
						if shape == "tile" {
							if mode == "f16" {
								AttendBlocksTile(out[o:], c.q[o:], ld, hd, group, c.pos, c.ks, c.vs, kvh*hd, kvd, bt, 0.125)
							} else {
								attendBlocksTileF32(out[o:], c.q[o:], ld, hd, group, c.pos, c.ks, c.vs, kvh*hd, kvd, bt, 0.125, directMax)
							}
							continue
						}
						for g := 0; g < group; g++ {
							oh := o + g*hd
							if mode == "f16" {
								AttendBlocks(out[oh:oh+hd], c.q[oh:oh+hd], c.ks, c.vs, kvh*hd, kvd, bt, first+1, 0.125)
							} else {
								attendBlocksTileF32(out[oh:], c.q[oh:], hd, hd, 1, c.pos, c.ks, c.vs, kvh*hd, kvd, bt, 0.125, directMax)
							}
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*perHead), "ns/pos")
			})
		}
	}
}

// TestFastAttnF32OnlyOnItsAssembly: float32 attention counts as fast (the engine's
// default mode for long prompts) exactly where its assembly runs, AVX-512 and head
// size 64; on AVX2, the reference kernels or another head size it does not.
func TestFastAttnF32OnlyOnItsAssembly(t *testing.T) {
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, hd := range []int{32, 64, 80, 128} {
			want := (level == "avx512" || level == "avx512vbmi") && hd == 64 // avx512vbmi: AVX-512 with VBMI
			if got := FastAttnF32(hd); got != want {
				t.Errorf("%s, head size %d: FastAttnF32 %v, want %v", level, hd, got, want)
			}
		}
		restore()
	}
}
