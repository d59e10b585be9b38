package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/lmlite/lmlite/engine/parallel"
)

// Activations for the dot products. As in ggml, a weight type fixes the form its
// activations take before the dot product ("vec_dot_type"): quantized weights meet
// 8-bit quantized activations (Q8_0 blocks of 32 for Q8_0/Q4_0/Q5_0/IQ4_NL, Q8_1
// blocks of 32 with their sum for Q4_1/Q5_1, Q8_K blocks of 256 with 16-element
// sums for the K-quants, IQ4_XS and TQ1_0/TQ2_0) and integer products; F16/BF16
// weights meet
// activations rounded to the same format. Doing the same here reproduces llama.cpp's
// numerics rather than an idealised float product.

// VecDotType is the activation format that weights of type t are multiplied with.
func VecDotType(t Type) Type {
	switch t {
	case Q8_0, Q4_0:
		return Q8_0
	case Q5_0, IQ4_NL:
		return Q8_0
	case Q4_1, Q5_1:
		return Q8_1
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0,
		IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M:
		return Q8_K
	}
	return t
}

type q8Block struct {
	d  float32 // f16-representable, as the block stores it
	c  int32   // −k·Σqs: the correction of the outer-product kernels (tile_amd64.go), k = 1<<actShift
	qs [qk0]int8
}

type q8KBlock struct {
	d     float32
	qs    [qkK]int8
	bsums [qkK / 16]int16
}

// acts is a batch of activation rows in one vec-dot format.
type acts struct {
	typ  Type
	cols int
	f    []float32   // F32, F16, BF16 (values already rounded to the format)
	buf  []float32   // f's storage for F16 and BF16
	bp   []uint16    // BF16 with VDPBF16PS: f's words paired by packBF16Pairs
	h    []uint16    // F16, one token, AVX-512, fewer than f16RowsMinCols columns: f as binary16 (f16Rows)
	q8   []q8Block   // Q8_0
	q81  []q8_1Block // Q8_1
	q8k  []q8KBlock  // Q8_K
	ydT  []float32   // Q8_K with rows > 1: ydT[b*yds+t] = q8k[t*nb+b].d
	// bsT is, for Q8_K with 16 rows or more (and for Q4_K's VNNI kernels of
	// fewer, permutesActs), the bsums by block, pair of
	// sub-blocks and row: bsT[(4b+i)*yds+t] holds, in its low and high int16,
	// the sums of the 32 activations of sub-blocks 2i and 2i+1 of row t's block
	// b (the Q4_K 16-token kernel's layout, tile_amd64.go).
	bsT []int32
	// q8kP is, with bsT, the rows' quants block by block, permuted for the
	// VNNI 16-token kernel: part j (64 bytes) of a block holds quants 8j … 8j+7
	// of sub-blocks 0, 1, …, 7 in turn (permuteQ8K).
	q8kP []int8
	// q6P is, for Q6_K's AVX-512 16-token kernel (pairsQ6K), the rows' blocks
	// by pairs of rows: pair p's block b at q6P[(p·nb+b)·q6KPairBytes], its
	// eight chunks of 32 quants, row 2p's then row 2p+1's for each; the two
	// rows' bsums; their d, eight times each (pairQ6K).
	q6P []byte
	// q8kW is, for products through the lattice types' panels (usesPanel),
	// the quants widened to int16 in the panels' order (iqpanel.go).
	q8kW []int16
	// q8kU is, for IQ1_S's byte panels, the quants plus 128 as bytes, in
	// q8k's order (iq1spanel.go).
	q8kU []uint8
	// q8kS8 is, for IQ1_M's byte panels, each block's 32 sums of 8 quants,
	// in q8k's order (iq1mpanel.go).
	q8kS8 []int16
	// q8kB is, for IQ3_S's byte panels, the quants as bytes q+128 in their
	// order (iq3spanel.go).
	q8kB []byte
	// q8kA is, for Q4_K's AVX2 few-token kernels (usesQ4KAVX2T), q8k with each
	// block's quants permuted (permuteQ4KAVX2).
	q8kA  []q8KBlock
	rows  int
	shift int // Q8_0: actShift
	// yds is ydT's stride: rows, but 4 for 2 or 3 rows, which q8k and ydT then
	// pad with zero rows to 4 so that the 4-token tile kernel can take them
	// (tile_amd64.go; a few tokens are common in a mixture of experts' products).
	yds int
	// q8kO is, for products through the IQ2 panels (usesIQ2Panel), the
	// quants with −43·bsums (iq2panel.go).
	q8kO []byte
}

