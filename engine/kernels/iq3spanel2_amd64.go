//go:build !purego

package kernels

// usesIQ3SAVX2Panel reports whether a product of rows tokens by IQ3_S weights
// goes through the AVX2 byte panels (iq3spanel2.go): AVX2 where the AVX-512
// panels are not taken, iq3sAVX2MinTokens tokens or more.
func usesIQ3SAVX2Panel(wt Type, rows int) bool {
	return wt == IQ3_S && iq3sPanelsAVX2 && useAVX2 && !usesPanel(wt, rows) && rows >= max(iqPanelMinTokens, iq3sAVX2MinTokens)
}

// iq3sAVX2MinTokens is the fewest tokens the AVX2 panels take: the Go
// decoder costs about what 20-25 tokens through the four-token row kernels
// do (BenchmarkIQ3SAVX2Panels, 2048 × 2048, Zen 5 at the AVX2 level, loaded,
// panels against rows: 8 tokens 4.2 against 1.3 cpu-ms, 32 tokens 5.3
// against 5.0 (1.05×), 128 tokens 11.5 against 20.1), so the panels pay from
// about 38 tokens.
var iq3sAVX2MinTokens = 40

// iq3sAVX2TokBytes is about the most bytes of quants a token chunk of
// iq3sPanelTokensAVX2 takes.
var iq3sAVX2TokBytes = 128 << 10

// iq3sPanelTokensAVX2 is iq3sPanelTokens on AVX2: rows [lo, hi) for every
// token, up to iqPanelSuper groups decoded at a time, iq3sPanelAVX2r4t3 for 4
// rows by 3 tokens a call (a last 1-2 tokens with the ones before them
// again: the same bits), and the first row it left (at most 3 before hi).
func (m *matMul) iq3sPanelTokensAVX2(lo, hi int) int {
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if hi-lo < 4 || nb == 0 || nTok < 3 {
		return lo
	}
	gw, gd := nb*iqPanelGroup*iq3sAVX2Slot, nb*iqPanelGroup
	super := min(iqPanelSuper, max(1, iqPanelBytes/gw))
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
	tc := max(3, iq3sAVX2TokBytes/(nb*qkK)/3*3)
	r := lo
	for r+4 <= hi {
		n := min(super*iqPanelGroup, (hi-r)/4*4) // rows decoded
		for i := 0; i < n; i++ {
			g, s := i/iqPanelGroup, i%iqPanelGroup
			decodeIQ3SPanelRowAVX2(buf.w[g*gw:(g+1)*gw], buf.dx[g*gd:(g+1)*gd], m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb, s)
		}
		// A chunk of tokens (about iq3sAVX2TokBytes of quants, in L2) meets
		// 4 rows at a time (their panel in L1) token tile by token tile.
		for t0 := 0; t0 < nTok; t0 += tc {
			t1 := min(nTok, t0+tc)
			for i := 0; i < n; i += 4 {
				g, s := i/iqPanelGroup, i%iqPanelGroup
				for t := t0; t < t1; t += 3 {
					t = min(t, t1-3)
					iq3sPanelAVX2r4t3(&buf.w[g*gw+s*iq3sAVX2Slot], &a.q8kB[t*qkK], as, &buf.dx[g*gd+s], &a.ydT[t], dys, nb, &m.dst[t*rows+r+i], 4*rows)
				}
			}
		}
		r += n
	}
	return r
}
