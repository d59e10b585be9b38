package kernels

// Q4_K repacked for the VNNI kernels (issue 33): each group of 16 rows has its
// blocks b side by side in q4KX16Bytes, the same bytes as the 16 rows' blocks b
// in the file's layout, so a group occupies the same byte range of the matrix
// in both layouts and the repacking is done in place (one group's scratch, no
// second copy of the weights). Rows past the last whole group keep the file's
// layout. A packed block of 16 rows:
//
//	[0, 32)      f16 d of rows 0 … 15
//	[32, 64)     f16 dmin of rows 0 … 15
//	[64, 256)    the 12 scale bytes as planes: byte 64 + 16i + r is row r's scales[i]
//	[256, 2304)  the quants, 64 bytes per (chunk j < 4, group g < 8) at
//	             256 + 64(8j+g), row r's qs[32j+4g … 32j+4g+3] at 4r
//
// The kernels (dotQ4KX16AVX512t1 … t9, _asm/q4krepack.go) load 4 quant bytes of
// each of the 16 rows in one register: a token's 4 activations, broadcast,
// meet them in one VPDPBUSD, with no byte permutes and no horizontal sums, and
// the float steps run on 16 rows at once. Every output keeps dotQ4KRowGeneric's
// bits (the same exact integer sums, the same float operations per block).

// q4KX16Bytes is one block of a group of 16 packed Q4_K rows.
const q4KX16Bytes = 16 * 144

// packQ4KX16 writes the 16 rows of src (nb Q4_K blocks each, row after row) to
// dst in the packed layout; len(dst) = len(src) = 16·nb·144.
func packQ4KX16(dst, src []byte, nb int) {
	rb := nb * 144
	_, _ = dst[16*rb-1], src[16*rb-1]
	for b := 0; b < nb; b++ {
		out := dst[b*q4KX16Bytes : (b+1)*q4KX16Bytes]
		for r := 0; r < 16; r++ {
			blk := src[r*rb+b*144 : r*rb+b*144+144]
			copy(out[2*r:2*r+2], blk[0:2])
			copy(out[32+2*r:32+2*r+2], blk[2:4])
			for i := 0; i < 12; i++ {
				out[64+16*i+r] = blk[4+i]
			}
			for c := 0; c < 32; c++ { // c = 8j+g: qs[4c … 4c+3]
				copy(out[256+64*c+4*r:256+64*c+4*r+4], blk[16+4*c:16+4*c+4])
			}
		}
	}
}

// unpackQ4KX16Block writes row r's block b of the packed group grp to blk in the
// file's layout.
func unpackQ4KX16Block(blk *[144]byte, grp []byte, b, r int) {
	in := grp[b*q4KX16Bytes : (b+1)*q4KX16Bytes]
	copy(blk[0:2], in[2*r:2*r+2])
	copy(blk[2:4], in[32+2*r:32+2*r+2])
	for i := 0; i < 12; i++ {
		blk[4+i] = in[64+16*i+r]
	}
	for c := 0; c < 32; c++ {
		copy(blk[16+4*c:16+4*c+4], in[256+64*c+4*r:256+64*c+4*r+4])
	}
}

// dotQ4KX16Generic is the packed kernels' reference: row r of the packed group
// grp (nb blocks) with the blocks y, block by block as dotQ4KRowGeneric.
func dotQ4KX16Generic(grp []byte, r int, y []q8KBlock) float32 {
	var blk [144]byte
	var sum float32
	for b := range y {
		unpackQ4KX16Block(&blk, grp, b, r)
		sum += dotQ4KBlock(blk[:], &y[b])
	}
	return sum
}

// PackQ4K repacks the whole 16-row groups of a Q4_K matrix's data in place into
// the layout of the packed kernels, returning how many rows it packed (a
// multiple of 16; the rest keep the file's layout). The data must not be read
// as plain Q4_K rows afterwards: Matrix.Packed says how it is laid out.
func PackQ4K(m *Matrix) int {
	if m.Type != Q4_K || m.Cols%qkK != 0 || m.Packed > 0 {
		return m.Packed
	}
	nb := m.Cols / qkK
	g := 16 * nb * 144
	buf := make([]byte, g)
	n := m.Rows / 16 * 16
	for r := 0; r < n; r += 16 {
		grp := m.Data[r/16*g : (r/16+1)*g]
		copy(buf, grp)
		packQ4KX16(grp, buf, nb)
	}
	m.Packed = n
	return n
}

// RowInto writes row i of m in its type's plain layout to dst (RowBytes long)
// and returns it: Row's bytes, unpacked from the 16-row groups of a packed Q4_K
// matrix.
func (m Matrix) RowInto(dst []byte, i int) []byte {
	if i >= m.Packed {
		return append(dst[:0], m.Row(i)...)
	}
	nb := m.Cols / qkK
	g := 16 * nb * 144
	grp := m.Data[i/16*g : (i/16+1)*g]
	dst = grow(dst, nb*144)
	var blk [144]byte
	for b := 0; b < nb; b++ {
		unpackQ4KX16Block(&blk, grp, b, i%16)
		copy(dst[b*144:], blk[:])
	}
	return dst
}

// packedRowsGeneric computes the outputs of the packed rows [lo, hi) of m's
// matrix one row at a time: each row unpacked (RowInto) and multiplied as a plain
// row, the same bits (for levels without the packed kernels).
func (m *matMul) packedRowsGeneric(lo, hi int) {
	buf := repackBufs.Get().(*[]byte)
	defer repackBufs.Put(buf)
	for r := lo; r < hi; r++ {
		*buf = m.w.RowInto(*buf, r)
		for t := 0; t < m.nTok; t++ {
			m.dst[t*m.w.Rows+r] = dotRow(Q4_K, *buf, m.a, t)
		}
	}
}
