package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lmlite/lmlite/internal/ggmlref"
)

// The arithmetic of llama.cpp's flash attention as its AVX-512 build decodes over
// its F16 KV cache (ggml_compute_forward_flash_attn_ext_f16_one_chunk for one
// query; issue 32), for head sizes that are a multiple of 64. Attend (attnScore,
// attnSpanGeneric and every assembly path) follows it in the two places that each
// alone decided a file of ../shared/testdata/zoo-quantize (TestZooQuantizeParity):
//   - K·q (ggml_vec_dot_f16 with 16-lane vectors, 64 elements a step): four
//     accumulators of 16 lanes updated by fused multiply-adds, summed pairwise
//     (0+2, 1+3, then the two) and the 16 lanes reduced by halves (i+8, i+4, then
//     0+2, 1+3, then the two). Attend kept 8 lanes in index order before: taking
//     this order moved qwen3moe-b-Q8_0 from a mean KL of 9.8e-2 (a top-1 token lost
//     to an MoE router near-tie) to 4.4e-5 with every top-1 equal, and
//     llama-dense-d-Q6_K from 7.9e-4 to 3.6e-7.
//   - the online softmax's exponentials are libm's expf, which is correctly
//     rounded (float32(math.Exp) gives its bits; attnExpf). With it
//     llama-dense-c-IQ3_S went from mean KL 1.07e-3 to 6.1e-7.
// Two differences are left, neither seen on random heads: ggml's accumulator update
// v·e^(s-M) + acc is one fused multiply-add before its rounding to binary16
// (ggml_vec_mad_f16), where Attend rounds the product first; and ggml's lanes
// start from +0, so a score of -0 comes out +0 there.

// attendGGML is one head's attention for query q over n positions (keys and values
// at k[j*hd:] and v[j*hd:], hd = len(q) a multiple of 64), in the order above.
func attendGGML(q []float32, k, v []uint16, n int, scale float32) []float32 {
	hd := len(q)
	qr := make([]float32, hd)
	roundF16s(qr, q)
	acc := make([]float32, hd)
	mx, sum := float32(math.Inf(-1)), float32(0)
	for j := 0; j < n; j++ {
		kj, vj := k[j*hd:(j+1)*hd], v[j*hd:(j+1)*hd]
		var lane [4][16]float32
		for i := 0; i < hd; i += 64 {
			for a := range lane {
				for l := range lane[a] {
					p := i + 16*a + l
					lane[a][l] = fma32(f16Table[kj[p]], qr[p], lane[a][l])
				}
			}
		}
		var h [16]float32
		for l := range h {
			h[l] = (lane[0][l] + lane[2][l]) + (lane[1][l] + lane[3][l])
		}
		for w := 8; w >= 1; w /= 2 {
			for l := 0; l < w; l++ {
				h[l] += h[l+w]
			}
		}
		s := h[0] * scale
		ms, vs := float32(1), float32(1)
		if s > mx {
			ms = float32(math.Exp(float64(mx - s)))
			mx = s
			for i, a := range acc {
				acc[i] = RoundF16(a * ms)
			}
		} else {
			vs = float32(math.Exp(float64(s - mx)))
		}
		for i, a := range acc {
			acc[i] = RoundF16(fma32(f16Table[vj[i]], vs, a))
		}
		sum = float32(sum*ms) + vs
	}
	inv := 1 / sum
	for i, a := range acc {
		acc[i] = a * inv
	}
	return acc
}

// TestGGMLAttendOrder: Attend, on every SIMD level, and attendGGML give the bits
// of llama.cpp's flash attention (its AVX-512 CPU variant through ggmlref) for
// every output value, on random heads of 64, 128 and 256 values over 1 to 120
// positions. Attend failed it before it took ggml's K·q order (attnScore) and
// accumulator update: 102 of the 144 runs (48 heads, 3 levels) differed (issue 32).
func TestGGMLAttendOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	r := rand.New(rand.NewPCG(32, 64))
	for trial := 0; trial < 48; trial++ {
		hd := 64 << (trial % 3)
		n := 1 + r.IntN(120)
		q := randRow(r, hd, 2)
		k, v := make([]uint16, n*hd), make([]uint16, n*hd)
		for i := range k {
			k[i] = F32ToF16(float32(r.NormFloat64()))
			v[i] = F32ToF16(float32(r.NormFloat64()))
		}
		scale := float32(1 / math.Sqrt(float64(hd)))
		want := ggmlref.Attend(t, q, k, v, n, scale)
		got := attendGGML(q, k, v, n, scale)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("head %d (hd %d, %d positions), value %d: attendGGML %v, llama.cpp %v", trial, hd, n, i, got[i], want[i])
			}
		}
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			att := make([]float32, hd)
			Attend(att, q, k, v, n, hd, scale)
			restore()
			var bad int
			for i := range want {
				if math.Float32bits(att[i]) != math.Float32bits(want[i]) {
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s: head %d (hd %d, %d positions): Attend differs from llama.cpp in %d of %d values", level, trial, hd, n, bad, hd)
			}
		}
	}
}

// TestAttnScoreIsGGMLVecDotF16Order: attnScore sums q·k in ggml_vec_dot_f16's
// order with 16-lane vectors (four accumulators of fused multiply-adds, summed
// (0+2)+(1+3), lanes by halves), for head sizes 64 to 512, on scores of mixed
// magnitudes where another order differs in the last bits; no llama.cpp needed.
func TestAttnScoreIsGGMLVecDotF16Order(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 32))
	var moved int
	for trial := 0; trial < 400; trial++ {
		hd := 64 * (1 + trial%8)
		qr, k := make([]float32, hd), make([]uint16, hd)
		for i := range qr {
			qr[i] = RoundF16(float32(r.NormFloat64() * math.Exp(r.NormFloat64())))
			k[i] = F32ToF16(float32(r.NormFloat64() * math.Exp(r.NormFloat64())))
		}
		var acc [4][16]float32
		for i := 0; i < hd; i += 64 {
			for a := range acc {
				for l := range acc[a] {
					p := i + 16*a + l
					acc[a][l] = fma32(f16Table[k[p]], qr[p], acc[a][l])
				}
			}
		}
		var h [16]float32
		for l := range h {
			h[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l])
		}
		for w := 8; w >= 1; w /= 2 {
			for l := 0; l < w; l++ {
				h[l] += h[l+w]
			}
		}
		got := attnScore(qr, k)
		if math.Float32bits(got) != math.Float32bits(h[0]) {
			t.Fatalf("hd %d: attnScore %v, ggml_vec_dot_f16 %v", hd, got, h[0])
		}
		var a8 [8]float32
		for i, x := range qr {
			a8[i%8] += f16Table[k[i]] * x
		}
		if sum8(&a8) != h[0] {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no score of the 400 depends on the order: the test proves nothing")
	}
	t.Logf("the old 8-lane order differs on %d of 400 scores", moved)
}
