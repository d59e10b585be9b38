package kernels

// Q6_K repacked for the 16-row kernels (issue 33), as Q4_K is (q4krepack.go):
// each group of 16 rows has its blocks b side by side in q6KX16Bytes, the same
// bytes as the 16 rows' blocks b in the file's layout. A packed block of 16 rows:
//
//	[0, 3072)     the quants, 192 bytes per (half h < 2, lane k < 8) at
//	              192(8h+k): row r's ql[64h+4k … +3] at 4r, ql[64h+32+4k … +3]
//	              at 64+4r, qh[32h+4k … +3] at 128+4r
//	[3072, 3328)  the 16 scales as planes: byte 3072 + 16j + r is row r's scales[j]
//	[3328, 3360)  f16 d of rows 0 … 15
//
// Unpacked, lane r of a loaded register holds row r's 4 quants at offsets 4k …
// 4k+3 of one 32-quant chunk: what dotQ6KRowGeneric adds into its int32 lane k.
// The kernel (dotQ6KX16AVX512t9, _asm/q6krepack.go) multiplies them with a
// token's 4 activations, broadcast, in one VPMADDUBSW and the 16 rows' scales of
// the chunk's sub-block in one VPDPWSSD: no permutes and no horizontal sums
// until sum8's at the end. Every output keeps dotQ6KRowGeneric's bits.

// q6KX16Bytes is one block of a group of 16 packed Q6_K rows.
const q6KX16Bytes = 16 * 210

// packQ6KX16 writes the 16 rows of src (nb Q6_K blocks each, row after row) to
// dst in the packed layout; len(dst) = len(src) = 16·nb·210.
func packQ6KX16(dst, src []byte, nb int) {
	rb := nb * 210
	_, _ = dst[16*rb-1], src[16*rb-1]
	for b := 0; b < nb; b++ {
		out := dst[b*q6KX16Bytes : (b+1)*q6KX16Bytes]
		for r := 0; r < 16; r++ {
			blk := src[r*rb+b*210 : r*rb+b*210+210]
			ql, qh := blk[0:128], blk[128:192]
			for h := 0; h < 2; h++ {
				for k := 0; k < 8; k++ {
					o := 192*(8*h+k) + 4*r
					copy(out[o:o+4], ql[64*h+4*k:])
					copy(out[o+64:o+68], ql[64*h+32+4*k:])
					copy(out[o+128:o+132], qh[32*h+4*k:])
				}
			}
			for j := 0; j < 16; j++ {
				out[3072+16*j+r] = blk[192+j]
			}
			copy(out[3328+2*r:3328+2*r+2], blk[208:210])
		}
	}
}

// unpackQ6KX16Block writes row r's block b of the packed group grp to blk in the
// file's layout.
func unpackQ6KX16Block(blk *[210]byte, grp []byte, b, r int) {
	in := grp[b*q6KX16Bytes : (b+1)*q6KX16Bytes]
	for h := 0; h < 2; h++ {
		for k := 0; k < 8; k++ {
			o := 192*(8*h+k) + 4*r
			copy(blk[64*h+4*k:64*h+4*k+4], in[o:o+4])
			copy(blk[64*h+32+4*k:64*h+32+4*k+4], in[o+64:o+68])
			copy(blk[128+32*h+4*k:128+32*h+4*k+4], in[o+128:o+132])
		}
	}
	for j := 0; j < 16; j++ {
		blk[192+j] = in[3072+16*j+r]
	}
	copy(blk[208:210], in[3328+2*r:3328+2*r+2])
}

// dotQ6KX16Generic is the packed kernel's reference: row r of the packed group
// grp (nb blocks) with the blocks y, as dotQ6KRowGeneric on the row unpacked.
func dotQ6KX16Generic(grp []byte, r int, y []q8KBlock) float32 {
	row := make([]byte, 210*len(y))
	var blk [210]byte
	for b := range y {
		unpackQ6KX16Block(&blk, grp, b, r)
		copy(row[210*b:], blk[:])
	}
	return dotQ6KRowGeneric(row, y)
}