// actShift is log2 of the offset k in the correction c = −k·Σqs of the Q8_0
// activations for weights of type wt in a product of rows tokens: the weight bytes
// the outer-product kernels take are x+128 for Q8_0 (and for Q5_0 and IQ4_NL in
// prompts, repacked into Q8_0), Q4_0's nibble q = x+8 and, decoding, Q5_0's
// q = x+16 (its own kernel).
func actShift(wt Type, rows int) int {
	switch {
	case wt == Q4_0:
		return 3
	case wt == Q5_0 && rows == 1:
		return 4
	}
	return 7
}

func (a *acts) prepare(wt Type, x []float32, rows, cols int) {
	typ := VecDotType(wt)
	a.typ, a.cols, a.rows = typ, cols, rows
	switch typ {
	case F32:
		a.f = x[:rows*cols]
	case F16, BF16:
		a.buf = grow(a.buf, rows*cols)
		a.f = a.buf
		if typ == BF16 {
			roundBF16s(a.f, x[:rows*cols])
			a.packBF16(rows, cols)
		} else {
			roundF16s(a.f, x[:rows*cols])
			a.packF16(rows, cols)
		}
	case Q8_0:
		a.q8 = grow(a.q8, rows*cols/qk0)
		a.shift = actShift(wt, rows)
		quantRowsQ8_0(a.q8, x[:rows*cols], a.shift)
	case Q8_1:
		a.q81 = grow(a.q81, rows*cols/qk0)
		quantRowsQ8_1(a.q81, x[:rows*cols])
	case Q8_K:
		nb := cols / qkK
		a.yds = rows
		if rows == 2 || rows == 3 {
			a.yds = 4
		}
		a.q8k = grow(a.q8k, a.yds*nb)
		quantRowsQ8K(a.q8k[:rows*nb], x[:rows*cols])
		clear(a.q8k[rows*nb:])
		if rows > 1 {
			a.ydT = grow(a.ydT, nb*a.yds)
			clear(a.ydT)
			for t := 0; t < rows; t++ {
				for b, y := range a.q8k[t*nb : (t+1)*nb] {
					a.ydT[b*a.yds+t] = y.d
				}
			}
		}
		a.bsT, a.q8kP, a.q6P, a.q8kA = a.bsT[:0], a.q8kP[:0], a.q6P[:0], a.q8kA[:0]
		a.q8kW, a.q8kU, a.q8kB, a.q8kO = a.q8kW[:0], a.q8kU[:0], a.q8kB[:0], a.q8kO[:0]
		a.q8kS8 = a.q8kS8[:0]
		a.layoutQ8K(wt)
	default:
		panic("kernels: no activation format " + typ.String())
	}
}

