//go:build !purego

package kernels

import (
	"math"
	"unsafe"
)

// attnChunk is how many positions the assembly takes through each of its three
// steps at a time (scores, softmax factors, accumulator update).
const attnChunk = 64

// span adds positions 0..n-1 (keys and values at k[j*stride:] and v[j*stride:])
// to the state, through the assembly when the head size is a multiple of 8: the
// bits of attnSpanGeneric.
func (st *attnState) span(k, v []uint16, n, stride int, scale float32) {
	hd := st.hd
	if !useAVX2 || hd%8 != 0 || hd == 0 || n <= 0 {
		attnSpanGeneric(st, k, v, n, stride, scale)
		return
	}
	_ = k[(n-1)*stride+hd-1]
	_ = v[(n-1)*stride+hd-1]
	st.chunks(func(c int) ([]uint16, []uint16) { return k[c*attnChunk*stride:], v[c*attnChunk*stride:] },
		attnChunk, n, stride, scale)
}

// spanBlocks adds positions 0..n-1 of a paged cache (AttendBlocks' layout) to the
// state. Blocks of a multiple of 8 positions, at most attnChunk, are the chunks
// themselves, so that the fused kernel runs across block boundaries; other block
// sizes go block by block through span. Either way the bits are attnSpanGeneric's.
func (st *attnState) spanBlocks(ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	hd := st.hd
	if !useAVX2 || hd%8 != 0 || hd == 0 || bt%8 != 0 || bt > attnChunk {
		st.spanEachBlock(ks, vs, off, stride, bt, n, scale)
		return
	}
	for b := 0; b*bt < n; b++ {
		m := min(bt, n-b*bt)
		_ = ks[b][off+(m-1)*stride+hd-1]
		_ = vs[b][off+(m-1)*stride+hd-1]
	}
	st.chunks(func(c int) ([]uint16, []uint16) { return ks[c][off:], vs[c][off:] }, bt, n, stride, scale)
}

// chunks adds positions 0..n-1 in chunks of cs (a multiple of 8, at most attnChunk):
// chunk c's keys and values start at at(c), rows stride apart, and hold positions
// [c·cs, min((c+1)·cs, n)). The caller has checked the rows are in bounds.
func (st *attnState) chunks(at func(c int) (k, v []uint16), cs, n, stride int, scale float32) {
	var cb chunkBufs
	for c, j0 := 0, 0; j0 < n; c, j0 = c+1, j0+cs {
		m, m1 := min(cs, n-j0), min(cs, n-j0-cs)
		k, v := at(c)
		var kn []uint16
		if st.fuses(m, m1) {
			kn, _ = at(c + 1)
		}
		st.chunk(&cb, k, v, kn, m, m1, stride, scale)
	}
}

// chunkBufs is a state's progress through its chunks between calls of chunk: two
// score buffers, since the fused kernel (head size 64, AVX-512) writes the next
// chunk's scores while it updates the accumulator with this one's.
type chunkBufs struct {
	buf   [2][attnChunk]float32
	mask  [attnChunk / 8]uint8
	cur   int
	ready bool // buf[cur] holds the scores of the chunk to come
}

// fuses reports whether chunk, given a chunk of m positions followed by one of m1,
// takes the fused kernel and so needs the next chunk's keys.
func (st *attnState) fuses(m, m1 int) bool {
	return useAVX512 && st.hd == 64 && m%8 == 0 && m1 >= 8
}

