//go:build !purego

package kernels

import (
	"math"
	"unsafe"
)

// tileKV is AttendBlocksTileKV's block loop for a tile of states (tileKVGroups'
// contract): on AVX-512 over a quantized V, tileKVGroups512; otherwise
// tileKVGroups.
func tileKV(sts []kvState, ns []int, ks, vs [][]uint16, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv int, scale float32) bool {
	if useAVX512 && len(sts) > 0 && sts[0].vt.Quantized() {
		return tileKVGroups512(sts, ns, ks, vs, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv, scale)
	}
	return tileKVGroups(sts, ns, ks, vs, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv, scale)
}

// kvGroup512 is kvGroup on AVX-512, for groups of 1 to attnGroupMax states: the
// heads' Q8_0 queries again, side by side and with c = −k·Σqs (k = 128 for a Q8_0
// K, 8 for Q4_0) as the outer-product tiles take them (dotQ8_0AVX512x16t…, 16
// positions as 16 rows: each lane the bits of dotQ8_0AVX2), the unused ones
// copies of the first; and the accumulators' kernels attnAccumGroup…AVX512.
type kvGroup512 struct {
	kvGroup
	q8 [attnGroupMax][attnStackHD / qk0]q8Block
}

// kvQ8Stride is the byte distance between the heads' queries in kvGroup512.q8.
const kvQ8Stride = int(unsafe.Sizeof([attnStackHD / qk0]q8Block{}))

func (gr *kvGroup512) load(sts []kvState) {
	gr.kvGroup.load(sts)
	if !sts[0].kt.Quantized() {
		return
	}
	shift := 7
	if sts[0].kt == KVQ4_0 {
		shift = 3
	}
	for g := range gr.q8 {
		src := &sts[0]
		if g < len(sts) {
			src = &sts[g]
		}
		q8 := src.q8()
		for b, blk := range q8 {
			gr.q8[g][b] = blk
			gr.q8[g][b].c = blk.c << shift // c is −Σqs (kvState.start quantizes with shift 0)
		}
	}
}

// chunk is kvGroup.chunk on AVX-512: the scores of each run of 16 positions for
// every state at once (a quantized K), those of the positions past the last 16
// and of an f16 K as span computes them, each state's softmax factors, then the
// accumulators' updates together. Each state's operations are span's, hence its
// bits.
func (gr *kvGroup512) chunk(sts []kvState, k, v []uint16, m, kstride, vstride int, scale float32, nx *nextBlock, part int) {
	kt, hd := sts[0].kt, sts[0].hd
	nb := hd / qk0
	m16 := 0
	if kt.Quantized() {
		m16 = m &^ 15
		kb := unsafe.Pointer(&k[0])
		for p := 0; p < m16; p += 16 {
			x := (*byte)(unsafe.Add(kb, 2*p*kstride))
			y, out := (*byte)(unsafe.Pointer(&gr.q8[0][0])), &gr.e[0][p]
			switch {
			case kt == KVQ8_0 && gr.nq == 1:
				dotQ8_0AVX512x16t1(x, 2*kstride, y, kvQ8Stride, nb, out, attnChunk)
			case kt == KVQ8_0:
				dotQ8_0AVX512x16t4(x, 2*kstride, y, kvQ8Stride, nb, out, attnChunk)
			case gr.nq == 1:
				dotQ4_0AVX512x16t1(x, 2*kstride, y, kvQ8Stride, nb, out, attnChunk)
			default:
				dotQ4_0AVX512x16t4(x, 2*kstride, y, kvQ8Stride, nb, out, attnChunk)
			}
		}
		if m16 > 0 {
			scaleRowsAVX512(&gr.e[0][0], m16, len(sts), attnChunk, scale)
		}
	}
	var mask [attnChunk / 8]uint8
	for g := range sts {
		st, e := &sts[g], &gr.e[g]
		if m16 < m {
			kc := k[m16*kstride:]
			switch kt {
			case KVQ8_0:
				q8 := st.q8()
				attnScoresQ8_0AVX2((*byte)(unsafe.Pointer(&kc[0])), (*byte)(unsafe.Pointer(&q8[0])), len(q8), m-m16, 2*kstride, scale, &e[m16])
			case KVQ4_0:
				q8 := st.q8()
				attnScoresQ4_0AVX2((*byte)(unsafe.Pointer(&kc[0])), (*byte)(unsafe.Pointer(&q8[0])), len(q8), m-m16, 2*kstride, scale, &e[m16])
			default:
				attnScoresF16(&kc[0], &st.qr()[0], hd, m-m16, kstride, scale, &e[m16])
			}
		}
		for i := m; i < (m+15)&^15; i++ {
			e[i] = float32(math.Inf(-1))
		}
		attnExpF16AVX512(&e[0], m, &st.mx, &mask[0])
		var bits uint64
		for i, b := range mask[:(m+7)/8] {
			bits |= uint64(b) << (8 * i)
		}
		gr.mask[g] = bits
	}
	nx.prefetch(part)
	vb, acc, e, mk, sum := (*byte)(unsafe.Pointer(&v[0])), &gr.acc[0][0], &gr.e[0][0], &gr.mask[0], &gr.sum[0]
	// A switch, not a table of funcs: the kernels' arguments must not escape.
	switch q4 := sts[0].vt == KVQ4_0; {
	case gr.nq == 1 && !q4:
		attnAccumGroup1Q8_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	case gr.nq == 1:
		attnAccumGroup1Q4_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	case gr.nq == 2 && !q4:
		attnAccumGroup2Q8_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	case gr.nq == 2:
		attnAccumGroup2Q4_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	case gr.nq == 3 && !q4:
		attnAccumGroup3Q8_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	case gr.nq == 3:
		attnAccumGroup3Q4_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	case !q4:
		attnAccumGroup4Q8_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	default:
		attnAccumGroup4Q4_0AVX512(acc, vb, nb, m, 2*vstride, e, mk, sum)
	}
}

