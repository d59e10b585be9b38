package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/registry"
)

// TestServeRoutingAcrossProcesses runs three `lmlite serve` processes (this test
// binary re-executed) on one redis-server and checks the routing between them:
//
//   - model "auto" and "tier:deep" asked of node 1, which has no deep tier, are served
//     by node 2's deep model;
//   - a tenant's tokens/min and requests/s limits hold across processes: once node 1
//     has used the budget, node 3 refuses;
//   - a long prompt served by node 3 makes it warm for that prompt: asked again of
//     node 1 (which does not serve the model) and of node 2 (which serves it, cold),
//     it lands on node 3, whose prefix cache answers part of the prompt
//     (cached_tokens); another long prompt, warm nowhere, goes to the least loaded;
//   - node 3 stopped with SIGSTOP while a request forwarded to it waits: the request
//     ends with 502 node_lost and Retry-After within the registry's TTL and a bit, and
//     the next one goes to node 2.
//
// The model is a tiny one with RANDOM weights (lmlite gen-model).
func TestServeRoutingAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three lmlite processes")
	}
	rs, dir, model := scaleOutSetup(t)
	const prefix = "rt:"
	mdl := func(id string) string {
		return "  - {id: " + id + ", path: " + model + ", max_model_len: 1024, idle_timeout: -1s, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}\n"
	}
	// Node 1: tiny (fast). Node 2: tiny (fast), pair, deepm (deep). Node 3: tiny (fast), pair.
	models := []string{mdl("tiny"), mdl("tiny") + mdl("pair") + mdl("deepm"), mdl("tiny") + mdl("pair")}
	tierSets := []string{"{fast: [{model: tiny}]}", "{fast: [{model: tiny}], deep: [{model: deepm}]}", "{fast: [{model: tiny}]}"}
	var procs []*lmliteProc
	for i := 1; i <= 3; i++ {
		addr := freeAddr(t)
		data := filepath.Join(dir, "data"+strconv.Itoa(i))
		cfg := filepath.Join(dir, "n"+strconv.Itoa(i)+".yaml")
		os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
redis: {url: "`+rs.URL(0)+`", key_prefix: "`+prefix+`", node_id: n`+strconv.Itoa(i)+`}
models:
`+models[i-1]+`tiers: `+tierSets[i-1]+`
plans: {open: {default_tier_mode: deep}}
tenants:
  - {id: acme, plan: open}
  - {id: tpm, plan: open, overrides: {tokens_per_minute: 120}}
  - {id: rps, plan: open, overrides: {requests_per_second: 0.2, burst: 2}}
`), 0o644)
		procs = append(procs, startLmlite(t, cfg, addr, data))
	}
	for _, p := range procs {
		p.waitReady(t)
	}
	newKey := func(tenant string) string {
		code, _, b := doReq(t, "POST", procs[0].base+"/admin/keys", "admin-secret", `{"tenant":"`+tenant+`"}`)
		var k struct{ Key string }
		if err := json.Unmarshal([]byte(b), &k); code != 200 || err != nil || k.Key == "" {
			t.Fatalf("create key: %d %s", code, b)
		}
		return k.Key
	}
	acme := newKey("acme")
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	announced := func(id string) registry.Node {
		var n registry.Node
		s, _ := rc.Get(context.Background(), prefix+"reg:node:"+id).Result()
		json.Unmarshal([]byte(s), &n)
		return n
	}
	// Every node lists every model once the registries have seen each other.
	for _, p := range procs {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, _, b := doReq(t, "GET", p.base+"/v1/models", acme, "")
			if strings.Contains(b, `"id":"deepm"`) && strings.Contains(b, `"nodes":["n2","n3"]`) && strings.Contains(b, `"nodes":["n1","n2","n3"]`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never listed every model: %s", p.base, b)
			}
		}
	}

	// auto (the plan aims for deep) and tier:deep, asked of nodes 1 and 3, which have
	// no deep tier: served by node 2's deepm.
	for _, c := range []struct {
		p     *lmliteProc
		model string
	}{{procs[0], "auto"}, {procs[0], "tier:deep"}, {procs[2], "auto"}} {
		code, h, b := doReq(t, "POST", c.p.base+"/v1/chat/completions", acme,
			`{"model": "`+c.model+`", "messages": [{"role":"user","content":"hi"}], "max_tokens": 2}`)
		if code != 200 || h.Get("X-LMLite-Node") != "n2" || !strings.Contains(b, `"model":"deepm"`) {
			t.Fatalf("%s through %s: %d %v %s", c.model, c.p.base, code, h, b)
		}
	}
	// Node 1 serves a fast request itself.
	if code, h, b := doReq(t, "POST", procs[0].base+"/v1/chat/completions", acme,
		`{"model": "tier:fast", "messages": [{"role":"user","content":"hi"}], "max_tokens": 2}`); code != 200 || h.Get("X-LMLite-Node") != "" || !strings.Contains(b, `"model":"tiny"`) {
		t.Fatalf("tier:fast on node 1: %d %v %s", code, h, b)
	}

	// Tokens/min across processes: node 1 runs requests until it refuses for tokens
	// (120/min); node 3 then refuses too.
	tpm := newKey("tpm")
	spend := `{"model": "tiny", "messages": [{"role":"user","content":"spend"}], "max_tokens": 60}`
	refusedTokens := func(code int, b string) bool {
		return code == 429 && strings.Contains(b, "rate_limit_exceeded") && strings.Contains(b, "tokens")
	}
	ran := 0
	for ; ; ran++ {
		code, _, b := doReq(t, "POST", procs[0].base+"/v1/chat/completions", tpm, spend)
		if refusedTokens(code, b) {
			break
		}
		if code != 200 || ran == 10 {
			t.Fatalf("tokens/min on node 1, request %d: %d %s", ran+1, code, b)
		}
	}
	if ran == 0 {
		t.Fatal("node 1 refused the first request for tokens")
	}
	if code, _, b := doReq(t, "POST", procs[2].base+"/v1/chat/completions", tpm, spend); !refusedTokens(code, b) {
		t.Fatalf("node 3 after node 1 used the tokens/min budget (%d requests): %d %s", ran, code, b)
	}
	// Requests/s across processes: burst 2 at 0.2/s; two on node 1, the third on node 3 refused.
	rps := newKey("rps")
	one := `{"model": "tiny", "messages": [{"role":"user","content":"r"}], "max_tokens": 1}`
	for i := range 2 {
		if code, _, b := doReq(t, "POST", procs[0].base+"/v1/chat/completions", rps, one); code != 200 {
			t.Fatalf("requests/s on node 1, request %d: %d %s", i+1, code, b)
		}
	}
	if code, _, b := doReq(t, "POST", procs[2].base+"/v1/chat/completions", rps, one); code != 429 || !strings.Contains(b, "requests") {
		t.Fatalf("node 3 after node 1 used the requests/s burst: %d %s", code, b)
	}

	// Prefix-warm routing. A long system prompt (over the 256 bytes of the prefix key).
	long := func(topic string) string {
		return `{"model": "pair", "max_tokens": 2, "messages": [{"role":"system","content":"` +
			strings.Repeat("You are the assistant of the "+topic+" desk; answer briefly and politely. ", 6) +
			`"},{"role":"user","content":"hello"}]}`
	}
	warmP, coldQ := long("travel"), long("weather")
	if code, h, b := doReq(t, "POST", procs[2].base+"/v1/chat/completions", acme, warmP); code != 200 || h.Get("X-LMLite-Node") != "" {
		t.Fatalf("the long prompt on node 3: %d %v %s", code, h, b)
	}
	// Node 3 announces the prompt's key (within its 1 s renewal), with nothing in
	// flight anywhere; the others read it at their next refresh (1 s).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n2, n3 := announced("n2"), announced("n3")
		m, _ := n3.Model("pair")
		if len(m.Warm) == 1 && n3.InFlight == 0 && n2.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 3 never announced one warm key for pair with nothing in flight: %+v / %+v", n3, n2)
		}
	}
	time.Sleep(1200 * time.Millisecond)
	cached := func(b string) int {
		var r struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		json.Unmarshal([]byte(b), &r)
		return r.Usage.Details.Cached
	}
	// Warm nowhere: the least loaded, smallest id (node 2).
	if code, h, b := doReq(t, "POST", procs[0].base+"/v1/chat/completions", acme, coldQ); code != 200 || h.Get("X-LMLite-Node") != "n2" || cached(b) != 0 {
		t.Fatalf("a cold long prompt through node 1: %d %v %s", code, h, b)
	}
	// Warm on node 3: there, from node 1 and from node 2 (which serves pair cold).
	for _, p := range procs[:2] {
		code, h, b := doReq(t, "POST", p.base+"/v1/chat/completions", acme, warmP)
		if code != 200 || h.Get("X-LMLite-Node") != "n3" || cached(b) == 0 {
			t.Fatalf("the warm long prompt through %s: %d %v %s", p.base, code, h, b)
		}
		t.Logf("warm prompt through %s: served by n3, %d cached tokens", p.base, cached(b))
	}

	// Node 3 hangs (SIGSTOP) with a request forwarded to it: 502 node_lost with
	// Retry-After once its announcement expires (3 s TTL, renewed every second; node
	// 1 refreshes every second); the next request goes to node 2.
	if err := procs[2].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer procs[2].cmd.Process.Signal(syscall.SIGCONT)
	waitStopped(t, procs[2].cmd.Process.Pid)
	start := time.Now()
	code, h, b := doReq(t, "POST", procs[0].base+"/v1/chat/completions", acme, warmP)
	took := time.Since(start)
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	json.Unmarshal([]byte(b), &e)
	if code != 502 || h.Get("Retry-After") == "" || e.Error.Code != "node_lost" || e.Error.Type != "server_error" || e.Error.Message == "" || took > 8*time.Second {
		t.Fatalf("a request forwarded to a stopped node: %d after %v, %v %s", code, took, h, b)
	}
	t.Logf("forwarded to the stopped node: %d %s after %v", code, e.Error.Code, took.Round(time.Millisecond))
	start = time.Now()
	code, h, b = doReq(t, "POST", procs[0].base+"/v1/chat/completions", acme, warmP)
	if code != 200 || h.Get("X-LMLite-Node") != "n2" || time.Since(start) > 5*time.Second {
		t.Fatalf("the next request with node 3 stopped: %d after %v, %v %s", code, time.Since(start), h, b)
	}
}

// waitStopped waits until every thread of process pid is stopped (state T in
// /proc/pid/task/*/stat): kill(SIGSTOP) returns before the threads have stopped, and
// a request sent in between may still be served.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("process %d: no threads to read (%v)", pid, err)
		}
		stopped := true
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if err != nil || i < 0 || i+2 >= len(s) || s[i+2] != 'T' {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
	}
	t.Fatalf("process %d did not stop within 5 s of SIGSTOP", pid)
}
