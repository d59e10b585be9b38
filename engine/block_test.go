package engine

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/testenv"
)

func newStoriesBlock(t *testing.T, mc ModelConfig, cfg Config) *Block {
	t.Helper()
	mc.ID = "stories"
	mc.Path = testenv.SharedFile(t, "models/stories260K.gguf")
	cfg.Models = []ModelConfig{mc}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Load(context.Background(), "stories"); err != nil {
		t.Fatal(err)
	}
	return b
}

// collect drains a stream.
func collect(t *testing.T, s *Stream) (string, []int32, Usage) {
	t.Helper()
	var text strings.Builder
	var ids []int32
	for tok := range s.Tokens {
		text.WriteString(tok.Text)
		if tok.ID >= 0 {
			ids = append(ids, tok.ID)
		}
	}
	u, err := s.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return text.String(), ids, u
}

func TestBlockGenerateGreedy(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{}, Config{})
	if !b.Ready() {
		t.Fatal("not ready after Load")
	}
	want, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Generate(context.Background(), "stories", Request{Prompt: []int32{1}, MaxTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	text, ids, u := collect(t, s)
	if text != string(want) {
		t.Errorf("text %q\nwant %q", text, want)
	}
	if len(ids) != 200 || u.CompletionTokens != 200 || u.PromptTokens != 1 || u.FinishReason != FinishLength {
		t.Errorf("%d ids, usage %+v", len(ids), u)
	}
	if u.TimeToFirstToken <= 0 || u.TimePerOutputToken <= 0 || u.QueueTime < 0 {
		t.Errorf("timings %+v", u)
	}
}

func TestBlockStopString(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{}, Config{})
	s, err := b.Generate(context.Background(), "stories", Request{Prompt: []int32{1}, MaxTokens: 100, Stop: []string{"Lily"}})
	if err != nil {
		t.Fatal(err)
	}
	text, _, u := collect(t, s)
	if text != "Once upon a time, there was a little girl named " || u.FinishReason != FinishStop {
		t.Errorf("text %q, finish %s", text, u.FinishReason)
	}
}

func TestBlockRefusals(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 64}, Config{})
	ctx := context.Background()
	if _, err := b.Generate(ctx, "nope", Request{Prompt: []int32{1}}); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 64}); !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "64") {
		t.Errorf("too long: %v", err)
	}
	if _, err := b.Generate(ctx, "stories", Request{Prompt: make([]int32, 64)}); !errors.Is(err, ErrTooLong) {
		t.Errorf("prompt at the limit: %v", err)
	}
	if _, err := b.Generate(ctx, "stories", Request{}); err == nil {
		t.Error("empty prompt accepted")
	}
	if _, err := b.Generate(ctx, "stories", Request{Prompt: []int32{100000}}); err == nil {
		t.Error("token outside the vocabulary accepted")
	}
}

func TestBlockQueueFull(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelConcurrency: 1}, Config{MaxQueue: 1})
	ctx := context.Background()
	var streams []*Stream
	for range 2 {
		s, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if st := b.Models()[0]; st.Queued != 2 || st.MaxQueue != 2 {
		t.Errorf("status with 2 requests in flight: queued %d, max queue %d (want 2, 2: Config.MaxQueue 1 + 1 slot)", st.Queued, st.MaxQueue)
	}
	if _, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 20}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third request: %v, want ErrQueueFull", err)
	}
	// Drain both at once: whichever holds the replica must be able to finish.
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); collect(t, s) }()
	}
	wg.Wait()
	s, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 5})
	if err != nil {
		t.Fatalf("after draining: %v", err)
	}
	collect(t, s)
	if st := b.Models()[0]; st.Queued != 0 {
		t.Errorf("queued %d after every request ended", st.Queued)
	}
}

// TestModelMaxQueue: a model's own MaxQueue (requests in flight) overrides the
// Block's default and is what ModelStatus reports.
func TestModelMaxQueue(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxQueue: 1}, Config{Logger: quietLog()})
	ctx := context.Background()
	s, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 20}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("second request with max_queue 1: %v, want ErrQueueFull", err)
	}
	if st := b.Models()[0]; st.MaxQueue != 1 {
		t.Errorf("max queue %d, want 1", st.MaxQueue)
	}
	collect(t, s)
}

