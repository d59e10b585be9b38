package engine

import (
	"context"
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
