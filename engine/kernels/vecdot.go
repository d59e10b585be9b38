package kernels

import (
	"encoding/binary"
	"math"
)

// MatMulsVecDot is MatMuls (serial: MatMulsSerial) with every output of F16, F32
// and Q8_0 weights in the float order of llama.cpp's ggml_vec_dot_f16,
// ggml_vec_dot_f32 and ggml_vec_dot_q8_0_q8_0 as its AVX-512 builds decode (a
// batch of one token; their prompts take llamafile's sgemm, in another order), the
// activations in the weights' vec_dot_type as MatMul rounds or quantizes them:
//
//   - F16: the values up to the last multiple of 64 as attnScore sums them (four
//     16-lane accumulators, reduced), then in float64 the products of the values
//     after it one by one, the sum rounded to float32 at the end (ggml_float sumf);
//   - F32: the values up to the last multiple of 64 as dotF32VecDot, then the rest
//     one by one into that float32 sum as GCC compiles ggml's sumf += x[i]*y[i]
//     in llama.cpp's build: eight products at a time rounded, then added in order
//     (an in-order vectorized reduction), the last (rest mod 8) each by a fused
//     multiply-add (TestDotF32VecDotTailMatchesLlamaCppBits);
//   - Q8_0: 8 float lanes, lane k adding each block's integer sum of its products
//     4k…4k+3 times the two scales' product in one fused multiply-add, then sum8
//     (dotQ8_0VecDotGeneric).
//
// Other weight types take MatMul's order. It is for LoRA adapters (engine/model),
// whose rank-wide products are about 1% of a step's work and whose updates llama.cpp
// computes as such matrix products (build_lora_mm): MatMul's own orders for these
// types differ from ggml's in the last bits, which the next layer's 8-bit
// activations can turn into a different token near a tie (issue 32). Every output
// is computed in the same order whatever the number of tokens or products.
func MatMulsVecDot(ps []Product, serial bool) { matMuls(ps, serial, true) }

// vecDotRows computes the outputs of weight rows [lo, hi) in ggml's vec_dot order
// (MatMulsVecDot).
func (m *matMul) vecDotRows(lo, hi int) {
	w, a, dst := m.w, m.a, m.dst
	if w.Type == F16 {
		t := 0
		for ; t+2 <= m.nTok; t += 2 {
			dotF16VecDotRows2(dst[t*w.Rows+lo:t*w.Rows+hi], dst[(t+1)*w.Rows+lo:(t+1)*w.Rows+hi], w.Data[lo*m.rb:hi*m.rb],
				a.f[t*a.cols:(t+1)*a.cols], a.f[(t+1)*a.cols:(t+2)*a.cols])
		}
		for ; t < m.nTok; t++ {
			dotF16VecDotRows(dst[t*w.Rows+lo:t*w.Rows+hi], w.Data[lo*m.rb:hi*m.rb], a.f[t*a.cols:(t+1)*a.cols])
		}
		return
	}
	if w.Type == F32 || w.Type == Q8_0 {
		rows := w.Data[lo*m.rb : hi*m.rb]
		for t := 0; t < m.nTok; t++ {
			out := dst[t*w.Rows+lo : t*w.Rows+hi]
			if w.Type == F32 {
				dotF32VecDotRows(out, rows, a.f[t*a.cols:(t+1)*a.cols], m.rb)
			} else {
				nb := a.cols / qk0
				dotQ8_0VecDotRows(out, rows, a.q8[t*nb:(t+1)*nb], m.rb)
			}
		}
		return
	}
	var buf []byte
	for r := lo; r < hi; r++ {
		row := w.Data[r*m.rb : (r+1)*m.rb]
		if r < w.Packed {
			buf = w.RowInto(buf, r) // a packed Q4_K row (PackQ4K), unpacked
			row = buf
		}
		for t := 0; t < m.nTok; t++ {
			dst[t*w.Rows+r] = vecDotRow(w.Type, row, a, t)
		}
	}
}

// dotF16VecDotRows sets out[r] to row r of rows (len(out) rows of len(x)
// binary16 values) times x (rounded to binary16) in ggml_vec_dot_f16's order on
// AVX-512: attnScore's over the values up to the last multiple of 64 (all the
// rows in one call, dotF16VecDot64s), converted to float64, then each later
// product (exact in float32) added in float64, the sum rounded to float32; the
// tails eight rows at a time on AVX-512 (dotF16VecDotTails: a LoRA adapter's B,
// rank 16, is all tail) and on AVX2 for a tail of a multiple of 16 values
// (dotF16VecDotTailsAVX2), else four, each row's sum in its own order.
func dotF16VecDotRows(out []float32, rows []byte, x []float32) {
	n, n64, rb := len(x), len(x)&^63, 2*len(x)
	if n64 > 0 {
		dotF16VecDot64s(out, rows, x[:n64], rb)
	} else {
		clear(out)
	}
	if n64 == n {
		return
	}
	r := dotF16VecDotTails(out, rows, x, rb, n64)
	dotF16TailRowsGeneric(out[r:], rows[r*rb:], x, rb, n64)
}

