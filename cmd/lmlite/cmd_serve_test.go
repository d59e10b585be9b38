package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// TestServeUpstreamOnly runs `lmlite serve` on a config whose only model is upstream
// (the embedded engine is not needed), checks the demo key, readiness and auth, then
// drains it with SIGTERM.
func TestServeUpstreamOnly(t *testing.T) {
	dir := t.TempDir()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+filepath.Join(dir, "data")+`
demo_tenant: demo
models:
  - {id: remote, upstream: {base_url: "http://127.0.0.1:1/v1"}}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	var resp *http.Response
	var err error
	for i := 0; i < 200; i++ {
		if resp, err = http.Get("http://" + addr + "/readyz"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	keyFile := filepath.Join(dir, "data", "demo-key")
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("demo key file: %v %v", st, err)
	}
	b, _ := os.ReadFile(keyFile)
	key := strings.TrimSpace(string(b))
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("models with the demo key: %v %v", resp, err)
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
	// The store is free again: keys list opens it directly, and the demo key is kept.
	store, err := tenancy.Open(filepath.Join(dir, "data", "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if ten, _, err := store.Authenticate(key); err != nil || ten != "demo" {
		t.Errorf("demo key after restart: %q %v", ten, err)
	}
	k2, err := ensureDemoKey(store, filepath.Join(dir, "data"), "demo")
	if err != nil || k2 != key {
		t.Errorf("second run made a new demo key: %v", err)
	}
	store.RevokeKey(key, time.Now())
	if k3, _ := ensureDemoKey(store, filepath.Join(dir, "data"), "demo"); k3 == key || !strings.HasPrefix(k3, "lml_") {
		t.Errorf("revoked demo key reused")
	}
}

func TestKeysOffline(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(dir, "data")+"\nmodels: [{id: m, path: m.gguf}]\nplans: {p: {}}\ntenants: [{id: t1, plan: p}]\n"), 0o644)
	if err := runKeys([]string{"create", "--tenant", "t1", "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if err := runKeys([]string{"create", "--tenant", "ghost", "--config", cfg}); err == nil {
		t.Error("created a key for an unknown tenant")
	}
	store, err := tenancy.Open(filepath.Join(dir, "data", "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := store.Keys()
	store.Close()
	if len(keys) != 1 || keys[0].Tenant != "t1" {
		t.Fatalf("keys %+v", keys)
	}
	if err := runKeys([]string{"revoke", keys[0].ID, "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if err := runKeys([]string{"list", "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if err := runKeys([]string{"revoke", "nope0000", "--config", cfg}); err == nil {
		t.Error("revoked an unknown key")
	}
}

func TestKeysInRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(dir, "data")+"\nredis: {url: "+rs.URL(0)+", node_id: cli}\nmodels: [{id: m, path: m.gguf}]\nplans: {p: {}}\ntenants: [{id: t1, plan: p}]\n"), 0o644)
	if err := runKeys([]string{"create", "--tenant", "t1", "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if err := runKeys([]string{"create", "--tenant", "ghost", "--config", cfg}); err == nil {
		t.Error("created a key for an unknown tenant")
	}
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rk, err := tenancy.NewRedisKeys(rc, "lmlite:", false)
	if err != nil {
		t.Fatal(err)
	}
	keys := rk.Keys()
	if len(keys) != 1 || keys[0].Tenant != "t1" {
		t.Fatalf("keys in redis %+v", keys)
	}
	if err := runKeys([]string{"revoke", keys[0].ID, "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if keys = rk.Keys(); keys[0].Revoked.IsZero() {
		t.Error("revoke did not reach redis")
	}
	if err := runKeys([]string{"list", "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "lmlite.db")); err == nil {
		t.Error("keys with redis configured created a local store")
	}
}

func TestLedgerVerifyAgainstRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("redis: {url: "+rs.URL(0)+", node_id: cli}\nmodels: [{id: m, path: m.gguf}]\nplans: {p: {}}\ntenants: [{id: t1, plan: p}]\n"), 0o644)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for i, d := range []string{"a", "b"} { // two processes' ledgers: 1000 and 2000 nano-USD
		s, err := tenancy.Open(filepath.Join(dir, d, "lmlite.db"), tenancy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Record(tenancy.Entry{Time: now, Tenant: "t1", Cost: money.Money(1000 * (i + 1)), Status: 200}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx := context.Background()
	rc.Set(ctx, "lmlite:t:{t1}:spent:d:20261123", 3000, 0)
	rc.Set(ctx, "lmlite:t:{t1}:spent:m:202611", 3000, 0)
	args := []string{"verify", "--config", cfg, "--data-dir", filepath.Join(dir, "a"), "--data-dir", filepath.Join(dir, "b")}
	if err := runLedger(args); err != nil {
		t.Fatalf("matching ledgers: %v", err)
	}
	if err := runLedger(args[:5]); err == nil { // one ledger alone does not add up
		t.Error("verify passed with one of the two ledgers")
	}
	rc.Set(ctx, "lmlite:t:{t1}:spent:d:20261123", 3001, 0)
	if err := runLedger(args); err == nil {
		t.Error("verify passed with Redis one nano-dollar off")
	}
}

// metrics_key_env naming an unset or empty variable stops `lmlite serve` at start
// with an error naming the field (it would otherwise serve /metrics open); set, the
// server starts.
func TestServeRefusesAnEmptyMetricsKeyEnv(t *testing.T) {
	dir := t.TempDir()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+filepath.Join(dir, "data")+`
metrics_key_env: LMLITE_TEST_METRICS_KEY
models:
  - {id: remote, upstream: {base_url: "http://127.0.0.1:1/v1"}}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	for _, v := range []string{"", "unset"} {
		if v == "unset" {
			os.Unsetenv("LMLITE_TEST_METRICS_KEY")
		} else {
			t.Setenv("LMLITE_TEST_METRICS_KEY", v)
		}
		done := make(chan error, 1)
		go func() { done <- runServe([]string{"--config", cfg}) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
			<-done
			t.Fatalf("metrics_key_env naming an %s variable: serve started", map[string]string{"": "empty", "unset": "unset"}[v])
		}
		if err == nil || !strings.Contains(err.Error(), "metrics_key_env") || !strings.Contains(err.Error(), "LMLITE_TEST_METRICS_KEY") {
			t.Fatalf("metrics_key_env naming an %s variable: %v", map[string]string{"": "empty", "unset": "unset"}[v], err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("serve got as far as the data directory: %v", err)
	}
}
