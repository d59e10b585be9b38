//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// usesTQ2Panel reports whether a product of rows tokens by TQ2_0 weights goes
// through the byte panels (tq2panel.go): AVX-512 with VNNI, iqPanelMinTokens
// tokens or more.
func usesTQ2Panel(rows int) bool {
	return useAVX512 && cpu.X86.HasBMI2 && rows >= iqPanelMinTokens
}

// tq2PanelTokens is panelTokens for TQ2_0: rows [lo, hi) for every token
// through the byte panels, and the first row it left (at most 3 before hi).
func (m *matMul) tq2PanelTokens(lo, hi int) int {
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if !usesTQ2Panel(nTok) || hi-lo < 4 || nb == 0 {
		return lo
	}
	super := min(iqPanelSuper, max(1, iqPanelBytes/(nb*iqPanelGroup*qkK)))
	gw, gd := nb*iqPanelGroup*qkK, nb*iqPanelGroup
	buf := tq2PanelBufs.Get().(*tq2PanelBuf)
	defer tq2PanelBufs.Put(buf)
	buf.w = grow(buf.w, super*gw)
	buf.dx = grow(buf.dx, super*gd)
	_ = a.q8k[nTok*nb-1]
	_ = a.ydT[(nb-1)*a.yds+nTok-1]
	_ = m.dst[(nTok-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	ts := nb * int(unsafe.Sizeof(q8KBlock{}))
	dys := 4 * a.yds
	r := lo
	for r+4 <= hi {
		n := min(super*iqPanelGroup, (hi-r)/4*4) // rows decoded
		for i := 0; i < n; i++ {
			g, s := i/iqPanelGroup, i%iqPanelGroup
			decodeTQ2_0BytesAVX512(&m.w.Data[(r+i)*m.rb], nb, &buf.w[g*gw+s*qkK], &buf.dx[g*gd+s])
		}
		for t := 0; t < nTok; t += 4 {
			t = min(t, nTok-4)
			for i := 0; i < n; i += 4 {
				g, s := i/iqPanelGroup, i%iqPanelGroup
				var out [16]float32
				tq2PanelAVX512r4t4(&buf.w[g*gw+s*qkK], (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ts, &buf.dx[g*gd+s], &a.ydT[t], dys, nb, &out[0])
				for k := 0; k < 4; k++ {
					copy(m.dst[(t+k)*rows+r+i:(t+k)*rows+r+i+4], out[4*k:4*k+4])
				}
			}
		}
		r += n
	}
	return r
}
