package model

import (
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// stateForwardAllocs is what State.Forward allocates itself on each call, whatever
// the kernels do: the copy of the logits it returns (state.go), and the attention
// closure that scratch.attention hands to kernels.Parallel, once per layer
// (forward.go).
func stateForwardAllocs(layers int) float64 { return float64(1 + layers) }

// TestDecodeAllocations: a decoded token in steady state allocates nothing in the
// kernels (matrix products, attention, the worker pool): only State.Forward's own
// fixed budget (stateForwardAllocs), for every weight type.
func TestDecodeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what escapes and empties sync.Pools at random; make test runs this test without it")
	}
	if testing.Short() {
		t.Skip("generates models")
	}
	for _, typ := range []string{"q8_0", "q4_0", "q4_k_m", "f16"} {
		t.Run(typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: typ, Seed: 1}, path); err != nil {
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
			if want := stateForwardAllocs(m.Config().Layers); got > want {
				t.Errorf("%s: a decoded token allocates %v times, want at most %v (State.Forward's own)", typ, got, want)
			}
			t.Logf("%s: %v allocations per decoded token", typ, got)
		})
	}
}
