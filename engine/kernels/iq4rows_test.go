package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIQ4RowsTokens: dotIQ4NLRows and dotIQ4XSRows (on AVX2 eight and four
// tokens at a time through dotIQ4_NLAVX2x8/x4 and dotIQ4XSAVX2x8/x4, each
// block's levels looked up once for the tokens, leftovers over the last eight
// or four again) give every token the reference's bits
// (dotIQ4NLRowGeneric, dotIQ4XSRowGeneric) on every SIMD level, for token
// counts 1 to 20, random and extreme blocks and activations, and write only
// their outputs.
func TestIQ4RowsTokens(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(93, 94))
	for _, typ := range []Type{IQ4_NL, IQ4_XS} {
		bb := typ.BlockBytes()
		for _, nb := range []int{1, 3, 8} {
			for _, wm := range []byte{0, 0xff, 0x88, 1} {
				for _, am := range []string{"quantized", "max", "min", "random"} {
					row := make([]byte, nb*bb)
					for i := range row {
						if wm == 1 {
							row[i] = byte(r.Uint32())
						} else {
							row[i] = wm
						}
					}
					for b := 0; b < nb; b++ { // a finite f16 scale
						put16(row[b*bb:], F32ToF16(float32(r.NormFloat64())))
					}
					for nTok := 1; nTok <= 20; nTok++ {
						var y8 []q8Block
						var yk []q8KBlock
						if typ == IQ4_NL {
							y8 = q8Acts(r, typ, nTok*nb, am, false)
						} else {
							yk = q8KActs(r, nTok*nb, am, false)
						}
						for _, level := range simdLevels() {
							restore := setSIMD(level)
							const guard = -12345.5
							buf := make([]float32, nTok+2)
							for i := range buf {
								buf[i] = guard
							}
							out := buf[1 : nTok+1]
							if typ == IQ4_NL {
								dotIQ4NLRows(out, row, y8, nb)
							} else {
								dotIQ4XSRows(out, row, yk, nb)
							}
							restore()
							if buf[0] != guard || buf[nTok+1] != guard {
								t.Fatalf("%v %s nb %d tokens %d: guard overwritten: %v", typ, level, nb, nTok, buf)
							}
							for tk, v := range out {
								var want float32
								if typ == IQ4_NL {
									want = dotIQ4NLRowGeneric(row, y8[tk*nb:(tk+1)*nb])
								} else {
									want = dotIQ4XSRowGeneric(row, yk[tk*nb:(tk+1)*nb])
								}
								if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
									t.Fatalf("%v %s nb %d weights %#x acts %s: token %d of %d = %v, reference %v", typ, level, nb, wm, am, tk, nTok, v, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
