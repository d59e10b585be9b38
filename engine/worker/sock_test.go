package worker

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSockCloseEndsABlockedRead: a read blocked in read(2) on one end (outside the
// poller, which close(2) alone would not wake) ends when that end is closed, and the
// other end sees EOF; bytes written before still arrive.
func TestSockCloseEndsABlockedRead(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newSock(fds[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSock(fds[1], "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		all, _ := io.ReadAll(a)
		got <- string(all)
	}()
	time.Sleep(50 * time.Millisecond) // let the reader block in read(2) after "hi"
	a.Close()
	select {
	case s := <-got:
		if s != "hi" {
			t.Fatalf("read %q, want hi", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read blocked on a closed sock never ended")
	}
	if n, err := b.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the other end read %d, %v after the close, want EOF", n, err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// TestReaderThreadIsBatchUntilUndone: the reader's thread is in SCHED_BATCH while
// it reads, and back in the normal class after (the thread outlives the reader, so
// it must not keep the class).
func TestReaderThreadIsBatchUntilUndone(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	policy := func() int { // field 41 of /proc/thread-self/stat
		b, err := os.ReadFile("/proc/thread-self/stat")
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		p, err := strconv.Atoi(f[41-3])
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	done := make(chan [2]int)
	go func() {
		runtime.LockOSThread() // locks nest: after undo, still the same thread
		undo := readerThread()
		during := policy()
		undo()
		after := policy()
		runtime.UnlockOSThread()
		done <- [2]int{during, after}
	}()
	got := <-done
	if got[0] != schedBatch || got[1] != schedNormal {
		t.Fatalf("policy during %d, after %d; want %d then %d", got[0], got[1], schedBatch, schedNormal)
	}
}
