package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/internal/testenv"
)

// Issue 35: what a new user meets in the first hour.

// The banner says where the dashboard is.
func TestBannerPrintsTheDashboardURL(t *testing.T) {
	cfg, err := configs.Parse(configs.Demo)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printBanner(&b, cfg, "0.0.0.0:8080", true, "lml_x", "")
	if !strings.Contains(b.String(), "dashboard: http://127.0.0.1:8080/dashboard") {
		t.Errorf("the banner does not give the dashboard's URL:\n%s", b.String())
	}
}

// A taken port is reported before serve writes anything: the demo models are not
// written into the data directory of a server that cannot listen.
func TestServeChecksThePortBeforeWritingTheDemoModels(t *testing.T) {
	home := t.TempDir()
	t.Chdir(home)
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(home, "run"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	captureOutput(t)
	err = runServe([]string{"--listen", ln.Addr().String()})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("serve on a taken port: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve wrote %s before reporting the taken port (%v)", filepath.Join(home, "data"), err)
	}
}

// A plan with a budget that reaches a model without prices is warned about at start:
// the model costs $0, so the budget never binds.
func TestServeWarnsWhenABudgetReachesAnUnpricedModel(t *testing.T) {
	cfg, err := configs.Parse([]byte(`
models:
  - {id: free, upstream: {base_url: "http://127.0.0.1:1/v1"}}
  - {id: priced, upstream: {base_url: "http://127.0.0.1:1/v1"}, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
plans:
  capped: {daily_budget_usd: 5}
  onlypriced: {daily_budget_usd: 5, allowed_models: [priced]}
  open: {}
tenants: [{id: acme, plan: capped}, {id: beta, plan: onlypriced}, {id: gamma, plan: open},
  {id: delta, plan: open, overrides: {daily_budget_usd: 1}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := unpricedBudgets(cfg)
	if len(w) != 2 || !strings.Contains(w[0], `plan "capped" with a budget (acme)`) ||
		!strings.Contains(w[0], "(free)") || !strings.Contains(w[0], "never bind") ||
		!strings.Contains(w[1], `plan "open" with a budget (delta)`) {
		t.Errorf("warnings %q, want one for plan capped (acme) and one for delta's override on plan open, naming the model free", w)
	}

	// And serve logs it at start (the log captured from a real run).
	dir := t.TempDir()
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(dir, "run"))
	addr := freeAddr(t)
	cfgPath := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfgPath, []byte("listen: "+addr+"\ndata_dir: "+filepath.Join(dir, "data")+`
models:
  - {id: free, upstream: {base_url: "http://127.0.0.1:1/v1"}}
plans: {capped: {daily_budget_usd: 5}}
tenants: [{id: acme, plan: capped}]
`), 0o644)
	_, errBuf := captureOutput(t)
	done := startServe(t, addr, "--config", cfgPath)
	stopServe(t, done)
	if log := errBuf.take(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, `budgets that never bind: tenants of plan \"capped\"`) {
		t.Errorf("serve's log has no warning about the unpriced model:\n%s", log)
	}
}

// With tenants of one's own in the config (no demo key), the server makes an admin
// key on its first start (0600 in the data directory), the banner says how to make a
// tenant's key, and `lmlite keys create --config F` while it runs finds that admin
// key and makes a key that serves /v1. A real `lmlite serve` process and the CLI in
// another one.
func TestKeysCreateWithYourOwnConfigWhileServing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(dir, "run"))
	t.Setenv("LMLITE_ADMIN_KEY", "")
	addr := freeAddr(t)
	cfgPath := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfgPath, []byte("listen: "+addr+"\ndata_dir: "+filepath.Join(dir, "data")+`
models:
  - {id: remote, upstream: {base_url: "http://127.0.0.1:1/v1"}, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.001}
plans: {p: {}}
tenants: [{id: acme, plan: p}]
`), 0o644)
	p := startLmlite(t, cfgPath, addr, filepath.Join(dir, "data"))
	p.waitReady(t)
	banner, _ := os.ReadFile(p.log)
	if !strings.Contains(string(banner), "lmlite keys create --tenant acme --config "+cfgPath) {
		t.Errorf("the banner does not say how to make a key:\n%s", banner)
	}
	st, err := os.Stat(filepath.Join(dir, "data", "admin-key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin key file: %v %v, want 0600", st, err)
	}

	// The admin key on /v1 is told what it is and how to get a tenant's key.
	adminKey, _ := os.ReadFile(filepath.Join(dir, "data", "admin-key"))
	code, body := call(t, "GET", p.base+"/v1/models", strings.TrimSpace(string(adminKey)), "")
	if code != 401 || !strings.Contains(body, "this is the admin key") || !strings.Contains(body, "lmlite keys create --tenant acme --config") ||
		strings.Contains(body, strings.TrimSpace(string(adminKey))) {
		t.Errorf("the admin key on /v1/models: %d %s", code, body)
	}

	cmd := exec.Command(os.Args[0], "keys", "create", "--tenant", "acme", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "LMLITE_TEST_AS_LMLITE=1")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("lmlite keys create --config: %v\n%s", err, errOut.String())
	}
	key := strings.TrimSpace(out.String())
	if code, body := call(t, "GET", p.base+"/v1/models", key, ""); code != 200 || !strings.Contains(body, "remote") {
		t.Errorf("the new key on /v1/models: %d %s", code, body)
	}
	p.stop(t)
}

