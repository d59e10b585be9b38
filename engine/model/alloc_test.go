package model

import (
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/kvcache"
)

// stateForwardAllocs is what State.Forward allocates on each call: the copy of the
// logits it returns, which is the caller's to keep (state.go).
const stateForwardAllocs = 1

// TestDecodeAllocations: a decoded token in steady state allocates nothing in the
// forward pass or the kernels (matrix products, attention, the worker pool): only
// the logits State.Forward returns (stateForwardAllocs), for every weight type; and
// a Batch step of four sequences over a paged cache allocates nothing at all. The
// mixtures of experts too (routing, packing, the shared expert).
func TestDecodeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what escapes and empties sync.Pools at random; make test runs this test without it")
	}
	if testing.Short() {
		t.Skip("generates models")
	}
	for _, o := range []genmodel.Options{{Arch: "llama", Type: "q8_0"}, {Arch: "llama", Type: "q4_0"}, {Arch: "llama", Type: "q4_k_m"},
		{Arch: "llama", Type: "f16"}, {Arch: "mixtral", Type: "q4_k_m"}, {Arch: "qwen2moe", Type: "q8_0"}} {
		typ := o.Type
		if o.Arch != "llama" {
			typ = o.Arch + "-" + o.Type
		}
		t.Run(typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			o.Preset, o.Seed = "tiny", 1
			if err := genmodel.Generate(o, path); err != nil {
				t.Fatal(err)
			}
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			st := m.NewState(256)
			prompt := make([]int32, 64)
			for i := range prompt {
				prompt[i] = int32(300 + i)
			}
			if _, err := st.Forward(prompt, false); err != nil {
				t.Fatal(err)
			}
			tok := []int32{400}
			step := func() {
				st.Truncate(64)
				if _, err := st.Forward(tok, false); err != nil {
					t.Fatal(err)
				}
			}
			step() // the scratch buffers reach their decoding size
			got := testing.AllocsPerRun(50, step)
			if want := float64(stateForwardAllocs); got > want {
				t.Errorf("%s: a decoded token allocates %v times, want at most %v (State.Forward's own)", typ, got, want)
			}
			t.Logf("%s: %v allocations per decoded token", typ, got)

			cfg := m.KVConfig()
			cfg.BlockTokens, cfg.Blocks = 16, 64
			pool, err := kvcache.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b := m.NewBatch()
			items := make([]Item, 4)
			for i := range items {
				items[i] = Item{KV: pool.NewSeq(""), Tokens: prompt, Logits: 1}
				if err := items[i].KV.Grow(len(prompt) + 1); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.Forward(items); err != nil { // prefill all four
				t.Fatal(err)
			}
			for i := range items {
				items[i].Start, items[i].Tokens = len(prompt), tok
			}
			batchStep := func() {
				if _, err := b.Forward(items); err != nil {
					t.Fatal(err)
				}
			}
			batchStep()
			if got := testing.AllocsPerRun(50, batchStep); got != 0 {
				t.Errorf("%s: a Batch step of 4 decoding sequences allocates %v times, want 0", typ, got)
			}
		})
	}
}
