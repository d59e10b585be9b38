package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Attention for a group of queries that read the same keys and values (the query
// heads of one GQA group, several tokens of one sequence): engine/kernels
// attend_tile.go drives them. Each keeps, query by query, the operations and order
// of the per-query kernels of attn.go, so the bits are theirs; what the group
// shares is the loading and conversion of the keys and values, and the update of
// several accumulators interleaved, so that their rounding chains overlap.

// attnGroupMax is the most queries a group kernel takes (engine/kernels'
// attnGroupMax), attnChunkF its score rows' length in float32s (attnChunk).
const (
	attnGroupMax = 4
	attnChunkF   = 64
)

// attnTileScores emits the scores of nq queries against n keys (n a multiple of 8)
// on 512-bit registers: a register holds two keys' 8 lanes (the low half key j,
// the high half key j+1) against the query's 8 values twice over, so a key's
// conversion serves every query and each lane sums, in index order, the products
// attnScoresF16's lane does. The lanes of 8 keys then go through
// hsum8x8Scaled, as attnScoresF16's.
func attnTileScores(nq int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("attnTileScores%dF16AVX512", nq)
	TEXT(name, NOSPLIT, "func(k *uint16, qd *float32, hd, n, stride int, scale float32, s *float32)")
	Pragma("noescape")
	Doc(name+" sets s[t·64+j] = scale·(q_t·k_j) for the "+fmt.Sprint(nq)+" queries t and the n",
		"keys j (n a multiple of 8; k_j the hd binary16 values at k + j·stride), as",
		"attnScoresF16 computes each. qd holds the rounded queries twice over, 8 values",
		"at a time: qd[(g·4+t)·16 + l] = q_t[8g + l%8].")
	k := Load(Param("k"), GP64())
	qd := Load(Param("qd"), GP64())
	hd := Load(Param("hd"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	scx := Load(Param("scale"), XMM())
	s := Load(Param("s"), GP64())
	sc := YMM()
	VBROADCASTSS(scx, sc)
	perm := YMM()
	vmovdqu(attnPermSum, perm)
	s3 := GP64()
	LEAQ(Mem{Base: sb, Index: sb, Scale: 2}, s3)

	Label("blk8")
	CMPQ(n, U8(8))
	JL(LabelRef("done"))
	r0, r4, qp, g := GP64(), GP64(), GP64(), GP64()
	MOVQ(k, r0)
	LEAQ(Mem{Base: k, Index: sb, Scale: 4}, r4)
	MOVQ(qd, qp)
	MOVQ(hd, g)
	addr := func(p int) Mem {
		base := r0
		if p >= 4 {
			base = r4
		}
		switch p % 4 {
		case 1:
			return Mem{Base: base, Index: sb, Scale: 1}
		case 2:
			return Mem{Base: base, Index: sb, Scale: 2}
		case 3:
			return Mem{Base: base, Index: s3, Scale: 1}
		}
		return Mem{Base: base}
	}
	acc := make([][4]VecVirtual, nq)
	for t := range acc {
		for p := range acc[t] {
			acc[t][p] = ZMM()
			VPXORD(acc[t][p], acc[t][p], acc[t][p])
		}
	}
	Label("g8")
	for p := 0; p < 4; p++ {
		kx := YMM()
		VBROADCASTI32X4(addr(2*p), kx) // a full write of kx (the high half replaced next)
		VINSERTI32X4(U8(1), addr(2*p+1), kx, kx)
		kz := ZMM()
		VCVTPH2PS(kx, kz)
		for t := 0; t < nq; t++ {
			x := ZMM()
			VMULPS(Mem{Base: qp, Disp: 64 * t}, kz, x)
			VADDPS(x, acc[t][p], acc[t][p])
		}
	}
	ADDQ(U8(16), r0)
	ADDQ(U8(16), r4)
	ADDQ(U32(64*attnGroupMax), qp)
	SUBQ(U8(8), g)
	JNZ(LabelRef("g8"))
	for t := 0; t < nq; t++ {
		var y [8]VecVirtual
		for p := 0; p < 4; p++ {
			y[2*p] = acc[t][p].AsY().(VecVirtual)
			y[2*p+1] = YMM()
			VEXTRACTF64X4(U8(1), acc[t][p], y[2*p+1]) // AVX512F, unlike VEXTRACTF32X8
		}
		VMOVUPS(hsum8x8Scaled(y[:], perm, sc), Mem{Base: s, Disp: 4 * attnChunkF * t})
	}
	ADDQ(U8(32), s)
	LEAQ(Mem{Base: k, Index: sb, Scale: 8}, k)
	SUBQ(U8(8), n)
	JMP(LabelRef("blk8"))

	Label("done")
	VZEROUPPER()
	RET()
}

// attnTileAccum emits the accumulator update of a chunk for nq queries of head
// size 64 on 512-bit registers: each query's sum is attnAccumF16's scalar chain,
// the queries' chains side by side in the position loop;
// each position's values are converted once and update every query's four
// registers, the updates of the queries interleaved. A position that is no query's
// new maximum takes the straight path; one that is takes, query by query, the
// path of its mask bit. Each query's operations are attnAccumF16AVX512's.
func attnTileAccum(nq int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("attnTileAccum%dF16AVX512", nq)
	TEXT(name, NOSPLIT, "func(acc *float32, v *uint16, n, stride int, e *float32, mask *uint64, sum *float32)")
	Pragma("noescape")
	Doc(name+" is attnAccumF16AVX512 for "+fmt.Sprint(nq)+" queries of head size 64 at once: query t's",
		"accumulator at acc + t·64, its factors at e + t·64 (float32s), its mask",
		"mask[t] and its sum sum[t]; the values v_j (64 binary16 at v + j·stride) are",
		"every query's.")
	accp := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	e := Load(Param("e"), GP64())
	mp := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())

	// The sums, one chain per query, updated in the position loop: the same
	// operations in the same order as attnAccumF16's loop.
	j := GP64()
	sums := make([]VecVirtual, nq)
	for t := range sums {
		sums[t] = XMM()
		VMOVSS(Mem{Base: sump, Disp: 4 * t}, sums[t])
	}

	anyNew := GP64()
	MOVQ(Mem{Base: mp}, anyNew)
	for t := 1; t < nq; t++ {
		ORQ(Mem{Base: mp, Disp: 8 * t}, anyNew)
	}
	a := make([][4]VecVirtual, nq)
	for t := range a {
		for i := range a[t] {
			a[t][i] = ZMM()
			VMOVUPS(Mem{Base: accp, Disp: 4 * (64*t + 16*i)}, a[t][i])
		}
	}
	XORQ(j, j)
	Label("pos")
	CMPQ(j, n)
	JGE(LabelRef("posdone"))
	PREFETCHT0(Mem{Base: v, Index: sb, Scale: 8})
	PREFETCHT0(Mem{Base: v, Index: sb, Scale: 8, Disp: 64})
	var w [4]VecVirtual
	for i := range w {
		w[i] = ZMM()
		VCVTPH2PS(Mem{Base: v, Disp: 32 * i}, w[i])
	}
	BTQ(j, anyNew)
	JCS(LabelRef("slow"))
	straight := func(t int) {
		ej := ZMM()
		VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}, ej)
		for i := range w {
			x := ZMM()
			VMULPS(ej, w[i], x)
			VADDPS(x, a[t][i], a[t][i])
			round16(a[t][i])
		}
		VADDSS(Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}, sums[t], sums[t])
	}
	for t := 0; t < nq; t++ {
		straight(t)
	}
	Label("next")
	ADDQ(sb, v)
	INCQ(j)
	JMP(LabelRef("pos"))

	Label("slow")
	for t := 0; t < nq; t++ {
		l := func(s string) string { return fmt.Sprintf("%s%d", s, t) }
		mask := GP64()
		MOVQ(Mem{Base: mp, Disp: 8 * t}, mask)
		BTQ(j, mask)
		JCS(LabelRef(l("new")))
		straight(t)
		JMP(LabelRef(l("done")))
		Label(l("new"))
		ej := ZMM()
		VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}, ej)
		for i := range w {
			VMULPS(ej, a[t][i], a[t][i])
			round16(a[t][i])
			VADDPS(w[i], a[t][i], a[t][i])
			round16(a[t][i])
		}
		VMULSS(Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}, sums[t], sums[t])
		VADDSS(expfConsts.Offset(ecOne), sums[t], sums[t])
		Label(l("done"))
	}
	JMP(LabelRef("next"))

	Label("posdone")
	sump = Load(Param("sum"), GP64())
	for t := range sums {
		VMOVSS(sums[t], Mem{Base: sump, Disp: 4 * t})
	}
	for t := range a {
		for i := range a[t] {
			VMOVUPS(a[t][i], Mem{Base: accp, Disp: 4 * (64*t + 16*i)})
		}
	}
	VZEROUPPER()
	RET()
}

