package kernels

import (
	"math"
	"math/bits"
)

// The lattice ("i-quant") types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
// IQ1_M: groups of 8 (or 4) weights are one entry of a fixed grid (iqgrids.go,
// generated from ggml-common.h), with signs and a scale per 32 (or 16) weights.
// Decoders and dot products against Q8_K activations follow ggml's block layouts
// and its integer sums (the final factor of 1/8 or 1/4 that ggml applies to the
// whole row is applied per block here, which is exact: a power of two). There are
// no quantizers of ours for these types (llama.cpp's need an importance matrix and
// a grid search); files come from llama-quantize. All have AVX2 row kernels with
// these functions' bits (simd_amd64.go, _asm/lattice.go, _asm/iq1m2.go); IQ2_XXS, IQ2_XS, IQ2_S
// and IQ1_M also AVX-512 decoding kernels, many rows a call (iq2dec_amd64.go,
// _asm/iq2dec512.go, _asm/iq1m512.go).

// iqSigns returns the 8 signs of a group from a 7-bit index (the eighth sign makes
// the count of negatives even; ggml's ksigns_iq2xs): bit j set means negative.
func iqSigns(i uint32) uint8 {
	i &= 127
	return uint8(i) | uint8(bits.OnesCount32(i)&1)<<7
}

func gridByte64(g uint64, j int) int32 { return int32(uint8(g >> (8 * j))) }
func gridByte32(g uint32, j int) int32 { return int32(uint8(g >> (8 * j))) }

func signed(v int32, signs uint8, j int) int32 {
	if signs>>j&1 != 0 {
		return -v
	}
	return v
}

func sgnf(signs uint8, j int) float32 {
	if signs>>j&1 != 0 {
		return -1
	}
	return 1
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// ---- IQ2_XXS: d f16, then per 32 weights 8 bytes: 4 grid indices (iq2xxsGrid),
// and a uint32 holding four 7-bit sign indices and a 4-bit scale at the top.

func dequantIQ2XXS(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		g := blk[2+8*ib : 2+8*ib+8]
		aux := le32(g[4:])
		db := d * (0.5 + float32(aux>>28)) * 0.25
		for l := 0; l < 4; l++ {
			grid, signs := iq2xxsGrid[g[l]], iqSigns(aux>>(7*l))
			for j := 0; j < 8; j++ {
				y[32*ib+8*l+j] = db * float32(gridByte64(grid, j)) * sgnf(signs, j)
			}
		}
	}
}

func dotIQ2XXSBlock(blk []byte, y *q8KBlock) float32 {
	var bsum int32
	for ib := 0; ib < 8; ib++ {
		g := blk[2+8*ib : 2+8*ib+8]
		aux := le32(g[4:])
		var sumi int32
		for l := 0; l < 4; l++ {
			grid, signs := iq2xxsGrid[g[l]], iqSigns(aux>>(7*l))
			q8 := y.qs[32*ib+8*l:]
			for j := 0; j < 8; j++ {
				sumi += signed(gridByte64(grid, j)*int32(q8[j]), signs, j)
			}
		}
		bsum += sumi * int32(2*(aux>>28)+1)
	}
	return f16Table[le16(blk)] * y.d * float32(bsum) * 0.125
}

// ---- IQ2_XS: d f16, qs [32]uint16 (9-bit grid index into iq2xsGrid, 7-bit sign
// index), scales [8]byte (a 4-bit scale per 16 weights).

func dequantIQ2XS(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		sc := blk[66+ib]
		db := [2]float32{d * (0.5 + float32(sc&0xf)) * 0.25, d * (0.5 + float32(sc>>4)) * 0.25}
		for l := 0; l < 4; l++ {
			q := le16(blk[2+2*(4*ib+l):])
			grid, signs := iq2xsGrid[q&511], iqSigns(uint32(q>>9))
			for j := 0; j < 8; j++ {
				y[32*ib+8*l+j] = db[l/2] * float32(gridByte64(grid, j)) * sgnf(signs, j)
			}
		}
	}
}

