package gateway

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/tenancy"
)

// Allocation budgets of the per-token and per-request hot paths.
func TestAllocs(t *testing.T) {
	in := input{kind: kindChat, usage: true}
	out := chatCodec.newOutput(&outMeta{Meta: core.Meta{ReqID: "req_1", Model: "tiny", Created: 1}, in: &in})
	ev := &outEvent{Kind: outText, Text: "hello \"world\"\n"}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() {
		buf = out.AppendEvent(buf[:0], ev)
	}); n != 0 {
		t.Errorf("chat output's appendEvent: %v allocs per token, want 0", n)
	}
	chunk := []byte(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}`)
	var ci chunkInfo
	if n := testing.AllocsPerRun(100, func() {
		upstreamChunk(chunk, &ci)
	}); n != 0 && !raceEnabled { // its decoder is pooled: the race detector drops pooled items at random
		t.Errorf("upstreamChunk: %v allocs per chunk, want 0", n)
	}
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _, _ := store.CreateKey("t", time.Now())
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := store.Authenticate(key); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Authenticate: %v allocs, want 0", n)
	}
}
