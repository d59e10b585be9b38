package kernels

import "math"

// AttendBlocksKV is AttendBlocks over a paged cache whose K rows are stored as kt and
// V rows as vt (PutKVRow's rows): position j's K row is ks[j/bt][(j%bt)*kstride+koff:]
// (kt.Units(len(out)) units) and its V row vs[j/bt][(j%bt)*vstride+voff:]; offsets
// and strides count uint16 units. With both f16 it is AttendBlocks.
//
// With a block format it follows llama.cpp's one-query CPU flash attention over such
// a cache (ggml_compute_forward_flash_attn_ext_f16_one_chunk), which reads the blocks
// directly: for a quantized K, q is quantized to Q8_0 (the vec-dot type of both
// formats) and each score is the Q8_0·K dot product of the weight kernels (an exact
// integer sum per block, times the two scales); for a quantized V, each V row is
// dequantized and accumulated in float32 (an f16 V keeps the binary16 accumulator).
// Every product and sum is rounded on its own (no fused multiply-add), positions in
// order, so that the result depends on the positions only: not on the paging, the
// batch or the SIMD level.
func AttendBlocksKV(out, q []float32, ks, vs [][]uint16, kt, vt KVType, koff, voff, kstride, vstride, bt, n int, scale float32) {
	if kt == KVF16 && vt == KVF16 {
		AttendBlocks(out, q, ks, vs, koff, kstride, bt, n, scale)
		return
	}
	var st kvState
	st.start(q[:len(out)], kt, vt)
	for b := 0; n > 0; b++ {
		m := min(bt, n)
		st.span(ks[b][koff:], vs[b][voff:], m, kstride, vstride, scale)
		n -= m
	}
	st.finish(out)
}

// AttendBlocksTileKV is AttendBlocksTile over a cache of kt K rows and vt V rows
// (AttendBlocksKV's layout): heads query heads of hd values for each token i (q and
// out at i*ld + g*hd), token i attending to positions 0..pos[i]. With both f16 it
// is AttendBlocksTile (llama.cpp takes its tiled path for float caches only).
// Otherwise the heads of up to attnTileMax (token, head) pairs at a time go through
// the cache together, blocks outer, so that a block is read from memory once for
// all of them; each head gets the span calls AttendBlocksKV would give it, in the
// same order, hence its bits.
func AttendBlocksTileKV(out, q []float32, ld, hd, heads int, pos []int32, ks, vs [][]uint16, kt, vt KVType, koff, voff, kstride, vstride, bt int, scale float32) {
	if kt == KVF16 && vt == KVF16 {
		AttendBlocksTile(out, q, ld, hd, heads, pos, ks, vs, koff, kstride, bt, scale)
		return
	}
	if heads > attnTileMax || hd > attnStackHD {
		for i, p := range pos {
			for g := 0; g < heads; g++ {
				o := i*ld + g*hd
				AttendBlocksKV(out[o:o+hd], q[o:o+hd], ks, vs, kt, vt, koff, voff, kstride, vstride, bt, int(p)+1, scale)
			}
		}
		return
	}
	per := max(1, attnTileMax/max(heads, 1))
	var sts [attnTileMax]kvState
	var ns [attnTileMax]int
	for i0 := 0; i0 < len(pos); i0 += per {
		i1 := min(len(pos), i0+per)
		nt, nmax := 0, 0
		for i := i0; i < i1; i++ {
			for g := 0; g < heads; g++ {
				o := i*ld + g*hd
				sts[nt].start(q[o:o+hd], kt, vt)
				ns[nt] = int(pos[i]) + 1
				nmax = max(nmax, ns[nt])
				nt++
			}
		}
		if !tileKV(sts[:nt], ns[:nt], ks, vs, koff, voff, kstride, vstride, bt, nmax, attnGroupMax, 0, 0, scale) {
			for b := 0; b*bt < nmax; b++ {
				kb, vb := ks[b][koff:], vs[b][voff:]
				for t := 0; t < nt; t++ {
					if m := min(bt, ns[t]-b*bt); m > 0 {
						sts[t].span(kb, vb, m, kstride, vstride, scale)
					}
				}
			}
		}
		t := 0
		for i := i0; i < i1; i++ {
			for g := 0; g < heads; g++ {
				o := i*ld + g*hd
				sts[t].finish(out[o : o+hd])
				t++
			}
		}
	}
}

