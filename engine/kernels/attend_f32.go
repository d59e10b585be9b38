package kernels

import (
	"math"
	"sync"
)

// AttendBlocksTileF32 is AttendBlocksTile with a float32 accumulator: the numerics
// of a sequence in float32 mode (engine/model's AttnF32, chosen once per request:
// llama.cpp accumulates in float32 for ubatches of 64 queries or more). Token i
// (i < len(pos)) attends to positions 0..pos[i]; its head g (g < heads) has its query
// at q[i*ld+g*hd:][:hd] and its output at out[i*ld+g*hd:][:hd]; ks, vs, off, stride,
// bt and scale are AttendBlocks'.
//
// Each query goes through the positions in chunks of attnF32Chunk aligned on absolute
// positions (0–63, 64–127, …): the chunk's scores, each a sum of the products of
// the scaled query and the key in a fixed order (attnChunkF32Generic), one online-
// softmax step per chunk, then the chunk's values added to the float32 accumulator
// position by position. The keys and values of a chunk are converted to float32
// once for the tile's queries, or, in a tile of few queries (a decode step's), read
// as binary16 by each query's kernel and converted in registers: conversion is
// exact, so both give the same bits. Nothing a query computes depends on the other
// queries of its tile, nor on how the positions are paged: a token's result is the
// same bits whether it is decoded alone or prefilled among many (tested).
func AttendBlocksTileF32(out, q []float32, ld, hd, heads int, pos []int32, ks, vs [][]uint16, off, stride, bt int, scale float32) {
	attendBlocksTileF32(out, q, ld, hd, heads, pos, ks, vs, off, stride, bt, scale, attnF32DirectMax)
}

// attnF32DirectMax is the most queries a tile may have for its chunks to be read
// from the binary16 cache by each query (attnChunkF32F16) rather than converted
// once into float32 scratch for all of them: a decode tile (one token, a GQA
// group's heads) shares a conversion among too few queries to pay for its stores
// and loads. A speed choice only: both give the same bits (tested).
const attnF32DirectMax = 4

// attendBlocksTileF32 is AttendBlocksTileF32, reading the cache directly in tiles
// of at most directMax queries where attnChunkF32F16 runs.
func attendBlocksTileF32(out, q []float32, ld, hd, heads int, pos []int32, ks, vs [][]uint16, off, stride, bt int, scale float32, directMax int) {
	tl := f32Tiles.Get().(*f32Tile)
	tl.grow(hd)
	nq := len(pos) * heads
	for t0 := 0; t0 < nq; t0 += attnTileMax {
		t1 := min(nq, t0+attnTileMax)
		nmax := 0
		for t := t0; t < t1; t++ {
			i, g := t/heads, t%heads
			o := i*ld + g*hd
			tq, acc := tl.q[(t-t0)*hd:][:hd], tl.acc[(t-t0)*hd:][:hd]
			for d, x := range q[o : o+hd] {
				tq[d] = x * scale
			}
			clear(acc)
			tl.st[t-t0] = [2]float32{negInf32, 0}
			nmax = max(nmax, int(pos[i])+1)
		}
		direct := t1-t0 <= directMax && attnF32Direct(hd, bt)
		for c0 := 0; c0 < nmax; c0 += attnF32Chunk {
			mr := min(attnF32Chunk, nmax-c0)
			if direct && tl.rows(ks, vs, off, stride, bt, hd, c0, mr) {
				// The next chunk's key rows, for the kernel to prefetch; none: this
				// chunk's again.
				tl.kn = tl.kp
				if c1 := c0 + attnF32Chunk; c1 < nmax {
					kp, vp := tl.kp, tl.vp
					if tl.rows(ks, vs, off, stride, bt, hd, c1, min(attnF32Chunk, nmax-c1)) {
						tl.kn = tl.kp
					}
					tl.kp, tl.vp = kp, vp
				}
				for t := t0; t < t1; t++ {
					n := int(pos[t/heads]) + 1
					if m := min(attnF32Chunk, n-c0); m > 0 {
						attnChunkF32F16(tl.q[(t-t0)*hd:][:hd], &tl.kp, &tl.vp, &tl.kn, stride, m, tl.acc[(t-t0)*hd:][:hd], &tl.st[t-t0], &tl.p)
					}
				}
				continue
			}
			for j := c0; j < c0+mr; {
				b, r := j/bt, j%bt
				cnt := min(bt-r, c0+mr-j)
				attnCvtF32(ks[b][off+r*stride:], vs[b][off+r*stride:], stride, cnt, hd, tl.kf[(j-c0)*hd:], tl.vf[(j-c0)*hd:])
				j += cnt
			}
			for t := t0; t < t1; t++ {
				n := int(pos[t/heads]) + 1
				if m := min(attnF32Chunk, n-c0); m > 0 {
					attnChunkF32(tl.q[(t-t0)*hd:][:hd], tl.kf, tl.vf, hd, m, tl.acc[(t-t0)*hd:][:hd], &tl.st[t-t0], &tl.p)
				}
			}
		}
		for t := t0; t < t1; t++ {
			i, g := t/heads, t%heads
			o := i*ld + g*hd
			inv := 1 / tl.st[t-t0][1]
			for d, a := range tl.acc[(t-t0)*hd:][:hd] {
				out[o+d] = a * inv
			}
		}
	}
	tl.kp, tl.vp, tl.kn = [4]*uint16{}, [4]*uint16{}, [4]*uint16{}
	f32Tiles.Put(tl)
}

// AttendBlocksF32 is AttendBlocks in float32 mode: AttendBlocksTileF32 for one
// query.
func AttendBlocksF32(out, q []float32, ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	pos := [1]int32{int32(n - 1)}
	AttendBlocksTileF32(out, q, len(out), len(out), 1, pos[:], ks, vs, off, stride, bt, scale)
}

