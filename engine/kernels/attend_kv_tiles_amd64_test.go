//go:build !purego

package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestScoresKVTilesMatchRowReference: scoresKV, whose runs of 8 positions go
// through the AVX2 outer-product tiles dot…AVX2x8t1..4, gives every (query,
// position) the bits of dotQ8_0RowGeneric / dotQ4_0RowGeneric times scale, over
// 1 to 4 queries, 1 to 3 blocks and 1 to 27 positions, with the quants' extremes
// in every block (K quants −128 and 127, query quants ±127: VPMADDUBSW's pairs
// at their largest) and rows at unaligned addresses, a few bytes apart.
func TestScoresKVTilesMatchRowReference(t *testing.T) {
	requireSIMD(t, "avx2")
	rng := rand.New(rand.NewPCG(81, 82))
	for _, kt := range []KVType{KVQ8_0, KVQ4_0} {
		bs := map[KVType]int{KVQ8_0: 34, KVQ4_0: 18}[kt]
		for nb := 1; nb <= 3; nb++ {
			for nq := 1; nq <= attnGroupMax; nq++ {
				for _, m := range []int{1, 7, 8, 9, 16, 23, 27} {
					kstride := (nb*bs)/2 + 3 // uint16 units; the row at offset 1
					k := make([]uint16, m*kstride+1)
					kb := unsafe.Slice((*byte)(unsafe.Pointer(&k[0])), 2*len(k))
					for j := 0; j < m; j++ {
						row := kb[2*(j*kstride+1):][:nb*bs]
						for b := 0; b < nb; b++ {
							blk := row[b*bs : (b+1)*bs]
							binary.LittleEndian.PutUint16(blk, F32ToF16(float32(rng.NormFloat64())))
							for i := 2; i < bs; i++ {
								blk[i] = byte(rng.Uint32())
							}
							if kt == KVQ8_0 && j%3 == 0 {
								for i := 2; i < bs; i++ {
									blk[i] = []byte{0x80, 0x7f}[(i+j)%2]
								}
							}
						}
					}
					var sts [attnGroupMax]kvState
					for q := 0; q < nq; q++ {
						y := sts[q].q8A[:nb]
						for b := range y {
							var sum int32
							for i := range y[b].qs {
								v := int8(rng.IntN(255) - 127)
								if (b+q)%2 == 0 {
									v = []int8{127, -127}[(i/2+q)%2]
								}
								y[b].qs[i], sum = v, sum+int32(v)
							}
							y[b].d, y[b].c = RoundF16(float32(rng.NormFloat64())), -sum
						}
					}
					var e [attnGroupMax][attnChunk]float32
					const scale = 0.125
					scoresKV(kt, k[1:], kstride, &sts[0].q8A[0], kvStateSize, nq, nb, m, scale, &e[0][0])
					for q := 0; q < nq; q++ {
						for j := 0; j < m; j++ {
							row := kb[2*(j*kstride+1):][:nb*bs]
							var want float32
							if kt == KVQ8_0 {
								want = dotQ8_0RowGeneric(row, sts[q].q8A[:nb])
							} else {
								want = dotQ4_0RowGeneric(row, sts[q].q8A[:nb])
							}
							want *= scale
							if got := e[q][j]; math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%v, %d blocks, %d queries, %d positions: query %d position %d: %v, want %v", kt, nb, nq, m, q, j, got, want)
							}
						}
					}
				}
			}
		}
	}
}