func dotIQ2XSBlock(blk []byte, y *q8KBlock) float32 {
	var bsum int32
	for ib := 0; ib < 8; ib++ {
		sc := blk[66+ib]
		var sumi [2]int32
		for l := 0; l < 4; l++ {
			q := le16(blk[2+2*(4*ib+l):])
			grid, signs := iq2xsGrid[q&511], iqSigns(uint32(q>>9))
			q8 := y.qs[32*ib+8*l:]
			for j := 0; j < 8; j++ {
				sumi[l/2] += signed(gridByte64(grid, j)*int32(q8[j]), signs, j)
			}
		}
		bsum += sumi[0]*int32(2*(sc&0xf)+1) + sumi[1]*int32(2*(sc>>4)+1)
	}
	return f16Table[le16(blk)] * y.d * float32(bsum) * 0.125
}

// ---- IQ2_S: d f16, qs [32]byte (low 8 bits of 10-bit grid indices into
// iq2sGrid), signs [32]byte (one byte of signs per 8 weights), qh [8]byte (the top
// 2 bits of each index, 4 per 32 weights), scales [8]byte (4 bits per 16 weights).

func iq2SIndex(blk []byte, ib, l int) uint32 {
	return uint32(blk[2+4*ib+l]) | (uint32(blk[66+ib])<<(8-2*l))&0x300
}

func dequantIQ2S(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		sc := blk[74+ib]
		db := [2]float32{d * (0.5 + float32(sc&0xf)) * 0.25, d * (0.5 + float32(sc>>4)) * 0.25}
		for l := 0; l < 4; l++ {
			grid, signs := iq2sGrid[iq2SIndex(blk, ib, l)], blk[34+4*ib+l]
			for j := 0; j < 8; j++ {
				y[32*ib+8*l+j] = db[l/2] * float32(gridByte64(grid, j)) * sgnf(signs, j)
			}
		}
	}
}

func dotIQ2SBlock(blk []byte, y *q8KBlock) float32 {
	var bsum int32
	for ib := 0; ib < 8; ib++ {
		sc := blk[74+ib]
		var sumi [2]int32
		for l := 0; l < 4; l++ {
			grid, signs := iq2sGrid[iq2SIndex(blk, ib, l)], blk[34+4*ib+l]
			q8 := y.qs[32*ib+8*l:]
			for j := 0; j < 8; j++ {
				sumi[l/2] += signed(gridByte64(grid, j)*int32(q8[j]), signs, j)
			}
		}
		bsum += int32(2*(sc&0xf)+1)*sumi[0] + int32(2*(sc>>4)+1)*sumi[1]
	}
	return f16Table[le16(blk)] * y.d * float32(bsum) * 0.125
}

// ---- IQ3_XXS: d f16, qs [64]byte (grid indices into iq3xxsGrid, 4 weights each),
// then per 32 weights a uint32 of four 7-bit sign indices and a 4-bit scale.

func dequantIQ3XXS(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		aux := le32(blk[66+4*ib:])
		db := d * (0.5 + float32(aux>>28)) * 0.5
		qs := blk[2+8*ib : 2+8*ib+8]
		for l := 0; l < 4; l++ {
			signs := iqSigns(aux >> (7 * l))
			g1, g2 := iq3xxsGrid[qs[2*l]], iq3xxsGrid[qs[2*l+1]]
			for j := 0; j < 4; j++ {
				y[32*ib+8*l+j] = db * float32(gridByte32(g1, j)) * sgnf(signs, j)
				y[32*ib+8*l+4+j] = db * float32(gridByte32(g2, j)) * sgnf(signs, j+4)
			}
		}
	}
}

