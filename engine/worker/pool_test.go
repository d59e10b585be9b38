package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/spec"
)

// generator is the Block API's Generate, in process or from workers.
type generator interface {
	Generate(ctx context.Context, modelID string, req engine.Request) (*engine.Stream, error)
}

type result struct {
	ids    []int32
	logits []uint32
	text   string
	u      engine.Usage
	err    error
}

func run(g generator, model string, req engine.Request) result {
	s, err := g.Generate(context.Background(), model, req)
	if err != nil {
		return result{err: err}
	}
	var r result
	for tok := range s.Tokens {
		if tok.ID >= 0 {
			r.ids = append(r.ids, tok.ID)
			r.logits = append(r.logits, math.Float32bits(tok.Logit))
		}
		r.text += tok.Text
	}
	r.u, r.err = s.Wait(context.Background())
	return r
}

func (r result) same(o result) error {
	if r.err != nil || o.err != nil {
		return fmt.Errorf("errors %v, %v", r.err, o.err)
	}
	if len(r.ids) != len(o.ids) || r.text != o.text {
		return fmt.Errorf("%d tokens %q, want %d %q", len(o.ids), o.text, len(r.ids), r.text)
	}
	for i := range r.ids {
		if r.ids[i] != o.ids[i] || r.logits[i] != o.logits[i] {
			return fmt.Errorf("token %d: id %d logit %#x, want id %d logit %#x", i, o.ids[i], o.logits[i], r.ids[i], r.logits[i])
		}
	}
	return nil
}

// TestWorkersSameBitsAsInProcess: a seeded request gives the same tokens, text and
// logits' bits from a worker process as from the in-process Block, alone and among
// concurrent requests, and the parent's Tokenize and ChatTokens are the Block's.
func TestWorkersSameBitsAsInProcess(t *testing.T) {
	mc := engine.ModelConfig{ID: "m", Path: qwenModel(t), MaxModelLen: 512, MaxModelConcurrency: 8}
	b, err := engine.New(engine.Config{Models: []engine.ModelConfig{mc}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, Config{Models: []engine.ModelConfig{mc}, Command: testCommand()})

	msgs := []engine.Message{{Role: "user", Content: "Tell me a story <|im_end|> about a cat."}}
	want, err := b.ChatTokens("m", msgs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.ChatTokens("m", msgs)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ChatTokens: %v %v, want %v", got, err, want)
	}
	tw, _ := b.Tokenize("m", "Once upon a time")
	tg, _ := p.Tokenize("m", "Once upon a time")
	if fmt.Sprint(tw) != fmt.Sprint(tg) {
		t.Fatalf("Tokenize: %v, want %v", tg, tw)
	}

	req := engine.Request{Prompt: want, MaxTokens: 40,
		Sampling: engine.Sampling{Temperature: 0.9, TopP: 0.95, RepeatPenalty: 1.1, Seed: 1234}}
	inproc := run(b, "m", req)
	if inproc.err != nil || len(inproc.ids) == 0 {
		t.Fatalf("in process: %d tokens, %v", len(inproc.ids), inproc.err)
	}
	if err := inproc.same(run(p, "m", req)); err != nil {
		t.Fatalf("worker alone: %v", err)
	}
	// A constrained request with logprobs and the prompt's: the grammar crosses in
	// its compiled form, the tokens' logprobs and top lists come back whole, the
	// prompt's tokens first (the first without a logprob) marked as such.
	schema := []byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":12},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false}`)
	gb, err := b.CompileSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	gp, err := p.CompileSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	creq := engine.Request{Prompt: want, MaxTokens: 60, Logprobs: true, TopLogprobs: 3, PromptLogprobs: true, Sampling: engine.Sampling{Temperature: 0.7, Seed: 99}}
	cb, cp := creq, creq
	cb.Grammar, cp.Grammar = gb, gp
	full := func(g generator, req engine.Request) (string, string) {
		s, err := g.Generate(context.Background(), "m", req)
		if err != nil {
			t.Fatal(err)
		}
		var toks []engine.Token
		text := ""
		for tok := range s.Tokens {
			toks = append(toks, tok)
			text += tok.Text
		}
		if _, err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%#v", toks), text
	}
	tb, textB := full(b, cb)
	tp, textP := full(p, cp)
	if tb != tp || !strings.Contains(textB, "{") || !strings.Contains(tb, "TopLogprobs:[]api.TopLogprob{api.TopLogprob{") ||
		strings.Count(tb, "Prompt:true") != len(want) {
		t.Fatalf("constrained with logprobs: worker %s\nin process %s\n(texts %q %q)", tp, tb, textP, textB)
	}

	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			if i%2 == 1 {
				r = engine.Request{Prompt: want[:1+i], MaxTokens: 10 + i, Sampling: engine.Sampling{Temperature: 0.5, Seed: uint64(i)}}
			}
			res := run(p, "m", r)
			if i%2 == 0 {
				if err := inproc.same(res); err != nil {
					t.Errorf("worker, concurrent request %d: %v", i, err)
				}
			} else if res.err != nil || res.u.CompletionTokens == 0 {
				t.Errorf("other request %d: %v %+v", i, res.err, res.u)
			}
		}()
	}
	wg.Wait()
}