// dotF16VecDotRows2 is dotF16VecDotRows for two tokens (outputs out0 and out1,
// activations x0 and x1) at once: the same bits for each, its tails with the
// rows' values read and converted once for the two where the CPU allows
// (dotF16VecDotTails2).
func dotF16VecDotRows2(out0, out1 []float32, rows []byte, x0, x1 []float32) {
	n, n64, rb := len(x0), len(x0)&^63, 2*len(x0)
	if n64 == n {
		dotF16VecDotRows(out0, rows, x0)
		dotF16VecDotRows(out1, rows, x1)
		return
	}
	if n64 > 0 {
		dotF16VecDot64s(out0, rows, x0[:n64], rb)
		dotF16VecDot64s(out1, rows, x1[:n64], rb)
	} else {
		clear(out0)
		clear(out1)
	}
	r := dotF16VecDotTails2(out0, out1, rows, x0, x1, rb, n64)
	for _, o := range []struct {
		out []float32
		x   []float32
	}{{out0, x0}, {out1, x1}} {
		out, x := o.out[r:], o.x
		r1 := dotF16VecDotTails(out, rows[r*rb:], x, rb, n64)
		dotF16TailRowsGeneric(out[r1:], rows[(r+r1)*rb:], x, rb, n64)
	}
}

// dotF16TailRowsGeneric adds to out[r] the float64 sum of row r's tail (the
// values from n64 on, rows rb bytes apart) times x, rounded to float32 at the end:
// four rows at a time, each row's sum in its own order.
func dotF16TailRowsGeneric(out []float32, rows []byte, x []float32, rb, n64 int) {
	n := len(x)
	r := 0
	for ; r+4 <= len(out); r += 4 {
		w0, w1, w2, w3 := rows[r*rb:(r+1)*rb], rows[(r+1)*rb:(r+2)*rb], rows[(r+2)*rb:(r+3)*rb], rows[(r+3)*rb:(r+4)*rb]
		s0, s1, s2, s3 := float64(out[r]), float64(out[r+1]), float64(out[r+2]), float64(out[r+3])
		for i := n64; i < n; i++ {
			xi := x[i]
			s0 += float64(f16Table[le16(w0[2*i:])] * xi)
			s1 += float64(f16Table[le16(w1[2*i:])] * xi)
			s2 += float64(f16Table[le16(w2[2*i:])] * xi)
			s3 += float64(f16Table[le16(w3[2*i:])] * xi)
		}
		out[r], out[r+1], out[r+2], out[r+3] = float32(s0), float32(s1), float32(s2), float32(s3)
	}
	for ; r < len(out); r++ {
		w := rows[r*rb : (r+1)*rb]
		s := float64(out[r])
		for i := n64; i < n; i++ {
			s += float64(f16Table[le16(w[2*i:])] * x[i])
		}
		out[r] = float32(s)
	}
}

// dotF16VecDot64sGeneric sets out[r] to dotF16VecDot64Generic of the first
// len(x) values (a multiple of 64) of row r (rows rb bytes apart) with x.
func dotF16VecDot64sGeneric(out []float32, rows []byte, x []float32, rb int) {
	for r := range out {
		out[r] = dotF16VecDot64Generic(rows[r*rb:r*rb+2*len(x)], x)
	}
}

// vecDotRow is row · activation row t of a in ggml's vec_dot order for the type
// (F32 and Q8_0; F16 rows go through dotF16VecDotRows).
func vecDotRow(wt Type, row []byte, a *acts, t int) float32 {
	switch wt {
	case F32:
		return dotF32VecDotTail(row, a.f[t*a.cols:(t+1)*a.cols])
	case Q8_0:
		nb := a.cols / qk0
		return dotQ8_0VecDotGeneric(row, a.q8[t*nb:(t+1)*nb])
	}
	return dotRow(wt, row, a, t)
}

// dotF16VecDot64Generic is attnScore's sum of row·x for len(x) a multiple of 64.
func dotF16VecDot64Generic(row []byte, x []float32) float32 {
	var h [8][8]float32
	for b := 0; b < len(x); b += 64 {
		for g := range h {
			for l := range h[g] {
				i := b + 8*g + l
				h[g][l] += float32(f16Table[le16(row[2*i:])] * x[i])
			}
		}
	}
	var u [8]float32
	for l := range u {
		u[l] = ((h[0][l] + h[4][l]) + (h[2][l] + h[6][l])) + ((h[1][l] + h[5][l]) + (h[3][l] + h[7][l]))
	}
	return sum8(&u)
}

