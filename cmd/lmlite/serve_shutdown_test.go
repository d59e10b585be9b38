package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
)

// TestServeShutdownClosesIdleConnectionsDrainsStreamReturnsLeases: `lmlite serve`
// with leases in Redis gets SIGTERM while a client holds a connection it never sent a
// byte on, another holds an idle keep-alive connection, and a stream is in flight. The
// process exits at once after the stream ends (not after shutdown_timeout, 30 s): the
// idle connections are closed, the stream is drained to its [DONE], and the tenant's
// lease is given back (nothing held in Redis).
func TestServeShutdownClosesIdleConnectionsDrainsStreamReturnsLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an lmlite process")
	}
	rs, dir, model := scaleOutSetup(t)
	addr := freeAddr(t)
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
admin_key_env: LMLITE_TEST_ADMIN_KEY
redis: {url: "`+rs.URL(0)+`", key_prefix: "`+leasePrefix+`", node_id: n1, leases: true}
models:
  - {id: tiny, path: `+model+`, max_model_len: 128, idle_timeout: -1s, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
tiers: {fast: [{model: tiny}]}
plans: {open: {}}
tenants:
  - {id: shut, plan: open, overrides: {daily_budget_usd: 5}}
`), 0o644)
	p := startLmlite(t, cfg, addr, data)
	p.waitReady(t)
	c := &leaseCluster{rs: rs, procs: []*lmliteProc{p}}
	var err error
	if c.rc, err = rediscli.New(rediscli.Options{URL: rs.URL(0)}); err != nil {
		t.Fatal(err)
	}
	defer c.rc.Close()
	key := c.key(t, "shut")

	// A keep-alive client: one request, its connection left idle in the pool.
	keep := &http.Client{Transport: &http.Transport{}}
	req, _ := http.NewRequest("POST", p.base+"/v1/chat/completions", strings.NewReader(spendBody))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := keep.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	resp.Body.Close()
	// A connection never used.
	spare, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	// A stream in flight: its first chunk read.
	body := `{"model": "tiny", "messages": [{"role":"user","content":"go on"}], "max_tokens": 80, "ignore_eos": true, "stream": true}`
	sreq, _ := http.NewRequest("POST", p.base+"/v1/chat/completions", strings.NewReader(body))
	sreq.Header.Set("Authorization", "Bearer "+key)
	sresp, err := (&http.Client{Transport: &http.Transport{}}).Do(sreq)
	if err != nil || sresp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", sresp, err)
	}
	defer sresp.Body.Close()
	rd := bufio.NewReader(sresp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if c.held(t, "shut") == 0 {
		t.Fatal("no money held in Redis with a stream in flight: no lease to give back")
	}

	sent := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	var rest strings.Builder
	for {
		line, err := rd.ReadString('\n')
		rest.WriteString(line)
		if err != nil {
			break
		}
	}
	streamed := time.Since(sent)
	t.Logf("stream ended %v after SIGTERM", streamed)
	var exited time.Duration
	select {
	case err := <-p.done:
		p.done <- err
		exited = time.Since(sent)
		if err != nil {
			t.Fatalf("exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines into the log
		<-p.done
		p.done <- nil
		t.Fatal("still draining 20 s after SIGTERM")
	}
	t.Logf("SIGTERM: the stream ended %v after it, the process exited %v after it", streamed.Round(time.Millisecond), exited.Round(time.Millisecond))
	if !strings.Contains(rest.String(), "data: [DONE]") {
		t.Fatalf("the stream in flight was cut by the drain: %q", rest.String())
	}
	if exited > streamed+3*time.Second {
		t.Fatalf("exited %v after SIGTERM, %v after its stream ended: the idle connections held the drain", exited, exited-streamed)
	}
	if h := c.held(t, "shut"); h != 0 {
		t.Fatalf("%v still held in Redis after the drain: the lease was not given back", h)
	}
}
