package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// prefixResult is one line of `lmlite bench --prefix-cache P:S`.
type prefixResult struct {
	Model       string  `json:"model"`
	Threads     int     `json:"threads"`
	Prefix      int     `json:"prefix"`
	Suffix      int     `json:"suffix"`
	Reps        int     `json:"reps"`
	TTFTColdMs  float64 `json:"ttft_cold_ms"`
	TTFTHotMs   float64 `json:"ttft_hot_ms"`
	TTFTWarmMs  float64 `json:"ttft_warm_ms"`
	HotSpeedup  float64 `json:"hot_speedup"`  // cold / hot
	WarmSpeedup float64 `json:"warm_speedup"` // cold / warm
	HotCached   int     `json:"hot_cached_tokens"`
	WarmCached  int     `json:"warm_cached_tokens"`
}

// parsePrefixSpec parses "PREFIX:SUFFIX" token counts.
func parsePrefixSpec(spec string) (int, int, error) {
	a, b, ok := strings.Cut(spec, ":")
	p, err1 := strconv.Atoi(a)
	s, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || p < 1 || s < 1 {
		return 0, 0, fmt.Errorf("--prefix-cache %q: want PREFIX:SUFFIX token counts, e.g. 2000:50", spec)
	}
	return p, s, nil
}

// lcgTokens returns n tokens in [3, vocab) from bench.c's generator.
func lcgTokens(seed *uint32, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		*seed = *seed*1664525 + 1013904223
		t[i] = 3 + int32(*seed%uint32(vocab-3))
	}
	return t
}

// benchBlock serves one model for the cache benchmarks: one sequence at a time, a
// hot pool for one sequence of maxLen and a warm tier of warm bytes.
func benchBlock(path string, maxLen int, warm int64, noCache bool) (*engine.Block, int, error) {
	b, err := engine.New(engine.Config{Logger: quietLogger(), Models: []engine.ModelConfig{{
		ID: "m", Path: path, MaxModelLen: maxLen, MaxModelConcurrency: 1, IdleTimeout: -1,
		KVWarmBytes: warm, DisablePrefixCache: noCache,
	}}})
	if err != nil {
		return nil, 0, err
	}
	if err := b.Load(context.Background(), "m"); err != nil {
		b.Close()
		return nil, 0, err
	}
	tok, err := b.Tokenizer("m")
	if err != nil {
		b.Close()
		return nil, 0, err
	}
	return b, tok.VocabSize(), nil
}

// firstToken runs a prompt for max tokens and returns its usage (greedy).
func firstToken(b *engine.Block, prompt []int32, max int) ([]int32, engine.Usage, error) {
	s, err := b.Generate(context.Background(), "m", engine.Request{Prompt: prompt, MaxTokens: max, CacheSalt: "bench"})
	if err != nil {
		return nil, engine.Usage{}, err
	}
	var out []int32
	for t := range s.Tokens {
		if t.ID >= 0 {
			out = append(out, t.ID)
		}
	}
	u, err := s.Wait(context.Background())
	return out, u, err
}

// benchPrefixCache measures the time to first token of a prompt of a shared prefix and
// a new suffix: cold (nothing cached), after a hot hit, and after a warm hit (the hot
// tier emptied into the warm one first), through the engine's Block.
func benchPrefixCache(stdout io.Writer, path, spec string, threads, reps int, asJSON bool) error {
	prefix, suffix, err := parsePrefixSpec(spec)
	if err != nil {
		return err
	}
	maxLen := prefix + suffix + 16
	warm := warmBytesFor(path, maxLen)
	b, vocab, err := benchBlock(path, maxLen, warm, false)
	if err != nil {
		return err
	}
	defer b.Close()
	seed := uint32(1234)
	var cold, hot, warmT []float64
	res := prefixResult{Model: filepath.Base(path), Threads: threads, Prefix: prefix, Suffix: suffix, Reps: reps}
	for range reps {
		pre := lcgTokens(&seed, prefix, vocab)
		run := func() (engine.Usage, error) {
			_, u, err := firstToken(b, append(append([]int32(nil), pre...), lcgTokens(&seed, suffix, vocab)...), 1)
			return u, err
		}
		u, err := run()
		if err != nil {
			return err
		}
		if u.CachedTokens != 0 {
			return fmt.Errorf("the cold run found %d cached tokens", u.CachedTokens)
		}
		cold = append(cold, ms(u.TimeToFirstToken))
		if u, err = run(); err != nil {
			return err
		}
		hot, res.HotCached = append(hot, ms(u.TimeToFirstToken)), u.CachedTokens
		if err := b.DemoteCache("m"); err != nil {
			return err
		}
		if u, err = run(); err != nil {
			return err
		}
		warmT, res.WarmCached = append(warmT, ms(u.TimeToFirstToken)), u.CachedTokens
		if err := b.DemoteCache("m"); err != nil { // the next rep starts from nothing hot
			return err
		}
	}
	res.TTFTColdMs, res.TTFTHotMs, res.TTFTWarmMs = median(cold), median(hot), median(warmT)
	res.HotSpeedup, res.WarmSpeedup = res.TTFTColdMs/res.TTFTHotMs, res.TTFTColdMs/res.TTFTWarmMs
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s: threads %d, prefix %d + suffix %d tokens, reps %d\n  ttft cold %.1f ms\n  ttft hot  %.1f ms (%.1f× faster, %d tokens cached)\n  ttft warm %.1f ms (%.1f× faster, %d tokens replayed)\n",
		res.Model, threads, prefix, suffix, reps, res.TTFTColdMs, res.TTFTHotMs, res.HotSpeedup, res.HotCached, res.TTFTWarmMs, res.WarmSpeedup, res.WarmCached)
	return nil
}

