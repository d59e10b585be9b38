package kernels

import "sync"

// Panels of the lattice types for prompts (issue 32; llama.cpp's ggml-cpu
// iqp.cpp does the same): a group of iqPanelGroup weight rows is decoded once
// per MatMul into int16 values with the sub-block scales folded in (the
// "panel"), the tokens' Q8_K quants are widened to int16 in the same order
// (acts.q8kW), and a VNNI kernel multiplies 4 rows by 4 tokens
// (iqPanelAVX512r4t4, _asm/iqpanel.go). Each of the 8 lanes of llama.cpp's
// float order (dotIQ3SRowGeneric) is an exact integer sum of scaled products,
// whatever the order of its terms, and the float steps are the row kernel's,
// so every output has dotIQ3SRowGeneric's bits.
//
// A block of 256 values takes 256 int16 (512 bytes) per row or token: 8
// sub-blocks of 32 in turn; in each, words 2k and 2k+1 hold values 4k and
// 4k+1, words 16+2k and 17+2k values 4k+2 and 4k+3 (k < 8), so that dwords k
// and 8+k of the pairwise products (VPDPWSSD) make lane k.

// iqPanelGroup is how many rows a panel holds: block b of slot i is at
// words (b·iqPanelGroup+i)·256, its scale f16(d) at dx[b·iqPanelGroup+i].
const iqPanelGroup = 16

// iqPanelMinTokens is the fewest tokens a product takes through the panels
// (a var for BenchmarkPanelTokens): IQ3_S 1024 × 1024, one thread, CPU time
// against the row kernels, loaded: 4 tokens 0.81 and 1.04×, 6 tokens 0.70 and
// 0.68×, 8 tokens 0.80×, 16 tokens 0.55-0.72×.
var iqPanelMinTokens = 6

// panelPos[q] is the word of value q of a sub-block in its 32 words.
var panelPos = func() (p [32]uint8) {
	for q := range p {
		k, j := q/4, q%4
		if j < 2 {
			p[q] = uint8(2*k + j)
		} else {
			p[q] = uint8(16 + 2*k + j - 2)
		}
	}
	return
}()

// panelType reports whether weights of type t have a panel decoder (IQ1_S:
// its own byte panels, iq1spanel.go).
func panelType(t Type) bool {
	switch t {
	case IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ1_S, IQ1_M:
		return true
	}
	return false
}

// panelFactor is the power of two the block sums of a type whose row kernel
// takes one float step per block are scaled by (iqPanelSumAVX512r4t4), or 0
// for IQ3_S (8 float lanes, iqPanelAVX512r4t4).
func panelFactor(t Type) float32 {
	switch t {
	case IQ2_XXS, IQ2_XS, IQ2_S, IQ1_M:
		return 0.125
	case IQ3_XXS:
		return 0.25
	}
	return 0
}

// panelFactorFirst reports whether the block step of type t scales the
// integer sum before the scales' product (IQ1_M: iqPanelSumFAVX512r4t4).
func panelFactorFirst(t Type) bool { return t == IQ1_M }

// panelPut writes v as value q (< 256) of a panel block.
func panelPut(o []int16, q int, v int32) { o[q&^31+int(panelPos[q&31])] = int16(v) }

// decodePanelRow writes the nb blocks of row (of type typ) into slot i of the
// panel w and its scales dx.
//
//go:norace
func decodePanelRow(typ Type, w []int16, dx []float32, row []byte, nb, i int) {
	switch typ {
	case IQ3_S:
		decodeIQ3SPanel(w, dx, row, nb, i)
	case IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ1_M:
		bb := typ.BlockBytes()
		_ = row[nb*bb-1]
		for b := 0; b < nb; b++ {
			blk := row[b*bb : (b+1)*bb]
			if typ == IQ1_M {
				dx[b*iqPanelGroup+i] = iq1MScale(blk)
			} else {
				dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
			}
			o := w[(b*iqPanelGroup+i)*qkK : (b*iqPanelGroup+i+1)*qkK]
			switch typ {
			case IQ2_XXS:
				decodeIQ2XXSPanel(o, blk)
			case IQ2_XS:
				decodeIQ2XSPanel(o, blk)
			case IQ2_S:
				decodeIQ2SPanel(o, blk)
			case IQ3_XXS:
				decodeIQ3XXSPanel(o, blk)
			case IQ1_M:
				decodeIQ1MPanel(o, blk)
			}
		}
	default:
		panic("kernels: no panel for " + typ.String())
	}
}

