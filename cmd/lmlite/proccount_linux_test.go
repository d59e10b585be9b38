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
	// Busy until the process has used 100 ms of CPU (10 ticks), not for 100 ms of wall
	// time: on a loaded machine a 100 ms loop gets a fraction of a core. A counter that
	// does not move still fails, after 10 s.
	for start := time.Now(); readProcCounts(os.Getpid()).sub(before).CPU < 10 && time.Since(start) < 10*time.Second; {
		for t0 := time.Now(); time.Since(t0) < 5*time.Millisecond; {
		}
	}
	d := readProcCounts(os.Getpid()).sub(before)
	if d.Voluntary < 10 || d.Writes < 20 || d.CPU < 10 {
		t.Fatalf("after 20 sleeps, 20 writes and 100 ms of CPU: %+v", d)
	}
	if none := readProcCounts(0); none != (procCounts{}) {
		t.Fatalf("pid 0 (no worker) counts %+v", none)
	}
}
