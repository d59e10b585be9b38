package engine

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestGenerateNoForwarder: a request on a loaded model costs no goroutine of its own
// between the replica and the Stream (one hand-off per token): eight requests whose
// tokens nobody reads yet leave the goroutine count where it was, and they all
// finish with their tokens waiting in their Streams.
func TestGenerateNoForwarder(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelConcurrency: 8}, Config{Logger: quietLog()})
	before := runtime.NumGoroutine()
	var streams []*Stream
	for range 8 {
		s, err := b.Generate(context.Background(), "stories", Request{Prompt: []int32{1}, MaxTokens: 30})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines after 8 requests, %d before", after, before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range streams {
		if u, err := s.Wait(ctx); err != nil || u.CompletionTokens != 30 {
			t.Fatalf("usage %+v, err %v", u, err)
		}
		n := 0
		for range s.Tokens {
			n++
		}
		if n != 30 {
			t.Fatalf("%d tokens", n)
		}
	}
}