// AttendBlocksTileKVHeads is AttendBlocksTileKV for one token at position pos and
// kvh consecutive KV heads of a quantized cache, each with its GQA group of group
// query heads: KV head h (h < kvh) has its K rows at koff + kt.Units(h·hd) and its
// V rows at voff + vt.Units(h·hd), its query head g at q[(h·group+g)·hd:] and
// out likewise. The heads go through the blocks together (a group per KV head,
// blocks outer), so that each block's rows come into the cache once for all of
// them: a q8_0 head's 68 bytes span two cache lines as an f16 head's 128 do, and a
// head at a time would read as many lines as f16. Each query head gets the span
// calls AttendBlocksKV would give it, in the same order, hence its bits (and
// AttendBlocksTileKV's, head by head). Groups of more than attnGroupMax heads, and
// more heads than a tile holds, go head by head through AttendBlocksTileKV.
func AttendBlocksTileKVHeads(out, q []float32, hd, group, kvh int, pos int32, ks, vs [][]uint16, kt, vt KVType, koff, voff, kstride, vstride, bt int, scale float32) {
	per := 1
	if vt.Quantized() && group <= attnGroupMax {
		per = max(1, min(kvh, attnTileMax/group, attnTileMax/attnGroupMax))
	}
	gh := group * hd
	for h0 := 0; h0 < kvh; h0 += per {
		h1 := min(kvh, h0+per)
		o := h0 * gh
		ko, vo := koff+kt.Units(h0*hd), voff+vt.Units(h0*hd)
		if h1-h0 == 1 {
			AttendBlocksTileKV(out[o:o+gh], q[o:o+gh], gh, hd, group, []int32{pos}, ks, vs, kt, vt, ko, vo, kstride, vstride, bt, scale)
			continue
		}
		var sts [attnTileMax]kvState
		var ns [attnTileMax]int
		nt := (h1 - h0) * group
		for t := 0; t < nt; t++ {
			sts[t].start(q[o+t*hd:o+(t+1)*hd], kt, vt)
			ns[t] = int(pos) + 1
		}
		if !tileKV(sts[:nt], ns[:nt], ks, vs, ko, vo, kstride, vstride, bt, int(pos)+1, group, kt.Units(hd), vt.Units(hd), scale) {
			for b := 0; b*bt <= int(pos); b++ {
				m := min(bt, int(pos)+1-b*bt)
				for t := 0; t < nt; t++ {
					h := t / group
					sts[t].span(ks[b][ko+kt.Units(h*hd):], vs[b][vo+vt.Units(h*hd):], m, kstride, vstride, scale)
				}
			}
		}
		for t := 0; t < nt; t++ {
			sts[t].finish(out[o+t*hd : o+(t+1)*hd])
		}
	}
}

// kvState is one head's attention in progress over a cache with a block format
// (attnState's counterpart): the query as the K rows' dot product takes it (rounded
// to binary16, or quantized to Q8_0), the accumulator (binary16 values for an f16 V,
// float32 otherwise), the online softmax's maximum and sum, and a V row's scratch.
type kvState struct {
	hd      int
	kt, vt  KVType
	mx, sum float32
	qrA     [attnStackHD]float32
	q8A     [attnStackHD / qk0]q8Block
	accA    [attnStackHD]float32
	qrB     []float32
	q8B     []q8Block
	accB    []float32
}

func (st *kvState) qr() []float32 {
	if st.hd <= attnStackHD {
		return st.qrA[:st.hd]
	}
	return st.qrB
}

func (st *kvState) q8() []q8Block {
	if st.hd <= attnStackHD {
		return st.q8A[:st.hd/qk0]
	}
	return st.q8B
}

func (st *kvState) acc() []float32 {
	if st.hd <= attnStackHD {
		return st.accA[:st.hd]
	}
	return st.accB
}

