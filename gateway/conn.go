package gateway

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// DefaultWriteTimeout is Config.WriteTimeout's default: how long a write to a client
// may make no progress.
const DefaultWriteTimeout = 30 * time.Second

// deadlineListener gives every connection it accepts a write deadline per write
// (deadlineConn). fasthttp's own WriteTimeout bounds a whole response, which would
// cut a long stream that is read as it comes; this bounds the time without progress.
type deadlineListener struct {
	net.Listener
	d time.Duration
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: c, d: l.d}, nil
}

// deadlineConn fails a Write that makes no progress for d: each write to the socket
// must move some bytes within d of its start, or it fails with
// os.ErrDeadlineExceeded. A client that stopped reading (its receive window and the
// socket's send buffer full) so loses its connection after d: fasthttp then closes
// the response's body stream, a stream writer's next Flush fails, and the request is
// cancelled and settled as for a client that went away (run.go, streamEmbedded;
// choices.go; upstream.go; package forward, relay). A slow client that keeps reading is
// never cut: every write that moves bytes gives the rest another d.
type deadlineConn struct {
	net.Conn
	d time.Duration
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	n := 0
	for {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.d)); err != nil {
			return n, err
		}
		m, err := c.Conn.Write(b[n:])
		n += m
		if err == nil || m == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		// Some bytes moved before the deadline: the client reads, slowly. Go on.
	}
}

// SyscallConn is the socket's (connClosed peeks at it); an error for a connection
// without one.
func (c *deadlineConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("gateway: the connection has no socket")
}
