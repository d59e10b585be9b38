package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// coldResult is one line of `lmlite bench --cold-start`.
type coldResult struct {
	Model      string  `json:"model"`
	Threads    int     `json:"threads"`
	Prompt     int     `json:"prompt"`
	Reps       int     `json:"reps"`
	WarmMs     float64 `json:"first_token_warm_ms"`     // median, model loaded
	ColdMs     float64 `json:"first_token_unloaded_ms"` // median, right after an idle unload
	ComebackMs float64 `json:"comeback_ms"`             // cold - warm
	LoadMs     float64 `json:"load_ms"`                 // median of the engine's own load time (ModelStatus.ColdStart)
	FileMiB    float64 `json:"file_mib"`
}

// benchColdStart measures the time from Generate to the first token of a short
// prompt with the model loaded (warm) and right after an unload (cold: the model was
// scaled to zero and comes back on this request), alternating ABAB for reps pairs,
// and reports the medians. The file is read once first, so the page cache holds it:
// this is the comeback's own cost, not the disk's.
func benchColdStart(stdout io.Writer, path string, threads, prompt, reps int, asJSON bool) error {
	b, err := engine.New(engine.Config{Logger: quietLogger(), Models: []engine.ModelConfig{{
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
	first := func() (time.Duration, error) {
		p := lcgTokens(&seed, prompt, tok.VocabSize())
		start := time.Now()
		s, err := b.Generate(context.Background(), "m", engine.Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			return 0, err
		}
		var d time.Duration
		for t := range s.Tokens {
			if d == 0 && t.ID >= 0 {
				d = time.Since(start)
			}
		}
		_, err = s.Wait(context.Background())
		return d, err
	}
	if _, err := first(); err != nil { // a first request: the kernels' and the pages' first touch
		return err
	}
	var warm, cold, load []float64
	for range reps {
		d, err := first()
		if err != nil {
			return err
		}
		warm = append(warm, ms(d))
		if err := b.Unload("m"); err != nil {
			return err
		}
		if d, err = first(); err != nil {
			return err
		}
		cold = append(cold, ms(d))
		load = append(load, ms(b.Models()[0].ColdStart))
	}
	st := b.Models()[0]
	res := coldResult{Model: filepath.Base(path), Threads: threads, Prompt: prompt, Reps: reps,
		WarmMs: median(warm), ColdMs: median(cold), LoadMs: median(load)}
	res.ComebackMs = res.ColdMs - res.WarmMs
	if st.Loads < uint64(reps+1) {
		return fmt.Errorf("the model loaded %d times for %d unloads", st.Loads, reps)
	}
	if fi, err := os.Stat(path); err == nil {
		res.FileMiB = float64(fi.Size()) / (1 << 20)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s, %d threads, %d-token prompt, %d ABAB pairs (medians)\n", res.Model, threads, prompt, reps)
	fmt.Fprintf(stdout, "first token, warm:                 %8.1f ms\n", res.WarmMs)
	fmt.Fprintf(stdout, "first token, after an idle unload: %8.1f ms (load %.1f ms)\n", res.ColdMs, res.LoadMs)
	fmt.Fprintf(stdout, "comeback:                          %8.1f ms\n", res.ComebackMs)
	return nil
}
