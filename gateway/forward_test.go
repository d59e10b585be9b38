package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/registry"
	"github.com/lmlite/lmlite/tenancy"
)

const peerA = `
ledger: {sync: process}
models:
  - {id: tiny, path: tiny.gguf, max_model_len: 512, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers: {fast: [{model: tiny}]}
plans: {open: {}, small: {allowed_models: [tiny], allowed_tiers: [fast]}}
tenants: [{id: acme, plan: open}, {id: small, plan: small}]
`

const peerB = `
ledger: {sync: process}
models:
  - {id: big, path: big.gguf, max_model_len: 512, prompt_usd_per_1k: 0.01, completion_usd_per_1k: 0.03}
tiers: {deep: [{model: big}]}
plans: {open: {}, small: {allowed_tiers: [fast]}}
tenants: [{id: acme, plan: open}, {id: small, plan: small}]
`

// peer is one gateway announcing itself in a shared registry. The peers of a test
// share one tenancy store (keys and ledger), as processes sharing a Redis share keys;
// each has its own Tenancy.
type peer struct {
	srv *Server
	eng *fakeEngine
	url string
	k   *registry.Keeper
}

func startPeer(t *testing.T, yaml, id string, eng *fakeEngine, store *tenancy.Store, st registry.Store) *peer {
	t.Helper()
	return startPeerWith(t, yaml, id, eng, store, st, 0)
}

// startPeerWith is startPeer with a time to first byte for its forwards (0: the default).
func startPeerWith(t *testing.T, yaml, id string, eng *fakeEngine, store *tenancy.Store, st registry.Store, firstByte time.Duration) *peer {
	t.Helper()
	return startPeerBounds(t, yaml, id, eng, store, st, firstByte, 0)
}

