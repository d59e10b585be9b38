//go:build !purego

package kernels

import (
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// floatTokens computes, for F16 or BF16 weights with AVX-512 and a multiple of
// 64 columns, the outputs of rows [r, hi) for tokens [t0, t0+nt) (nt ≥ 2) and
// returns hi−r; otherwise it returns 0. The tokens go in groups of 6 (then 4,
// then 2; a short last group is moved back over tokens already done, which get
// the same bits again), each group through every row before the next group, so
// that a group's activations stay in the core's cache while the rows go by.
// The kernels (dotF16AVX512t6 …) convert each weight once for the group's
// tokens and give every output dotF16Row's (dotBF16Row's) bits.
func (m *matMul) floatTokens(r, hi, t0, nt int) int {
	a, typ := m.a, m.w.Type
	cols := a.cols
	if !useAVX512 || (typ != F16 && typ != BF16) || cols%64 != 0 || cols == 0 || nt < 2 || r >= hi {
		return 0
	}
	if typ == BF16 && len(a.bp) > 0 {
		return m.bf16DPTokens(r, hi, t0, nt)
	}
	rows, end := m.w.Rows, t0+nt
	_ = m.dst[(end-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	_ = a.f[end*cols-1]
	ys, os := 4*cols, 4*rows
	for t := t0; t < end; {
		n := floatGroup(end-t, nt)
		s := min(t, end-n)
		y := (*float32)(unsafe.Pointer(&a.f[s*cols]))
		for q := r; q < hi; q++ {
			x, o := &m.w.Data[q*m.rb], &m.dst[s*rows+q]
			switch {
			case typ == F16 && n == 6:
				dotF16AVX512t6(x, y, ys, cols, o, os)
			case typ == F16 && n == 4:
				dotF16AVX512t4(x, y, ys, cols, o, os)
			case typ == F16:
				dotF16AVX512t2(x, y, ys, cols, o, os)
			case n == 6:
				dotBF16AVX512t6(x, y, ys, cols, o, os)
			case n == 4:
				dotBF16AVX512t4(x, y, ys, cols, o, os)
			default:
				dotBF16AVX512t2(x, y, ys, cols, o, os)
			}
		}
		t = s + n
	}
	return hi - r
}

// floatGroup is the number of tokens (6, 4 or 2) floatTokens takes next with
// rem tokens left of a chunk of nt (2 ≤ nt): 6 while at least 6 are left,
// otherwise the smallest group covering rem that the chunk holds, or else the
// largest that rem holds.
func floatGroup(rem, nt int) int {
	if rem >= 6 {
		return 6
	}
	for _, n := range [...]int{2, 4, 6} {
		if n >= rem && n <= nt {
			return n
		}
	}
	if rem >= 4 {
		return 4
	}
	return 2
}

// f32Tokens is floatTokens for F32 weights with AVX2 and at least 8 columns:
// dotF32AVX512t6/t4/t2 (AVX-512) or dotF32AVX2t3/t2 take the largest multiple
// of 8 columns in dotF32AVX2's order, and addF32Tail the last cols%8 of each
// token, as dotF32Row does, so every output has dotF32Row's bits. Without
// AVX-512 it takes F16 and BF16 weights the same way (dotF16AVX2t3/t2,
// dotBF16AVX2t3/t2 in dotF16AVX2's and dotBF16AVX2's order, the tail as
// dotF16Row and dotBF16Row add it), for any number of columns from 8 on.
func (m *matMul) f32Tokens(r, hi, t0, nt int) int {
	a := m.a
	cols := a.cols
	n8 := cols &^ 7
	if !useAVX2 || n8 == 0 || nt < 2 || r >= hi {
		return 0
	}
	rows, end := m.w.Rows, t0+nt
	_ = m.dst[(end-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	_ = a.f[end*cols-1]
	ys, os := 4*cols, 4*rows
	for t := t0; t < end; {
		var n int
		if useAVX512 {
			n = floatGroup(end-t, nt)
		} else {
			n = min(3, max(2, end-t)) // a last single token again with the one before
		}
		s := min(t, end-n)
		y := (*float32)(unsafe.Pointer(&a.f[s*cols]))
		for q := r; q < hi; q++ {
			x, o := &m.w.Data[q*m.rb], &m.dst[s*rows+q]
			switch typ := m.w.Type; {
			case typ == F16 && n == 3:
				dotF16AVX2t3(x, y, ys, n8, o, os)
			case typ == F16:
				dotF16AVX2t2(x, y, ys, n8, o, os)
			case typ == BF16 && n == 3:
				dotBF16AVX2t3(x, y, ys, n8, o, os)
			case typ == BF16:
				dotBF16AVX2t2(x, y, ys, n8, o, os)
			case !useAVX512 && n == 3:
				dotF32AVX2t3(x, y, ys, n8, o, os)
			case !useAVX512:
				dotF32AVX2t2(x, y, ys, n8, o, os)
			case n == 6:
				dotF32AVX512t6(x, y, ys, n8, o, os)
			case n == 4:
				dotF32AVX512t4(x, y, ys, n8, o, os)
			default:
				dotF32AVX512t2(x, y, ys, n8, o, os)
			}
			if n8 < cols {
				row := m.w.Data[q*m.rb : (q+1)*m.rb]
				for i := s; i < s+n; i++ {
					d := &m.dst[i*rows+q]
					*d = addFloatTail(m.w.Type, *d, row, a.f[i*cols:(i+1)*cols], n8)
				}
			}
		}
		t = s + n
	}
	return hi - r
}

// addFloatTail is addF32Tail for weights of typ (F32, F16 or BF16): the
// last elements from n on as dotF32Row, dotF16Row or dotBF16Row adds them.
func addFloatTail(typ Type, s float32, row []byte, x []float32, n int) float32 {
	switch typ {
	case F16:
		for i := n; i < len(x); i++ {
			s += f16Table[le16(row[2*i:])] * x[i]
		}
	case BF16:
		for i := n; i < len(x); i++ {
			s += BF16ToF32(le16(row[2*i:])) * x[i]
		}
	default:
		s = addF32Tail(s, row, x, n)
	}
	return s
}

// useBF16DP: the BF16 kernels of VDPBF16PS (dotBF16DPt1 …) take BF16 weights
// with AVX-512 on a CPU with AVX512_BF16; setSIMD's "avx512" levels include
// them where the CPU has it.
var useBF16DP = useAVX512 && cpu.X86.HasAVX512BF16

// bf16PairCol[w] is the column, within a block of 128, whose activation word w
// of the block's 128 packBF16Pairs words holds: the dotBF16DPt kernels' four
// 512-bit registers of word pairs (VPUNPCKLWD/HWD of the weights' 64-column
// blocks), register r = 2·half + hi, 128-bit lane q, dword j, the odd (high)
// word column 32·half + 8q + 4·hi + j of the first 64 columns, the even (low)
// word the same column of the second 64.
var bf16PairCol = func() (c [128]int) {
	for w := range c {
		r, q, j := w/32, w%32/8, w%8/2
		c[w] = 32*(r/2) + 8*q + 4*(r%2) + j
		if w%2 == 0 {
			c[w] += 64
		}
	}
	return
}()

// packBF16Pairs sets dst (128·⌈cols/128⌉ words) to the bfloat16 words of x
// (cols float32s already rounded to bfloat16) in bf16PairCol's order, block by
// block; columns past cols (an odd last 64) are zero.
func packBF16Pairs(dst []uint16, x []float32, cols int) {
	for b := 0; b*128 < cols; b++ {
		d := dst[128*b : 128*b+128]
		for w, c := range &bf16PairCol {
			if c += 128 * b; c < cols {
				d[w] = uint16(math.Float32bits(x[c]) >> 16)
			} else {
				d[w] = 0
			}
		}
	}
}

// bf16PairWords is the length of a token's packBF16Pairs words.
func bf16PairWords(cols int) int { return (cols + 127) / 128 * 128 }

// packBF16 fills a.bp from a.f (rows tokens of cols BF16-rounded activations)
// when the VDPBF16PS kernels take them: AVX512_BF16 and a multiple of 64
// columns; otherwise it leaves a.bp empty.
func (a *acts) packBF16(rows, cols int) {
	a.bp = a.bp[:0]
	if !useBF16DP || cols%64 != 0 || cols == 0 {
		return
	}
	nw := bf16PairWords(cols)
	a.bp = grow(a.bp, rows*nw)
	for t := 0; t < rows; t++ {
		packBF16Pairs(a.bp[t*nw:(t+1)*nw], a.f[t*cols:(t+1)*cols], cols)
	}
}

// bf16DPRows computes token 0's outputs of BF16 rows [lo, hi) with
// dotBF16DPt1 (four rows a call through dotBF16DPr4 from bf16DPRowsMinCols
// columns) when a.bp holds the packed activations, and returns hi;
// otherwise it returns lo.
func (m *matMul) bf16DPRows(lo, hi int) int {
	a := m.a
	if !useBF16DP || len(a.bp) == 0 || lo >= hi {
		return lo
	}
	cols := a.cols
	_ = m.w.Data[hi*m.rb-1]
	_ = m.dst[hi-1]
	_ = a.bp[bf16PairWords(cols)-1]
	y := &a.bp[0]
	r := lo
	if cols >= bf16DPRowsMinCols {
		for ; r+4 <= hi; r += 4 {
			dotBF16DPr4(&m.w.Data[r*m.rb], m.rb, y, cols, &m.dst[r])
		}
	}
	for ; r < hi; r++ {
		dotBF16DPt1(&m.w.Data[r*m.rb], y, 0, cols, &m.dst[r], 0)
	}
	return hi
}

// bf16DPRowsMinCols is the least number of columns for which one-token BF16
// products take four rows a call (dotBF16DPr4: the token's packed activations,
// 2·cols bytes, loaded once for the four rows); fewer take one row a call
// (dotBF16DPt1). As F16's f16RowsMinCols: at 8192 columns one row a call
// reads the activations again from L2 for every row.
const bf16DPRowsMinCols = 4097

// bf16DPTokens is floatTokens for BF16 with the VDPBF16PS kernels (groups of
// 6, 4 or 2 tokens, dotBF16DPt6 …), when a.bp holds the packed activations.
func (m *matMul) bf16DPTokens(r, hi, t0, nt int) int {
	a := m.a
	cols := a.cols
	if !useBF16DP || len(a.bp) == 0 || nt < 2 || r >= hi {
		return 0
	}
	nw := bf16PairWords(cols)
	rows, end := m.w.Rows, t0+nt
	_ = m.dst[(end-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	_ = a.bp[end*nw-1]
	ys, os := 2*nw, 4*rows
	for t := t0; t < end; {
		n := floatGroup(end-t, nt)
		s := min(t, end-n)
		y := &a.bp[s*nw]
		for q := r; q < hi; q++ {
			x, o := &m.w.Data[q*m.rb], &m.dst[s*rows+q]
			switch n {
			case 6:
				dotBF16DPt6(x, y, ys, cols, o, os)
			case 4:
				dotBF16DPt4(x, y, ys, cols, o, os)
			default:
				dotBF16DPt2(x, y, ys, cols, o, os)
			}
		}
		t = s + n
	}
	return hi - r
}