// attnF32Chunk is the positions of a chunk of float32 mode, aligned on absolute
// positions: part of the numerics, not a tuning knob.
const attnF32Chunk = 64

var negInf32 = float32(math.Inf(-1))

// f32Tile is a tile's scratch for AttendBlocksTileF32: a chunk's keys and values
// as float32 (attnF32Chunk rows of hd; rows a tile has not reached keep earlier
// values, which the kernels never use), the tile's scaled queries, accumulators,
// states (running maximum, sum), a chunk's softmax factors, and the cache rows of
// the chunk's groups of 16 positions when the tile reads them directly.
type f32Tile struct {
	hd     int
	kf, vf []float32
	q, acc []float32
	st     [attnTileMax][2]float32
	p      [attnF32Chunk]float32
	kp, vp [4]*uint16
	kn     [4]*uint16 // the next chunk's key rows, which the kernel only prefetches
}

// rows sets kp and vp to the first key and value rows of the chunk's 4 groups of
// 16 positions from c0 (mr of them in use; a group past them gets the group
// before's rows) and reports whether all 16 rows of each group lie in the cache's
// slices (bt a multiple of 16, which attnF32Direct requires, keeps a group in one
// page). The rows stay in tl only during the call that sets them.
func (tl *f32Tile) rows(ks, vs [][]uint16, off, stride, bt, hd, c0, mr int) bool {
	for g := 0; g < 4; g++ {
		j := c0 + 16*g
		if j >= c0+mr {
			tl.kp[g], tl.vp[g] = tl.kp[g-1], tl.vp[g-1]
			continue
		}
		b, r := j/bt, j%bt
		end := off + (r+15)*stride + hd
		if b >= len(ks) || b >= len(vs) || len(ks[b]) < end || len(vs[b]) < end {
			return false
		}
		tl.kp[g], tl.vp[g] = &ks[b][off+r*stride], &vs[b][off+r*stride]
	}
	return true
}

// f32Tiles holds the tiles' scratch between calls (a worker thread's tile is taken
// and put back around each call, so the pool does not allocate once warm).
var f32Tiles = sync.Pool{New: func() any { return new(f32Tile) }}

func (tl *f32Tile) grow(hd int) {
	if tl.hd >= hd {
		return
	}
	tl.hd = hd
	tl.kf, tl.vf = make([]float32, attnF32Chunk*hd), make([]float32, attnF32Chunk*hd)
	tl.q, tl.acc = make([]float32, attnTileMax*hd), make([]float32, attnTileMax*hd)
}

// attnCvtF32Generic converts m rows of hd binary16 keys and values at k and v, rows
// stride apart, to float32 rows of hd at kf and vf.
func attnCvtF32Generic(k, v []uint16, stride, m, hd int, kf, vf []float32) {
	for j := 0; j < m; j++ {
		kr, vr := k[j*stride:j*stride+hd], v[j*stride:j*stride+hd]
		for d := range kr {
			kf[j*hd+d], vf[j*hd+d] = f16Table[kr[d]], f16Table[vr[d]]
		}
	}
}

// attnChunkF32Generic adds positions 0..m-1 of a chunk (1 ≤ m ≤ attnF32Chunk; keys
// and values the float32 rows of hd at kf and vf) to the float32-mode state of the
// scaled query q: accumulator acc, st[0] the running maximum, st[1] the sum; p is
// scratch. It is the reference of attnChunkF32AVX512 and the code where that does
// not run; every product and sum is rounded on its own (no FMA):
//
//   - position j's score: 16 lanes, lane r summing q[d]·k_j[d] over d ≡ r (mod 16)
//     in order of d (the first product as is, no zero before it), then the lanes
//     in the tree of tree16;
//   - the new maximum M = max(st[0], the chunk's scores); f = expf(st[0] − M),
//     p_j = expf(s_j − M);
//   - the sum: st[1]·f plus the p_j summed in 16 lanes (lane l: p_l, p_{16+l},
//     p_{32+l}, p_{48+l} in order, absent ones 0), then tree16;
//   - the accumulator: acc·f, then + p_j·v_j for j = 0, 1, …, m−1.
func attnChunkF32Generic(q, kf, vf []float32, hd, m int, acc []float32, st *[2]float32, p *[attnF32Chunk]float32) {
	M := st[0]
	for j := 0; j < m; j++ {
		kj := kf[j*hd : (j+1)*hd]
		var a [16]float32
		for d, x := range q {
			if d < 16 {
				a[d] = float32(x * kj[d])
			} else {
				a[d%16] += float32(x * kj[d])
			}
		}
		p[j] = tree16(&a)
		if p[j] > M {
			M = p[j]
		}
	}
	f := expf(st[0] - M)
	var l [16]float32
	for j := 0; j < attnF32Chunk; j++ {
		e := float32(0)
		if j < m {
			e = expf(p[j] - M)
		}
		p[j] = e
		if j < 16 {
			l[j] = e
		} else {
			l[j%16] += e
		}
	}
	st[0], st[1] = M, float32(st[1]*f)+tree16(&l)
	for d := range acc {
		acc[d] *= f
	}
	for j := 0; j < m; j++ {
		vj, pj := vf[j*hd:(j+1)*hd], p[j]
		for d := range acc {
			acc[d] += float32(pj * vj[d])
		}
	}
}

// tree16 sums the 16 lanes of a: lane r plus lane r+8 (r < 8), then r+4, r+2, r+1.
func tree16(a *[16]float32) float32 {
	for w := 8; w >= 1; w /= 2 {
		for r := 0; r < w; r++ {
			a[r] += a[r+w]
		}
	}
	return a[0]
}
