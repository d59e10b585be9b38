package kernels

import "sync"

// TQ2_0's prompt panels (issue 32): like the lattice types' (iqpanel.go), a
// group of iqPanelGroup weight rows is decoded once per MatMul, here into
// bytes q (0-3: the value plus one), 256 per block in order, and a VNNI kernel
// multiplies 4 rows by 4 tokens with VPDPBUSD (unsigned q by the tokens' signed
// Q8_K quants, read from their q8KBlocks as they are), each accumulator
// started at minus the token's bsums: the block's integer sum is
// dotTQ2_0Block's Σ(q−1)·y exactly, and the float step its
// float(isum)·(f16(x.d)·y.d), so every output has the reference's bits. Half
// the instructions of the int16 panels for the same products.

// decodeTQ2Panel writes the nb TQ2_0 blocks of row into slot i of the byte
// panel w (block b at bytes (b·iqPanelGroup+i)·256) and their scales into dx:
// decodeTQ2_0BytesAVX512's reference.
func decodeTQ2Panel(w []byte, dx []float32, row []byte, nb, i int) {
	_ = row[nb*66-1]
	for b := 0; b < nb; b++ {
		blk := row[b*66 : (b+1)*66]
		dx[b*iqPanelGroup+i] = f16Table[le16(blk[64:])]
		o := w[(b*iqPanelGroup+i)*qkK : (b*iqPanelGroup+i+1)*qkK]
		for e := range o {
			o[e] = byte(q2KValue(blk, e))
		}
	}
}

// tq2PanelBuf is a worker's TQ2_0 byte panel.
type tq2PanelBuf struct {
	w  []byte
	dx []float32
}

var tq2PanelBufs = sync.Pool{New: func() any { return new(tq2PanelBuf) }}
