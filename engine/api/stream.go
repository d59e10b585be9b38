package api

import (
	"context"
	"iter"
	"sync"
)

// Stream delivers the tokens of one request and then its usage. It is the request's
// mailbox: the replica's goroutine appends each token (never blocking, so a slow
// client never stalls the batch) and the consumer — the HTTP writer — reads it
// directly, with no goroutine between them.
//
// A Stream has one consumer. It ranges over Tokens, or, to wait for something else
// at the same time, selects on Ready and calls Take; then Wait returns the usage and
// the error that ended the request, if any.
type Stream struct {
	// Tokens yields the tokens as they arrive and returns when the request has ended
	// (or when the loop breaks: ranging again goes on where it stopped).
	Tokens iter.Seq[Token]

	mu   sync.Mutex  // guards toks, sink, done, u, err
	toks []Token     // arrived, not yet taken
	sink func(Token) // set by Forward: the tokens go there instead of toks
	done bool
	u    Usage
	err  error
	wake chan struct{} // cap 1: something arrived since the last Take
	fin  chan struct{} // closed by Finish

	rest  []Token // the consumer's: taken by Tokens and not yet yielded
	first func()  // the producer's: called at the first Send or Finish (GenerateN's other choices start then)
}

// NewStream returns an empty Stream, for implementations of the Block API: the
// producer calls Send for each token, then Finish exactly once.
func NewStream() *Stream {
	s := &Stream{wake: make(chan struct{}, 1), fin: make(chan struct{})}
	s.Tokens = s.all
	return s
}

// Send appends a token (or hands it to the sink of Forward). It never blocks.
func (s *Stream) Send(t Token) {
	s.started()
	s.mu.Lock()
	if s.sink != nil {
		s.sink(t)
		s.mu.Unlock()
		return
	}
	s.toks = append(s.toks, t)
	s.mu.Unlock()
	signal(s.wake)
}

// Forward hands the stream's tokens, those arrived and those to come, to sink in
// their order instead of keeping them for Tokens (which then yields nothing more):
// for a consumer that only relays them (the workers mode's worker, which queues each
// on its socket) and so need not be woken for each one. sink runs in the producer's
// goroutine, one token at a time, and must not block. Wait still returns the end.
func (s *Stream) Forward(sink func(Token)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.toks {
		sink(t)
	}
	s.toks, s.sink = nil, sink
}

// Finish ends the stream with the request's usage and error.
func (s *Stream) Finish(u Usage, err error) {
	s.started()
	s.mu.Lock()
	s.done, s.u, s.err = true, u, err
	s.mu.Unlock()
	signal(s.wake)
	close(s.fin)
}

// OnFirst sets f to run at the first Send or Finish, for implementations of the
// Block API (the engine's GenerateN starts its other choices then). Call it before
// the stream is handed to the producer.
func (s *Stream) OnFirst(f func()) { s.first = f }

func (s *Stream) started() {
	if f := s.first; f != nil {
		s.first = nil
		f()
	}
}

// Ready receives when tokens or the end have arrived since the last Take.
func (s *Stream) Ready() <-chan struct{} { return s.wake }

// Take returns the tokens arrived since the last Take (in buf's storage, which the
// Stream keeps for the next tokens: pass the last result back) and whether the
// stream has ended, when no more will come. It does not block.
func (s *Stream) Take(buf []Token) ([]Token, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf, s.toks = s.toks, buf[:0]
	return buf, s.done
}

func (s *Stream) all(yield func(Token) bool) {
	var buf []Token
	for {
		for len(s.rest) > 0 {
			t := s.rest[0]
			s.rest = s.rest[1:]
			if !yield(t) {
				return
			}
		}
		<-s.wake
		var done bool
		buf, done = s.Take(buf)
		s.rest = buf
		if done && len(buf) == 0 {
			signal(s.wake) // for a later range or Ready
			return
		}
		if done {
			signal(s.wake) // the end is still to be seen after these tokens
		}
	}
}

// Wait blocks until the request has ended and returns its usage and error. The
// tokens need not have been read.
func (s *Stream) Wait(ctx context.Context) (Usage, error) {
	select {
	case <-s.fin:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.u, s.err
	case <-ctx.Done():
		return Usage{}, ctx.Err()
	}
}

// signal wakes the receiver of c (cap 1) without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