// startPeerBounds is startPeer with a time to first byte and an idle bound for its
// forwards (0: the defaults).
func startPeerBounds(t *testing.T, yaml, id string, eng *fakeEngine, store *tenancy.Store, st registry.Store, firstByte, idle time.Duration) *peer {
	t.Helper()
	cfg, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k := registry.NewKeeper(st, registry.KeeperOptions{TTL: 300 * time.Millisecond})
	srv, err := New(mustGatewayConfig(t, cfg), eng, tenancy.New(store),
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Peers: k, NodeID: id, ForwardFirstByte: firstByte, ForwardIdle: idle})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{srv: srv, eng: eng, url: "http://" + ln.Addr().String(), k: k}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	k.Start(func() registry.Node {
		return registry.Node{ID: id, Addr: p.url, Models: srv.RegistryModels(), InFlight: srv.InFlight()}
	})
	t.Cleanup(func() {
		k.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return p
}

// twoPeers starts A (serving tiny) and B (serving big) and waits until each sees the
// other (A sees B at its start).
func twoPeers(t *testing.T) (a, b *peer, store *tenancy.Store, keys map[string]string) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	b = startPeer(t, peerB, "b", newFakeEngineWith("big"), store, reg)
	a = startPeer(t, peerA, "a", newFakeEngineWith("tiny"), store, reg)
	for deadline := time.Now().Add(5 * time.Second); len(b.k.Nodes()) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B never saw A")
		}
	}
	keys = map[string]string{}
	for _, tn := range []string{"acme", "small"} {
		if keys[tn], _, err = store.CreateKey(tn, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, store, keys
}

func ledgerOf(store *tenancy.Store) []tenancy.Entry {
	var out []tenancy.Entry
	store.Ledger(func(e tenancy.Entry) error { out = append(out, e); return nil })
	return out
}

// TestForwardToTheNodeServingTheModel: A does not serve big; B does. A request for big
// sent to A answers from B (the same body a client gets from B), is charged once (one
// ledger entry, by B), and the tenant's plan is B's to apply.
func TestForwardToTheNodeServingTheModel(t *testing.T) {
	a, b, store, keys := twoPeers(t)
	body := `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 5}`
	ts := &testServer{t: t, url: a.url}
	resp, got := ts.post("/v1/chat/completions", keys["acme"], body, "X-Request-Id", "fwd-1")
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" || resp.Header.Get("X-Request-Id") != "fwd-1" ||
		resp.Header.Get("X-LMLite-Tier") != "deep" || !strings.Contains(got, `"model":"big"`) || !strings.Contains(got, "w4") {
		t.Fatalf("through A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if a.eng.started.Load() != 0 || b.eng.started.Load() != 1 {
		t.Fatalf("generations: A %d, B %d", a.eng.started.Load(), b.eng.started.Load())
	}
	es := ledgerOf(store)
	if len(es) != 1 || es[0].Model != "big" || es[0].Status != 200 || es[0].Cost <= 0 || es[0].ClientRequestID != "fwd-1" {
		t.Fatalf("ledger %+v", es)
	}
	// tiny is A's own: served there, not forwarded.
	resp, got = ts.post("/v1/chat/completions", keys["acme"], `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "" || a.eng.started.Load() != 1 {
		t.Fatalf("tiny on A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	// B's plan decides: "small" may not use big, and B says so (404, as for an unknown model).
	resp, got = ts.post("/v1/chat/completions", keys["small"], body)
	if resp.StatusCode != 404 || resp.Header.Get("X-LMLite-Node") != "b" || !strings.Contains(got, "model_not_found") {
		t.Fatalf("small asking big: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	// A bad key is refused by A, without a hop.
	resp, _ = ts.post("/v1/chat/completions", "lml_bad", body)
	if resp.StatusCode != 401 || resp.Header.Get("X-LMLite-Node") != "" {
		t.Fatalf("bad key: %d %v", resp.StatusCode, resp.Header)
	}
	// A model nobody serves: A's own 404.
	resp, got = ts.post("/v1/chat/completions", keys["acme"], `{"model": "nope", "messages": [{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 404 || resp.Header.Get("X-LMLite-Node") != "" || !strings.Contains(got, "model_not_found") {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, got)
	}
	// A request marked as forwarded is never forwarded again (no loops).
	resp, _ = ts.post("/v1/chat/completions", keys["acme"], body, ForwardedHeader, "z")
	if resp.StatusCode != 404 {
		t.Fatalf("a forwarded request forwarded again: %d", resp.StatusCode)
	}
	// big once, tiny once: nothing else charged (the 404s of requests admitted on
	// the process they reached before their bodies were read are ledgered at no cost).
	charged := 0
	for _, e := range ledgerOf(store) {
		switch {
		case e.Cost > 0:
			charged++
		case e.Status != 404:
			t.Fatalf("ledger %+v", ledgerOf(store))
		}
	}
	if charged != 2 {
		t.Fatalf("ledger %+v", ledgerOf(store))
	}
}

// TestForwardStreams: a stream through A arrives token by token (the first token is
// read while B is still generating) and a client that leaves A cancels the generation
// on B, which ledgers it once with status 499.
func TestForwardStreams(t *testing.T) {
	a, b, store, keys := twoPeers(t)
	b.eng.Delay = 10 * time.Millisecond
	conn, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 400, "stream": true}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		keys["acme"], len(body), body)
	rd := bufio.NewReader(conn)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"content":"w0 "`) {
			break
		}
	}
	if b.eng.cancels.Load() != 0 || len(ledgerOf(store)) != 0 {
		t.Fatal("the first token came after the generation ended")
	}
	conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for b.eng.cancels.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if b.eng.cancels.Load() != 1 {
		t.Fatal("the generation on B was not cancelled when the client left A")
	}
	for time.Now().Before(deadline) {
		if es := ledgerOf(store); len(es) == 1 {
			if es[0].Status != 499 || es[0].CompletionTokens >= 400 {
				t.Fatalf("ledger %+v", es[0])
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(ledgerOf(store)) != 1 {
		t.Fatalf("ledger %+v", ledgerOf(store))
	}

	// A whole stream through A with the official SDK.
	ts := &testServer{t: t, url: a.url, keys: keys}
	c := ts.client("acme")
	b.eng.Delay = 0
	s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(4)})
	var text strings.Builder
	for s.Next() {
		if ch := s.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := s.Err(); err != nil || text.String() != "w0 w1 w2 w3 " {
		t.Fatalf("SDK stream through A: %q %v", text.String(), err)
	}
	if a.eng.started.Load() != 0 {
		t.Fatal("A generated")
	}
}

// TestModelsUnion: /v1/models on either node lists the models of both, with their
// state and the nodes serving them, filtered by the tenant's plan; a node that stops
// announcing drops out within its TTL.
func TestModelsUnion(t *testing.T) {
	a, b, _, keys := twoPeers(t)
	type entry struct {
		ID     string
		LMLite struct {
			State string
			Nodes []string
		}
	}
	list := func(p *peer, tenant string) map[string]entry {
		ts := &testServer{t: t, url: p.url}
		resp, body := ts.get("/v1/models", keys[tenant])
		var l struct{ Data []entry }
		if err := json.Unmarshal([]byte(body), &l); resp.StatusCode != 200 || err != nil {
			t.Fatalf("%d %s %v", resp.StatusCode, body, err)
		}
		out := map[string]entry{}
		for _, e := range l.Data {
			out[e.ID] = e
		}
		return out
	}
	for _, p := range []*peer{a, b} {
		got := list(p, "acme")
		if len(got) != 2 || got["tiny"].LMLite.State != "ready" || got["big"].LMLite.State != "ready" ||
			fmt.Sprint(got["tiny"].LMLite.Nodes) != "[a]" || fmt.Sprint(got["big"].LMLite.Nodes) != "[b]" {
			t.Fatalf("models on %s: %+v", p.url, got)
		}
		if got := list(p, "small"); len(got) != 1 || got["tiny"].ID == "" {
			t.Fatalf("small's models on %s: %+v", p.url, got)
		}
	}
	ts := &testServer{t: t, url: a.url}
	if resp, body := ts.get("/v1/models/big", keys["acme"]); resp.StatusCode != 200 || !strings.Contains(body, `"nodes":["b"]`) {
		t.Fatalf("/v1/models/big on A: %d %s", resp.StatusCode, body)
	}
	if resp, _ := ts.get("/v1/models/big", keys["small"]); resp.StatusCode != 404 {
		t.Fatalf("/v1/models/big for small on A: %d", resp.StatusCode)
	}
	// B stops announcing and withdraws: gone from A's list at A's next refresh (a
	// killed node's announcement expires instead: registry's tests).
	b.k.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, ok := list(a, "acme")["big"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B's model still listed on A")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForwardWhenScaledToZeroHere: A and B both serve tiny; while A has it unloaded
// (scaled to zero, or refused its memory because another process's lease holds it)
// and B has it ready, A forwards instead of loading; once A has it again, A serves.
func TestForwardWhenScaledToZeroHere(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	unloaded := engine.StateUnloaded
	aEng := newFakeEngineWith("tiny")
	aEng.state.Store(&unloaded)
	b := startPeer(t, peerA, "b", newFakeEngineWith("tiny"), store, reg)
	a := startPeer(t, peerA, "a", aEng, store, reg)
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, url: a.url}
	body := `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`
	resp, got := ts.post("/v1/chat/completions", key, body)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" || a.eng.started.Load() != 0 || b.eng.started.Load() != 1 {
		t.Fatalf("tiny unloaded on A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	ready := engine.StateReady
	aEng.state.Store(&ready)
	for deadline := time.Now().Add(5 * time.Second); a.srv.localState("tiny") != registry.StateReady; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A never announced tiny ready")
		}
	}
	resp, got = ts.post("/v1/chat/completions", key, body)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "" || a.eng.started.Load() != 1 {
		t.Fatalf("tiny ready on A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if n := len(ledgerOf(store)); n != 2 {
		t.Fatalf("%d ledger entries for 2 requests", n)
	}
}

// TestForwardSkipsADrainingNode: B and C serve big; B (chosen first: the smaller id)
// is draining and answers 503 shutting_down, so A tries C, and the client never sees
// B's refusal.
func TestForwardSkipsADrainingNode(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	b := startPeer(t, peerB, "b", newFakeEngineWith("big"), store, reg)
	c := startPeer(t, peerB, "c", newFakeEngineWith("big"), store, reg)
	a := startPeer(t, peerA, "a", newFakeEngineWith("tiny"), store, reg)
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, url: a.url}
	body := `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`
	if resp, got := ts.post("/v1/chat/completions", key, body); resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" {
		t.Fatalf("before the drain: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	b.srv.draining.Store(true) // as Shutdown does first; its announcement is still in A's snapshot
	resp, got := ts.post("/v1/chat/completions", key, body)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "c" || c.eng.started.Load() != 1 || b.eng.started.Load() != 1 {
		t.Fatalf("B draining: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	b.srv.draining.Store(false)
}

// TestForwardedRequestOnALostNode: B and C serve big, slowly. B starts draining
// (announced) while a request forwarded by A runs on it: the request runs to the end.
// C stops announcing (as a hung or killed process does) while a request forwarded by
// A runs on it: A cuts the connection once C's announcement is gone from its snapshot
// and answers 502 node_lost with Retry-After, without sending it elsewhere.
func TestForwardedRequestOnALostNode(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	slow := func() *fakeEngine { e := newFakeEngineWith("big"); e.Delay = 150 * time.Millisecond; return e }
	b := startPeer(t, peerB, "b", slow(), store, reg)
	c := startPeer(t, peerB, "c", slow(), store, reg)
	a := startPeer(t, peerA, "a", newFakeEngineWith("tiny"), store, reg)
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, url: a.url}
	body := `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 5}` // 750 ms, over twice the 300 ms TTL

	go func() { time.Sleep(100 * time.Millisecond); b.k.Drain(5 * time.Second) }()
	if resp, got := ts.post("/v1/chat/completions", key, body); resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" {
		t.Fatalf("forwarded to a node that started draining: %d %v %s", resp.StatusCode, resp.Header, got)
	}

	go func() { time.Sleep(100 * time.Millisecond); c.k.Close() }()
	resp, got := ts.post("/v1/chat/completions", key, body) // a 200 would mean it ran to the end
	var e struct{ Error struct{ Type, Code string } }
	json.Unmarshal([]byte(got), &e)
	if resp.StatusCode != 502 || resp.Header.Get("Retry-After") != "1" || e.Error.Code != "node_lost" || e.Error.Type != "server_error" {
		t.Fatalf("forwarded to a node that stopped announcing: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if b.eng.started.Load() != 1 || c.eng.started.Load() != 1 {
		t.Fatalf("started on b %d, on c %d: want one each (a lost request is not sent again)", b.eng.started.Load(), c.eng.started.Load())
	}
}

// TestForwardTierToTheNodeWithIt: A has only a fast tier, B only a deep one. A
// request for the deep tier sent to A (by model "tier:deep" or the X-LMLite-Tier
// header) is served by B's big, charged once (by B); "auto" in the balanced mode steps
// down to A's own fast tier without a hop; a plan without the deep tier is refused
// by A itself.
func TestForwardTierToTheNodeWithIt(t *testing.T) {
	a, b, store, keys := twoPeers(t)
	ts := &testServer{t: t, url: a.url}
	for _, c := range []struct{ model, hdr string }{{"tier:deep", ""}, {"auto", "deep"}} {
		var hdr []string
		if c.hdr != "" {
			hdr = []string{"X-LMLite-Tier", c.hdr}
		}
		resp, got := ts.post("/v1/chat/completions", keys["acme"], `{"model": "`+c.model+`", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`, hdr...)
		if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" || !strings.Contains(got, `"model":"big"`) {
			t.Fatalf("%s (tier header %q) through A: %d %v %s", c.model, c.hdr, resp.StatusCode, resp.Header, got)
		}
	}
	if n := b.eng.started.Load(); n != 2 || a.eng.started.Load() != 0 || len(ledgerOf(store)) != 2 {
		t.Fatalf("started on b %d, on a %d, ledger entries %d: want 2, 0, 2", n, a.eng.started.Load(), len(ledgerOf(store)))
	}
	resp, got := ts.post("/v1/chat/completions", keys["acme"], `{"model": "auto", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "" || !strings.Contains(got, `"model":"tiny"`) {
		t.Fatalf("auto (balanced) through A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	resp, got = ts.post("/v1/chat/completions", keys["small"], `{"model": "tier:deep", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`)
	if resp.StatusCode != 403 || !strings.Contains(got, "tier_not_allowed") || b.eng.started.Load() != 2 {
		t.Fatalf("tier:deep for a plan without it: %d %s", resp.StatusCode, got)
	}
}

// sseEvent is one event of a stream as a client reads it: its name and its data.
type sseEvent struct{ name, data string }

// streamThrough posts body as a stream to path on gateway a and reads its events;
// when an event's data contains cut (if not ""), it calls onCut once.
func streamThrough(t *testing.T, a *peer, key, path, body, cut string, onCut func()) []sseEvent {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, key, len(body), body)
	rd := bufio.NewReader(conn)
	var events []sseEvent
	var name string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimRight(line, "\r\n")
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			events = append(events, sseEvent{name, d})
			name = ""
			if cut != "" && strings.Contains(d, cut) && onCut != nil {
				onCut()
				onCut = nil
			}
		}
	}
	return events
}

// forwardedStreamCases are a stream in each API lmlite serves, as the client writes
// it, and how each API says an error happened in the middle of its stream: checkErr
// checks the events that end a stream which broke after evs (nil: ok), done those
// of a complete stream.
var forwardedStreamCases = []struct {
	name, path, body string
	broken           func(evs []sseEvent) error
	complete         func(evs []sseEvent) error
}{
	{"chat", "/v1/chat/completions", `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": %d, "stream": true}`,
		func(evs []sseEvent) error {
			// OpenAI's chat: data: {"error": {...}}, then data: [DONE].
			if len(evs) < 3 || evs[len(evs)-1].data != "[DONE]" {
				return fmt.Errorf("no [DONE] at the end")
			}
			var e struct {
				Error struct{ Type, Code, Message string }
			}
			if err := json.Unmarshal([]byte(evs[len(evs)-2].data), &e); err != nil || e.Error.Code != "node_lost" || e.Error.Type != "server_error" {
				return fmt.Errorf("the event before [DONE]: %s (%v)", evs[len(evs)-2].data, err)
			}
			return nil
		},
		func(evs []sseEvent) error {
			if evs[len(evs)-1].data != "[DONE]" {
				return fmt.Errorf("no [DONE] at the end")
			}
			return nil
		}},
	{"responses", "/v1/responses", `{"model": "big", "input": "x", "max_output_tokens": %d, "stream": true}`,
		func(evs []sseEvent) error {
			// OpenAI's Responses: event: error, {"type":"error","code","message",
			// "param","sequence_number"}, numbered after the events before it; no
			// [DONE] (the Responses API has none).
			last := evs[len(evs)-1]
			var e struct {
				Type, Code, Message string
				Seq                 *int `json:"sequence_number"`
			}
			if err := json.Unmarshal([]byte(last.data), &e); err != nil || last.name != "error" || e.Type != "error" || e.Code != "node_lost" ||
				e.Message == "" || e.Seq == nil || *e.Seq != len(evs)-1 {
				return fmt.Errorf("the last event: %q %s (%v)", last.name, last.data, err)
			}
			for _, ev := range evs {
				if ev.data == "[DONE]" || strings.HasPrefix(ev.data, `{"error"`) {
					return fmt.Errorf("an event of OpenAI's chat shape: %s", ev.data)
				}
			}
			return nil
		},
		func(evs []sseEvent) error {
			if evs[len(evs)-1].name != "response.completed" && evs[len(evs)-1].name != "response.incomplete" {
				return fmt.Errorf("the last event is %q", evs[len(evs)-1].name)
			}
			return nil
		}},
	{"messages", "/v1/messages", `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": %d, "stream": true}`,
		func(evs []sseEvent) error {
			// Anthropic's: event: error, {"type":"error","error":{"type","message"}},
			// and nothing after it (no message_stop).
			last := evs[len(evs)-1]
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal([]byte(last.data), &e); err != nil || last.name != "error" || e.Type != "error" ||
				e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "stopped answering") {
				return fmt.Errorf("the last event: %q %s (%v)", last.name, last.data, err)
			}
			for _, ev := range evs {
				if ev.name == "message_stop" || ev.data == "[DONE]" || strings.HasPrefix(ev.data, `{"error"`) {
					return fmt.Errorf("an event that does not belong: %q %s", ev.name, ev.data)
				}
			}
			return nil
		},
		func(evs []sseEvent) error {
			if evs[len(evs)-1].name != "message_stop" {
				return fmt.Errorf("the last event is %q", evs[len(evs)-1].name)
			}
			return nil
		}},
}

// TestForwardedStreamOnALostNode: a stream forwarded by A to B, which stops
// announcing after its first tokens (as a hung or killed process does), ends as an
// embedded stream ends on an engine failure, in the client's API: the tokens so far,
// then the error event of that API (OpenAI's chat: {"error":{...}} and [DONE];
// Responses: an error event numbered in sequence; Anthropic's Messages: event: error
// with {"type":"error","error":{...}}); and every event the client got is whole
// JSON.
func TestForwardedStreamOnALostNode(t *testing.T) {
	for _, c := range forwardedStreamCases {
		t.Run(c.name, func(t *testing.T) {
			a, b, _, keys := twoPeers(t)
			b.eng.Delay = 100 * time.Millisecond
			events := streamThrough(t, a, keys["acme"], c.path, fmt.Sprintf(c.body, 100), "w1 ", func() {
				b.k.Close() // B withdraws: gone from A's snapshot at its next refresh
			})
			if len(events) < 3 {
				t.Fatalf("events %q", events)
			}
			if err := c.broken(events); err != nil {
				t.Fatalf("%v; events %q", err, events)
			}
			for _, ev := range events {
				if ev.data != "[DONE]" && !json.Valid([]byte(ev.data)) {
					t.Fatalf("a broken event: %q", ev.data)
				}
			}
			if all := fmt.Sprint(events); strings.Contains(all, "w99 ") || strings.Contains(all, `"length"`) || strings.Contains(all, "max_tokens") {
				t.Fatal("the stream ran to its end: B was not cut")
			}
		})
	}
}

// TestForwardedStreamComplete: a stream forwarded whole, in each API, ends as that
// API ends it, with no error event added by the relay (a Messages or Responses
// stream has no [DONE]: its own last event ends it).
func TestForwardedStreamComplete(t *testing.T) {
	a, _, _, keys := twoPeers(t)
	for _, c := range forwardedStreamCases {
		t.Run(c.name, func(t *testing.T) {
			events := streamThrough(t, a, keys["acme"], c.path, fmt.Sprintf(c.body, 3), "", nil)
			if len(events) < 3 {
				t.Fatalf("events %q", events)
			}
			if err := c.complete(events); err != nil {
				t.Fatalf("%v; events %q", err, events)
			}
			for _, ev := range events {
				if ev.name == "error" || strings.Contains(ev.data, "node_lost") || strings.Contains(ev.data, "node_unresponsive") {
					t.Fatalf("an error event in a complete stream: %q", events)
				}
			}
		})
	}
}

// hangingNode announces node id serving big at the address of a listener that
// accepts connections and never answers; accepted counts them.
func hangingNode(t *testing.T, id string, reg registry.Store) (accepted *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	k := registry.NewKeeper(reg, registry.KeeperOptions{TTL: 300 * time.Millisecond})
	k.Start(func() registry.Node {
		return registry.Node{ID: id, Addr: "http://" + ln.Addr().String(), Models: []registry.Model{{ID: "big", State: registry.StateReady}}}
	})
	t.Cleanup(func() {
		k.Close()
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return accepted
}

// TestForwardToANodeThatNeverAnswers: G1 and G2 announce big (they keep announcing)
// at listeners that accept and never answer; S serves big too, slowly. A (time to
// first byte 300 ms) forwards a request to G1 first (the smallest id), then a stream
// to G2 (G1 is passed over): each ends with 502 node_unresponsive and Retry-After
// within the bound, and is not sent to S. The next requests pass both over (no new
// connection) and go to S, whose non-streamed answer takes longer than the bound and
// still arrives: the receiving process's 102 Processing is the first byte. With S
// gone, only passed-over nodes serve big: 503 model_unavailable at once, not a 404.
func TestForwardToANodeThatNeverAnswers(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	accepted := []*atomic.Int64{hangingNode(t, "g1", reg), hangingNode(t, "g2", reg)}
	slow := newFakeEngineWith("big")
	slow.Delay = 150 * time.Millisecond
	sNode := startPeer(t, peerB, "s", slow, store, reg)
	a := startPeerWith(t, peerA, "a", newFakeEngineWith("tiny"), store, reg, 300*time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); len(a.k.Nodes()) < 4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A never saw G1, G2 and S")
		}
	}
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, url: a.url}
	body := `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 5}` // 750 ms on S

	for i, stream := range []bool{false, true} { // G1 then G2 (G1 passed over)
		b := body
		if stream {
			b = strings.Replace(body, `"max_tokens"`, `"stream": true, "max_tokens"`, 1)
		}
		start := time.Now()
		resp, got := ts.post("/v1/chat/completions", key, b)
		var e struct{ Error struct{ Type, Code string } }
		json.Unmarshal([]byte(got), &e)
		if resp.StatusCode != 502 || resp.Header.Get("Retry-After") != "1" || e.Error.Code != "node_unresponsive" || e.Error.Type != "server_error" {
			t.Fatalf("stream %v to a node that never answers: %d %v %s", stream, resp.StatusCode, resp.Header, got)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("answered after %s", d)
		}
		if slow.started.Load() != 0 {
			t.Fatal("the request was sent to S as well")
		}
		if accepted[i].Load() != 1 {
			t.Fatalf("%d connections to G%d", accepted[i].Load(), i+1)
		}
	}
	for _, stream := range []bool{false, true} {
		b := body
		if stream {
			b = strings.Replace(body, `"max_tokens"`, `"stream": true, "max_tokens"`, 1)
		}
		resp, got := ts.post("/v1/chat/completions", key, b)
		if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "s" || !strings.Contains(got, "w4") {
			t.Fatalf("stream %v with G passed over: %d %v %s", stream, resp.StatusCode, resp.Header, got)
		}
	}
	if accepted[0].Load() != 1 || accepted[1].Load() != 1 {
		t.Fatalf("%d, %d connections to G1, G2: not passed over", accepted[0].Load(), accepted[1].Load())
	}
	sNode.k.Close()
	for deadline := time.Now().Add(5 * time.Second); len(a.k.Nodes()) != 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("S still in A's snapshot")
		}
	}
	resp, got := ts.post("/v1/chat/completions", key, body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(got, "model_unavailable") ||
		accepted[0].Load() != 1 || accepted[1].Load() != 1 {
		t.Fatalf("G1 and G2 alone, passed over: %d %s", resp.StatusCode, got)
	}
}

