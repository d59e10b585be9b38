package main

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// syncBuffer is a buffer safe for the server's goroutines and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// take returns what was written since the last take.
func (b *syncBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.b.String()
	b.b.Reset()
	return s
}

// captureOutput points serve's and keys' stdout and stderr at buffers for the test.
// Call it before starting a server.
func captureOutput(t *testing.T) (out, errOut *syncBuffer) {
	out, errOut = &syncBuffer{}, &syncBuffer{}
	oldOut, oldErr := stdout, stderr
	stdout, stderr = out, errOut
	t.Cleanup(func() { stdout, stderr = oldOut, oldErr })
	return out, errOut
}

// startServe runs runServe(args) and waits until /readyz answers 200.
func startServe(t *testing.T, addr string, args ...string) (done chan error) {
	t.Helper()
	done = make(chan error, 1)
	go func() { done <- runServe(args) }()
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil && resp.StatusCode == 200 {
			return done
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v", err)
		default:
		}
		if i == 1000 {
			t.Fatalf("not ready: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stopServe(t *testing.T, done chan error) {
	t.Helper()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not drain on SIGTERM")
	}
}

func call(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// demoToolsBody is a chat with tools on "auto", with a tool whose schema is as long as
// real ones: more than demo-stories' 512 tokens hold with the reply.
const demoToolsBody = `{"model":"auto","max_tokens":200,"temperature":0,"tool_choice":"required",
		"messages":[{"role":"user","content":"What is the weather in Paris today? Answer with the tool."}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"The current weather in a city, with temperature, wind, humidity and a short forecast for the coming hours.",
		"parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":24,"description":"The city's name, in English."},"unit":{"type":"string","enum":["celsius","fahrenheit"],"description":"The temperature unit."}},"required":["city","unit"],"additionalProperties":false}}}]}`

// TestDemoFirstRun is `make run` as a new user meets it: the demo answers "auto" in
// English with demo-stories, embeds the README's inputs with it, /v1/models marks the
// random models, the demo and admin keys are kept 0600, and `lmlite keys` run from
// another directory finds the running server's store and says so.
func TestDemoFirstRun(t *testing.T) {
	embedBody := readmeCurlBody(t, "/v1/embeddings") // before the test leaves the package's directory
	home := t.TempDir()
	t.Chdir(home)
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(home, "run"))
	t.Setenv("LMLITE_ADMIN_KEY", "")
	addr := freeAddr(t)
	outBuf, errBuf := captureOutput(t)
	done := startServe(t, addr, "--listen", addr)
	out := outBuf.take()
	base := "http://" + addr
	for _, want := range []string{"demo-stories", "real weights", "demo-random-llama", "RANDOM weights", "admin key (printed once", "tier:fast"} {
		if !strings.Contains(out, want) {
			t.Errorf("the banner does not say %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"demo-key", "admin-key"} {
		st, err := os.Stat(filepath.Join(home, "data", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(home, "data", "demo-key"))
	key := strings.TrimSpace(string(b))

	code, body := call(t, "GET", base+"/v1/models", key, "")
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		}
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	owners := map[string]string{}
	for _, m := range list.Data {
		owners[m.ID] = m.OwnedBy
	}
	if owners["demo-stories"] != "lmlite" || owners["demo-random-llama"] != randomOwner || owners["demo-random-qwen3"] != randomOwner {
		t.Errorf("owned_by: %v", owners)
	}

	// The first answer is English: "auto" reaches demo-stories, whose greedy
	// continuation is llama2.c's ("…there was a little girl named Lily").
	code, body = call(t, "POST", base+"/v1/completions", key, `{"model":"auto","prompt":"Once upon a time","max_tokens":12,"temperature":0}`)
	if code != 200 || !strings.Contains(body, "Lily") || !strings.Contains(body, "demo-stories") {
		t.Errorf("auto completion: %d %s", code, body)
	}

	// Tools on "auto": the tool schemas and the reply leave no room in the story
	// model's 512 tokens, so "auto" steps down to the 2048-token random model on the
	// fast tier (random weights: the grammar of tool_choice required makes its noise a
	// well-formed call).
	code, body = call(t, "POST", base+"/v1/chat/completions", key, demoToolsBody)
	if code != 200 || !strings.Contains(body, demoLongContextID) || !strings.Contains(body, `"get_weather"`) || !strings.Contains(body, `"tool_calls"`) {
		t.Errorf("tools on auto: %d %s", code, body)
	}

	// An embedding, with the body of the README's curl: demo-stories embeds, and
	// "auto" takes it too.
	for _, body := range []string{embedBody, strings.Replace(embedBody, `"demo-stories"`, `"auto"`, 1)} {
		code, resp := call(t, "POST", base+"/v1/embeddings", key, body)
		var emb struct {
			Model string `json:"model"`
			Data  []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(resp), &emb); code != 200 || err != nil || len(emb.Data) != 2 || emb.Usage.PromptTokens == 0 {
			t.Errorf("embeddings %s: %d %.300s", body, code, resp)
			continue
		}
		if emb.Model != demoStoriesID {
			t.Errorf("embeddings %s: served by %q, want %s", body, emb.Model, demoStoriesID)
		}
		for i, d := range emb.Data {
			norm := 0.0
			for _, v := range d.Embedding {
				norm += v * v
			}
			if len(d.Embedding) != 64 || math.Abs(norm-1) > 1e-3 {
				t.Errorf("embedding %d: %d dimensions, norm² %.4f; want 64 of unit length", i, len(d.Embedding), norm)
			}
		}
	}

	// The Responses API, as Codex and the Agents SDK speak it: stored (store defaults
	// to true) in data_dir/responses.db, so it is there after the restart below.
	code, stored := call(t, "POST", base+"/v1/responses", key, `{"model":"auto","input":"Once upon a time","max_output_tokens":12,"temperature":0}`)
	var resp struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		OutputText string `json:"output_text"`
	}
	if err := json.Unmarshal([]byte(stored), &resp); code != 200 || err != nil || !strings.HasPrefix(resp.ID, "resp_") || resp.OutputText == "" || !strings.Contains(stored, `"model":"demo-stories"`) {
		t.Errorf("responses on auto: %d %s", code, stored)
	}

	// `lmlite keys list` from elsewhere: the store is held, so it goes through the
	// admin API with the demo's admin key, and names the store and the server.
	t.Chdir(t.TempDir())
	errBuf.take()
	kerr := runKeys([]string{"list"})
	kout, kstderr := outBuf.take(), errBuf.take()
	if kerr != nil {
		t.Fatalf("keys list: %v (%s)", kerr, kstderr)
	}
	if !strings.Contains(kstderr, filepath.Join(home, "data", "lmlite.db")) || !strings.Contains(kstderr, addr) {
		t.Errorf("keys does not say which store and server it used: %q", kstderr)
	}
	if !strings.Contains(kout, "demo") {
		t.Errorf("keys list does not show the demo key: %q", kout)
	}
	stopServe(t, done)

	// Second run: the admin key is kept, and not printed again.
	t.Chdir(home)
	done = startServe(t, addr, "--listen", addr)
	out = outBuf.take()
	adminKey, _ := os.ReadFile(filepath.Join(home, "data", "admin-key"))
	if strings.Contains(out, strings.TrimSpace(string(adminKey))) || !strings.Contains(out, "admin key: in") {
		t.Errorf("second run banner shows the admin key again or does not say where it is:\n%s", out)
	}
	if code, body := call(t, "GET", base+"/v1/responses/"+resp.ID, key, ""); code != 200 || body != stored {
		t.Errorf("the stored response after a restart: %d %s", code, body)
	}
	stopServe(t, done)
	if s := runningServers(); len(s) != 0 {
		t.Errorf("stopped servers still noted: %+v", s)
	}
}

// readmeCurlBlocks are README.md's ```sh blocks that hold a curl to the demo
// (http://127.0.0.1:8080), in the README's order: the one extraction of the README's
// curl examples (TestDemoFirstRun sends their bodies, TestFreshCloneMakeRun runs
// them whole), so the tests run what the README shows.
func readmeCurlBlocks(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for rest := string(b); ; {
		_, after, ok := strings.Cut(rest, "\n```sh\n")
		if !ok {
			break
		}
		block, after2, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatalf("README.md: a ```sh block is not closed: %.200q", after)
		}
		if strings.Contains(block, "curl ") && strings.Contains(block, "http://127.0.0.1:8080") {
			blocks = append(blocks, block+"\n")
		}
		rest = "\n" + after2
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```sh block with a curl to http://127.0.0.1:8080")
	}
	return blocks
}

// readmeCurlBody is the -d body of the README's curl to path on the demo
// (http://127.0.0.1:8080 + path), so the test sends what the README shows.
func readmeCurlBody(t *testing.T, path string) string {
	t.Helper()
	all := strings.Join(readmeCurlBlocks(t, filepath.Join("..", "..", "README.md")), "")
	_, rest, ok := strings.Cut(all, "curl http://127.0.0.1:8080"+path+" ")
	if !ok {
		t.Fatalf("README.md has no curl to %s", path)
	}
	_, rest, ok = strings.Cut(rest, "-d '")
	body, _, ok2 := strings.Cut(rest, "'")
	if !ok || !ok2 || !json.Valid([]byte(body)) {
		t.Fatalf("README.md's curl to %s has no JSON body: %q", path, body)
	}
	return body
}

// TestServeYourOwnGGUF follows the README's recipe: a config with nothing but models.
func TestServeYourOwnGGUF(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(dir, "run"))
	model := filepath.Join(dir, "model.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, model); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "my.yaml")
	os.WriteFile(cfg, []byte("models:\n  - {id: my-model, path: "+model+", max_model_len: 256}\n"), 0o644)
	t.Chdir(dir)
	outBuf, _ := captureOutput(t)
	done := startServe(t, addr, "--config", cfg, "--listen", addr)
	out := outBuf.take()
	if !strings.Contains(out, "API key (tenant \"default\"") || !strings.Contains(out, "no tiers configured") || strings.Contains(out, "tier:fast") {
		t.Errorf("banner:\n%s", out)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "data", "demo-key"))
	code, body := call(t, "POST", "http://"+addr+"/v1/chat/completions", strings.TrimSpace(string(b)),
		`{"model":"my-model","messages":[{"role":"user","content":"Hello"}],"max_tokens":4}`)
	if code != 200 {
		t.Errorf("chat with the default tenant's key: %d %s", code, body)
	}
	stopServe(t, done)
}

func TestPortTakenSaysSo(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	model := filepath.Join(dir, "model.gguf")
	os.WriteFile(model, []byte("never loaded"), 0o644)
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("models:\n  - {id: m, path: "+model+"}\n"), 0o644)
	err = runServe([]string{"--config", cfg, "--listen", ln.Addr().String()})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "LISTEN=") {
		t.Fatalf("serve on a taken port: %v", err)
	}
}

func TestVersionPrintsModuleAndCommit(t *testing.T) {
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-23T20:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"lmlite v1.2.3 commit 0123abcd (modified) of 2026-11-23T20:00:00Z go1.26.8\n"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"lmlite (devel) commit unknown (built without VCS information: use make build, or go build -buildvcs=auto in a git checkout) go1.26.8\n"},
		{nil, "lmlite (no build information)\n"},
	} {
		var b strings.Builder
		printVersion(&b, tc.bi)
		if b.String() != tc.want {
			t.Errorf("got %q, want %q", b.String(), tc.want)
		}
	}
}
