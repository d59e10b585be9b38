package main

import (
	"encoding/binary"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ3_S's grid indices on AVX2 (issue 32), as ggml_vec_dot_iq3_s_q8_K finds
// them: the eight 9-bit indices of a group in one ymm (the low bytes
// zero-extended, each one's ninth bit shifted out of the group's qh byte by
// VPSLLVD), stored to the stack and read back one at a time for the grid
// loads, rather than five scalar instructions an index. The same indices,
// so the same bits.

var iq3sIdxShift, iq3sIdxMask Mem

func iq3sIdxConstants() {
	var sh, mk []byte
	for k := 0; k < 8; k++ {
		sh = binary.LittleEndian.AppendUint32(sh, uint32(8-k)) // bit k of qh to bit 8
		mk = binary.LittleEndian.AppendUint32(mk, 256)
	}
	iq3sIdxShift = rodata("iq3sIdxShift", sh)
	iq3sIdxMask = rodata("iq3sIdxMask", mk)
}

// iq3sGather returns the eight grid entries of IQ3_S group ib of the block at
// x (gather4's layout), through local (32 bytes of the frame).
func iq3sGather(x, grid GPVirtual, ib int, local Mem) VecVirtual {
	idx, h := YMM(), YMM()
	VPMOVZXBD(Mem{Base: x, Disp: 2 + 8*ib}, idx)
	VPBROADCASTD(Mem{Base: x, Disp: 66 + ib}, h) // qh[ib] in the low byte (ib ≤ 7: inside the block)
	VPSLLVD(iq3sIdxShift, h, h)
	VPAND(iq3sIdxMask, h, h)
	VPOR(h, idx, idx)
	VMOVDQU(idx, local)
	return gather4(grid, func(k int) GPVirtual {
		r := GP64()
		MOVL(local.Offset(4*k), r.As32())
		return r
	})
}
