//go:build !purego

package kernels

import "unsafe"

// iq3sPanelTokens is panelTokens for IQ3_S's byte panels (iq3spanel.go): rows
// [lo, hi) for every token, and the first row it left (at most 3 before hi).
func (m *matMul) iq3sPanelTokens(lo, hi int) int {
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if usesIQ3SAVX2Panel(m.w.Type, nTok) {
		return m.iq3sPanelTokensAVX2(lo, hi)
	}
	if !usesPanel(m.w.Type, nTok) || hi-lo < 4 || nb == 0 {
		return lo
	}
	super := min(iqPanelSuper, max(1, iqPanelBytes/(nb*iqPanelGroup*iq3sBPSlot)))
	gw, gd := nb*iqPanelGroup*iq3sBPSlot, nb*iqPanelGroup
	buf := iq3sBPBufs.Get().(*iq3sBPBuf)
	defer iq3sBPBufs.Put(buf)
	buf.w = grow(buf.w, super*gw)
	buf.dx = grow(buf.dx, super*gd)
	_ = a.q8kB[nb*nTok*qkK-1]
	_ = a.ydT[(nb-1)*a.yds+nTok-1]
	_ = m.dst[(nTok-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	as := nTok * qkK
	dys := 4 * a.yds
	grid := (*byte)(unsafe.Pointer(&iq3sGrid[0]))
	r := lo
	for r+4 <= hi {
		n := min(super*iqPanelGroup, (hi-r)/4*4) // rows decoded
		for i := 0; i < n; i++ {
			g, s := i/iqPanelGroup, i%iqPanelGroup
			decodeIQ3SBytesAVX512(&m.w.Data[(r+i)*m.rb], nb, &buf.w[g*gw+s*iq3sBPSlot], &buf.dx[g*gd+s], grid)
		}
		for t := 0; t < nTok; t += 4 {
			t = min(t, nTok-4)
			for i := 0; i < n; i += 4 {
				g, s := i/iqPanelGroup, i%iqPanelGroup
				iq3sBytePanelAVX512r4t4(&buf.w[g*gw+s*iq3sBPSlot], &a.q8kB[t*qkK], as, &buf.dx[g*gd+s], &a.ydT[t], dys, nb, &m.dst[t*rows+r+i], 4*rows)
			}
		}
		r += n
	}
	return r
}
