package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/testenv"
	"github.com/lmlite/lmlite/money"
)

// The hostile-tenant suite (issue 30): a real `lmlite serve` in a child process (this
// test binary re-executed as the lmlite command, TestMain) with three tenants — a
// probe on an open plan, a hostile tenant on a tight plan (2 requests/s, 2 in flight, a
// small daily budget, a small file quota) and a second hostile tenant for the Batch
// API — the admin key kept apart, and the demo's real model (stories260K, embedded in
// this package). It speaks HTTP only. Each case re-runs one finding of issue 30 as a
// hostile tenant would, asserts the fixed behaviour, and meanwhile measures the probe
// tenant's latency: no request of one tenant may move another's p99 by more than 2×.
//
// It measures latency, so it skips under the race detector (which multiplies the
// server's CPU work 5-10x); make test runs it in its pass without -race. Bounded: 142 s
// on a 2-core machine shared with other work (a load average of 14); less on a quiet
// one (218 s with -race). It is slower,
// not longer, on a server without the fixes (516 s there: each case waits out what
// it finds). LMLITE_HOSTILE_LONG=1 runs the longer form: more probe samples, more and
// larger bursts, a longer batch.

// hostileLongEnv switches the long form on.
const hostileLongEnv = "LMLITE_HOSTILE_LONG"

// latencyFloor is added to twice the probe's baseline p99 before comparing: a p99 of a
// few milliseconds on a shared 2-core machine moves by more than 2× with scheduler noise
// alone, whatever the server does. The bound is p99 ≤ 2 × baseline + latencyFloor
// (docs/SECURITY.md says so too).
const latencyFloor = 25 * time.Millisecond

// streamWriteTimeout is the write deadline the suite configures for streams (finding
// 4): a stream whose client has not taken a byte for this long is cancelled, settled
// and its slot freed.
const streamWriteTimeout = time.Second

// Configuration keys that other changes of issue 30 add. The config is decoded
// strictly, so a server that does not know a key refuses to start: the suite then
// starts without it, and the cases that need it fail, naming it (hostileServer.need).
// The names are those of main after issue 30's merges (a3518df).
var hostileOptionalKeys = []optionalKey{
	// Finding 4 (h30d): the write deadline.
	{key: "write_timeout", top: true, value: streamWriteTimeout.String(), owner: "h30d, finding 4"},
	// Finding 7 (h30f): the tight plan's file quotas.
	{key: "files_max_bytes", value: "3000000", owner: "h30f, finding 7"},
	{key: "files_max_count", value: "8", owner: "h30f, finding 7"},
}

// optionalKey is a config line the suite writes if the server knows it: at the top
// level, or in the tight plan.
type optionalKey struct {
	key, value, owner string
	top               bool
}

// Tenants and the model.
const (
	hostileModel = "stories"
	probeBody    = `{"model":"stories","prompt":"Once upon a time","max_tokens":16,"temperature":0}`
	// prices of the model: the batch case computes what a line costs.
	hostilePromptPer1K     = 0.001
	hostileCompletionPer1K = 0.002
)

// hostileSizes are the bounded and long forms' sizes.
type hostileSizes struct {
	probeSamples int           // sequential probe requests per measurement, at least
	probeFor     time.Duration // and for at least this long (a fast probe: more samples)
	bigPrompts   int           // concurrent 1 MB prompts per burst
	batchLines   int           // lines of the spoofed batch
}

func hostileSizesFor(long bool) hostileSizes {
	if long {
		return hostileSizes{probeSamples: 200, probeFor: 10 * time.Second, bigPrompts: 20, batchLines: 64}
	}
	return hostileSizes{probeSamples: 40, probeFor: 3 * time.Second, bigPrompts: 10, batchLines: 16}
}

// hostileCase is one hostile behaviour: start begins it (asserting what the hostile
// tenant is answered) and returns the func that stops it and makes the case's final
// checks. The probe's p99 is measured between the two.
type hostileCase struct {
	name  string
	start func(t *testing.T, h *hostileServer) (stop func())
}

func TestHostileTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts lmlite processes")
	}
	if testenv.Race {
		// The suite measures latency: under the race detector the server's CPU work
		// (parsing a megabyte body, a batch line's steps) grows 5-10x and no longer
		// says what a tenant can do to another. Each finding's own regression test
		// runs under -race; make test runs this suite without it.
		t.Skip("measures latency: make test runs it without the race detector")
	}
	long := os.Getenv(hostileLongEnv) == "1"
	h := startHostileServer(t, hostileSizesFor(long))
	if len(h.missing) > 0 {
		t.Logf("config keys this server does not know (the cases needing them fail): %v", h.missing)
	}
	for range 5 { // warm: the model loaded, the first allocations done
		h.do(t, "POST", "/v1/completions", h.probe, probeBody)
	}
	base := h.probeLatency(t)
	t.Logf("probe alone at start: p50 %v p99 %v over %d requests; latency bound: 2 × p99 alone + %v",
		base.p50, base.p99, base.n, latencyFloor)

	cases := []hostileCase{
		{name: "cyclic_ref_schemas", start: cyclicSchemas},
		{name: "spoofed_batch_ids_then_restart", start: spoofedBatchIDs},
		{name: "concurrent_1MB_prompts", start: bigPrompts},
		{name: "stream_client_stops_reading", start: stalledStreams},
		{name: "keep_alive_0s", start: keepAliveZero},
		{name: "grammar_64_optional_properties", start: grammarSixtyFour},
		{name: "files_and_metadata_past_limits", start: filesPastLimits},
		{name: "8KiB_headers_with_secret", start: bigHeaders},
		{name: "usage_start_time_overflow", start: usageOverflow},
		{name: "cyclic_ref_batch_line", start: cyclicBatchLine},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			alone := h.probeLatency(t) // just before: the machine's load drifts
			stop := c.start(t, h)
			bound := 2*alone.p99 + latencyFloor
			lat := h.probeLatency(t)
			t.Logf("probe alone: p50 %v p99 %v (%d requests); beside the hostile tenant: p50 %v p99 %v (%d; bound %v)",
				alone.p50, alone.p99, alone.n, lat.p50, lat.p99, lat.n, bound)
			if lat.p99 > bound { // once more, for a noisy neighbour on the machine
				lat = h.probeLatency(t)
				t.Logf("measured again beside it: p50 %v p99 %v (%d)", lat.p50, lat.p99, lat.n)
			}
			if lat.p99 > bound {
				t.Errorf("the probe's p99 %v beside the hostile tenant is over 2 × its p99 alone %v + %v", lat.p99, alone.p99, latencyFloor)
			}
			stop()
			h.ensureAlive(t)
		})
	}
}

// hostileServer is the lmlite process under attack and the keys of its tenants.
type hostileServer struct {
	t         *testing.T // the whole suite's: the processes are its
	dir, addr string
	sizes     hostileSizes
	p         *lmliteProc
	starts    int
	logs      []string          // every start's log file
	missing   map[string]string // optional config keys the server refused → their owner
	admin     string
	probe     string // the probe tenant's key
	hostile   string // the tight plan's
	batcher   string // the Batch API hostile's
	client    *http.Client
}

const hostileAdminKey = "hostile-suite-admin-key"

func startHostileServer(t *testing.T, sizes hostileSizes) *hostileServer {
	dir := t.TempDir()
	model := filepath.Join(dir, "stories260K.gguf")
	if err := os.WriteFile(model, storiesGGUF, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LMLITE_HOSTILE_ADMIN_KEY", hostileAdminKey)
	h := &hostileServer{t: t, dir: dir, addr: freeAddr(t), sizes: sizes, missing: map[string]string{}, admin: hostileAdminKey,
		client: &http.Client{Timeout: 2 * time.Minute}}
	h.start(t)
	h.probe = h.createKey(t, "probe")
	h.hostile = h.createKey(t, "hostile")
	h.batcher = h.createKey(t, "batcher")
	return h
}

// config is the configuration file, without the optional keys the server refused.
func (h *hostileServer) config() string {
	var top, plan strings.Builder
	for _, k := range hostileOptionalKeys {
		if _, ok := h.missing[k.key]; ok {
			continue
		}
		if k.top {
			fmt.Fprintf(&top, "%s: %s\n", k.key, k.value)
		} else {
			fmt.Fprintf(&plan, "    %s: %s\n", k.key, k.value)
		}
	}
	return `listen: ` + h.addr + `
data_dir: ` + filepath.Join(h.dir, "data") + `
admin_key_env: LMLITE_HOSTILE_ADMIN_KEY
ledger: {sync: process}
max_in_flight: 64
` + top.String() + `models:
  - {id: ` + hostileModel + `, path: ` + filepath.Join(h.dir, "stories260K.gguf") + `, max_model_len: 512, max_concurrency: 32, idle_timeout: 10m, prompt_usd_per_1k: ` +
		strconv.FormatFloat(hostilePromptPer1K, 'f', -1, 64) + `, completion_usd_per_1k: ` + strconv.FormatFloat(hostileCompletionPer1K, 'f', -1, 64) + `}
plans:
  open: {}
  tight:
    requests_per_second: 2
    burst: 2
    max_concurrency: 2
    daily_budget_usd: 0.5
` + plan.String() + `  batch: {batch_max_concurrency: 1}
tenants:
  - {id: probe, plan: open}
  - {id: hostile, plan: tight}
  - {id: batcher, plan: batch}
`
}

var unknownField = regexp.MustCompile(`field (\w+) not found`)

// start starts the server on the data directory (again); an optional key it refuses
// is dropped and noted, and it is started once more.
func (h *hostileServer) start(t *testing.T) {
	t.Helper()
	for {
		h.starts++
		cfg := filepath.Join(h.dir, fmt.Sprintf("c%d.yaml", h.starts))
		if err := os.WriteFile(cfg, []byte(h.config()), 0o644); err != nil {
			t.Fatal(err)
		}
		h.p = h.startProc(cfg)
		h.logs = append(h.logs, h.p.log)
		err := h.waitReady()
		if err == nil {
			if h.probe != "" { // a restart: warm, as at the first start
				for range 5 {
					h.do(t, "POST", "/v1/completions", h.probe, probeBody)
				}
			}
			return
		}
		b, _ := os.ReadFile(h.p.log)
		m := unknownField.FindSubmatch(b)
		dropped := false
		for _, k := range hostileOptionalKeys {
			if m != nil && string(m[1]) == k.key {
				h.missing[k.key] = k.owner
				dropped = true
			}
		}
		if !dropped {
			t.Fatalf("lmlite did not start: %v\n%s", err, b)
		}
	}
}

// startProc is startLmlite without its dump of whole logs at a failure (a stack
// overflow writes thousands of lines): its process belongs to the whole test, not to
// the case that (re)started it, and the cleanup shows each log's first error.
func (h *hostileServer) startProc(cfgPath string) *lmliteProc {
	t := h.t
	p := &lmliteProc{base: "http://" + h.addr, data: filepath.Join(h.dir, "data"), log: cfgPath + ".log", done: make(chan error, 1)}
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
			t.Logf("%s: %s", p.log, whyDied(b))
		}
	})
	return p
}

