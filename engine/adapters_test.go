package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/model"
)

// adapterBlock generates a tiny base and n rank-16 adapters over it (ids a0…) and
// serves them from a Block.
func adapterBlock(t *testing.T, mc ModelConfig, n int) *Block {
	t.Helper()
	return adapterBlockWith(t, mc, Config{}, n)
}

// adapterBlockWith is adapterBlock with the Block's configuration cfg (its Models
// and Logger set here).
func adapterBlockWith(t *testing.T, mc ModelConfig, cfg Config, n int) *Block {
	t.Helper()
	dir := t.TempDir()
	base := filepath.Join(dir, "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 21}, base); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("a%d.gguf", i))
		if err := genmodel.GenerateLoRA(genmodel.LoRAOptions{Base: base, Rank: 16, Alpha: 16, Seed: uint64(100 + i)}, p); err != nil {
			t.Fatal(err)
		}
		mc.Adapters = append(mc.Adapters, AdapterConfig{ID: fmt.Sprint("a", i), Path: p})
	}
	mc.ID, mc.Path = "m", base
	cfg.Models, cfg.Logger = []ModelConfig{mc}, quietLog()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAdaptersBatchInvariant: 16 concurrent requests over 8 adapters, beside 4 on
// the bare base, give each request the same tokens and logit bits as it gets alone;
// the adapters change the tokens (else the test proves nothing); an unknown adapter
// is refused at admission.
func TestAdaptersBatchInvariant(t *testing.T) {
	b := adapterBlock(t, ModelConfig{MaxModelConcurrency: 20, MaxModelLen: 256}, 8)
	tok, _ := b.Tokenizer("m")
	var reqs []Request
	for i := range 20 {
		p := make([]int32, 3+(i*5)%30)
		for j := range p {
			p[j] = int32((i%4*7919 + j*104729 + 1) % tok.VocabSize()) // requests 0, 4, 8, … share a prompt
		}
		r := Request{Prompt: p, MaxTokens: 12, Sampling: Sampling{Temperature: 0.7, Seed: uint64(i)}, Tenant: fmt.Sprint("t", i%3)}
		if i < 16 {
			r.Adapters = []string{fmt.Sprint("a", i%8)}
		}
		reqs = append(reqs, r)
	}
	alone := make([]result, len(reqs))
	changed := 0
	for i, r := range reqs {
		alone[i] = generate(b, r)
		if alone[i].err != nil || len(alone[i].ids) == 0 {
			t.Fatalf("request %d alone: %v", i, alone[i].err)
		}
		bare := r
		bare.Adapters = nil
		if i < 16 && generate(b, bare).same(alone[i]) != nil {
			changed++
		}
	}
	if changed < 8 {
		t.Fatalf("the adapters changed only %d of 16 requests' outputs", changed)
	}
	res := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = generate(b, r) }()
	}
	wg.Wait()
	for i := range reqs {
		if err := alone[i].same(res[i]); err != nil {
			t.Errorf("request %d (adapters %v) in the batch: %v", i, reqs[i].Adapters, err)
		}
	}
	st := b.Models()[0]
	if float64(st.StepSeqs)/float64(st.Steps) < 1.5 {
		t.Errorf("no batching happened: %d steps, %d sequences", st.Steps, st.StepSeqs)
	}
	if _, err := b.Generate(context.Background(), "m", Request{Prompt: []int32{1}, Adapters: []string{"nope"}}); !errors.Is(err, ErrUnknownAdapter) {
		t.Errorf("unknown adapter: %v, want ErrUnknownAdapter", err)
	}
}

// TestAdaptersPrefixCacheKeyed: a prompt cached under one adapter is not reused
// under another, nor by the bare base (their K and V differ), and is reused under
// the same adapter; each run gives its adapter's alone tokens.
func TestAdaptersPrefixCacheKeyed(t *testing.T) {
	b := adapterBlock(t, ModelConfig{MaxModelLen: 256}, 2)
	p := make([]int32, 50)
	for i := range p {
		p[i] = int32(i*37%900 + 3)
	}
	run := func(ads ...string) result {
		r := generate(b, Request{Prompt: p, MaxTokens: 6, Adapters: ads})
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r
	}
	a0 := run("a0")
	if a0.u.CachedTokens != 0 {
		t.Fatalf("first run: %d cached tokens", a0.u.CachedTokens)
	}
	for _, c := range []struct {
		ads    []string
		cached bool
	}{{[]string{"a1"}, false}, {nil, false}, {[]string{"a1", "a0"}, false}, {[]string{"a0"}, true}, {[]string{"a1"}, true}} {
		r := run(c.ads...)
		if got := r.u.CachedTokens > 0; got != c.cached {
			t.Errorf("adapters %v after the others: %d cached tokens, want cached %v", c.ads, r.u.CachedTokens, c.cached)
		}
		if c.cached && len(c.ads) == 1 && c.ads[0] == "a0" {
			if err := a0.same(r); err != nil {
				t.Errorf("a0 from the cache: %v", err)
			}
		}
	}
}

// TestAdapterConfigErrors: a configuration with a bad adapter is refused at New,
// naming the model and adapter, with the error's kind: ErrConfig for a rule of the
// configuration, fs.ErrNotExist for a missing file, model.ErrBadAdapter for a file
// that is not an adapter of the model.
func TestAdapterConfigErrors(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "m.gguf")
	other := filepath.Join(dir, "q.gguf")
	lora := filepath.Join(dir, "a.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, base); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.Generate(genmodel.Options{Arch: "qwen2", Preset: "tiny", Type: "q8_0", Seed: 1}, other); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.GenerateLoRA(genmodel.LoRAOptions{Base: base, Rank: 8}, lora); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mc   ModelConfig
		want string
		kind error // errors.Is
	}{
		{"no id", ModelConfig{ID: "m", Path: base, Adapters: []AdapterConfig{{Path: lora}}}, "has no id", ErrConfig},
		{"twice", ModelConfig{ID: "m", Path: base, Adapters: []AdapterConfig{{ID: "x", Path: lora}, {ID: "x", Path: lora}}}, `"x" configured twice`, ErrConfig},
		{"missing", ModelConfig{ID: "m", Path: base, Adapters: []AdapterConfig{{ID: "x", Path: filepath.Join(dir, "none")}}}, "adapter x", fs.ErrNotExist},
		{"a model", ModelConfig{ID: "m", Path: base, Adapters: []AdapterConfig{{ID: "x", Path: other}}}, "general.type", model.ErrBadAdapter},
		{"other base", ModelConfig{ID: "q", Path: other, Adapters: []AdapterConfig{{ID: "x", Path: lora}}}, `architecture "llama"`, model.ErrBadAdapter},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := New(Config{Models: []ModelConfig{c.mc}, Logger: quietLog()})
			if err == nil {
				b.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "model "+c.mc.ID) {
				t.Fatalf("%v, want %v naming %q", err, c.kind, c.want)
			}
		})
	}
}
