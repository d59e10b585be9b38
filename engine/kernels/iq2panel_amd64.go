//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// usesIQ2Panel reports whether a product of rows tokens by weights of type wt
// goes through the IQ2 byte panels (iq2panel.go): AVX-512 with VNNI (and BMI2
// for the decoders' PDEP and PEXT), iqPanelMinTokens tokens or more.
func usesIQ2Panel(wt Type, rows int) bool {
	return iq2BytePanels && useAVX512 && cpu.X86.HasBMI2 && iq2PanelType(wt) && rows >= iqPanelMinTokens
}

// iq2BytePanels is false to take the IQ2 types through the int16 panels
// instead (BenchmarkIQ2Panel's comparison).
var iq2BytePanels = true

// iq2PanelTokens is panelTokens for the IQ2 family: rows [lo, hi) for every
// token through the byte panels, and the first row it left (at most 3 before
// hi).
func (m *matMul) iq2PanelTokens(lo, hi int) int {
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if !usesIQ2Panel(m.w.Type, nTok) || hi-lo < 4 || nb == 0 {
		return lo
	}
	gw, gd := nb*iqPanelGroup*iq2PanelBlock, nb*iqPanelGroup
	super := min(iqPanelSuper, max(1, iqPanelBytes/gw))
	buf := iq2PanelBufs.Get().(*iq2PanelBuf)
	defer iq2PanelBufs.Put(buf)
	buf.w = grow(buf.w, super*gw)
	buf.dx = grow(buf.dx, super*gd)
	buf.corr = grow(buf.corr, super*gd)
	_ = a.q8kU[nb*nTok*qkK-1]
	_ = a.ydT[(nb-1)*a.yds+nTok-1]
	_ = m.dst[(nTok-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	as := nTok * qkK
	dys := 4 * a.yds
	factor := panelFactor(m.w.Type)
	r := lo
	for r+4 <= hi {
		n := min(super*iqPanelGroup, (hi-r)/4*4) // rows decoded
		for i := 0; i < n; i++ {
			g, s := i/iqPanelGroup, i%iqPanelGroup
			decodeIQ2PanelRowAVX512(m.w.Type, buf.w[g*gw:(g+1)*gw], buf.dx[g*gd:(g+1)*gd], buf.corr[g*gd:(g+1)*gd], m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb, s)
		}
		for t := 0; t < nTok; t += 4 {
			t = min(t, nTok-4)
			for i := 0; i < n; i += 4 {
				g, s := i/iqPanelGroup, i%iqPanelGroup
				iq2PanelAVX512r4t4(&buf.w[g*gw+s*iq2PanelBlock], &a.q8kU[t*qkK], as, &buf.dx[g*gd+s], &buf.corr[g*gd+s], &a.ydT[t], dys, nb, factor, &m.dst[t*rows+r+i], 4*rows)
			}
		}
		r += n
	}
	return r
}

// decodeIQ2PanelRowAVX512 is decodeIQ2PanelRow through the type's AVX-512
// decoder: the same bytes, scales and corrections.
func decodeIQ2PanelRowAVX512(typ Type, w []byte, dx []float32, corr []int32, row []byte, nb, i int) {
	k := (nb-1)*iqPanelGroup + i
	_, _, _, _ = row[nb*typ.BlockBytes()-1], w[(k+1)*iq2PanelBlock-1], dx[k], corr[k]
	switch typ {
	case IQ2_XXS:
		decodeIQ2XXSBytesAVX512(&row[0], nb, &w[i*iq2PanelBlock], &dx[i], &corr[i], (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
	case IQ2_XS:
		decodeIQ2XSBytesAVX512(&row[0], nb, &w[i*iq2PanelBlock], &dx[i], &corr[i], (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
	case IQ2_S:
		decodeIQ2SBytesAVX512(&row[0], nb, &w[i*iq2PanelBlock], &dx[i], &corr[i], (*byte)(unsafe.Pointer(&iq2sGrid[0])))
	default:
		panic("kernels: no byte panel for " + typ.String())
	}
}
