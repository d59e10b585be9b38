//go:build !purego

package kernels

// iq2PanelTokensAVX2 is iq2PanelTokens on AVX2 (no AVX-512): the AVX2 panels
// (iq2AVX2Blk), decoded by decodeIQ2PanelRowAVX2, and iq2OuterAVX2r16t4 for 16 rows by 4 tokens
// a call (the last tile overlapping the one before: the same bits; a last
// group of fewer than 16 rows through a scratch tile, copied).
func (m *matMul) iq2PanelTokensAVX2(lo, hi int, buf *iq2PanelBuf) int {
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	gw, gd := nb*iq2AVX2Blk, nb*iqPanelGroup
	super := min(iqPanelSuper, max(1, iqPanelBytes/gw))
	buf.w = grow(buf.w, super*gw)
	buf.dx = grow(buf.dx, super*gd)
	as := nTok * iq2OuterTok
	dys := 4 * a.yds
	factor := panelFactor(m.w.Type)
	var part [4 * iqPanelGroup]float32
	for r := lo; r < hi; {
		n := min(super*iqPanelGroup, hi-r) // rows decoded
		for i := 0; i < n; i++ {
			g, s := i/iqPanelGroup, i%iqPanelGroup
			decodeIQ2PanelRowAVX2(m.w.Type, buf.w[g*gw:(g+1)*gw], buf.dx[g*gd:(g+1)*gd], m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb, s)
		}
		for t := 0; t < nTok; t += 4 {
			t = min(t, nTok-4)
			for g := 0; g*iqPanelGroup < n; g++ {
				k := min(iqPanelGroup, n-g*iqPanelGroup)
				if k == iqPanelGroup {
					iq2OuterAVX2r16t4(&buf.w[g*gw], &a.q8kO[t*iq2OuterTok], as, &buf.dx[g*gd], &a.ydT[t], dys, nb, factor, &m.dst[t*rows+r+g*iqPanelGroup], 4*rows)
					continue
				}
				iq2OuterAVX2r16t4(&buf.w[g*gw], &a.q8kO[t*iq2OuterTok], as, &buf.dx[g*gd], &a.ydT[t], dys, nb, factor, &part[0], 4*iqPanelGroup)
				for u := 0; u < 4; u++ {
					o := (t+u)*rows + r + g*iqPanelGroup
					copy(m.dst[o:o+k], part[u*iqPanelGroup:u*iqPanelGroup+k])
				}
			}
		}
		r += n
	}
	return hi
}
