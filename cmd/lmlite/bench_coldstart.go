package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// coldResult is one line of `lmlite bench --cold-start`.
type coldResult struct {
	Model      string        `json:"model"`
	Threads    int           `json:"threads"`
	Prompt     int           `json:"prompt"`
	Reps       int           `json:"reps"`
	WarmMs     float64       `json:"first_token_warm_ms"`     // median, model loaded
	ColdMs     float64       `json:"first_token_unloaded_ms"` // median, right after an idle unload
	ComebackMs float64       `json:"comeback_ms"`             // cold - warm
	LoadMs     float64       `json:"load_ms"`                 // median of the engine's own load time (ModelStatus.ColdStart)
	FileMiB    float64       `json:"file_mib"`
	DropCache  bool          `json:"drop_cache,omitempty"` // the file was dropped from the page cache before each comeback
	Warm       coldBreakdown `json:"warm"`
	Cold       coldBreakdown `json:"unloaded"`
}

// benchColdStart measures the time from Generate to the first token of a short
// prompt with the model loaded (warm) and right after an unload (cold: the model was
// scaled to zero and comes back on this request), alternating ABAB for reps pairs,
// and reports the medians. The file is read once first, so the page cache holds it:
// this is the comeback's own cost, not the disk's (unless dropCache).
//
// With dropCache the file is dropped from the page cache after each unload, so that
// the comeback reads the weights from the disk: the cold-page-cache time, disk-bound.
func benchColdStart(stdout io.Writer, path string, threads, prompt, reps int, dropCache, asJSON bool) error {
	phases := newPhaseLog(quietLogger().Handler())
	b, err := engine.New(engine.Config{Logger: slog.New(phases), Models: []engine.ModelConfig{{
		ID: "m", Path: path, IdleTimeout: -1, DisablePrefixCache: true,
	}}})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Load(context.Background(), "m"); err != nil {
		return err
	}
	tok, err := b.Tokenizer("m")
	if err != nil {
		return err
	}
	seed := uint32(99)
	first := func() (coldSample, error) {
		p := lcgTokens(&seed, prompt, tok.VocabSize())
		r0 := getRusage()
		start := time.Now()
		s, err := b.Generate(context.Background(), "m", engine.Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			return coldSample{}, err
		}
		var d time.Duration
		for t := range s.Tokens {
			if d == 0 && t.ID >= 0 {
				d = time.Since(start)
			}
		}
		u, err := s.Wait(context.Background())
		return coldSample{ttft: d, u: u, ru: getRusage().sub(r0)}, err
	}
	if _, err := first(); err != nil { // a first request: the kernels' and the pages' first touch
		return err
	}
	var warm, cold []coldSample
	for range reps {
		w, err := first()
		if err != nil {
			return err
		}
		warm = append(warm, w)
		if err := b.Unload("m"); err != nil {
			return err
		}
		if dropCache {
			if err := dropFromPageCache(path); err != nil {
				return err
			}
		}
		c, err := first()
		if err != nil {
			return err
		}
		c.load = b.Models()[0].ColdStart
		c.phases = phases.last()
		cold = append(cold, c)
	}
	st := b.Models()[0]
	res := coldResult{Model: filepath.Base(path), Threads: threads, Prompt: prompt, Reps: reps,
		DropCache: dropCache,
		WarmMs:    medianOf(warm, func(s coldSample) float64 { return ms(s.ttft) }),
		ColdMs:    medianOf(cold, func(s coldSample) float64 { return ms(s.ttft) }),
		LoadMs:    medianOf(cold, func(s coldSample) float64 { return ms(s.load) })}
	res.ComebackMs = res.ColdMs - res.WarmMs
	res.Warm, res.Cold = breakdown(warm), breakdown(cold)
	if st.Loads < uint64(reps+1) {
		return fmt.Errorf("the model loaded %d times for %d unloads", st.Loads, reps)
	}
	if fi, err := os.Stat(path); err == nil {
		res.FileMiB = float64(fi.Size()) / (1 << 20)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s (%.0f MiB), %d threads, %d-token prompt, %d ABAB pairs (medians)\n", res.Model, res.FileMiB, threads, prompt, reps)
	if dropCache {
		fmt.Fprintf(stdout, "the file was dropped from the page cache before each comeback: it is read from the disk\n")
	}
	fmt.Fprintf(stdout, "first token, warm:                 %8.1f ms\n", res.WarmMs)
	fmt.Fprintf(stdout, "first token, after an idle unload: %8.1f ms (load %.1f ms)\n", res.ColdMs, res.LoadMs)
	fmt.Fprintf(stdout, "comeback:                          %8.1f ms\n", res.ComebackMs)
	fmt.Fprintf(stdout, "where the time went (medians):     %10s %10s\n", "warm", "unloaded")
	row := func(name, unit string, w, c float64) {
		fmt.Fprintf(stdout, "  %-32s %10.1f %10.1f %s\n", name, w, c, unit)
	}
	row("waiting for the load", "ms", res.Warm.AwaitMs, res.Cold.AwaitMs)
	for _, k := range res.Cold.PhaseKeys {
		row("  load phase "+k, "ms", 0, res.Cold.Phases[k])
	}
	row("queue (incl. the load)", "ms", res.Warm.QueueMs, res.Cold.QueueMs)
	row("first forward pass", "ms", res.Warm.ForwardMs, res.Cold.ForwardMs)
	row("CPU user", "ms", res.Warm.UserMs, res.Cold.UserMs)
	row("CPU system", "ms", res.Warm.SysMs, res.Cold.SysMs)
	row("minor page faults", "k", res.Warm.MinFltK, res.Cold.MinFltK)
	row("major page faults", "", res.Warm.MajFlt, res.Cold.MajFlt)
	return nil
}

// coldPrefixResult is one line of `lmlite bench --cold-start --cold-prefix N`.
type coldPrefixResult struct {
	Model        string  `json:"model"`
	Threads      int     `json:"threads"`
	Prefix       int     `json:"prefix"`
	Suffix       int     `json:"suffix"`
	Reps         int     `json:"reps"`
	HotMs        float64 `json:"ttft_hot_ms"`       // median: the prefix cached in the loaded model
	AfterZeroMs  float64 `json:"ttft_from_zero_ms"` // median: the model unloaded, the prefix replayed from kv_warm_file
	Ratio        float64 `json:"ratio"`             // from zero / hot
	CachedTokens int     `json:"cached_tokens_from_zero"`
}

// benchColdPrefix measures the time to first token of a prompt whose long prefix is
// cached, with the model loaded (hot) and right after an unload with the warm tier in
// a file (kv_warm_file in a temporary directory): the unload writes the cached blocks
// to the file, the reload replays them. ABAB, reps pairs, medians.
func benchColdPrefix(stdout io.Writer, path string, threads, prefix, suffix, reps int, asJSON bool) error {
	dir, err := os.MkdirTemp("", "lmlite-bench-warm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	maxLen := prefix + suffix + 16
	b, err := engine.New(engine.Config{Logger: quietLogger(), Models: []engine.ModelConfig{{
		ID: "m", Path: path, MaxModelLen: maxLen, MaxModelConcurrency: 1, IdleTimeout: -1,
		KVWarmBytes: warmBytesFor(path, maxLen), KVWarmFile: filepath.Join(dir, "warm.kv"),
	}}})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Load(context.Background(), "m"); err != nil {
		return err
	}
	tok, err := b.Tokenizer("m")
	if err != nil {
		return err
	}
	seed := uint32(7)
	pre := lcgTokens(&seed, prefix, tok.VocabSize())
	run := func() (engine.Usage, error) {
		_, u, err := firstToken(b, append(append([]int32(nil), pre...), lcgTokens(&seed, suffix, tok.VocabSize())...), 1)
		return u, err
	}
	if _, err := run(); err != nil { // caches the prefix
		return err
	}
	res := coldPrefixResult{Model: filepath.Base(path), Threads: threads, Prefix: prefix, Suffix: suffix, Reps: reps}
	var hot, zero []float64
	for range reps {
		u, err := run()
		if err != nil {
			return err
		}
		if u.CachedTokens < prefix/16*16 {
			return fmt.Errorf("hot run: %d cached tokens of a %d-token prefix", u.CachedTokens, prefix)
		}
		hot = append(hot, ms(u.TimeToFirstToken))
		if err := b.Unload("m"); err != nil {
			return err
		}
		if u, err = run(); err != nil {
			return err
		}
		if u.CachedTokens < prefix/16*16 || u.ColdStart == 0 {
			return fmt.Errorf("after an unload: %d cached tokens of a %d-token prefix, cold start %v", u.CachedTokens, prefix, u.ColdStart)
		}
		// TimeToFirstToken counts from Generate: the load it waited for, then its prefill.
		zero, res.CachedTokens = append(zero, ms(u.TimeToFirstToken)), u.CachedTokens
	}
	res.HotMs, res.AfterZeroMs = median(hot), median(zero)
	res.Ratio = res.AfterZeroMs / res.HotMs
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s, %d threads, %d-token cached prefix + %d new, %d ABAB pairs (medians)\n", res.Model, threads, prefix, suffix, reps)
	fmt.Fprintf(stdout, "time to first token, prefix hot:              %8.1f ms\n", res.HotMs)
	fmt.Fprintf(stdout, "time to first token, from zero (kv_warm_file): %8.1f ms (%d tokens replayed)\n", res.AfterZeroMs, res.CachedTokens)
	fmt.Fprintf(stdout, "ratio: %.2f×\n", res.Ratio)
	return nil
}
