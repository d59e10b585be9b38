package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttendBlocksTileMatchesPerQuery: every head of every token of a tile gets the
// bits of the per-query Go reference over the same positions, at every SIMD level,
// for head sizes 64 and 128 (and 72 and 8, which the assembly's chunks do not
// take), GQA groups of 1, 4 and 8 heads, tiles of 1 to 40 tokens (more than one
// tile of AttendBlocksTile's), causal counts ending on, just before and just after
// block and chunk boundaries, and paged blocks of 8 to 128 positions. Tokens with
// different counts share a tile, so a head that matches the reference does not
// depend on the others in its tile.
func TestAttendBlocksTileMatchesPerQuery(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	type tc struct{ hd, group, kvHeads, bt, tokens, first int }
	cases := []tc{
		{64, 1, 2, 16, 20, 0}, {64, 4, 2, 16, 9, 55}, {64, 8, 1, 64, 5, 126}, {64, 4, 1, 32, 40, 100},
		{128, 1, 1, 16, 17, 63}, {128, 4, 2, 64, 6, 60}, {128, 8, 1, 16, 3, 127}, {128, 1, 1, 8, 4, 7},
		{64, 1, 1, 24, 7, 45}, {64, 3, 1, 128, 6, 125}, {72, 4, 1, 16, 5, 30}, {8, 8, 2, 7, 9, 12},
		{64, 20, 1, 16, 2, 40}, // a group larger than a tile
		// AVX-512's group kernels in groups of 4, 3 and 2, fused and not: groups of
		// 4 and 3 (15 states a tile), of 4 and 2 (14), and a second tile of 2
		{64, 3, 2, 16, 11, 70}, {64, 2, 1, 32, 7, 90}, {64, 1, 1, 16, 18, 100}, {64, 4, 1, 8, 6, 33},
	}
	for _, c := range cases {
		heads := c.group * c.kvHeads
		ld, kvd := heads*c.hd, c.kvHeads*c.hd
		n := c.first + c.tokens // positions in the cache
		var ks, vs [][]uint16
		for b := 0; b*c.bt < n; b++ {
			kb, vb := make([]uint16, c.bt*kvd), make([]uint16, c.bt*kvd)
			for i := range kb {
				kb[i], vb[i] = F32ToF16(float32(rng.NormFloat64())), F32ToF16(float32(rng.NormFloat64()*2))
			}
			ks, vs = append(ks, kb), append(vs, vb)
		}
		// The rows laid out contiguously, for the reference.
		k, v := make([]uint16, n*kvd), make([]uint16, n*kvd)
		for j := 0; j < n; j++ {
			copy(k[j*kvd:(j+1)*kvd], ks[j/c.bt][(j%c.bt)*kvd:])
			copy(v[j*kvd:(j+1)*kvd], vs[j/c.bt][(j%c.bt)*kvd:])
		}
		q := make([]float32, c.tokens*ld)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		pos := make([]int32, c.tokens)
		for i := range pos {
			pos[i] = int32(c.first + i)
		}
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		want := make([]float32, len(q))
		for i := range pos {
			for h := 0; h < heads; h++ {
				o := i*ld + h*c.hd
				attnSpanReference(want[o:o+c.hd], q[o:o+c.hd], k[(h/c.group)*c.hd:], v[(h/c.group)*c.hd:], int(pos[i])+1, kvd, scale)
			}
		}
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			// The whole run as one call, and split into calls of a few tokens.
			for _, split := range []int{c.tokens, 3, 1} {
				got := make([]float32, len(q)+1)
				got[len(q)] = -7
				for i0 := 0; i0 < c.tokens; i0 += split {
					i1 := min(c.tokens, i0+split)
					for kvh := 0; kvh < c.kvHeads; kvh++ {
						o := i0*ld + kvh*c.group*c.hd
						AttendBlocksTile(got[o:], q[o:], ld, c.hd, c.group, pos[i0:i1], ks, vs, kvh*c.hd, kvd, c.bt, scale)
					}
				}
				if got[len(q)] != -7 {
					t.Fatalf("%+v %s: wrote past out", c, level)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						restore()
						t.Fatalf("%+v %s split %d: token %d head %d out[%d] = %v, per-query reference %v",
							c, level, split, i/ld, (i%ld)/c.hd, i%c.hd, got[i], want[i])
					}
				}
			}
			restore()
		}
	}
}

// BenchmarkAttendBlocksTile: a run of 16 tokens at 2,048 cached positions, head size
// 64 in groups of 4 (the 125m preset's layout rounded), through the tile and head by
// head through AttendBlocks, in ns per head and position.
func BenchmarkAttendBlocksTile(b *testing.B) {
	rng := rand.New(rand.NewPCG(33, 34))
	const hd, group, kvHeads, bt, tokens, first = 64, 4, 4, 16, 16, 2032
	heads, kvd := group*kvHeads, kvHeads*hd
	ld := heads * hd
	var ks, vs [][]uint16
	for j := 0; j < first+tokens; j += bt {
		kb, vb := make([]uint16, bt*kvd), make([]uint16, bt*kvd)
		for i := range kb {
			kb[i], vb[i] = F32ToF16(float32(rng.NormFloat64())), F32ToF16(float32(rng.NormFloat64()))
		}
		ks, vs = append(ks, kb), append(vs, vb)
	}
	q, out := make([]float32, tokens*ld), make([]float32, tokens*ld)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	pos := make([]int32, tokens)
	for i := range pos {
		pos[i] = int32(first + i)
	}
	perHead := float64(tokens * heads * (first + tokens/2))
	for _, tiled := range []bool{false, true} {
		b.Run(fmt.Sprintf("tiled=%v", tiled), func(b *testing.B) {
			for b.Loop() {
				for kvh := 0; kvh < kvHeads; kvh++ {
					if tiled {
						AttendBlocksTile(out[kvh*group*hd:], q[kvh*group*hd:], ld, hd, group, pos, ks, vs, kvh*hd, kvd, bt, 0.125)
						continue
					}
					for i := range pos {
						for g := 0; g < group; g++ {
							o := i*ld + (kvh*group+g)*hd
							AttendBlocks(out[o:o+hd], q[o:o+hd], ks, vs, kvh*hd, kvd, bt, int(pos[i])+1, 0.125)
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*perHead), "ns/pos")
		})
	}
}