// chunk adds the next chunk of m positions (keys and values at k and v, rows
// stride apart) to the state; m1 is the size of the chunk after it (≤ 0 if none),
// whose keys kn are needed when st.fuses(m, m1). A state's chunks go through
// chunk in order, with the same cb; chunks of other states may come in between
// (AttendBlocksTile), which changes nothing in this state's operations.
func (st *attnState) chunk(cb *chunkBufs, k, v, kn []uint16, m, m1, stride int, scale float32) {
	hd := st.hd
	qr := &st.qr()[0]
	e := &cb.buf[cb.cur]
	if !cb.ready {
		attnScoresF16(&k[0], qr, hd, m, stride, scale, &e[0])
	}
	if useAVX512 {
		for i := m; i < (m+15)&^15; i++ {
			e[i] = float32(math.Inf(-1))
		}
		attnExpF16AVX512(&e[0], m, &st.mx, &cb.mask[0])
	} else {
		for i := m; i < (m+7)&^7; i++ {
			e[i] = float32(math.Inf(-1))
		}
		attnExpF16(&e[0], m, &st.mx, &cb.mask[0])
	}
	var bits uint64
	for i, b := range cb.mask[:(m+7)/8] {
		bits |= uint64(b) << (8 * i)
	}
	switch {
	case st.fuses(m, m1):
		next := &cb.buf[cb.cur^1]
		nsc := m1 &^ 7
		attnFusedF16AVX512(&st.acc()[0], &v[0], m, &e[0], bits, &st.sum, &kn[0], qr, nsc, stride, scale, &next[0])
		if nsc < m1 {
			attnScoresF16(&kn[nsc*stride], qr, hd, m1-nsc, stride, scale, &next[nsc])
		}
		cb.cur, cb.ready = cb.cur^1, true
		return
	case useAVX512:
		attnAccumF16AVX512(&st.acc()[0], &v[0], hd, m, stride, &e[0], bits, &st.sum)
	default:
		attnAccumF16(&st.acc()[0], &v[0], hd, m, stride, &e[0], bits, &st.sum)
	}
	cb.ready = false
}

// tileChunks is spanBlocks' chunked path for a tile of states (state t: positions
// 0..ns[t]-1, nmax the largest), blocks outer: each state gets the chunk calls it
// would get on its own, in the same order. It reports false, having done nothing,
// where spanBlocks would go block by block.
func tileChunks(sts []attnState, ns []int, ks, vs [][]uint16, off, stride, bt, nmax int, scale float32) bool {
	if len(sts) == 0 {
		return true
	}
	hd := sts[0].hd
	if !useAVX2 || hd%8 != 0 || hd == 0 || bt%8 != 0 || bt > attnChunk {
		return false
	}
	for b := 0; b*bt < nmax; b++ {
		m := min(bt, nmax-b*bt)
		_ = ks[b][off+(m-1)*stride+hd-1]
		_ = vs[b][off+(m-1)*stride+hd-1]
	}
	if useAVX512 && hd == attnGroupHD {
		tileGroups(sts, ns, ks, vs, off, stride, bt, nmax, scale)
		return true
	}
	var cbs [attnTileMax]chunkBufs
	for c, j0 := 0, 0; j0 < nmax; c, j0 = c+1, j0+bt {
		k, v := ks[c][off:], vs[c][off:]
		for t := range sts {
			st := &sts[t]
			m, m1 := min(bt, ns[t]-j0), min(bt, ns[t]-j0-bt)
			if m <= 0 {
				continue
			}
			var kn []uint16
			if st.fuses(m, m1) {
				kn = ks[c+1][off:]
			}
			st.chunk(&cbs[t], k, v, kn, m, m1, stride, scale)
		}
	}
	return true
}

// attnGroupMax is the most states a group kernel (attnTileScores…, attnTileAccum…)
// takes at once, attnGroupHD the head size they are written for.
const (
	attnGroupMax = 4
	attnGroupHD  = 64
)

// attnGroup is up to attnGroupMax states of a tile going through the group
// kernels together: their rounded queries twice over (qd[g][t] = q_t[8g:8g+8]
// twice, the layout of attnTileScores), accumulators, running maxima and sums,
// and a chunk's scores (then softmax factors) and masks; two score buffers, as
// chunkBufs, since the fused kernel writes the next chunk's scores while it
// updates the accumulators with this one's.
type attnGroup struct {
	qd    [attnGroupHD / 8][attnGroupMax][16]float32
	acc   [attnGroupMax][attnGroupHD]float32
	e     [2][attnGroupMax][attnChunk]float32
	mask  [attnGroupMax][attnChunk / 8]uint8
	bits  [attnGroupMax]uint64
	mx    [attnGroupMax]float32
	sum   [attnGroupMax]float32
	nq    int
	cur   int
	ready bool // e[cur] holds the scores of the chunk to come
	on    bool // the states are here, not in their attnStates
}

