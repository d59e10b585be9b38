package engine

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/internal/testenv"
)

// TestKVCacheTypeErrors: an unknown KV cache type, or a block format on a model
// whose head size is not whole blocks (stories260K: 8), fails New with an error
// naming the field and matching kernels.ErrKVType.
func TestKVCacheTypeErrors(t *testing.T) {
	p := testenv.SharedFile(t, "models/stories260K.gguf")
	for _, c := range []struct {
		mc    ModelConfig
		field string
	}{
		{ModelConfig{ID: "x", Path: p, KVCacheTypeK: "q5_0"}, "kv_cache_type_k"},
		{ModelConfig{ID: "x", Path: p, KVCacheTypeV: "q8_0"}, "kv_cache_type_v"},
	} {
		_, err := New(Config{Models: []ModelConfig{c.mc}, Logger: quietLog()})
		if !errors.Is(err, kernels.ErrKVType) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want ErrKVType naming %s", c.mc, err, c.field)
		}
	}
}

// TestDeterminismKVTypes: with a quantized KV cache (q8_0 K, q4_0 V) a request's
// tokens and logits are the same bits alone and among 31 others on 2 threads, and
// again from its cached prefix (the quantized blocks of the prefix cache); the
// pool's bytes are what the types store.
func TestDeterminismKVTypes(t *testing.T) {
	mc := ModelConfig{MaxModelConcurrency: 32, MaxModelLen: 512, KVCacheTypeK: "q8_0", KVCacheTypeV: "q4_0"}
	b := genBlock(t, mc, genmodel.Options{Arch: "llama", Type: "q4_k_m", Seed: 11})
	in := b.models["m"]
	if in.rc.kv.TypeK != kernels.KVQ8_0 || in.rc.kv.TypeV != kernels.KVQ4_0 {
		t.Fatalf("pool types %v/%v", in.rc.kv.TypeK, in.rc.kv.TypeV)
	}
	f16 := in.rc.kv
	f16.TypeK, f16.TypeV = kernels.KVF16, kernels.KVF16
	if got, want := in.kvSize, int64(in.rc.kv.Blocks)*f16.BlockBytes()*(34+18)/(64+64); got != want {
		t.Fatalf("KV pool of %d bytes, want %d (q8_0 K and q4_0 V blocks)", got, want)
	}
	tok, _ := b.Tokenizer("m")
	target := Request{Prompt: make([]int32, 45), MaxTokens: 30,
		Sampling: Sampling{Temperature: 0.9, TopP: 0.95, Seed: 1234}}
	for i := range target.Prompt {
		target.Prompt[i] = int32((i*7919 + 11) % tok.VocabSize())
	}
	prev := kernels.SetThreads(1)
	defer kernels.SetThreads(prev)
	alone := generate(b, target)
	if alone.err != nil || len(alone.ids) == 0 {
		t.Fatalf("alone: %d tokens, %v", len(alone.ids), alone.err)
	}
	kernels.SetThreads(2)
	var wg sync.WaitGroup
	reqs := others(tok.VocabSize())
	for i, r := range reqs {
		wg.Add(1)
		go func() { defer wg.Done(); generate(b, r) }()
		if i == 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr := target
				tr.CacheSalt = "computed"
				if err := alone.same(generate(b, tr)); err != nil {
					t.Errorf("among others: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	hit := generate(b, target)
	if err := alone.same(hit); err != nil || hit.u.CachedTokens != 32 {
		t.Errorf("cached prefix: %v, %d cached tokens", err, hit.u.CachedTokens)
	}
}
