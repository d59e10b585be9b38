//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The tile kernels (AVX-512). Q4_K: 8 weight rows against one token
// (decoding), one row against 16, 8 or 4 tokens (a prompt). Q8_0 and Q4_0: 16
// rows against 1, 4, 8 or 16 tokens, as outer products (Q5_0: 16 rows against one
// token; IQ4_XS: 16 rows against 4, 8 or 16 tokens; Q2_K: against 16, 8, 4 or
// 1). Every output has the bits of the single-row kernel (and, but for Q4_K's own
// order, of the reference). Q6_K, Q5_K and Q3_K keep llama.cpp's 8-lane float
// order (issue 32), which tiles of one float per row and token cannot, and take
// the AVX-512 row kernel (Q6_K: dotQ6KAVX512; one row against 16 or 8 tokens,
// dotQ6KAVX512x16, x8) and the several-token kernels of one row (AVX2: one, two,
// four or eight tokens; Q3_K: AVX-512 too, dotQ3KAVX512x8 and x4) instead.
// Q4_1 and Q5_1 keep that order in 16-row tiles of their own, for 1 and 2
// tokens (dotQ4_1AVX512x16t1, t2; Q5_1's): one register per lane of the 8, each
// holding that lane for the 16 rows, so the float steps still run 16 rows at a
// time (lanesTokens, fastRows).

// useVNNI16 selects dotQ4KAVX512r1t16p over dotQ4KAVX512r1t16m for Q4_K's
// 16-token chunks (AVX-512 VBMI for VPERMI2B; VNNI is part of useAVX512).
var useVNNI16 = useAVX512 && cpu.X86.HasAVX512VBMI

type tileKernel func(x *byte, rb int, y *byte, ys int, yd *float32, yds int, nb int, out *float32, os int)

type outerKernel func(x *byte, rb int, y *byte, ys int, nb int, out *float32, os int)

var (
	outerQ8_0 = [4]outerKernel{dotQ8_0AVX512x16t16, dotQ8_0AVX512x16t8, dotQ8_0AVX512x16t4, dotQ8_0AVX512x16t1}
	// outerQ8_0F: the same with the fused step, for IQ4_NL repacked into Q8_0.
	outerQ8_0F = [4]outerKernel{dotQ8_0FAVX512x16t16, dotQ8_0FAVX512x16t8, dotQ8_0FAVX512x16t4, dotQ8_0FAVX512x16t1}
	outerQ4_0  = [4]outerKernel{dotQ4_0AVX512x16t16, dotQ4_0AVX512x16t8, dotQ4_0AVX512x16t4, dotQ4_0AVX512x16t1}
	// Q5_0 decodes through its own kernel (one token); prompts are repacked into
	// Q8_0 (repack.go).
	outerQ5_0 = [4]outerKernel{3: dotQ5_0AVX512x16t1}
	// IQ4_NL likewise (its levels + 128 against the Q8_0 activations' c = −128·Σy).
	outerIQ4NL = [4]outerKernel{3: dotIQ4_NLAVX512x16t1}
	noOuter    [4]outerKernel

	// Q4_1 and Q5_1 in llama.cpp's 8-lane order: 16 rows by 2 and 1 tokens
	// (lanesTokens, fastRows), one register per lane of the 8.
	lanesQ4_1 = [2]outerKernel{dotQ4_1AVX512x16t2, dotQ4_1AVX512x16t1}
	lanesQ5_1 = [2]outerKernel{dotQ5_1AVX512x16t2, dotQ5_1AVX512x16t1}

	// IQ4_XS and Q2_K: 16 rows by 16, 8 and 4 tokens of Q8_K activations.
	outerIQ4XS = [3]outerKernel{dotIQ4XSAVX512x16t16, dotIQ4XSAVX512x16t8, dotIQ4XSAVX512x16t4}
	outerQ2K   = [3]outerKernel{dotQ2KAVX512x16t16, dotQ2KAVX512x16t8, dotQ2KAVX512x16t4}
)