// attnPart is the fused group kernels' scratch: a chunk's key pairs' lanes
// against each state.
type attnPart [attnChunk / 2][attnGroupMax][16]float32

// load takes the states (head size attnGroupHD) into the group.
func (gr *attnGroup) load(sts []attnState) {
	gr.nq, gr.on = len(sts), true
	for t := range sts {
		st := &sts[t]
		qr := st.qr()
		for g := range gr.qd {
			copy(gr.qd[g][t][:8], qr[8*g:])
			copy(gr.qd[g][t][8:], qr[8*g:])
		}
		copy(gr.acc[t][:], st.acc())
		gr.mx[t], gr.sum[t] = st.mx, st.sum
	}
}

// store gives the states back their accumulators, maxima and sums.
func (gr *attnGroup) store(sts []attnState) {
	for t := range sts {
		st := &sts[t]
		copy(st.acc(), gr.acc[t][:])
		st.mx, st.sum = gr.mx[t], gr.sum[t]
	}
	gr.on = false
}

// chunk adds a chunk of m positions (a multiple of 8, at most attnChunk; keys and
// values at k and v, rows stride apart) to every state of the group: the scores of
// all of them against each key at once (unless the chunk before computed them),
// each state's softmax factors, then the accumulators' updates interleaved and,
// given the next chunk's keys kn (m of them, for every state of the group), its
// scores in the same loop (part its scratch). Each state's operations are those
// chunk gives it on its own, hence its bits.
func (gr *attnGroup) chunk(k, v, kn []uint16, m, stride int, scale float32, part *attnPart) {
	es := &gr.e[gr.cur]
	if !gr.ready {
		switch gr.nq {
		case 2:
			attnTileScores2F16AVX512(&k[0], &gr.qd[0][0][0], attnGroupHD, m, stride, scale, &es[0][0])
		case 3:
			attnTileScores3F16AVX512(&k[0], &gr.qd[0][0][0], attnGroupHD, m, stride, scale, &es[0][0])
		default:
			attnTileScores4F16AVX512(&k[0], &gr.qd[0][0][0], attnGroupHD, m, stride, scale, &es[0][0])
		}
	}
	for t := 0; t < gr.nq; t++ {
		e := &es[t]
		for i := m; i < (m+15)&^15; i++ {
			e[i] = float32(math.Inf(-1))
		}
		attnExpF16AVX512(&e[0], m, &gr.mx[t], &gr.mask[t][0])
		var bits uint64
		for i, b := range gr.mask[t][:(m+7)/8] {
			bits |= uint64(b) << (8 * i)
		}
		gr.bits[t] = bits
	}
	if kn != nil {
		next := &gr.e[gr.cur^1][0][0]
		switch gr.nq {
		case 2:
			attnTileFused2F16AVX512(&gr.acc[0][0], &v[0], m, stride, &es[0][0], &gr.bits[0], &gr.sum[0], &kn[0], &gr.qd[0][0][0], scale, next, &part[0][0][0])
		case 3:
			attnTileFused3F16AVX512(&gr.acc[0][0], &v[0], m, stride, &es[0][0], &gr.bits[0], &gr.sum[0], &kn[0], &gr.qd[0][0][0], scale, next, &part[0][0][0])
		default:
			attnTileFused4F16AVX512(&gr.acc[0][0], &v[0], m, stride, &es[0][0], &gr.bits[0], &gr.sum[0], &kn[0], &gr.qd[0][0][0], scale, next, &part[0][0][0])
		}
		gr.cur, gr.ready = gr.cur^1, true
		return
	}
	switch gr.nq {
	case 2:
		attnTileAccum2F16AVX512(&gr.acc[0][0], &v[0], m, stride, &es[0][0], &gr.bits[0], &gr.sum[0])
	case 3:
		attnTileAccum3F16AVX512(&gr.acc[0][0], &v[0], m, stride, &es[0][0], &gr.bits[0], &gr.sum[0])
	default:
		attnTileAccum4F16AVX512(&gr.acc[0][0], &v[0], m, stride, &es[0][0], &gr.bits[0], &gr.sum[0])
	}
	gr.ready = false
}

