package engine

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestStreamTokens: tokens sent before and after the consumer starts all arrive in
// order; a loop that breaks and ranges again loses nothing; Wait needs no draining.
func TestStreamTokens(t *testing.T) {
	errX := errors.New("x")
	s := NewStream()
	s.Send(Token{ID: 1})
	s.Send(Token{ID: 2})
	var got []int32
	for tok := range s.Tokens {
		got = append(got, tok.ID)
		break
	}
	go func() {
		for i := int32(3); i <= 50; i++ {
			s.Send(Token{ID: i})
		}
		s.Finish(Usage{CompletionTokens: 50}, errX)
	}()
	for tok := range s.Tokens {
		got = append(got, tok.ID)
	}
	if len(got) != 50 {
		t.Fatalf("%d tokens: %v", len(got), got)
	}
	for i, id := range got {
		if id != int32(i+1) {
			t.Fatalf("token %d is %d: %v", i, id, got)
		}
	}
	for range s.Tokens {
		t.Fatal("a token after the end")
	}
	u, err := s.Wait(context.Background())
	if u.CompletionTokens != 50 || !errors.Is(err, errX) {
		t.Fatalf("Wait: %+v %v", u, err)
	}

	// Wait without reading; Take after the end gives what was left.
	s = NewStream()
	s.Send(Token{ID: 7})
	s.Finish(Usage{}, nil)
	if _, err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.Ready()
	if toks, done := s.Take(nil); len(toks) != 1 || toks[0].ID != 7 || !done {
		t.Fatalf("Take: %v %v", toks, done)
	}
}

// TestStreamForward: Forward hands the tokens that arrived before it and those sent
// after it to the sink, in order, in the sender's goroutine; Tokens yields none of
// them, and Wait still returns the end.
func TestStreamForward(t *testing.T) {
	s := NewStream()
	s.Send(Token{ID: 1})
	s.Send(Token{ID: 2})
	var got []int32 // the sink runs under the Stream's lock, one token at a time
	s.Forward(func(tok Token) { got = append(got, tok.ID) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int32(3); i <= 20; i++ {
			s.Send(Token{ID: i})
		}
		s.Finish(Usage{CompletionTokens: 20}, nil)
	}()
	for range s.Tokens {
		t.Fatal("Tokens yielded a forwarded token")
	}
	if u, err := s.Wait(context.Background()); err != nil || u.CompletionTokens != 20 {
		t.Fatalf("Wait: %+v %v", u, err)
	}
	<-done
	if len(got) != 20 {
		t.Fatalf("%d tokens forwarded: %v", len(got), got)
	}
	for i, id := range got {
		if id != int32(i+1) {
			t.Fatalf("forwarded token %d is %d: %v", i, id, got)
		}
	}
}

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