// stallingNode announces node id serving big at the address of a listener that
// answers a request as a process that stalls mid-stream does: 102 Processing, the
// headers of an event stream, three events, then nothing more, the connection held
// open (its announcement goes on). accepted counts its connections.
func stallingNode(t *testing.T, id string, reg registry.Store) (accepted *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				fmt.Fprint(c, "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				for i := range 3 {
					ev := fmt.Sprintf(`data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"big","choices":[{"index":0,"delta":{"content":"w%d "},"finish_reason":null}]}`+"\n\n", i)
					fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
					time.Sleep(20 * time.Millisecond)
				}
				// ... and nothing more: the connection stays open.
			}()
		}
	}()
	k := registry.NewKeeper(reg, registry.KeeperOptions{TTL: 300 * time.Millisecond})
	k.Start(func() registry.Node {
		return registry.Node{ID: id, Addr: "http://" + ln.Addr().String(), Models: []registry.Model{{ID: "big", State: registry.StateReady}}}
	})
	t.Cleanup(func() {
		k.Close()
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return accepted
}

// TestForwardedStreamThatStalls: G1 announces big (and keeps announcing) and stalls
// after three events of a stream; S serves big, pausing 700 ms before each token.
// A (idle bound 400 ms) forwards a stream to G1 (the smallest id): the client gets the
// three events, then one node_unresponsive error event and [DONE], within seconds,
// and the request is not sent to S. The next stream passes G1 over (no new
// connection) and goes to S: its pauses, longer than the bound, are bridged by S's
// keep-alive comments, which the client never sees; the stream runs to its end.
func TestForwardedStreamThatStalls(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	accepted := stallingNode(t, "g1", reg)
	slow := newFakeEngineWith("big")
	slow.Delay = 700 * time.Millisecond
	startPeer(t, peerB, "s", slow, store, reg)
	a := startPeerBounds(t, peerA, "a", newFakeEngineWith("tiny"), store, reg, 0, 400*time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); len(a.k.Nodes()) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A never saw G1 and S")
		}
	}
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, url: a.url}
	body := `{"model": "big", "messages": [{"role":"user","content":"x"}], "stream": true, "max_tokens": 3}`
	events := func(got string) []string {
		var out []string
		for line := range strings.SplitSeq(got, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, d)
			}
		}
		return out
	}

	start := time.Now()
	resp, got := ts.post("/v1/chat/completions", key, body)
	took := time.Since(start)
	ev := events(got)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "g1" || len(ev) != 5 || ev[4] != "[DONE]" {
		t.Fatalf("the stalled stream: %d %v %q", resp.StatusCode, resp.Header, got)
	}
	for i := range 3 {
		if !strings.Contains(ev[i], fmt.Sprintf(`"content":"w%d "`, i)) {
			t.Fatalf("event %d: %s", i, ev[i])
		}
	}
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal([]byte(ev[3]), &e); err != nil || e.Error.Code != "node_unresponsive" || e.Error.Type != "server_error" ||
		!strings.Contains(e.Error.Message, "400ms") {
		t.Fatalf("the event before [DONE]: %s (%v)", ev[3], err)
	}
	if took > 5*time.Second {
		t.Fatalf("the stalled stream ended after %s", took)
	}
	if slow.started.Load() != 0 || accepted.Load() != 1 {
		t.Fatalf("S started %d, G1 accepted %d", slow.started.Load(), accepted.Load())
	}

	resp, got = ts.post("/v1/chat/completions", key, body)
	ev = events(got)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "s" || len(ev) < 3 || ev[len(ev)-1] != "[DONE]" ||
		!strings.Contains(got, `"content":"w2 "`) || !strings.Contains(got, `"finish_reason":"length"`) || strings.Contains(got, "error") {
		t.Fatalf("the pausing stream on S: %d %v %q", resp.StatusCode, resp.Header, got)
	}
	if strings.Contains(got, "keep-alive") || strings.Contains(got, "\n:") {
		t.Fatalf("S's keep-alives reached the client: %q", got)
	}
	if accepted.Load() != 1 {
		t.Fatalf("%d connections to G1: not passed over", accepted.Load())
	}
}