func dotIQ3XXSBlock(blk []byte, y *q8KBlock) float32 {
	var bsum int32
	for ib := 0; ib < 8; ib++ {
		aux := le32(blk[66+4*ib:])
		qs := blk[2+8*ib : 2+8*ib+8]
		var sumi int32
		for l := 0; l < 4; l++ {
			signs := iqSigns(aux >> (7 * l))
			g1, g2 := iq3xxsGrid[qs[2*l]], iq3xxsGrid[qs[2*l+1]]
			q8 := y.qs[32*ib+8*l:]
			for j := 0; j < 4; j++ {
				sumi += signed(gridByte32(g1, j)*int32(q8[j]), signs, j)
				sumi += signed(gridByte32(g2, j)*int32(q8[j+4]), signs, j+4)
			}
		}
		bsum += sumi * int32(2*(aux>>28)+1)
	}
	return f16Table[le16(blk)] * y.d * float32(bsum) * 0.25
}

// ---- IQ3_S: d f16, qs [64]byte (low 8 bits of 9-bit grid indices into iq3sGrid),
// qh [8]byte (their top bits, 8 per 32 weights), signs [32]byte, scales [4]byte (4
// bits per 32 weights, odd multiples of d).

func iq3SIndex(blk []byte, ib, k int) uint32 {
	return uint32(blk[2+8*ib+k]) | (uint32(blk[66+ib])<<(8-k))&256
}

func dequantIQ3S(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		db := d * float32(1+2*int32(blk[106+ib/2]>>(4*(ib%2))&0xf))
		for l := 0; l < 4; l++ {
			signs := blk[74+4*ib+l]
			g1, g2 := iq3sGrid[iq3SIndex(blk, ib, 2*l)], iq3sGrid[iq3SIndex(blk, ib, 2*l+1)]
			for j := 0; j < 4; j++ {
				y[32*ib+8*l+j] = db * float32(gridByte32(g1, j)) * sgnf(signs, j)
				y[32*ib+8*l+4+j] = db * float32(gridByte32(g2, j)) * sgnf(signs, j+4)
			}
		}
	}
}

func dotIQ3SBlock(blk []byte, y *q8KBlock) float32 {
	var bsum int32
	for ib := 0; ib < 8; ib++ {
		var sumi int32
		for l := 0; l < 4; l++ {
			signs := blk[74+4*ib+l]
			g1, g2 := iq3sGrid[iq3SIndex(blk, ib, 2*l)], iq3sGrid[iq3SIndex(blk, ib, 2*l+1)]
			q8 := y.qs[32*ib+8*l:]
			for j := 0; j < 4; j++ {
				sumi += signed(gridByte32(g1, j)*int32(q8[j]), signs, j)
				sumi += signed(gridByte32(g2, j)*int32(q8[j+4]), signs, j+4)
			}
		}
		bsum += sumi * (2*int32(blk[106+ib/2]>>(4*(ib%2))&0xf) + 1)
	}
	return f16Table[le16(blk)] * y.d * float32(bsum)
}

// dotIQ3SRowGeneric is ggml_vec_dot_iq3_s_q8_K (x86) bit for bit: 8 float lanes, lane k
// adding, for each block, the scaled integer products at positions 4k..4k+3 of
// its eight 32-element groups times f16(x.d)·y.d in one fused multiply-add, the
// lanes summed as sum8 (issue 32: llama.cpp's order, not one float step per
// block as dotIQ3SBlock, which the tests keep as the block reference). dotIQ3SRow
// takes it or its AVX2 form (dotIQ3SAVX2), which has its bits.
func dotIQ3SRowGeneric(row []byte, y []q8KBlock) float32 {
	var acc [8]float32
	for b := range y {
		blk := row[b*110 : (b+1)*110]
		var lane [8]int32
		for ib := 0; ib < 8; ib++ {
			sc := 2*int32(blk[106+ib/2]>>(4*(ib%2))&0xf) + 1
			for l := 0; l < 4; l++ {
				signs := blk[74+4*ib+l]
				g1, g2 := iq3sGrid[iq3SIndex(blk, ib, 2*l)], iq3sGrid[iq3SIndex(blk, ib, 2*l+1)]
				q8 := y[b].qs[32*ib+8*l:]
				var s1, s2 int32
				for j := 0; j < 4; j++ {
					s1 += signed(gridByte32(g1, j)*int32(q8[j]), signs, j)
					s2 += signed(gridByte32(g2, j)*int32(q8[j+4]), signs, j+4)
				}
				lane[2*l] += s1 * sc
				lane[2*l+1] += s2 * sc
			}
		}
		d := f16Table[le16(blk)] * y[b].d
		for k := range acc {
			acc[k] = float32(math.FMA(float64(d), float64(lane[k]), float64(acc[k])))
		}
	}
	return sum8(&acc)
}

