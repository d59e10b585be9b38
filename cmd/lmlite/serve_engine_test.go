package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// TestServeAdminLoadUnload serves a generated tiny model with the embedded engine and
// drives the admin API over HTTP: unload, load, and the reload a request triggers,
// checked in the admin listing, the engine's metrics and the cold-start histogram.
func TestServeAdminLoadUnload(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, model); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("LMLITE_TEST_ADMIN_KEY", "admin-secret")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+filepath.Join(dir, "data")+`
demo_tenant: demo
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
models:
  - {id: tiny, path: `+model+`, max_model_len: 128, idle_timeout: -1s}
tiers: {fast: [{model: tiny}]}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	base := "http://" + addr
	for i := 0; ; i++ {
		resp, err := http.Get(base + "/readyz")
		if err == nil && resp.StatusCode == 200 {
			break
		}
		if i == 500 {
			t.Fatalf("not ready: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	call := func(method, path, key, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	state := func() string {
		t.Helper()
		code, body := call("GET", "/admin/models", "admin-secret", "")
		var list struct {
			Data []struct{ ID, State string }
		}
		if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Data) != 1 {
			t.Fatalf("admin models: %d %s %v", code, body, err)
		}
		return list.Data[0].State
	}
	metrics := func() string {
		t.Helper()
		_, body := call("GET", "/metrics", "", "")
		return body
	}
	if s := state(); s != "ready" {
		t.Fatalf("state %q at start", s)
	}
	if code, body := call("POST", "/admin/models/tiny/unload", "admin-secret", ""); code != 200 {
		t.Fatalf("unload: %d %s", code, body)
	}
	if s := state(); s != "unloaded" {
		t.Errorf("state %q after unload", s)
	}
	if m := metrics(); !strings.Contains(m, `lmlite_engine_model_state{model="tiny",state="unloaded"} 1`) ||
		!strings.Contains(m, `lmlite_model_admin_actions_total{action="unload",model="tiny"} 1`) {
		t.Error("metrics do not show the unload")
	}
	if code, body := call("POST", "/admin/models/tiny/load", "admin-secret", ""); code != 200 {
		t.Fatalf("load: %d %s", code, body)
	}
	if s := state(); s != "ready" {
		t.Errorf("state %q after load", s)
	}
	if m := metrics(); !strings.Contains(m, `lmlite_engine_model_state{model="tiny",state="ready"} 1`) {
		t.Error("metrics do not show the load")
	}
	// Unloaded again, a request reloads the model and waits for it: a cold start.
	call("POST", "/admin/models/tiny/unload", "admin-secret", "")
	key, _ := os.ReadFile(filepath.Join(dir, "data", "demo-key"))
	if code, body := call("POST", "/v1/completions", strings.TrimSpace(string(key)), `{"model":"tiny","prompt":"hi","max_tokens":2}`); code != 200 {
		t.Fatalf("completion after unload: %d %s", code, body)
	}
	if s := state(); s != "ready" {
		t.Errorf("state %q after a request", s)
	}
	if m := metrics(); !strings.Contains(m, `lmlite_model_cold_start_seconds_count{model="tiny"} 1`) {
		t.Error("no cold start recorded")
	}
	// Refusals: a wrong admin key, an unknown model.
	if code, _ := call("POST", "/admin/models/tiny/load", "wrong", ""); code != 401 {
		t.Errorf("wrong admin key: %d", code)
	}
	if code, _ := call("POST", "/admin/models/nope/load", "admin-secret", ""); code != 404 {
		t.Errorf("unknown model: %d", code)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not drain on SIGTERM")
	}
}