// warmBytesFor is a warm tier that holds one sequence of maxLen tokens of the model.
func warmBytesFor(path string, maxLen int) int64 {
	cfg, err := modelKV(path)
	if err != nil {
		return 0
	}
	cfg.BlockTokens = 16
	return int64(cfg.BlocksFor(maxLen, 1, 0)+1) * cfg.BlockBytes()
}

// chatResult is one line of `lmlite bench --chat-turns N`.
type chatResult struct {
	Model       string  `json:"model"`
	Threads     int     `json:"threads"`
	Turns       int     `json:"turns"`
	System      int     `json:"system_tokens"`
	User        int     `json:"user_tokens"`
	Reply       int     `json:"reply_tokens"`
	FinalLen    int     `json:"final_context_tokens"`
	TTFTOnMs    float64 `json:"ttft_mean_ms_cache_on"`
	TTFTOffMs   float64 `json:"ttft_mean_ms_cache_off"`
	TotalOnS    float64 `json:"total_s_cache_on"`
	TotalOffS   float64 `json:"total_s_cache_off"`
	CachedOn    int     `json:"cached_tokens_cache_on"`
	SameReplies bool    `json:"same_replies"` // the cache changed no token
}

// benchChat runs a multi-turn chat (a system prompt, then turns of a user message and
// a greedy reply, the whole conversation sent each turn) with the prefix cache on and
// off.
func benchChat(stdout io.Writer, path string, turns, threads int, asJSON bool) error {
	const system, user, reply = 200, 40, 40
	maxLen := system + turns*(user+reply) + 16
	res := chatResult{Model: filepath.Base(path), Threads: threads, Turns: turns, System: system, User: user, Reply: reply}
	var replies [2][][]int32
	for k, noCache := range []bool{false, true} {
		b, vocab, err := benchBlock(path, maxLen, 0, noCache)
		if err != nil {
			return err
		}
		seed := uint32(99)
		conv := lcgTokens(&seed, system, vocab)
		var ttft time.Duration
		cached := 0
		start := time.Now()
		for range turns {
			conv = append(conv, lcgTokens(&seed, user, vocab)...)
			out, u, err := firstToken(b, conv, reply)
			if err != nil {
				b.Close()
				return err
			}
			ttft += u.TimeToFirstToken
			cached += u.CachedTokens
			conv = append(conv, out...)
			replies[k] = append(replies[k], out)
		}
		total := time.Since(start)
		b.Close()
		if noCache {
			res.TTFTOffMs, res.TotalOffS = ms(ttft)/float64(turns), total.Seconds()
		} else {
			res.TTFTOnMs, res.TotalOnS, res.CachedOn = ms(ttft)/float64(turns), total.Seconds(), cached
			res.FinalLen = len(conv)
		}
	}
	res.SameReplies = fmt.Sprint(replies[0]) == fmt.Sprint(replies[1])
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s: threads %d, %d turns (system %d, user %d, reply %d tokens; final context %d)\n  cache on:  mean ttft %.1f ms, total %.2f s, %d prompt tokens from the cache\n  cache off: mean ttft %.1f ms, total %.2f s\n  same replies: %v\n",
		res.Model, threads, turns, system, user, reply, res.FinalLen, res.TTFTOnMs, res.TotalOnS, res.CachedOn, res.TTFTOffMs, res.TotalOffS, res.SameReplies)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// modelKV is the KV geometry of a model file.
func modelKV(path string) (kvcache.Config, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return kvcache.Config{}, err
	}
	defer f.Close()
	c, err := model.ReadConfig(f)
	if err != nil {
		return kvcache.Config{}, err
	}
	return kvcache.Config{Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim}, nil
}