// TestWorkerErrorsMatchInProcess: the errors a request meets in the worker mode are
// the in-process ones (errors.Is): an unknown model, a request over the limit.
func TestWorkerErrorsMatchInProcess(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "m", Path: llamaModel(t), MaxModelLen: 64}}, Command: testCommand()})
	if _, err := p.Generate(context.Background(), "nope", engine.Request{Prompt: []int32{1}}); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := p.Generate(context.Background(), "m", engine.Request{Prompt: []int32{1}, MaxTokens: 100}); !errors.Is(err, engine.ErrTooLong) {
		t.Errorf("too long: %v", err)
	}
	if _, err := p.Generate(context.Background(), "m", engine.Request{}); err == nil {
		t.Errorf("empty prompt: no error")
	}
}

// TestCancelStopsRequestInWorker: cancelling a request's context ends its stream as
// cancelled (no error), and the worker keeps serving.
func TestCancelStopsRequestInWorker(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "m", Path: llamaModel(t), MaxModelLen: 1024}},
		Command: testCommand(envSlow + "=5ms")})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := p.Generate(ctx, "m", engine.Request{Prompt: []int32{1}, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	takeTokens(s, 1)
	cancel()
	for range s.Tokens {
	}
	u, err := s.Wait(context.Background())
	if err != nil || u.FinishReason != engine.FinishCancelled || u.CompletionTokens >= 1000 {
		t.Fatalf("cancelled stream: %+v %v", u, err)
	}
	if r := run(p, "m", engine.Request{Prompt: []int32{1}, MaxTokens: 3}); r.err != nil || len(r.ids) != 3 {
		t.Fatalf("after cancel: %d tokens, %v", len(r.ids), r.err)
	}
}

// TestKill9WorkerMidStream: a worker killed with SIGKILL mid-stream ends the stream
// with engine.ErrRestarting and marks its model not ready at once; the other model
// (another worker) keeps serving meanwhile; the worker is back and ready within its
// first start's time + 1 s.
func TestKill9WorkerMidStream(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{
		{ID: "a", Path: llamaModel(t), MaxModelLen: 1024},
		{ID: "b", Path: qwenModel(t), MaxModelLen: 256},
	}, Command: testCommand(envSlow + "=3ms")})
	first := state(p, "a").ColdStart // spawn to hello + the model's load
	pid := workerPID(t, p, "a")
	s, err := p.Generate(context.Background(), "a", engine.Request{Prompt: []int32{1}, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	takeTokens(s, 3)
	syscall.Kill(pid, syscall.SIGKILL)
	killed := time.Now()
	n := 3
	for range s.Tokens {
		n++
	}
	_, err = s.Wait(context.Background())
	if !errors.Is(err, engine.ErrRestarting) {
		t.Fatalf("stream of the killed worker ended with %v after %d tokens, want ErrRestarting", err, n)
	}
	if st := state(p, "a"); st.State == engine.StateReady || p.Ready() {
		t.Fatalf("model a is %s (ready %v) after its worker died", st.State, p.Ready())
	}
	if r := run(p, "b", engine.Request{Prompt: []int32{1}, MaxTokens: 8}); r.err != nil || len(r.ids) != 8 {
		t.Fatalf("model b while a restarts: %d tokens, %v", len(r.ids), r.err)
	}
	waitFor(t, 20*time.Second, "a ready again", func() bool { return state(p, "a").State == engine.StateReady })
	back := time.Since(killed)
	t.Logf("first start %s, back after %s", first, back)
	if back > first+time.Second {
		t.Errorf("a was back after %s, more than its first start %s + 1s", back, first)
	}
	if w := p.Workers()[0]; w.Crashes != 1 || w.PID == pid || !strings.Contains(w.LastExit, "killed") {
		t.Errorf("worker after the crash: %+v", w)
	}
	if r := run(p, "a", engine.Request{Prompt: []int32{1}, MaxTokens: 4}); r.err != nil || len(r.ids) != 4 {
		t.Fatalf("a after its restart: %d tokens, %v", len(r.ids), r.err)
	}
}

// TestSIGSTOPWorkerNotReadyWithin1s: a hung worker (stopped: no heartbeat) is marked
// not ready within 1 s, is killed (KillAfter, 5 s), and comes back.
func TestSIGSTOPWorkerNotReadyWithin1s(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}}, Command: testCommand()})
	pid := workerPID(t, p, "a")
	syscall.Kill(pid, syscall.SIGSTOP)
	d := waitFor(t, 3*time.Second, "a not ready", func() bool { return state(p, "a").State != engine.StateReady && !p.Ready() })
	t.Logf("not ready %s after SIGSTOP", d)
	if d > time.Second {
		t.Errorf("a was marked not ready %s after SIGSTOP, want ≤ 1s", d)
	}
	waitFor(t, 20*time.Second, "a ready again", func() bool { return state(p, "a").State == engine.StateReady })
	if w := p.Workers()[0]; !strings.Contains(w.LastExit, "hung") || alive(pid) {
		t.Errorf("after the hang: %+v (old pid alive: %v)", w, alive(pid))
	}
}