// `lmlite bench --model` on demo-stories (llama2.c's stories260K, a context of 512)
// runs with its defaults (512 + 128 tokens do not fit): they are lowered to fit and
// the note says so; values the user gave that do not fit name the flags to lower;
// no --model says what is missing.
func TestBenchDefaultsFitTheModelsContext(t *testing.T) {
	model := testenv.SharedFile(t, "models/stories260K.gguf")
	_, errBuf := captureOutput(t)
	var out bytes.Buffer
	if err := cmdBench([]string{"--model", model, "--reps", "1", "--threads", "1", "--json"}, &out); err != nil {
		t.Fatalf("bench with its defaults: %v", err)
	}
	var r benchResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Prompt+r.Gen > 512 || r.Prompt < 1 || r.Gen < 1 {
		t.Errorf("bench: %v %s", err, out.String())
	}
	if note := errBuf.take(); !strings.Contains(note, "context is 512 tokens") || !strings.Contains(note, "--prompt 384 --gen 128") {
		t.Errorf("bench does not say it lowered its defaults: %q", note)
	}
	err := cmdBench([]string{"--model", model, "--prompt", "500", "--gen", "100", "--reps", "1"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--prompt 500 + --gen 100 exceed the model's context of 512") {
		t.Errorf("bench with a prompt and gen over the context: %v", err)
	}
	if err := cmdBench(nil, &out); err == nil || !strings.Contains(err.Error(), "--model is missing") {
		t.Errorf("bench without --model: %v", err)
	}
}

func TestFitBench(t *testing.T) {
	for _, c := range []struct {
		prompt, gen       int
		promptSet, genSet bool
		ctx               int
		p, g              int
		err               bool
	}{
		{512, 128, false, false, 0, 512, 128, false},    // context unknown
		{512, 128, false, false, 4096, 512, 128, false}, // fits
		{512, 128, false, false, 512, 384, 128, false},
		{512, 128, false, false, 256, 192, 64, false},
		{512, 64, false, true, 512, 448, 64, false},
		{100, 128, true, false, 512, 100, 128, false}, // fits as given
		{500, 128, true, false, 512, 500, 12, false},
		{512, 128, true, false, 512, 0, 0, true},
		{500, 100, true, true, 512, 0, 0, true},
	} {
		p, g, _, err := fitBench(c.prompt, c.gen, c.promptSet, c.genSet, c.ctx)
		if p != c.p || g != c.g || (err != nil) != c.err {
			t.Errorf("fitBench(%d, %d, %v, %v, %d) = %d, %d, %v; want %d, %d, error %v",
				c.prompt, c.gen, c.promptSet, c.genSet, c.ctx, p, g, err, c.p, c.g, c.err)
		}
	}
}
