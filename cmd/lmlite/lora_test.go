package main

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
)

// TestLoRAGenRunScore: gen-model --lora writes an adapter in llama.cpp's format
// (labelled random) for a generated base; run --lora FILE:SCALE generates greedily
// with it, tokens that differ from the bare base's, and score --lora's top-1 at each
// position is run's next token (the engine's batched path and the State agree).
func TestLoRAGenRunScore(t *testing.T) {
	dir := t.TempDir()
	base, lora := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "a.gguf")
	if err := commands["gen-model"].run([]string{"--type", "q8_0", "--out", base}); err != nil {
		t.Fatal(err)
	}
	if err := commands["gen-model"].run([]string{"--lora", "--base", base, "--rank", "8", "--alpha", "16", "--seed", "4", "--out", lora}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(lora)
	if err != nil {
		t.Fatal(err)
	}
	gt, _ := f.GetString("general.type")
	at, _ := f.GetString("adapter.type")
	name, _ := f.GetString("general.name")
	alpha, _ := f.GetFloat("adapter.lora.alpha")
	a, _ := f.Tensor("blk.0.attn_q.weight.lora_a")
	f.Close()
	if gt != "adapter" || at != "lora" || alpha != 16 || !strings.Contains(name, "random") || a == nil || a.Type != gguf.F16 || a.Dims[1] != 8 {
		t.Fatalf("adapter file: general.type %q adapter.type %q alpha %v name %q lora_a %+v", gt, at, alpha, name, a)
	}
	gen := func(extra ...string) []int32 {
		var out bytes.Buffer
		args := append([]string{"--model", base, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "16", "--ids"}, extra...)
		if err := cmdRun(args, &out); err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for _, s := range strings.Fields(out.String()) {
			id, _ := strconv.Atoi(s)
			ids = append(ids, int32(id))
		}
		return ids
	}
	bare, adapted := gen(), gen("--lora", lora+":0.7")
	if len(adapted) != 16 || slicesEqual(bare, adapted) {
		t.Fatalf("run --lora: %v, bare %v", adapted, bare)
	}
	m, err := model.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var lf loraFlag
	if err := lf.Set(lora + ":0.7"); err != nil {
		t.Fatal(err)
	}
	ls, err := lf.open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer ls[0].Adapter.Close()
	prompt := []int32{1, 574, 568, 260, 562} // <s> Once upon a time in the built-in vocabulary
	ids := append(prompt, adapted...)
	steps, err := score(m, ids, 1, 0, 0, ls)
	if err != nil {
		t.Fatal(err)
	}
	for i := range adapted {
		if got := steps[len(prompt)-1+i].Top[0][0].(int32); got != adapted[i] {
			t.Fatalf("position %d: score --lora's top-1 %d, run --lora generated %d", i, got, adapted[i])
		}
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLoRAFlag: FILE[:SCALE] as llama.cpp's --lora and --lora-scaled take them.
func TestLoRAFlag(t *testing.T) {
	for _, c := range []struct {
		in    string
		path  string
		scale float32
		bad   bool
	}{
		{"a.gguf", "a.gguf", 1, false},
		{"a.gguf:0.5", "a.gguf", 0.5, false},
		{"dir:x/a.gguf", "dir:x/a.gguf", 1, false},
		{"dir:x/a.gguf:-1", "dir:x/a.gguf", -1, false},
		{"a.gguf:0", "", 0, true},
		{"", "", 0, true},
	} {
		var l loraFlag
		err := l.Set(c.in)
		if c.bad != (err != nil) || !c.bad && (l[0].path != c.path || l[0].scale != c.scale) {
			t.Errorf("%q: %v %v", c.in, l, err)
		}
	}
}