// decodeIQ3SPanel is decodePanelRow for IQ3_S: value = grid byte × sign ×
// (2·scale+1), the factors of dotIQ3SRowGeneric's integer sums.
//
//go:norace
func decodeIQ3SPanel(w []int16, dx []float32, row []byte, nb, i int) {
	_ = row[nb*110-1]
	for b := 0; b < nb; b++ {
		blk := row[b*110 : (b+1)*110]
		dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
		out := w[(b*iqPanelGroup+i)*qkK : (b*iqPanelGroup+i+1)*qkK]
		for ib := 0; ib < 8; ib++ {
			sc := 2*int32(blk[106+ib/2]>>(4*(ib%2))&0xf) + 1
			o := out[32*ib : 32*ib+32]
			qh := uint32(blk[66+ib])
			for l := 0; l < 4; l++ {
				signs := blk[74+4*ib+l]
				g1 := iq3sGrid[uint32(blk[2+8*ib+2*l])|(qh<<(8-2*l))&256]
				g2 := iq3sGrid[uint32(blk[2+8*ib+2*l+1])|(qh<<(7-2*l))&256]
				for j := 0; j < 4; j++ {
					o[panelPos[8*l+j]] = int16(signed(gridByte32(g1, j), signs, j) * sc)
					o[panelPos[8*l+4+j]] = int16(signed(gridByte32(g2, j), signs, j+4) * sc)
				}
			}
		}
	}
}

// The block decoders of the types with one float step per block: value ×
// sign × the integer scale of dotIQ2XXSBlock's (…) sums, in the panels' order.

func decodeIQ2XXSPanel(o []int16, blk []byte) {
	for ib := 0; ib < 8; ib++ {
		g := blk[2+8*ib : 2+8*ib+8]
		aux := le32(g[4:])
		sc := int32(2*(aux>>28) + 1)
		for l := 0; l < 4; l++ {
			grid, signs := iq2xxsGrid[g[l]], iqSigns(aux>>(7*l))
			for j := 0; j < 8; j++ {
				panelPut(o, 32*ib+8*l+j, signed(gridByte64(grid, j), signs, j)*sc)
			}
		}
	}
}

func decodeIQ2XSPanel(o []int16, blk []byte) {
	for ib := 0; ib < 8; ib++ {
		sc := blk[66+ib]
		scs := [2]int32{int32(2*(sc&0xf) + 1), int32(2*(sc>>4) + 1)}
		for l := 0; l < 4; l++ {
			q := le16(blk[2+2*(4*ib+l):])
			grid, signs := iq2xsGrid[q&511], iqSigns(uint32(q>>9))
			for j := 0; j < 8; j++ {
				panelPut(o, 32*ib+8*l+j, signed(gridByte64(grid, j), signs, j)*scs[l/2])
			}
		}
	}
}

func decodeIQ2SPanel(o []int16, blk []byte) {
	for ib := 0; ib < 8; ib++ {
		sc := blk[74+ib]
		scs := [2]int32{int32(2*(sc&0xf) + 1), int32(2*(sc>>4) + 1)}
		for l := 0; l < 4; l++ {
			grid, signs := iq2sGrid[iq2SIndex(blk, ib, l)], blk[34+4*ib+l]
			for j := 0; j < 8; j++ {
				panelPut(o, 32*ib+8*l+j, signed(gridByte64(grid, j), signs, j)*scs[l/2])
			}
		}
	}
}

func decodeIQ3XXSPanel(o []int16, blk []byte) {
	for ib := 0; ib < 8; ib++ {
		aux := le32(blk[66+4*ib:])
		sc := int32(2*(aux>>28) + 1)
		qs := blk[2+8*ib : 2+8*ib+8]
		for l := 0; l < 4; l++ {
			signs := iqSigns(aux >> (7 * l))
			g1, g2 := iq3xxsGrid[qs[2*l]], iq3xxsGrid[qs[2*l+1]]
			for j := 0; j < 4; j++ {
				panelPut(o, 32*ib+8*l+j, signed(gridByte32(g1, j), signs, j)*sc)
				panelPut(o, 32*ib+8*l+4+j, signed(gridByte32(g2, j), signs, j+4)*sc)
			}
		}
	}
}