// TestIdlePoolJanitorSleepsUntilDeadlines: an idle pool's janitor looks at its
// groups when a deadline comes (the next possible hang, HangAfter after the last
// beat), not on a fixed tick: over a second of a beating, idle worker it looks a few
// times, where the tick it replaced (every half of a 100 ms beat) looked 20 times.
// Its looks still catch a hang in time: TestSIGSTOPWorkerNotReadyWithin1s.
func TestIdlePoolJanitorSleepsUntilDeadlines(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}}, Command: testCommand()})
	time.Sleep(200 * time.Millisecond)
	before := p.looks.Load()
	time.Sleep(time.Second)
	n := p.looks.Load() - before
	t.Logf("the janitor looked %d times in 1 s (beat %s, hang after %s)", n, p.cfg.Beat, p.cfg.HangAfter)
	if n > 4 {
		t.Errorf("the janitor of an idle pool looked %d times in 1 s, want ≤ 4", n)
	}
	if n == 0 {
		t.Errorf("the janitor did not look in 1 s: it would miss a hang")
	}
	if !allReady(p) {
		t.Error("the idle model is not ready")
	}
}

// TestCrashAtLoadOpensCircuit: a worker that dies at start 5 times opens the circuit:
// the model is failed with the worker's stderr in its status, requests fail at once
// (not as restarting), and GC resets it.
func TestCrashAtLoadOpensCircuit(t *testing.T) {
	p, err := New(Config{OpenPrep: openEnginePrep, Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}},
		Command: testCommand(envCrashAtLoad + "=1"), Policy: Policy{MinBackoff: 10 * time.Millisecond, MaxCrashes: 5}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitFor(t, 15*time.Second, "a failed", func() bool { return state(p, "a").State == engine.StateFailed })
	st := state(p, "a")
	if !strings.Contains(st.Err, "simulated crash at load") || !strings.Contains(st.Err, "5 times") {
		t.Errorf("failed model's error: %q", st.Err)
	}
	if w := p.Workers()[0]; w.Starts != 5 || w.Crashes != 5 || w.State != "failed" {
		t.Errorf("worker: %+v", w)
	}
	_, err = p.Generate(context.Background(), "a", engine.Request{Prompt: []int32{1}, MaxTokens: 1})
	if fe, ok := errors.AsType[*FailedError](err); !ok || fe.Group != "a" || errors.Is(err, engine.ErrRestarting) || !strings.Contains(err.Error(), "simulated crash") {
		t.Errorf("request to a failed model: %v, want a *FailedError of group a saying why", err)
	}
	p.GC()
	if st := state(p, "a"); st.State != engine.StateUnloaded {
		t.Errorf("after GC: %s", st.State)
	}
}

// TestIdleWorkerExitsAndRestartsOnDemand: an idle worker exits (scale to zero: its
// process is gone and the model unloaded, which counts as ready), and the next
// request starts it again, its cold start in the usage.
func TestIdleWorkerExitsAndRestartsOnDemand(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256, IdleTimeout: 300 * time.Millisecond}},
		Command: testCommand()})
	pid := workerPID(t, p, "a")
	waitFor(t, 5*time.Second, "a unloaded", func() bool { return state(p, "a").State == engine.StateUnloaded })
	waitFor(t, 5*time.Second, "the idle worker gone", func() bool { return !alive(pid) })
	if !p.Ready() || p.Workers()[0].Crashes != 0 {
		t.Fatalf("idle exit: ready %v, %+v", p.Ready(), p.Workers()[0])
	}
	r := run(p, "a", engine.Request{Prompt: []int32{1}, MaxTokens: 4})
	if r.err != nil || len(r.ids) != 4 || r.u.ColdStart <= 0 {
		t.Fatalf("after scale to zero: %d tokens, %v, cold start %s", len(r.ids), r.err, r.u.ColdStart)
	}
	if w := p.Workers()[0]; w.PID == pid || w.Starts != 2 {
		t.Errorf("restarted worker: %+v", w)
	}
}

