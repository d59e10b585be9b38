package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/internal/testenv"
)

// optionalSchema is a JSON schema of n string properties (at most 32 characters),
// all optional but the first (so that the output is not "{}", one token), whose
// names carry tag: a new tag is a fresh grammar, whose masks no cache holds yet
// (issue 30's "64 optional properties"). A bounded string counts its characters, so
// each of its tokens is a fresh state: a walk of the whole vocabulary.
func optionalSchema(n int, tag string) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d_%s":{"type":"string","maxLength":32}`, i, tag)
	}
	fmt.Fprintf(&b, `},"required":["p0_%s"],"additionalProperties":false}`, tag)
	return []byte(b.String())
}

// llamaVocabBlock is a Block of one generated tiny llama ("m") with Llama 2's
// vocabulary of 32,000 tokens (from /work/shared/models/llama-2-tiny-random.gguf):
// small weights, a real vocabulary's mask walks.
func llamaVocabBlock(tb testing.TB, mc ModelConfig) *Block {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "m.gguf")
	opts := genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 7,
		Vocab: testenv.SharedFile(tb, "models/llama-2-tiny-random.gguf")}
	if err := genmodel.Generate(opts, path); err != nil {
		tb.Fatal(err)
	}
	mc.ID, mc.Path = "m", path
	b, err := New(Config{Models: []ModelConfig{mc}, Logger: quietLog()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	if err := b.Load(context.Background(), "m"); err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkGrammarNeighbour is a probe tenant's 16-token unconstrained request (its
// latency, submission to last token, is the time per op), alone ("alone") and while
// a hostile tenant runs constrained requests one after another, each with a fresh
// schema of 64 optional properties ("beside-64opt"), on a tiny generated llama with
// Llama 2's vocabulary. p50-ms and p90-ms are the probe's latency percentiles.
func BenchmarkGrammarNeighbour(b *testing.B) {
	for _, beside := range []bool{false, true} {
		name := "alone"
		if beside {
			name = "beside-64opt"
		}
		b.Run(name, func(b *testing.B) {
			blk := llamaVocabBlock(b, ModelConfig{MaxModelConcurrency: 8, MaxModelLen: 1024})
			tok, _ := blk.Tokenizer("m")
			prompt := make([]int32, 24)
			for i := range prompt {
				prompt[i] = int32(1000 + (i*7919)%(tok.VocabSize()-2000))
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			if beside {
				started := make(chan struct{})
				var once sync.Once
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ctx.Err() == nil; i++ {
						g, err := blk.CompileSchema(optionalSchema(64, fmt.Sprint("h", i)))
						if err != nil {
							b.Error(err)
							return
						}
						s, err := blk.Generate(ctx, "m", Request{Prompt: prompt[:20], MaxTokens: 64, Grammar: g, Tenant: "hostile",
							Sampling: Sampling{Temperature: 1, Seed: uint64(i)}, CacheSalt: "hostile"})
						if err != nil {
							b.Error(err)
							return
						}
						for range s.Tokens {
							once.Do(func() { close(started) })
						}
						if u, err := s.Wait(context.Background()); err != nil && ctx.Err() == nil {
							b.Logf("hostile request %d: %v after %d tokens", i, err, u.CompletionTokens)
						}
					}
				}()
				select {
				case <-started:
				case <-time.After(time.Minute):
					b.Fatal("the hostile request produced no token")
				}
			}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				s, err := blk.Generate(context.Background(), "m", Request{Prompt: prompt, MaxTokens: 16, Tenant: "probe",
					Sampling: Sampling{IgnoreEOS: true}, CacheSalt: "probe"})
				if err != nil {
					b.Fatal(err)
				}
				for range s.Tokens {
				}
				if _, err := s.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10])/1e6, "p90-ms")
		})
	}
}