// decodeIQ1MPanel writes IQ1_M's ls·(8·grid + delta), with ls = 2·scale+1 of
// the value's 16 and delta = ±1 of its 8, so the block's one
// integer sum is 8·sumi1 + sumi2 of dotIQ1MBlock (|value| ≤ 135; the sum stays
// below 2^24) and float(it)·0.125 its float32(sumi1) + float32(0.125·float32(sumi2)).
func decodeIQ1MPanel(o []int16, blk []byte) {
	for ib := 0; ib < 8; ib++ {
		for l := 0; l < 4; l++ {
			grid, delta, ls := iq1MGroup(blk, ib, l)
			for j := 0; j < 8; j++ {
				panelPut(o, 32*ib+8*l+j, ls*(8*int32(int8(grid>>(8*j)))+delta))
			}
		}
	}
}

// widenQ8K fills a.q8kW from a.q8k: block b of token t at words
// (b·rows+t)·256, in the panels' order.
//
//go:norace
func (a *acts) widenQ8K(nb, rows int) {
	a.q8kW = grow(a.q8kW, nb*rows*qkK)
	for t := 0; t < rows; t++ {
		for b := 0; b < nb; b++ {
			widenPanel(a.q8kW[(b*rows+t)*qkK:(b*rows+t+1)*qkK], &a.q8k[t*nb+b].qs)
		}
	}
}

// widenPanel writes the 256 quants of a block as int16 in the panels' order.
func widenPanel(dst []int16, qs *[qkK]int8) {
	_ = dst[qkK-1]
	for s := 0; s < qkK; s += 32 {
		o, q := dst[s:s+32], qs[s:s+32]
		for k := 0; k < 8; k++ {
			o[2*k], o[2*k+1] = int16(q[4*k]), int16(q[4*k+1])
			o[16+2*k], o[17+2*k] = int16(q[4*k+2]), int16(q[4*k+3])
		}
	}
}

// panelDotGeneric is iqPanelAVX512r4t4 for one row (slot i of the panel w,
// scales dx) and one token t of rows (the widened activations aw, their
// scales ydT with stride yds): the lanes' integer sums, then the row kernel's
// float steps. The tests check the decoders and layouts with it.
func panelDotGeneric(w []int16, dx []float32, i int, aw []int16, ydT []float32, yds, rows, t, nb int) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := w[(b*iqPanelGroup+i)*qkK:]
		ab := aw[(b*rows+t)*qkK:]
		var lane [8]int32
		for s := 0; s < qkK; s += 32 {
			for k := 0; k < 8; k++ {
				for _, o := range [4]int{2 * k, 2*k + 1, 16 + 2*k, 17 + 2*k} {
					lane[k] += int32(wb[s+o]) * int32(ab[s+o])
				}
			}
		}
		d := dx[b*iqPanelGroup+i] * ydT[b*yds+t]
		for k := range acc {
			acc[k] = fmaf(d, float32(lane[k]), acc[k])
		}
	}
	return sum8(&acc)
}

// panelSumDotGeneric is iqPanelSumAVX512r4t4 for one row and token (as
// panelDotGeneric): per block sum += ((dx·dy)·float(block sum))·factor, or
// with factorFirst (dx·dy)·(float(block sum)·factor).
func panelSumDotGeneric(w []int16, dx []float32, i int, aw []int16, ydT []float32, yds, rows, t, nb int, factor float32, factorFirst bool) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb := w[(b*iqPanelGroup+i)*qkK:]
		ab := aw[(b*rows+t)*qkK:]
		var bsum int32
		for q := 0; q < qkK; q++ {
			bsum += int32(wb[q]) * int32(ab[q])
		}
		if factorFirst {
			sum += dx[b*iqPanelGroup+i] * ydT[b*yds+t] * (float32(bsum) * factor)
		} else {
			sum += dx[b*iqPanelGroup+i] * ydT[b*yds+t] * float32(bsum) * factor
		}
	}
	return sum
}

// iqPanelBuf is a worker's panel: iqPanelGroup rows' decoded blocks and scales.
type iqPanelBuf struct {
	w  []int16
	dx []float32
}

var iqPanelBufs = sync.Pool{New: func() any { return new(iqPanelBuf) }}
