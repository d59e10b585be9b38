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
	// A non-empty beat shows the request's steps once it has settled (Running 0: a beat
	// taken while the runner was still finishing it may come first, and the settling
	// changes the status once more); after it the beats are empty again.
	status := func(payload []byte) engine.ModelStatus {
		t.Helper()
		var sts []engine.ModelStatus
		if err := json.Unmarshal(payload, &sts); err != nil || len(sts) != 1 {
			t.Fatalf("beat payload %q: %v", payload, err)
		}
		return sts[0]
	}
	settled := false
	for i := 0; i < 50 && !settled; i++ {
		if p := beat(); len(p) > 0 {
			st := status(p)
			settled = st.Steps > 0 && st.Running == 0 && st.Queued == 0
		}
	}
	if !settled {
		t.Fatal("no beat carried the request's steps, settled")
	}
	// The settled counters may still move once (the KV cache's and the last step's
	// bookkeeping after the stream's end); within a few beats they are quiet and the
	// beats stay empty.
	empty = 0
	for i := 0; i < 20 && empty < 3; i++ {
		if p := beat(); len(p) == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	if empty < 3 {
		t.Error("the beats after the request settled do not become empty")
	}
}
