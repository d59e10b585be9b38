package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/engine"
)

// TestScaleToZeroIdlePolicy drives the idle policy through the gateway with the real
// engine on a scripted clock: the config's idle_timeout, a request's
// lmlite.keep_alive shortening it (a plan with allow_short_keep_alive) but not
// lengthening it (no max_keep_alive), /v1/models showing each
// model's state, and /healthz and /readyz answering without waking a model (a
// scaled-to-zero model leaves the server ready).
func TestScaleToZeroIdlePolicy(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	es := startEngine(t, `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 128, idle_timeout: 1h}
plans:
  open: {allow_short_keep_alive: true}
tenants:
  - {id: acme, plan: open}
`, engine.Config{Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	client, block, base, key := es.client, es.block, es.base, es.key

	chat := func(keepAlive string) {
		t.Helper()
		var opts []option.RequestOption
		if keepAlive != "" {
			opts = append(opts, option.WithJSONSet("lmlite", map[string]any{"keep_alive": keepAlive}))
		}
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			MaxTokens: openai.Int(2)}, opts...)
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	listed := func() string {
		t.Helper()
		code, body := get("/v1/models")
		var l struct {
			Data []struct {
				ID     string `json:"id"`
				LMLite struct {
					State string `json:"state"`
				} `json:"lmlite"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &l); code != 200 || err != nil || len(l.Data) != 1 {
			t.Fatalf("/v1/models: %d %s (%v)", code, body, err)
		}
		_, one := get("/v1/models/tiny")
		var m struct {
			LMLite struct {
				State string `json:"state"`
			} `json:"lmlite"`
		}
		if err := json.Unmarshal([]byte(one), &m); err != nil || m.LMLite.State != l.Data[0].LMLite.State {
			t.Fatalf("/v1/models/tiny: %s, the list says %s", one, l.Data[0].LMLite.State)
		}
		return l.Data[0].LMLite.State
	}
	step := func(d time.Duration) { advance(d); block.GC() }
	loads := func() uint64 { return block.Models()[0].Loads }

	if s := listed(); s != "ready" {
		t.Fatalf("state %q after the load, want ready", s)
	}
	// keep_alive 30s shortens the 1h idle timeout.
	chat("30s")
	step(29 * time.Second)
	if s := listed(); s != "ready" {
		t.Fatalf("state %q 29 s after keep_alive 30s, want ready", s)
	}
	step(2 * time.Second)
	if s := listed(); s != "unloaded" {
		t.Fatalf("state %q 31 s after keep_alive 30s, want unloaded", s)
	}
	// Probes answer and never wake the model; a model scaled to zero leaves the server ready.
	n := loads()
	for range 3 {
		if code, body := get("/healthz"); code != 200 {
			t.Fatalf("/healthz: %d %s", code, body)
		}
		if code, body := get("/readyz"); code != 200 || body != "ready\n" {
			t.Fatalf("/readyz with the model scaled to zero: %d %q, want 200 ready", code, body)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if s := listed(); s != "unloaded" || loads() != n {
		t.Fatalf("after the probes: state %q, %d loads (was %d): a probe woke the model", s, loads(), n)
	}
	// A keep_alive longer than idle_timeout does not lengthen it without max_keep_alive.
	chat("2h")
	if loads() != n+1 {
		t.Fatalf("%d loads after a request to the unloaded model, want %d", loads(), n+1)
	}
	step(time.Hour - time.Second)
	if s := listed(); s != "ready" {
		t.Fatalf("state %q before idle_timeout, want ready", s)
	}
	step(2 * time.Second)
	if s := listed(); s != "unloaded" {
		t.Fatalf("state %q past idle_timeout 1h with keep_alive 2h, want unloaded: keep_alive lengthened the timeout", s)
	}
	// A malformed keep_alive is refused by name.
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","lmlite":{"keep_alive":"soon"},"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"param":"lmlite.keep_alive"`) {
		t.Fatalf("keep_alive soon: %d %s", resp.StatusCode, b)
	}
}
