package model_test

import (
	"math"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
)

// TestPackedQ4KMatchesPlain: a Q4_K model loaded with its layers' matrices
// packed (model.PackQ4K, where the packed kernels run) gives the logits bits of
// the same file loaded plain: a prompt, greedy decodes, and a verification step
// of 1 + 8 positions with every position's logits, each position also equal to
// one token at a time.
func TestPackedQ4KMatchesPlain(t *testing.T) {
	if !kernels.PacksQ4K() {
		t.Skip("no packed Q4_K kernels on this CPU or level")
	}
	path := genFile(t, genmodel.Options{Arch: "llama", Type: "q4_k_m"})
	open := func(pack bool) *model.Model {
		defer func(p bool) { model.PackQ4K = p }(model.PackQ4K)
		model.PackQ4K = pack
		m, err := model.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	plain, packed := open(false), open(true)
	if plain.PackedQ4KRows() != 0 || packed.PackedQ4KRows() == 0 {
		t.Fatalf("packed rows: plain %d, packed %d", plain.PackedQ4KRows(), packed.PackedQ4KRows())
	}
	V := plain.Config().Vocab
	prompt := make([]int32, 21)
	for j := range prompt {
		prompt[j] = int32((j*104729 + 7) % V)
	}
	want, got := alone(t, plain, prompt, 6), alone(t, packed, prompt, 6)
	for i := range want.logits {
		samePackedBits(t, "decode step", i, got.logits[i], want.logits[i])
	}
	// A verification step: 9 positions at once after the prompt, every row of
	// logits, against one position at a time on the plain model.
	draft := got.tokens[len(prompt)-9 : len(prompt)]
	st := packed.NewState(0)
	if _, err := st.Forward(prompt[:12], false); err != nil {
		t.Fatal(err)
	}
	all, err := st.Forward(draft, true)
	if err != nil {
		t.Fatal(err)
	}
	one := plain.NewState(0)
	if _, err := one.Forward(prompt[:12], false); err != nil {
		t.Fatal(err)
	}
	for i, tok := range draft {
		l, err := one.Forward([]int32{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		samePackedBits(t, "verification position", i, all[i*V:(i+1)*V], l)
	}
}

func samePackedBits(t *testing.T, what string, i int, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s %d: %d logits, want %d", what, i, len(got), len(want))
	}
	for j := range want {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("%s %d: logit %d is %v, plain %v", what, i, j, got[j], want[j])
		}
	}
}

// TestPackQ4KDefaultOnlyWhereItCostsNoMemory: Load packs Q4_K by default only
// in an in-process engine on Linux (where the file's pages of a packed matrix
// are released); not in a worker process of the workers mode (whose packed copy
// would not be shared) nor outside Linux (where the weights would be held
// twice); LMLITE_PACK_Q4K=0/1 overrides the default either way.
func TestPackQ4KDefaultOnlyWhereItCostsNoMemory(t *testing.T) {
	for _, c := range []struct {
		goos   string
		worker bool
		env    string
		want   bool
	}{
		{"linux", false, "", true},
		{"linux", true, "", false},
		{"darwin", false, "", false},
		{"windows", false, "", false},
		{"freebsd", true, "", false},
		{"linux", false, "0", false},
		{"linux", true, "1", true},
		{"darwin", false, "1", true},
		{"linux", false, "yes", true},
		{"linux", true, "yes", false},
	} {
		if got := model.PackQ4KDefault(c.goos, c.worker, c.env); got != c.want {
			t.Errorf("PackQ4KDefault(%q, worker %v, %s=%q) = %v, want %v", c.goos, c.worker, model.EnvPackQ4K, c.env, got, c.want)
		}
	}
}