// tileGroups is tileChunks for head size attnGroupHD on AVX-512: the states, in
// groups of up to attnGroupMax, take the blocks (blocks outer) through the group
// kernels while every state of the group has the whole block; from the first block
// where one does not (the causal end of a tile's tokens), and for a group of one,
// each state goes on through chunk, unfused. The caller has checked the blocks'
// rows are in bounds.
func tileGroups(sts []attnState, ns []int, ks, vs [][]uint16, off, stride, bt, nmax int, scale float32) {
	var grs [attnTileMax / attnGroupMax]attnGroup
	ng := (len(sts) + attnGroupMax - 1) / attnGroupMax
	for g := 0; g < ng; g++ {
		if t0, t1 := g*attnGroupMax, min(len(sts), (g+1)*attnGroupMax); t1-t0 > 1 {
			grs[g].load(sts[t0:t1])
		}
	}
	var cbs [attnTileMax]chunkBufs
	var part attnPart
	for c, j0 := 0, 0; j0 < nmax; c, j0 = c+1, j0+bt {
		k, v := ks[c][off:], vs[c][off:]
		for g := 0; g < ng; g++ {
			gr := &grs[g]
			t0, t1 := g*attnGroupMax, min(len(sts), (g+1)*attnGroupMax)
			if gr.on {
				full, fullNext := true, true
				for _, n := range ns[t0:t1] {
					full = full && n-j0 >= bt
					fullNext = fullNext && n-j0-bt >= bt
				}
				if full {
					var kn []uint16
					if fullNext {
						kn = ks[c+1][off:]
					}
					gr.chunk(k, v, kn, bt, stride, scale, &part)
					continue
				}
				gr.store(sts[t0:t1])
			}
			for t := t0; t < t1; t++ {
				if m := min(bt, ns[t]-j0); m > 0 {
					sts[t].chunk(&cbs[t], k, v, nil, m, 0, stride, scale)
				}
			}
		}
	}
	for g := 0; g < ng; g++ {
		if grs[g].on {
			grs[g].store(sts[g*attnGroupMax : min(len(sts), (g+1)*attnGroupMax)])
		}
	}
}

// accumQ8_0 and accumQ4_0 add a quantized V row to a float32 accumulator
// (AttendBlocksKV): the bits of their Generic references, through the assembly on
// AVX2.
func accumQ8_0(acc []float32, v []byte, vs float32) {
	nb := len(acc) / qk0
	if !useAVX2 || nb == 0 {
		accumQ8_0Generic(acc, v, vs)
		return
	}
	_ = v[nb*34-1]
	accumQ8_0AVX2(&acc[0], &v[0], nb, vs)
}

func accumQ4_0(acc []float32, v []byte, vs float32) {
	nb := len(acc) / qk0
	if !useAVX2 || nb == 0 {
		accumQ4_0Generic(acc, v, vs)
		return
	}
	_ = v[nb*18-1]
	accumQ4_0AVX2(&acc[0], &v[0], nb, vs)
}

