//go:build !purego

package kernels

import "unsafe"

// iq1mPanelTokens is panelTokens for IQ1_M: rows [lo, hi) for every token
// through the byte panels (iq1mpanel.go), 4 rows by 4 tokens a kernel call;
// it returns the first row it left (at most 3 rows before hi).
func (m *matMul) iq1mPanelTokens(lo, hi int) int {
	if !usesPanel(IQ1_M, m.nTok) || hi-lo < 4 {
		return lo
	}
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if nb == 0 {
		return lo
	}
	super := min(iqPanelSuper, max(1, iqPanelBytes/(nb*iqPanelGroup*iq1mPanelBlockBytes)))
	gb := nb * iqPanelGroup
	buf := iq1mPanelBufs.Get().(*iq1mPanelBuf)
	defer iq1mPanelBufs.Put(buf)
	buf.grow(super, nb)
	_ = a.q8kU[nb*nTok*qkK-1]
	_ = a.q8kS8[nb*nTok*32-1]
	_ = a.ydT[(nb-1)*a.yds+nTok-1]
	_ = m.dst[(nTok-1)*rows+hi-1]
	ts := nb * qkK
	dys := 4 * a.yds
	r := lo
	for r+4 <= hi {
		n := min(super*iqPanelGroup, (hi-r)/4*4) // rows decoded
		for i := 0; i < n; i++ {
			g := i / iqPanelGroup
			decodeIQ1MBytePanelAVX512(buf.w[g*gb*qkK:(g+1)*gb*qkK], buf.c[g*gb*8:(g+1)*gb*8], buf.dl[g*gb*32:(g+1)*gb*32], buf.dx[g*gb:(g+1)*gb],
				m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb, i%iqPanelGroup)
		}
		for t := 0; t < nTok; t += 4 {
			t = min(t, nTok-4)
			for i := 0; i < n; i += 4 {
				g, s := i/iqPanelGroup, i%iqPanelGroup
				var out [16]float32
				iq1mPanelAVX512r4t4((*byte)(unsafe.Pointer(&buf.w[(g*gb+s)*qkK])), &buf.c[(g*gb+s)*8], &buf.dl[(g*gb+s)*32], &buf.dx[g*gb+s],
					&a.q8kU[t*ts], ts, &a.q8kS8[t*nb*32], &a.ydT[t], dys, nb, &out[0])
				for k := 0; k < 4; k++ {
					copy(m.dst[(t+k)*rows+r+i:(t+k)*rows+r+i+4], out[4*k:4*k+4])
				}
			}
		}
		r += n
	}
	return r
}

// decodeIQ1MBytePanelAVX512 is decodeIQ1MBytePanel through
// decodeIQ1MBytesAVX512: the same bytes.
func decodeIQ1MBytePanelAVX512(w []int8, c []int32, dl []int16, dx []float32, row []byte, nb, i int) {
	last := (nb-1)*iqPanelGroup + i
	_, _, _, _, _ = row[nb*56-1], w[(last|1)*qkK-1], c[last*8+7], dl[(last&^1)*32+63], dx[last]
	decodeIQ1MBytesAVX512(&row[0], nb, (*byte)(unsafe.Pointer(&w[(i&^1)*qkK+32*(i&1)])), &c[i*8], &dl[(i&^1)*32+16*(i&1)], &dx[i],
		(*byte)(unsafe.Pointer(&iq1sGrid[0])))
}
