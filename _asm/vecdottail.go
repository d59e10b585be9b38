package main

import (
	"fmt"
	"sort"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotF16VecDotTailAVX512 emits the tails of ggml_vec_dot_f16 (the values after
// the last multiple of 64: each product of two binary16 values, exact in float32,
// added one by one to a float64 sum, rounded to float32 at the end), eight rows
// at a time, a row to each float64 lane: rows of a LoRA adapter's B (rank 16)
// are all tail. out[r] holds the row's float32 sum so far (its first values'),
// rows the row's first tail value, x the tail's n activations; nr is a multiple
// of 8 and n at least 2. Each column of the eight rows is gathered (two columns a
// dword, so that no read goes past a row's tail; an odd last column is the high
// half of the dword before it).
func dotF16VecDotTailAVX512() {
	TEXT("dotF16VecDotTailAVX512", NOSPLIT, "func(out *float32, rows *byte, rb int, x *float32, n int, nr int)")
	Pragma("noescape")
	Doc("dotF16VecDotTailAVX512 adds to out[r] (r < nr, a multiple of 8) the n (at least 2) binary16 values at rows+r·rb times x in ggml_vec_dot_f16's tail order (kernels.dotF16VecDotRows).")
	out, rows, rb, x, n, nr := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("rows"), rows)
	Load(Param("rb"), rb)
	Load(Param("x"), x)
	Load(Param("n"), n)
	Load(Param("nr"), nr)

	// idx: the eight rows' byte offsets r·rb; perm: the even lanes, then the odd.
	idx, perm := YMM(), ZMM()
	VPBROADCASTD(rb.As32(), idx)
	VPMULLD(tailLanes.Offset(0), idx, idx)
	VMOVDQU32(tailPerm.Offset(0), perm)
	rb8 := GP64()
	MOVQ(rb, rb8)
	SHLQ(U8(3), rb8)

	Label("f16tail_rows")
	CMPQ(nr, U8(8))
	JL(LabelRef("f16tail_done"))
	acc := ZMM()
	VCVTPS2PD(Mem{Base: out}, acc)
	p, xp, c := GP64(), GP64(), GP64()
	MOVQ(rows, p)
	MOVQ(x, xp)
	MOVQ(n, c)

	Label("f16tail_pairs")
	CMPQ(c, U8(2))
	JL(LabelRef("f16tail_last"))
	{
		k, g, f, xs, d, h := K(), YMM(), ZMM(), ZMM(), ZMM(), YMM()
		KXNORB(k, k, k)
		VPXORD(g, g, g)
		VPGATHERDD(Mem{Base: p, Index: idx, Scale: 1}, k, g)
		VCVTPH2PS(g, f)
		VBROADCASTSD(Mem{Base: xp}, xs)
		VMULPS(xs, f, f)
		VPERMPS(f, perm, f)
		VCVTPS2PD(f.AsY(), d)
		VADDPD(d, acc, acc)
		VEXTRACTF32X8(U8(1), f, h)
		VCVTPS2PD(h, d)
		VADDPD(d, acc, acc)
	}
	ADDQ(U8(4), p)
	ADDQ(U8(8), xp)
	SUBQ(U8(2), c)
	JMP(LabelRef("f16tail_pairs"))

	Label("f16tail_last")
	CMPQ(c, U8(1))
	JL(LabelRef("f16tail_store"))
	{
		// The last column is the high half of the dword at the one before it.
		k, g, w, f, xs, d := K(), YMM(), XMM(), YMM(), YMM(), ZMM()
		KXNORB(k, k, k)
		VPXORD(g, g, g)
		VPGATHERDD(Mem{Base: p, Index: idx, Scale: 1, Disp: -2}, k, g)
		VPSRLD(U8(16), g, g)
		VPMOVDW(g, w)
		VCVTPH2PS(w, f)
		VBROADCASTSS(Mem{Base: xp}, xs)
		VMULPS(xs, f, f)
		VCVTPS2PD(f, d)
		VADDPD(d, acc, acc)
	}

	Label("f16tail_store")
	r := YMM()
	VCVTPD2PS(acc, r)
	VMOVUPS(r, Mem{Base: out})
	ADDQ(U8(32), out)
	ADDQ(rb8, rows)
	SUBQ(U8(8), nr)
	JMP(LabelRef("f16tail_rows"))

	Label("f16tail_done")
	VZEROUPPER()
	RET()
}

var tailLanes, tailPerm Mem

func vecDotTailConstants() {
	var lanes, perm []byte
	for i := range 8 {
		lanes = append(lanes, byte(i), 0, 0, 0)
	}
	for i := range 16 {
		j := 2 * i
		if i >= 8 {
			j = 2*(i-8) + 1
		}
		perm = append(perm, byte(j), 0, 0, 0)
	}
	tailLanes = rodata("f16TailLanes", lanes)
	tailPerm = rodata("f16TailPerm", perm)
}

// dotF16VecDotTail16AVX512 emits dotF16VecDotTail16AVX512t<tokens>: the tails
// of dotF16VecDotTailAVX512 for tails of a multiple of 16 values (a rank-16 or
// rank-32 LoRA B), sixteen rows at a time, for tokens tokens at once, without
// gathers: each 16×16 block of binary16 values (a row's 16 values to a half of
// one of eight registers) is transposed by three rounds of VPERMI2W, so that each
// register holds two columns of the sixteen rows, converted to float64 once for
// all the tokens; each token's products then add, column after column, to its
// two float64 accumulators of eight rows by a fused multiply-add of the float64
// activation: the product of two binary16 values is exact in float64 as in
// float32, so the fused form rounds as ggml's sumf += (ggml_float)(x·y). Token
// t's n float64 activations are at x + t·xs, its outputs at out + t·os; nr is a
// multiple of 16.
func dotF16VecDotTail16AVX512(tokens int) {
	name := fmt.Sprintf("dotF16VecDotTail16AVX512t%d", tokens)
	TEXT(name, NOSPLIT, "func(out *float32, os int, rows *byte, rb int, x *float64, xs int, n int, nr int)")
	Pragma("noescape")
	Doc(name + " adds to out[t·os+r] (r < nr, a multiple of 16; t < " + fmt.Sprint(tokens) + ") the n (a multiple of 16) binary16 values at rows+r·rb times the float64s x[t·xs…] in ggml_vec_dot_f16's tail order (kernels.dotF16VecDotRows).")
	out, os, rows, rb, x, xs, n, nr := GP64(), GP64(), GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	Load(Param("rows"), rows)
	Load(Param("rb"), rb)
	Load(Param("x"), x)
	Load(Param("xs"), xs)
	Load(Param("n"), n)
	Load(Param("nr"), nr)
	SHLQ(U8(2), os)
	SHLQ(U8(3), xs)
	rb3 := GP64()
	LEAQ(Mem{Base: rb, Index: rb, Scale: 2}, rb3)

	Label(name + "_rows")
	CMPQ(nr, U8(16))
	JL(LabelRef(name + "_done"))
	acc := make([][2]VecVirtual, tokens)
	for t := range acc {
		acc[t] = [2]VecVirtual{ZMM(), ZMM()}
		o := Mem{Base: out}
		if t == 1 {
			o = Mem{Base: out, Index: os, Scale: 1}
		}
		if t > 1 {
			panic("dotF16VecDotTail16AVX512: at most 2 tokens")
		}
		VCVTPS2PD(o, acc[t][0])
		VCVTPS2PD(o.Offset(32), acc[t][1])
	}
	p, xp, c := GP64(), GP64(), GP64()
	MOVQ(rows, p)
	MOVQ(x, xp)
	MOVQ(n, c)

	Label(name + "_chunk")
	CMPQ(c, U8(16))
	JL(LabelRef(name + "_store"))
	{
		// Row r's 16 values at p + r·rb: rows 4k…4k+3 from q = p + 4k·rb.
		var in [8]VecVirtual
		q := GP64()
		MOVQ(p, q)
		for k := range 4 {
			if k > 0 {
				LEAQ(Mem{Base: q, Index: rb, Scale: 4}, q)
			}
			offs := []Mem{{Base: q}, {Base: q, Index: rb, Scale: 1}, {Base: q, Index: rb, Scale: 2}, {Base: q, Index: rb3, Scale: 1}}
			for h := range 2 {
				z := ZMM()
				VMOVDQU64(offs[2*h], z.AsY())
				VINSERTI64X4(U8(1), offs[2*h+1], z, z)
				in[2*k+h] = z
			}
		}
		cols := transposeF16x16(in)
		for j, tr := range cols {
			for h := range 2 {
				w := tr.AsY()
				if h == 1 {
					w = YMM()
					VEXTRACTI64X4(U8(1), tr, w)
				}
				f := ZMM()
				VCVTPH2PS(w, f)
				d := [2]VecVirtual{ZMM(), ZMM()}
				VCVTPS2PD(f.AsY(), d[0])
				u := YMM()
				VEXTRACTF32X8(U8(1), f, u)
				VCVTPS2PD(u, d[1])
				for t := range acc {
					xm := Mem{Base: xp, Disp: 8 * (2*j + h)}
					if t == 1 {
						xm = Mem{Base: xp, Index: xs, Scale: 1, Disp: 8 * (2*j + h)}
					}
					VFMADD231PD_BCST(xm, d[0], acc[t][0])
					VFMADD231PD_BCST(xm, d[1], acc[t][1])
				}
			}
		}
	}
	ADDQ(U8(32), p)
	ADDQ(U32(128), xp)
	SUBQ(U8(16), c)
	JMP(LabelRef(name + "_chunk"))

	Label(name + "_store")
	for t := range acc {
		for h := range 2 {
			r := YMM()
			VCVTPD2PS(acc[t][h], r)
			o := Mem{Base: out, Disp: 32 * h}
			if t == 1 {
				o = Mem{Base: out, Index: os, Scale: 1, Disp: 32 * h}
			}
			VMOVUPS(r, o)
		}
	}
	ADDQ(U8(64), out)
	rb16 := GP64()
	MOVQ(rb, rb16)
	SHLQ(U8(4), rb16)
	ADDQ(rb16, rows)
	SUBQ(U8(16), nr)
	JMP(LabelRef(name + "_rows"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// transposeF16Data holds transposeF16x16's indices, emitted once for all its uses.
var transposeF16Data = map[string]Mem{}

// f16Label is a binary16 value's place in a 16×16 block: its row and column.
type f16Label struct{ row, col int }

// transposeF16x16 transposes the 16×16 binary16 block in, register j holding rows 2j
// (words 0…15) and 2j+1 (words 16…31), each word column c of its row, into
// eight registers, register j holding columns 2j (words 0…15) and 2j+1 (words
// 16…31), word w%16 row w%16: three rounds of VPERMI2W, each pairing registers
// and splitting their columns in halves (8, then 4, then 2 columns of 4, 8, then
// 16 rows). The indices come from following each word's label.
func transposeF16x16(in [8]VecVirtual) [8]VecVirtual {
	labels := make([][32]f16Label, 8)
	for j := range labels {
		for w := range 32 {
			labels[j][w] = f16Label{2*j + w/16, w % 16}
		}
	}
	regs := in[:]
	// Round s pairs registers (a, b) whose rows are apart, each output taking a
	// half of the pair's columns: after it, a register holds 2^(s+2) rows (s < 2)
	// of 8>>s columns.
	type pair struct{ a, b int }
	rounds := [3][4]pair{
		{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, // rows 4k…4k+3, all columns → two halves of 8 columns
		{{0, 2}, {1, 3}, {4, 6}, {5, 7}}, // rows 8q…8q+7: pairs of the same column half
		{{0, 4}, {1, 5}, {2, 6}, {3, 7}}, // rows 0…15
	}
	for s, round := range rounds {
		nextRegs := make([]VecVirtual, 8)
		nextLabels := make([][32]f16Label, 8)
		for pi, pr := range round {
			// The pair's 64 words: their columns, sorted, split in halves.
			var all []f16Label
			all = append(all, labels[pr.a][:]...)
			all = append(all, labels[pr.b][:]...)
			colSet := map[int]bool{}
			rowSet := map[int]bool{}
			for _, l := range all {
				colSet[l.col] = true
				rowSet[l.row] = true
			}
			cs, rs := sortedKeys(colSet), sortedKeys(rowSet)
			for h := range 2 {
				half := cs[h*len(cs)/2 : (h+1)*len(cs)/2]
				var want [32]f16Label
				// Column-major within the register: column, then row.
				w := 0
				for _, col := range half {
					for _, row := range rs {
						want[w] = f16Label{row, col}
						w++
					}
				}
				if w != 32 {
					panic("transposeF16x16: a register is not 32 words")
				}
				var idx [64]byte
				for w, l := range want {
					k := indexOf(labels[pr.a][:], l)
					if k < 0 {
						if k = indexOf(labels[pr.b][:], l); k < 0 {
							panic("transposeF16x16: a word is in neither register of its pair")
						}
						k += 32
					}
					idx[2*w] = byte(k)
				}
				dst := ZMM()
				name := fmt.Sprintf("f16T16r%dp%dh%d", s, pi, h)
				if _, ok := transposeF16Data[name]; !ok {
					transposeF16Data[name] = rodata(name, idx[:])
				}
				VMOVDQU64(transposeF16Data[name], dst)
				VPERMI2W(regs[pr.b], regs[pr.a], dst)
				o := 2*pi + h
				nextRegs[o], nextLabels[o] = dst, want
			}
		}
		regs, labels = nextRegs, nextLabels
	}
	// The last round's register 2pi+h holds, column-major over rows 0…15, two
	// columns: order them by their first column.
	var out [8]VecVirtual
	for j := range regs {
		c := labels[j][0].col
		if labels[j][16].col != c+1 || c%2 != 0 {
			panic("transposeF16x16: a register is not two neighbouring columns")
		}
		for w := range 32 {
			if labels[j][w].row != w%16 {
				panic("transposeF16x16: rows out of order")
			}
		}
		out[c/2] = regs[j]
	}
	return out
}

func sortedKeys(m map[int]bool) []int {
	var k []int
	for v := range m {
		k = append(k, v)
	}
	sort.Ints(k)
	return k
}

func indexOf(ls []f16Label, l f16Label) int {
	for i, x := range ls {
		if x == l {
			return i
		}
	}
	return -1
}

// addScaledAVX2 emits dst[i] += src[i]·s, the product rounded to float32 before
// the sum (ggml_scale, then ggml_add: a LoRA update as build_lora_mm adds it), 32
// values a loop, n a multiple of 8.
func addScaledAVX2() {
	TEXT("addScaledAVX2", NOSPLIT, "func(dst, src *float32, s float32, n int)")
	Pragma("noescape")
	Doc("addScaledAVX2 sets dst[i] += src[i]·s (the product rounded, then added) for i < n, n a multiple of 8.")
	dst, src, n := GP64(), GP64(), GP64()
	Load(Param("dst"), dst)
	Load(Param("src"), src)
	Load(Param("n"), n)
	s := YMM()
	VBROADCASTSS(NewParamAddr("s", 16), s)
	Label("addscaled_4")
	CMPQ(n, U8(32))
	JL(LabelRef("addscaled_1"))
	for k := range 4 {
		v := YMM()
		VMULPS(Mem{Base: src, Disp: 32 * k}, s, v)
		VADDPS(Mem{Base: dst, Disp: 32 * k}, v, v)
		VMOVUPS(v, Mem{Base: dst, Disp: 32 * k})
	}
	ADDQ(U8(128), src)
	ADDQ(U8(128), dst)
	SUBQ(U8(32), n)
	JMP(LabelRef("addscaled_4"))
	Label("addscaled_1")
	CMPQ(n, U8(8))
	JL(LabelRef("addscaled_done"))
	{
		v := YMM()
		VMULPS(Mem{Base: src}, s, v)
		VADDPS(Mem{Base: dst}, v, v)
		VMOVUPS(v, Mem{Base: dst})
	}
	ADDQ(U8(32), src)
	ADDQ(U8(32), dst)
	SUBQ(U8(8), n)
	JMP(LabelRef("addscaled_1"))
	Label("addscaled_done")
	VZEROUPPER()
	RET()
}
