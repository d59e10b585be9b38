package gateway

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// smallSendBuffers is a listener whose connections have a 4 KiB kernel send buffer
// (the kernel doubles it). A loopback connection's buffer grows to megabytes
// otherwise, which a tiny model's output would never fill: the write deadline is
// about a socket that takes no more bytes, whatever its size.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestClientThatStopsReadingIsCancelled: a streaming client with a small receive
// window that sends its request and never reads does not hold its request in flight:
// once the server's writes have made no progress for the write deadline (write_timeout,
// 300 ms here), the generation is cancelled, the request is settled on the tokens
// produced (not its worst case) and the tenant's concurrency slot and the server's
// in-flight count are free again, while the client's connection is still open.
func TestClientThatStopsReadingIsCancelled(t *testing.T) {
	es := startEngine(t, `
write_timeout: 300ms
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 2048, prompt_usd_per_1k: 1, completion_usd_per_1k: 2}
plans:
  one: {max_concurrency: 1}
tenants:
  - {id: hog, plan: one}
`, engine.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go es.srv.Serve(smallSendBuffers{ln})

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	conn, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const maxTokens = 1900
	body := `{"model":"tiny","stream":true,"max_tokens":` + strconv.Itoa(maxTokens) +
		`,"ignore_eos":true,"messages":[{"role":"user","content":"Tell me a very long story"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: lmlite\r\nAuthorization: Bearer " + es.keys["hog"] +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	// The request is admitted, then the client reads nothing.
	start := time.Now()
	for es.srv.ten.InFlight("hog") == 0 && time.Since(start) < 10*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if es.srv.ten.InFlight("hog") == 0 {
		t.Fatal("the request was never admitted")
	}
	// Free within the deadline, plus a margin for a loaded machine.
	for (es.srv.ten.InFlight("hog") != 0 || es.srv.InFlight() != 0) && time.Since(start) < 20*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if n, m := es.srv.ten.InFlight("hog"), es.srv.InFlight(); n != 0 || m != 0 {
		t.Fatalf("after %v the tenant still has %d requests in flight and the server %d", time.Since(start), n, m)
	}
	var led []tenancy.Entry
	es.store.Ledger(func(e tenancy.Entry) error { led = append(led, e); return nil })
	if len(led) != 1 {
		t.Fatalf("ledger %+v", led)
	}
	e := led[0]
	if e.Status != 499 || e.Finish != engine.FinishCancelled || e.CompletionTokens <= 0 || e.CompletionTokens >= maxTokens ||
		e.Cost != (money.Price{PromptPer1K: money.USD(1), CompletionPer1K: money.USD(2)}).Cost(e.PromptTokens, e.CompletionTokens) {
		t.Errorf("ledger %+v: want the cancelled generation charged its %d tokens produced", e, e.CompletionTokens)
	}
	// The connection was given up on: the server closed it.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Errorf("the server did not close the connection: %v", err)
			}
			break
		}
	}
}