// outerKernels returns the Q8_0 or Q4_0 kernels for 16 rows by 16, 8, 4 and
// 1 tokens (Q5_0 and IQ4_NL: 1 token only), or nils. Their activations are q8Blocks.
func outerKernels(t Type) *[4]outerKernel {
	switch t {
	case Q8_0:
		return &outerQ8_0
	case Q4_0:
		return &outerQ4_0
	case Q5_0:
		return &outerQ5_0
	case IQ4_NL:
		return &outerIQ4NL
	}
	return &noOuter
}

// lanesKernels returns the 16-row kernels in llama.cpp's 8-lane order for 2 and
// 1 tokens (Q4_1, Q5_1), or nil.
func lanesKernels(t Type) *[2]outerKernel {
	switch t {
	case Q4_1:
		return &lanesQ4_1
	case Q5_1:
		return &lanesQ5_1
	}
	return nil
}

// kOuterKernels returns the IQ4_XS or Q2_K kernels for 16 rows by 16, 8 and 4
// tokens, or nil.
func kOuterKernels(t Type) *[3]outerKernel {
	switch t {
	case IQ4_XS:
		return &outerIQ4XS
	case Q2_K:
		return &outerQ2K
	}
	return nil
}

// actBlock is the address of activation block i of a's 32-element blocks (q8 or,
// for Q4_1 and Q5_1, q81: both 40 bytes).
func (a *acts) actBlock(i int) *byte {
	if a.typ == Q8_1 {
		return (*byte)(unsafe.Pointer(&a.q81[i]))
	}
	return (*byte)(unsafe.Pointer(&a.q8[i]))
}

// fastRows computes dst[r] for the rows of [lo, hi) it has a multi-row kernel for
// (one token), and returns the first row it left.
func (m *matMul) fastRows(lo, hi int) int {
	if useAVX2 && (m.w.Type == Q4_1 || m.w.Type == Q5_1) {
		if ks := lanesKernels(m.w.Type); useAVX512 && m.a.cols >= qk0 {
			nb := m.a.cols / qk0
			m.a.checkBlocks(nb)
			y := m.a.actBlock(0)
			for ; lo+16 <= hi; lo += 16 {
				_ = m.w.Data[(lo+16)*m.rb-1]
				_ = m.dst[lo+15]
				ks[1](&m.w.Data[lo*m.rb], m.rb, y, 0, nb, &m.dst[lo], 0)
			}
		}
		return m.qx1Rows(lo, hi)
	}
	if !useAVX512 {
		return lo
	}
	if m.w.Type == BF16 {
		return m.bf16DPRows(lo, hi)
	}
	if m.w.Type == F16 {
		return m.f16Rows(lo, hi)
	}
	if r := m.latticeDecRows(lo, hi); r > lo {
		return r
	}
	r := lo
	if ks := outerKernels(m.w.Type); ks[3] != nil {
		nb := m.a.cols / qk0
		m.a.checkBlocks(nb)
		y := m.a.actBlock(0)
		for ; r+16 <= hi; r += 16 {
			_ = m.w.Data[(r+16)*m.rb-1]
			_ = m.dst[r+15]
			ks[3](&m.w.Data[r*m.rb], m.rb, y, 0, nb, &m.dst[r], 0)
		}
		return r
	}
	if m.w.Type == Q2_K {
		// 16 rows at a time through the outer-product kernel's one-token form.
		nb := m.a.cols / qkK
		y := (*byte)(unsafe.Pointer(&m.a.q8k[0]))
		_ = m.a.q8k[nb-1]
		for ; r+16 <= hi; r += 16 {
			_ = m.w.Data[(r+16)*m.rb-1]
			_ = m.dst[r+15]
			dotQ2KAVX512x16t1(&m.w.Data[r*m.rb], m.rb, y, 0, nb, &m.dst[r], 0)
		}
		return r
	}
	var k tileKernel
	switch m.w.Type {
	case Q4_K:
		k = dotQ4KAVX512r8t1
	default:
		return lo
	}
	nb := m.a.cols / qkK
	y := (*byte)(unsafe.Pointer(&m.a.q8k[0]))
	_ = m.a.q8k[nb-1]
	for ; r+8 <= hi; r += 8 {
		_ = m.w.Data[(r+8)*m.rb-1]
		_ = m.dst[r+7]
		k(&m.w.Data[r*m.rb], m.rb, y, 0, nil, 0, nb, &m.dst[r], 0)
	}
	return r
}