// span adds positions 0..n-1 of a cache with a block format (K rows at
// k[j*kstride:], V rows at v[j*vstride:]) in chunks of up to attnChunk positions,
// the steps of the binary16 path: the chunk's scores (attnScoresF16 for an f16 K,
// scoresKV otherwise), its softmax factors (attnExpF16), then the
// accumulator's update (attnAccumF16, or attnAccumQ8_0AVX2 / attnAccumQ4_0AVX2 for
// a quantized V): the bits of spanGeneric.
func (st *kvState) span(k, v []uint16, n, kstride, vstride int, scale float32) {
	hd := st.hd
	if !useAVX2 || hd%8 != 0 || n <= 0 {
		st.spanGeneric(k, v, n, kstride, vstride, scale)
		return
	}
	kw, vw := st.kt.Units(hd), st.vt.Units(hd)
	_ = k[(n-1)*kstride+kw-1]
	_ = v[(n-1)*vstride+vw-1]
	var e [attnChunk]float32
	var mask [attnChunk / 8]uint8
	acc := st.acc()
	for j0 := 0; j0 < n; j0 += attnChunk {
		m := min(attnChunk, n-j0)
		kc, vc := k[j0*kstride:], v[j0*vstride:]
		if st.kt.Quantized() {
			scoresKV(st.kt, kc, kstride, &st.q8()[0], 0, 1, hd/qk0, m, scale, &e[0])
		} else {
			attnScoresF16(&kc[0], &st.qr()[0], hd, m, kstride, scale, &e[0])
		}
		if useAVX512 {
			for i := m; i < (m+15)&^15; i++ {
				e[i] = float32(math.Inf(-1))
			}
			attnExpF16AVX512(&e[0], m, &st.mx, &mask[0])
		} else {
			for i := m; i < (m+7)&^7; i++ {
				e[i] = float32(math.Inf(-1))
			}
			attnExpF16(&e[0], m, &st.mx, &mask[0])
		}
		var bits uint64
		for i, b := range mask[:(m+7)/8] {
			bits |= uint64(b) << (8 * i)
		}
		switch st.vt {
		case KVQ8_0:
			attnAccumQ8_0AVX2(&acc[0], (*byte)(unsafe.Pointer(&vc[0])), hd/qk0, m, 2*vstride, &e[0], bits, &st.sum)
		case KVQ4_0:
			attnAccumQ4_0AVX2(&acc[0], (*byte)(unsafe.Pointer(&vc[0])), hd/qk0, m, 2*vstride, &e[0], bits, &st.sum)
		default:
			if useAVX512 {
				attnAccumF16AVX512(&acc[0], &vc[0], hd, m, vstride, &e[0], bits, &st.sum)
			} else {
				attnAccumF16(&acc[0], &vc[0], hd, m, vstride, &e[0], bits, &st.sum)
			}
		}
	}
}

// kvGroup is up to attnGroupMax states of a tile over a quantized V cache going
// through attnAccumGroup…AVX2 together (a GQA group's heads share every V row's
// dequantization): their accumulators and sums, held here while the group is on
// (the layout the kernels take), and a chunk's softmax factors and masks.
type kvGroup struct {
	acc  [attnGroupMax][attnStackHD]float32
	e    [attnGroupMax][attnChunk]float32
	mask [attnGroupMax]uint64
	sum  [attnGroupMax]float32
	nq   int
	on   bool // the states' accumulators and sums are here
}

func (gr *kvGroup) load(sts []kvState) {
	gr.nq, gr.on = len(sts), true
	for g := range sts {
		copy(gr.acc[g][:], sts[g].acc())
		gr.sum[g] = sts[g].sum
	}
}

func (gr *kvGroup) store(sts []kvState) {
	for g := range sts {
		copy(sts[g].acc(), gr.acc[g][:sts[g].hd])
		sts[g].sum = gr.sum[g]
	}
	gr.on = false
}

