package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// lmliteProc is `lmlite serve` in a process of its own: this test binary re-executed
// as the lmlite command (TestMain), its output in a file for when the test fails.
type lmliteProc struct {
	cmd  *exec.Cmd
	base string // http://ADDR
	data string
	log  string
	done chan error
}

func startLmlite(t *testing.T, cfgPath, addr, data string) *lmliteProc {
	t.Helper()
	p := &lmliteProc{base: "http://" + addr, data: data, log: cfgPath + ".log", done: make(chan error, 1)}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], "serve", "--config", cfgPath)
	p.cmd.Env = append(os.Environ(), "LMLITE_TEST_AS_LMLITE=1")
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("%s:\n%s", p.log, b)
		}
	})
	return p
}

// stop sends SIGTERM and waits for the drain.
func (p *lmliteProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if err != nil {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited with %v:\n%s", p.base, err, b)
		}
	case <-time.After(15 * time.Second):
		p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines into the log
		<-p.done
		p.done <- nil
		t.Fatalf("%s did not drain", p.base)
	}
}

func (p *lmliteProc) waitReady(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(p.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s stopped: %v\n%s", p.base, err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready", p.base)
		}
	}
}

func doReq(t *testing.T, method, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestServeThreeProcessesOneRedis runs three `lmlite serve` processes (this test
// binary re-executed) against one redis-server and checks that they behave as one
// service: a key made through one works on all three; a revocation made on another is
// refused by all three within 1 s; a model served only by node 2 answers through node
// 1, streamed too, and /v1/models on node 1 lists it; 60 concurrent requests of one
// tenant spread over the three never spend more than its daily budget, each either
// runs or is refused for money, and the three ledgers sum to Redis's spend exactly
// (also as `lmlite ledger verify` says); a 20 requests/s limit holds across the
// three within ±5%. The model is a tiny one with RANDOM weights
// (lmlite gen-model): its words mean nothing, only their tokens and cost count.
func TestServeThreeProcessesOneRedis(t *testing.T) { testServeThreeProcesses(t, false) }

// TestServeThreeProcessesOneRedisLeases is TestServeThreeProcessesOneRedis with
// redis: {leases: true}: the same budget, rate and reconciliation checks hold when the
// processes serve from leases (tenancy.LeaseShared), the ledgers equal to Redis's
// spend once the processes stopped (they report everything on the way out).
func TestServeThreeProcessesOneRedisLeases(t *testing.T) { testServeThreeProcesses(t, true) }

func testServeThreeProcesses(t *testing.T, leases bool) {
	if testing.Short() {
		t.Skip("starts three lmlite processes")
	}
	rs, dir, model := scaleOutSetup(t)
	const prefix = "so:"
	var procs []*lmliteProc
	var cfgs []string
	for i := 1; i <= 3; i++ {
		extra := ""
		if i == 2 { // only node 2 serves onlyb
			extra = "  - {id: onlyb, path: " + model + ", max_model_len: 128, idle_timeout: -1s, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}\n"
		}
		addr := freeAddr(t)
		data := filepath.Join(dir, "data"+strconv.Itoa(i))
		cfg := filepath.Join(dir, "n"+strconv.Itoa(i)+".yaml")
		os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
redis: {url: "`+rs.URL(0)+`", key_prefix: "`+prefix+`", node_id: n`+strconv.Itoa(i)+`, leases: `+strconv.FormatBool(leases)+`}
models:
  - {id: tiny, path: `+model+`, max_model_len: 128, idle_timeout: -1s, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
`+extra+`tiers: {fast: [{model: tiny}]}
plans: {open: {}}
tenants:
  - {id: acme, plan: open}
  - {id: race, plan: open, overrides: {daily_budget_usd: 0.3}}
  - {id: rate, plan: open, overrides: {requests_per_second: 20, burst: 10}}
`), 0o644)
		cfgs = append(cfgs, cfg)
		procs = append(procs, startLmlite(t, cfg, addr, data))
	}
	for _, p := range procs {
		p.waitReady(t)
	}

	// A key made on node 1 works on all three.
	newKey := func(tenant string) (id, key string) {
		code, _, b := doReq(t, "POST", procs[0].base+"/admin/keys", "admin-secret", `{"tenant":"`+tenant+`"}`)
		var k struct{ ID, Key string }
		if err := json.Unmarshal([]byte(b), &k); code != 200 || err != nil || k.Key == "" {
			t.Fatalf("create key: %d %s", code, b)
		}
		return k.ID, k.Key
	}
	acmeID, acme := newKey("acme")
	_, race := newKey("race")
	hello := `{"model": "tiny", "messages": [{"role":"user","content":"hi"}], "max_tokens": 4}`
	for _, p := range procs {
		if code, _, b := doReq(t, "POST", p.base+"/v1/chat/completions", acme, hello); code != 200 {
			t.Fatalf("%s with node 1's key: %d %s", p.base, code, b)
		}
	}

	// A model only node 2 serves answers through node 1 (and 3), streamed too, and
	// nodes 1 and 3 list it (each once its registry has seen the others: it refreshes
	// every second).
	for i, p := range []*lmliteProc{procs[0], procs[2]} {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, _, b := doReq(t, "GET", p.base+"/v1/models", acme, "")
			if strings.Contains(b, `"id":"onlyb"`) && strings.Contains(b, `"nodes":["n2"]`) && strings.Contains(b, `"nodes":["n1","n2","n3"]`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d never listed onlyb on n2 and tiny on all three: %s", 2*i+1, b)
			}
		}
	}
	for _, p := range []*lmliteProc{procs[0], procs[2]} {
		code, h, b := doReq(t, "POST", p.base+"/v1/chat/completions", acme, strings.Replace(hello, "tiny", "onlyb", 1))
		if code != 200 || h.Get("X-LMLite-Node") != "n2" || !strings.Contains(b, `"model":"onlyb"`) {
			t.Fatalf("onlyb through %s: %d %v %s", p.base, code, h, b)
		}
	}
	code, h, b := doReq(t, "POST", procs[0].base+"/v1/chat/completions", acme,
		`{"model": "onlyb", "stream": true, "messages": [{"role":"user","content":"hi"}], "max_tokens": 4}`)
	if code != 200 || h.Get("X-LMLite-Node") != "n2" || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") ||
		!strings.Contains(b, `"chat.completion.chunk"`) || !strings.HasSuffix(b, "data: [DONE]\n\n") {
		t.Fatalf("onlyb streamed through node 1: %d %v %q", code, h, b)
	}

	// The tenant's budget is shared exactly: 60 concurrent requests, 20 on each node.
	spend := `{"model": "tiny", "messages": [{"role":"user","content":"spend"}], "max_tokens": 16}`
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, refused := 0, 0
	var other []string
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, b := doReq(t, "POST", procs[i%3].base+"/v1/chat/completions", race, spend)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code == 200:
				ran++
			case code == 429 && strings.Contains(b, `"code":"insufficient_quota"`):
				refused++
			default:
				other = append(other, fmt.Sprintf("%d %s", code, b))
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 || ran == 0 || refused == 0 {
		t.Fatalf("ran %d, refused for money %d, other %v", ran, refused, other)
	}

	// 20 requests/s (burst 10) held across the three: offered three times that, open
	// loop, over the window (4 s; LMLITE_RATE_WINDOW=10s for the 10 s); what the
	// three admitted beyond the burst is what one exact limiter admits of the same
	// requests, within ±5% (rateLoad, checkRate).
	_, rate := newKey("rate")
	checkRate(t, "rate across three", rateLoad(t, procs, rate, rateWindow(), false, 20, 10), 20, 10)

	// Revoked on node 3: refused by all three within 1 s.
	if code, _, b := doReq(t, "DELETE", procs[2].base+"/admin/keys/"+acmeID, "admin-secret", ""); code != 200 {
		t.Fatalf("revoke: %d %s", code, b)
	}
	revoked := time.Now()
	for _, p := range procs {
		for {
			code, _, _ := doReq(t, "GET", p.base+"/v1/models", acme, "")
			if code == 401 {
				break
			}
			if time.Since(revoked) > time.Second {
				t.Fatalf("%s still accepts the revoked key after 1 s (%d)", p.base, code)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("revocation seen by all three after %v", time.Since(revoked).Round(time.Millisecond))

	// Stop the three (each holds its ledger open), then reconcile.
	for _, p := range procs {
		p.stop(t)
	}
	var ledgers money.Money
	for _, p := range procs {
		st, err := tenancy.Open(filepath.Join(p.data, "lmlite.db"), tenancy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st.Ledger(func(e tenancy.Entry) error {
			if e.Tenant == "race" {
				ledgers += e.Cost
			}
			return nil
		})
		st.Close()
	}
	c, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	day := time.Now().UTC().Format("20060102")
	spent, err := c.Get(context.Background(), prefix+"t:{race}:spent:d:"+day).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if money.Money(spent) != ledgers || ledgers > money.USD(0.3) || ledgers <= 0 {
		t.Fatalf("Redis's spend %v, the ledgers' sum %v, the budget $0.3", money.Money(spent), ledgers)
	}
	t.Logf("%d ran, %d refused for money; spend %v of $0.3 (ledgers = Redis)", ran, refused, ledgers)
	args := []string{"ledger", "verify", "--config", cfgs[0]}
	for _, p := range procs {
		args = append(args, "--data-dir", p.data)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LMLITE_TEST_AS_LMLITE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "race day "+day) {
		t.Fatalf("lmlite ledger verify: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "race ") && !strings.HasSuffix(sc.Text(), "ok") {
			t.Fatalf("lmlite ledger verify: %s", out)
		}
	}
}

// scaleOutSetup starts a Redis for a scale-out test, points the processes' run
// directory and admin key at the test's own, and generates the tiny RANDOM-weight
// model they serve: it returns the Redis, the test's directory and the model's path.
func scaleOutSetup(t *testing.T) (*redistest.Server, string, string) {
	rs := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(dir, "run"))
	t.Setenv("LMLITE_TEST_ADMIN_KEY", "admin-secret")
	model := filepath.Join(dir, "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, model); err != nil {
		t.Fatal(err)
	}
	return rs, dir, model
}
