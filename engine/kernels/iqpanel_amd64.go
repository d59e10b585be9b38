//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// iqPanelSuper is the most groups panelTokens decodes at a time, iqPanelBytes
// about the most bytes of panel it decodes at a time.
const (
	iqPanelSuper = 4
	iqPanelBytes = 512 << 10
)

// usesPanel reports whether a product of rows tokens by weights of type wt
// goes through the panels (iqpanel.go): AVX-512 with VNNI (and BMI2, whose
// PDEP and PEXT the decoders of the IQ2 types and IQ3_XXS take),
// iqPanelMinTokens tokens or more; the IQ2 types take byte panels instead
// (usesIQ2Panel).
func usesPanel(wt Type, rows int) bool {
	return useAVX512 && cpu.X86.HasBMI2 && panelType(wt) && !(iq2Panels && iq2PanelType(wt)) && rows >= iqPanelMinTokens
}

// panelTokens computes rows [lo, hi) for every token through the panels,
// iqPanelGroup rows decoded at a time (fewer for the last), 4 rows by 4
// tokens a kernel call (a last 1-3 tokens with the 4 before them again: the
// same bits), and returns the first row it left (at most 3 rows before hi).
func (m *matMul) panelTokens(lo, hi int) int {
	switch m.w.Type {
	case TQ2_0:
		return m.tq2PanelTokens(lo, hi)
	case IQ1_S:
		return m.iq1sPanelTokens(lo, hi)
	}
	if usesIQ1MBytes(m.w.Type) {
		return m.iq1mPanelTokens(lo, hi)
	}
	if useIQ3SBytes(m.w.Type) {
		return m.iq3sPanelTokens(lo, hi)
	}
	if usesIQ2Panel(m.w.Type, m.nTok) {
		return m.iq2PanelTokens(lo, hi)
	}
	if !usesPanel(m.w.Type, m.nTok) || hi-lo < 4 {
		return lo
	}
	a, rows, nTok := m.a, m.w.Rows, m.nTok
	nb := a.cols / qkK
	if nb == 0 {
		return lo
	}
	// Up to iqPanelSuper groups decoded at a time (a panel of about
	// iqPanelBytes), each token tile then meeting all their rows while it is
	// in cache: for the 1b shape's 512-token prompts the tokens' widened
	// quants (2 MiB to 8 MiB) come from memory once per panel.
	super := min(iqPanelSuper, max(1, iqPanelBytes/(nb*iqPanelGroup*qkK*2)))
	gw, gd := nb*iqPanelGroup*qkK, nb*iqPanelGroup
	buf := iqPanelBufs.Get().(*iqPanelBuf)
	defer iqPanelBufs.Put(buf)
	buf.w = grow(buf.w, super*gw)
	buf.dx = grow(buf.dx, super*gd)
	_ = a.q8kW[nb*nTok*qkK-1]
	_ = a.ydT[(nb-1)*a.yds+nTok-1]
	_ = m.dst[(nTok-1)*rows+hi-1]
	as := nTok * qkK * 2
	dys := 4 * a.yds
	factor := panelFactor(m.w.Type)
	r := lo
	for r+4 <= hi {
		n := min(super*iqPanelGroup, (hi-r)/4*4) // rows decoded
		for i := 0; i < n; i++ {
			g := i / iqPanelGroup
			decodePanelRowAVX512(m.w.Type, buf.w[g*gw:(g+1)*gw], buf.dx[g*gd:(g+1)*gd], m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb, i%iqPanelGroup)
		}
		for t := 0; t < nTok; t += 4 {
			t = min(t, nTok-4)
			for i := 0; i < n; i += 4 {
				g, s := i/iqPanelGroup, i%iqPanelGroup
				pw, pd := &buf.w[g*gw+s*qkK], &buf.dx[g*gd+s]
				if factor == 0 {
					iqPanelAVX512r4t4(pw, &a.q8kW[t*qkK], as, pd, &a.ydT[t], dys, nb, &m.dst[t*rows+r+i], 4*rows)
					continue
				}
				var out [16]float32
				if panelFactorFirst(m.w.Type) {
					iqPanelSumFAVX512r4t4(pw, &a.q8kW[t*qkK], as, pd, &a.ydT[t], dys, nb, factor, &out[0])
				} else {
					iqPanelSumAVX512r4t4(pw, &a.q8kW[t*qkK], as, pd, &a.ydT[t], dys, nb, factor, &out[0])
				}
				for k := 0; k < 4; k++ {
					copy(m.dst[(t+k)*rows+r+i:(t+k)*rows+r+i+4], out[4*k:4*k+4])
				}
			}
		}
		r += n
	}
	return r
}

// decodePanelRowAVX512 is decodePanelRow through the type's AVX-512 decoder:
// the same values.
func decodePanelRowAVX512(typ Type, w []int16, dx []float32, row []byte, nb, i int) {
	_, _, _ = row[nb*typ.BlockBytes()-1], w[((nb-1)*iqPanelGroup+i+1)*qkK-1], dx[(nb-1)*iqPanelGroup+i]
	switch typ {
	case IQ3_S:
		decodeIQ3SPanelAVX512(&row[0], nb, &w[i*qkK], &dx[i], (*byte)(unsafe.Pointer(&iq3sGrid[0])))
	case IQ2_XXS:
		decodeIQ2XXSPanelAVX512(&row[0], nb, &w[i*qkK], &dx[i], (*byte)(unsafe.Pointer(&iq2xxsGrid[0])))
	case IQ2_XS:
		decodeIQ2XSPanelAVX512(&row[0], nb, &w[i*qkK], &dx[i], (*byte)(unsafe.Pointer(&iq2xsGrid[0])))
	case IQ2_S:
		decodeIQ2SPanelAVX512(&row[0], nb, &w[i*qkK], &dx[i], (*byte)(unsafe.Pointer(&iq2sGrid[0])))
	case IQ3_XXS:
		decodeIQ3XXSPanelAVX512(&row[0], nb, &w[i*qkK], &dx[i], (*byte)(unsafe.Pointer(&iq3xxsGrid[0])))
	case IQ1_M:
		decodeIQ1MPanelAVX512(&row[0], nb, &w[i*qkK], &dx[i], (*byte)(unsafe.Pointer(&iq1sGrid[0])))
	default:
		decodePanelRow(typ, w, dx, row, nb, i)
	}
}