// attnTileFused emits attnTileAccum's update of a chunk of n positions (n a
// multiple of 8) fused with the scores of the next chunk's n keys, as attnFused
// does for one query: after every two positions' updates, the lanes of the next
// chunk's next two keys against every query (attnTileScores' registers, one key
// pair at a time), stored to part; after the loop, part goes through
// hsum8x8Scaled eight keys at a time. Each half keeps its own operations and
// order, so the bits are attnTileAccum's and attnTileScores'.
func attnTileFused(nq int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("attnTileFused%dF16AVX512", nq)
	TEXT(name, NOSPLIT, "func(acc *float32, v *uint16, n, stride int, e *float32, mask *uint64, sum *float32, k *uint16, qd *float32, scale float32, s *float32, part *float32)")
	Pragma("noescape")
	Doc(name+" is attnTileAccum"+fmt.Sprint(nq)+"F16AVX512 over n positions (a multiple of 8, at most",
		"64) and, in the same loop, attnTileScores"+fmt.Sprint(nq)+"F16AVX512 over the n keys at k",
		"(head size 64) into s; part is scratch for n·32 float32s.")
	accp := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	e := Load(Param("e"), GP64())
	mp := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())
	kp := Load(Param("k"), GP64())
	qd := Load(Param("qd"), GP64())
	part := Load(Param("part"), GP64())

	// The sums, one chain per query, updated in the position loop (as attnFused
	// does): the same operations in the same order as attnAccumF16's loop.
	j := GP64()
	sums := make([]VecVirtual, nq)
	for t := range sums {
		sums[t] = XMM()
		VMOVSS(Mem{Base: sump, Disp: 4 * t}, sums[t])
	}

	anyNew := GP64()
	MOVQ(Mem{Base: mp}, anyNew)
	for t := 1; t < nq; t++ {
		ORQ(Mem{Base: mp, Disp: 8 * t}, anyNew)
	}
	a := make([][4]VecVirtual, nq)
	for t := range a {
		for i := range a[t] {
			a[t][i] = ZMM()
			VMOVUPS(Mem{Base: accp, Disp: 4 * (64*t + 16*i)}, a[t][i])
		}
	}
	straight := func(t int, w [4]VecVirtual) {
		// e_j broadcast from memory (one register fewer): the same products.
		ej := Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}
		for i := range w {
			x := ZMM()
			VMULPS_BCST(ej, w[i], x)
			VADDPS(x, a[t][i], a[t][i])
			round16(a[t][i])
		}
		VADDSS(ej, sums[t], sums[t])
	}
	// position emits one position's update; its slow path goes out of line.
	position := func(slot int) [4]VecVirtual {
		var w [4]VecVirtual
		for i := range w {
			w[i] = ZMM()
			VCVTPH2PS(Mem{Base: v, Disp: 32 * i}, w[i])
		}
		BTQ(j, anyNew)
		JCS(LabelRef(fmt.Sprintf("slow%d", slot)))
		for t := 0; t < nq; t++ {
			straight(t, w)
		}
		Label(fmt.Sprintf("back%d", slot))
		ADDQ(sb, v)
		INCQ(j)
		return w
	}
	slowPath := func(slot int, w [4]VecVirtual) {
		Label(fmt.Sprintf("slow%d", slot))
		for t := 0; t < nq; t++ {
			l := func(s string) string { return fmt.Sprintf("%s%d_%d", s, slot, t) }
			mask := GP64()
			MOVQ(Mem{Base: mp, Disp: 8 * t}, mask)
			BTQ(j, mask)
			JCS(LabelRef(l("new")))
			straight(t, w)
			JMP(LabelRef(l("done")))
			Label(l("new"))
			ej := ZMM()
			VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}, ej)
			for i := range w {
				VMULPS(ej, a[t][i], a[t][i])
				round16(a[t][i])
				VADDPS(w[i], a[t][i], a[t][i])
				round16(a[t][i])
			}
			VMULSS(Mem{Base: e, Index: j, Scale: 4, Disp: 4 * attnChunkF * t}, sums[t], sums[t])
			VADDSS(expfConsts.Offset(ecOne), sums[t], sums[t])
			Label(l("done"))
		}
		JMP(LabelRef(fmt.Sprintf("back%d", slot)))
	}
	// pair emits the lanes of the next two keys (at kp and kp+stride) against
	// every query, to part; kp and part move on.
	pair := func() {
		var pa [attnGroupMax]VecVirtual
		for g := 0; g < 8; g++ {
			kx := YMM()
			VBROADCASTI32X4(Mem{Base: kp, Disp: 16 * g}, kx)
			VINSERTI32X4(U8(1), Mem{Base: kp, Index: sb, Scale: 1, Disp: 16 * g}, kx, kx)
			kz := ZMM()
			VCVTPH2PS(kx, kz)
			for t := 0; t < nq; t++ {
				q := Mem{Base: qd, Disp: 64 * (attnGroupMax*g + t)}
				if g == 0 {
					// 0 + x is x, as attnTileScores' first add.
					pa[t] = ZMM()
					VPXORD(pa[t], pa[t], pa[t])
				}
				x := ZMM()
				VMULPS(q, kz, x)
				VADDPS(x, pa[t], pa[t])
			}
		}
		for t := 0; t < nq; t++ {
			VMOVUPS(pa[t], Mem{Base: part, Disp: 64 * t})
		}
		LEAQ(Mem{Base: kp, Index: sb, Scale: 2}, kp)
		ADDQ(U32(64*attnGroupMax), part)
	}

	nParam, err := Param("n").Resolve()
	if err != nil {
		panic(err)
	}
	XORQ(j, j)
	Label("pos")
	CMPQ(j, nParam.Addr) // n from memory: one register fewer in the loop
	JGE(LabelRef("posdone"))
	w0 := position(0)
	pair()
	w1 := position(1)
	JMP(LabelRef("pos"))
	slowPath(0, w0)
	slowPath(1, w1)

	Label("posdone")
	sump = Load(Param("sum"), GP64())
	for t := range sums {
		VMOVSS(sums[t], Mem{Base: sump, Disp: 4 * t})
	}
	accp = Load(Param("acc"), GP64())
	for t := range a {
		for i := range a[t] {
			VMOVUPS(a[t][i], Mem{Base: accp, Disp: 4 * (64*t + 16*i)})
		}
	}
	// The next chunk's scores from part, eight keys (four pairs) at a time.
	scx := Load(Param("scale"), XMM())
	s := Load(Param("s"), GP64())
	sc := YMM()
	VBROADCASTSS(scx, sc)
	perm := YMM()
	vmovdqu(attnPermSum, perm)
	part = Load(Param("part"), GP64())
	n = Load(Param("n"), GP64())
	Label("red")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	for t := 0; t < nq; t++ {
		var y [8]VecVirtual
		for p := 0; p < 4; p++ {
			for h := 0; h < 2; h++ {
				y[2*p+h] = YMM()
				VMOVUPS(Mem{Base: part, Disp: 64*(attnGroupMax*p+t) + 32*h}, y[2*p+h])
			}
		}
		VMOVUPS(hsum8x8Scaled(y[:], perm, sc), Mem{Base: s, Disp: 4 * attnChunkF * t})
	}
	ADDQ(U32(4*64*attnGroupMax), part)
	ADDQ(U8(32), s)
	SUBQ(U8(8), n)
	JMP(LabelRef("red"))
	Label("done")
	VZEROUPPER()
	RET()
}