// qx1Rows is fastRows for Q4_1 and Q5_1 (AVX2, and with AVX-512 too): four rows
// a call through dotQ4_1AVX2r4 or dotQ5_1AVX2r4, each output the one-row
// kernel's bits.
func (m *matMul) qx1Rows(lo, hi int) int {
	nb := m.a.cols / qk0
	if nb == 0 {
		return lo
	}
	_ = m.a.q81[nb-1]
	y := (*byte)(unsafe.Pointer(&m.a.q81[0]))
	k := dotQ4_1AVX2r4
	if m.w.Type == Q5_1 {
		k = dotQ5_1AVX2r4
	}
	r := lo
	for ; r+4 <= hi; r += 4 {
		_ = m.w.Data[(r+4)*m.rb-1]
		_ = m.dst[r+3]
		k(&m.w.Data[r*m.rb], m.rb, y, nb, &m.dst[r])
	}
	return r
}

// tiles reports whether fastTokens has kernels for the matrix's type.
func (m *matMul) tiles() bool {
	return useAVX512 && (outerKernels(m.w.Type)[0] != nil || kOuterKernels(m.w.Type) != nil || lanesKernels(m.w.Type) != nil || m.w.Type == Q4_K)
}

// checkBlocks panics unless a holds n blocks of 32 elements (q8 or q81).
func (a *acts) checkBlocks(n int) {
	if a.typ == Q8_1 {
		_ = a.q81[n-1]
	} else {
		_ = a.q8[n-1]
	}
}

