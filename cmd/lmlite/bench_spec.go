package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/spec"
)

// specPassage is the text of the repetitive task: the prompt gives it whole, then
// starts it again, and the model (one that predicts text) copies it on.
const specPassage = "Once upon a time, there was a little girl named Lily. She liked to play with her red ball in the park. " +
	"One day, her ball rolled away and she could not find it. She was sad. Her friend Tom came and helped her look for it. " +
	"They found the ball under a big tree. Lily was happy and said thank you to Tom. They played together all day."

// benchSpec measures speculative decoding (`lmlite bench --spec ngram`): one
// request at a time, decoded plainly and with prompt-lookup drafts on the same
// Block (Request.NoSpeculation), ABAB for reps pairs, on two tasks: "repeat", greedy
// decoding of a prompt that gives a passage and starts it again (output that repeats
// its context: a random-weight model's greedy cycles do too), and "free", seeded
// sampling at temperature 1 (output that rarely repeats). It prints each task's
// median decoding tokens/s both ways (after the first token), the median of the pairs' ratios and the share of drafts
// accepted, and checks that both ways gave the same tokens. On a shared machine the
// wall-clock ratio measures the other jobs as much as the step; the ratio of the
// process's CPU time per token (plain over speculative: above 1, speculation costs
// less per token) measures the work.
//
// With source "prediction" (`lmlite bench --spec prediction`) the model does not
// speculate from its own text (ngram off) and the speculative side gives each request
// a prediction (Request.Prediction, OpenAI's Predicted Outputs) on three tasks, all
// greedy from a story's opening: "own", the model's own plain output for the request
// (as text: what a client would send back); "half", that text with every other run
// of 6 words reversed and upper-cased; "unrelated", code and SQL that the output
// never follows.
//
// With parallel > 1 each side runs parallel copies of the request at once (one
// batch), and the figures are the aggregate: all their tokens over the time from
// the submissions to the last token (prefill included, the same both ways), every
// copy's output checked against plain decoding's.
func benchSpec(stdout io.Writer, path, source string, nGen, reps, maxDraft, parallel int, asJSON bool) error {
	if source != "ngram" && source != "prediction" {
		return fmt.Errorf("--spec %q: the draft source to measure is ngram (prompt lookup) or prediction (Predicted Outputs)", source)
	}
	sc := spec.Config{NGram: source == "ngram", MaxDraft: maxDraft, Measure: true} // as a file without draft_cost
	mc := engine.ModelConfig{ID: "m", Path: path, MaxModelConcurrency: parallel, IdleTimeout: -1,
		DisablePrefixCache: true, Speculative: sc}
	b, err := engine.New(engine.Config{Models: []engine.ModelConfig{mc}, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Load(context.Background(), "m"); err != nil {
		return err
	}
	text := specPassage + "\n\n" + specPassage[:strings.Index(specPassage, ".")+1]
	if source == "prediction" {
		text = specPassage[:strings.Index(specPassage, ".")+1]
	}
	prompt, err := b.Tokenize("m", text)
	if err != nil {
		return err
	}
	if len(prompt) > 512 {
		prompt = prompt[:512]
	}
	type run struct {
		tokS     float64
		cpuMS    float64 // the process's CPU time per token after the first, ms
		steps    uint64  // batch steps the request took, prefill included
		ids      []int32
		text     strings.Builder
		drafted  int
		accepted int
	}
	var one func(req engine.Request) (*run, error)
	one = func(req engine.Request) (*run, error) {
		steps0 := b.Models()[0].Steps
		s, err := b.Generate(context.Background(), "m", req)
		if err != nil {
			return nil, err
		}
		r := &run{}
		var first time.Time
		var cpu0 procCounts
		for t := range s.Tokens {
			if t.ID >= 0 {
				if len(r.ids) == 0 {
					first, cpu0 = time.Now(), readProcCounts(os.Getpid())
				}
				r.ids = append(r.ids, t.ID)
			}
			r.text.WriteString(t.Text)
		}
		u, err := s.Wait(context.Background())
		// Decoding speed: the tokens after the first over the time since the first
		// (the prompt's prefill, the same both ways, is left out).
		r.tokS = float64(len(r.ids)-1) / time.Since(first).Seconds()
		r.cpuMS = float64(readProcCounts(os.Getpid()).sub(cpu0).CPU) * 10 / float64(max(len(r.ids)-1, 1))
		r.drafted, r.accepted = u.DraftTokens, u.AcceptedTokens
		r.steps = b.Models()[0].Steps - steps0
		return r, err
	}
	if parallel > 1 {
		single := one
		one = func(req engine.Request) (*run, error) {
			steps0, cpu0, t0 := b.Models()[0].Steps, readProcCounts(os.Getpid()), time.Now()
			runs := make([]*run, parallel)
			errs := make([]error, parallel)
			var wg sync.WaitGroup
			for i := range parallel {
				wg.Go(func() { runs[i], errs[i] = single(req) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return nil, err
			}
			r := runs[0]
			n := 0
			for _, x := range runs {
				if !slices.Equal(x.ids, r.ids) {
					return nil, fmt.Errorf("%d parallel copies of one request gave different outputs", parallel)
				}
				n += len(x.ids)
			}
			r.tokS = float64(n) / time.Since(t0).Seconds()
			r.cpuMS = float64(readProcCounts(os.Getpid()).sub(cpu0).CPU) * 10 / float64(max(n, 1))
			r.steps = b.Models()[0].Steps - steps0
			for _, x := range runs[1:] {
				r.drafted, r.accepted = r.drafted+x.drafted, r.accepted+x.accepted
			}
			return r, nil
		}
	}
	type task struct {
		name string
		smp  engine.Sampling
		pred func(own string) string // the prediction, from the plain output's text
	}
	tasks := []task{
		{"repeat", engine.Sampling{IgnoreEOS: true}, nil},
		{"free", engine.Sampling{Temperature: 1, Seed: 7, IgnoreEOS: true}, nil},
	}
	if source == "prediction" {
		tasks = []task{
			{"own", engine.Sampling{IgnoreEOS: true}, func(own string) string { return own }},
			{"half", engine.Sampling{IgnoreEOS: true}, perturbHalf},
			{"unrelated", engine.Sampling{IgnoreEOS: true}, func(string) string { return unrelatedPrediction }},
		}
	}
	var results []map[string]any
	for _, task := range tasks {
		req := engine.Request{Prompt: prompt, MaxTokens: nGen, Sampling: task.smp}
		plainReq := req
		plainReq.NoSpeculation = true
		warm, err := one(plainReq) // warm-up
		if err != nil {
			return err
		}
		if task.pred != nil {
			req.Prediction = task.pred(warm.text.String())
		}
		var plain, sp, ratios, cpuRatios []float64
		drafted, accepted := 0, 0
		var plainSteps, specSteps uint64
		for range reps {
			a, err := one(plainReq)
			if err != nil {
				return err
			}
			c, err := one(req)
			if err != nil {
				return err
			}
			if !slices.Equal(a.ids, c.ids) {
				return fmt.Errorf("task %s: speculative decoding changed the output (%d tokens plain, %d speculating)", task.name, len(a.ids), len(c.ids))
			}
			plain, sp, ratios = append(plain, a.tokS), append(sp, c.tokS), append(ratios, c.tokS/a.tokS)
			if c.cpuMS > 0 {
				cpuRatios = append(cpuRatios, a.cpuMS/c.cpuMS)
			}
			drafted, accepted = drafted+c.drafted, accepted+c.accepted
			plainSteps, specSteps = plainSteps+a.steps, specSteps+c.steps
		}
		med := func(x []float64) float64 {
			if len(x) == 0 {
				return 0
			}
			x = slices.Clone(x)
			slices.Sort(x)
			return x[len(x)/2]
		}
		res := map[string]any{"source": source, "task": task.name, "model": path, "gen": nGen, "pairs": reps, "parallel": parallel, "max_draft": spec.Config{MaxDraft: maxDraft}.Max(),
			"plain_tok_s": med(plain), "spec_tok_s": med(sp), "ratio": med(ratios), "ratios": ratios,
			"plain_steps": plainSteps, "spec_steps": specSteps, "cpu_ratio": med(cpuRatios), "cpu_ratios": cpuRatios, "drafted": drafted, "accepted": accepted}
		results = append(results, res)
		if !asJSON {
			acc := 0.0
			if drafted > 0 {
				acc = float64(accepted) / float64(drafted)
			}
			if parallel > 1 {
				fmt.Fprintf(stdout, "%d parallel, aggregate: ", parallel)
			}
			fmt.Fprintf(stdout, "spec %s, %s: plain %.1f tok/s, speculative %.1f tok/s, ratio %.2f (median of %d ABAB pairs: %s); CPU time per token plain/speculative %.2f (%s); drafts accepted %d/%d (%.0f%%), steps %d plain, %d speculative; same output\n",
				source, task.name, med(plain), med(sp), med(ratios), reps, fmtRatios(ratios), med(cpuRatios), fmtRatios(cpuRatios), accepted, drafted, 100*acc, plainSteps, specSteps)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(results)
	}
	return nil
}

func fmtRatios(x []float64) string {
	s := make([]string, len(x))
	for i, r := range x {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, " ")
}

// perturbHalf rewrites every other run of 6 words of text (reversed and
// upper-cased): half of it as the model wrote it, half not.
func perturbHalf(text string) string {
	w := strings.Fields(text)
	for i := 6; i < len(w); i += 12 {
		run := w[i:min(i+6, len(w))]
		slices.Reverse(run)
		for k := range run {
			run[k] = strings.ToUpper(run[k])
		}
	}
	return strings.Join(w, " ")
}

// unrelatedPrediction is a prediction no story follows.
const unrelatedPrediction = `func main() { for i := 0; i < 10; i++ { fmt.Println("row", i, strings.Repeat("#", i)) } }
SELECT id, name FROM users WHERE created_at > now() - interval '1 day' ORDER BY id;`
