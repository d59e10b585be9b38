package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttendBlocksTileKVLevelsMatchGeneric: AttendBlocksTileKV over quantized
// caches gives the generic code's bits at every SIMD level (on AVX2: the
// outer-product scores of 8 positions at once, dot…AVX2x8t1..4; on AVX-512: those
// of 16 positions and attnAccumGroup…AVX512), for
// head sizes of one to eight blocks, GQA groups of 1 to 8 heads, blocks of 8 to 64
// positions, and decode positions before, at and past runs of 16 and blocks
// (the second KV head, so that rows start inside the cache rows).
func TestAttendBlocksTileKVLevelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	const kvh, n = 2, 140
	pairs := append(kvTypePairs, [2]KVType{KVQ4_0, KVQ8_0}, [2]KVType{KVF16, KVQ4_0})
	for _, pr := range pairs {
		for _, hd := range []int{32, 64, 96, 128, 256} {
			c := newKVCase(rng, pr[0], pr[1], hd, kvh, 16, n)
			for _, bt := range []int{8, 16, 24, 32, 64} {
				c.page(bt)
				for _, heads := range []int{1, 2, 3, 4, 5, 8} {
					pos := []int32{int32(rng.IntN(n))}
					if heads <= 3 {
						pos = []int32{0, 14, 15, 16, 31, 33, 63, 64, 65, n - 1}
					}
					t.Run(fmt.Sprint(pr[0], "-", pr[1], "/hd", hd, "/bt", bt, "/heads", heads), func(t *testing.T) {
						ld := heads * hd
						for _, p := range pos {
							q := make([]float32, ld)
							for i := range q {
								q[i] = float32(rng.NormFloat64()) * float32(1+i/hd%3)
							}
							var want []float32
							for _, level := range simdLevels() {
								restore := setSIMD(level)
								got := make([]float32, ld)
								AttendBlocksTileKV(got, q, ld, hd, heads, []int32{p}, c.ks, c.vs, c.kt, c.vt, c.kt.Units(hd), c.vt.Units(hd), c.kstride, c.vst, bt, 0.125)
								restore()
								if want == nil {
									want = got
									continue
								}
								for i := range got {
									if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
										t.Fatalf("%s, position %d: %v, generic %v at %d", level, p, got[i], want[i], i)
									}
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestAttendBlocksTileKVHeadsMatchesPerHead: AttendBlocksTileKVHeads, which takes
// several KV heads of a decoding token through the blocks together (a group per
// KV head, each at its own offset in the rows), gives every query head the bits
// of AttendBlocksKV over its own KV head at the generic level, at every SIMD
// level, for 1 to 5 KV heads (past a tile's four groups too), GQA groups of 1 to
// 5 (5: head by head), head sizes of one to four blocks, blocks of 8 to 64
// positions and positions before, at and past runs of 8 and 16 and blocks, the
// heads starting at the second KV head of the rows.
func TestAttendBlocksTileKVHeadsMatchesPerHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	const n = 140
	pairs := append(kvTypePairs, [2]KVType{KVQ4_0, KVQ8_0}, [2]KVType{KVF16, KVQ4_0})
	for _, pr := range pairs {
		for _, hd := range []int{32, 64, 128} {
			const kvhAll = 6
			c := newKVCase(rng, pr[0], pr[1], hd, kvhAll, 16, n)
			for _, bt := range []int{8, 16, 64} {
				c.page(bt)
				for _, kvh := range []int{1, 2, 3, 4, 5} {
					for _, group := range []int{1, 2, 3, 4, 5} {
						t.Run(fmt.Sprint(pr[0], "-", pr[1], "/hd", hd, "/bt", bt, "/kvh", kvh, "/group", group), func(t *testing.T) {
							ld := kvh * group * hd
							q := make([]float32, ld)
							for i := range q {
								q[i] = float32(rng.NormFloat64()) * float32(1+i/hd%3)
							}
							for _, p := range []int{0, 7, 8, 15, 16, 31, 33, 64, n - 1} {
								want := make([]float32, ld)
								restore := setSIMD("generic")
								for h := 0; h < kvh; h++ {
									for g := 0; g < group; g++ {
										o := (h*group + g) * hd
										c.attend(want[o:o+hd], q[o:o+hd], 1+h, p+1, 0.125)
									}
								}
								restore()
								for _, level := range simdLevels() {
									restore := setSIMD(level)
									got := make([]float32, ld)
									AttendBlocksTileKVHeads(got, q, hd, group, kvh, int32(p), c.ks, c.vs, c.kt, c.vt, c.kt.Units(hd), c.vt.Units(hd), c.kstride, c.vst, bt, 0.125)
									restore()
									for i := range got {
										if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
											t.Fatalf("%s, position %d: %v, per head %v at %d", level, p, got[i], want[i], i)
										}
									}
								}
							}
						})
					}
				}
			}
		}
	}
}