// fastTokens computes the outputs of rows [r, r+n) for tokens [t0, t0+nt) if it
// has kernels for the rows' type, and returns n (0: it has none). hi bounds the
// rows it may take.
func (m *matMul) fastTokens(r, hi, t0, nt int) int {
	if m.w.Type == F32 || !useAVX512 && (m.w.Type == F16 || m.w.Type == BF16) {
		return m.f32Tokens(r, hi, t0, nt)
	}
	if !useAVX512 {
		if useAVX2 && (m.w.Type == Q8_0 || m.w.Type == Q4_0 || m.w.Type == Q5_0) {
			return m.dot0Tiles(r, hi, t0, nt)
		}
		return 0
	}
	if n := m.floatTokens(r, hi, t0, nt); n > 0 {
		return n
	}
	a, rows := m.a, m.w.Rows
	t, end := t0, t0+nt
	_ = m.dst[(end-1)*rows+hi-1]
	if ks := outerKernels(m.w.Type); ks[0] != nil {
		if r+16 > hi {
			return 0
		}
		nb := a.cols / qk0
		_ = m.w.Data[(r+16)*m.rb-1]
		a.checkBlocks(end * nb)
		ys := nb * int(unsafe.Sizeof(q8Block{}))
		for i, n := range [...]int{16, 8, 4, 1} {
			if n == 1 && end-t > 1 && end >= 4 {
				// Two or three tokens left: the last four through the 4-token
				// kernel (again for some, with the same bits).
				t = end - 4
				ks[2](&m.w.Data[r*m.rb], m.rb, a.actBlock(t*nb), ys, nb, &m.dst[t*rows+r], rows)
				break
			}
			for ; t+n <= end; t += n {
				ks[i](&m.w.Data[r*m.rb], m.rb, a.actBlock(t*nb), ys, nb, &m.dst[t*rows+r], rows)
			}
		}
		return 16
	}
	if m.w.Type == Q4_K && nt < tokChunk && nt >= vnniMinTokens && useVNNI16 && len(a.bsT) > 0 {
		if nt < len(q4KVNNIp2) && r+2 <= hi {
			m.q4KRowsVNNI2(r, t0, nt)
			return 2
		}
		m.q4KRowVNNI(r, t0, nt)
		return 1
	}
	if m.w.Type == Q4_K && nt < tokChunk && r+4 <= hi {
		m.q4KRows4(r, t0, nt)
		return 4
	}
	if ks := kOuterKernels(m.w.Type); ks != nil {
		return m.kOuterTokens(ks, r, hi, t0, end)
	}
	if ks := lanesKernels(m.w.Type); ks != nil {
		return m.lanesTokens(ks, r, hi, t, end)
	}
	var ks [3]tileKernel
	var one func([]byte, []q8KBlock) float32
	switch m.w.Type {
	case Q4_K:
		ks, one = [3]tileKernel{dotQ4KAVX512r1t16, dotQ4KAVX512r1t8, dotQ4KAVX512r1t4}, dotQ4KRow
	default:
		return 0
	}
	nb := a.cols / qkK
	row := m.w.Data[r*m.rb : (r+1)*m.rb]
	_ = row[nb*m.w.Type.BlockBytes()-1]
	ys := nb * int(unsafe.Sizeof(q8KBlock{}))
	_ = a.q8k[end*nb-1]
	_ = a.ydT[(nb-1)*a.yds+end-1]
	if m.w.Type == Q4_K && len(a.bsT) > 0 {
		// 16 tokens at a time through the kernel that takes the mins' products
		// from bsT.
		gs := 4 * a.yds
		_ = a.bsT[(4*nb-1)*a.yds+end-1]
		if useVNNI16 {
			_ = a.q8kP[end*nb*qkK-1]
			for ; t+16 <= end; t += 16 {
				dotQ4KAVX512r1t16p(&row[0], (*byte)(unsafe.Pointer(&a.q8kP[t*nb*qkK])), nb*qkK, &a.ydT[t], 4*a.yds, &a.bsT[t], gs, nb, &m.dst[t*rows+r], rows)
			}
		}
		for ; t+16 <= end; t += 16 {
			dotQ4KAVX512r1t16m(&row[0], (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ys, &a.ydT[t], 4*a.yds, &a.bsT[t], gs, nb, &m.dst[t*rows+r], rows)
		}
	}
	for i, n := range [...]int{16, 8, 4} {
		for ; t+n <= end; t += n {
			ks[i](&row[0], 0, (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ys, &a.ydT[t], 4*a.yds, nb, &m.dst[t*rows+r], rows)
		}
	}
	if end-t > 1 && end >= 4 {
		// Two or three tokens left: the last four through the 4-token kernel
		// (again for some, with the same bits), cheaper than one at a time.
		t = end - 4
		ks[2](&row[0], 0, (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ys, &a.ydT[t], 4*a.yds, nb, &m.dst[t*rows+r], rows)
		t = end
	} else if end-t > 1 && a.yds == 4 {
		// A product of 2 or 3 tokens, padded to 4 (acts.prepare): the 4-token
		// kernel into buf, cheaper than one at a time.
		var buf [4]float32
		_ = a.q8k[4*nb-1]
		_ = a.ydT[(nb-1)*4+3]
		tile4(m.w.Type, &row[0], (*byte)(unsafe.Pointer(&a.q8k[0])), ys, &a.ydT[0], 16, nb, &buf[0], 1)
		for ; t < end; t++ {
			m.dst[t*rows+r] = buf[t]
		}
	}
	for ; t < end; t++ {
		m.dst[t*rows+r] = one(row, a.q8k[t*nb:(t+1)*nb])
	}
	return 1
}

// lanesTokens is fastTokens for Q4_1 and Q5_1: rows [r, r+16) for tokens
// [t, end) through the 2-token kernel of ks (an odd last token with the one
// before it again, the same bits), or 0 if fewer than 16 rows are left.
func (m *matMul) lanesTokens(ks *[2]outerKernel, r, hi, t, end int) int {
	if r+16 > hi {
		return 0
	}
	a, rows := m.a, m.w.Rows
	nb := a.cols / qk0
	_ = m.w.Data[(r+16)*m.rb-1]
	a.checkBlocks(end * nb)
	ys := nb * int(unsafe.Sizeof(q8_1Block{}))
	x := &m.w.Data[r*m.rb]
	for ; t+2 <= end; t += 2 {
		ks[0](x, m.rb, a.actBlock(t*nb), ys, nb, &m.dst[t*rows+r], rows)
	}
	if t < end {
		if end >= 2 {
			ks[0](x, m.rb, a.actBlock((end-2)*nb), ys, nb, &m.dst[(end-2)*rows+r], rows)
		} else {
			ks[1](x, m.rb, a.actBlock(t*nb), 0, nb, &m.dst[t*rows+r], 0)
		}
	}
	return 16
}

// tile4 is the 4-token kernel of ks in fastTokens (Q4_K), called
// directly rather than through the func value: a pointer passed through a func value
// escapes, so a buffer on the caller's stack would be allocated on the heap at every
// call (one per row of a 2- or 3-token product, millions a second in a busy decode,
// and the GC cycles they cause slow the steps of every request).
func tile4(t Type, x *byte, y *byte, ys int, yd *float32, yds int, nb int, out *float32, os int) {
	switch t {
	case Q4_K:
		dotQ4KAVX512r1t4(x, 0, y, ys, yd, yds, nb, out, os)
	default:
		panic("kernels: tile4 of " + t.String())
	}
}

// kOuter4 is the 4-token kernel of kOuterKernels(t), called directly for the same
// reason as tile4.
func kOuter4(t Type, x *byte, rb int, y *byte, ys int, nb int, out *float32, os int) {
	switch t {
	case IQ4_XS:
		dotIQ4XSAVX512x16t4(x, rb, y, ys, nb, out, os)
	case Q2_K:
		dotQ2KAVX512x16t4(x, rb, y, ys, nb, out, os)
	default:
		panic("kernels: kOuter4 of " + t.String())
	}
}

// kOuterTokens is fastTokens for IQ4_XS and Q2_K: rows [r, r+16) for tokens
// [t, end) through the 16-row outer-product kernels ks (16, 8 and 4 tokens).
func (m *matMul) kOuterTokens(ks *[3]outerKernel, r, hi, t, end int) int {
	if r+16 > hi {
		return 0
	}
	a, rows := m.a, m.w.Rows
	nb := a.cols / qkK
	_ = m.w.Data[(r+16)*m.rb-1]
	_ = a.q8k[end*nb-1]
	ys := nb * int(unsafe.Sizeof(q8KBlock{}))
	y := func(t int) *byte { return (*byte)(unsafe.Pointer(&a.q8k[t*nb])) }
	for i, n := range [...]int{16, 8, 4} {
		for ; t+n <= end; t += n {
			ks[i](&m.w.Data[r*m.rb], m.rb, y(t), ys, nb, &m.dst[t*rows+r], rows)
		}
	}
	switch {
	case t == end:
	case end >= 4:
		// One to three tokens left: the last four through the 4-token kernel
		// (again for some, with the same bits).
		ks[2](&m.w.Data[r*m.rb], m.rb, y(end-4), ys, nb, &m.dst[(end-4)*rows+r], rows)
	case a.yds == 4:
		// A product of 2 or 3 tokens, padded to 4 (acts.prepare): the 4-token
		// kernel into buf.
		var buf [4 * 16]float32
		_ = a.q8k[4*nb-1]
		kOuter4(m.w.Type, &m.w.Data[r*m.rb], m.rb, y(0), ys, nb, &buf[0], 16)
		for ; t < end; t++ {
			copy(m.dst[t*rows+r:t*rows+r+16], buf[16*t:16*t+16])
		}
	default:
		for ; t < end; t++ {
			for i := r; i < r+16; i++ {
				m.dst[t*rows+i] = dotRow(m.w.Type, m.w.Data[i*m.rb:(i+1)*m.rb], a, t)
			}
		}
	}
	return 16
}

// repackTokens computes rows [lo, hi) for every token of the batch through the Q8_0
// outer-product kernels, the weights repacked into Q8_0 (repack.go) 16 rows at a
// time, and returns the first row it left (rows after the last whole group of 16).
func (m *matMul) repackTokens(lo, hi int) int {
	if !useAVX512 {
		return lo
	}
	if !repacksToQ8_0(m.w.Type) {
		return lo
	}
	a, rows := m.a, m.w.Rows
	nb := a.cols / qk0
	const rb = 34
	bp := repackBufs.Get().(*[]byte)
	defer repackBufs.Put(bp)
	*bp = grow(*bp, 16*nb*rb)
	buf := *bp
	_ = a.q8[m.nTok*nb-1]
	_ = m.dst[(m.nTok-1)*rows+hi-1]
	ks := &outerQ8_0
	if m.w.Type == IQ4_NL {
		ks = &outerQ8_0F // its step fused (dotIQ4NLRowGeneric)
	}
	ys := nb * int(unsafe.Sizeof(q8Block{}))
	r := lo
	for ; r+16 <= hi; r += 16 {
		for i := 0; i < 16; i++ {
			repackRowQ8_0(buf[i*nb*rb:(i+1)*nb*rb], m.w.Type, m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], nb)
		}
		t := 0
		for i, n := range [...]int{16, 8, 4, 1} {
			for ; t+n <= m.nTok; t += n {
				ks[i](&buf[0], nb*rb, (*byte)(unsafe.Pointer(&a.q8[t*nb])), ys, nb, &m.dst[t*rows+r], rows)
			}
		}
	}
	return r
}

// q4KVNNIKernel is a VNNI kernel of one Q4_K row against permuted tokens.
type q4KVNNIKernel = func(x *byte, y *byte, ys int, yd *float32, yds int, bs *int32, gs int, nb int, out *float32, os int)

// q4KVNNIp are the VNNI kernels of one Q4_K row against 2-16 permuted tokens
// (acts.q8kP), by token count, with two tokens' accumulators packed into one
// vector for the scales and the per-block reduction (dotQ4KAVX512r1t2p … t16p).
var q4KVNNIp = [17]q4KVNNIKernel{
	2: dotQ4KAVX512r1t2p, 3: dotQ4KAVX512r1t3p, 4: dotQ4KAVX512r1t4p, 5: dotQ4KAVX512r1t5p,
	6: dotQ4KAVX512r1t6p, 7: dotQ4KAVX512r1t7p, 8: dotQ4KAVX512r1t8p, 9: dotQ4KAVX512r1t9p,
	10: dotQ4KAVX512r1t10p, 11: dotQ4KAVX512r1t11p, 12: dotQ4KAVX512r1t12p, 13: dotQ4KAVX512r1t13p,
	14: dotQ4KAVX512r1t14p, 15: dotQ4KAVX512r1t15p, 16: dotQ4KAVX512r1t16p,
}

// vnniMinTokens is the fewest tokens a Q4_K product takes through q4KVNNIp
// rather than q4KRows4's 4-row kernel (BenchmarkQ4KFewTokens, CPU time, load
// 35: for 2 tokens the two cost the same, for 3 and 4 the 4-row kernel 0.85×,
// for 5, 6, 8, 9, 12 and 15 the VNNI kernels 0.90, 0.78, 0.90, 0.80, 0.83 and
// 0.79×). The VNNI kernels of 2-4 tokens stay for the tests and the benchmark.
const vnniMinTokens = 5

// permutesActs reports whether acts.prepare lays out bsT and q8kP for a product
// of rows tokens by weights of type wt: for the 16-token kernels, and for the
// VNNI kernels of fewer tokens (a verification step's positions).
func permutesActs(wt Type, rows int) bool {
	return rows >= 16 || (wt == Q4_K && useAVX512 && rows >= vnniMinTokens) // (useAVX512: also packed Q4_K's bsT)
}

// q4KRowVNNI computes the output of the Q4_K row r for tokens [t0, t0+nt),
// 2 ≤ nt < 16, through the VNNI kernel of nt tokens: every output has the bits
// of one token at a time.
func (m *matMul) q4KRowVNNI(r, t0, nt int) {
	a, rows := m.a, m.w.Rows
	nb := a.cols / qkK
	end := t0 + nt
	row := m.w.Data[r*m.rb : (r+1)*m.rb]
	_ = row[nb*144-1]
	_ = m.dst[(end-1)*rows+r]
	_ = a.q8kP[end*nb*qkK-1]
	_ = a.ydT[(nb-1)*a.yds+end-1]
	_ = a.bsT[(4*nb-1)*a.yds+end-1]
	gs := 4 * a.yds
	q4KVNNIp[nt](&row[0], (*byte)(unsafe.Pointer(&a.q8kP[t0*nb*qkK])), nb*qkK, &a.ydT[t0], gs, &a.bsT[t0], gs, nb, &m.dst[t0*rows+r], rows)
}

// q4KVNNIKernel2 is a VNNI kernel of two adjacent Q4_K rows (x and x + rb)
// against permuted tokens.
type q4KVNNIKernel2 = func(x *byte, rb int, y *byte, ys int, yd *float32, yds int, bs *int32, gs int, nb int, out *float32, os int)

// q4KVNNIp2 are q4KVNNIp's kernels of 5-9 tokens on two rows at once
// (dotQ4KAVX512r2t5p … t9p): each token's activations are loaded once for both
// rows, so a verification step's 9 tokens, whose activations outgrow L1 from
// 2048 columns on, come from L2 half as often. More tokens leave too few
// registers for two rows' accumulators.
var q4KVNNIp2 = [10]q4KVNNIKernel2{
	5: dotQ4KAVX512r2t5p, 6: dotQ4KAVX512r2t6p, 7: dotQ4KAVX512r2t7p, 8: dotQ4KAVX512r2t8p, 9: dotQ4KAVX512r2t9p,
}

// q4KRowsVNNI2 is q4KRowVNNI for the rows r and r+1 through q4KVNNIp2 (nt ≤ 9):
// the same bits per row and token.
func (m *matMul) q4KRowsVNNI2(r, t0, nt int) {
	a, rows := m.a, m.w.Rows
	nb := a.cols / qkK
	end := t0 + nt
	row := m.w.Data[r*m.rb : (r+2)*m.rb]
	_ = row[m.rb+nb*144-1]
	_ = m.dst[(end-1)*rows+r+1]
	_ = a.q8kP[end*nb*qkK-1]
	_ = a.ydT[(nb-1)*a.yds+end-1]
	_ = a.bsT[(4*nb-1)*a.yds+end-1]
	gs := 4 * a.yds
	q4KVNNIp2[nt](&row[0], m.rb, (*byte)(unsafe.Pointer(&a.q8kP[t0*nb*qkK])), nb*qkK, &a.ydT[t0], gs, &a.bsT[t0], gs, nb, &m.dst[t0*rows+r], rows)
}

// q4KRows4 computes the outputs of the Q4_K rows [r, r+4) for tokens [t0, t0+nt),
// nt < 16: groups of 4 tokens through the 4-row × 4-token kernel (which
// shares the rows' unpacking and the block's reductions among 16 pairs: a
// mixture of experts' products have few tokens each), 2 or 3 tokens left over as
// fastTokens takes them with the 4-token kernel, a last one through the one-row
// kernel. Every output has the bits of one token at a time.
func (m *matMul) q4KRows4(r, t0, nt int) {
	a, rows := m.a, m.w.Rows
	nb := a.cols / qkK
	end := t0 + nt
	_ = m.w.Data[(r+4)*m.rb-1]
	_ = m.dst[(end-1)*rows+r+3]
	_ = a.q8k[end*nb-1]
	_ = a.ydT[(nb-1)*a.yds+end-1]
	x := &m.w.Data[r*m.rb]
	ys := nb * int(unsafe.Sizeof(q8KBlock{}))
	k := dotQ4KAVX512r4t4
	t := t0
	for ; t+4 <= end; t += 4 {
		k(x, m.rb, (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ys, &a.ydT[t], 4*a.yds, nb, &m.dst[t*rows+r], rows)
	}
	if end-t > 1 && end >= 4 {
		// The last four tokens (again for some, with the same bits).
		t = end - 4
		k(x, m.rb, (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ys, &a.ydT[t], 4*a.yds, nb, &m.dst[t*rows+r], rows)
		return
	}
	if end-t > 1 && a.yds == 4 {
		// A product of 2 or 3 tokens, padded to 4 (acts.prepare).
		var buf [16]float32
		_ = a.q8k[4*nb-1]
		_ = a.ydT[(nb-1)*4+3]
		k(x, m.rb, (*byte)(unsafe.Pointer(&a.q8k[0])), ys, &a.ydT[0], 16, nb, &buf[0], 4)
		for ; t < end; t++ {
			copy(m.dst[t*rows+r:t*rows+r+4], buf[4*t:4*t+4])
		}
		return
	}
	for ; t < end; t++ {
		for i := 0; i < 4; i++ {
			m.dst[t*rows+r+i] = dotQ4KRow(m.w.Data[(r+i)*m.rb:(r+i+1)*m.rb], a.q8k[t*nb:(t+1)*nb])
		}
	}
}
