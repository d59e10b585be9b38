package main

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/tenancy"
)

// envCrashGroup names a worker group whose test workers die at start (with a line on
// stderr), for TestServeWorkersModeCircuitShowsStderr.
const envCrashGroup = "LMLITE_TEST_CRASH_GROUP"

// TestMain lets the test binary be `lmlite worker`: the workers mode of runServe
// re-executes this executable as its workers. With LMLITE_TEST_AS_LMLITE=1 it is the
// whole lmlite command (the multi-process tests run `lmlite serve` this way).
func TestMain(m *testing.M) {
	if os.Getenv("LMLITE_TEST_AS_LMLITE") == "1" {
		main()
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		if g := os.Getenv(envCrashGroup); g != "" && slices.Contains(os.Args, "--group") &&
			os.Args[slices.Index(os.Args, "--group")+1] == g {
			os.Stderr.WriteString("test worker: simulated crash at load of group " + g + "\n")
			os.Exit(3)
		}
		if err := workerMain(os.Args[2:]); err != nil {
			os.Stderr.WriteString("lmlite worker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestServeWorkersModeKill9MidStream serves two generated models in workers mode
// through the gateway, kills one model's worker with SIGKILL mid-stream, and checks
// that the stream ends with an engine_restarting error event, that the other model
// answers meanwhile, and that the killed model is back and serving.
func TestServeWorkersModeKill9MidStream(t *testing.T) {
	dir := t.TempDir()
	ma, mb := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, ma); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.Generate(genmodel.Options{Arch: "qwen3", Preset: "tiny", Type: "q8_0", Seed: 2}, mb); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
demo_tenant: demo
ledger: {sync: process}
engine: {mode: workers}
models:
  - {id: a, path: `+ma+`, idle_timeout: -1s, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
  - {id: b, path: `+mb+`, max_model_len: 256, idle_timeout: -1s}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	base := "http://" + addr
	ready := func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	waitUntil := func(d time.Duration, what string, ok func() bool) {
		t.Helper()
		for start := time.Now(); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > d {
				t.Fatalf("not %s after %s", what, d)
			}
		}
	}
	waitUntil(20*time.Second, "ready", ready)
	keyb, _ := os.ReadFile(filepath.Join(data, "demo-key"))
	key := strings.TrimSpace(string(keyb))
	post := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	pidb, err := os.ReadFile(filepath.Join(data, "workers", "a.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(pidb))[0])

	resp := post(`{"model":"a","prompt":"Once upon a time","max_tokens":2000,"stream":true}`)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, killed, errEvent := 0, false, ""
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if strings.Contains(line, `"error"`) {
			errEvent = line
			continue
		}
		chunks++
		if chunks == 3 && !killed {
			syscall.Kill(pid, syscall.SIGKILL)
			killed = true
		}
	}
	resp.Body.Close()
	if !strings.Contains(errEvent, `"code":"engine_restarting"`) {
		t.Fatalf("stream after the kill (%d chunks): error event %q", chunks, errEvent)
	}
	rb := post(`{"model":"b","prompt":"hi","max_tokens":4}`)
	io.Copy(io.Discard, rb.Body)
	rb.Body.Close()
	if rb.StatusCode != 200 {
		t.Fatalf("model b while a restarts: %d", rb.StatusCode)
	}
	waitUntil(10*time.Second, "ready again", ready)
	ra := post(`{"model":"a","prompt":"hi","max_tokens":4}`)
	io.Copy(io.Discard, ra.Body)
	ra.Body.Close()
	if ra.StatusCode != 200 {
		t.Fatalf("model a after its restart: %d", ra.StatusCode)
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
	if _, err := os.Stat(filepath.Join(data, "workers", "a.pid")); !os.IsNotExist(err) {
		t.Errorf("a's pid file after shutdown: %v", err)
	}
	// The killed request is settled as a 503 that costs nothing: its reservation is
	// released, not charged.
	store, err := tenancy.Open(filepath.Join(data, "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var statuses []string
	found := false
	store.Ledger(func(e tenancy.Entry) error {
		statuses = append(statuses, e.Model+":"+strconv.Itoa(e.Status))
		found = found || (e.Model == "a" && e.Status == 503 && e.Cost == 0)
		return nil
	})
	if !found {
		t.Errorf("no free 503 entry for the killed request in the ledger: %v", statuses)
	}
}

// TestServeWorkersModeFeatures serves a generated model in workers mode through the
// gateway and uses the Features a worker's Pool now has: a json_schema chat answers
// JSON of the schema, n=2 gives two choices, and /v1/embeddings answers a unit vector
// (before, each was a 400: the Pool did not serve them).
func TestServeWorkersModeFeatures(t *testing.T) {
	dir := t.TempDir()
	mp := filepath.Join(dir, "q.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "qwen3", Preset: "tiny", Type: "q8_0", Seed: 3}, mp); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
demo_tenant: demo
ledger: {sync: process}
engine: {mode: workers}
models:
  - {id: q, path: `+mp+`, max_model_len: 512, idle_timeout: -1s, embeddings: true}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	base := "http://" + addr
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("not ready after 20s")
		}
	}
	keyb, _ := os.ReadFile(filepath.Join(data, "demo-key"))
	key := strings.TrimSpace(string(keyb))
	post := func(path, body string, out any) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}

	var chat struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	post("/v1/chat/completions", `{"model":"q","messages":[{"role":"user","content":"A name and a number?"}],"max_tokens":80,"seed":7,"temperature":0.8,
		"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false}}}}`, &chat)
	if len(chat.Choices) != 1 {
		t.Fatalf("json_schema: %d choices", len(chat.Choices))
	}
	var obj struct {
		Name *string `json:"name"`
		N    *int    `json:"n"`
	}
	dec := json.NewDecoder(strings.NewReader(chat.Choices[0].Message.Content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil || obj.Name == nil || obj.N == nil {
		t.Fatalf("json_schema content %q: %v", chat.Choices[0].Message.Content, err)
	}

	post("/v1/chat/completions", `{"model":"q","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"n":2,"seed":1}`, &chat)
	if len(chat.Choices) != 2 {
		t.Fatalf("n=2: %d choices", len(chat.Choices))
	}

	var emb struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	post("/v1/embeddings", `{"model":"q","input":["The cat sat.","Dogs bark"]}`, &emb)
	if len(emb.Data) != 2 || emb.Usage.PromptTokens == 0 {
		t.Fatalf("embeddings: %d vectors, %d prompt tokens", len(emb.Data), emb.Usage.PromptTokens)
	}
	for i, d := range emb.Data {
		norm := 0.0
		for _, v := range d.Embedding {
			norm += v * v
		}
		if len(d.Embedding) == 0 || math.Abs(norm-1) > 1e-3 {
			t.Errorf("embedding %d: %d floats, norm² %v", i, len(d.Embedding), norm)
		}
	}

	// The Pool's Stats reach /metrics through enginemetrics: its worker's series, and
	// the model's (their values are the last heartbeat's, so only their presence is
	// checked).
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lmlite_engine_worker_up{model="q"} 1` + "\n", `lmlite_engine_worker_crashes_total{model="q"} 0` + "\n",
		`lmlite_engine_model_state{model="q",state="ready"} `} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics has no %q:\n%s", want, m)
		}
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

// TestServeWorkersModeCircuitShowsStderr: a model whose worker dies at start opens its
// circuit after 5 crashes; the admin API then shows it failed with the worker's last
// stderr lines, /readyz says not ready, and the other model keeps serving.
func TestServeWorkersModeCircuitShowsStderr(t *testing.T) {
	dir := t.TempDir()
	mp := filepath.Join(dir, "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 4}, mp); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envCrashGroup, "bad")
	t.Setenv("LMLITE_TEST_ADMIN_KEY", "admin-secret")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
demo_tenant: demo
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
engine: {mode: workers}
models:
  - {id: good, path: `+mp+`, max_model_len: 128, idle_timeout: -1s}
  - {id: bad, path: `+mp+`, max_model_len: 128, idle_timeout: -1s}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	base := "http://" + addr
	type model struct{ ID, State, Error string }
	models := func() map[string]model {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return nil // not listening yet
		}
		resp.Body.Close()
		code, body := call(t, "GET", base+"/admin/models", "admin-secret", "")
		var list struct{ Data []model }
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			return nil
		}
		out := map[string]model{}
		for _, m := range list.Data {
			out[m.ID] = m
		}
		return out
	}
	var bad model
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v", err)
		default:
		}
		if ms := models(); ms != nil && ms["bad"].State == "failed" && ms["good"].State == "ready" {
			bad = ms["bad"]
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("bad not failed (or good not ready) after 30s: %+v", models())
		}
	}
	if !strings.Contains(bad.Error, "crashed 5 times") || !strings.Contains(bad.Error, "simulated crash at load of group bad") {
		t.Errorf("the failed model's error in /admin/models: %q", bad.Error)
	}
	if code, _ := call(t, "GET", base+"/readyz", "", ""); code == 200 {
		t.Error("/readyz is 200 with a failed model")
	}
	checkAdminWorkers(t, base, data)
	keyb, _ := os.ReadFile(filepath.Join(data, "demo-key"))
	if code, body := call(t, "POST", base+"/v1/completions", strings.TrimSpace(string(keyb)), `{"model":"good","prompt":"hi","max_tokens":3}`); code != 200 {
		t.Errorf("good beside the failed model: %d %s", code, body)
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

// checkAdminWorkers checks /admin/workers beside a failed group "bad" (its worker
// crashed at start 5 times) and a running group "good": the failed one has no
// process, its 5 crashes, 4 restarts and its stderr lines; the running one has the
// pid of its pid file, a live process, an uptime and its cold start.
func checkAdminWorkers(t *testing.T, base, data string) {
	t.Helper()
	if code, _ := call(t, "GET", base+"/admin/workers", "", ""); code != 401 {
		t.Errorf("/admin/workers without the admin key: %d", code)
	}
	code, body := call(t, "GET", base+"/admin/workers", "admin-secret", "")
	var list struct {
		Object string
		Data   []struct {
			Object, Group, State, Error string
			LastExit                    string `json:"last_exit"`
			Models                      []string
			PID                         int
			StartedAt                   int64   `json:"started_at"`
			UptimeS                     float64 `json:"uptime_s"`
			Starts, Restarts, Crashes   uint64
			ColdStartMs                 float64  `json:"cold_start_ms"`
			Stderr                      []string `json:"stderr_tail"`
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || list.Object != "list" || len(list.Data) != 2 {
		t.Fatalf("/admin/workers: %d %s", code, body)
	}
	for _, w := range list.Data {
		if w.Object != "worker" || len(w.Models) != 1 || w.Models[0] != w.Group {
			t.Errorf("worker row %+v", w)
		}
		switch w.Group {
		case "bad":
			if w.State != "failed" || w.PID != 0 || w.Crashes != 5 || w.Restarts != 4 || w.Starts != 5 ||
				!strings.Contains(w.Error, "crashed 5 times") || !strings.Contains(w.LastExit, "exit status 3") ||
				!slices.Contains(w.Stderr, "test worker: simulated crash at load of group bad") {
				t.Errorf("the failed worker in /admin/workers: %+v", w)
			}
		case "good":
			pidb, err := os.ReadFile(filepath.Join(data, "workers", "good.pid"))
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.Fields(string(pidb))[0])
			if w.State != "running" || w.PID != pid || syscall.Kill(pid, 0) != nil || w.Crashes != 0 || w.Restarts != 0 ||
				w.UptimeS <= 0 || w.StartedAt < time.Now().Add(-time.Minute).Unix() || w.ColdStartMs <= 0 || w.Error != "" {
				t.Errorf("the running worker in /admin/workers (pid file %d): %+v", pid, w)
			}
		default:
			t.Errorf("unknown group in /admin/workers: %+v", w)
		}
	}
}

// TestServeWorkersModeColdStartInUsageAndLedger: a model whose worker stopped when
// idle (scale to zero at process level) comes back on the next request, which
// records its cold start in its ledger entry (cold_start_ns) and in the usage API
// (num_cold_starts, cold_start_seconds); the warm request after it records none.
func TestServeWorkersModeColdStartInUsageAndLedger(t *testing.T) {
	dir := t.TempDir()
	mp := filepath.Join(dir, "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 5}, mp); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LMLITE_TEST_ADMIN_KEY", "admin-secret")
	addr := freeAddr(t)
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
demo_tenant: demo
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
engine: {mode: workers}
models:
  - {id: m, path: `+mp+`, max_model_len: 128, idle_timeout: 300ms}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := startServe(t, addr, "--config", cfg)
	base := "http://" + addr
	keyb, _ := os.ReadFile(filepath.Join(data, "demo-key"))
	key := strings.TrimSpace(string(keyb))
	state := func() string {
		_, body := call(t, "GET", base+"/admin/workers", "admin-secret", "")
		var list struct{ Data []struct{ State string } }
		if json.Unmarshal([]byte(body), &list) != nil || len(list.Data) != 1 {
			t.Fatalf("/admin/workers: %s", body)
		}
		return list.Data[0].State
	}
	for start := time.Now(); state() != "stopped"; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the idle worker did not stop: %s", state())
		}
	}
	for i := range 2 { // cold, then warm
		if code, body := call(t, "POST", base+"/v1/completions", key, `{"model":"m","prompt":"Once","max_tokens":3}`); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	now := time.Now().Unix()
	code, body := call(t, "GET", base+"/v1/organization/usage/completions?start_time="+strconv.FormatInt(now-3600, 10)+
		"&end_time="+strconv.FormatInt(now+3600, 10)+"&bucket_width=1h", key, "")
	var page struct {
		Data []struct {
			Results []struct {
				Requests         int64   `json:"num_model_requests"`
				ColdStarts       int64   `json:"num_cold_starts"`
				ColdStartSeconds float64 `json:"cold_start_seconds"`
			}
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
		t.Fatalf("usage API: %d %s", code, body)
	}
	var reqs, colds int64
	var coldS float64
	for _, b := range page.Data {
		for _, r := range b.Results {
			reqs, colds, coldS = reqs+r.Requests, colds+r.ColdStarts, coldS+r.ColdStartSeconds
		}
	}
	if reqs != 2 || colds != 1 || coldS <= 0 {
		t.Errorf("usage API: %d requests, %d cold starts taking %gs; want 2, 1 taking > 0 (%s)", reqs, colds, coldS, body)
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
	st, err := tenancy.Open(filepath.Join(data, "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var cold []time.Duration
	st.Ledger(func(e tenancy.Entry) error {
		if e.Model == "m" {
			cold = append(cold, e.ColdStart)
		}
		return nil
	})
	if len(cold) != 2 || cold[0] <= 0 || cold[1] != 0 || math.Abs(cold[0].Seconds()-coldS) > 1e-6 {
		t.Errorf("ledger cold starts %v; want the first request's (the usage API's %gs), then none", cold, coldS)
	}
}

// TestServeWorkersModeAdminAdapters: with `engine: {mode: workers}` (the model in a
// worker process), the admin API lists a LoRA adapter unloaded, loads it in the
// worker (was 501 there), a request naming it runs with it, and unloads it.
func TestServeWorkersModeAdminAdapters(t *testing.T) {
	dir := t.TempDir()
	mp, lp := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "ft.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 3}, mp); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.GenerateLoRA(genmodel.LoRAOptions{Base: mp, Rank: 16, Alpha: 16, Seed: 100}, lp); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
demo_tenant: demo
admin_key_env: LMLITE_TEST_ADAPTERS_ADMIN
ledger: {sync: process}
engine: {mode: workers}
models:
  - {id: m, path: `+mp+`, max_model_len: 256, idle_timeout: -1s}
adapters:
  - {id: ft, path: `+lp+`, base: m}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	t.Setenv("LMLITE_TEST_ADAPTERS_ADMIN", "admin-secret")
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg}) }()
	base := "http://" + addr
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("not ready after 20s")
		}
	}
	keyb, _ := os.ReadFile(filepath.Join(data, "demo-key"))
	key := strings.TrimSpace(string(keyb))
	call := func(method, path, key, body string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	state := func() string {
		t.Helper()
		st, body, _ := call("GET", "/admin/adapters", "admin-secret", "")
		var l struct {
			Data []struct {
				ID, State string
				Bytes     int64
			}
		}
		if err := json.Unmarshal([]byte(body), &l); st != 200 || err != nil || len(l.Data) != 1 || l.Data[0].ID != "ft" || l.Data[0].Bytes <= 0 {
			t.Fatalf("GET /admin/adapters: %d %s", st, body)
		}
		return l.Data[0].State
	}
	if s := state(); s != "unloaded" {
		t.Errorf("before the load: %q", s)
	}
	if st, body, _ := call("POST", "/admin/adapters/ft/load", "admin-secret", ""); st != 200 {
		t.Fatalf("load: %d %s", st, body)
	}
	if s := state(); s != "loaded" {
		t.Errorf("after the load: %q", s)
	}
	st, body, h := call("POST", "/v1/chat/completions", key, `{"model":"ft","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
	if st != 200 || h.Get("X-LMLite-Adapter") != "ft" || !strings.Contains(body, `"model":"ft"`) {
		t.Errorf("chat on the adapter: %d %s %v", st, body, h)
	}
	if st, body, _ := call("POST", "/admin/adapters/ft/unload", "admin-secret", ""); st != 200 {
		t.Fatalf("unload: %d %s", st, body)
	}
	if s := state(); s != "unloaded" {
		t.Errorf("after the unload: %q", s)
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