// layoutQ8K adds the layouts of the Q8_K activations that a product of
// weights of type wt reads (bsT, q8kP, q6P, q8kU, q8kS8, q8kW, q8kB, q8kO), those not
// laid out yet. MatMuls shares one acts between the products of a call with the
// same activation format whatever their weight types (mmGroup.shared), so a
// product whose type reads a layout the first product's did not (a Q4_K
// matrix after an IQ3_S one in a mixed file, say) adds it here before the
// group runs: its kernels find the layout they read.
func (a *acts) layoutQ8K(wt Type) {
	nb, rows := a.cols/qkK, a.rows
	panel := usesPanel(wt, rows)
	if (permutesActs(wt, rows) || panel && wt == IQ1_S) && len(a.bsT) == 0 {
		a.bsT = grow(a.bsT, 4*nb*a.yds)
		transposeBsums(a.bsT, a.q8k, nb, rows, a.yds)
	}
	if permutesActs(wt, rows) && len(a.q8kP) == 0 {
		a.q8kP = grow(a.q8kP, rows*nb*qkK)
		for i := range rows * nb {
			permuteQ8K(a.q8kP[i*qkK:(i+1)*qkK], &a.q8k[i].qs)
		}
	}
	if usesQ4KAVX2T(wt, rows) && len(a.q8kA) == 0 {
		a.layoutQ4KAVX2(nb, rows)
	}
	if pairsQ6K(wt, rows) && len(a.q6P) == 0 {
		a.q6P = grow(a.q6P, rows/2*nb*q6KPairBytes)
		for p := range rows / 2 {
			for b := range nb {
				pairQ6K(a.q6P[(p*nb+b)*q6KPairBytes:][:q6KPairBytes], &a.q8k[2*p*nb+b], &a.q8k[(2*p+1)*nb+b])
			}
		}
	}
	switch {
	case panel && wt == IQ1_S: // its byte panels read q8kU and bsT
		if len(a.q8kU) == 0 {
			a.q8kU = grow(a.q8kU, rows*nb*qkK)
			for i := range rows * nb {
				unsignQ8K(a.q8kU[i*qkK:(i+1)*qkK], &a.q8k[i].qs)
			}
		}
	case panel && usesIQ1MBytes(wt): // IQ1_M's byte panels read q8kU and q8kS8
		if len(a.q8kS8) == 0 {
			a.q8kU = grow(a.q8kU, rows*nb*qkK)
			a.q8kS8 = grow(a.q8kS8, rows*nb*32)
			for i := range rows * nb {
				unsignSums8Q8K(a.q8kU[i*qkK:(i+1)*qkK], a.q8kS8[i*32:(i+1)*32], &a.q8k[i].qs)
			}
		}
	case panel && useIQ3SBytes(wt): // IQ3_S's byte panels read q8kB
		if len(a.q8kB) == 0 {
			a.panelQ8K(wt, nb, rows)
		}
	case panel: // the int16 panels read q8kW
		if len(a.q8kW) == 0 {
			a.panelQ8K(wt, nb, rows)
		}
	}
	if usesIQ3SAVX2Panel(wt, rows) && len(a.q8kB) == 0 { // its AVX2 byte panels' order (iq3spanel2.go)
		a.iq3sAVX2Q8K(nb, rows)
	}
	if usesIQ2Panel(wt, rows) && len(a.q8kO) == 0 {
		a.iq2OuterActs(nb, rows)
	}
}

// transposeBsums fills bsT (acts.bsT's layout) from the q8k blocks of rows rows
// of nb blocks each.
func transposeBsums(bsT []int32, q8k []q8KBlock, nb, rows, yds int) {
	for t := 0; t < rows; t++ {
		for b := range nb {
			bs := &q8k[t*nb+b].bsums
			for i := 0; i < 4; i++ {
				lo := uint16(bs[4*i] + bs[4*i+1])
				hi := uint16(bs[4*i+2] + bs[4*i+3])
				bsT[(4*b+i)*yds+t] = int32(uint32(lo) | uint32(hi)<<16)
			}
		}
	}
}

// permuteQ8K writes a block's quants in q8kP's order: dst[64j+8k+i] =
// qs[32k+8j+i].
func permuteQ8K(dst []int8, qs *[qkK]int8) {
	_ = dst[qkK-1]
	for j := 0; j < 4; j++ {
		for k := 0; k < 8; k++ {
			copy(dst[64*j+8*k:64*j+8*k+8], qs[32*k+8*j:32*k+8*j+8])
		}
	}
}

// q6KPairBytes is one block of two rows in acts.q6P.
const q6KPairBytes = 640

// pairQ6K writes blocks ya and yb of two rows in acts.q6P's layout to dst.
func pairQ6K(dst []byte, ya, yb *q8KBlock) {
	_ = dst[q6KPairBytes-1]
	for c := range 8 {
		for i := range 32 {
			dst[64*c+i] = byte(ya.qs[32*c+i])
			dst[64*c+32+i] = byte(yb.qs[32*c+i])
		}
	}
	for i := range 16 {
		binary.LittleEndian.PutUint16(dst[512+2*i:], uint16(ya.bsums[i]))
		binary.LittleEndian.PutUint16(dst[544+2*i:], uint16(yb.bsums[i]))
	}
	for i := range 8 {
		binary.LittleEndian.PutUint32(dst[576+4*i:], math.Float32bits(ya.d))
		binary.LittleEndian.PutUint32(dst[608+4*i:], math.Float32bits(yb.d))
	}
}

