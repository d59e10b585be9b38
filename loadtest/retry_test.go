package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"go/build"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// closingServer is a raw HTTP/1.1 server on loopback that misbehaves on purpose
// with keep-alive connections, the way a peer with an idle-connection timeout
// (llama-server's) looks from the client: it answers a connection's first
// request with a keep-alive response and then, by mode, treats the next request
// on that connection.
type closingServer struct {
	mode     string // see serveConn
	ln       net.Listener
	received atomic.Int64 // requests read in full
	conns    atomic.Int64 // connections accepted
	wg       sync.WaitGroup
}

const okBody = `{"model":"m","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

func startClosingServer(t *testing.T, mode string) *closingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &closingServer{mode: mode, ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serveConn(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *closingServer) url() string { return "http://" + s.ln.Addr().String() }

// serveConn answers the first request on c with a keep-alive 200. A later
// request on c is read in full and then, by mode:
//   - "idle-close": c is closed without a byte of answer, as when the server's
//     idle timeout closed the connection while the request was on its way;
//   - "partial": the status line is sent, then c is closed (the server did answer);
//   - "500": answered 500 with an OpenAI error body.
//
// In mode "never" even the first request is closed without an answer.
func (s *closingServer) serveConn(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(rd)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.received.Add(1)
		if n == 0 && s.mode != "never" {
			writeResponse(c, 200, okBody)
			continue
		}
		switch s.mode {
		case "partial":
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		case "500":
			writeResponse(c, 500, `{"error":{"message":"boom","type":"server_error","code":null}}`)
			continue
		}
		return
	}
}

func writeResponse(c net.Conn, status int, body string) {
	_, _ = io.WriteString(c, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+"\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

// TestRetryOnClosedKeepAlive sends requests one after another through the load
// generator's client to servers that close keep-alive connections. A request
// lost because the server closed the reused connection before answering is sent
// again once on a new connection and succeeds; a request the server answered in
// part, answered with an error, or that failed on a fresh connection is not
// retried.
func TestRetryOnClosedKeepAlive(t *testing.T) {
	const n = 6
	for _, tc := range []struct {
		mode         string
		wantOK       int
		wantErr      string // the errors key of the failures
		wantRetried  int
		wantReceived int // requests the server read in full
	}{
		// Every second request hits the stale connection and is retried on a new one:
		// all succeed, the server reads each retried request twice.
		{mode: "idle-close", wantOK: n, wantRetried: n / 2, wantReceived: n + n/2},
		// The server answered (a status line): not retried, a transport error.
		{mode: "partial", wantOK: n / 2, wantErr: ErrTransport, wantReceived: n},
		{mode: "500", wantOK: 1, wantErr: "500", wantReceived: n},
		// A fresh connection closed without an answer: a real failure, not retried.
		{mode: "never", wantOK: 0, wantErr: ErrTransport, wantReceived: n},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv := startClosingServer(t, tc.mode)
			tr := newTransport(4)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			start := time.Now()
			since := func() time.Duration { return time.Since(start) }
			ok, retried, errs := 0, 0, map[string]int{}
			for i := range n {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r := &request{path: "/v1/chat/completions", body: []byte(`{"model":"m","messages":[]}`)}
				res := do(ctx, c, srv.url(), "", r, since)
				cancel()
				if res.OK() {
					ok++
				} else {
					errs[res.ErrorKey()]++
					t.Logf("request %d: %s %s", i, res.ErrorKey(), res.Detail)
				}
				if res.Retried {
					retried++
				}
			}
			if ok != tc.wantOK || retried != tc.wantRetried || (tc.wantErr != "" && errs[tc.wantErr] != n-tc.wantOK) {
				t.Errorf("ok %d retried %d errors %v; want ok %d retried %d, %d×%q", ok, retried, errs, tc.wantOK, tc.wantRetried, n-tc.wantOK, tc.wantErr)
			}
			if got := srv.received.Load(); got != int64(tc.wantReceived) {
				t.Errorf("the server read %d requests, want %d", got, tc.wantReceived)
			}
		})
	}
}

// TestRunNotChargedForIdleCloses runs a closed-loop scenario against the server
// that closes every connection after its first answer: no request is counted as
// an error, and the report says how many were retried.
func TestRunNotChargedForIdleCloses(t *testing.T) {
	srv := startClosingServer(t, "idle-close")
	s := mustScenario(t, `
name: idle-close
requests: 8
arrival: {type: closed, users: 1}
workload: {stream: false}
tenants: [{name: a, api_key: k}]
`)
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.url()})
	if err != nil {
		t.Fatal(err)
	}
	o := rep.Overall
	if o.Requests != 8 || o.OK != 8 || len(o.Errors) != 0 || o.Retried == 0 {
		t.Errorf("requests %d ok %d errors %v retried %d; want 8 ok, none failed, some retried", o.Requests, o.OK, o.Errors, o.Retried)
	}
	var sum strings.Builder
	if err := rep.WriteSummary(&sum); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), "were sent again on a new connection") {
		t.Errorf("summary does not mention the retries:\n%s", sum.String())
	}
}

// TestServerClosedIdleIsNetHTTPsText pins the one error closedBeforeAnswer matches by
// its text (serverClosedIdle): the toolchain's net/http still declares
// errServerClosedIdle, unexported, with that text. It fails when Go renames,
// rewords or exports it (then match the exported error with errors.Is).
func TestServerClosedIdleIsNetHTTPsText(t *testing.T) {
	root := build.Default.GOROOT
	if root == "" { // a binary built with -trimpath knows no GOROOT
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatalf("go env GOROOT: %v", err)
		}
		root = strings.TrimSpace(string(out))
	}
	src, err := os.ReadFile(filepath.Join(root, "src", "net", "http", "transport.go"))
	if err != nil {
		t.Fatalf("net/http's source: %v", err)
	}
	const decl = `errServerClosedIdle = errors.New("http: server closed idle connection")`
	if !bytes.Contains(src, []byte(decl)) {
		t.Fatalf("net/http no longer declares %s", decl)
	}
	if !serverClosedIdle(&url.Error{Op: "Post", URL: "http://x/v1", Err: errors.New("http: server closed idle connection")}) {
		t.Error("serverClosedIdle misses net/http's error inside a *url.Error")
	}
	if serverClosedIdle(&url.Error{Op: "Post", URL: "http://x/v1", Err: io.ErrUnexpectedEOF}) {
		t.Error("serverClosedIdle matches another transport error")
	}
}