// chunk adds a chunk of m positions (K rows at k, V rows at v) to every state of
// the group: the states' scores (a quantized K: scoresKV, 8 positions × every
// state at a time) and softmax factors as span computes them, then the
// accumulators' updates together. Each state's operations are span's, hence
// its bits.
func (gr *kvGroup) chunk(sts []kvState, k, v []uint16, m, kstride, vstride int, scale float32, nx *nextBlock, part int) {
	var mask [attnChunk / 8]uint8
	if kt := sts[0].kt; kt.Quantized() {
		// The heads' queries are kvStateSize bytes apart (sts is an array's slice,
		// each query in its state: head sizes up to attnStackHD).
		scoresKV(kt, k, kstride, &sts[0].q8()[0], kvStateSize, len(sts), sts[0].hd/qk0, m, scale, &gr.e[0][0])
	}
	for g := range sts {
		st, e := &sts[g], &gr.e[g]
		if !st.kt.Quantized() {
			attnScoresF16(&k[0], &st.qr()[0], st.hd, m, kstride, scale, &e[0])
		}
		if useAVX512 {
			for i := m; i < (m+15)&^15; i++ {
				e[i] = float32(math.Inf(-1))
			}
			attnExpF16AVX512(&e[0], m, &st.mx, &mask[0])
		} else {
			for i := m; i < (m+7)&^7; i++ {
				e[i] = float32(math.Inf(-1))
			}
			attnExpF16(&e[0], m, &st.mx, &mask[0])
		}
		var bits uint64
		for i, b := range mask[:(m+7)/8] {
			bits |= uint64(b) << (8 * i)
		}
		gr.mask[g] = bits
	}
	nx.prefetch(part)
	vb, nb := (*byte)(unsafe.Pointer(&v[0])), sts[0].hd/qk0
	switch {
	case sts[0].vt == KVQ8_0 && gr.nq == 2:
		attnAccumGroup2Q8_0AVX2(&gr.acc[0][0], vb, nb, m, 2*vstride, &gr.e[0][0], &gr.mask[0], &gr.sum[0])
	case sts[0].vt == KVQ8_0 && gr.nq == 3:
		attnAccumGroup3Q8_0AVX2(&gr.acc[0][0], vb, nb, m, 2*vstride, &gr.e[0][0], &gr.mask[0], &gr.sum[0])
	case sts[0].vt == KVQ8_0:
		attnAccumGroup4Q8_0AVX2(&gr.acc[0][0], vb, nb, m, 2*vstride, &gr.e[0][0], &gr.mask[0], &gr.sum[0])
	case gr.nq == 2:
		attnAccumGroup2Q4_0AVX2(&gr.acc[0][0], vb, nb, m, 2*vstride, &gr.e[0][0], &gr.mask[0], &gr.sum[0])
	case gr.nq == 3:
		attnAccumGroup3Q4_0AVX2(&gr.acc[0][0], vb, nb, m, 2*vstride, &gr.e[0][0], &gr.mask[0], &gr.sum[0])
	default:
		attnAccumGroup4Q4_0AVX2(&gr.acc[0][0], vb, nb, m, 2*vstride, &gr.e[0][0], &gr.mask[0], &gr.sum[0])
	}
}

// tileKVGroups is AttendBlocksTileKV's block loop for a tile of states over a
// cache with a block format on AVX2 (state t: positions 0..ns[t]-1, nmax the
// largest), blocks outer, the next block's rows prefetched while one is worked on.
// Over a quantized V, the states, in groups of gs (≤ attnGroupMax), take each block
// through kvGroup.chunk while all of a group's states take the same positions of
// it; from the first block where they do not (the causal end of a tile's tokens),
// for a group of one, and over an f16 V, each state goes through span. Group g
// reads the K and V rows at koff + g·hk and voff + g·hv units (hk = hv = 0: one KV
// head; AttendBlocksTileKVHeads: consecutive KV heads, a group each, so that a
// block's rows come into the cache once for all of them). It reports
// false, having done nothing, where the states take span without prefetching
// (no AVX2, blocks longer than attnChunk, head sizes past attnStackHD).
func tileKVGroups(sts []kvState, ns []int, ks, vs [][]uint16, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv int, scale float32) bool {
	if len(sts) == 0 || !useAVX2 || bt > attnChunk {
		return false
	}
	hd := sts[0].hd
	if hd == 0 || hd%qk0 != 0 || hd > attnStackHD {
		return false
	}
	grouped := sts[0].vt.Quantized()
	ng := (len(sts) + gs - 1) / gs
	kw, vw := (ng-1)*hk+sts[0].kt.Units(hd), (ng-1)*hv+sts[0].vt.Units(hd) // every group's rows
	for b := 0; b*bt < nmax; b++ {
		m := min(bt, nmax-b*bt)
		_ = ks[b][koff+(m-1)*kstride+kw-1]
		_ = vs[b][voff+(m-1)*vstride+vw-1]
	}
	var grs [attnTileMax / attnGroupMax]kvGroup
	for g := 0; g < ng; g++ {
		if t0, t1 := g*gs, min(len(sts), (g+1)*gs); t1-t0 > 1 && grouped {
			grs[g].load(sts[t0:t1])
		}
	}
	for c, j0 := 0, 0; j0 < nmax; c, j0 = c+1, j0+bt {
		// The next block's rows, on their way while this one is worked on, two
		// parts per group: before its scores and before its accumulation.
		nx := nextBlock{parts: 2 * ng}
		if mn := min(bt, nmax-j0-bt); mn > 0 {
			nx = nextBlock{unsafe.Pointer(&ks[c+1][koff]), unsafe.Pointer(&vs[c+1][voff]), mn, 2 * kstride, 2 * kw, 2 * vstride, 2 * vw, 2 * ng}
		}
		for g := 0; g < ng; g++ {
			nx.prefetch(2 * g)
			gr := &grs[g]
			k, v := ks[c][koff+g*hk:], vs[c][voff+g*hv:]
			t0, t1 := g*gs, min(len(sts), (g+1)*gs)
			m := min(bt, ns[t0]-j0)
			if gr.on {
				same := m > 0
				for _, n := range ns[t0+1 : t1] {
					same = same && min(bt, n-j0) == m
				}
				if same {
					gr.chunk(sts[t0:t1], k, v, m, kstride, vstride, scale, &nx, 2*g+1)
					continue
				}
				gr.store(sts[t0:t1])
			}
			for t := t0; t < t1; t++ {
				if m := min(bt, ns[t]-j0); m > 0 {
					sts[t].span(k, v, m, kstride, vstride, scale)
				}
			}
			nx.prefetch(2*g + 1)
		}
	}
	for g := 0; g < ng; g++ {
		if grs[g].on {
			grs[g].store(sts[g*gs : min(len(sts), (g+1)*gs)])
		}
	}
	return true
}

