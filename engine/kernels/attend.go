package kernels

import "math"

// Attend computes one attention head for one query: out = Σ_j p_j·v_j with
// p = softmax(scale · q·k_j) over the n cached positions j, whose keys and values
// (len(out) elements each, stored as binary16 bits) start at k[j*stride] and
// v[j*stride].
//
// It follows llama.cpp's CPU flash attention over its default F16 KV cache, step
// for step, because that is what decides the last bits of its results: q is rounded
// to binary16, the softmax is computed online (running maximum and sum), and the
// weighted sum of values is accumulated in binary16.
func Attend(out, q []float32, k, v []uint16, n, stride int, scale float32) {
	var st attnState
	st.start(q[:len(out)])
	st.span(k, v, n, stride, scale)
	st.finish(out)
}

// attnState is one head's attention in progress: the rounded query, the binary16
// accumulator (as float32 values) and the online softmax's running maximum and
// sum. Positions are added in order by span, any number at a time (a contiguous
// cache in one span, a paged one block by block): the result depends only on the
// positions and their order. It holds no pointers into itself, so that it stays
// on its caller's stack.
type attnState struct {
	hd        int
	mx, sum   float32
	qrA, accA [attnStackHD]float32
	qrB, accB []float32 // when hd > attnStackHD
}

// attnStackHD is the largest head size whose state lives in attnState itself.
const attnStackHD = 256

func (st *attnState) qr() []float32 {
	if st.hd <= attnStackHD {
		return st.qrA[:st.hd]
	}
	return st.qrB
}

func (st *attnState) acc() []float32 {
	if st.hd <= attnStackHD {
		return st.accA[:st.hd]
	}
	return st.accB
}

// start begins a head for query q (its length the head size).
func (st *attnState) start(q []float32) {
	st.hd = len(q)
	if st.hd > attnStackHD {
		st.qrB, st.accB = make([]float32, st.hd), make([]float32, st.hd)
	}
	roundF16s(st.qr(), q)
	clear(st.acc())
	st.mx, st.sum = float32(math.Inf(-1)), 0
}

// finish writes the head's output.
func (st *attnState) finish(out []float32) {
	inv := 1 / st.sum
	for i, a := range st.acc() {
		out[i] = a * inv
	}
}

// attnSpanGeneric adds positions 0..n-1 (keys and values at k[j*stride:] and
// v[j*stride:]) to the state: the reference of the assembly in attend_amd64.go,
// and the code everywhere else. The float32 conversions keep each product and
// sum rounded on its own (the compiler may otherwise fuse them), as llama.cpp's
// F16C code does; the accumulator takes v·e^(s-M) by a fused multiply-add, as
// ggml_vec_mad_f16.
func attnSpanGeneric(st *attnState, k, v []uint16, n, stride int, scale float32) {
	hd, qr, acc := st.hd, st.qr(), st.acc()
	for j := 0; j < n; j++ {
		s := attnScore(qr, k[j*stride:j*stride+hd]) * scale
		ms, vs := float32(1), float32(1)
		if s > st.mx {
			ms = attnExpf(st.mx - s)
			st.mx = s
			for i, a := range acc {
				acc[i] = RoundF16(a * ms)
			}
		} else {
			vs = attnExpf(s - st.mx)
		}
		vj := v[j*stride : j*stride+hd]
		for i, a := range acc {
			acc[i] = RoundF16(fmaf(f16Table[vj[i]], vs, a))
		}
		st.sum = float32(st.sum*ms) + vs
	}
}

// attnScore is q·k (q rounded to binary16, k binary16 bits, both of the head
// size) in the float order of llama.cpp's K·q: ggml_vec_dot_f16 as its AVX-512
// build runs it. For a head size that is a multiple of 64 that is four
// accumulators of 16 lanes, each taking one product a lane for each 64 values,
// summed pairwise ((0+2)+(1+3)) and their 16 lanes reduced by halves. In groups
// of 8 values (G_g, the products of values 8g..8g+7 of each 64) that is: lane l
// of H_g sums lane l of G_g over the 64-value blocks in order, then
// u = ((H0+H4)+(H2+H6)) + ((H1+H5)+(H3+H7)) lane by lane, and sum8(u). The
// products of two binary16 values are exact in float32, so a fused multiply-add
// and a product then a sum give the same bits. Other head sizes (where ggml adds
// the values after the last 64 in float64) keep 8 lanes in index order, sum8'd.
func attnScore(qr []float32, kj []uint16) float32 {
	hd := len(qr)
	kj = kj[:hd]
	if hd%64 != 0 {
		var a8 [8]float32
		for i, x := range qr {
			a8[i%8] += float32(f16Table[kj[i]] * x)
		}
		return sum8(&a8)
	}
	var h [8][8]float32
	for b := 0; b < hd; b += 64 {
		for g := range h {
			for l := range h[g] {
				i := b + 8*g + l
				h[g][l] += float32(f16Table[kj[i]] * qr[i])
			}
		}
	}
	var u [8]float32
	for l := range u {
		u[l] = ((h[0][l] + h[4][l]) + (h[2][l] + h[6][l])) + ((h[1][l] + h[5][l]) + (h[3][l] + h[7][l]))
	}
	return sum8(&u)
}
