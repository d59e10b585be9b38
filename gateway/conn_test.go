package gateway

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestDeadlineConnCutsOnlyWithoutProgress: a write to a peer that reads slowly, a
// byte at a time, runs past the deadline as long as bytes move; a write to a peer
// that reads nothing fails with the deadline.
func TestDeadlineConnCutsOnlyWithoutProgress(t *testing.T) {
	const d = 100 * time.Millisecond
	a, b := net.Pipe() // synchronous: a Write returns when the peer has read it all
	defer a.Close()
	defer b.Close()
	c := &deadlineConn{Conn: a, d: d}
	done := make(chan struct{})
	go func() { // reads 20 bytes, one every d/4: 5 deadlines' worth in all
		defer close(done)
		buf := make([]byte, 1)
		for range 20 {
			time.Sleep(d / 4)
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	if n, err := c.Write(make([]byte, 20)); n != 20 || err != nil {
		t.Fatalf("a slow reader's write: %d, %v after %v", n, err, time.Since(start))
	}
	<-done
	if n, err := c.Write([]byte("x")); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write nobody reads: %d, %v", n, err)
	}
}