// whyDied is the part of a server log that says why it died (a fatal error or a
// panic and the frames after it), or its end.
func whyDied(b []byte) []byte {
	for _, m := range []string{"fatal error:", "panic:", "WARNING: DATA RACE"} {
		if i := bytes.Index(b, []byte(m)); i >= 0 {
			return b[i:min(len(b), i+2000)]
		}
	}
	return lastBytes(b, 1500)
}

// waitReady waits for /readyz, or reports that the process ended.
func (h *hostileServer) waitReady() error {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-h.p.done:
			h.p.done <- err
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if resp, err := http.Get(h.p.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
	}
	return fmt.Errorf("not ready after 60 s")
}

// kill ends the server with SIGKILL and waits for it.
func (h *hostileServer) kill() {
	h.p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-h.p.done
	h.p.done <- err
}

// exited reports whether the process has ended, and how.
func (h *hostileServer) exited() (bool, error) {
	select {
	case err := <-h.p.done:
		h.p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// ensureAlive fails the test if the server died (or stopped answering), with the end
// of its log, and starts it again so the next cases run.
func (h *hostileServer) ensureAlive(t *testing.T) {
	t.Helper()
	dead, err := h.exited()
	if !dead {
		resp, herr := h.client.Get(h.p.base + "/healthz")
		if herr == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		err = fmt.Errorf("/healthz: %v", herr)
		h.p.cmd.Process.Kill()
		<-h.p.done
		h.p.done <- nil
	}
	b, _ := os.ReadFile(h.p.log)
	t.Errorf("the server did not survive: %v; its log:\n%s", err, whyDied(b))
	h.start(t)
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// need fails the test when the server refused an optional config key the case needs.
func (h *hostileServer) need(t *testing.T, key string) bool {
	t.Helper()
	if owner, ok := h.missing[key]; ok {
		t.Errorf("the server does not know the config key %q (%s): not merged yet, or named otherwise (fix hostileOptionalKeys)", key, owner)
		return false
	}
	return true
}

func (h *hostileServer) createKey(t *testing.T, tenant string) string {
	t.Helper()
	code, body := h.do(t, "POST", "/admin/keys", h.admin, `{"tenant":"`+tenant+`"}`)
	var k struct{ Key string }
	if err := json.Unmarshal([]byte(body), &k); code != 200 || err != nil || k.Key == "" {
		t.Fatalf("admin keys %s: %d %s", tenant, code, body)
	}
	return k.Key
}

// do sends one request; a transport error is status 0 with the error as the body.
func (h *hostileServer) do(t *testing.T, method, path, key, body string, header ...string) (int, string) {
	code, _, b := h.doH(t, method, path, key, strings.NewReader(body), header...)
	return code, b
}

func (h *hostileServer) doH(t *testing.T, method, path, key string, body io.Reader, header ...string) (int, http.Header, string) {
	req, err := http.NewRequest(method, h.p.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// planLimited is the tight plan's own refusal (requests/s or in flight; uploads or
// batch creates per minute), which the hostile tenant waits out when the case is about
// something else.
func planLimited(code int, body string) bool {
	return code == 429 && strings.Contains(body, "rate limit reached")
}

// hostileDo sends a request of the hostile tenant, waiting out its plan's rate limit
// (up to 30 s), and returns the first other answer.
func (h *hostileServer) hostileDo(t *testing.T, key, method, path, body string, header ...string) (int, string) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		code, b := h.do(t, method, path, key, body, header...)
		if !planLimited(code, b) || time.Now().After(deadline) {
			return code, b
		}
	}
}

type probeStats struct {
	p50, p99 time.Duration
	n        int // requests measured
}

// probeWithin bounds one latency measurement.
const probeWithin = 20 * time.Second

// probeLatency sends the probe's 16-token requests one after another and returns
// their p50 and p99; a probe request that fails is an error (the probe is never
// refused for what another tenant does).
func (h *hostileServer) probeLatency(t *testing.T) probeStats {
	t.Helper()
	n := h.sizes.probeSamples
	ds := make([]time.Duration, 0, n)
	failed := 0
	var first string
	// Bounded in time too: a server that stalls the probe for seconds a request has
	// failed already, and the suite must end.
	start := time.Now()
	for deadline := start.Add(probeWithin); (len(ds) < n || time.Since(start) < h.sizes.probeFor) && len(ds) < 4000 && time.Now().Before(deadline); {
		t0 := time.Now()
		code, body := h.do(t, "POST", "/v1/completions", h.probe, probeBody)
		ds = append(ds, time.Since(t0))
		if code != 200 {
			if failed == 0 {
				first = fmt.Sprintf("%d %.300s", code, body)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d probe requests failed; the first: %s", failed, len(ds), first)
	}
	if len(ds) < n {
		t.Logf("only %d of %d probe requests within %v", len(ds), n, probeWithin)
	}
	n = len(ds)
	slices.Sort(ds)
	return probeStats{p50: ds[(n-1)/2], p99: ds[int(math.Ceil(0.99*float64(n)))-1], n: n}
}

// loopErrs collects a loop's failures: the first of each kind is reported, with how
// many times it happened, when the loop stops.
type loopErrs struct {
	mu    sync.Mutex
	first map[string]string
	n     map[string]int
}

func (e *loopErrs) add(kind, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		e.first, e.n = map[string]string{}, map[string]int{}
	}
	if e.n[kind]++; e.n[kind] == 1 {
		e.first[kind] = fmt.Sprintf(format, args...)
	}
}

func (e *loopErrs) report(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for kind, msg := range e.first {
		t.Errorf("%s (%d times in the loop)", msg, e.n[kind])
	}
}

// hostileLoop runs f again and again, every `every`, until the returned stop is called
// (which waits for the last run and reports the loop's failures).
func hostileLoop(t *testing.T, every time.Duration, f func(i int, e *loopErrs)) (stop func()) {
	e := &loopErrs{}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			f(i, e)
			select {
			case <-quit:
				return
			case <-time.After(every):
			}
		}
	}()
	return func() { close(quit); <-done; e.report(t) }
}

// cyclicShapes are the four shapes of finding 1: $ref cycles that consume no input.
func cyclicShapes() (shapes map[string]string, names []string) {
	shapes = map[string]string{
		"a→a":        `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		"a→b→a":      `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		"anyOf[a,s]": `{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"string"}]}},"$ref":"#/$defs/a"}`,
		"allOf[a]":   `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`,
	}
	for k := range shapes {
		names = append(names, k)
	}
	slices.Sort(names)
	return shapes, names
}

func cyclicBody(schema string, strict bool) string {
	return `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":8,` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"c","strict":` + strconv.FormatBool(strict) + `,"schema":` + schema + `}}}`
}

// Finding 1: response_format schemas whose $ref cycles without consuming input are a
// 400, strict or not, and the server survives them.
func cyclicSchemas(t *testing.T, h *hostileServer) func() {
	shapes, names := cyclicShapes()
	body := cyclicBody
	for _, name := range names {
		for _, strict := range []bool{false, true} {
			code, b := h.hostileDo(t, h.hostile, "POST", "/v1/chat/completions", body(shapes[name], strict))
			if code != 400 {
				t.Errorf("schema %s (strict %v): %d %.300s, want 400", name, strict, code, b)
			}
			if dead, _ := h.exited(); dead {
				t.Errorf("schema %s (strict %v) killed the server", name, strict)
				h.ensureAlive(t)
			}
		}
	}
	// Beside the probe: the shapes again, in a loop.
	return hostileLoop(t, 300*time.Millisecond, func(i int, e *loopErrs) {
		if dead, _ := h.exited(); dead {
			return
		}
		name := names[i%len(names)]
		if code, b := h.do(t, "POST", "/v1/chat/completions", h.hostile, body(shapes[name], i%2 == 0)); code != 400 && !planLimited(code, b) {
			e.add(name, "schema %s: %d %.200s, want 400", name, code, b)
		}
	})
}

// Finding 2: a tenant that sends cheap requests whose X-Request-Id is its batch's line
// ids, before a restart, still pays for the whole batch.
func spoofedBatchIDs(t *testing.T, h *hostileServer) func() {
	n := h.sizes.batchLines
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, `{"custom_id":"l%d","method":"POST","url":"/v1/completions","body":{"model":"stories","prompt":"Once upon a time %d","max_tokens":96,"temperature":0}}`+"\n", i, i)
	}
	fileID := h.upload(t, h.batcher, lines.String())
	if fileID == "" {
		return func() {}
	}
	code, b := h.do(t, "POST", "/v1/batches", h.batcher, `{"input_file_id":"`+fileID+`","endpoint":"/v1/completions","completion_window":"24h"}`)
	var bt struct{ ID string }
	if err := json.Unmarshal([]byte(b), &bt); code != 200 || err != nil || bt.ID == "" {
		t.Errorf("batch create: %d %.300s", code, b)
		return func() {}
	}
	price := money.Price{PromptPer1K: money.USD(hostilePromptPer1K), CompletionPer1K: money.USD(hostileCompletionPer1K)}
	var spoofCost money.Money
	for i := 0; i <= n; i++ { // lines may count from 0 or 1: both
		code, b := h.do(t, "POST", "/v1/completions", h.batcher, `{"model":"stories","prompt":"x","max_tokens":1}`,
			"X-Request-Id", fmt.Sprintf("%s-%d", bt.ID, i))
		if code == 200 {
			spoofCost += usageCost(t, price, b)
		}
	}
	st := h.batchStatus(t, bt.ID)
	if st.Status == "completed" {
		t.Errorf("the batch completed before the restart (%d lines): the case proves nothing; make its lines longer", n)
	}
	// The restart is a kill -9 (a crash, a node lost): the worst case for the ledger.
	t.Logf("killing and restarting the server with %d of %d lines done", st.RequestCounts.Completed, n)
	h.kill()
	h.start(t)
	return func() {
		st := h.waitBatch(t, bt.ID, 3*time.Minute)
		if st.Status != "completed" || st.OutputFileID == "" {
			t.Errorf("the batch ended %s (%+v)", st.Status, st.RequestCounts)
			return
		}
		code, out := h.do(t, "GET", "/v1/files/"+st.OutputFileID+"/content", h.batcher, "")
		if code != 200 {
			t.Errorf("output: %d %.300s", code, out)
			return
		}
		var lineCost money.Money
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l struct {
				Response struct {
					Body json.RawMessage `json:"body"`
				} `json:"response"`
			}
			json.Unmarshal(sc.Bytes(), &l)
			lineCost += usageCost(t, price, string(l.Response.Body))
		}
		code, body := h.do(t, "GET", "/admin/usage?tenant=batcher", h.admin, "")
		var u struct {
			Spent float64 `json:"spent_today_usd"`
		}
		if err := json.Unmarshal([]byte(body), &u); code != 200 || err != nil {
			t.Errorf("admin usage: %d %s", code, body)
			return
		}
		// At least every line's usage and the spoofed requests; at most one line's
		// worst case more: a line the kill interrupted may be charged for what it did
		// before (a durable reservation) and run again.
		lo := (lineCost + spoofCost).Dollars()
		hi := lo + price.Cost(64, 96).Dollars()
		t.Logf("batch lines $%.6f + spoofed requests $%.6f; charged $%.6f", lineCost.Dollars(), spoofCost.Dollars(), u.Spent)
		if u.Spent < lo-1e-9 || u.Spent > hi+1e-9 {
			t.Errorf("the tenant was charged $%.9f for its batch and requests, want $%.9f (the lines' usage at the model's prices) up to $%.9f", u.Spent, lo, hi)
		}
	}
}

func usageCost(t *testing.T, price money.Price, body string) money.Money {
	var r struct {
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Errorf("usage of %.200s: %v", body, err)
	}
	return price.Cost(r.Usage.Prompt, r.Usage.Completion)
}

type batchState struct {
	Status        string `json:"status"`
	OutputFileID  string `json:"output_file_id"`
	RequestCounts struct {
		Total, Completed, Failed int
	} `json:"request_counts"`
}

func (h *hostileServer) batchStatus(t *testing.T, id string) batchState {
	code, b := h.do(t, "GET", "/v1/batches/"+id, h.batcher, "")
	var s batchState
	if err := json.Unmarshal([]byte(b), &s); code != 200 || err != nil {
		t.Errorf("batch %s: %d %.300s", id, code, b)
	}
	return s
}

func (h *hostileServer) waitBatch(t *testing.T, id string, within time.Duration) batchState {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		s := h.batchStatus(t, id)
		switch s.Status {
		case "completed", "failed", "cancelled", "expired", "":
			return s
		}
		if time.Now().After(deadline) {
			t.Errorf("batch %s still %s after %v", id, s.Status, within)
			return s
		}
	}
}

// upload sends a batch input file; "" when refused (an error).
func (h *hostileServer) upload(t *testing.T, key, content string) string {
	code, b := h.uploadRaw(t, key, content)
	var f struct{ ID string }
	if err := json.Unmarshal([]byte(b), &f); code != 200 || err != nil {
		t.Errorf("upload: %d %.300s", code, b)
		return ""
	}
	return f.ID
}

func (h *hostileServer) uploadRaw(t *testing.T, key, content string) (int, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	io.WriteString(fw, content)
	mw.Close()
	code, _, b := h.doH(t, "POST", "/v1/files", key, &buf, "Content-Type", mw.FormDataContentType())
	return code, b
}

// childMemory reads the server's resident and peak resident memory (kB).
func (h *hostileServer) childMemory(t *testing.T) (rss, hwm int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.p.cmd.Process.Pid))
	if err != nil {
		t.Errorf("reading the server's memory: %v", err)
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			switch f[0] {
			case "VmRSS:":
				rss, _ = strconv.Atoi(f[1])
			case "VmHWM:":
				hwm, _ = strconv.Atoi(f[1])
			}
		}
	}
	return rss, hwm
}

// bigPromptGrowthKB bounds how far the server's peak memory may rise over its resident
// memory while a rate- and concurrency-limited tenant sends concurrent 1 MB prompts.
const bigPromptGrowthKB = 200 << 10

// Finding 3: concurrent 1 MB prompts from the tight plan (2 requests/s, 2 in flight)
// are refused by admission (429) before they are tokenized, and the server's memory
// stays within bigPromptGrowthKB of where it was.
func bigPrompts(t *testing.T, h *hostileServer) func() {
	// Reset the peak (VmHWM) to the current RSS: "5" to clear_refs.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", h.p.cmd.Process.Pid), []byte("5"), 0); err != nil {
		t.Errorf("resetting the server's peak memory: %v", err)
	}
	rss0, _ := h.childMemory(t)
	prompt := strings.Repeat("Once upon a time there was a dog. ", 1_000_000/34)
	body := `{"model":"stories","prompt":"` + prompt + `","max_tokens":16}`
	var transportErr string
	burst := func() (codes map[int]int) {
		codes = map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range h.sizes.bigPrompts {
			wg.Go(func() {
				code, b := h.do(t, "POST", "/v1/completions", h.hostile, body)
				mu.Lock()
				codes[code]++
				if code == 0 && transportErr == "" {
					transportErr = b
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return codes
	}
	check := func(errorf func(kind, format string, args ...any), codes map[int]int, which string) {
		// The plan admits 2 at once and 2 a second; a prompt admitted is a cheap 400
		// (over the context) and frees its slot at once, and a cheap check of the
		// prompt's bytes may come first, so only "some 429s, no 200, no 5xx" is sure.
		if codes[429] == 0 {
			errorf("no429", "%s burst of %d 1 MB prompts: answers %v, want 429s (2 requests/s, 2 in flight)", which, h.sizes.bigPrompts, codes)
		}
		for code, k := range codes {
			if code != 429 && code != 400 && code != 413 {
				errorf(strconv.Itoa(code), "%s burst: %d answers %d, want only 429, 400 or 413", which, k, code)
			}
		}
	}
	codes := burst()
	t.Logf("first burst: %v", codes)
	check(func(_, format string, args ...any) { t.Errorf(format, args...) }, codes, "the first")
	stop := hostileLoop(t, time.Second, func(_ int, e *loopErrs) {
		check(e.add, burst(), "a later")
	})
	return func() {
		stop()
		if transportErr != "" {
			t.Logf("the first transport error (answer 0): %s", transportErr)
		}
		rss, hwm := h.childMemory(t)
		t.Logf("server memory: RSS %d MB before, peak %d MB, %d MB after", rss0>>10, hwm>>10, rss>>10)
		if hwm-rss0 > bigPromptGrowthKB {
			t.Errorf("the server's peak memory rose by %d MB (from %d MB), over %d MB", (hwm-rss0)>>10, rss0>>10, bigPromptGrowthKB>>10)
		}
	}
}

// Finding 4: a streaming client that stops reading (a small receive buffer, never
// read) loses its slot after the write deadline: its tenant (2 in flight) may send
// again. The two streams ask for n=8 choices (the most) of 460 tokens with 20 top
// logprobs each: about 5 MB of events, more than the sockets' buffers hold (the server's send
// buffer grows to tcp_wmem's maximum, 4 MiB by default).
func stalledStreams(t *testing.T, h *hostileServer) func() {
	h.need(t, "write_timeout")
	var conns []net.Conn
	openStalled := func(body string) {
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			return serr
		}}
		c, err := d.Dial("tcp", h.addr)
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			h.addr, h.hostile, len(body), body)
		time.Sleep(600 * time.Millisecond) // within 2 requests/s
	}
	big := `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":460,"n":8,"logprobs":true,"top_logprobs":20,"stream":true}`
	openStalled(big)
	openStalled(big)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	small := `{"model":"stories","prompt":"hi","max_tokens":1}`
	// The two streams hold the tenant's two slots…
	held := false
	var last string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !held; time.Sleep(600 * time.Millisecond) {
		code, b := h.do(t, "POST", "/v1/completions", h.hostile, small)
		held = code == 429 && strings.Contains(b, "concurrency")
		last = fmt.Sprintf("%d %.200s", code, b)
	}
	if !held {
		t.Errorf("the stalled streams do not hold the tenant's slots (the last answer: %s): the case proves nothing", last)
	}
	t0 := time.Now()
	// …until the write deadline frees them (the generation itself takes a while: 27 s
	// under -race on a 2-core machine with a load average of 12).
	within := streamWriteTimeout + 60*time.Second
	freed := false
	for time.Since(t0) < within && !freed {
		time.Sleep(600 * time.Millisecond)
		code, b := h.do(t, "POST", "/v1/completions", h.hostile, small)
		freed = code == 200
		last = fmt.Sprintf("%d %.200s", code, b)
	}
	if freed {
		t.Logf("the stalled streams' slots freed after %v", time.Since(t0).Round(10*time.Millisecond))
	} else {
		t.Errorf("the stalled streams still hold their slots after %v (the last answer: %s)", within, last)
	}
	// Beside the probe: the big streams closed (their generation, 7,360 tokens with
	// logprobs, is work the plan admits, not what this case measures), two small ones
	// that stop reading too, kept open.
	closeAll()
	conns = nil
	little := `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":460,"stream":true}`
	openStalled(little)
	openStalled(little)
	return closeAll
}

