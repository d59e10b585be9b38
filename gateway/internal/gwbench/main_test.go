package main

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestLoad runs the closed-loop load generator against an instant server.
func TestLoad(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(upstreamBody) }}
	go srv.Serve(ln)
	defer srv.Shutdown()
	s := load(target{addr: ln.Addr().String(), path: "/v1/chat/completions", body: chatBody()}, 2, 200*time.Millisecond)
	if s.Requests < 10 || s.Errors != 0 || s.RPS <= 0 || !(s.Lat["p50"] > 0 && s.Lat["p50"] <= s.Lat["p99"] && s.Lat["p99"] <= s.Lat["p99.9"]) {
		t.Errorf("segment %+v", s)
	}
	// A server that refuses counts errors, not latencies.
	bad := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(500) }}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	go bad.Serve(ln2)
	defer bad.Shutdown()
	s = load(target{addr: ln2.Addr().String(), path: "/", body: chatBody()}, 1, 50*time.Millisecond)
	if s.Requests != 0 || s.Errors == 0 || s.FirstErr == "" {
		t.Errorf("refusing server: %+v", s)
	}
}

// TestCPUTime reads this process's CPU time before and after burning some, and
// checks it against getrusage: the two must agree to within a few clock ticks. The
// burn runs until getrusage says 200ms were spent, however busy the machine is.
func TestCPUTime(t *testing.T) {
	p, _ := os.FindProcess(os.Getpid())
	c := &child{cmd: &exec.Cmd{Process: p}}
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, ruBefore := cpuTime(c), rusage()
	x := 0
	for st := time.Now(); rusage()-ruBefore < 200*time.Millisecond && time.Since(st) < 10*time.Second; {
		x++
	}
	got, want := cpuTime(c)-before, rusage()-ruBefore
	if want < 200*time.Millisecond {
		t.Skipf("the machine gave this test only %v of CPU in 10s", want)
	}
	if d := got - want; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("getrusage says %v were burnt, /proc says %v (%d)", want, got, x)
	}
}

// TestParseEndpoints: --endpoint names the wire formats (a list alternates them, in
// its order); the default is chat, or completions embedded; proxy mode measures chat
// only (an upstream model serves no other format), and an unknown name is refused.
func TestParseEndpoints(t *testing.T) {
	for _, c := range []struct {
		list     string
		embedded bool
		want     string // the paths joined; "": an error
	}{
		{"", false, "/v1/chat/completions"},
		{"", true, "/v1/completions"},
		{"chat", false, "/v1/chat/completions"},
		{"chat,responses,messages", true, "/v1/chat/completions /v1/responses /v1/messages"},
		{"responses-stored", true, "/v1/responses"},
		{"responses", false, ""},
		{"messages", false, ""},
		{"chat,responses", false, ""},
		{"grpc", true, ""},
	} {
		eps, err := parseEndpoints(c.list, c.embedded)
		var paths []string
		for _, e := range eps {
			paths = append(paths, e.path)
		}
		if got := strings.Join(paths, " "); got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("%q (embedded %v): %q %v, want %q", c.list, c.embedded, got, err, c.want)
		}
	}
	if e := endpointsByName["messages"]; !e.anthropic || !strings.Contains(string(e.body), `"max_tokens":1`) {
		t.Errorf("messages: %+v, want Anthropic's key header and max_tokens", e)
	}
}
