package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/testenv"
)

// TestBlockLifecycleMessagesRace sends the janitor its messages from many
// goroutines at once, on two models whose memory fits one at a time (high's
// priority above low's), each unloaded after a minute idle on a clock the test
// moves: requests begin while loads run, Unload and Load race both, passes expire
// idle models during loads, and a request for high preempts an idle low. Run under
// -race in a loop (make stress-lifecycle). Every request ends with the model's
// text or ErrNoMemory (the other model holds the memory), Load likewise; once the
// storm is over a request for high is served; after Close both models are unloaded,
// each as many times as it was loaded.
func TestBlockLifecycleMessagesRace(t *testing.T) {
	path := testenv.SharedFile(t, "models/stories260K.gguf")
	mcs := []ModelConfig{
		{ID: "low", Path: path, MaxModelLen: 64, IdleTimeout: time.Minute},
		{ID: "high", Path: path, MaxModelLen: 64, IdleTimeout: time.Minute, Priority: 1},
	}
	probe, err := New(Config{Models: mcs[:1], Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Load(context.Background(), "low"); err != nil {
		t.Fatal(err)
	}
	one := probe.Models()[0].MemoryBytes
	probe.Close()

	clk := newTestClock()
	b, err := New(Config{Models: mcs, MemoryBudget: one * 3 / 2, Clock: clk.Now, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := []string{"low", "high"}
	run := func(id string) error {
		s, err := b.Generate(ctx, id, Request{Prompt: []int32{1}, MaxTokens: 5})
		if err != nil {
			return err
		}
		var text []byte
		for tok := range s.Tokens {
			text = append(text, tok.Text...)
		}
		if _, err := s.Wait(ctx); err != nil {
			return err
		}
		if string(text) != "Once upon a time," {
			t.Errorf("%s: %q", id, text)
		}
		return nil
	}
	var (
		wg, bg sync.WaitGroup
		stop   = make(chan struct{})
		mu     sync.Mutex
		served = map[string]int{}
	)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				id := "low" // twice as often as high
				if (g+i)%3 == 0 {
					id = "high"
				}
				err := run(id)
				switch {
				case err == nil:
					mu.Lock()
					served[id]++
					mu.Unlock()
				case errors.Is(err, ErrNoMemory):
					mu.Lock()
					served[id+" refused"]++
					mu.Unlock()
				default:
					t.Errorf("request for %s: %v", id, err)
				}
			}
		}()
	}
	// Until the requests are done: the operator's Unload and Load, the clock moving
	// a minute past every model's idle timeout with a pass after each move, and GC.
	loop := func(f func(i int)) {
		bg.Add(1)
		go func() {
			defer bg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
			}
		}()
	}
	loop(func(i int) {
		b.Unload(ids[i%2]) // refused while requests are in flight: that is fine
		if err := b.Load(ctx, ids[(i+1)%2]); err != nil && !errors.Is(err, ErrNoMemory) {
			t.Errorf("Load %s: %v", ids[(i+1)%2], err)
		}
	})
	loop(func(int) {
		clk.Add(2 * time.Minute)
		b.sweep()
	})
	loop(func(int) { b.GC() })
	wg.Wait()
	close(stop)
	bg.Wait()
	if err := run("high"); err != nil {
		t.Fatalf("high after the storm: %v", err)
	}
	if served["low"]+served["high"] == 0 {
		t.Error("no request was served during the storm")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, st := range b.Models() {
		if st.State != StateUnloaded || st.MemoryBytes != 0 || st.Queued != 0 || st.Loads != st.Unloads {
			t.Errorf("%s after Close: %s, %d bytes, %d in flight, %d loads, %d unloads", st.ID, st.State, st.MemoryBytes, st.Queued, st.Loads, st.Unloads)
		}
	}
	t.Logf("requests during the storm: %v", served)
}
