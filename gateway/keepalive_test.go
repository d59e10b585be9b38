package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/engine"
)

// TestKeepAliveCannotUnloadAnotherTenantsModel: with the real engine on a scripted
// clock (the gateway's too), tenant a's "keep_alive": "0s" does not unload the model
// tenant b uses (before, it unloaded it at once for everyone: a cold start for b and
// its KV and prefix cache lost); a plan that may shorten keep_alive shortens only its
// own use (b's recent use still keeps the model its idle timeout), down to
// min_keep_alive when it is alone; a longer keep_alive lengthens the stay up to
// max_keep_alive, and another tenant's request does not cut that short.
func TestKeepAliveCannotUnloadAnotherTenantsModel(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	es := startEngineWith(t, `
ledger: {sync: process}
max_keep_alive: 2h
min_keep_alive: 10s
models:
  - {id: tiny, path: $TINY, max_model_len: 128, idle_timeout: 1h}
plans:
  open: {}
  short: {allow_short_keep_alive: true}
tenants:
  - {id: a, plan: open}
  - {id: b, plan: open}
  - {id: s, plan: short}
`, engine.Config{Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, Options{Now: clock}, nil)
	block := es.block
	chat := func(tenant, keepAlive string) {
		t.Helper()
		var opts []option.RequestOption
		if keepAlive != "" {
			opts = append(opts, option.WithJSONSet("lmlite", map[string]any{"keep_alive": keepAlive}))
		}
		c := es.sdk(tenant)
		if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			MaxTokens: openai.Int(2)}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock(); block.GC() }
	state := func() engine.ModelState { return block.Models()[0].State }
	loads := func() uint64 { return block.Models()[0].Loads }
	expect := func(want engine.ModelState, what string) {
		t.Helper()
		if s := state(); s != want {
			t.Fatalf("%s: model %s, want %s", what, s, want)
		}
	}

	// b uses the model; a, whose plan may not shorten keep_alive, asks for 0s.
	chat("b", "")
	n := loads()
	chat("a", "0s")
	step(time.Second)
	expect(engine.StateReady, "1 s after tenant a's keep_alive 0s")
	step(58 * time.Minute)
	expect(engine.StateReady, "59 min after b's request (idle timeout 1h)")
	chat("b", "")
	if loads() != n {
		t.Fatalf("b's request was a cold start: %d loads, was %d", loads(), n)
	}

	// s may shorten: 0s is the floor, 10s, and b's use a moment ago keeps the model
	// for b's idle timeout still.
	chat("s", "0s")
	step(30 * time.Second)
	expect(engine.StateReady, "30 s after s's keep_alive 0s, b having used the model just before")
	step(59 * time.Minute)
	expect(engine.StateReady, "59.5 min after b's last request")
	step(time.Minute)
	expect(engine.StateUnloaded, "past b's idle timeout")

	// s alone: its keep_alive 0s keeps the model min_keep_alive, 10 s.
	chat("s", "0s")
	step(9 * time.Second)
	expect(engine.StateReady, "9 s after s alone asked 0s")
	step(2 * time.Second)
	expect(engine.StateUnloaded, "11 s after s alone asked 0s (min_keep_alive 10s)")

	// b lengthens to 3h, capped at max_keep_alive 2h; a's plain request after it does
	// not cut that short.
	chat("b", "3h")
	chat("a", "")
	step(119 * time.Minute)
	expect(engine.StateReady, "119 min after b asked 3h (max_keep_alive 2h) and a asked nothing")
	step(2 * time.Minute)
	expect(engine.StateUnloaded, "121 min after b's keep_alive, capped at 2h")
}

// TestDecideKeepAlive: the keep-alive rule, case by case (keepalive.go).
func TestDecideKeepAlive(t *testing.T) {
	const h, m, s = time.Hour, time.Minute, time.Second
	base := keepAsk{Given: true, Idle: h, Max: 2 * h, Min: 10 * s}
	with := func(f func(*keepAsk)) keepAsk { a := base; f(&a); return a }
	cases := []struct {
		name     string
		a        keepAsk
		own, eng time.Duration
	}{
		{"not given", with(func(a *keepAsk) { a.Given = false }), h, 0},
		{"shorter, not allowed", with(func(a *keepAsk) { a.Asked = 0 }), h, 0},
		{"shorter, allowed: the floor", with(func(a *keepAsk) { a.Asked, a.Short = 0, true }), 10 * s, 10 * s},
		{"shorter, allowed", with(func(a *keepAsk) { a.Asked, a.Short = 5*m, true }), 5 * m, 5 * m},
		{"shorter, allowed, another tenant's use left", with(func(a *keepAsk) { a.Asked, a.Short, a.Others = 0, true, 20*m }), 10 * s, 20 * m},
		{"shorter, allowed, another tenant's whole timeout", with(func(a *keepAsk) { a.Asked, a.Short, a.Others = 0, true, h }), 10 * s, 0},
		{"longer", with(func(a *keepAsk) { a.Asked = 90 * m }), 90 * m, 90 * m},
		{"longer, capped", with(func(a *keepAsk) { a.Asked = 3 * h }), 2 * h, 2 * h},
		{"longer, no max_keep_alive", with(func(a *keepAsk) { a.Asked, a.Max = 3*h, 0 }), h, 0},
		{"plain, after another's extension", with(func(a *keepAsk) { a.Given, a.Others = false, 100*m }), h, 100 * m},
		{"a floor above the timeout", with(func(a *keepAsk) { a.Asked, a.Short, a.Min, a.Idle = 0, true, 2*m, m }), m, 0},
		{"never idle: longer is not longer", with(func(a *keepAsk) { a.Asked, a.Idle = 3*h, forever }), forever, 0},
		{"never idle: shorter, allowed", with(func(a *keepAsk) { a.Asked, a.Short, a.Idle = m, true, forever }), m, m},
	}
	for _, c := range cases {
		if own, eng := decideKeepAlive(c.a); own != c.own || eng != c.eng {
			t.Errorf("%s: own %v engine %v, want %v %v", c.name, own, eng, c.own, c.eng)
		}
	}
}

// TestKeepAlivesCountOtherTenants: the uses keepAlives remembers, at explicit times.
func TestKeepAlivesCountOtherTenants(t *testing.T) {
	var k keepAlives
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if o := k.begin("m", "b", t0, time.Hour); o != 0 {
		t.Fatalf("first use: others %v", o)
	}
	if o := k.begin("m", "a", t0, 0); o != time.Hour { // b in flight: its whole stay
		t.Fatalf("b in flight: others %v", o)
	}
	k.end("m", "a", t0, 0, true)
	k.end("m", "b", t0.Add(time.Minute), time.Hour, true)
	if o := k.begin("m", "a", t0.Add(31*time.Minute), 0); o != 30*time.Minute {
		t.Fatalf("30 min of b's stay left: others %v", o)
	}
	k.end("m", "a", t0.Add(31*time.Minute), 0, false)
	if o := k.begin("m", "a", t0.Add(2*time.Hour), 0); o != 0 {
		t.Fatalf("b's stay is over: others %v", o)
	}
	if len(k.uses["m"]) != 1 {
		t.Fatalf("b's ended use is still held: %v", k.uses["m"])
	}
	if o := k.begin("other", "b", t0, time.Hour); o != 0 {
		t.Fatalf("another model: others %v", o)
	}
}
