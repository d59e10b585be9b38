package worker

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// TestBeatCarriesStatusOnlyWhenChanged: a worker beats on every interval, but the
// beat carries the models' status only when it changed since the last beat: an idle
// worker's beats are empty (nothing for the parent to decode), and the first beat
// after a request carries the new counters.
func TestBeatCarriesStatusOnlyWhenChanged(t *testing.T) {
	b, err := engine.New(engine.Config{Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	parent, child := net.Pipe()
	defer parent.Close()
	go Serve(child, b, 20*time.Millisecond)
	r := newReader(parent)
	// beat reads frames up to the next beat and returns its payload.
	beat := func() []byte {
		t.Helper()
		parent.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			fr, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			if fr.typ == fBeat {
				return fr.payload
			}
		}
	}
	steps := func(payload []byte) uint64 {
		t.Helper()
		var sts []engine.ModelStatus
		if err := json.Unmarshal(payload, &sts); err != nil || len(sts) != 1 {
			t.Fatalf("beat payload %q: %v", payload, err)
		}
		return sts[0].Steps
	}
	// The model loads at start (its state changes a few times); then it is idle and
	// five beats in a row are empty.
	empty := 0
	for i := 0; i < 100 && empty < 5; i++ {
		if p := beat(); len(p) == 0 {
			empty++
		} else {
			empty = 0
			steps(p)
		}
	}
	if empty < 5 {
		t.Fatal("an idle worker's beats are not empty")
	}
	st, err := b.Generate(context.Background(), "a", engine.Request{Prompt: []int32{1, 2}, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The next non-empty beat (the load may change the status more than once) shows
	// the request's steps; after it the beats are empty again.
	var got uint64
	for i := 0; i < 50 && got == 0; i++ {
		if p := beat(); len(p) > 0 {
			got = steps(p)
		}
	}
	if got == 0 {
		t.Fatal("no beat carried the request's steps")
	}
	for i := 0; i < 3; i++ {
		if p := beat(); len(p) != 0 {
			t.Errorf("beat %d after the request settled carries %q, want empty", i, p)
		}
	}
}