// TestKeepAliveShortensWorkerIdle: a request's keep_alive shortens its model's idle
// timeout in workers mode as in process: the worker of a model whose idle_timeout is
// an hour exits soon after a request with keep_alive 200 ms, and the next request
// (without one) brings it back for the hour again.
func TestKeepAliveShortensWorkerIdle(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256, IdleTimeout: time.Hour}},
		Command: testCommand()})
	pid := workerPID(t, p, "a")
	if r := run(p, "a", engine.Request{Prompt: []int32{1}, MaxTokens: 2, KeepAlive: 200 * time.Millisecond}); r.err != nil {
		t.Fatal(r.err)
	}
	waitFor(t, 10*time.Second, "the worker gone after keep_alive", func() bool { return !alive(pid) })
	if w := p.Workers()[0]; w.Crashes != 0 || state(p, "a").State != engine.StateUnloaded {
		t.Fatalf("after keep_alive: %+v, %s", w, state(p, "a").State)
	}
	if r := run(p, "a", engine.Request{Prompt: []int32{1}, MaxTokens: 2}); r.err != nil || r.u.ColdStart <= 0 {
		t.Fatalf("after scale to zero: %v, cold start %s", r.err, r.u.ColdStart)
	}
	pid = workerPID(t, p, "a")
	time.Sleep(500 * time.Millisecond) // longer than the last keep_alive: it no longer applies
	if !alive(pid) {
		t.Fatal("the worker exited without a keep_alive: the last request's keep_alive replaces the one before")
	}
}

// TestKillParentLeavesNoWorker: when the parent dies by SIGKILL, its worker is gone
// within 2 s (PDEATHSIG, and the socket's close).
func TestKillParentLeavesNoWorker(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envParent+"="+llamaModel(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 100)
		n, _ := out.Read(b)
		line <- strings.TrimSpace(string(b[:n]))
	}()
	var pid int
	select {
	case l := <-line:
		f := strings.Fields(l)
		if len(f) != 2 || f[0] != "worker" {
			t.Fatalf("parent said %q", l)
		}
		pid, _ = strconv.Atoi(f[1])
	case <-time.After(20 * time.Second):
		t.Fatal("the parent did not report its worker")
	}
	if !alive(pid) {
		t.Fatalf("worker %d is not running", pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	d := waitFor(t, 2*time.Second, "the orphaned worker gone", func() bool { return !alive(pid) })
	t.Logf("worker gone %s after its parent", d)
}

// TestGCKillsStaleWorkers: a new Pool on the same data directory kills the workers
// that an earlier run's pid files name (here a run still alive, as if it had crashed).
func TestGCKillsStaleWorkers(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}}, Command: testCommand(), DataDir: dir,
		Policy: Policy{MinBackoff: time.Hour}} // the old run must not restart it
	old := newPool(t, cfg)
	pid := workerPID(t, old, "a")
	if b, err := os.ReadFile(dir + "/workers/a.pid"); err != nil || !strings.HasPrefix(string(b), strconv.Itoa(pid)+" ") {
		t.Fatalf("pid file: %q %v", b, err)
	}
	newPool(t, cfg)
	waitFor(t, 2*time.Second, "the stale worker gone", func() bool { return !alive(pid) })
}

// TestLoadUnloadThroughWorker: the admin API's unload and load reach the worker's
// Block (the state comes back in its heartbeat), and a load of a failed group
// retries it.
func TestLoadUnloadThroughWorker(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}}, Command: testCommand()})
	if err := p.Unload("a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "a unloaded in its worker", func() bool { return state(p, "a").State == engine.StateUnloaded })
	if w := p.Workers()[0]; w.State != "running" {
		t.Fatalf("the worker after an unload: %+v", w)
	}
	if err := p.Load(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "a ready", func() bool { return state(p, "a").State == engine.StateReady })
	if st := state(p, "a"); st.Loads != 2 || st.Unloads != 1 {
		t.Errorf("counters from the worker: loads %d unloads %d", st.Loads, st.Unloads)
	}
	if err := p.Load(context.Background(), "nope"); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("load of an unknown model: %v", err)
	}
}

// takeTokens reads n tokens of s (fewer if it ends first); a later range over
// s.Tokens goes on after them.
func takeTokens(s *engine.Stream, n int) {
	if n <= 0 {
		return
	}
	for range s.Tokens {
		if n--; n == 0 {
			return
		}
	}
}

