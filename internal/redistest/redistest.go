// Package redistest starts a real redis-server for a test: from PATH, on a free
// loopback port (never 6379), in the test's temporary directory, without persistence
// unless asked, stopped when the test ends. Chaos tests kill it with SIGKILL and start
// it again on the same port.
//
// Without redis-server on PATH the test is skipped loudly, or fails in CI
// (internal/testenv.Missing); .ci/run installs it.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/testenv"
)

// Options configure a server; the zero value is an in-memory server.
type Options struct {
	// Persist turns on append-only persistence (appendfsync always) in the server's
	// directory, so the data survives Kill and Restart.
	Persist bool
	// Args are extra configuration lines passed as command-line options, e.g.
	// []string{"--maxmemory", "10mb"}.
	Args []string
}

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	opts Options

	mu   sync.Mutex // guards cmd and done
	cmd  *exec.Cmd  // nil when stopped
	done chan error // receives the process's exit; nil when stopped
}

// Start starts a redis-server for t and stops it at the end of the test. It skips the
// test (fails in CI) when redis-server is not on PATH.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server (apt-get install redis-server)", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), opts: opts}
	t.Cleanup(s.Stop)
	// A free port can be taken between choosing it and redis binding it; retry a few.
	for try := 0; ; try++ {
		s.port, err = freePort()
		if err == nil {
			err = s.start()
		}
		if err == nil {
			return s
		}
		if try == 4 {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago, never 6379.
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port, nil
		}
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL for database db.
func (s *Server) URL(db int) string { return fmt.Sprintf("redis://%s/%d", s.Addr(), db) }

// Dir is the server's working directory (its append-only file when Persist).
func (s *Server) Dir() string { return s.dir }

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("already running")
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--loglevel", "warning",
		"--logfile", "",
	}
	if s.opts.Persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	log, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	DieWithParent(cmd) // never outlive the test binary
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); log.Close() }()
	// Ready when it answers PING.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr()) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("redis-server on port %d exited at start (%v): %s", s.port, err, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s: %s", s.port, s.logTail())
		}
	}
}

// ping speaks RESP directly so that this package needs no client library.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Kill kills the server with SIGKILL (no shutdown, no final save) and waits for it to
// be gone. Its port stays reserved for Restart.
func (s *Server) Kill() {
	s.t.Helper()
	s.stop(syscall.SIGKILL)
}

// Stop stops the server with SIGTERM (it is a no-op when stopped). Start registers it
// with t.Cleanup.
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

// Restart starts the server again on the same port and directory after Kill or Stop.
func (s *Server) Restart() {
	s.t.Helper()
	var err error
	for try := 0; try < 50; try++ { // the port may linger a moment after a kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// Running reports whether the server process is running (not killed or stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}
