package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/worker"
)

// benchEngine measures the Block API of an engine mode (`lmlite bench --engine
// inprocess|workers`): the time to first token of a short prompt (one token out)
// and the aggregate generation speed of parallel requests, each the median of reps.
// Comparing the two modes measures the worker hop (the socket, the frames, the
// parent's forwarding), the rest of the path being the same code.
func benchEngine(stdout io.Writer, path, mode string, parallel, nGen, reps int, asJSON bool) error {
	mc := engine.ModelConfig{ID: "m", Path: path, MaxModelLen: 64 + nGen, MaxModelConcurrency: parallel, IdleTimeout: -1}
	type eng interface {
		Generate(ctx context.Context, modelID string, req engine.Request) (*engine.Stream, error)
		Tokenize(modelID, text string) ([]int32, error)
		Models() []engine.ModelStatus
		Close() error
	}
	var e eng
	workerPID := func() int { return 0 }
	switch mode {
	case "inprocess":
		b, err := engine.New(engine.Config{Models: []engine.ModelConfig{mc}, Logger: quietLogger()})
		if err != nil {
			return err
		}
		if err := b.Load(context.Background(), "m"); err != nil {
			b.Close()
			return err
		}
		e = b
	case "workers":
		p, err := worker.New(worker.Config{Models: []engine.ModelConfig{mc}, OpenPrep: openPrep, Logger: quietLogger()})
		if err != nil {
			return err
		}
		if err := p.Load(context.Background(), "m"); err != nil {
			p.Close()
			return err
		}
		e = p
		workerPID = func() int {
			for _, w := range p.Workers() {
				return w.PID
			}
			return 0
		}
	default:
		return fmt.Errorf("--engine %q is not inprocess or workers", mode)
	}
	defer e.Close()
	prompt, err := e.Tokenize("m", "Once upon a time, there was a little")
	if err != nil {
		return err
	}
	// one request: its time to first token, its tokens and its end.
	one := func(seed uint64, maxTokens int) (time.Duration, int, error) {
		start := time.Now()
		s, err := e.Generate(context.Background(), "m", engine.Request{Prompt: prompt, MaxTokens: maxTokens,
			Sampling: engine.Sampling{Temperature: 1, Seed: seed}})
		if err != nil {
			return 0, 0, err
		}
		var ttft time.Duration
		n := 0
		for range s.Tokens {
			if n == 0 {
				ttft = time.Since(start)
			}
			n++
		}
		_, err = s.Wait(context.Background())
		return ttft, n, err
	}
	if _, _, err := one(0, 4); err != nil { // warm-up
		return err
	}
	ttfts := make([]float64, 0, 4*reps)
	for i := range 4 * reps {
		d, _, err := one(uint64(i), 1)
		if err != nil {
			return err
		}
		ttfts = append(ttfts, float64(d.Microseconds())/1000)
	}
	steps := func() uint64 {
		var n uint64
		for _, st := range e.Models() {
			n += st.Steps
		}
		return n
	}
	steps0, self0, worker0 := steps(), readProcCounts(os.Getpid()), readProcCounts(workerPID())
	tgs := make([]float64, reps)
	var tgWall time.Duration
	for r := range reps {
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		var firstErr error
		start := time.Now()
		for i := range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, n, err := one(uint64(r*parallel+i+1), nGen)
				mu.Lock()
				total += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		tgWall += time.Since(start)
		tgs[r] = float64(total) / time.Since(start).Seconds()
	}
	// The tg runs' counters: the steps and, per step, each process's context switches
	// and system calls (the worker's are zero in process).
	nSteps := steps() - steps0
	self, wk := readProcCounts(os.Getpid()).sub(self0), readProcCounts(workerPID()).sub(worker0)
	perStep := func(c procCounts) map[string]float64 {
		d := float64(max(nSteps, 1))
		return map[string]float64{"vcsw": float64(c.Voluntary) / d, "ivcsw": float64(c.Involuntary) / d,
			"reads": float64(c.Reads) / d, "writes": float64(c.Writes) / d, "cpu_ms": float64(c.CPU) * 10 / d}
	}
	slices.Sort(ttfts)
	slices.Sort(tgs)
	res := map[string]any{"engine": mode, "model": path, "parallel": parallel, "gen": nGen, "reps": reps,
		"ttft_ms": ttfts[len(ttfts)/2], "tg_tok_s": tgs[len(tgs)/2], "tg_steps": nSteps,
		"step_ms":         tgWall.Seconds() * 1000 / float64(max(nSteps, 1)),
		"per_step_parent": perStep(self), "per_step_worker": perStep(wk)}
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "engine %s: ttft %.3f ms (short prompt, median of %d), tg %.1f tok/s (%d parallel × %d tokens, median of %d)\n",
		mode, res["ttft_ms"], len(ttfts), res["tg_tok_s"], parallel, nGen, reps)
	return nil
}