// TestWorkersFeaturesSameBitsAsInProcess: the gateway's Features give the same bits
// from worker processes as from the in-process Block: a schema-constrained request,
// a tool_choice=required request (prompt rendered with the tools, syntax and tool
// grammar from the parent), n=3 choices (each choice's tokens, logits and cached
// prompt tokens) and embeddings (every float's bits), with the same errors.
func TestWorkersFeaturesSameBitsAsInProcess(t *testing.T) {
	path := qwenModel(t)
	mcs := []engine.ModelConfig{{ID: "m", Path: path, MaxModelLen: 1024, MaxModelConcurrency: 8},
		{ID: "e", Path: path, MaxModelLen: 512, Embeddings: true}}
	b, err := engine.New(engine.Config{Models: mcs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, mc := range mcs {
		if err := b.Load(context.Background(), mc.ID); err != nil {
			t.Fatal(err)
		}
	}
	// HangAfter (and so KillAfter) 30 s: a worker starved on a loaded CI machine (2
	// cores, -race) must be neither late nor killed as hung; a replacement's prefix
	// cache is empty, which would change the choices' CachedTokens below (not their bits).
	p := newPool(t, Config{Models: mcs, Command: testCommand(), Groups: map[string]string{"m": "g", "e": "g"},
		HangAfter: 30 * time.Second})
	ctx := context.Background()
	starts := p.Workers()[0].Starts

	// Structured output: a json_schema grammar compiled in each.
	msgs := []engine.Message{{Role: "user", Content: "Give me a name and a number."}}
	prompt, err := b.ChatTokens("m", msgs)
	if err != nil {
		t.Fatal(err)
	}
	schema := []byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":10},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false}`)
	gb, err := b.CompileSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	gp, err := p.CompileSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	if gp.Key() != gb.Key() {
		t.Fatalf("schema grammar key %s, want %s", gp.Key(), gb.Key())
	}
	sreq := engine.Request{Prompt: prompt, MaxTokens: 48, Sampling: engine.Sampling{Temperature: 0.8, Seed: 5}}
	rb, rp := sreq, sreq
	rb.Grammar, rp.Grammar = gb, gp
	sb := run(b, "m", rb)
	if sb.err != nil || !strings.HasPrefix(sb.text, "{") {
		t.Fatalf("in process json_schema: %q %v", sb.text, sb.err)
	}
	if err := sb.same(run(p, "m", rp)); err != nil {
		t.Fatalf("json_schema: %v", err)
	}

	// tool_choice=required: the prompt with the tools, the syntax and the grammar of
	// a call come from the parent's Prep; the call from the worker.
	tools := []engine.Tool{{Name: "get_weather", Description: "The weather in a city",
		Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"]}`)},
		{Name: "now", Description: "The time"}}
	tmsgs := []engine.Message{{Role: "user", Content: "Weather in Paris? <tool_call>"}}
	tpb, err := b.ChatTokensTools("m", tmsgs, tools)
	if err != nil {
		t.Fatal(err)
	}
	tpp, err := p.ChatTokensTools("m", tmsgs, tools)
	if err != nil || fmt.Sprint(tpp) != fmt.Sprint(tpb) {
		t.Fatalf("ChatTokensTools: %v %v, want %v", tpp, err, tpb)
	}
	synB, _ := b.ToolSyntax("m")
	synP, err := p.ToolSyntax("m")
	if err != nil || synP != synB {
		t.Fatalf("ToolSyntax: %v %v, want %v", synP, err, synB)
	}
	tgb, err := b.ToolGrammar("m", tools)
	if err != nil {
		t.Fatal(err)
	}
	tgp, err := p.ToolGrammar("m", tools)
	if err != nil || tgp.Key() != tgb.Key() {
		t.Fatalf("ToolGrammar: %v, key %v want %s", err, tgp, tgb.Key())
	}
	treq := engine.Request{Prompt: tpb, MaxTokens: 80, Sampling: engine.Sampling{Temperature: 0.9, Seed: 77}}
	rb, rp = treq, treq
	rb.Grammar, rp.Grammar = tgb, tgp
	tb := run(b, "m", rb)
	if tb.err != nil || !strings.Contains(tb.text, `"name"`) {
		t.Fatalf("in process tool call: %q %v", tb.text, tb.err)
	}
	if err := tb.same(run(p, "m", rp)); err != nil {
		t.Fatalf("tool_choice=required: %v", err)
	}
	if _, err := p.ToolSyntax("nope"); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("ToolSyntax of an unknown model: %v", err)
	}

	// n=3: every choice's bits, and the later choices served from the prefix cache.
	nreq := engine.Request{Prompt: prompt, MaxTokens: 24, Sampling: engine.Sampling{Temperature: 1, Seed: 2024}}
	choices := func(g interface {
		GenerateN(context.Context, string, engine.Request, int) ([]*engine.Stream, error)
	}) []result {
		sts, err := g.GenerateN(ctx, "m", nreq, 3)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]result, len(sts))
		for i, s := range sts {
			for tok := range s.Tokens {
				out[i].ids = append(out[i].ids, tok.ID)
				out[i].logits = append(out[i].logits, math.Float32bits(tok.Logit))
				out[i].text += tok.Text
			}
			out[i].u, out[i].err = s.Wait(ctx)
		}
		return out
	}
	cb, cp := choices(b), choices(p)
	// Choice 0's CachedTokens is what the json_schema request above left in the
	// worker's prefix cache: the same as in process unless the worker process was
	// replaced since (a restart starts with an empty cache). The other choices share
	// choice 0's prompt blocks within the request, whatever came before.
	w := p.Workers()[0]
	restarted := w.Starts != starts
	if restarted {
		t.Logf("the worker was replaced during the test (starts %d → %d, crashes %d, last exit %q): choice 0's CachedTokens not compared",
			starts, w.Starts, w.Crashes, w.LastExit)
	}
	for i := range cb {
		if err := cb[i].same(cp[i]); err != nil {
			t.Errorf("choice %d: %v", i, err)
		}
		if cp[i].u.CompletionTokens != cb[i].u.CompletionTokens || (i > 0 || !restarted) && cp[i].u.CachedTokens != cb[i].u.CachedTokens {
			t.Errorf("choice %d: usage %+v, want %+v", i, cp[i].u, cb[i].u)
		}
		if i > 0 && cp[i].u.CachedTokens == 0 {
			t.Errorf("choice %d: no prompt tokens from the prefix cache", i)
		}
	}
	if cb[0].text == cb[1].text && cb[1].text == cb[2].text {
		t.Errorf("three choices wrote the same %q: the seeds are not the choices'", cb[0].text)
	}
	if _, err := p.GenerateN(ctx, "m", nreq, engine.MaxChoices+1); err == nil {
		t.Errorf("n above MaxChoices: no error")
	}

	// Embeddings: every float's bits; a model without them is ErrNoEmbeddings.
	in1, _ := b.Tokenize("e", "The cat sat on the mat.")
	in2, _ := b.Tokenize("e", "Dogs bark")
	ereq := engine.EmbedRequest{Inputs: [][]int32{in1, in2}, Tenant: "t"}
	eb, err := b.Embed(ctx, "e", ereq)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := p.Embed(ctx, "e", ereq)
	if err != nil {
		t.Fatal(err)
	}
	if ep.PromptTokens != eb.PromptTokens || len(ep.Vectors) != len(eb.Vectors) {
		t.Fatalf("embeddings: %d tokens %d vectors, want %d %d", ep.PromptTokens, len(ep.Vectors), eb.PromptTokens, len(eb.Vectors))
	}
	for i := range eb.Vectors {
		if len(eb.Vectors[i]) == 0 || len(ep.Vectors[i]) != len(eb.Vectors[i]) {
			t.Fatalf("vector %d: %d floats, want %d", i, len(ep.Vectors[i]), len(eb.Vectors[i]))
		}
		for j := range eb.Vectors[i] {
			if math.Float32bits(ep.Vectors[i][j]) != math.Float32bits(eb.Vectors[i][j]) {
				t.Fatalf("vector %d float %d: %v, want %v", i, j, ep.Vectors[i][j], eb.Vectors[i][j])
			}
		}
	}
	if _, err := p.Embed(ctx, "m", ereq); !errors.Is(err, engine.ErrNoEmbeddings) {
		t.Errorf("embed on a model without embeddings: %v", err)
	}
	if _, err := p.Embed(ctx, "e", engine.EmbedRequest{Inputs: [][]int32{make([]int32, 600)}}); !errors.Is(err, engine.ErrTooLong) {
		t.Errorf("embed over the limit: %v", err)
	}
}

