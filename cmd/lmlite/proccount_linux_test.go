package main

import (
	"os"
	"testing"
	"time"
)

// TestReadProcCountsSeesThisProcess: the counters `bench --engine` reports per step
// move with what the process does: sleeps are voluntary context switches, a write
// to a pipe is a write system call, and a busy loop is CPU time.
func TestReadProcCountsSeesThisProcess(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	before := readProcCounts(os.Getpid())
	for range 20 {
		time.Sleep(time.Millisecond)
		w.Write([]byte{1})
	}
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	d := readProcCounts(os.Getpid()).sub(before)
	if d.Voluntary < 10 || d.Writes < 20 || d.CPU < 5 {
		t.Fatalf("after 20 sleeps, 20 writes and 100 ms of CPU: %+v", d)
	}
	if none := readProcCounts(0); none != (procCounts{}) {
		t.Fatalf("pid 0 (no worker) counts %+v", none)
	}
}
