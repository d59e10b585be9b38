package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttendDecodeKV: one decode step's attention of a GQA group (3 query
// heads of 64 over one KV head) over 2,048 cached positions in blocks of 16, the
// engine's decode shape, for each KV cache type (f16 through AttendBlocksTile).
func BenchmarkAttendDecodeKV(b *testing.B) {
	rng := rand.New(rand.NewPCG(61, 62))
	const hd, group, n = 64, 3, 2048
	for _, typ := range []KVType{KVF16, KVQ8_0, KVQ4_0} {
		b.Run(fmt.Sprint(typ), func(b *testing.B) {
			c := newKVCase(rng, typ, typ, hd, 1, 16, n)
			q := make([]float32, group*hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, len(q))
			pos := []int32{n - 1}
			for b.Loop() {
				AttendBlocksTileKV(out, q, group*hd, hd, group, pos, c.ks, c.vs, typ, typ, 0, 0, c.kstride, c.vst, c.bt, 0.125)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*group), "ns/position")
		})
	}
}