// TestModelsReportEmbeddingsWithoutWorker: a model that embeds says so in its status
// while its worker is stopped (scale to zero), as the Block says it while unloaded,
// so the gateway keeps routing embeddings to it and the request starts the worker.
func TestModelsReportEmbeddingsWithoutWorker(t *testing.T) {
	path := llamaModel(t)
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "e", Path: path, Embeddings: true, IdleTimeout: 300 * time.Millisecond},
		{ID: "m", Path: path}}, Command: testCommand()})
	waitFor(t, 30*time.Second, "e's worker stopped", func() bool { return state(p, "e").State == engine.StateUnloaded })
	if !state(p, "e").Embeddings || state(p, "m").Embeddings {
		t.Fatalf("embeddings in status: e %v, m %v", state(p, "e").Embeddings, state(p, "m").Embeddings)
	}
	tok, _ := p.Tokenize("e", "hello")
	e, err := p.Embed(context.Background(), "e", engine.EmbedRequest{Inputs: [][]int32{tok}})
	if err != nil || len(e.Vectors) != 1 || len(e.Vectors[0]) == 0 {
		t.Fatalf("embed after scale to zero: %+v %v", e, err)
	}
}

// TestKill9WorkerMidChoices: a worker killed with SIGKILL while it streams n=3
// choices ends every choice's stream with engine.ErrRestarting (none is left open),
// and the restarted worker serves n choices again.
func TestKill9WorkerMidChoices(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 1024}},
		Command: testCommand(envSlow + "=3ms")})
	pid := workerPID(t, p, "a")
	req := engine.Request{Prompt: []int32{1, 5, 9}, MaxTokens: 1000, Sampling: engine.Sampling{Temperature: 1, Seed: 3}}
	sts, err := p.GenerateN(context.Background(), "a", req, 3)
	if err != nil {
		t.Fatal(err)
	}
	takeTokens(sts[0], 3)
	syscall.Kill(pid, syscall.SIGKILL)
	for i, s := range sts {
		for range s.Tokens {
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.Wait(ctx)
		cancel()
		if !errors.Is(err, engine.ErrRestarting) {
			t.Errorf("choice %d of the killed worker ended with %v, want ErrRestarting", i, err)
		}
	}
	waitFor(t, 20*time.Second, "a ready again", func() bool { return state(p, "a").State == engine.StateReady })
	sts, err = p.GenerateN(context.Background(), "a", engine.Request{Prompt: []int32{1}, MaxTokens: 4}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sts {
		for range s.Tokens {
		}
		if u, err := s.Wait(context.Background()); err != nil || u.CompletionTokens != 4 {
			t.Errorf("choice %d after the restart: %+v %v", i, u, err)
		}
	}
	if w := p.Workers()[0]; w.Crashes != 1 {
		t.Errorf("worker after the crash: %+v", w)
	}
}

// TestWorkersSpeculationSameOutput: a model that speculates (its config crosses to
// the worker) gives plain decoding's output through a worker, with drafts accepted
// there (Usage crosses back with its counts), and NoSpeculation crosses too.
func TestWorkersSpeculationSameOutput(t *testing.T) {
	mc := engine.ModelConfig{ID: "m", Path: llamaModel(t), MaxModelLen: 512, Speculative: spec.Config{NGram: true}}
	p := newPool(t, Config{Models: []engine.ModelConfig{mc}, Command: testCommand()})
	prompt := make([]int32, 20)
	for i := range prompt {
		prompt[i] = int32(3 + i*37%200)
	}
	req := engine.Request{Prompt: prompt, MaxTokens: 250, Sampling: engine.Sampling{IgnoreEOS: true}}
	plain := req
	plain.NoSpeculation = true
	want, got := run(p, "m", plain), run(p, "m", req)
	if want.err != nil || got.err != nil {
		t.Fatal(want.err, got.err)
	}
	if err := want.same(got); err != nil {
		t.Fatal(err)
	}
	if want.u.DraftTokens != 0 || got.u.AcceptedTokens == 0 {
		t.Fatalf("drafted %d plain; speculating drafted %d, accepted %d", want.u.DraftTokens, got.u.DraftTokens, got.u.AcceptedTokens)
	}
	t.Logf("drafted %d, accepted %d", got.u.DraftTokens, got.u.AcceptedTokens)
}

// TestWorkersPredictionSameOutput: a request's prediction crosses to the worker and
// drafts there (the model does not speculate otherwise), with plain decoding's
// output, and the prediction's usage counts cross back.
func TestWorkersPredictionSameOutput(t *testing.T) {
	mc := engine.ModelConfig{ID: "m", Path: llamaModel(t), MaxModelLen: 512}
	p := newPool(t, Config{Models: []engine.ModelConfig{mc}, Command: testCommand()})
	prompt := make([]int32, 20)
	for i := range prompt {
		prompt[i] = int32(3 + i*37%200)
	}
	req := engine.Request{Prompt: prompt, MaxTokens: 120, Sampling: engine.Sampling{IgnoreEOS: true}}
	want := run(p, "m", req)
	req.Prediction = want.text
	got := run(p, "m", req)
	if want.err != nil || got.err != nil {
		t.Fatal(want.err, got.err)
	}
	if err := want.same(got); err != nil {
		t.Fatal(err)
	}
	if !got.u.Predicted || got.u.PredictionAccepted == 0 || got.u.PredictionAccepted+got.u.PredictionRejected != got.u.DraftTokens {
		t.Fatalf("usage through the worker: predicted %v, accepted %d, rejected %d, drafted %d", got.u.Predicted,
			got.u.PredictionAccepted, got.u.PredictionRejected, got.u.DraftTokens)
	}
	t.Logf("prediction: accepted %d, rejected %d of %d tokens", got.u.PredictionAccepted, got.u.PredictionRejected, got.u.CompletionTokens)
}

// TestWorkersDraftModelSameOutput: a model whose draft model shares its worker
// group drafts from it in the worker process (a draft model with the target's own
// weights, so its greedy drafts are accepted), and the output is plain decoding's
// bit for bit: ids, text, logits, logprobs and top logprobs, greedy and seeded
// sampling.
func TestWorkersDraftModelSameOutput(t *testing.T) {
	target := llamaModel(t)
	draft := tinyModel(t, "llama-draft", genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 7}) // the target's weights
	mcs := []engine.ModelConfig{
		{ID: "m", Path: target, MaxModelLen: 512, Speculative: spec.Config{DraftModel: "d"}},
		{ID: "d", Path: draft, MaxModelLen: 512}}
	p := newPool(t, Config{Models: mcs, Command: testCommand(), Groups: map[string]string{"m": "g", "d": "g"}})
	prompt := make([]int32, 20)
	for i := range prompt {
		prompt[i] = int32(3 + i*37%200)
	}
	// bits runs req and returns its tokens' ids, logits, logprobs and top logprobs
	// as bits, its text and usage.
	bits := func(req engine.Request) (b []uint32, text string, u engine.Usage) {
		s, err := p.Generate(context.Background(), "m", req)
		if err != nil {
			t.Fatal(err)
		}
		for tok := range s.Tokens {
			text += tok.Text
			if tok.ID < 0 {
				continue
			}
			b = append(b, uint32(tok.ID), math.Float32bits(tok.Logit), math.Float32bits(tok.Logprob))
			for _, tl := range tok.TopLogprobs {
				b = append(b, uint32(tl.ID), math.Float32bits(tl.Logprob))
			}
		}
		if u, err = s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		return b, text, u
	}
	for _, c := range []struct {
		name string
		req  engine.Request
	}{
		{"greedy", engine.Request{Prompt: prompt, MaxTokens: 120, Logprobs: true, TopLogprobs: 3, Sampling: engine.Sampling{IgnoreEOS: true}}},
		{"seeded", engine.Request{Prompt: prompt, MaxTokens: 120, Logprobs: true, Sampling: engine.Sampling{Temperature: 0.8, Seed: 5, IgnoreEOS: true}}},
	} {
		plain := c.req
		plain.NoSpeculation = true
		wb, wt, wu := bits(plain)
		gb, gt, gu := bits(c.req)
		if wt != gt || !slices.Equal(wb, gb) {
			t.Errorf("%s: speculating gave %q (%d values), plain %q (%d values)", c.name, gt, len(gb), wt, len(wb))
		}
		if wu.DraftTokens != 0 || gu.DraftTokens == 0 {
			t.Errorf("%s: drafted %d plain; speculating drafted %d, accepted %d", c.name, wu.DraftTokens, gu.DraftTokens, gu.AcceptedTokens)
		}
		if c.name == "greedy" && gu.AcceptedTokens == 0 {
			t.Errorf("%s: the target's own weights drafted %d tokens, none accepted", c.name, gu.DraftTokens)
		}
		t.Logf("%s: %d tokens, drafted %d, accepted %d", c.name, gu.CompletionTokens, gu.DraftTokens, gu.AcceptedTokens)
	}
	for _, st := range p.Models() {
		if st.ID == "m" && (st.DraftModelDraftTokens == 0 || st.DraftModelDraftTokens != st.DraftTokens) {
			t.Errorf("model counters through the worker: the draft model drafted %d of %d tokens", st.DraftModelDraftTokens, st.DraftTokens)
		}
	}
}

