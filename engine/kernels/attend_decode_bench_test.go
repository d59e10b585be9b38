package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAttendDecodeOutOfCache: one decode step's float32-mode attention over
// KV caches too large together for the last-level cache (24 caches of 512
// positions × 16 KV heads of 64, 48 MiB: an olmoe 1b layer's shape, GQA group 1,
// and mixtral's, group 4 with 4 KV heads), one tile per KV head as the engine's
// decode step runs it, so that the strided rows of each head come from memory.
func BenchmarkAttendDecodeOutOfCache(b *testing.B) {
	for _, sh := range []struct {
		name           string
		group, kvHeads int
		caches         int
	}{{"group1_kv16", 1, 16, 24}, {"group4_kv4", 4, 4, 96}} {
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(51, 52))
			const hd, bt, first = 64, 16, 511
			cs := make([]*f32Case, sh.caches)
			for i := range cs {
				cs[i] = newF32Case(rng, hd, sh.group, sh.kvHeads, bt, 1, first)
			}
			heads, kvd := sh.group*sh.kvHeads, sh.kvHeads*hd
			ld := heads * hd
			out := make([]float32, ld)
			for b.Loop() {
				for _, c := range cs {
					for kvh := 0; kvh < sh.kvHeads; kvh++ {
						o := kvh * sh.group * hd
						AttendBlocksTileF32(out[o:], c.q[o:], ld, hd, sh.group, c.pos, c.ks, c.vs, kvh*hd, kvd, bt, 0.125)
					}
				}
			}
			bytes := float64(sh.caches * (first + 1) * kvd * 2 * 2)
			b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/(1<<30), "GiB/s")
		})
	}
}
