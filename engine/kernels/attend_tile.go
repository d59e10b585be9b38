package kernels

// AttendBlocksTile is AttendBlocks for every head of a tile of queries that read the
// same KV head of one paged cache (the query heads of one GQA group, for a run of a
// sequence's tokens): token i (i < len(pos)) attends to positions 0..pos[i], and its
// head g (g < heads) has its query at q[i*ld+g*hd:][:hd] and its output at
// out[i*ld+g*hd:][:hd]; ks, vs, off, stride, bt and scale are AttendBlocks'.
//
// The heads go through the cache together, a block of positions at a time, so that
// a block's keys and values, once loaded, serve every head of the tile while they
// are in the cache, instead of each head streaming the whole cache on its own. Each
// head keeps its own state and takes the blocks in position order through the same
// operations as AttendBlocks: the result is AttendBlocks' bits for every head,
// whatever the tile holds (tested), so a token's attention does not depend on the
// tokens that share its tile.
func AttendBlocksTile(out, q []float32, ld, hd, heads int, pos []int32, ks, vs [][]uint16, off, stride, bt int, scale float32) {
	// Tiles of at most attnTileMax heads, tokens whole, so that the states stay on
	// the stack.
	per := max(1, attnTileMax/max(heads, 1))
	for i0 := 0; i0 < len(pos); i0 += per {
		i1 := min(len(pos), i0+per)
		if heads > attnTileMax {
			// A group too large for one tile: each head on its own.
			for i := i0; i < i1; i++ {
				for g := 0; g < heads; g++ {
					o := i*ld + g*hd
					AttendBlocks(out[o:o+hd], q[o:o+hd], ks, vs, off, stride, bt, int(pos[i])+1, scale)
				}
			}
			continue
		}
		attendTile(out, q, ld, hd, heads, i0, pos[i0:i1], ks, vs, off, stride, bt, scale)
	}
}

// attnTileMax is the most heads a tile of AttendBlocksTile takes at once.
const attnTileMax = 16

// attendTile is AttendBlocksTile for tokens i0.. (len(pos) of them), at most
// attnTileMax heads in all.
func attendTile(out, q []float32, ld, hd, heads, i0 int, pos []int32, ks, vs [][]uint16, off, stride, bt int, scale float32) {
	var sts [attnTileMax]attnState
	var ns [attnTileMax]int
	nt, nmax := len(pos)*heads, 0
	for i, p := range pos {
		for g := 0; g < heads; g++ {
			t, o := i*heads+g, (i0+i)*ld+g*hd
			sts[t].start(q[o : o+hd])
			ns[t] = int(p) + 1
			nmax = max(nmax, ns[t])
		}
	}
	if !tileChunks(sts[:nt], ns[:nt], ks, vs, off, stride, bt, nmax, scale) {
		tileBlocks(sts[:nt], ns[:nt], ks, vs, off, stride, bt, nmax, scale)
	}
	for i := range pos {
		for g := 0; g < heads; g++ {
			o := (i0+i)*ld + g*hd
			sts[i*heads+g].finish(out[o : o+hd])
		}
	}
}

// tileBlocks adds the states' positions (state t: 0..ns[t]-1, nmax the largest)
// block by block, each state's share of a block through span: spanEachBlock's
// calls for every state, blocks outer.
func tileBlocks(sts []attnState, ns []int, ks, vs [][]uint16, off, stride, bt, nmax int, scale float32) {
	for b, j0 := 0, 0; j0 < nmax; b, j0 = b+1, j0+bt {
		for t := range sts {
			if m := min(bt, ns[t]-j0); m > 0 {
				sts[t].span(ks[b][off:], vs[b][off:], m, stride, scale)
			}
		}
	}
}

// attnGroupScoresRef is the reference of the group score kernels
// (attnTileScores…): s[t][j] = scale·(q_t·k_j) for each rounded query qr[t] and the
// n keys at k[j*stride:], each as attnSpanGeneric computes it.
func attnGroupScoresRef(s [][]float32, qr [][]float32, k []uint16, n, stride int, scale float32) {
	for t, q := range qr {
		for j := 0; j < n; j++ {
			s[t][j] = attnScore(q, k[j*stride:j*stride+len(q)]) * scale
		}
	}
}

// attnGroupAccumRef is the reference of the group accumulator kernels
// (attnTileAccum…): for each query t and position j < n, attnSpanGeneric's update
// of acc[t] and sum[t] with the factor e[t][j], a new maximum where bit j of
// mask[t] is set, and the values at v[j*stride:].
func attnGroupAccumRef(acc [][]float32, v []uint16, n, stride int, e [][]float32, mask []uint64, sum []float32) {
	for t, a := range acc {
		for j := 0; j < n; j++ {
			ms, vs := float32(1), e[t][j]
			if mask[t]>>j&1 != 0 {
				ms, vs = vs, 1
				for i, x := range a {
					a[i] = RoundF16(x * ms)
				}
			}
			vj := v[j*stride : j*stride+len(a)]
			for i, x := range a {
				a[i] = RoundF16(fmaf(f16Table[vj[i]], vs, x))
			}
			sum[t] = float32(sum[t]*ms) + vs
		}
	}
}