// grow returns s with length n, reallocated only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// quantActQ8_0 is quantQ8_0 into the unpacked block, with c = −(Σqs << shift).
func quantActQ8_0(b *q8Block, x []float32, shift int) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	b.d = RoundF16(amax / 127)
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	var sum int32
	for j, v := range x {
		b.qs[j] = int8(nearestInt(v * id))
		sum += int32(b.qs[j])
	}
	b.c = -(sum << shift)
}

// quantActQ8K is ggml's quantize_row_q8_K_ref: scale -127/(signed max), float32 d,
// and the sums of each 16 quants.
func quantActQ8K(b *q8KBlock, x []float32) {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax == 0 {
		*b = q8KBlock{}
		return
	}
	iscale := -127 / mx
	for j, v := range x {
		b.qs[j] = int8(min(127, nearestInt(iscale*v)))
	}
	for j := range b.bsums {
		var s int16
		for _, q := range b.qs[16*j : 16*j+16] {
			s += int16(q)
		}
		b.bsums[j] = s
	}
	b.d = 1 / iscale
}

// dotRow is the dot product of one encoded weight row with activation row t. Its
// reduction order depends only on the row length: the same inputs give the same
// bits whatever batch or thread they are computed in.
//
// It only reads (weights that never change, activations prepared before the
// workers start), so the race detector is told to skip its accesses: they are most
// of the engine's memory traffic, and checking them made -race test runs many times
// slower without guarding anything. MatMul's writes of the results stay checked.
//
//go:norace
func dotRow(wt Type, row []byte, a *acts, t int) float32 {
	switch wt {
	case F32:
		return dotF32Row(row, a.f[t*a.cols:(t+1)*a.cols])
	case F16:
		return dotF16Row(row, a.f[t*a.cols:(t+1)*a.cols])
	case BF16:
		return dotBF16Row(row, a.f[t*a.cols:(t+1)*a.cols])
	case Q8_0:
		nb := a.cols / qk0
		return dotQ8_0Row(row, a.q8[t*nb:(t+1)*nb])
	case Q4_0:
		nb := a.cols / qk0
		return dotQ4_0Row(row, a.q8[t*nb:(t+1)*nb])
	case Q5_0:
		nb := a.cols / qk0
		return dotQ5_0Row(row, a.q8[t*nb:(t+1)*nb])
	case Q4_1:
		nb := a.cols / qk0
		return dotQ4_1Row(row, a.q81[t*nb:(t+1)*nb])
	case Q5_1:
		nb := a.cols / qk0
		return dotQ5_1Row(row, a.q81[t*nb:(t+1)*nb])
	case IQ4_NL:
		nb := a.cols / qk0
		return dotIQ4NLRow(row, a.q8[t*nb:(t+1)*nb])
	case Q4_K:
		nb := a.cols / qkK
		return dotQ4KRow(row, a.q8k[t*nb:(t+1)*nb])
	case Q5_K:
		nb := a.cols / qkK
		return dotQ5KRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ4_XS:
		nb := a.cols / qkK
		return dotIQ4XSRow(row, a.q8k[t*nb:(t+1)*nb])
	case Q2_K:
		nb := a.cols / qkK
		return dotQ2KRow(row, a.q8k[t*nb:(t+1)*nb])
	case Q3_K:
		nb := a.cols / qkK
		return dotQ3KRow(row, a.q8k[t*nb:(t+1)*nb])
	case Q6_K:
		nb := a.cols / qkK
		return dotQ6KRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ3_S:
		nb := a.cols / qkK
		return dotIQ3SRow(row, a.q8k[t*nb:(t+1)*nb])
	case TQ2_0:
		nb := a.cols / qkK
		return dotTQ2_0Row(row, a.q8k[t*nb:(t+1)*nb])
	case TQ1_0:
		nb := a.cols / qkK
		return dotTQ1_0Row(row, a.q8k[t*nb:(t+1)*nb])
	case IQ2_XXS:
		nb := a.cols / qkK
		return dotIQ2XXSRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ2_XS:
		nb := a.cols / qkK
		return dotIQ2XSRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ2_S:
		nb := a.cols / qkK
		return dotIQ2SRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ3_XXS:
		nb := a.cols / qkK
		return dotIQ3XXSRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ1_S:
		nb := a.cols / qkK
		return dotIQ1SRow(row, a.q8k[t*nb:(t+1)*nb])
	case IQ1_M:
		nb := a.cols / qkK
		return dotIQ1MRow(row, a.q8k[t*nb:(t+1)*nb])
	}
	if c := refCodecOf(wt); c != nil {
		return dotRefRow(c, wt.BlockBytes(), row, a, t)
	}
	panic("kernels: no dot product for " + wt.String())
}