func (st *kvState) start(q []float32, kt, vt KVType) {
	st.hd, st.kt, st.vt = len(q), kt, vt
	if st.hd > attnStackHD {
		st.qrB, st.q8B, st.accB = make([]float32, st.hd), make([]q8Block, st.hd/qk0), make([]float32, st.hd)
	}
	if kt == KVF16 {
		roundF16s(st.qr(), q)
	} else {
		quantRowsQ8_0(st.q8(), q, 0)
	}
	clear(st.acc())
	st.mx, st.sum = float32(math.Inf(-1)), 0
}

func (st *kvState) finish(out []float32) {
	inv := 1 / st.sum
	for i, a := range st.acc() {
		out[i] = a * inv
	}
}

// spanGeneric adds positions 0..n-1 (K rows at k[j*kstride:], V rows at
// v[j*vstride:]) one at a time: the reference of the chunked path in
// attend_amd64.go, and the code everywhere else.
func (st *kvState) spanGeneric(k, v []uint16, n, kstride, vstride int, scale float32) {
	hd, acc := st.hd, st.acc()
	kw, vw := st.kt.Units(hd), st.vt.Units(hd)
	_ = k[(n-1)*kstride+kw-1]
	_ = v[(n-1)*vstride+vw-1]
	for j := 0; j < n; j++ {
		kj := k[j*kstride : j*kstride+kw]
		var s float32
		switch st.kt {
		case KVQ8_0:
			s = dotQ8_0Row(unitBytes(kj), st.q8())
		case KVQ4_0:
			s = dotQ4_0Row(unitBytes(kj), st.q8())
		default:
			s = attnScore(st.qr(), kj)
		}
		s *= scale
		ms, vs := float32(1), float32(1)
		if s > st.mx {
			ms = attnExpf(st.mx - s)
			st.mx = s
			if st.vt == KVF16 {
				for i, a := range acc {
					acc[i] = RoundF16(a * ms)
				}
			} else {
				for i, a := range acc {
					acc[i] = a * ms
				}
			}
		} else {
			vs = attnExpf(s - st.mx)
		}
		vj := v[j*vstride : j*vstride+vw]
		switch st.vt {
		case KVQ8_0:
			accumQ8_0(acc, unitBytes(vj), vs)
		case KVQ4_0:
			accumQ4_0(acc, unitBytes(vj), vs)
		default:
			for i, a := range acc {
				acc[i] = RoundF16(fmaf(f16Table[vj[i]], vs, a))
			}
		}
		st.sum = float32(st.sum*ms) + vs
	}
}

// accumQ8_0Generic adds vs times the Q8_0 row v (len(acc) values, dequantized as
// ggml's dequantize_row_q8_0: d·q) to acc, each product and sum rounded on its own
// (ggml_vec_mad_f32 over the dequantized row, without fusing): the reference of the
// assembly.
func accumQ8_0Generic(acc []float32, v []byte, vs float32) {
	for b := 0; b < len(acc)/qk0; b++ {
		blk := v[b*34 : (b+1)*34]
		d := f16Table[le16(blk)]
		a := acc[b*qk0 : (b+1)*qk0]
		for j := range a {
			x := float32(d * float32(int8(blk[2+j])))
			a[j] += float32(x * vs)
		}
	}
}

// accumQ4_0Generic is accumQ8_0Generic for a Q4_0 row (dequantize_row_q4_0:
// d·(q−8), the low nibbles first).
func accumQ4_0Generic(acc []float32, v []byte, vs float32) {
	for b := 0; b < len(acc)/qk0; b++ {
		blk := v[b*18 : (b+1)*18]
		d := f16Table[le16(blk)]
		a := acc[b*qk0 : (b+1)*qk0]
		for j := 0; j < qk0/2; j++ {
			x0 := float32(d * float32(int32(blk[2+j]&0xf)-8))
			x1 := float32(d * float32(int32(blk[2+j]>>4)-8))
			a[j] += float32(x0 * vs)
			a[j+16] += float32(x1 * vs)
		}
	}
}
