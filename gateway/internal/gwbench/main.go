// Command gwbench measures the gateway's overhead for docs/PERFORMANCE.md (issue 6,
// "Must show"). It is a benchmark fixture, not part of lmlite: `make bench-gateway`
// builds and runs it.
//
// Proxy mode (the default) starts three processes on this machine: an instant fake
// OpenAI upstream (this binary, "gwbench upstream", answering every request at once
// with a fixed chat completion), `lmlite serve` in front of it with auth, quotas
// (requests/s, tokens/min, concurrency), a daily budget (so every request reserves and
// settles) and tier selection ("model": "auto") on, and the load generator (this
// process). For each connection count it alternates closed-loop segments sent to the
// upstream directly and through the gateway (ABAB, --pairs pairs), and reports per
// pair and as the median of the pairs: requests/s and latency percentiles of both,
// and the added latency (gateway minus direct, same percentile).
//
// Embedded mode (--embedded) generates a tiny model with `lmlite gen-model`, serves it
// with the embedded engine and measures 1-token answers through the whole gateway
// (requests/s and latency percentiles); there is no direct side. --endpoint picks the
// wire format (completions, the default; chat; responses, store: false;
// responses-stored, store: true, each response written to the bbolt store; messages,
// Anthropic's with x-api-key); a list (chat,responses,messages) alternates them
// (ABAB…, --pairs rounds) against the one gateway and reports each one's medians and
// the median over rounds of its requests/s ÷ the first's. Proxy mode serves chat only:
// a model behind an upstream answers only OpenAI's chat and completions formats. A
// request answered with anything but 200 is counted as an error and makes the run
// fail (exit status 1, after the tables): its figures are not valid.
//
// Each connection is one worker with its own keep-alive connection sending the next
// request as soon as the previous answer is read (closed loop), so N connections keep
// N requests in flight.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/internal/stats"
	"github.com/valyala/fasthttp"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "upstream" {
		if err := serveUpstream(); err != nil {
			fmt.Fprintln(os.Stderr, "gwbench upstream:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "bare-proxy" {
		if err := serveBareProxy(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "gwbench bare-proxy:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gwbench:", err)
		os.Exit(1)
	}
}

// upstreamBody is the instant upstream's answer to every request.
var upstreamBody = []byte(`{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)

// serveUpstream is the child process: it prints its address and answers until its
// stdin closes (the parent exited).
func serveUpstream() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(upstreamBody)
	}}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	return srv.Serve(ln)
}

// serveBareProxy is the floor of any fasthttp proxy: it forwards each request's body
// to the upstream with a HostClient and copies the answer back, and does nothing else
// (no auth, parsing, quotas, routing or ledger).
func serveBareProxy(upAddr string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	hc := &fasthttp.HostClient{Addr: upAddr, MaxConns: 4096}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + upAddr + string(ctx.Path()))
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(ctx.PostBody())
		if err := hc.Do(req, resp); err != nil {
			ctx.Error(err.Error(), 502)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(resp.Body())
	}}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	return srv.Serve(ln)
}

type options struct {
	lmlite     string
	conns      []int
	pairs      int
	duration   time.Duration
	warmup     time.Duration
	ledger     string
	cpuprofile string
	blockprof  string
	mutexprof  string
	jsonOut    string
	embedded   bool
	replicas   int
	keep       bool
	bare       bool
	serveEnv   string
	redis      string
	leases     bool
	endpoints  []endpoint // the wire formats measured (--endpoint)
}

func run(args []string) error {
	fs := flag.NewFlagSet("gwbench", flag.ContinueOnError)
	var o options
	conns := fs.String("conns", "1,16", "connection counts (closed-loop workers), comma-separated")
	fs.StringVar(&o.lmlite, "lmlite", "bin/lmlite", "the lmlite binary")
	fs.IntVar(&o.pairs, "pairs", 3, "ABAB pairs (direct, gateway) per connection count")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured length of each segment")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each connection count")
	fs.StringVar(&o.ledger, "ledger", "process", "ledger sync mode of the gateway: process or fsync")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write the gateway's CPU profile (lmlite serve --cpuprofile) to this file")
	fs.StringVar(&o.blockprof, "blockprofile", "", "write the gateway's block profile (lmlite serve --blockprofile: where goroutines wait) to this file")
	fs.StringVar(&o.mutexprof, "mutexprofile", "", "write the gateway's mutex profile (lmlite serve --mutexprofile: contended locks) to this file")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&o.embedded, "embedded", false, "measure 1-token completions on a generated tiny model with the embedded engine instead")
	fs.IntVar(&o.replicas, "replicas", 2, "replicas of the tiny model (--embedded)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (config, data, logs)")
	fs.StringVar(&o.serveEnv, "serve-env", "", "extra environment for lmlite serve only, e.g. GOMAXPROCS=1,GOGC=200 (experiments)")
	fs.StringVar(&o.redis, "redis", "", "a Redis URL (redis://127.0.0.1:PORT/0): the gateway keeps its keys, quotas, budgets and usage there (issue 16's overhead: compare with a run without it)")
	fs.BoolVar(&o.leases, "redis-leases", false, "with --redis: serve budgets and rates from leases (redis: {leases: true}, issue 37)")
	fs.BoolVar(&o.bare, "bare", false, "also measure a bare fasthttp proxy (forwarding only) as a third side: the floor of any proxy here")
	endpoints := fs.String("endpoint", "", "the wire format(s) measured, comma-separated, alternated round by round: chat, completions, responses, responses-stored, messages (default: chat; --embedded: completions)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.endpoints, err = parseEndpoints(*endpoints, o.embedded); err != nil {
		return err
	}
	for _, f := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad --conns %q", *conns)
		}
		o.conns = append(o.conns, n)
	}
	if o.ledger != "process" && o.ledger != "fsync" {
		return fmt.Errorf("bad --ledger %q", o.ledger)
	}
	dir, err := os.MkdirTemp("", "gwbench")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "gwbench: files in", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	var model, upAddr, bareAddr string
	var up, bp *child
	if o.embedded {
		model = filepath.Join(dir, "tiny.gguf")
		if err := runCmd(o.lmlite, "gen-model", "--arch", "llama", "--preset", "tiny", "--type", "q8_0", "--seed", "1", "--out", model); err != nil {
			return err
		}
	} else {
		var err error
		if up, upAddr, err = startUpstream(); err != nil {
			return err
		}
		defer up.stop()
		if o.bare {
			if bp, bareAddr, err = startSelf("bare-proxy", upAddr); err != nil {
				return err
			}
			defer bp.stop()
		}
	}
	gw, err := startGateway(o, dir, upAddr, model)
	if err != nil {
		return err
	}
	defer gw.stop()

	var results []segmentSet
	for _, c := range o.conns {
		var set segmentSet
		if o.embedded {
			set = measureEmbedded(o, gw, c)
		} else {
			set = measureProxy(o, gw, up, bp, upAddr, bareAddr, c)
		}
		results = append(results, set)
		set.print(os.Stdout)
	}
	if err := gw.stop(); err != nil {
		return err
	}
	failed := 0
	for _, set := range results {
		for _, s := range set.Segments {
			failed += s.Errors
		}
	}
	if o.cpuprofile != "" {
		fmt.Fprintln(os.Stderr, "gwbench: gateway CPU profile in", o.cpuprofile)
	}
	if o.blockprof != "" || o.mutexprof != "" {
		fmt.Fprintln(os.Stderr, "gwbench: gateway block/mutex profiles in", o.blockprof, o.mutexprof)
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d requests failed (first errors above): the figures are not valid", failed)
	}
	return nil
}

func runCmd(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	once  sync.Once
	err   error
}

// stop ends the child: SIGTERM (lmlite drains and writes its profile), then wait.
func (c *child) stop() error {
	c.once.Do(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		if c.stdin != nil {
			c.stdin.Close()
		}
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case c.err = <-done:
		case <-time.After(30 * time.Second):
			c.cmd.Process.Kill()
			c.err = errors.New("gwbench: child did not stop in 30s")
		}
	})
	return c.err
}

// startUpstream starts this binary as the instant upstream and reads its address.
func startUpstream() (*child, string, error) {
	return startSelf("upstream")
}

// startSelf starts this binary with args and reads the address it prints.
func startSelf(args ...string) (*child, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	c := &child{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		c.stop()
		return nil, "", fmt.Errorf("%s: %w", args[0], err)
	}
	return c, strings.TrimSpace(line), nil
}

type gateway struct {
	*child
	addr string
	key  string
}

// startGateway writes the config and starts `lmlite serve`, waiting until it is
// ready; the key is the demo tenant's, which serve makes on its first run.
func startGateway(o options, dir, upAddr, modelPath string) (*gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	var models string
	if modelPath != "" {
		models = fmt.Sprintf(`  - {id: m, path: %q, max_model_len: 256, replicas: %d, idle_timeout: -1s, max_queue: 4096, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}`, modelPath, o.replicas)
	} else {
		models = fmt.Sprintf(`  - {id: m, upstream: {base_url: "http://%s/v1"}, max_model_len: 4096, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}`, upAddr)
	}
	cfg := fmt.Sprintf(`# gwbench: quotas and a budget on (high enough never to refuse), tier selection by "auto".
# The stored responses' count limit is on too (admission reads the tenant's usage) but
# far above what a run stores (the default 10,000 is passed in one round).
listen: %s
data_dir: %s
demo_tenant: bench
max_in_flight: 4096
ledger: {sync: %s}
models:
%s
tiers: {fast: [{model: m, quality: 1}], balanced: [{model: m, quality: 2}]}
plans:
  bench: {requests_per_second: 1000000, burst: 1000000, tokens_per_minute: 1000000000, max_concurrency: 4096, daily_budget_usd: 1000000, default_tier_mode: balanced, responses_max_count: 100000000}
tenants: [{id: bench, plan: bench}]
`, addr, filepath.Join(dir, "data"), o.ledger, models)
	if o.redis != "" {
		cfg += fmt.Sprintf("redis: {url: %q, key_prefix: \"gwbench%d:\", node_id: bench, leases: %v}\n", o.redis, time.Now().UnixNano(), o.leases)
	}
	cfgPath := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	args := []string{"serve", "--config", cfgPath}
	for _, p := range []struct{ flag, path string }{{"--cpuprofile", o.cpuprofile}, {"--blockprofile", o.blockprof}, {"--mutexprofile", o.mutexprof}} {
		if p.path == "" {
			continue
		}
		abs, err := filepath.Abs(p.path)
		if err != nil {
			return nil, err
		}
		args = append(args, p.flag, abs)
	}
	cmd := exec.Command(o.lmlite, args...)
	if o.serveEnv != "" {
		cmd.Env = append(os.Environ(), strings.Split(o.serveEnv, ",")...)
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gateway{child: &child{cmd: cmd}, addr: addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _, err := fasthttp.GetTimeout(nil, "http://"+addr+"/readyz", time.Second)
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			g.stop()
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("lmlite serve not ready after 60s: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(dir, "data", "demo-key"))
	if err != nil {
		g.stop()
		return nil, err
	}
	g.key = strings.TrimSpace(string(b))
	return g, nil
}

// target is where a segment sends its requests; proc is the process serving them
// (its CPU time is measured), up the upstream behind it, if any.
type target struct {
	addr, path, key string
	body            []byte
	proc, up        *child
	anthropic       bool // the key in x-api-key, with anthropic-version (Anthropic's Messages)
}

// cpuTime is the user + system CPU time of a process so far (/proc/PID/stat, all
// threads), or 0 when it cannot be read.
func cpuTime(c *child) time.Duration {
	if c == nil {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// segment is one closed-loop run.
type segment struct {
	Side     string             `json:"side"` // direct or gateway
	Conns    int                `json:"conns"`
	Requests int                `json:"requests"`
	Errors   int                `json:"errors"`
	Seconds  float64            `json:"seconds"`
	RPS      float64            `json:"rps"`
	Lat      map[string]float64 `json:"latency_us"`         // by percentile name
	CPU      float64            `json:"cpu_us_per_request"` // of the process serving the side
	UpCPU    float64            `json:"upstream_cpu_us_per_request,omitempty"`
	FirstErr string             `json:"first_error,omitempty"`
}

var percentiles = []struct {
	name string
	q    float64
}{{"p50", .50}, {"p90", .90}, {"p99", .99}, {"p99.9", .999}}

// load runs conns closed-loop workers against t for d and measures every request.
func load(t target, conns int, d time.Duration) segment {
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	firstErr := ""
	var wg sync.WaitGroup
	cpu0, up0 := cpuTime(t.proc), cpuTime(t.up)
	start := time.Now()
	end := start.Add(d)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &fasthttp.HostClient{Addr: t.addr, MaxConns: 1, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("http://" + t.addr + t.path)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			switch {
			case t.key != "" && t.anthropic:
				req.Header.Set("x-api-key", t.key)
				req.Header.Set("anthropic-version", "2023-06-01")
			case t.key != "":
				req.Header.Set("Authorization", "Bearer "+t.key)
			}
			req.SetBody(t.body)
			lat := make([]time.Duration, 0, 1<<16)
			nerr := 0
			var ferr string
			for {
				st := time.Now()
				if !st.Before(end) {
					break
				}
				err := hc.Do(req, resp)
				el := time.Since(st)
				if err != nil || resp.StatusCode() != 200 {
					nerr++
					if ferr == "" {
						ferr = fmt.Sprintf("%v %d %.200s", err, resp.StatusCode(), resp.Body())
					}
					continue
				}
				lat = append(lat, el)
			}
			hc.CloseIdleConnections()
			mu.Lock()
			all = append(all, lat...)
			errs += nerr
			if firstErr == "" {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	cpu, up := cpuTime(t.proc)-cpu0, cpuTime(t.up)-up0
	slices.Sort(all)
	s := segment{Conns: conns, Requests: len(all), Errors: errs, Seconds: el.Seconds(), RPS: float64(len(all)) / el.Seconds(),
		Lat: map[string]float64{}, FirstErr: firstErr}
	if n := float64(len(all) + errs); n > 0 {
		s.CPU = float64(cpu.Microseconds()) / n
		s.UpCPU = float64(up.Microseconds()) / n
	}
	for _, p := range percentiles {
		if len(all) > 0 {
			s.Lat[p.name] = float64(all[int(p.q*float64(len(all)-1))].Nanoseconds()) / 1e3
		}
	}
	return s
}

// segmentSet is the measurement at one connection count.
type segmentSet struct {
	Conns    int       `json:"conns"`
	Segments []segment `json:"segments"` // in the order run
	// Medians over the pairs (proxy mode) or segments (embedded mode).
	DirectRPS  float64            `json:"direct_rps,omitempty"`
	GatewayRPS float64            `json:"gateway_rps"`
	Direct     map[string]float64 `json:"direct_latency_us,omitempty"`
	Gateway    map[string]float64 `json:"gateway_latency_us"`
	Added      map[string]float64 `json:"added_latency_us,omitempty"` // median over pairs of (gateway - direct)
	BareRPS    float64            `json:"bare_rps,omitempty"`
	BareAdded  map[string]float64 `json:"bare_added_latency_us,omitempty"`
	Embedded   bool               `json:"embedded,omitempty"`
	// Embedded mode with several endpoints: each one's medians, the first's also in
	// GatewayRPS and Gateway.
	Endpoints []endpointResult `json:"endpoints,omitempty"`
}

// endpointResult is one wire format's medians over the rounds of an embedded run.
type endpointResult struct {
	Name  string             `json:"endpoint"`
	RPS   float64            `json:"rps"`
	Lat   map[string]float64 `json:"latency_us"`
	Ratio float64            `json:"rps_ratio_to_first"` // median over rounds of rps ÷ the first endpoint's in the same round
	All   []float64          `json:"rps_rounds"`
}

// endpoint is a wire format's path, 1-token body and key header.
type endpoint struct {
	name, path string
	body       []byte
	anthropic  bool
}

var endpointsByName = map[string]endpoint{
	"chat":        {"chat", "/v1/chat/completions", []byte(`{"model":"auto","messages":[{"role":"user","content":"Hello"}],"max_tokens":1,"temperature":0}`), false},
	"completions": {"completions", "/v1/completions", []byte(`{"model":"auto","prompt":"Hello","max_tokens":1,"temperature":0}`), false},
	"responses":   {"responses", "/v1/responses", []byte(`{"model":"auto","input":"Hello","max_output_tokens":1,"temperature":0,"store":false}`), false},
	"responses-stored": {"responses-stored", "/v1/responses",
		[]byte(`{"model":"auto","input":"Hello","max_output_tokens":1,"temperature":0,"store":true}`), false},
	"messages": {"messages", "/v1/messages", []byte(`{"model":"auto","messages":[{"role":"user","content":"Hello"}],"max_tokens":1,"temperature":0}`), true},
}

// parseEndpoints reads --endpoint: names of endpointsByName, comma-separated ("":
// chat in proxy mode, completions embedded). Proxy mode measures chat only.
func parseEndpoints(list string, embedded bool) ([]endpoint, error) {
	if list == "" {
		list = "chat"
		if embedded {
			list = "completions"
		}
	}
	var out []endpoint
	for _, f := range strings.Split(list, ",") {
		e, ok := endpointsByName[strings.TrimSpace(f)]
		if !ok {
			return nil, fmt.Errorf("bad --endpoint %q: chat, completions, responses, responses-stored or messages", f)
		}
		out = append(out, e)
	}
	if !embedded && (len(out) != 1 || out[0].name != "chat") {
		return nil, fmt.Errorf("--endpoint %s needs --embedded: the proxy mode's model is an upstream, which serves only OpenAI's chat format here", list)
	}
	return out, nil
}

func chatBody() []byte {
	return []byte(`{"model":"auto","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":1}`)
}

func measureProxy(o options, gw *gateway, up, bp *child, upAddr, bareAddr string, conns int) segmentSet {
	direct := target{addr: upAddr, path: "/v1/chat/completions", body: chatBody(), proc: up}
	via := target{addr: gw.addr, path: "/v1/chat/completions", key: gw.key, body: chatBody(), proc: gw.child, up: up}
	bare := target{addr: bareAddr, path: "/v1/chat/completions", body: chatBody(), proc: bp, up: up}
	load(direct, conns, o.warmup/2)
	load(via, conns, o.warmup/2)
	if bareAddr != "" {
		load(bare, conns, o.warmup/2)
	}
	set := segmentSet{Conns: conns, Direct: map[string]float64{}, Gateway: map[string]float64{}, Added: map[string]float64{}}
	var dRPS, gRPS, bRPS []float64
	added, bAdded := map[string][]float64{}, map[string][]float64{}
	dLat, gLat := map[string][]float64{}, map[string][]float64{}
	for p := 0; p < o.pairs; p++ {
		a := load(direct, conns, o.duration)
		a.Side = "direct"
		b := load(via, conns, o.duration)
		b.Side = "gateway"
		set.Segments = append(set.Segments, a, b)
		if bareAddr != "" {
			c := load(bare, conns, o.duration)
			c.Side = "bare"
			set.Segments = append(set.Segments, c)
			bRPS = append(bRPS, c.RPS)
			for _, pc := range percentiles {
				bAdded[pc.name] = append(bAdded[pc.name], c.Lat[pc.name]-a.Lat[pc.name])
			}
		}
		dRPS, gRPS = append(dRPS, a.RPS), append(gRPS, b.RPS)
		for _, pc := range percentiles {
			added[pc.name] = append(added[pc.name], b.Lat[pc.name]-a.Lat[pc.name])
			dLat[pc.name] = append(dLat[pc.name], a.Lat[pc.name])
			gLat[pc.name] = append(gLat[pc.name], b.Lat[pc.name])
		}
	}
	set.DirectRPS, set.GatewayRPS = stats.Median(dRPS), stats.Median(gRPS)
	if bareAddr != "" {
		set.BareRPS, set.BareAdded = stats.Median(bRPS), map[string]float64{}
	}
	for _, pc := range percentiles {
		set.Added[pc.name] = stats.Median(added[pc.name])
		if bareAddr != "" {
			set.BareAdded[pc.name] = stats.Median(bAdded[pc.name])
		}
		set.Direct[pc.name] = stats.Median(dLat[pc.name])
		set.Gateway[pc.name] = stats.Median(gLat[pc.name])
	}
	return set
}

func measureEmbedded(o options, gw *gateway, conns int) segmentSet {
	targets := make([]target, len(o.endpoints))
	for i, e := range o.endpoints {
		targets[i] = target{addr: gw.addr, path: e.path, key: gw.key, proc: gw.child, body: e.body, anthropic: e.anthropic}
		load(targets[i], conns, o.warmup)
	}
	set := segmentSet{Conns: conns, Gateway: map[string]float64{}, Embedded: true}
	rps := make([][]float64, len(targets))
	ratios := make([][]float64, len(targets))
	lat := make([]map[string][]float64, len(targets))
	for i := range lat {
		lat[i] = map[string][]float64{}
	}
	for p := 0; p < o.pairs; p++ {
		for i, t := range targets { // A B C A B C …: each round runs every endpoint once
			s := load(t, conns, o.duration)
			s.Side = o.endpoints[i].name
			set.Segments = append(set.Segments, s)
			rps[i] = append(rps[i], s.RPS)
			for _, pc := range percentiles {
				lat[i][pc.name] = append(lat[i][pc.name], s.Lat[pc.name])
			}
		}
		for i := range targets {
			ratios[i] = append(ratios[i], rps[i][p]/rps[0][p])
		}
	}
	for i := range targets {
		r := endpointResult{Name: o.endpoints[i].name, RPS: stats.Median(rps[i]), Lat: map[string]float64{}, Ratio: stats.Median(ratios[i]), All: rps[i]}
		for _, pc := range percentiles {
			r.Lat[pc.name] = stats.Median(lat[i][pc.name])
		}
		set.Endpoints = append(set.Endpoints, r)
	}
	set.GatewayRPS, set.Gateway = set.Endpoints[0].RPS, set.Endpoints[0].Lat
	return set
}

func (set segmentSet) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %d connection(s) ==\n", set.Conns)
	fmt.Fprintf(w, "%-16s %10s %7s %9s %9s %9s %9s %9s %9s\n", "side", "req/s", "errors", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "cpu µs/r", "up µs/r")
	for _, s := range set.Segments {
		fmt.Fprintf(w, "%-16s %10.0f %7d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", s.Side, s.RPS, s.Errors, s.Lat["p50"], s.Lat["p90"], s.Lat["p99"], s.Lat["p99.9"], s.CPU, s.UpCPU)
		if s.FirstErr != "" {
			fmt.Fprintf(w, "         first error: %s\n", s.FirstErr)
		}
	}
	row := func(name string, rps float64, l map[string]float64) {
		fmt.Fprintf(w, "%-8s %10.0f %7s %9.1f %9.1f %9.1f %9.1f\n", name, rps, "", l["p50"], l["p90"], l["p99"], l["p99.9"])
	}
	fmt.Fprintln(w, "medians:")
	if !set.Embedded {
		row("direct", set.DirectRPS, set.Direct)
	}
	if len(set.Endpoints) > 1 {
		for _, e := range set.Endpoints {
			fmt.Fprintf(w, "%-16s %10.0f %7s %9.1f %9.1f %9.1f %9.1f   rps ÷ %s: %.3f (median of rounds)\n", e.Name, e.RPS, "", e.Lat["p50"], e.Lat["p90"], e.Lat["p99"], e.Lat["p99.9"], set.Endpoints[0].Name, e.Ratio)
		}
		return
	}
	row("gateway", set.GatewayRPS, set.Gateway)
	if !set.Embedded {
		fmt.Fprintf(w, "%-8s %10s %7s %9.1f %9.1f %9.1f %9.1f   (median over pairs of gateway − direct)\n", "added", "", "", set.Added["p50"], set.Added["p90"], set.Added["p99"], set.Added["p99.9"])
		if set.BareAdded != nil {
			fmt.Fprintf(w, "%-8s %10.0f %7s %9.1f %9.1f %9.1f %9.1f   (bare proxy: req/s; median of bare − direct)\n", "bare", set.BareRPS, "", set.BareAdded["p50"], set.BareAdded["p90"], set.BareAdded["p99"], set.BareAdded["p99.9"])
		}
	}
}