func TestBlockCancel(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := b.Generate(ctx, "stories", Request{Prompt: []int32{1}, MaxTokens: 400})
	if err != nil {
		t.Fatal(err)
	}
	for range s.Tokens {
		break // the first token
	}
	cancel()
	for range s.Tokens {
	}
	u, err := s.Wait(context.Background())
	if err != nil || u.FinishReason != FinishCancelled || u.CompletionTokens >= 400 {
		t.Fatalf("usage %+v err %v", u, err)
	}
	// The replica is free again.
	s, err = b.Generate(context.Background(), "stories", Request{Prompt: []int32{1}, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, ids, _ := collect(t, s); len(ids) != 3 {
		t.Fatalf("%d ids after a cancelled request", len(ids))
	}
}

func TestBlockIdleUnloadAndReload(t *testing.T) {
	clk := newTestClock()
	b := newStoriesBlock(t, ModelConfig{IdleTimeout: time.Minute}, Config{Clock: clk.Now})
	st := b.Models()[0]
	if st.State != StateReady || st.MemoryBytes <= 0 {
		t.Fatalf("status %+v", st)
	}
	clk.Add(30 * time.Second)
	b.sweep()
	if s := b.Models()[0].State; s != StateReady {
		t.Fatalf("unloaded before its idle timeout: %s", s)
	}
	clk.Add(90 * time.Second)
	b.sweep()
	if st := b.Models()[0]; st.State != StateUnloaded || st.MemoryBytes != 0 {
		t.Fatalf("after idle timeout: %+v", st)
	}
	if !b.Ready() {
		t.Error("a cleanly unloaded model makes the block not ready")
	}
	s, err := b.Generate(context.Background(), "stories", Request{Prompt: []int32{1}, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	text, _, u := collect(t, s)
	if text != "Once upon a time," || u.ColdStart <= 0 {
		t.Fatalf("after reload: %q, cold start %v", text, u.ColdStart)
	}
	if s := b.Models()[0].State; s != StateReady {
		t.Fatalf("state after reload %s", s)
	}
}

// TestBlockReplicas: both replicas serve (requests without a cached prefix alternate)
// and give the same tokens for the same request.
func TestBlockReplicas(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{Replicas: 2}, Config{})
	var wg sync.WaitGroup
	res := make([][]int32, 4)
	used := make([]int, 4)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := b.Generate(context.Background(), "stories", Request{Prompt: []int32{1}, MaxTokens: 50,
				Sampling: Sampling{Temperature: 0.9, Seed: 7}})
			if err != nil {
				t.Error(err)
				return
			}
			_, res[i], _ = collect(t, s)
			u, _ := s.Wait(context.Background())
			used[i] = u.Replica
		}()
	}
	wg.Wait()
	for i := range res {
		if len(res[i]) != 50 {
			t.Fatalf("request %d: %d tokens", i, len(res[i]))
		}
		for j := range res[i] {
			if res[i][j] != res[0][j] {
				t.Fatalf("request %d differs from request 0 at token %d (replicas %v)", i, j, used)
			}
		}
	}
	served := map[int]bool{}
	for _, r := range used {
		served[r] = true
	}
	if len(served) != 2 {
		t.Fatalf("the 4 requests were served by replicas %v, want both", used)
	}
	if st := b.Models()[0]; st.Replicas != 2 {
		t.Fatalf("status %+v", st)
	}
}

// TestBlockNewErrors: New refuses a configuration that breaks a rule with
// ErrConfig (its text names the rule), and a missing file with fs.ErrNotExist.
func TestBlockNewErrors(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no models: %v", err)
	}
	if _, err := New(Config{Models: []ModelConfig{{ID: "x", Path: "/nonexistent.gguf"}}}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	p := testenv.SharedFile(t, "models/stories260K.gguf")
	if _, err := New(Config{Models: []ModelConfig{{ID: "x", Path: p}, {ID: "x", Path: p}}}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate id: %v", err)
	}
	if _, err := New(Config{Models: []ModelConfig{{ID: "x", Path: p, MaxModelLen: 100000}}}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "context length") {
		t.Errorf("max_model_len above the context: %v", err)
	}
}

// TestOpenPrepMaxModelLen: OpenPrep checks max_model_len as New does (both open
// the file through openModelFile): unset is the model's context, a value at most
// the context is kept, one above it is an error, and a missing file is fs.ErrNotExist.
func TestOpenPrepMaxModelLen(t *testing.T) {
	p := testenv.SharedFile(t, "models/stories260K.gguf")
	full, err := OpenPrep(ModelConfig{ID: "x", Path: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := full.MaxModelLen()
	if ctx <= 64 {
		t.Fatalf("context %d", ctx)
	}
	if pr, err := OpenPrep(ModelConfig{ID: "x", Path: p, MaxModelLen: 64}); err != nil || pr.MaxModelLen() != 64 {
		t.Errorf("max_model_len 64: %v", err)
	}
	if _, err := OpenPrep(ModelConfig{ID: "x", Path: p, MaxModelLen: ctx + 1}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "context length") {
		t.Errorf("max_model_len above the context: %v", err)
	}
	if _, err := OpenPrep(ModelConfig{ID: "x", Path: "/nonexistent.gguf"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestBlockLoadAfterClose: a closed Block loads nothing more; Load says why.
func TestBlockLoadAfterClose(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{}, Config{Logger: quietLog()})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Load(context.Background(), "stories"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close: %v, want ErrClosed", err)
	}
	if st := b.Models()[0]; st.State != StateUnloaded || st.MemoryBytes != 0 {
		t.Fatalf("after Load on a closed block: %+v", st)
	}
}

// TestBlockCloseDuringLoad: Close while a Load is starting: the race detector sees
// no unsynchronized access to the model's load, and Close leaves nothing loaded.
func TestBlockCloseDuringLoad(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{}, Config{Logger: quietLog()})
	if err := b.Unload("stories"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		done <- b.Load(context.Background(), "stories")
	}()
	<-started
	b.Close()
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("Load racing Close: %v", err)
	}
	if st := b.Models()[0]; st.State == StateReady || st.MemoryBytes != 0 {
		t.Fatalf("after Close: %+v", st)
	}
}

// testClock is a Config.Clock that moves only when told.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sweep runs one pass of the janitor (at the Block's clock) and waits for it.
func (b *Block) sweep() { b.passWait(false) }
