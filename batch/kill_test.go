package batch

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/money"
)

// killChild is the child process of TestKill9: it opens the store in
// BATCH_KILL_CHILD, creates the job when there is none yet, and runs until killed or
// the job ends.
func killChild() {
	dir := os.Getenv("BATCH_KILL_CHILD")
	s, err := OpenStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The test's kills are no line's fault: no line is failed for them (CrashLimit),
	// and lines running at a kill run again alone after it.
	m := NewManager(s, &fakeRunner{delay: time.Millisecond}, Options{Checker: price, Concurrency: 8, CrashLimit: -1})
	if err := m.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if js, _, _ := s.Jobs("t1", "", 1); len(js) == 0 { // the first start (or a kill before the job was made)
		f, err := s.PutFile("t1", "batch", "in.jsonl", strings.NewReader(input(500)), time.Now())
		if err == nil {
			_, err = m.Create("t1", "k1", f.ID, "/v1/completions", "24h", nil, 0)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	for {
		js, _, _ := s.Jobs("t1", "", 10)
		if len(js) == 1 && js[0].Status.Terminal() {
			os.Exit(0)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestKill9 runs a 500-line job in a child process, kills it with SIGKILL at random
// points several times, restarts it until the job ends, then checks every line is in
// exactly one file once and the job's spend is the sum of the output lines' costs.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	for run := range 3 {
		dir := t.TempDir()
		kills := 0
		for start := 0; ; start++ {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "BATCH_KILL_CHILD="+dir)
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			if kills < 4 {
				select {
				case err := <-exited:
					if err != nil {
						t.Fatalf("child: %v", err)
					}
				case <-time.After(time.Duration(50+(run*37+start*71)%200) * time.Millisecond):
					cmd.Process.Signal(syscall.SIGKILL)
					<-exited
					kills++
					continue
				}
			} else {
				select {
				case err := <-exited:
					if err != nil {
						t.Fatalf("child: %v", err)
					}
				case <-time.After(60 * time.Second):
					cmd.Process.Signal(syscall.SIGKILL)
					<-exited
					t.Fatalf("run %d: the job did not end after %d kills", run, kills)
				}
			}
			break
		}
		s, err := OpenStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		js, _, _ := s.Jobs("t1", "", 10)
		if len(js) != 1 || js[0].Status != Completed {
			t.Fatalf("run %d: jobs %+v", run, js)
		}
		j := js[0]
		out, errs := readLines(t, s, j)
		if len(out) != 500 || len(errs) != 0 {
			t.Fatalf("run %d: %d out, %d errors", run, len(out), len(errs))
		}
		rs, _ := s.Results("t1", j.ID)
		var sum money.Money
		for _, r := range rs {
			sum += money.Money(r.CompletionTokens) // the fake's usage is its cost
		}
		if sum != j.Spent || len(rs) != 500 {
			t.Fatalf("run %d: spent %d, sum of usage %d over %d lines", run, j.Spent, sum, len(rs))
		}
		t.Logf("run %d: %d kills", run, kills)
		s.Close()
	}
}
