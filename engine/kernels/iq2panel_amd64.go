//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// usesIQ2Panel reports whether a product of rows tokens by weights of type wt
// goes through the IQ2 panels (iq2panel.go): AVX-512 with VNNI (and BMI2
// for the decoders' PDEP and PEXT), or AVX2 (iq2PanelsAVX2: the Go decoder
// and iq2OuterAVX2r16t4), iqPanelMinTokens tokens or more. IQ3_XXS takes the
// AVX2 byte panels too, where there are no AVX-512 panels (usesPanel's int16
// panels then): its grid values (≤ 62) fit VPMADDUBSW's pair sums as well.
func usesIQ2Panel(wt Type, rows int) bool {
	if !iq2Panels || rows < iqPanelMinTokens {
		return false
	}
	switch {
	case iq2PanelType(wt):
		return iq2PanelAVX512() || useAVX2 && iq2PanelsAVX2
	case wt == IQ3_XXS:
		return useAVX2 && iq2PanelsAVX2 && !iq2PanelAVX512()
	}
	return false
}

// iq2PanelAVX512 reports whether the IQ2 panels take the AVX-512 decoders
// and kernels.
func iq2PanelAVX512() bool { return useAVX512 && cpu.X86.HasBMI2 }

// iq2PanelsAVX2 is false to take the IQ2 types' prompts through the AVX2
// multi-token row kernels (dotLatticeRows) where there is no AVX-512
// (BenchmarkIQ2PanelAVX2's comparison).
var iq2PanelsAVX2 = true

// iq2Panels is false to take the IQ2 types through the int16 panels instead
// (BenchmarkIQ2Panel's comparison).
var iq2Panels = true

// iq2PanelTokens is panelTokens for the IQ2 family: rows [lo, hi) for every
// token, in groups of 16 rows (a last one shorter, its outputs masked), 8
// tokens a kernel call (4 for fewer than 8 tokens; the last tile overlapping
// the one before: the same bits). It leaves no row.
func (m *matMul) iq2PanelTokens(lo, hi int) int {
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if !usesIQ2Panel(m.w.Type, nTok) || nTok < 4 || nb == 0 {
		return lo
	}
	gw, gd := nb*iqPanelGroup*iq2OuterRec, nb*iqPanelGroup
	super := min(iqPanelSuper, max(1, iqPanelBytes/gw))
	buf := iq2PanelBufs.Get().(*iq2PanelBuf)
	defer iq2PanelBufs.Put(buf)
	buf.w = grow(buf.w, super*gw)
	buf.dx = grow(buf.dx, super*gd)
	_ = a.q8kO[nb*nTok*iq2OuterTok-1]
	_ = a.ydT[(nb-1)*a.yds+nTok-1]
	_ = m.dst[(nTok-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	as := nTok * iq2OuterTok
	dys := 4 * a.yds
	factor := panelFactor(m.w.Type)
	tile := 8
	if nTok < 8 {
		tile = 4
	}
	if !iq2PanelAVX512() {
		return m.iq2PanelTokensAVX2(lo, hi, buf)
	}
	for r := lo; r < hi; {
		n := min(super*iqPanelGroup, hi-r) // rows decoded
		for i := 0; i < n; i++ {
			g, s := i/iqPanelGroup, i%iqPanelGroup
			decodeIQ2OuterRowAVX512(m.w.Type, buf.w[g*gw:(g+1)*gw], buf.dx[g*gd:(g+1)*gd], m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb, s)
		}
		for t := 0; t < nTok; t += tile {
			t = min(t, nTok-tile)
			for g := 0; g*iqPanelGroup < n; g++ {
				mask := uint16(1<<min(iqPanelGroup, n-g*iqPanelGroup) - 1)
				out := &m.dst[t*rows+r+g*iqPanelGroup]
				if tile == 8 {
					iq2OuterAVX512r16t8(&buf.w[g*gw], &a.q8kO[t*iq2OuterTok], as, &buf.dx[g*gd], &a.ydT[t], dys, nb, factor, out, 4*rows, mask)
				} else {
					iq2OuterAVX512r16t4(&buf.w[g*gw], &a.q8kO[t*iq2OuterTok], as, &buf.dx[g*gd], &a.ydT[t], dys, nb, factor, out, 4*rows, mask)
				}
			}
		}
		r += n
	}
	return hi
}

// decodeIQ2OuterRowAVX512 is decodeIQ2OuterRow through the type's AVX-512
// decoder: the same bytes and scales.
func decodeIQ2OuterRowAVX512(typ Type, w []byte, dx []float32, row []byte, nb, i int) {
	_, _, _ = row[nb*typ.BlockBytes()-1], w[nb*iqPanelGroup*iq2OuterRec-1], dx[(nb-1)*iqPanelGroup+i]
	_ = w[4*i] // i < iqPanelGroup
	switch typ {
	case IQ2_XXS:
		decodeIQ2XXSOuterAVX512(&row[0], nb, &w[4*i], &dx[i], (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
	case IQ2_XS:
		decodeIQ2XSOuterAVX512(&row[0], nb, &w[4*i], &dx[i], (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
	case IQ2_S:
		decodeIQ2SOuterAVX512(&row[0], nb, &w[4*i], &dx[i], (*byte)(unsafe.Pointer(&iq2sGrid[0])))
	default:
		panic("kernels: no IQ2 panel for " + typ.String())
	}
}
