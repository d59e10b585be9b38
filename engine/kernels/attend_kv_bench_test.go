package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAttendDecodeKV: one decode step's attention of a GQA group (3 query
// heads of 64 over one KV head) over 2,048 cached positions in blocks of 16, the
// engine's decode shape, for each KV cache type (f16 through AttendBlocksTile, and
// as f16-f32 through AttendBlocksTileF32, the engine's AttnF32 mode: its default on
// AVX-512 for head size 64).
func BenchmarkAttendDecodeKV(b *testing.B) {
	rng := rand.New(rand.NewPCG(61, 62))
	const hd, group, n = 64, 3, 2048
	for _, v := range kvBenchVariants {
		typ := v.typ
		b.Run(v.name, func(b *testing.B) {
			c := newKVCase(rng, typ, typ, hd, 1, 16, n)
			q := make([]float32, group*hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, len(q))
			pos := []int32{n - 1}
			for b.Loop() {
				if v.f32 {
					AttendBlocksTileF32(out, q, group*hd, hd, group, pos, c.ks, c.vs, 0, c.kstride, c.bt, 0.125)
				} else {
					AttendBlocksTileKV(out, q, group*hd, hd, group, pos, c.ks, c.vs, typ, typ, 0, 0, c.kstride, c.vst, c.bt, 0.125)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*group), "ns/position")
		})
	}
}

// BenchmarkAttendDecodeKVOutOfCache: BenchmarkAttendDecodeKV's step over caches too
// large together for the last-level cache (4 caches × 4 KV heads × 8,192 positions:
// 64 MiB in f16, 34 in q8_0), each KV head's tile in turn as the engine's decode
// step runs them, so that a head's strided rows come from memory.
func BenchmarkAttendDecodeKVOutOfCache(b *testing.B) {
	const hd, group, n, kvh, caches = 64, 3, 8192, 4, 4
	for _, v := range kvBenchVariants {
		typ := v.typ
		b.Run(v.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(63, 64))
			cs := make([]*kvCase, caches)
			for i := range cs {
				cs[i] = newKVCase(rng, typ, typ, hd, kvh, 16, n)
			}
			q := make([]float32, group*hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, len(q))
			pos := []int32{n - 1}
			for b.Loop() {
				for _, c := range cs {
					for h := 0; h < kvh; h++ {
						if v.f32 {
							AttendBlocksTileF32(out, q, group*hd, hd, group, pos, c.ks, c.vs, h*hd, c.kstride, c.bt, 0.125)
							continue
						}
						AttendBlocksTileKV(out, q, group*hd, hd, group, pos, c.ks, c.vs, typ, typ, typ.Units(h*hd), typ.Units(h*hd), c.kstride, c.vst, c.bt, 0.125)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*group*kvh*caches), "ns/position")
		})
	}
}

// kvBenchVariants are the caches of the decode benchmarks: f16 in both modes,
// q8_0 and q4_0.
var kvBenchVariants = []struct {
	name string
	typ  KVType
	f32  bool
}{{"f16", KVF16, false}, {"f16-f32", KVF16, true}, {"q8_0", KVQ8_0, false}, {"q4_0", KVQ4_0, false}}
