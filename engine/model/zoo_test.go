package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
)

// zooKnownGaps are the files of ../shared/testdata/zoo-quantize that do not yet meet
// the bounds of TestZooQuantizeParity (issue 32), with what they gave when last
// measured. They are logged, not enforced, so the gap stays visible; a file listed
// here that starts to pass fails the test until it is taken off the list.
//
// The cause (issue 32): these tiny random-weight models amplify any difference in
// the last bits (a relative 1e-5 change to a few norm weights moves them by a mean
// KL of 1e-3), through the 8-bit activation roundings it can flip, so agreeing with
// llama.cpp means its arithmetic bit for bit. Done: SwiGLU's exponential
// (ggml_v_expf), the Q5_1, IQ3_S, Q4_1, Q5_K and Q6_K dot products (ggml's vec_dot
// float order: llama-dense-Q4_1 from 5.9e-4 to 5.3e-7, llama-dense-b-Q5_K_S from
// 5.2e-4 to steps of ~2e-6), attention's exponentials as libm's correctly rounded
// expf (kernels.attnExpf; llama-dense-c-IQ3_S from a mean KL of 1.07e-3 to 6.1e-7,
// llama-dense-Q5_1 from -8e-5 to 6.7e-7), and attention's K·q in the 16-lane order
// of ggml_vec_dot_f16 in llama.cpp's AVX-512 build with the accumulator's fused
// multiply-add (kernels.attnScore, kernels.TestGGMLAttendOrder): qwen3moe-b-Q8_0
// from 9.8e-2 (at step 19 the last layer's router logits of its second and third
// experts were 0.03 apart, and the other expert was taken) to 4.4e-5 with every
// top-1 equal, llama-dense-d-Q6_K from 7.9e-4 (top-1 23/24) to 3.6e-7. Left:
// Q8_0's dot product order (kernels.TestGGMLDotOrder: in the Go reference alone,
// -tags purego, it took mixtral-moe-Q4_K_M from 4.3e-4 to 3.9e-7, olmoe-d-Q8_0
// from 3.9e-4 to 1.2e-4; with its AVX2 and AVX-512 kernels too, commit 75bc768,
// the same on both levels: not adopted, since on AVX-512 it made Q8_0 prompts'
// products 3.3x slower than the block-order outer-product tiles, which keep one
// float per row and token; ggmlorder_test.go). Also done: Q3_K's dot product in
// ggml's order (llama-dense-Q3_K_S from 1.5e-5 to 4.7e-7), and the F32 routers'
// products in ggml_vec_dot_f32's order of llama.cpp's AVX-512 builds, in which they
// decode (kernels.MatMulVecDotF32, bit for bit; qwen2moe-Q4_K_M from 2.88e-5 to
// 5.6e-7). On these files any order but MatMul's own F32 one (eight fused
// accumulators of 8 lanes) gave about 5.6e-7 there, ggml's AVX2 one (four of 8) and
// the unfused 8 lanes too: the gain was one router near-tie, not evidence of an
// order; kernels.TestVecDotF32MatchesLlamaCppBits is.
// RoPE's angles as libm's sinf/cosf (not correctly rounded for ~2% of them; ours
// are) were not needed: q and k are rounded to binary16 before attention.
var zooKnownGaps = map[string]string{}

// TestZooQuantizeParity scores every file of ../shared/testdata/zoo-quantize (files
// as llama.cpp's converter and llama-quantize write them) against llama.cpp's own
// greedy run beside it (teacher-forced on its 24 steps, KL over its top 20): top-1
// equal on at least 23 of the 24 steps, mean KL(llama.cpp ‖ lmlite) below 1e-3 for
// quantized files and 1e-2 for F16 and BF16 ones (where two llama.cpp builds differ
// by up to 5e-3), as close as llama.cpp's builds are to each other (issue 32).
func TestZooQuantizeParity(t *testing.T) {
	if raceEnabled {
		t.Skip("pure numerics: make test runs it without the race detector")
	}
	dir := filepath.Join(testenv.Shared(t), "testdata", "zoo-quantize")
	paths, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil || len(paths) == 0 {
		testenv.Missing(t, "the zoo-quantize files", err)
	}
	if only := os.Getenv("LMLITE_ZOO"); only != "" { // a few while working on them
		var keep []string
		for _, p := range paths {
			if strings.Contains(filepath.Base(p), only) {
				keep = append(keep, p)
			}
		}
		paths = keep
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".gguf")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(strings.TrimSuffix(path, ".gguf") + ".llamacpp.json")
			if err != nil {
				t.Fatal(err)
			}
			var r peerRun
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			klMax := 1e-3
			if strings.HasSuffix(name, "-F16") || strings.HasSuffix(name, "-BF16") {
				klMax = 1e-2
			}
			gap, known := zooKnownGaps[name]
			m, err := Open(path)
			if err != nil {
				if known {
					t.Logf("KNOWN GAP (issue 32): %s: %v (was: %s)", name, err, gap)
					return
				}
				t.Fatal(err)
			}
			defer m.Close()
			mismatches, meanKL, maxKL := scoreAgainstPeer(t, m, r, AttnF16)
			steps := len(r.Steps)
			t.Logf("ZOO %s: top-1 %d/%d, mean KL %.2e (max step %.2e)", name, steps-mismatches, steps, meanKL, maxKL)
			pass := mismatches <= 1 && meanKL < klMax
			switch {
			case known && pass:
				t.Errorf("%s now passes (top-1 %d/%d, mean KL %.2e): take it off zooKnownGaps", name, steps-mismatches, steps, meanKL)
			case known:
				t.Logf("KNOWN GAP (issue 32): %s still fails: top-1 %d/%d, mean KL %.2e (was: %s)", name, steps-mismatches, steps, meanKL, gap)
			case !pass:
				t.Errorf("top-1 %d/%d (want >= %d), mean KL %.3g (want < %g)", steps-mismatches, steps, steps-1, meanKL, klMax)
			}
		})
	}
}