// dotF32VecDotTail is row·x (row the little-endian float32 bits of len(x) values)
// in ggml_vec_dot_f32's order on AVX-512: dotF32VecDot's over the values up to the
// last multiple of 64, then each later product added (f32TailAdd).
func dotF32VecDotTail(row []byte, x []float32) float32 {
	n := len(x) &^ 63
	var s float32
	if n > 0 {
		s = dotF32VecDot(row[:4*n], x[:n])
	}
	for i := n; i < len(x); i++ {
		s = f32TailAdd(s, row, x, n, i)
	}
	return s
}

// f32TailAdd is s plus the product of value i of row with x[i] in the tail
// (from n64 on) of ggml_vec_dot_f32: in GCC's vectorized in-order reduction of
// sumf += x[i]*y[i] the tail's first multiple of 8 products are rounded, then
// added; its last (tail mod 8) scalar ones are fused multiply-adds.
func f32TailAdd(s float32, row []byte, x []float32, n64, i int) float32 {
	w := math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
	if i < n64+(len(x)-n64)&^7 {
		return s + float32(w*x[i])
	}
	return fmaf(w, x[i], s)
}

// dotF32VecDotRows sets out[r] to dotF32VecDotTail of row r of rows (rb bytes
// apart) and x: the tails' columns eight at a time for eight rows at a time where
// the CPU allows (dotF32VecDotTails: a LoRA adapter's F32 B, rank 16, is all
// tail), the rest one by one, each row's sum in its own order.
func dotF32VecDotRows(out []float32, rows []byte, x []float32, rb int) {
	n64 := len(x) &^ 63
	for r := range out {
		out[r] = 0
		if n64 > 0 {
			out[r] = dotF32VecDot(rows[r*rb:r*rb+4*n64], x[:n64])
		}
	}
	if n64 == len(x) {
		return
	}
	nr, n8 := dotF32VecDotTails(out, rows, x, rb, n64)
	dotF32TailRowsGeneric(out[:nr], rows, x, rb, n64+n8)
	dotF32TailRowsGeneric(out[nr:], rows[nr*rb:], x, rb, n64)
}

// dotF32TailRowsGeneric adds to out[r] the products of row r's values from i0 on
// (rows rb bytes apart) with x's, in order, as f32TailAdd adds them.
func dotF32TailRowsGeneric(out []float32, rows []byte, x []float32, rb, i0 int) {
	n64 := len(x) &^ 63
	for r := range out {
		row, s := rows[r*rb:(r+1)*rb], out[r]
		for i := i0; i < len(x); i++ {
			s = f32TailAdd(s, row, x, n64, i)
		}
		out[r] = s
	}
}

// dotQ8_0VecDotRows sets out[r] to dotQ8_0VecDotGeneric of row r of rows (rb bytes
// apart) and y, through dotQ8_0VecDots where the CPU allows.
func dotQ8_0VecDotRows(out []float32, rows []byte, y []q8Block, rb int) {
	for r := dotQ8_0VecDots(out, rows, y, rb); r < len(out); r++ {
		out[r] = dotQ8_0VecDotGeneric(rows[r*rb:(r+1)*rb], y)
	}
}

// dotQ8_0VecDotGeneric is row·y (Q8_0 blocks both) in ggml_vec_dot_q8_0_q8_0's
// x86 order: 8 float lanes, lane k adding, block by block, the exact integer sum
// of the products at positions 4k..4k+3 times f16(x.d)·y.d in one fused
// multiply-add; the lanes then summed as sum8 (hsum_float_8).
func dotQ8_0VecDotGeneric(row []byte, y []q8Block) float32 {
	var acc [8]float32
	for b := range y {
		blk := row[b*34 : (b+1)*34]
		d := f16Table[le16(blk)] * y[b].d
		for k := range acc {
			var isum int32
			for j := 4 * k; j < 4*k+4; j++ {
				isum += int32(int8(blk[2+j])) * int32(y[b].qs[j])
			}
			acc[k] = fmaf(d, float32(isum), acc[k])
		}
	}
	return sum8(&acc)
}

// AddScaled sets dst[i] += src[i]·s for i < len(src), the product rounded to
// float32 before the sum: a LoRA update as llama.cpp's build_lora_mm adds it
// (ggml_scale, then ggml_add). dst must hold len(src) values.
func AddScaled(dst, src []float32, s float32) {
	dst = dst[:len(src)]
	addScaled(dst, src, s)
}

// addScaledGeneric is AddScaled in Go.
func addScaledGeneric(dst, src []float32, s float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += float32(v * s)
	}
}
