package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestAdapterRoom: the decision of which idle adapters make room, least recently
// used first, never one in use or one the request needs.
func TestAdapterRoom(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	uses := []adapterUse{
		{ID: "a", Loaded: true, LastUsed: at(3), Bytes: 10},
		{ID: "b", Loaded: true, LastUsed: at(1), Bytes: 10},
		{ID: "c", Loaded: true, Active: 1, LastUsed: at(0), Bytes: 10},
		{ID: "d", Bytes: 10},
		{ID: "e", Loaded: true, LastUsed: at(1), Bytes: 10},
	}
	for _, c := range []struct {
		name   string
		need   []string
		budget int64
		evict  []string
		ok     bool
	}{
		{"fits", []string{"d"}, 50, nil, true},
		{"least recently used first, ties by id", []string{"d"}, 40, []string{"b"}, true},
		{"two", []string{"d"}, 30, []string{"b", "e"}, true},
		{"never the one in use", []string{"d"}, 20, []string{"b", "e", "a"}, true},
		{"no room beside the one in use", []string{"d"}, 10, []string{"b", "e", "a"}, false},
		{"loaded and needed stays", []string{"b"}, 20, []string{"e", "a"}, true},
		{"two needed", []string{"d", "b"}, 30, []string{"e", "a"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			evict, ok := adapterRoom(uses, c.need, c.budget)
			if ok != c.ok || !slices.Equal(evict, c.evict) {
				t.Fatalf("adapterRoom = %v, %v; want %v, %v", evict, ok, c.evict, c.ok)
			}
		})
	}
}

// TestIdleAdapters: loaded, unused adapters idle for the timeout, none for a
// negative timeout.
func TestIdleAdapters(t *testing.T) {
	now := time.Unix(1000, 0)
	uses := []adapterUse{
		{ID: "old", Loaded: true, LastUsed: now.Add(-time.Hour)},
		{ID: "just", Loaded: true, LastUsed: now.Add(-time.Minute)},
		{ID: "recent", Loaded: true, LastUsed: now.Add(-time.Second)},
		{ID: "busy", Loaded: true, Active: 2, LastUsed: now.Add(-time.Hour)},
		{ID: "unloaded", LastUsed: now.Add(-time.Hour)},
	}
	if got := idleAdapters(uses, now, time.Minute); !slices.Equal(got, []string{"old", "just"}) {
		t.Errorf("idle after a minute: %v", got)
	}
	if got := idleAdapters(uses, now, -1); got != nil {
		t.Errorf("never idle: %v", got)
	}
}

// adapterStates is each adapter's state in b.
func adapterStates(b *Block) map[string]string {
	out := map[string]string{}
	for _, st := range b.Adapters() {
		out[st.ID] = st.State
	}
	return out
}

