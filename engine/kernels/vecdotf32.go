package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// MatMulVecDotF32 is MatMul for F32 weights in the float order of ggml_vec_dot_f32
// as llama.cpp's AVX-512 builds run it, the order in which they decode (a batch of
// one token; prompts there take llamafile's sgemm, in another order): four
// accumulators of 16 lanes, each a fused multiply-add of one product per 64
// values, added as (0+2)+(1+3) and reduced by halves (dotF32VecDotGeneric;
// TestVecDotF32MatchesLlamaCppBits). MatMul's own F32 order (eight fused
// accumulators of 8 lanes) differs from it in the last bits for most rows, which
// can tip a mixture of experts' router between two near-equal experts (issue 32:
// zoo qwen2moe-Q4_K_M from a mean KL of 2.9e-5 to 5.6e-7). For the routers
// (engine/model), whose products are small. Weights of another type, or a row
// length that is not a multiple of 64 (where ggml adds the last values one by
// one), take MatMul. Every output is computed in the same order whatever nTok.
func MatMulVecDotF32(dst []float32, w Matrix, x []float32, nTok int) {
	if w.Type != F32 || w.Cols%64 != 0 {
		MatMul(dst, w, x, nTok)
		return
	}
	if len(x) < nTok*w.Cols || len(dst) < nTok*w.Rows || len(w.Data) < w.Rows*w.Cols*4 {
		panic(fmt.Sprintf("kernels: MatMulVecDotF32 %dx%d by %d tokens: x has %d, dst %d", w.Rows, w.Cols, nTok, len(x), len(dst)))
	}
	if w.Rows*w.Cols*nTok < 1<<15 || !vecDotF32.TryLock() {
		vecDotF32Rows(dst, w, x, nTok, 0, w.Rows)
		return
	}
	// Through Parallel with a func value made once (a closure over this call's
	// arguments would be allocated on every call).
	v := &vecDotF32
	v.dst, v.w, v.x, v.nTok = dst, w, x, nTok
	Parallel(w.Rows, w.Cols*nTok, vecDotF32Work)
	v.dst, v.w, v.x = nil, Matrix{}, nil
	v.Unlock()
}

// vecDotF32 holds the arguments of the MatMulVecDotF32 call that runs on the pool
// (one at a time: another call meanwhile runs on its own goroutine).
var vecDotF32 struct {
	sync.Mutex
	dst, x []float32
	w      Matrix
	nTok   int
}

var vecDotF32Work = func(lo, hi int) {
	v := &vecDotF32
	vecDotF32Rows(v.dst, v.w, v.x, v.nTok, lo, hi)
}

// vecDotF32Rows computes MatMulVecDotF32's outputs of rows [lo, hi).
func vecDotF32Rows(dst []float32, w Matrix, x []float32, nTok, lo, hi int) {
	rb := 4 * w.Cols
	for r := lo; r < hi; r++ {
		row := w.Data[r*rb : (r+1)*rb]
		for t := 0; t < nTok; t++ {
			dst[t*w.Rows+r] = dotF32VecDot(row, x[t*w.Cols:(t+1)*w.Cols])
		}
	}
}

// dotF32VecDotGeneric is row·x (row the little-endian float32 bits of len(x)
// values, len(x) a multiple of 64) in ggml_vec_dot_f32's order on AVX-512: in
// groups of 8 values (G_g, values 8g..8g+7 of each 64), lane l of H_g is the fused
// multiply-add chain of lane l of G_g over the 64-value blocks in order; then
// u = ((H0+H4)+(H2+H6)) + ((H1+H5)+(H3+H7)) lane by lane, and sum8(u) (attnScore's
// reduction: ggml's four 16-lane accumulators are H0|H1, H2|H3, H4|H5, H6|H7).
func dotF32VecDotGeneric(row []byte, x []float32) float32 {
	_ = row[4*len(x)-1]
	var h [8][8]float32
	for b := 0; b < len(x); b += 64 {
		for g := range h {
			for l := range h[g] {
				i := b + 8*g + l
				w := math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
				h[g][l] = float32(math.FMA(float64(w), float64(x[i]), float64(h[g][l])))
			}
		}
	}
	var u [8]float32
	for l := range u {
		u[l] = ((h[0][l] + h[4][l]) + (h[2][l] + h[6][l])) + ((h[1][l] + h[5][l]) + (h[3][l] + h[7][l]))
	}
	return sum8(&u)
}
