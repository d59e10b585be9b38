package engine

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// TestBurstOnUnloadedModelLoadsOnce sends 50 requests at once, from 50 goroutines,
// to a model that was scaled to zero: the model loads exactly once, and every request
// is served (none refused by the queue limit while the model loads, none timed out),
// and Ready stays true throughout.
func TestBurstOnUnloadedModelLoadsOnce(t *testing.T) {
	const n = 50
	b := genBlock(t, ModelConfig{MaxModelLen: 64, MaxModelConcurrency: 8, IdleTimeout: -1},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 11})
	if err := b.Unload("m"); err != nil {
		t.Fatal(err)
	}
	before := b.Models()[0]
	if before.State != StateUnloaded {
		t.Fatalf("state %s after Unload", before.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
		us    = make([]Usage, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := b.Generate(ctx, "m", Request{Prompt: []int32{1, int32(2 + i), 3}, MaxTokens: 4, Sampling: Sampling{IgnoreEOS: true}})
			if err != nil {
				errs[i] = err
				return
			}
			for range s.Tokens {
			}
			us[i], errs[i] = s.Wait(ctx)
		}()
	}
	// Readiness must hold through the comeback: a scale from zero does not take the
	// server out of its load balancer.
	polled, unready := make(chan struct{}), 0
	go func() {
		defer close(polled)
		for b.Models()[0].Loads == before.Loads || b.Models()[0].State != StateReady {
			if !b.Ready() {
				unready++
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	close(start)
	wg.Wait()
	<-polled
	if unready > 0 {
		t.Errorf("Ready was false %d times during the reload", unready)
	}
	cold := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		if us[i].CompletionTokens != 4 || us[i].FinishReason != FinishLength {
			t.Errorf("request %d: %d tokens, finish %q: want 4, length", i, us[i].CompletionTokens, us[i].FinishReason)
		}
		if us[i].ColdStart > 0 {
			cold++
		}
	}
	after := b.Models()[0]
	if got := after.Loads - before.Loads; got != 1 {
		t.Errorf("the burst caused %d loads, want 1", got)
	}
	if cold == 0 {
		t.Errorf("no request waited for the load: the burst did not reach an unloaded model")
	}
	t.Logf("%d of %d requests waited for the load", cold, n)
}

// TestWarmFileSurvivesUnloadAndRestart: with kv_warm_file, a long prompt cached
// before the model scales to zero is replayed after it (the reload's first request
// finds it cached), and after the Block is closed and a new one opens on the same
// file (a restart); the tokens are the same bits as computed fresh.
func TestWarmFileSurvivesUnloadAndRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 12}, path); err != nil {
		t.Fatal(err)
	}
	mc := ModelConfig{ID: "m", Path: path, MaxModelLen: 256, MaxModelConcurrency: 2, IdleTimeout: -1,
		KVWarmBytes: 8 << 20, KVWarmFile: filepath.Join(dir, "warm.kv")}
	open := func() *Block {
		t.Helper()
		b, err := New(Config{Models: []ModelConfig{mc}, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	prompt := make([]int32, 200) // a long system prompt: 12 whole blocks of 16
	for i := range prompt {
		prompt[i] = int32(3 + (i*7)%50)
	}
	run := func(b *Block) ([]int32, Usage) {
		t.Helper()
		s, err := b.Generate(context.Background(), "m", Request{Prompt: prompt, MaxTokens: 8, Sampling: Sampling{IgnoreEOS: true}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for tk := range s.Tokens {
			if tk.ID >= 0 {
				ids = append(ids, tk.ID)
			}
		}
		u, err := s.Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ids, u
	}
	const whole = 192 // 12 blocks: the prompt's last token is always computed
	b := open()
	want, u := run(b)
	if u.CachedTokens != 0 {
		t.Fatalf("first run: %d cached tokens", u.CachedTokens)
	}
	if err := b.Unload("m"); err != nil {
		t.Fatal(err)
	}
	got, u := run(b)
	if u.CachedTokens != whole || u.ColdStart == 0 {
		t.Fatalf("after an unload: %d cached tokens (want %d), cold start %v", u.CachedTokens, whole, u.ColdStart)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after an unload: tokens %v, want %v", got, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open()
	defer b.Close()
	got, u = run(b)
	if u.CachedTokens != whole {
		t.Fatalf("after a restart: %d cached tokens, want %d", u.CachedTokens, whole)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after a restart: tokens %v, want %v", got, want)
	}
}
