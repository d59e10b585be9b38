package worker

import (
	"fmt"
	"os"
	"sync"
	"syscall"
)

// sock is one end of the parent–worker socket pair, read and written with blocking
// system calls, outside Go's network poller. A reader blocked in read(2) is the only
// thread a write from the other end wakes. Through the poller (net.FileConn) each of
// the worker's writes woke a thread parked in epoll_wait before the reader, and each
// of the parent's reads woke one in the worker too (the worker's end became writable:
// the poller registers every socket for EPOLLOUT as well): on a machine whose cores
// are all busy with the worker's matrix threads, every such wake-up preempts one of
// them, and the decode step waits for the preempted part (docs/PERFORMANCE.md, "The
// worker hop"). A goroutine blocked in read(2) holds a thread; there is one such
// reader per end.
type sock struct {
	f    *os.File
	fd   int
	once sync.Once
	err  error
}

// newSock takes over fd (one end of a Unix stream socket) in blocking mode.
func newSock(fd int, name string) (*sock, error) {
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("worker: socket: %w", err)
	}
	// A blocking descriptor makes a File whose calls are plain system calls, never
	// registered with the poller.
	return &sock{f: os.NewFile(uintptr(fd), name), fd: fd}, nil
}

func (s *sock) Read(b []byte) (int, error)  { return s.f.Read(b) }
func (s *sock) Write(b []byte) (int, error) { return s.f.Write(b) }

// Close shuts the socket down, which ends a read blocked in another goroutine (a
// blocking read is not interrupted by close(2)) and shows the other end EOF, then
// closes the descriptor once no call is using it.
func (s *sock) Close() error {
	s.once.Do(func() {
		syscall.Shutdown(s.fd, syscall.SHUT_RDWR)
		s.err = s.f.Close()
	})
	return s.err
}
