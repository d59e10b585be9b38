package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/internal/testenv"
)

// TestLeases: two models whose memory fits only one at a time. A request for the
// higher-priority one unloads the idle lower-priority one; a request for the lower
// one then fails fast (the other is of higher priority); a stale lease of a dead
// process blocks loads until GC expires it.
func TestLeases(t *testing.T) {
	path := testenv.SharedFile(t, "models/stories260K.gguf")
	store := &lease.Memory{}
	mcs := []ModelConfig{
		{ID: "low", Path: path, MaxModelLen: 256, Priority: 0},
		{ID: "high", Path: path, MaxModelLen: 256, Priority: 1},
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

	b, err := New(Config{Models: mcs, MemoryBudget: one * 3 / 2, Leases: store, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	// At start both try to load; one wins, the other stays unloaded (not failed).
	waitFor(t, func() bool { return b.Ready() && loaded(b) == 1 })
	run := func(id string) error {
		s, err := b.Generate(ctx, id, Request{Prompt: []int32{1}, MaxTokens: 3})
		if err != nil {
			return err
		}
		for range s.Tokens {
		}
		_, err = s.Wait(ctx)
		return err
	}
	if err := run("low"); err != nil && !errors.Is(err, ErrNoMemory) {
		t.Fatal(err)
	}
	b.call(func() { b.heartbeat(time.Now()) }) // the loaded model is idle now (on the janitor: its state)
	if err := run("high"); err != nil {
		t.Fatalf("high priority: %v", err)
	}
	if st := state(b); st["high"] != StateReady || st["low"] != StateUnloaded {
		t.Fatalf("after the high-priority request: %v", st)
	}
	b.call(func() { b.heartbeat(time.Now()) })
	err = run("low")
	var nm *lease.NoMemoryError
	if !errors.Is(err, ErrNoMemory) || !errors.As(err, &nm) || nm.Budget != one*3/2 {
		t.Fatalf("low priority while high is loaded: %v", err)
	}
	if st := state(b); st["high"] != StateReady || st["low"] != StateUnloaded || !b.Ready() {
		t.Fatalf("after the refusal: %v", st)
	}

	// A dead process's lease (no heartbeat for its TTL) blocks the room until GC.
	if err := b.Unload("high"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Acquire(ctx, time.Now().Add(-time.Hour), lease.Lease{Device: lease.HostDevice, Holder: "x@dead",
		Bytes: one, Priority: 9, TTL: time.Minute}, one*3/2); err != nil {
		t.Fatal(err)
	}
	if ls, _ := store.List(ctx, time.Now().Add(-time.Hour), lease.HostDevice); len(ls) != 1 {
		t.Fatalf("leases %v", ls)
	}
	b.GC()
	if err := run("low"); err != nil {
		t.Fatalf("after GC: %v", err)
	}
	if ls, _ := store.List(ctx, time.Now(), lease.HostDevice); len(ls) != 1 || ls[0].Holder != "low@"+b.proc {
		t.Fatalf("leases after GC and a load: %+v", ls)
	}
}

func loaded(b *Block) int {
	n := 0
	for _, st := range b.Models() {
		if st.State == StateReady {
			n++
		}
	}
	return n
}

func state(b *Block) map[string]ModelState {
	m := map[string]ModelState{}
	for _, st := range b.Models() {
		m[st.ID] = st.State
	}
	return m
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
	}
}