// tileKVGroups512 is tileKVGroups on AVX-512 over a quantized V: the states, in
// groups of up to gs (a group of one too), take each block through
// kvGroup512.chunk while all of a group's states take the same positions of it;
// from the first block where they do not, each state goes on through span.
func tileKVGroups512(sts []kvState, ns []int, ks, vs [][]uint16, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv int, scale float32) bool {
	if bt > attnChunk {
		return false
	}
	hd := sts[0].hd
	if hd == 0 || hd%qk0 != 0 || hd > attnStackHD {
		return false
	}
	ng := (len(sts) + gs - 1) / gs
	kw, vw := (ng-1)*hk+sts[0].kt.Units(hd), (ng-1)*hv+sts[0].vt.Units(hd) // every group's rows
	for b := 0; b*bt < nmax; b++ {
		m := min(bt, nmax-b*bt)
		_ = ks[b][koff+(m-1)*kstride+kw-1]
		_ = vs[b][voff+(m-1)*vstride+vw-1]
	}
	var grs [attnTileMax / attnGroupMax]kvGroup512
	for g := 0; g < ng; g++ {
		grs[g].load(sts[g*gs : min(len(sts), (g+1)*gs)])
	}
	for c, j0 := 0, 0; j0 < nmax; c, j0 = c+1, j0+bt {
		// The next block's rows, prefetched two parts per group: before its
		// scores and before its accumulation.
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

// prefetchPart prefetches part of parts of the cache lines of n rows of w bytes at
// p + j·stride. Spread over a block's groups (nextBlock: a share before each
// group's scores and one before its accumulation), the next block's prefetches
// arrive in time; issued all at the block's start they arrived late on Zen4 (q8_0
// ÷ f16 decode at 8k 0.90 against 1.40, AVX-512, and 1.16 against 2.03 at the
// AVX2 level; docs/PERFORMANCE.md). Rows less than a cache line apart are taken as
// one span, each line once.
func prefetchPart(p unsafe.Pointer, n, stride, w, part, parts int) {
	if stride-w < 64 {
		total := (n-1)*stride + w
		lo, hi := (total*part/parts)&^63, total*(part+1)/parts
		if part == parts-1 {
			hi = total
		}
		if hi > lo {
			prefetchRows((*byte)(unsafe.Add(p, lo)), 1, 0, hi-lo)
		}
		return
	}
	r0, r1 := n*part/parts, n*(part+1)/parts
	if r1 > r0 {
		prefetchRows((*byte)(unsafe.Add(p, r0*stride)), r1-r0, stride, w)
	}
}

// nextBlock is the next block's K and V rows (n rows of kw and vw bytes, ks and
// vs apart; n = 0: none), prefetched in parts.
type nextBlock struct {
	k, v          unsafe.Pointer
	n, ks, kw     int
	vs, vw, parts int
}

// prefetch prefetches part of nb.parts of the rows (prefetchPart).
func (nb *nextBlock) prefetch(part int) {
	if nb.n > 0 {
		prefetchPart(nb.k, nb.n, nb.ks, nb.kw, part, nb.parts)
		prefetchPart(nb.v, nb.n, nb.vs, nb.vw, part, nb.parts)
	}
}
