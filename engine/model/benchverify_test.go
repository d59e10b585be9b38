package model

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/kernels"
)

// BenchmarkVerifyStep measures what speculative decoding's verification costs on
// the model file named by LMLITE_BENCH_MODEL (skipped when unset): one step of a
// sequence computing its last token and k drafted ones (k+1 positions, every
// position's logits row, as the engine's runner asks) after a 128-token prompt, for
// k = 0 (a plain decode), 1, 2, 4, 8 and 16, or the comma-separated list in
// LMLITE_BENCH_KS (e.g. 0,1,2,3,4,5,6,7,8,10,12,15). cpu-ms/op is the process's CPU time per
// step (on a shared machine, what the step costs); a k-step pays when its accepted
// tokens + 1 exceed its cost over k = 0's. LMLITE_BENCH_THREADS sets the worker
// pool's size (default one per CPU; 1 runs every product inline, so a loaded
// machine's waiting workers stay out of the CPU time). LMLITE_BENCH_PACK=0 loads
// the Q4_K matrices plain (PackQ4K), to compare the layouts.
func BenchmarkVerifyStep(b *testing.B) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		b.Skip("LMLITE_BENCH_MODEL not set")
	}
	if os.Getenv("LMLITE_BENCH_THREADS") != "" {
		defer kernels.SetThreads(kernels.SetThreads(benchEnvInt(b, "LMLITE_BENCH_THREADS", 0)))
	}
	defer benchPack()()
	m, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const np = 128
	prompt := make([]int32, np+17)
	seed := uint32(1234)
	for i := range prompt {
		seed = seed*1664525 + 1013904223
		prompt[i] = 3 + int32(seed%uint32(m.Config().Vocab-3))
	}
	st := m.NewState(len(prompt) + 16)
	if _, err := st.Forward(prompt[:np], false); err != nil {
		b.Fatal(err)
	}
	ks := []int{0, 1, 2, 4, 8, 16}
	if v := os.Getenv("LMLITE_BENCH_KS"); v != "" {
		ks = ks[:0]
		for _, f := range strings.Split(v, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 0 || k > 16 {
				b.Fatalf("LMLITE_BENCH_KS %q: want draft counts 0-16", v)
			}
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			defer cpuPerOp(b)()
			for b.Loop() {
				st.Truncate(np)
				if _, err := st.Forward(prompt[np:np+1+k], true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchPack sets PackQ4K from LMLITE_BENCH_PACK (0: load Q4_K plain) for a
// benchmark's Open, returning the restore.
func benchPack() func() {
	p := PackQ4K
	if os.Getenv("LMLITE_BENCH_PACK") == "0" {
		PackQ4K = false
	}
	return func() { PackQ4K = p }
}
