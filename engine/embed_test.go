package engine

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// TestEmbed: vectors are unit length, billed as the inputs' tokens, different for
// different inputs, and the same bits alone, batched with each other and with
// generations, and with a long input's prompt chunked beside them.
func TestEmbed(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelConcurrency: 8, MaxModelLen: 1024, Embeddings: true},
		genmodel.Options{Arch: "qwen2", Type: "q8_0", Seed: 3})
	if !b.Models()[0].Embeddings {
		t.Fatal("ModelStatus does not say the model embeds")
	}
	tok, _ := b.Tokenizer("m")
	long := make([]int32, 700) // more than a step's 512 tokens: chunked
	for i := range long {
		long[i] = int32((i*31 + 7) % tok.VocabSize())
	}
	short, _ := b.Tokenize("m", "the cat sat on the mat")
	other, _ := b.Tokenize("m", "a completely different sentence")
	ctx := context.Background()
	alone := make([][]float32, 3)
	for i, in := range [][]int32{long, short, other} {
		e, err := b.Embed(ctx, "m", EmbedRequest{Inputs: [][]int32{in}})
		if err != nil {
			t.Fatal(err)
		}
		if e.PromptTokens != len(in) || len(e.Vectors) != 1 {
			t.Fatalf("input %d: %d prompt tokens, %d vectors", i, e.PromptTokens, len(e.Vectors))
		}
		alone[i] = e.Vectors[0]
		norm := 0.0
		for _, v := range alone[i] {
			norm += float64(v) * float64(v)
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Errorf("input %d: norm² %v", i, norm)
		}
	}
	if cos := dot(alone[1], alone[2]); cos > 0.9999 {
		t.Errorf("different inputs, cosine %v", cos)
	}
	// All three in one request, beside generations.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			generate(b, Request{Prompt: long[:50+i*40], MaxTokens: 30, Sampling: Sampling{Temperature: 1, Seed: uint64(i)}})
		}()
	}
	e, err := b.Embed(ctx, "m", EmbedRequest{Inputs: [][]int32{long, short, other}, Tenant: "x"})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if e.PromptTokens != len(long)+len(short)+len(other) {
		t.Errorf("billed %d prompt tokens", e.PromptTokens)
	}
	for i := range alone {
		for d := range alone[i] {
			if math.Float32bits(alone[i][d]) != math.Float32bits(e.Vectors[i][d]) {
				t.Fatalf("input %d differs batched (dim %d: %v vs %v)", i, d, e.Vectors[i][d], alone[i][d])
			}
		}
	}
	// The mean of the hidden states as one forward pass computes them.
	m, err := model.Open(b.models["m"].cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	acc := make([]float64, m.Config().Dim)
	st := m.NewBatch()
	kc := m.KVConfig()
	kc.BlockTokens, kc.Blocks = 16, 8
	pool, err := newPoolForTest(kc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	seq := pool.NewSeq("")
	seq.Grow(len(short))
	if _, err := st.Forward([]model.Item{{KV: seq, Tokens: short, Pool: model.PoolMean, Embed: acc}}); err != nil {
		t.Fatal(err)
	}
	want := pooled(acc, model.PoolMean, len(short))
	for d := range want {
		if want[d] != alone[1][d] {
			t.Fatalf("dim %d: %v, one forward pass gives %v", d, alone[1][d], want[d])
		}
	}
}

func dot(a, b []float32) float64 {
	s := 0.0
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestEmbedRefusals(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 64}, genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 1})
	if b.Models()[0].Embeddings {
		t.Error("a model without pooling metadata or config says it embeds")
	}
	if _, err := b.Embed(context.Background(), "m", EmbedRequest{Inputs: [][]int32{{1, 2}}}); !errors.Is(err, ErrNoEmbeddings) {
		t.Errorf("not embedding: %v", err)
	}
	b2 := genBlock(t, ModelConfig{MaxModelLen: 64, Embeddings: true}, genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 1})
	for _, in := range [][][]int32{nil, {{}}, {{-1}}, {make([]int32, 64)}} {
		if _, err := b2.Embed(context.Background(), "m", EmbedRequest{Inputs: in}); err == nil {
			t.Errorf("input %v accepted", in)
		}
	}
	if _, err := b2.Embed(context.Background(), "x", EmbedRequest{Inputs: [][]int32{{1}}}); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
}

// TestEmbedCountsAgainstMaxQueue: each input of an embedding request counts as a
// request in flight against the model's MaxQueue, the one queue limit (doc.go), so a
// request with more inputs than the limit allows is refused at once.
func TestEmbedCountsAgainstMaxQueue(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 64, MaxQueue: 2, Embeddings: true}, genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 1})
	if _, err := b.Embed(context.Background(), "m", EmbedRequest{Inputs: [][]int32{{1}, {2}, {3}}}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("3 inputs with max_queue 2: %v, want ErrQueueFull", err)
	}
	if _, err := b.Embed(context.Background(), "m", EmbedRequest{Inputs: [][]int32{{1}, {2}}}); err != nil {
		t.Errorf("2 inputs with max_queue 2: %v", err)
	}
	if st := b.Models()[0]; st.Queued != 0 || st.MaxQueue != 2 {
		t.Errorf("after the embeddings: queued %d, max queue %d (want 0, 2)", st.Queued, st.MaxQueue)
	}
}

func newPoolForTest(kc kvcache.Config) (*kvcache.Pool, error) { return kvcache.New(kc) }