// kvStateSize is the byte distance between consecutive kvStates (kvGroup.chunk's
// queries).
const kvStateSize = int(unsafe.Sizeof(kvState{}))

// scoresKV sets e[t*attnChunk+j] = the score of position j < m (K rows of nb kt
// blocks at k[j*kstride:]) against query t < nq (nb q8Blocks at y, then ys bytes
// apart), times scale: attnScoresQ8_0AVX2's / attnScoresQ4_0AVX2's bits (those of
// dotQ8_0RowGeneric / dotQ4_0RowGeneric, then ·scale). Runs of 8 positions go
// through the outer-product tiles dot…AVX2x8t<nq> (nq ≤ attnGroupMax), every
// query at once; the positions past the last 8 through attnScores…AVX2, a query
// at a time.
func scoresKV(kt KVType, k []uint16, kstride int, y *q8Block, ys, nq, nb, m int, scale float32, e *float32) {
	kb, yb := unsafe.Pointer(&k[0]), unsafe.Pointer(y)
	m8 := m &^ 7
	const es = 4 * attnChunk
	for p := 0; p < m8; p += 8 {
		x, out := (*byte)(unsafe.Add(kb, 2*p*kstride)), (*float32)(unsafe.Add(unsafe.Pointer(e), 4*p))
		// A switch, not a table of funcs: the kernels' arguments must not escape.
		switch q4 := kt == KVQ4_0; {
		case nq == 1 && !q4:
			dotQ8_0AVX2x8t1(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		case nq == 1:
			dotQ4_0AVX2x8t1(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		case nq == 2 && !q4:
			dotQ8_0AVX2x8t2(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		case nq == 2:
			dotQ4_0AVX2x8t2(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		case nq == 3 && !q4:
			dotQ8_0AVX2x8t3(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		case nq == 3:
			dotQ4_0AVX2x8t3(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		case !q4:
			dotQ8_0AVX2x8t4(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		default:
			dotQ4_0AVX2x8t4(x, 2*kstride, (*byte)(yb), ys, nb, scale, out, attnChunk)
		}
	}
	if m8 == m {
		return
	}
	x := (*byte)(unsafe.Add(kb, 2*m8*kstride))
	for t := 0; t < nq; t++ {
		yt, out := (*byte)(unsafe.Add(yb, t*ys)), (*float32)(unsafe.Add(unsafe.Pointer(e), t*es+4*m8))
		if kt == KVQ8_0 {
			attnScoresQ8_0AVX2(x, yt, nb, m-m8, 2*kstride, scale, out)
		} else {
			attnScoresQ4_0AVX2(x, yt, nb, m-m8, 2*kstride, scale, out)
		}
	}
}