// TestBatchLineForAModelOnlyElsewhere: A does not serve big; B does, and runs no
// batch lines (its Batch API is off). A batch line naming big is refused at A's
// validation with an error naming why (model_not_batched: the line could never run);
// a line of such a batch reaching A's worker by a queue that does not place lines
// ends with a clear error, not a model_not_found; a line for a model nobody serves
// keeps model_not_found. (TestRedisBatchLinesRunWhereTheirModelIs runs such lines
// on the processes serving their model.)
func TestBatchLineForAModelOnlyElsewhere(t *testing.T) {
	a, b, _, _ := twoPeers(t)
	body := []byte(`{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`)
	_, err := a.srv.Check("acme", "/v1/chat/completions", body)
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != "model_not_batched" || ae.param != "model" || !strings.Contains(ae.message, "(b)") {
		t.Fatalf("A validating a line for big: %v", err)
	}
	if _, err := b.srv.Check("acme", "/v1/chat/completions", body); err != nil {
		t.Fatalf("B validating a line for big: %v", err)
	}
	r := a.srv.RunLine(context.Background(), batch.Request{Tenant: "acme", Endpoint: "/v1/chat/completions", RequestID: "batch_x-0", Body: body})
	if r.StatusCode != 400 || !strings.Contains(string(r.Body), `"code":"model_not_on_this_process"`) || !strings.Contains(string(r.Body), "ran this line") || r.Cost != 0 {
		t.Fatalf("A running a line for big: %+v %s", r, r.Body)
	}
	if _, err := a.srv.Check("acme", "/v1/chat/completions", []byte(`{"model": "nope", "messages": [{"role":"user","content":"x"}]}`)); !errors.As(err, &ae) || ae.code != "model_not_found" {
		t.Fatalf("a model nobody serves: %v", err)
	}
}

