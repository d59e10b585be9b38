package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/pull"
)

// TestPullThenServeOffline pulls a config's pull: model from a loopback hub
// (HF_ENDPOINT) with `lmlite pull --config`, stops the hub, and serves the config
// offline: the model comes from the cache and answers a completion.
func TestPullThenServeOffline(t *testing.T) {
	w, err := genmodel.Build(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w.WriteTo(&buf)
	data := buf.Bytes()
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	gets := 0
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/org/repo/resolve/main/tiny.gguf":
			w.Header().Set("X-Linked-Etag", `"`+digest+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
			http.Redirect(w, r, "/cdn/tiny", http.StatusFound)
		case "/cdn/tiny":
			if r.Method == http.MethodGet {
				gets++
			}
			http.ServeContent(w, r, "tiny.gguf", time.Time{}, bytes.NewReader(data))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_HUB_OFFLINE", "")

	dir := t.TempDir()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+filepath.Join(dir, "data")+`
demo_tenant: demo
ledger: {sync: process}
models:
  - {id: tiny, pull: "hf://org/repo/tiny.gguf", max_model_len: 128}
tiers: {fast: [{model: tiny}]}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	if err := runPull([]string{"--config", cfg, "-q"}); err != nil {
		t.Fatal(err)
	}
	if err := runPull([]string{"-q", "--data-dir", filepath.Join(dir, "data"), "hf://org/repo/tiny.gguf"}); err != nil || gets != 1 {
		t.Fatalf("second pull: %v after %d GETs, want none more", err, gets)
	}
	blob := filepath.Join(dir, "data", "pull", "blobs", "sha256-"+digest+".gguf")
	if _, err := os.Stat(blob); err != nil {
		t.Fatal(err)
	}
	hub.Close()
	t.Setenv("HF_HUB_OFFLINE", "1")

	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	base := "http://" + addr
	for i := 0; ; i++ {
		resp, err := http.Get(base + "/readyz")
		if err == nil && resp.StatusCode == 200 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve: %v", err)
		default:
		}
		if i == 500 {
			t.Fatalf("not ready: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "data", "demo-key"))
	req, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"hi","max_tokens":2}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("completion from the pulled model: %v %v", resp, err)
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

func TestPullProgressRendering(t *testing.T) {
	p := pull.Progress{Ref: "hf://org/repo/m.gguf", Done: 512 << 20, Total: 1 << 30, Resumed: 100 << 20, Rate: 8 << 20, ETA: 64 * time.Second}
	bar := progressBar(p, 10)
	if bar != "m.gguf [█████·····]  50% 512.0 MiB of 1.0 GiB, 8.0 MiB/s, ETA 1m4s, resumed at 100.0 MiB" {
		t.Errorf("bar: %q", bar)
	}
	line := progressLine(p)
	if line != "pulling hf://org/repo/m.gguf: (50%) 512.0 MiB of 1.0 GiB, 8.0 MiB/s, ETA 1m4s, resumed at 100.0 MiB" {
		t.Errorf("line: %q", line)
	}
	if strings.ContainsAny(line, "\r\x1b") {
		t.Error("the plain line has control characters")
	}
	unknown := progressLine(pull.Progress{Ref: "r", Done: 1000, Total: -1, ETA: -1})
	if unknown != "pulling r: 1000 B" {
		t.Errorf("unknown size: %q", unknown)
	}
	if got := resultLine("r", pull.Result{Path: "/p", SHA256: "ab", Size: 2048, Cached: true}); !strings.Contains(got, "NOT verified") || !strings.Contains(got, "cached") {
		t.Errorf("result line: %q", got)
	}
}
