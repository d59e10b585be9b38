package model_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// genTiny writes a generated tiny model and opens it.
func genTiny(t testing.TB, arch, typ string) *model.Model {
	return genTinyOpts(t, genmodel.Options{Arch: arch, Type: typ})
}

// generated holds the package's generated models, one file per Options (the same
// options give the same file), written once and shared by the tests that read them:
// generating a quantized model is a good part of a race-built test's CPU.
var generated struct {
	sync.Mutex
	dir   string
	paths map[genmodel.Options]string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "model-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	generated.dir, generated.paths = dir, map[genmodel.Options]string{}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// genFile returns the path of the tiny model of o (seed 5), generating it on first use.
// The file is shared: a test must not change it.
func genFile(t testing.TB, o genmodel.Options) string {
	t.Helper()
	o.Preset, o.Seed = "tiny", 5
	generated.Lock()
	defer generated.Unlock()
	if path, ok := generated.paths[o]; ok {
		return path
	}
	path := filepath.Join(generated.dir, fmt.Sprint(len(generated.paths)), o.Arch+"-"+o.Type+".gguf")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.Generate(o, path); err != nil {
		t.Fatal(err)
	}
	generated.paths[o] = path
	return path
}

// genTinyOpts opens the tiny model of o (seed 5).
func genTinyOpts(t testing.TB, o genmodel.Options) *model.Model {
	t.Helper()
	path := genFile(t, o)
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// greedy is one sequence's run: its prompt, then gen greedy tokens; the logits of
// every sampled step (the prompt's last token, then each decode).
type greedy struct {
	prompt []int32
	tokens []int32 // prompt + generated
	logits [][]float32
	lora   []model.LoRA // the sequence's adapters (none: the bare base)
}

func argmax(l []float32) int32 {
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return int32(best)
}

// alone runs a prompt through a State: one prefill, then gen decodes.
func alone(t *testing.T, m *model.Model, prompt []int32, gen int) greedy {
	return aloneLoRA(t, m, prompt, gen, nil)
}

// aloneLoRA is alone with the adapters lora applied.
func aloneLoRA(t *testing.T, m *model.Model, prompt []int32, gen int, lora []model.LoRA) greedy {
	st := m.NewState(0)
	st.SetLoRA(lora)
	g := greedy{prompt: prompt, tokens: append([]int32(nil), prompt...), lora: lora}
	l, err := st.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < gen; i++ {
		g.logits = append(g.logits, l)
		next := argmax(l)
		g.tokens = append(g.tokens, next)
		if i == gen-1 {
			break
		}
		if l, err = st.Forward([]int32{next}, false); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// TestBatchMatchesAlone is the engine's determinism at the model level: sequences
// joining a continuous batch at different steps, prefilled in chunks beside running
// decodes, in a paged cache, with 1 or 2 threads, produce the same logits bits as
// each sequence alone through a State.
//
// The mixtures of experts too, whose expert choice is part of the bits; "qwen3moe-tied"
// has three experts with identical router rows (exact ties on every token).
func TestBatchMatchesAlone(t *testing.T) {
	for _, o := range []genmodel.Options{
		{Arch: "llama", Type: "q4_k_m"}, {Arch: "qwen2", Type: "q8_0"}, {Arch: "qwen3", Type: "q4_0"}, {Arch: "phi3", Type: "f16"},
		{Arch: "mixtral", Type: "q4_k_m"}, {Arch: "qwen2moe", Type: "q6_k"}, {Arch: "qwen3moe", Type: "q4_0", TieExperts: 3}, {Arch: "olmoe", Type: "bf16"},
	} {
		name := o.Arch + "-" + o.Type
		if o.TieExperts > 0 {
			name = o.Arch + "-tied"
		}
		t.Run(name, func(t *testing.T) {
			m := genTinyOpts(t, o)
			V := m.Config().Vocab
			const gen = 6
			lens := []int{1, 5, 17, 33, 40, 3, 16, 9}
			var want []greedy
			for i, n := range lens {
				p := make([]int32, n)
				for j := range p {
					p[j] = int32((i*7919 + j*104729) % V)
				}
				want = append(want, alone(t, m, p, gen))
			}
			for _, threads := range []int{1, 2} {
				prev := kernels.SetThreads(threads)
				for _, bt := range []int{16, 4} {
					cfg := m.KVConfig()
					cfg.BlockTokens, cfg.Blocks = bt, 64*16/bt
					pool, err := kvcache.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					runBatch(t, m, pool, want, gen, V)
				}
				kernels.SetThreads(prev)
			}
		})
	}
}

// runBatch schedules the sequences by hand: sequence i joins at step i, prefills in
// chunks of at most 7 tokens, and every running sequence decodes once per step.
func runBatch(t *testing.T, m *model.Model, pool *kvcache.Pool, want []greedy, gen, V int) {
	t.Helper()
	type live struct {
		kv      *kvcache.Seq
		tokens  []int32
		done    int // tokens whose KV is written
		sampled int
	}
	seqs := make([]*live, len(want))
	b := m.NewBatch()
	for step := 0; ; step++ {
		var items []model.Item
		var who []int
		for i := range seqs {
			if seqs[i] == nil && step >= i {
				seqs[i] = &live{kv: pool.NewSeq(""), tokens: append([]int32(nil), want[i].prompt...)}
			}
			s := seqs[i]
			if s == nil || s.sampled == gen {
				continue
			}
			n := min(len(s.tokens)-s.done, 7)
			if err := s.kv.Grow(s.done + n); err != nil {
				t.Fatal(err)
			}
			logits := 0
			if s.done+n == len(s.tokens) {
				logits = 1
			}
			items = append(items, model.Item{KV: s.kv, Start: s.done, Tokens: s.tokens[s.done : s.done+n], Logits: logits, LoRA: want[i].lora})
			who = append(who, i)
		}
		if len(items) == 0 {
			break
		}
		out, err := b.Forward(items)
		if err != nil {
			t.Fatal(err)
		}
		for k, i := range who {
			s := seqs[i]
			s.done += len(items[k].Tokens)
			if out[k] == nil {
				continue
			}
			if len(out[k]) != V {
				t.Fatalf("sequence %d: %d logits, want %d", i, len(out[k]), V)
			}
			w := want[i].logits[s.sampled]
			for j := range w {
				if math.Float32bits(w[j]) != math.Float32bits(out[k][j]) {
					t.Fatalf("threads %d, block %d: sequence %d step %d logit %d: batch %v, alone %v", kernels.Threads(), pool.BlockTokens(), i, s.sampled, j, out[k][j], w[j])
				}
			}
			s.sampled++
			s.tokens = append(s.tokens, argmax(out[k]))
		}
	}
	for i, s := range seqs {
		if s.sampled != gen {
			t.Fatalf("sequence %d sampled %d of %d", i, s.sampled, gen)
		}
		s.kv.Release()
	}
	if pool.Available() != pool.Blocks() {
		t.Fatalf("%d of %d blocks available after all released", pool.Available(), pool.Blocks())
	}
}
