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
// on 512-bit registers, head size 64 (hd is ignored): a register holds two keys'
// 8 lanes (the low half key j, the high half key j+1) against the query's 8 values
// twice over, so a key's conversion serves every query, and each lane is
// attnScoreLanes' (attnPairLanes). The lanes of 8 keys then go through
// hsum8x8Scaled, as attnScoresF16's.
func attnTileScores(nq int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("attnTileScores%dF16AVX512", nq)
	TEXT(name, 0, "func(k *uint16, qd *float32, hd, n, stride int, scale float32, s *float32)")
	Pragma("noescape")
	Doc(name+" sets s[t·64+j] = scale·(q_t·k_j) for the "+fmt.Sprint(nq)+" queries t and the n",
		"keys j (n a multiple of 8; k_j the hd binary16 values at k + j·stride), as",
		"attnScoresF16 computes each. qd holds the rounded queries twice over, 8 values",
		"at a time: qd[(g·4+t)·16 + l] = q_t[8g + l%8].")
	k := Load(Param("k"), GP64())
	qd := Load(Param("qd"), GP64())
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

	local := AllocLocal(4 * 64 * attnGroupMax)
	spill := AllocLocal(2 * 64 * attnGroupMax)
	Label("blk8")
	CMPQ(n, U8(8))
	JL(LabelRef("done"))
	r0, r4 := GP64(), GP64()
	MOVQ(k, r0)
	LEAQ(Mem{Base: k, Index: sb, Scale: 4}, r4)
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
	for p := 0; p < 4; p++ {
		lanes := attnPairLanes(func(g int) (Mem, Mem) { return addr(2 * p).Offset(16 * g), addr(2*p + 1).Offset(16 * g) },
			qd.(GPVirtual), nq, func(t int) Mem { return spill.Offset(64 * t) })
		for t := range lanes {
			VMOVUPS(lanes[t], local.Offset(64*(attnGroupMax*p+t)))
		}
	}
	for t := 0; t < nq; t++ {
		var y [8]VecVirtual
		for p := 0; p < 4; p++ {
			for h := 0; h < 2; h++ {
				y[2*p+h] = YMM()
				VMOVUPS(local.Offset(64*(attnGroupMax*p+t)+32*h), y[2*p+h])
			}
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

// attnPairLanes emits the lanes of attnScore (head size 64) of two keys against
// each of nq queries: register t holds key 0's 8 lanes u in its low half and key
// 1's in its high half, against query t (qd's layout: qd[(g·4+t)·16 + l] =
// q_t[8g + l%8]). key(g) addresses the two keys' values 8g..8g+7. The tree
// ((G0+G4)+(G2+G6)) + ((G1+G5)+(G3+G7)) is taken in that order, its partial
// sums parked in two slots (spill(t) and 64·attnGroupMax bytes on), so that one
// register a query suffices.
func attnPairLanes(key func(g int) (Mem, Mem), qd GPVirtual, nq int, spill func(t int) Mem) []VecVirtual {
	conv := func(g int) VecVirtual {
		m0, m1 := key(g)
		kx := YMM()
		VBROADCASTI32X4(m0, kx) // a full write of kx (the high half replaced next)
		VINSERTI32X4(U8(1), m1, kx, kx)
		kz := ZMM()
		VCVTPH2PS(kx, kz)
		return kz
	}
	prod := func(kz VecVirtual, g, t int) VecVirtual {
		x := ZMM()
		VMULPS(Mem{Base: qd, Disp: 64 * (attnGroupMax*g + t)}, kz, x)
		return x
	}
	a := make([]VecVirtual, nq)
	// pairSum sets r[t] = G_g0 + G_g1 for every query.
	pairSum := func(r []VecVirtual, g0, g1 int) {
		kz := conv(g0)
		for t := range r {
			r[t] = prod(kz, g0, t)
		}
		kz = conv(g1)
		for t := range r {
			VADDPS(prod(kz, g1, t), r[t], r[t])
		}
	}
	// Each pair's sum is parked (the queries' registers then hold the next), and
	// the sums are taken back as memory operands: IEEE sums are commutative.
	park := func(slot int) {
		for t := range a {
			VMOVUPS(a[t], spill(t).Offset(64*attnGroupMax*slot))
		}
	}
	unpark := func(slot int) {
		for t := range a {
			VADDPS(spill(t).Offset(64*attnGroupMax*slot), a[t], a[t])
		}
	}
	pairSum(a, 0, 4) // G0+G4
	park(0)
	pairSum(a, 2, 6)
	unpark(0) // (G0+G4)+(G2+G6)
	park(0)
	pairSum(a, 1, 5)
	park(1)
	pairSum(a, 3, 7)
	unpark(1) // (G1+G5)+(G3+G7)
	unpark(0)
	return a
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
			VFMADD231PS(ej, w[i], a[t][i])
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
	spill := AllocLocal(2 * 64 * attnGroupMax)

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
			VFMADD231PS_BCST(ej, w[i], a[t][i])
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
		pa := attnPairLanes(func(g int) (Mem, Mem) {
			return Mem{Base: kp, Disp: 16 * g}, Mem{Base: kp, Index: sb, Scale: 1, Disp: 16 * g}
		}, qd.(GPVirtual), nq, func(t int) Mem { return spill.Offset(64 * t) })
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
