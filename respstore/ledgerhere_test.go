package respstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/ledger"
)

// TestLedgerPutDecidedInItsOwnGoroutine: in ledger mode a Put is decided (its limits
// checked, its usage held) in the Put's own goroutine, with no hand-off to the owner
// goroutine and back (two goroutine switches a stored request, on its path): 20
// Puts, one after the other, none decided by the owner. A Put of a key whose Put is
// still held is the owner's to park: it is, and is stored once the first resolved.
func TestLedgerPutDecidedInItsOwnGoroutine(t *testing.T) {
	s, l := openLedgerPair(t, t.TempDir(), nil)
	ctx := context.Background()
	for i := range 20 {
		err := s.PutCarried(ctx, gcRec("a", fmt.Sprintf("resp_%05d", i), 10), Limits{MaxCount: 100}, func(sd ledger.Side) {
			if err := l.settle(sd); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := s.ownerDecided.Load(); n != 0 {
		t.Fatalf("the owner decided %d of 20 Puts; want none: each is decided in its own goroutine", n)
	}
	// A Put of a key held by another: the owner parks it until that one is published.
	inCarry, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.PutCarried(ctx, gcRec("a", "resp_same", 10), Limits{}, func(sd ledger.Side) {
			close(inCarry)
			<-release
			if err := l.settle(sd); err != nil {
				t.Error(err)
			}
		})
	}()
	<-inCarry // held
	second := make(chan error, 1)
	go func() {
		second <- s.PutCarried(ctx, gcRec("a", "resp_same", 20), Limits{}, func(sd ledger.Side) {
			if err := l.settle(sd); err != nil {
				t.Error(err)
			}
		})
	}()
	select {
	case err := <-second:
		t.Fatalf("a Put of a held key returned (%v) before the held one was written", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := s.ownerDecided.Load(); n != 1 {
		t.Fatalf("the owner decided %d Puts; want 1 (the Put parked behind its key)", n)
	}
	got, err := s.Get(ctx, "a", "resp_same", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := gcRec("a", "resp_same", 20); len(got.Response) != len(want.Response) {
		t.Fatalf("stored response of %d bytes; want the second Put's %d", len(got.Response), len(want.Response))
	}
}

// TestLedgerExclusiveWriteHoldsPutsBack: while the owner runs a write that needs no
// Put held (a Delete, a sweep: exec), a Put is not decided in its own goroutine
// either: it waits for the write, then is stored.
func TestLedgerExclusiveWriteHoldsPutsBack(t *testing.T) {
	s, l := openLedgerPair(t, t.TempDir(), nil)
	ctx := context.Background()
	inWrite, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // a failure below must not leave the owner in the write
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.exec(ctx, func() error {
			close(inWrite)
			<-release
			return nil
		})
	}()
	<-inWrite
	put := make(chan error, 1)
	go func() {
		put <- s.PutCarried(ctx, gcRec("a", "resp_00001", 10), Limits{}, func(sd ledger.Side) {
			if err := l.settle(sd); err != nil {
				t.Error(err)
			}
		})
	}()
	time.Sleep(50 * time.Millisecond)
	s.mu.RLock()
	held := s.held
	s.mu.RUnlock()
	select {
	case err := <-put:
		t.Fatalf("a Put returned (%v) during an exclusive write", err)
	default:
	}
	if held != 0 {
		t.Fatalf("%d Puts held during an exclusive write; want none", held)
	}
	once.Do(func() { close(release) })
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a", "resp_00001", time.Now()); err != nil {
		t.Fatal(err)
	}
	// And after Close, a Put is ErrClosed, not decided.
	l.close()
	s.Close()
	if err := s.PutCarried(ctx, gcRec("a", "resp_00002", 10), Limits{}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v; want ErrClosed", err)
	}
}

// TestLedgerWakesApplierOncePerQueue: in ledger mode a written Put wakes the applier
// only when the applier's queue was empty (it then keeps its own time, and reads the
// queue whenever it wakes): 30 Puts written before a commit wake it once, and a
// commit asked for (ApplySides, as the ledger's applies do) still takes all 30.
func TestLedgerWakesApplierOncePerQueue(t *testing.T) {
	s, l := openLedgerPair(t, t.TempDir(), nil) // the applier commits only when asked
	ctx := context.Background()
	for i := range 30 {
		err := s.PutCarried(ctx, gcRec("a", fmt.Sprintf("resp_%05d", i), 10), Limits{}, func(sd ledger.Side) {
			if err := l.settle(sd); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := s.kicks.Load(); n != 1 {
		t.Fatalf("30 written Puts woke the applier %d times; want 1", n)
	}
	if err := s.ApplySides(); err != nil {
		t.Fatal(err)
	}
	s.qmu.Lock()
	left := len(s.queue)
	s.qmu.Unlock()
	if left != 0 || s.applied.Load() != s.written.Load() {
		t.Fatalf("after ApplySides: %d Puts queued, applied seq %d of %d", left, s.applied.Load(), s.written.Load())
	}
	// The queue empty again, the next written Put wakes it.
	if err := s.PutCarried(ctx, gcRec("a", "resp_next", 10), Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if n := s.kicks.Load(); n != 2 {
		t.Fatalf("a Put after the commit: %d wakes in all; want 2", n)
	}
}