func sum8(a *[8]float32) float32 {
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

//go:norace
func dotQ4KBlock(blk []byte, y *q8KBlock) float32 {
	sc := blk[4:16]
	qs := blk[16:144]
	var isum, msum int32
	for j := 0; j < 4; j++ {
		s1, m1 := scaleMinK4(2*j, sc)
		s2, m2 := scaleMinK4(2*j+1, sc)
		q := qs[32*j : 32*j+32]
		lo, hi := y.qs[64*j:64*j+32], y.qs[64*j+32:64*j+64]
		var a1, a2 int32
		for l, v := range q {
			a1 += int32(v&0xf) * int32(lo[l])
			a2 += int32(v>>4) * int32(hi[l])
		}
		isum += int32(s1)*a1 + int32(s2)*a2
		bs := y.bsums[4*j : 4*j+4]
		msum += int32(m1)*(int32(bs[0])+int32(bs[1])) + int32(m2)*(int32(bs[2])+int32(bs[3]))
	}
	d := f16Table[le16(blk)] * y.d
	dmin := f16Table[le16(blk[2:])] * y.d
	return float32(d*float32(isum)) - float32(dmin*float32(msum)) // (no fused multiply-add)
}

var actsPool = sync.Pool{New: func() any { return new(acts) }}

// MatMul computes dst[t*w.Rows+r] = w.Row(r) · x[t*w.Cols:(t+1)*w.Cols] for each of
// the nTok activation rows of x and each weight row r: the projection of a batch of
// tokens. The activations are first put in VecDotType(w.Type). Work is spread over
// GOMAXPROCS goroutines by weight rows; every output value is computed by the same
// code in the same order whatever nTok and the number of goroutines, so a token's
// result never depends on the batch it ran in.
func MatMul(dst []float32, w Matrix, x []float32, nTok int) {
	if len(x) < nTok*w.Cols || len(dst) < nTok*w.Rows {
		panic(fmt.Sprintf("kernels: MatMul %dx%d by %d tokens: x has %d, dst %d", w.Rows, w.Cols, nTok, len(x), len(dst)))
	}
	a := actsPool.Get().(*acts)
	defer func() { a.f = nil; actsPool.Put(a) }()
	a.prepare(w.Type, x, nTok, w.Cols)
	mm := matMul{dst: dst, w: w, a: a, nTok: nTok, rb: w.Type.RowBytes(w.Cols)}
	if w.Rows < 2 || w.Rows*w.Cols*nTok < 1<<15 {
		mm.rows(0, w.Rows)
		return
	}
	pool() // created once; SetThreads replaces it under poolMu
	if !poolMu.TryLock() {
		mm.rows(0, w.Rows)
		return
	}
	defer poolMu.Unlock()
	p := thePool
	if p.Size() == 1 {
		mm.rows(0, w.Rows)
		return
	}
	j := &theJob
	j.start(w.Rows, w.Cols*nTok, p.Size(), 16) // whole groups for the tile kernels
	j.mm, j.isMM = mm, true
	p.Run(j, p.Size(), 1)
	j.mm, j.isMM = matMul{}, false
}

// matMul is one MatMul call's product, computed by ranges of weight rows.
type matMul struct {
	dst      []float32
	w        Matrix
	a        *acts
	nTok, rb int
	vecDot   bool // in ggml's vec_dot order (MatMulsVecDot)
}

// rows computes the outputs of weight rows [lo, hi).
func (m *matMul) rows(lo, hi int) {
	if m.vecDot {
		m.vecDotRows(lo, hi)
		return
	}
	if lo < m.w.Packed {
		if lo = m.packedRows(lo, hi); lo == hi {
			return
		}
	}
	w, a, dst := m.w, m.a, m.dst
	if m.nTok == 1 {
		for r := m.fastRows(lo, hi); r < hi; r++ {
			dst[r] = dotRow(w.Type, w.Data[r*m.rb:(r+1)*m.rb], a, 0)
		}
		return
	}
	lo = m.repackTokens(lo, hi)
	lo = m.panelTokens(lo, hi)
	// Rows in blocks of about blockBytes, then tokens in chunks of tokChunk, the
	// block's rows inside: a chunk's activations stay in cache while the block's
	// rows go by, and the block stays in cache for the next chunk (without the
	// blocks, a mixture of experts' products of 20-40 tokens read each row from
	// memory twice). Each row meets a chunk through the batched kernels (the same
	// bits per token as one token at a time).
	block := hi - lo
	if m.nTok > tokChunk {
		block = max(16, blockBytes/m.rb/16*16)
	}
	var buf [tokChunk]float32
	for b0 := lo; b0 < hi; b0 += block {
		b1 := min(hi, b0+block)
		for t0 := 0; t0 < m.nTok; t0 += tokChunk {
			nt := min(tokChunk, m.nTok-t0)
			if nt < tokChunk && nt > 10 && m.nTok >= tokChunk && m.tiles() {
				// A short last chunk goes through the tile kernels for 8 and 4
				// tokens and one at a time, which cost about 1.2, 1.7 and 3.6 times
				// the 16-token kernel per token (Q4_K, BenchmarkTileKernels and
				// BenchmarkRowDot at their least disturbed on a loaded machine):
				// from 11 tokens on, the last 16 tokens through that kernel cost
				// less, computing some of the previous chunk's outputs again (the
				// same bits: each output's order of operations is the same in
				// every kernel).
				t0, nt = m.nTok-tokChunk, tokChunk
			}
			for r := b0; r < b1; {
				if n := m.fastTokens(r, b1, t0, nt); n > 0 {
					r += n
					continue
				}
				out := buf[:nt]
				dotRowsAt(w.Type, w.Data[r*m.rb:(r+1)*m.rb], a, t0, out)
				for i, v := range out {
					dst[(t0+i)*w.Rows+r] = v
				}
				r++
			}
		}
	}
}

// blockBytes is about how many bytes of weight rows MatMul takes through all the
// tokens' chunks before the next rows: well inside a core's L2 with the tokens'
// activations.
const blockBytes = 128 << 10

// tokChunk is how many tokens MatMul takes through the batched kernels at once.
const tokChunk = 16

// Parallel runs work over [0, n) in contiguous parts on the workers of the package's
// persistent pool (parallel.Pool, sized to GOMAXPROCS when first used), which share
// the range as sched.go describes; cost is the work per item (in multiply-adds), used to stay on the caller's goroutine when the whole job is
// too small to be worth spreading. When another goroutine holds the pool (another
// sequence's step), the work runs on the caller's goroutine: the cores are busy anyway,
// and a row's result does not depend on how the range was split.
func Parallel(n, cost int, work func(lo, hi int)) {
	if n*cost < 1<<15 || n < 2 {
		work(0, n)
		return
	}
	pool() // created once; SetThreads replaces it under poolMu
	if !poolMu.TryLock() {
		work(0, n)
		return
	}
	defer poolMu.Unlock()
	p := thePool
	if p.Size() == 1 {
		work(0, n)
		return
	}
	j := &theJob
	j.start(n, cost, p.Size(), 1)
	j.f = work
	p.Run(j, p.Size(), 1)
	j.f = nil
}

var (
	poolOnce sync.Once
	thePool  *parallel.Pool
	poolMu   sync.Mutex // held while thePool runs a task
)

func pool() *parallel.Pool {
	poolOnce.Do(func() { thePool = parallel.New(runtime.GOMAXPROCS(0)) })
	return thePool
}
