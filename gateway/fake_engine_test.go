package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// fakeEngine is a fake at exactly the Engine interface, the narrowest one the gateway
// uses, for HTTP tests of the gateway itself (routing, errors, SSE, quotas, ledger).
// It claims nothing about generation: it emits the words "w0 ", "w1 ", ... until
// MaxTokens or a stop string, one token every Delay. Tests of the gateway with the
// real engine come with the engine's Block.
type fakeEngine struct {
	Delay    time.Duration
	Queue    time.Duration // each request waits this long before its first step (Usage.QueueTime; in TimeToFirstToken too, as the Block counts)
	MaxLen   int
	Refuse   map[string]error                  // Generate refuses these models with the error (set before use)
	MaxQueue int                               // Models reports it as every model's queue limit (0: none reported)
	ids      []string                          // Models lists these; nil: tiny and big
	state    atomic.Pointer[engine.ModelState] // with ids: every model's state ("" or nil: ready)
	ready    atomic.Bool
	started  atomic.Int64
	cancels  atomic.Int64 // generations ended by their context

	mu   sync.Mutex
	last engine.Request // the last request Generate received

	features Engine // served instead of the fakeEngine when set (a scriptedEngine)
}

func newFakeEngine() *fakeEngine {
	f := &fakeEngine{MaxLen: 512}
	f.ready.Store(true)
	return f
}

var fakeModels = map[string]bool{"tiny": true, "big": true, "local": true}

// newFakeEngineWith is a fakeEngine whose Models lists the given ids.
func newFakeEngineWith(ids ...string) *fakeEngine {
	f := newFakeEngine()
	f.ids = ids
	return f
}

func (f *fakeEngine) Tokenize(model, text string) ([]int32, error) {
	if !fakeModels[model] {
		return nil, engine.ErrUnknownModel
	}
	toks := make([]int32, 0, len(text)+1)
	toks = append(toks, 1) // BOS
	for i := 0; i < len(text); i++ {
		toks = append(toks, int32(text[i])+3)
	}
	return toks, nil
}

func (f *fakeEngine) ChatTokens(model string, msgs []engine.Message) ([]int32, error) {
	if !fakeModels[model] {
		return nil, engine.ErrUnknownModel
	}
	var b strings.Builder
	for _, m := range msgs { // ChatML
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m.Role, m.Content)
	}
	b.WriteString("<|im_start|>assistant\n")
	return f.Tokenize(model, b.String())
}

func (f *fakeEngine) Models() []engine.ModelStatus {
	if f.ids != nil {
		var out []engine.ModelStatus
		for _, id := range f.ids {
			st := engine.StateReady
			if p := f.state.Load(); p != nil && *p != "" {
				st = *p
			}
			out = append(out, engine.ModelStatus{ID: id, State: st, Replicas: 1, MaxModelLen: f.MaxLen, MaxQueue: f.MaxQueue})
		}
		return out
	}
	return []engine.ModelStatus{
		{ID: "tiny", State: engine.StateReady, Replicas: 1, MemoryBytes: 1 << 20, MaxModelLen: f.MaxLen, MaxQueue: f.MaxQueue},
		{ID: "big", State: engine.StateReady, Replicas: 1, MemoryBytes: 4 << 20, MaxModelLen: f.MaxLen, MaxQueue: f.MaxQueue},
	}
}

func (f *fakeEngine) Ready() bool { return f.ready.Load() }

func (f *fakeEngine) Generate(ctx context.Context, model string, req engine.Request) (*engine.Stream, error) {
	if !fakeModels[model] {
		return nil, engine.ErrUnknownModel
	}
	if len(req.Prompt)+req.MaxTokens > f.MaxLen {
		return nil, engine.ErrTooLong
	}
	if err := f.Refuse[model]; err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()
	f.started.Add(1)
	st := engine.NewStream()
	go func() {
		start := time.Now()
		var out strings.Builder
		u := engine.Usage{PromptTokens: len(req.Prompt), FinishReason: engine.FinishLength}
		if f.Queue > 0 {
			select {
			case <-time.After(f.Queue):
			case <-ctx.Done():
			}
			u.QueueTime = time.Since(start)
		}
		for i := 0; i < req.MaxTokens; i++ {
			if f.Delay > 0 {
				select {
				case <-time.After(f.Delay):
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				f.cancels.Add(1)
				u.FinishReason = engine.FinishCancelled
				break
			}
			text := fmt.Sprintf("w%d ", i)
			out.WriteString(text)
			if s, hit := stopAt(out.String(), req.Stop); hit {
				prev := out.Len() - len(text)
				text = ""
				if len(s) > prev {
					text = s[prev:]
				}
				if text != "" {
					st.Send(engine.Token{ID: int32(i), Text: text})
				}
				u.CompletionTokens++
				u.FinishReason, u.StopSequence = engine.FinishStop, stopMatched(out.String(), req.Stop)
				break
			}
			st.Send(engine.Token{ID: int32(i), Text: text})
			u.CompletionTokens++
			if i == 0 {
				u.TimeToFirstToken = time.Since(start)
			}
		}
		if u.CompletionTokens > 1 {
			u.TimePerOutputToken = (time.Since(start) - u.TimeToFirstToken) / time.Duration(u.CompletionTokens-1)
		}
		st.Finish(u, nil)
	}()
	return st, nil
}

// stopAt cuts s before the first stop string, if any.
func stopAt(s string, stops []string) (string, bool) {
	cut := -1
	for _, st := range stops {
		if i := strings.Index(s, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut < 0 {
		return s, false
	}
	return s[:cut], true
}

// stopMatched is the stop string that is first in s (the engine's Usage.StopSequence).
func stopMatched(s string, stops []string) string {
	cut, m := -1, ""
	for _, st := range stops {
		if i := strings.Index(s, st); i >= 0 && (cut < 0 || i < cut) {
			cut, m = i, st
		}
	}
	return m
}

func (f *fakeEngine) lastRequest() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}
