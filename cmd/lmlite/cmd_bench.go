package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

func init() {
	register("bench", "measure prompt processing and generation speed (llama-bench protocol)", func(args []string) error {
		return cmdBench(args, os.Stdout)
	})
}

// benchResult is one bench run. pp_tok_s and tg_tok_s have the meaning and the keys of
// ../shared/peers/llamacpp/bench.sh, so the two can be compared line by line.
type benchResult struct {
	Model       string  `json:"model"`
	Threads     int     `json:"threads"`
	Parallel    int     `json:"parallel"`
	Prompt      int     `json:"prompt"`
	Gen         int     `json:"gen"`
	PPTokS      float64 `json:"pp_tok_s"`
	TGTokS      float64 `json:"tg_tok_s"`
	FileBytes   int64   `json:"file_bytes"`
	DecodeBytes int64   `json:"decode_weight_bytes"` // weights one decode step reads (a mixture of experts: its used experts only)
	KVBytes     int64   `json:"kv_bytes"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	OverheadMiB float64 `json:"overhead_mib"` // peak RSS - file - KV
	// SlowPath names the file's tensor types that run on the pure-Go reference
	// kernels (no assembly for them, or none on this CPU), with their tensor counts.
	SlowPath map[string]int `json:"slow_path,omitempty"`
}

// slowPathTypes counts the matrices of f whose type has no assembly kernels by
// hasSIMD (kernels.HasSIMD: on this build and CPU).
func slowPathTypes(f *gguf.File, hasSIMD func(kernels.Type) bool) map[string]int {
	var slow map[string]int
	for _, ti := range f.Tensors {
		t := kernels.Type(ti.Type)
		if len(ti.Shape()) >= 2 && kernels.Supported(t) && !hasSIMD(t) {
			if slow == nil {
				slow = map[string]int{}
			}
			slow[t.String()]++
		}
	}
	return slow
}

func cmdBench(args []string, stdout io.Writer) error {
	fs := newFlags("bench")
	path := fs.String("model", "", "GGUF model file (required)")
	threads := fs.Int("threads", 0, "threads; 0: all cores")
	ctxLen := fs.Int("ctx", 0, "context length; 0: prompt + gen + 16")
	nPrompt := fs.Int("prompt", 512, "random prompt tokens")
	nGen := fs.Int("gen", 128, "generated tokens")
	reps := fs.Int("reps", 3, "repetitions (the medians are reported)")
	attnF32 := fs.Int("attention-f32-min-prompt", 0, "prompts of at least this many tokens run the float32 attention (a model's attention_f32_min_prompt); 0: the server's default (64, llama.cpp's threshold, on AVX-512 with head size 64, else none); -1: binary16 for all")
	parallel := fs.Int("parallel", 1, "sequences decoded together in one batch (tg is their sum)")
	budgetFlag := fs.String("memory-budget", "", "memory the model may use (weights + KV), e.g. 2GiB; empty: no limit")
	asJSON := fs.Bool("json", false, "print one JSON line")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	membw := fs.Bool("membw", false, "measure the memory read bandwidth instead (no model needed)")
	prefixCache := fs.String("prefix-cache", "", "PREFIX:SUFFIX: measure time to first token cold, after a hot and after a warm prefix-cache hit instead")
	chatTurns := fs.Int("chat-turns", 0, "N: measure an N-turn chat with the prefix cache on and off instead")
	engineMode := fs.String("engine", "", "inprocess|workers: measure TTFT and aggregate tg through that engine mode's Block API instead (the worker hop's overhead)")
	coldStart := fs.Bool("cold-start", false, "measure the first token after an idle unload against warm instead (ABAB, --reps pairs, --prompt tokens)")
	coldPrefix := fs.Int("cold-prefix", 0, "with --cold-start, N: measure instead the time to first token of an N-token cached prefix (+ --gen new tokens) hot and after an unload with kv_warm_file")
	dropCache := fs.Bool("drop-cache", false, "with --cold-start: drop the model file from the page cache before each comeback (posix_fadvise DONTNEED), so that it is read from the disk")
	specFlag := fs.String("spec", "", "ngram or prediction: measure speculative decoding instead: one request at a time (--parallel N: N at once, the aggregate tok/s), plain and with drafts (ABAB, --reps pairs, --gen tokens); ngram: prompt-lookup drafts on a repetitive task (greedy, a passage given then started again) and a free one (sampled at temperature 1); prediction: Predicted Outputs, greedy, the prediction being the model's own plain output, half of it perturbed, or unrelated text")
	maxDraft := fs.Int("max-draft", 0, "with --spec: the most tokens drafted per step (a model's speculative.max_draft); 0: 8")
	grammarFlag := fs.String("grammar", "", "constrain generation: json (any JSON object) or a JSON Schema file; reports the masks' share of the decode time")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	if *membw {
		bw := readBandwidth(*threads, 1<<30, max(*reps, 5))
		if *asJSON {
			return json.NewEncoder(stdout).Encode(map[string]any{"threads": *threads, "read_bytes_s": bw, "read_gib_s": bw / (1 << 30)})
		}
		fmt.Fprintf(stdout, "memory read bandwidth, %d threads: %.2f GiB/s\n", *threads, bw/(1<<30))
		return nil
	}
	if *path == "" {
		return errors.New("--model is missing: the GGUF file to measure, e.g. `lmlite bench --model data/models/demo-stories.gguf` (or --membw, which needs no model)")
	}
	if *specFlag != "" {
		runtime.GOMAXPROCS(*threads)
		stopProfile, err := startCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer stopProfile()
		return benchSpec(stdout, *path, *specFlag, *nGen, *reps, *maxDraft, max(*parallel, 1), *asJSON)
	}
	if *engineMode != "" {
		return benchEngine(stdout, *path, *engineMode, *parallel, *nGen, *reps, *asJSON)
	}
	if *coldStart {
		runtime.GOMAXPROCS(*threads)
		if *coldPrefix > 0 {
			return benchColdPrefix(stdout, *path, *threads, *coldPrefix, *nGen, *reps, *asJSON)
		}
		return benchColdStart(stdout, *path, *threads, *nPrompt, *reps, *dropCache, *asJSON)
	}
	if *prefixCache != "" || *chatTurns > 0 {
		runtime.GOMAXPROCS(*threads)
		if *prefixCache != "" {
			return benchPrefixCache(stdout, *path, *prefixCache, *threads, *reps, *asJSON)
		}
		return benchChat(stdout, *path, *chatTurns, *threads, *asJSON)
	}
	if *nPrompt < 1 || *nGen < 1 || *reps < 1 {
		return fmt.Errorf("--prompt, --gen and --reps must be at least 1")
	}
	var budget int64
	if *budgetFlag != "" {
		var err error
		if budget, err = configs.ParseBytes(*budgetFlag); err != nil {
			return fmt.Errorf("--memory-budget: %w", err)
		}
	}
	if *parallel < 1 {
		return fmt.Errorf("--parallel %d must be at least 1", *parallel)
	}
	runtime.GOMAXPROCS(*threads)
	f, err := gguf.Open(*path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := model.Load(f)
	if err != nil {
		return err
	}
	cfg := m.Config()
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	p, g, note, err := fitBench(*nPrompt, *nGen, set["prompt"], set["gen"], cfg.Context)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintf(stderr, "lmlite bench: %s\n", note)
	}
	*nPrompt, *nGen = p, g
	if *ctxLen <= 0 {
		*ctxLen = *nPrompt + *nGen + 16
	}
	if *ctxLen < *nPrompt+*nGen {
		return fmt.Errorf("--ctx %d is less than --prompt %d + --gen %d", *ctxLen, *nPrompt, *nGen)
	}
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// The sequences' KV lives in a paged pool, as in the server: ctx tokens each.
	kc := m.KVConfig()
	kc.Blocks = kc.BlocksFor(*ctxLen, *parallel, 0)
	if budget > 0 && f.Size()+kc.Bytes() > budget {
		return fmt.Errorf("--memory-budget %d MiB: the model needs %d MiB of weights + %d MiB of KV cache",
			budget>>20, f.Size()>>20, kc.Bytes()>>20)
	}
	pool, err := kvcache.New(kc)
	if err != nil {
		return err
	}
	b := m.NewBatch()
	seqs := make([]*kvcache.Seq, *parallel)
	pp := make([]float64, *reps)
	tg := make([]float64, *reps)
	seed := uint32(1234)
	prompts := make([][]int32, *parallel)
	for s := range prompts {
		prompts[s] = make([]int32, *nPrompt)
	}
	next := make([]int32, *parallel)
	items := make([]model.Item, 0, *parallel)
	gb, err := newGrammarBench(f, *grammarFlag, *parallel)
	if err != nil {
		return err
	}
	var maskTime, sampleTime time.Duration
	for r := range *reps {
		for s := range seqs {
			if seqs[s] != nil {
				seqs[s].Release()
			}
			seqs[s] = pool.NewSeq("")
			if err := seqs[s].Grow(*nPrompt + *nGen); err != nil {
				return err
			}
			// bench.c's prompt: tokens from the same LCG, in [3, vocab).
			for i := range prompts[s] {
				seed = seed*1664525 + 1013904223
				prompts[s][i] = 3 + int32(seed%uint32(cfg.Vocab-3))
			}
		}
		// Prompt processing: the sequences' prompts in batches of up to 512 tokens
		// (llama.cpp's ubatch), logits only at each prompt's last token; the
		// attention numerics the engine gives a request of this prompt.
		attn := model.AttentionFor(*nPrompt, model.AttnF32MinPromptFor(*attnF32, cfg.HeadDim))
		t0 := time.Now()
		s, done := 0, 0
		for s < *parallel {
			items = items[:0]
			room := max(512, *parallel)
			for room > 0 && s < *parallel {
				n := min(room, *nPrompt-done)
				logits := 0
				if done+n == *nPrompt {
					logits = 1
				}
				items = append(items, model.Item{KV: seqs[s], Start: done, Tokens: prompts[s][done : done+n], Logits: logits, Attn: attn})
				room -= n
				if done += n; done == *nPrompt {
					s, done = s+1, 0
				}
			}
			if _, err := b.Forward(items); err != nil {
				return err
			}
		}
		pp[r] = float64(*nPrompt**parallel) / time.Since(t0).Seconds()
		// Generation continues from each prompt's last token, greedy, one token per
		// sequence per step, all sequences in one batch.
		for s := range next {
			next[s] = prompts[s][*nPrompt-1]
		}
		t0 = time.Now()
		for g := range *nGen {
			items = items[:0]
			for s := range seqs {
				items = append(items, model.Item{KV: seqs[s], Start: *nPrompt + g, Tokens: next[s : s+1], Logits: 1, Attn: attn})
			}
			out, err := b.Forward(items)
			if err != nil {
				return err
			}
			if gb != nil {
				gt, st := gb.step(out, next)
				maskTime += gt
				sampleTime += st
				continue
			}
			for s := range next {
				next[s] = int32(argmax(out[s]))
			}
		}
		tg[r] = float64(*nGen**parallel) / time.Since(t0).Seconds()
	}
	res := benchResult{Model: filepath.Base(*path), Threads: *threads, Parallel: *parallel, Prompt: *nPrompt, Gen: *nGen,
		PPTokS: median(pp), TGTokS: median(tg), FileBytes: f.Size(), DecodeBytes: m.DecodeBytes(),
		KVBytes: kc.Bytes(), PeakRSS: peakRSS(), SlowPath: slowPathTypes(f, kernels.HasSIMD)}
	res.OverheadMiB = float64(res.PeakRSS-res.FileBytes-res.KVBytes) / (1 << 20)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s: threads %d, parallel %d, prompt %d, gen %d, reps %d\n  pp %.2f tok/s\n  tg %.2f tok/s (a decode step reads %.1f MiB of weights)\n  peak RSS %.1f MiB = file %.1f MiB + KV %.1f MiB + %.1f MiB\n",
		res.Model, res.Threads, res.Parallel, res.Prompt, res.Gen, *reps, res.PPTokS, res.TGTokS, float64(res.DecodeBytes)/(1<<20),
		float64(res.PeakRSS)/(1<<20), float64(res.FileBytes)/(1<<20), float64(res.KVBytes)/(1<<20), res.OverheadMiB)
	if len(res.SlowPath) > 0 {
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(res.SlowPath)) {
			parts = append(parts, fmt.Sprintf("%s (%d tensors)", t, res.SlowPath[t]))
		}
		fmt.Fprintf(stdout, "  slow path: %s on the pure-Go reference kernels (no assembly for them yet)\n", strings.Join(parts, ", "))
	}
	if gb != nil {
		decode := float64(*nGen**parallel**reps) / res.TGTokS // seconds, about
		tokens := float64(*nGen * *parallel * *reps)
		fmt.Fprintf(stdout, "  grammar %s: masks %.1f%% of the decode time (%.1f µs per token), masked greedy sampling %.1f%% (%.1f µs per token), %d outputs completed\n",
			*grammarFlag, 100*maskTime.Seconds()/decode, float64(maskTime.Microseconds())/tokens,
			100*sampleTime.Seconds()/decode, float64(sampleTime.Microseconds())/tokens, gb.completed)
	}
	return nil
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// fitBench fits the prompt and generated tokens into the model's context (ctx; 0:
// unknown). Defaults that do not fit are lowered, keeping the generated tokens at
// most a quarter of the context, and note says so; values the user gave that do not
// fit are an error that says which flags to lower.
func fitBench(prompt, gen int, promptSet, genSet bool, ctx int) (p, g int, note string, err error) {
	if ctx <= 0 || prompt+gen <= ctx {
		return prompt, gen, "", nil
	}
	switch {
	case promptSet && genSet:
		return 0, 0, "", fmt.Errorf("--prompt %d + --gen %d exceed the model's context of %d tokens: lower them", prompt, gen, ctx)
	case genSet:
		if gen >= ctx {
			return 0, 0, "", fmt.Errorf("--gen %d does not fit in the model's context of %d tokens: lower it", gen, ctx)
		}
		prompt = ctx - gen
	case promptSet:
		if prompt >= ctx {
			return 0, 0, "", fmt.Errorf("--prompt %d does not fit in the model's context of %d tokens: lower it", prompt, ctx)
		}
		gen = ctx - prompt
	default:
		gen = min(gen, ctx/4)
		prompt = ctx - gen
	}
	return prompt, gen, fmt.Sprintf("the model's context is %d tokens: measuring --prompt %d --gen %d (lower them to measure less)", ctx, prompt, gen), nil
}