// TestLateWorkerThatBeatsAgainIsNotKilled: a worker stopped for 1.5 s (as a starved
// one on a busy machine: no heartbeat) is not ready within 1 s, and once it runs and
// beats again it is ready again, the same process (not killed: KillAfter is 5 s),
// with no crash counted, and serves. (Before, 700 ms without a beat killed it.)
func TestLateWorkerThatBeatsAgainIsNotKilled(t *testing.T) {
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}}, Command: testCommand()})
	pid := workerPID(t, p, "a")
	syscall.Kill(pid, syscall.SIGSTOP)
	d := waitFor(t, 3*time.Second, "a not ready", func() bool { return state(p, "a").State != engine.StateReady && !p.Ready() })
	if d > time.Second {
		t.Errorf("a was marked not ready %s after SIGSTOP, want ≤ 1s", d)
	}
	if w := p.Workers()[0]; w.State != "late" || w.PID != pid {
		t.Errorf("while stopped: state %q, pid %d; want late, %d", w.State, w.PID, pid)
	}
	time.Sleep(1500*time.Millisecond - d)
	syscall.Kill(pid, syscall.SIGCONT)
	waitFor(t, 3*time.Second, "a ready again", func() bool { return state(p, "a").State == engine.StateReady })
	if w := p.Workers()[0]; w.PID != pid || w.Crashes != 0 || !alive(pid) {
		t.Fatalf("after a late beat: %+v (want pid %d, no crash)", w, pid)
	}
	if r := run(p, "a", engine.Request{Prompt: []int32{1}, MaxTokens: 4}); r.err != nil || len(r.ids) != 4 {
		t.Fatalf("a after it beat again: %d tokens, %v", len(r.ids), r.err)
	}
}