// TestAdaptersOnDemandLRU: adapters load on their first request, not with the
// model; within an adapter_memory of two adapters a third unloads the least
// recently used; the request on an unloaded adapter gives the same tokens as
// before; idle adapters unload after the model's idle timeout while the model,
// used on its own, stays (explicit clock);
// LoadAdapter and UnloadAdapter work for the operator, and the model leases the
// budget, not every adapter.
func TestAdaptersOnDemandLRU(t *testing.T) {
	clk := newTestClock()
	b0 := adapterBlock(t, ModelConfig{MaxModelLen: 128}, 3)
	one := b0.Adapters()[0].Bytes
	b0.Close()
	b := adapterBlockWith(t, ModelConfig{MaxModelLen: 128, AdapterMemory: 2 * one, IdleTimeout: time.Hour}, Config{Clock: clk.Now}, 3)
	if got := adapterStates(b); got["a0"] != AdapterUnloaded || got["a1"] != AdapterUnloaded || got["a2"] != AdapterUnloaded {
		t.Fatalf("adapters loaded with the model: %v", got)
	}
	in := b.models["m"]
	if want := in.fileSize + 2*one + int64(in.cfg.Replicas)*in.kvSize; in.leaseBytes() != want {
		t.Errorf("lease %d bytes, want the weights, KV and 2 adapters: %d", in.leaseBytes(), want)
	}
	p := []int32{1, 50, 60, 70}
	run := func(id string) result {
		t.Helper()
		clk.Add(time.Second)
		r := generate(b, Request{Prompt: p, MaxTokens: 5, Adapters: []string{id}})
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r
	}
	first := run("a0")
	run("a1")
	if got := adapterStates(b); got["a0"] != AdapterLoaded || got["a1"] != AdapterLoaded || got["a2"] != AdapterUnloaded {
		t.Fatalf("after a0, a1: %v", got)
	}
	run("a0") // a1 is now the least recently used
	run("a2")
	if got := adapterStates(b); got["a0"] != AdapterLoaded || got["a1"] != AdapterUnloaded || got["a2"] != AdapterLoaded {
		t.Fatalf("after a0, a1, a0, a2 within two adapters' memory: %v, want a1 unloaded", got)
	}
	run("a1") // evicts a0
	if err := first.same(run("a0")); err != nil {
		t.Errorf("a0 loaded again: %v", err)
	}
	clk.Add(59 * time.Minute)
	b.sweep()
	if got := adapterStates(b); got["a0"] != AdapterLoaded {
		t.Fatalf("unloaded before the idle timeout: %v", got)
	}
	if r := generate(b, Request{Prompt: p, MaxTokens: 2}); r.err != nil { // the bare base keeps the model in use
		t.Fatal(r.err)
	}
	clk.Add(2 * time.Minute)
	b.sweep()
	if got := adapterStates(b); got["a0"] != AdapterUnloaded || got["a1"] != AdapterUnloaded {
		t.Fatalf("after the idle timeout: %v", got)
	}
	if s := b.Models()[0].State; s != StateReady {
		t.Fatalf("the model went with its adapters: %s", s)
	}
	if err := b.LoadAdapter(context.Background(), "m", "a2"); err != nil || adapterStates(b)["a2"] != AdapterLoaded {
		t.Fatalf("LoadAdapter: %v, %v", err, adapterStates(b))
	}
	if err := b.UnloadAdapter("m", "a2"); err != nil || adapterStates(b)["a2"] != AdapterUnloaded {
		t.Fatalf("UnloadAdapter: %v, %v", err, adapterStates(b))
	}
	if err := b.LoadAdapter(context.Background(), "m", "zz"); !errors.Is(err, ErrUnknownAdapter) {
		t.Errorf("LoadAdapter of an unknown adapter: %v", err)
	}
	var loads uint64
	for _, st := range b.Adapters() {
		loads += st.Loads
	}
	if loads != 6 {
		t.Errorf("%d adapter loads, want 6 (a0, a1, a2, a1, a0, a2)", loads)
	}
}

// TestAdapterBusyNotEvicted: an adapter a running request uses is neither evicted
// for room (the request that needs the room is refused with ErrNoMemory) nor
// unloaded by the operator (ErrAdapterBusy).
func TestAdapterBusyNotEvicted(t *testing.T) {
	b0 := adapterBlock(t, ModelConfig{MaxModelLen: 128}, 2)
	one := b0.Adapters()[0].Bytes
	b0.Close()
	b := adapterBlockWith(t, ModelConfig{MaxModelLen: 512, AdapterMemory: one}, Config{}, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := b.Generate(ctx, "m", Request{Prompt: []int32{1, 5}, MaxTokens: 400, Adapters: []string{"a0"}})
	if err != nil {
		t.Fatal(err)
	}
	started, drained := make(chan struct{}), make(chan struct{})
	go func() {
		n := 0
		for range s.Tokens {
			if n++; n == 1 {
				close(started)
			}
		}
		close(drained)
	}()
	<-started // running: a0 is in use
	if err := b.UnloadAdapter("m", "a0"); !errors.Is(err, ErrAdapterBusy) {
		t.Errorf("unloading a busy adapter: %v", err)
	}
	if r := generate(b, Request{Prompt: []int32{1, 5}, MaxTokens: 2, Adapters: []string{"a1"}}); !errors.Is(r.err, ErrNoMemory) {
		t.Errorf("a request needing the busy adapter's room: %v, want ErrNoMemory", r.err)
	}
	cancel()
	<-drained
	s.Wait(context.Background())
	if r := generate(b, Request{Prompt: []int32{1, 5}, MaxTokens: 2, Adapters: []string{"a1"}}); r.err != nil {
		t.Errorf("after the first request ended: %v", r.err)
	}
}
