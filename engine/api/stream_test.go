package api

import (
	"context"
	"errors"
	"testing"
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
