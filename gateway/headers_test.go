package gateway

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer collects a server's log lines (every level) for a test to search.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// rawExchange writes req as it is on a new connection to addr (host:port) and reads
// the answer.
func rawExchange(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	go conn.Write([]byte(req)) // the server may answer before it has read it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// TestMalformedHeadersAreNotQuoted: a request whose headers are over fasthttp's read
// buffer (8 KiB of them; the buffer is 4 KiB) is answered 431, and one with a header
// value fasthttp refuses 400, each in OpenAI's error shape with a generic message;
// neither the answers nor the server's log (at debug level, fasthttp's own lines
// included) quote the request, whose Authorization header is a secret.
func TestMalformedHeadersAreNotQuoted(t *testing.T) {
	var logs logBuffer
	ts := startServerWith(t, testConfig, newFakeEngine(), Options{Logger: logs.logger()}, nil)
	const secret = "lml_topsecret_0123456789abcdef"
	var big strings.Builder
	big.WriteString("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + secret + "\r\n")
	for i := range 64 {
		big.WriteString("X-Pad-" + strconv.Itoa(i) + ": " + strings.Repeat("x", 120) + "\r\n")
	}
	big.WriteString("Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	if big.Len() < 8<<10 {
		t.Fatalf("the request's headers are %d bytes, want 8 KiB", big.Len())
	}
	bad := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + secret + "\x01\r\n" +
		"X-Pad: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	for _, c := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"8 KiB of headers", big.String(), 431, `"code":"request_header_fields_too_large"`},
		{"a control byte in a header", bad, 400, `"code":"malformed_request"`},
	} {
		status, body := rawExchange(t, strings.TrimPrefix(ts.url, "http://"), c.req)
		if status != c.status || !strings.HasPrefix(body, `{"error":{"message":`) || !strings.Contains(body, c.code) {
			t.Errorf("%s: %d %s", c.name, status, body)
		}
		if strings.Contains(body, secret) || strings.Contains(body, "X-Pad") {
			t.Errorf("%s: the answer quotes the request: %s", c.name, body)
		}
	}
	ts.stop() // every log line written
	if l := logs.String(); strings.Contains(l, secret) || strings.Contains(l, "X-Pad") {
		t.Errorf("the log quotes the request:\n%s", l)
	}
}
