package model_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// genBase returns the path of the tiny generated model of o (seed 5), shared (genFile).
func genBase(t testing.TB, o genmodel.Options) string {
	t.Helper()
	return genFile(t, o)
}

// genAdapter writes a generated adapter for the base file and loads it over m.
func genAdapter(t testing.TB, m *model.Model, base string, o genmodel.LoRAOptions) *model.Adapter {
	t.Helper()
	o.Base = base
	path := filepath.Join(t.TempDir(), fmt.Sprintf("lora-%d.gguf", o.Seed))
	if err := genmodel.GenerateLoRA(o, path); err != nil {
		t.Fatal(err)
	}
	a, err := m.OpenAdapter(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func openModel(t testing.TB, path string) *model.Model {
	t.Helper()
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func lastLogits(t *testing.T, m *model.Model, ids []int32, lora []model.LoRA) []float32 {
	t.Helper()
	st := m.NewState(0)
	st.SetLoRA(lora)
	l, err := st.Forward(ids, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestLoRAScaleRules checks the adapter's effect against its definition: scale 0
// gives the base's bits; with alpha 0 the scale is the user's, with alpha it is
// user × alpha / rank (alpha 32 at rank 16 and scale 0.5 equals alpha 0 at scale 1,
// to the bit); two adapters at half scale differ from either alone; a different
// adapter gives different logits.
func TestLoRAScaleRules(t *testing.T) {
	for _, arch := range []string{"llama", "phi3", "qwen2", "qwen3moe"} {
		t.Run(arch, func(t *testing.T) {
			base := genBase(t, genmodel.Options{Arch: arch, Type: "q8_0"})
			m := openModel(t, base)
			ids := []int32{1, 574, 568, 260, 562, 12, 99}
			a0 := genAdapter(t, m, base, genmodel.LoRAOptions{Seed: 1, Rank: 16})
			a32 := genAdapter(t, m, base, genmodel.LoRAOptions{Seed: 1, Rank: 16, Alpha: 32})
			other := genAdapter(t, m, base, genmodel.LoRAOptions{Seed: 2, Rank: 16})
			bare := lastLogits(t, m, ids, nil)
			if !sameBits(bare, lastLogits(t, m, ids, []model.LoRA{{Adapter: a0, Scale: 0}})) {
				t.Error("an adapter at scale 0 changed the logits")
			}
			one := lastLogits(t, m, ids, []model.LoRA{{Adapter: a0, Scale: 1}})
			if sameBits(bare, one) {
				t.Fatal("the adapter did not change the logits")
			}
			// genmodel writes B times rank/alpha (here exactly one half: a power of
			// two), so alpha 32 at rank 16 and scale 1 (a factor of 32/16 = 2)
			// must give alpha 0's bits at scale 1: the scale is user × alpha / rank.
			if a32.Alpha() != 32 || a0.Alpha() != 0 {
				t.Fatalf("alphas %v, %v", a0.Alpha(), a32.Alpha())
			}
			if full32 := lastLogits(t, m, ids, []model.LoRA{{Adapter: a32, Scale: 1}}); !sameBits(one, full32) {
				t.Errorf("alpha 32 rank 16 with B halved differs from alpha 0 (max diff %v)", maxDiff(one, full32))
			}
			if half32 := lastLogits(t, m, ids, []model.LoRA{{Adapter: a32, Scale: 0.5}}); sameBits(half32, one) {
				t.Error("alpha 32: scales 0.5 and 1 gave the same logits")
			}
			if sameBits(one, lastLogits(t, m, ids, []model.LoRA{{Adapter: other, Scale: 1}})) {
				t.Error("two different adapters gave the same logits")
			}
			both := lastLogits(t, m, ids, []model.LoRA{{Adapter: a0, Scale: 0.5}, {Adapter: other, Scale: 0.5}})
			if sameBits(both, one) || sameBits(both, bare) {
				t.Error("two adapters at half scale matched one adapter or the base")
			}
		})
	}
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestLoRABatchMatchesAlone is the batch invariance of adapters: 16 requests over 8
// different rank-16 adapters, plus 2 on the bare base, joining a continuous batch
// at different steps, prefilled in chunks beside running decodes, in a paged
// cache, with 1 or 2 threads, produce the same logits bits and tokens as each
// request alone through a State with its adapter.
func TestLoRABatchMatchesAlone(t *testing.T) {
	for _, o := range []genmodel.Options{{Arch: "llama", Type: "q4_k_m"}, {Arch: "phi3", Type: "f16"}, {Arch: "qwen2moe", Type: "q8_0"}} {
		t.Run(o.Arch+"-"+o.Type, func(t *testing.T) {
			base := genBase(t, o)
			m := openModel(t, base)
			V := m.Config().Vocab
			var adapters []*model.Adapter
			for i := range 8 {
				adapters = append(adapters, genAdapter(t, m, base, genmodel.LoRAOptions{Seed: uint64(10 + i), Rank: 16, Alpha: 16}))
			}
			const gen = 6
			var want []greedy
			baseTokens := map[string]bool{}
			for i := range 18 {
				p := make([]int32, 1+(i*7)%23)
				for j := range p {
					p[j] = int32((i%4*7919 + j*104729) % V) // requests 0, 4, 8, … share a prompt
				}
				var lora []model.LoRA
				if i < 16 {
					lora = []model.LoRA{{Adapter: adapters[i%8], Scale: 1}}
				}
				g := aloneLoRA(t, m, p, gen, lora)
				want = append(want, g)
				if i < 16 {
					bare := alone(t, m, p, gen)
					baseTokens[fmt.Sprint(bare.tokens)] = true
				}
			}
			changed := 0
			for _, g := range want[:16] {
				if !baseTokens[fmt.Sprint(g.tokens)] {
					changed++
				}
			}
			if changed == 0 {
				t.Fatal("no adapter changed any request's tokens: the test would prove nothing")
			}
			for _, threads := range []int{1, 2} {
				prev := kernels.SetThreads(threads)
				cfg := m.KVConfig()
				cfg.BlockTokens, cfg.Blocks = 16, 18*4
				pool, err := kvcache.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				runBatch(t, m, pool, want, gen, V)
				kernels.SetThreads(prev)
			}
		})
	}
}

// TestAdapterLoadErrors checks llama.cpp's load-time rules, each refusal naming the
// key or the tensor at fault.
func TestAdapterLoadErrors(t *testing.T) {
	base := genBase(t, genmodel.Options{Arch: "llama", Type: "q8_0"})
	m := openModel(t, base)
	good, err := genmodel.BuildLoRA(genmodel.LoRAOptions{Base: base, Rank: 8, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	goodPath := filepath.Join(t.TempDir(), "good.gguf")
	if err := good.WriteFile(goodPath); err != nil {
		t.Fatal(err)
	}
	gf, err := gguf.Open(goodPath)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	f16 := func(n int) []byte { return make([]byte, 2*n) }
	// rewrite copies the good adapter with KV changes and tensors replaced (nil data:
	// dropped) or added.
	type tensor struct {
		dims []uint64
		data []byte
	}
	rewrite := func(kv map[string]gguf.Value, tensors map[string]*tensor) string {
		w := gguf.NewWriter()
		for _, x := range gf.KV {
			if v, ok := kv[x.Key]; ok {
				w.AddKV(x.Key, v)
				continue
			}
			w.AddKV(x.Key, x.Value)
		}
		for i := range gf.Tensors {
			ti := &gf.Tensors[i]
			if r, ok := tensors[ti.Name]; ok {
				if r != nil {
					if err := w.AddTensor(ti.Name, gguf.F16, r.dims, r.data); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, gf.TensorData(ti)); err != nil {
				t.Fatal(err)
			}
		}
		for name, r := range tensors {
			if _, ok := gf.Tensor(name); !ok && r != nil {
				if err := w.AddTensor(name, gguf.F16, r.dims, r.data); err != nil {
					t.Fatal(err)
				}
			}
		}
		p := filepath.Join(t.TempDir(), "bad.gguf")
		if err := w.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := m.Config()
	for _, c := range []struct {
		name    string
		kv      map[string]gguf.Value
		tensors map[string]*tensor
		want    string
	}{
		{"not an adapter", map[string]gguf.Value{"general.type": gguf.String("model")}, nil, "general.type"},
		{"not lora", map[string]gguf.Value{"adapter.type": gguf.String("control_vector")}, nil, "adapter.type"},
		{"other architecture", map[string]gguf.Value{"general.architecture": gguf.String("qwen2")}, nil, `architecture "qwen2"`},
		{"alpha not float32", map[string]gguf.Value{"adapter.lora.alpha": gguf.Uint32(16)}, nil, "adapter.lora.alpha"},
		{"base tensor missing", nil, map[string]*tensor{
			"blk.9.attn_q.weight.lora_a": {[]uint64{uint64(cfg.Dim), 8}, f16(cfg.Dim * 8)},
			"blk.9.attn_q.weight.lora_b": {[]uint64{8, uint64(cfg.Dim)}, f16(cfg.Dim * 8)}}, "blk.9.attn_q.weight is not in the base"},
		{"half a pair", nil, map[string]*tensor{"blk.0.attn_k.weight.lora_b": nil}, "blk.0.attn_k.weight has only one"},
		{"wrong width", nil, map[string]*tensor{
			"blk.1.ffn_down.weight.lora_a": {[]uint64{uint64(cfg.Dim), 8}, f16(cfg.Dim * 8)}}, "blk.1.ffn_down.weight: lora_a"},
		{"not transposed", nil, map[string]*tensor{
			"blk.0.attn_v.weight.lora_a": {[]uint64{uint64(cfg.Dim), 4}, f16(cfg.Dim * 4)}}, "blk.0.attn_v.weight: lora_a's rank 4 is not lora_b's 8"},
		{"unadapted tensor", nil, map[string]*tensor{
			"token_embd.weight.lora_a": {[]uint64{uint64(cfg.Dim), 8}, f16(cfg.Dim * 8)},
			"token_embd.weight.lora_b": {[]uint64{8, uint64(cfg.Vocab)}, f16(cfg.Vocab * 8)}}, "token_embd.weight: lmlite adapts only"},
		{"stray tensor", nil, map[string]*tensor{"blk.0.attn_norm.weight": {[]uint64{uint64(cfg.Dim)}, f16(cfg.Dim)}}, "blk.0.attn_norm.weight is neither"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.OpenAdapter(rewrite(c.kv, c.tensors))
			if !errors.Is(err, model.ErrBadAdapter) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrBadAdapter naming %q", err, c.want)
			}
		})
	}
	// The good adapter loads, over its own base only.
	if _, err := m.OpenAdapter(goodPath); err != nil {
		t.Fatal(err)
	}
	other := openModel(t, genBase(t, genmodel.Options{Arch: "qwen2", Type: "q8_0"}))
	if _, err := other.OpenAdapter(goodPath); !errors.Is(err, model.ErrBadAdapter) {
		t.Fatalf("an adapter of llama loaded over qwen2: %v", err)
	}
	a, err := m.OpenAdapter(goodPath)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st := other.NewState(0)
	st.SetLoRA([]model.LoRA{{Adapter: a, Scale: 1}})
	if _, err := st.Forward([]int32{1, 2}, false); err == nil {
		t.Fatal("a sequence of one model ran with an adapter loaded over another")
	}
}
