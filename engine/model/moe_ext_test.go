package model_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// TestExactTiesPickLowerIndex: in a model whose experts 0, 1 and 2 have identical router
// rows in every layer (their scores tie exactly on every token) and 2 experts are used
// per token, expert 2 is never chosen, alone or in a batch: whenever it would be, so
// would 0 and 1, which win the tie; and expert 0 gets more tokens than 1 (it won
// the last place alone). The same model without the tie does route tokens
// to expert 2, so its zero load is the tie-break's doing.
func TestExactTiesPickLowerIndex(t *testing.T) {
	prompts := [][]int32{{1, 574, 568, 260, 562}, {1, 300, 301, 302, 303, 304, 305, 306}, {7, 9, 11}}
	for _, tie := range []int{0, 3} {
		m := genTinyOpts(t, genmodel.Options{Arch: "qwen3moe", Type: "f32", TieExperts: tie})
		if c := m.Config(); c.Experts != 8 || c.ExpertsUsed != 2 {
			t.Fatalf("config %+v", c)
		}
		for _, p := range prompts {
			if _, err := m.NewState(0).Forward(p, true); err != nil {
				t.Fatal(err)
			}
		}
		cfg := m.KVConfig()
		cfg.BlockTokens, cfg.Blocks = 16, 16
		pool, err := kvcache.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var items []model.Item
		for _, p := range prompts {
			s := pool.NewSeq("")
			if err := s.Grow(len(p)); err != nil {
				t.Fatal(err)
			}
			items = append(items, model.Item{KV: s, Tokens: p, Logits: 1})
		}
		if _, err := m.NewBatch().Forward(items); err != nil {
			t.Fatal(err)
		}
		load := m.ExpertLoad()
		var total, on0, on1, on2 uint64
		for l, row := range load {
			for _, n := range row {
				total += n
			}
			on0 += row[0]
			on1 += row[1]
			on2 += row[2]
			t.Logf("tie %d, layer %d: tokens per expert %v", tie, l, row)
		}
		tokens := 0
		for _, p := range prompts {
			tokens += 2 * len(p)
		}
		if want := uint64(tokens * 2 * len(load)); total != want {
			t.Errorf("tie %d: %d routings counted, want %d (tokens × used × layers)", tie, total, want)
		}
		switch {
		case tie > 0 && (on2 != 0 || on0 <= on1):
			// on0 > on1: on some tokens the three tied for the last place, and 0 won.
			t.Errorf("tied experts 0..2 got %d, %d and %d tokens (want decreasing, the last 0)", on0, on1, on2)
		case tie == 0 && on2 == 0:
			t.Errorf("without ties expert 2 got no tokens: the tied run proves nothing")
		}
	}
}

// TestDecodeBytes: a decode step of a mixture of experts reads its weight matrices
// except the experts, ExpertsUsed/Experts of the stacked experts, and one row of the
// token embedding, as the file's tensor sizes say.
func TestDecodeBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "qwen2moe", Preset: "tiny", Type: "q4_k_m", Seed: 1}, path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	var want int64
	for _, ti := range f.Tensors {
		switch {
		case len(ti.Dims) == 1: // norms, biases: decoded at load; the shared expert's gate is a row
			if strings.HasSuffix(ti.Name, "ffn_gate_inp_shexp.weight") {
				want += ti.Size
			}
		case ti.Name == "token_embd.weight":
			want += ti.Size / int64(ti.Dims[1])
		case len(ti.Dims) == 3:
			want += ti.Size / int64(c.Experts) * int64(c.ExpertsUsed)
		default:
			want += ti.Size
		}
	}
	if got := m.DecodeBytes(); got != want || got >= f.Size()/2 {
		t.Fatalf("DecodeBytes %d, want %d (file %d)", got, want, f.Size())
	}
}