// Finding 5: "keep_alive": "0s" from the hostile tenant never unloads the model the
// probe uses.
func keepAliveZero(t *testing.T, h *hostileServer) func() {
	state := func() string {
		code, b := h.do(t, "GET", "/admin/models", h.admin, "")
		var l struct{ Data []struct{ ID, State string } }
		json.Unmarshal([]byte(b), &l)
		for _, m := range l.Data {
			if m.ID == hostileModel {
				return m.State
			}
		}
		return fmt.Sprintf("%d %.200s", code, b)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	ok := 0
	stopPoll := hostileLoop(t, 20*time.Millisecond, func(int, *loopErrs) {
		s := state()
		mu.Lock()
		seen[s]++
		mu.Unlock()
	})
	stopHostile := hostileLoop(t, 550*time.Millisecond, func(_ int, e *loopErrs) {
		code, b := h.do(t, "POST", "/v1/completions", h.hostile, `{"model":"stories","prompt":"hi","max_tokens":4,"lmlite":{"keep_alive":"0s"}}`)
		switch {
		case code == 200:
			mu.Lock()
			ok++
			mu.Unlock()
		case planLimited(code, b):
		case code >= 400 && code < 500:
			// a plan that may not shorten keep_alive may be told so
		default:
			e.add(strconv.Itoa(code), "keep_alive 0s: %d %.200s", code, b)
		}
	})
	return func() {
		// The probe's own requests reset the model's idle timer: the hostile tenant
		// goes on alone for a while (the engine decides unloads once a second).
		time.Sleep(2500 * time.Millisecond)
		stopHostile()
		time.Sleep(1500 * time.Millisecond)
		stopPoll()
		t.Logf("model states seen while the hostile tenant sent keep_alive 0s (%d answered): %v", ok, seen)
		for s, k := range seen {
			if s != "ready" {
				t.Errorf("the model was %q %d times: the hostile tenant's keep_alive 0s unloaded it for everyone", s, k)
			}
		}
	}
}

// Finding 6: a fresh schema of 64 optional properties per request, from the hostile
// tenant, beside the probe: the probe's latency is the measure; the hostile tenant's
// requests end (200, or a 4xx when its grammar budget runs out), never a 5xx.
func grammarSixtyFour(t *testing.T, h *hostileServer) func() {
	rng := rand.New(rand.NewPCG(30, 6))
	body := func() string {
		var p strings.Builder
		for i := range 64 {
			if i > 0 {
				p.WriteByte(',')
			}
			fmt.Fprintf(&p, `"f%d_%d":{"type":"boolean"}`, i, rng.IntN(1_000_000))
		}
		return `{"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":200,"temperature":0,` +
			`"response_format":{"type":"json_schema","json_schema":{"name":"g","schema":{"type":"object","properties":{` + p.String() + `},"additionalProperties":false}}}}`
	}
	var mu sync.Mutex
	codes := map[int]int{}
	stop := hostileLoop(t, 250*time.Millisecond, func(_ int, e *loopErrs) {
		code, b := h.do(t, "POST", "/v1/chat/completions", h.hostile, body())
		mu.Lock()
		codes[code]++
		mu.Unlock()
		if code >= 500 || code == 0 {
			e.add(strconv.Itoa(code), "a 64-property schema: %d %.200s", code, b)
		}
	})
	return func() {
		stop()
		t.Logf("the hostile tenant's answers: %v", codes)
		if codes[200] == 0 {
			t.Errorf("no 64-property request ran (%v): the case measured nothing", codes)
		}
	}
}

// Finding 7: OpenAI's metadata limits (16 keys, 512 characters a value) and the
// tenant's file quota.
func filesPastLimits(t *testing.T, h *hostileServer) func() {
	fileID := h.upload(t, h.hostile, `{"custom_id":"m","method":"POST","url":"/v1/completions","body":{"model":"stories","prompt":"hi","max_tokens":1}}`+"\n")
	create := func(meta map[string]string) (int, string) {
		m, _ := json.Marshal(meta)
		return h.hostileDo(t, h.hostile, "POST", "/v1/batches",
			`{"input_file_id":"`+fileID+`","endpoint":"/v1/completions","completion_window":"24h","metadata":`+string(m)+`}`)
	}
	if fileID != "" {
		if code, b := create(map[string]string{"k": strings.Repeat("x", 1_000_000)}); code < 400 || code >= 500 {
			t.Errorf("1 MB of metadata: %d %.200s, want a 4xx", code, b)
		}
		seventeen := map[string]string{}
		for i := range 17 {
			seventeen[fmt.Sprintf("k%d", i)] = "v"
		}
		if code, b := create(seventeen); code != 400 {
			t.Errorf("17 metadata keys: %d %.200s, want 400", code, b)
		}
		sixteen := map[string]string{}
		for i := range 16 {
			sixteen[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 512)
		}
		if code, b := create(sixteen); code != 200 {
			t.Errorf("16 metadata keys of 512 characters (OpenAI's limit): %d %.200s, want 200", code, b)
		}
	}
	// Uploads of 1 MB until refused: the plan allows 3,000,000 bytes.
	if h.need(t, "files_max_bytes") {
		mb := strings.Repeat(`{"custom_id":"x","method":"POST","url":"/v1/completions","body":{"model":"stories","prompt":"hi","max_tokens":1}}`+"\n", 1_000_000/110)
		refused := 0
		var answers []int
		for i := 0; i < 6 && refused == 0; i++ {
			code, b := h.uploadRaw(t, h.hostile, mb)
			for planLimited(code, b) {
				time.Sleep(500 * time.Millisecond)
				code, b = h.uploadRaw(t, h.hostile, mb)
			}
			answers = append(answers, code)
			switch {
			case code == 200:
			case code >= 400 && code < 500:
				refused = i + 1
			default:
				t.Errorf("upload %d: %d %.200s", i+1, code, b)
			}
		}
		t.Logf("1 MB uploads answered %v", answers)
		if refused == 0 || refused > 3 {
			t.Errorf("1 MB uploads past a 3,000,000-byte quota: %v, want a 4xx by the third", answers)
		}
	}
	// Beside the probe: uploads past the quota, again and again.
	return hostileLoop(t, 600*time.Millisecond, func(_ int, e *loopErrs) {
		if code, b := h.uploadRaw(t, h.hostile, strings.Repeat("x", 100_000)); code >= 500 || code == 0 {
			e.add(strconv.Itoa(code), "an upload past the quota: %d %.200s", code, b)
		}
	})
}

// Finding 9: 8 KiB of headers, the tenant's key in Authorization, is a 431 whose body
// does not hold the key, and the key is in no log of the server.
func bigHeaders(t *testing.T, h *hostileServer) func() {
	send := func() (int, string) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			return 0, err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		body := probeBody
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nX-Pad: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			h.addr, h.hostile, strings.Repeat("p", 8<<10), len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	secret := h.hostile[strings.LastIndexByte(h.hostile, '_')+1:] // the key's secret part
	check := func(errorf func(kind, format string, args ...any), code int, b string) {
		if code != 431 {
			errorf("status", "8 KiB of headers: %d %.200s, want 431", code, b)
		}
		if strings.Contains(b, secret) {
			errorf("secret", "the answer to 8 KiB of headers holds the Authorization header's key")
		}
	}
	code, b := send()
	check(func(_, format string, args ...any) { t.Errorf(format, args...) }, code, b)
	stop := hostileLoop(t, 100*time.Millisecond, func(_ int, e *loopErrs) {
		code, b := send()
		check(e.add, code, b)
	})
	return func() {
		stop()
		time.Sleep(100 * time.Millisecond)
		for _, l := range h.logs {
			if b, _ := os.ReadFile(l); bytes.Contains(b, []byte(secret)) {
				t.Errorf("the server's log %s holds the key of a request with 8 KiB of headers", l)
			}
		}
	}
}

// Finding 10: start_time past what a time can hold is a 400 naming it, not a
// recovered panic.
func usageOverflow(t *testing.T, h *hostileServer) func() {
	path := "/v1/organization/usage/completions?start_time=9223372036854775807"
	check := func(errorf func(kind, format string, args ...any), code int, b string) {
		if code != 400 || !strings.Contains(b, "start_time") {
			errorf("status", "usage with start_time=9223372036854775807: %d %.200s, want 400 naming start_time", code, b)
		}
	}
	code, b := h.hostileDo(t, h.hostile, "GET", path, "")
	check(func(_, format string, args ...any) { t.Errorf(format, args...) }, code, b)
	return hostileLoop(t, 200*time.Millisecond, func(_ int, e *loopErrs) {
		if code, b := h.do(t, "GET", path, h.hostile, ""); !planLimited(code, b) {
			check(e.add, code, b)
		}
	})
}

// Finding 1 as a Batch API line (last: on a server without the fix it is a crash loop):
// the batch is refused at create, or its line fails; the server survives, and a
// restart does not run the line into a crash again.
func cyclicBatchLine(t *testing.T, h *hostileServer) func() {
	shapes, _ := cyclicShapes()
	line := `{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":` + cyclicBody(shapes["a→b→a"], false) + `}`
	fileID := h.upload(t, h.batcher, line+"\n")
	if fileID == "" {
		return func() {}
	}
	code, b := h.do(t, "POST", "/v1/batches", h.batcher, `{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
	switch {
	case code >= 400 && code < 500:
		t.Logf("a batch with a cyclic schema: refused at create, %d", code)
	case code == 200:
		var bt struct{ ID string }
		json.Unmarshal([]byte(b), &bt)
		for restarts := 0; ; restarts++ {
			st := h.waitBatch(t, bt.ID, 20*time.Second)
			if dead, _ := h.exited(); !dead {
				if st.Status != "failed" && st.RequestCounts.Failed != 1 {
					t.Errorf("a batch with a cyclic schema ended %s with %+v, want the line failed", st.Status, st.RequestCounts)
				}
				break
			}
			if restarts == 3 {
				t.Errorf("a batch with a cyclic schema killed the server at %d restarts: a crash loop", restarts)
				break
			}
			h.ensureAlive(t) // an error, and a restart: the job resumes
		}
		if dead, _ := h.exited(); dead {
			return func() {}
		}
		// Once more after a restart: the job stays ended, the server up.
		h.kill()
		h.start(t)
		time.Sleep(500 * time.Millisecond)
	default:
		t.Errorf("a batch with a cyclic schema: %d %.300s", code, b)
	}
	return func() {}
}