// TestForwardAnAdapterToTheNodeServingIt: B serves the adapter ft-b over big; A
// serves big without it. A request for ft-b sent to A is forwarded to B (B announces
// the adapter with big), while big itself is served on A; a request for an adapter
// no node announces is A's own 404.
func TestForwardAnAdapterToTheNodeServingIt(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	const yamlA = `
ledger: {sync: process}
models:
  - {id: big, path: big.gguf, max_model_len: 512}
plans: {open: {}}
tenants: [{id: acme, plan: open}]
`
	const yamlB = yamlA + `adapters:
  - {id: ft-b, path: ft-b.gguf, base: big}
`
	b := startPeer(t, yamlB, "b", newFakeEngineWith("big"), store, reg)
	a := startPeer(t, yamlA, "a", newFakeEngineWith("big"), store, reg)
	for deadline := time.Now().Add(5 * time.Second); len(a.k.Nodes()) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A never saw B")
		}
	}
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, url: a.url}
	resp, got := ts.post("/v1/chat/completions", key, `{"model": "ft-b", "messages": [{"role":"user","content":"x"}], "max_tokens": 3}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" || resp.Header.Get("X-LMLite-Adapter") != "ft-b" || !strings.Contains(got, `"model":"ft-b"`) {
		t.Fatalf("ft-b through A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if a.eng.started.Load() != 0 || b.eng.started.Load() != 1 {
		t.Fatalf("generations: A %d, B %d", a.eng.started.Load(), b.eng.started.Load())
	}
	resp, got = ts.post("/v1/chat/completions", key, `{"model": "big", "messages": [{"role":"user","content":"x"}], "max_tokens": 3}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "" || a.eng.started.Load() != 1 {
		t.Fatalf("big on A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	resp, got = ts.post("/v1/chat/completions", key, `{"model": "ft-nope", "messages": [{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 404 || resp.Header.Get("X-LMLite-Node") != "" || !strings.Contains(got, "model_not_found") {
		t.Fatalf("unknown adapter: %d %v %s", resp.StatusCode, resp.Header, got)
	}
}

// TestForwardPrivateAdapterCheckedBeforeTheHop: B serves ft-beta, private to beta,
// over big; A serves big without it. beta's request for ft-beta through A is
// forwarded to B; acme's is answered 404 by A itself, with no hop (a forwarded
// 404 would take a round trip longer than a name nobody serves, telling acme that
// another tenant's adapter of that name exists).
func TestForwardPrivateAdapterCheckedBeforeTheHop(t *testing.T) {
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := &registry.Memory{}
	const yamlA = `
ledger: {sync: process}
models:
  - {id: big, path: big.gguf, max_model_len: 512}
plans: {open: {}}
tenants: [{id: acme, plan: open}, {id: beta, plan: open}]
`
	const yamlB = yamlA + `adapters:
  - {id: ft-beta, path: ft-beta.gguf, base: big, tenant: beta}
`
	b := startPeer(t, yamlB, "b", newFakeEngineWith("big"), store, reg)
	a := startPeer(t, yamlA, "a", newFakeEngineWith("big"), store, reg)
	for deadline := time.Now().Add(5 * time.Second); len(a.k.Nodes()) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A never saw B")
		}
	}
	keys := map[string]string{}
	for _, tenant := range []string{"acme", "beta"} {
		if keys[tenant], _, err = store.CreateKey(tenant, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	ts := &testServer{t: t, url: a.url}
	body := `{"model": "ft-beta", "messages": [{"role":"user","content":"x"}], "max_tokens": 3}`
	resp, got := ts.post("/v1/chat/completions", keys["beta"], body)
	if resp.StatusCode != 200 || resp.Header.Get("X-LMLite-Node") != "b" || b.eng.started.Load() != 1 {
		t.Fatalf("beta's ft-beta through A: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/messages/count_tokens"} {
		resp, got = ts.post(path, keys["acme"], body)
		if resp.StatusCode != 404 || resp.Header.Get("X-LMLite-Node") != "" || !strings.Contains(got, "ft-beta") {
			t.Fatalf("acme's ft-beta through A (%s): %d node %q %s; want A's own 404", path, resp.StatusCode, resp.Header.Get("X-LMLite-Node"), got)
		}
	}
	if b.eng.started.Load() != 1 || a.eng.started.Load() != 0 {
		t.Fatalf("generations: A %d, B %d", a.eng.started.Load(), b.eng.started.Load())
	}
}