// ---- IQ1_S: d f16, qs [32]byte (low 8 bits of 11-bit indices into iq1sGrid),
// qh [8]uint16 (per 32 weights: the indices' top 3 bits ×4, a 3-bit scale, and the
// sign of a shift of ±1/8 added to every grid value).

const iq1Delta = 0.125

func iq1Grid(i uint32) uint64 { return iq1sGrid[i&2047] }

func dequantIQ1S(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		h := uint32(le16(blk[34+2*ib:]))
		dl := d * float32(2*(h>>12&7)+1)
		delta := float32(iq1Delta)
		if h&0x8000 != 0 {
			delta = -iq1Delta
		}
		for l := 0; l < 4; l++ {
			grid := iq1Grid(uint32(blk[2+4*ib+l]) | (h>>(3*l)&7)<<8)
			for j := 0; j < 8; j++ {
				y[32*ib+8*l+j] = dl * (float32(int8(grid>>(8*j))) + delta)
			}
		}
	}
}

// ---- IQ1_M: qs [32]byte (low 8 bits of the grid indices), qh [16]byte (per 8
// weights 4 bits: the index's top 3 bits and the shift's sign), scales [8]byte
// (four uint16: 3-bit scales per 16 weights in the low 12 bits of each, and the
// f16 super-block scale in their top 4 bits).

func iq1MScale(blk []byte) float32 {
	sc := blk[48:56]
	s0, s1, s2, s3 := le16(sc), le16(sc[2:]), le16(sc[4:]), le16(sc[6:])
	return f16Table[s0>>12|(s1>>8)&0x00f0|(s2>>4)&0x0f00|s3&0xf000]
}

// iq1MGroup returns the grid entry and the shift's sign (±1) of group l (0..3) of
// the 32 weights ib, and the 3-bit scale of its 16 weights.
func iq1MGroup(blk []byte, ib, l int) (grid uint64, delta int32, ls int32) {
	qh := blk[32+2*ib+l/2]
	if l%2 == 1 {
		qh >>= 4
	}
	grid = iq1Grid(uint32(blk[4*ib+l]) | uint32(qh&7)<<8)
	delta = 1
	if qh&8 != 0 {
		delta = -1
	}
	sc := le16(blk[48+2*(ib/2):])
	ls = 2*int32(sc>>(6*(ib%2)+3*(l/2))&7) + 1
	return
}

func dequantIQ1M(y []float32, blk []byte) {
	d := iq1MScale(blk)
	for ib := 0; ib < 8; ib++ {
		for l := 0; l < 4; l++ {
			grid, delta, ls := iq1MGroup(blk, ib, l)
			dl := d * float32(ls)
			for j := 0; j < 8; j++ {
				y[32*ib+8*l+j] = dl * (float32(int8(grid>>(8*j))) + float32(delta)*iq1Delta)
			}
		}
	}
}

func dotIQ1MBlock(blk []byte, y *q8KBlock) float32 {
	var sumi1, sumi2 int32
	for ib := 0; ib < 8; ib++ {
		for l := 0; l < 4; l++ {
			grid, delta, ls := iq1MGroup(blk, ib, l)
			q8 := y.qs[32*ib+8*l:]
			var lsum1, lsum2 int32
			for j := 0; j < 8; j++ {
				lsum1 += int32(q8[j]) * int32(int8(grid>>(8*j)))
				lsum2 += int32(q8[j])
			}
			sumi1 += lsum1 * ls
			sumi2 += lsum2 * delta * ls
		}
	}
	return iq1MScale(blk) * y.d * (float32(sumi1) + float32(iq1Delta*float32(sumi2))) // (no fused multiply-add)
}
