package batch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashRunner is a fakeRunner that kills its own process (SIGKILL: no deferred
// function, no clean close) when it runs a line whose body holds "crash", as a
// request that overflows the stack kills the server.
type crashRunner struct{ fakeRunner }

func (c *crashRunner) RunLine(ctx context.Context, r Request) Response {
	if strings.Contains(string(r.Body), "crash") {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return c.fakeRunner.RunLine(ctx, r)
}

// crashChild is the child process of TestKilledTwiceLineIsQuarantined: the job of
// 100 lines (line 38 crashes the process) on the store in BATCH_CRASH_CHILD, run
// until it ends.
func crashChild() {
	dir := os.Getenv("BATCH_CRASH_CHILD")
	s, err := OpenStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	m := NewManager(s, &crashRunner{fakeRunner{delay: time.Millisecond}}, Options{Checker: price, Concurrency: 8})
	if err := m.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if js, _, _ := s.Jobs("t1", "", 1); len(js) == 0 {
		in := strings.Replace(input(100), `"prompt":"p37"`, `"prompt":"crash"`, 1)
		f, err := s.PutFile("t1", "batch", "in.jsonl", strings.NewReader(in), time.Now())
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
			m.Close()
			os.Exit(0)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestKilledTwiceLineIsQuarantined runs a job in a child process whose line 38 kills
// the process each time it runs (a request that crashes the server), restarting the
// child as a supervisor would. The line was running when two runs died: the third
// run fails it with line_crashed_server in the error file and does not run it again,
// so the process dies exactly twice; the lines that were running beside it when it
// first died ran again alone, one at a time, and all 99 are in the output file.
func TestKilledTwiceLineIsQuarantined(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	dir := t.TempDir()
	deaths := 0
	for start := 0; ; start++ {
		if start == 5 {
			t.Fatalf("the job still crashes its process after %d starts (a crash loop)", start)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BATCH_CRASH_CHILD="+dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var err error
		select {
		case err = <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatal("the child neither ended the job nor died")
		}
		if err == nil {
			break
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child: %v", err)
		}
		deaths++
	}
	if deaths != 2 {
		t.Errorf("the process died %d times, want 2", deaths)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	js, _, _ := s.Jobs("t1", "", 10)
	if len(js) != 1 || js[0].Status != Completed {
		t.Fatalf("jobs %+v", js)
	}
	out, errs := readLines(t, s, js[0])
	if len(out) != 99 || len(errs) != 1 || errs["req-37"] != CodeCrashed {
		t.Fatalf("%d out, errors %v", len(out), errs)
	}
	if js[0].Counts.Completed != 99 || js[0].Counts.Failed != 1 {
		t.Fatalf("counts %+v", js[0].Counts)
	}
	if idx, _, _ := s.crashes(js[0].ID); len(idx) != 0 {
		t.Errorf("marks left after the job: %v", idx)
	}
}

// A clean Close takes back the marks of the lines it stopped: they run again after
// the next Start as before, not on probation, and no run is counted as a death.
func TestCleanCloseTakesBackMarks(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewManager(s, &fakeRunner{delay: time.Hour}, Options{Checker: price, Concurrency: 4})
	j := startJob(t, m, 20, 0)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if idx, _, _ := s.crashes(j.ID); len(idx) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no line started")
		}
	}
	m.Close()
	if idx, runs, _ := s.crashes(j.ID); len(idx) != 0 {
		t.Fatalf("marks after a clean close: lines %v, runs %v", idx, runs)
	}
	m = NewManager(s, &fakeRunner{}, Options{Checker: price, Concurrency: 4})
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	j = waitTerminal(t, s, j.ID)
	if out, errs := readLines(t, s, j); len(out) != 20 || len(errs) != 0 {
		t.Fatalf("%d out, errors %v", len(out), errs)
	}
}

// A resumed job's lines marked by runs that died: one started in two such runs is
// failed with CodeCrashed and never run; those started in one run again, alone, one
// at a time (probation), though the job may run 8 at once.
func TestResumeQuarantinesAndIsolatesSuspects(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewManager(s, &fakeRunner{delay: time.Hour}, Options{Checker: price, Concurrency: 8})
	j := startJob(t, m, 8, 0)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if idx, _, _ := s.crashes(j.ID); len(idx) == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lines did not start")
		}
	}
	m.Close()
	// Two runs that died: both started line 0; the second started lines 1-7 too.
	if err := s.markStarted(j.ID, []int{0}, 11); err != nil {
		t.Fatal(err)
	}
	if err := s.markStarted(j.ID, []int{0, 1, 2, 3, 4, 5, 6, 7}, 13); err != nil {
		t.Fatal(err)
	}
	g := &gaugeRunner{}
	m = NewManager(s, g, Options{Checker: price, Concurrency: 8, Poll: 5 * time.Millisecond})
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	j = waitTerminal(t, s, j.ID)
	out, errs := readLines(t, s, j)
	if len(out) != 7 || len(errs) != 1 || errs["req-0"] != CodeCrashed {
		t.Fatalf("%d out, errors %v", len(out), errs)
	}
	if g.runs[j.ID+"-0"] != 0 {
		t.Errorf("the quarantined line ran")
	}
	if g.most != 1 {
		t.Errorf("%d lines on probation ran at once, want 1", g.most)
	}
}

// soloRunner is a fakeRunner taking 20-60 ms a line that records, for each request,
// how many lines were running when it started.
type soloRunner struct {
	fakeRunner
	mu      sync.Mutex
	now     int
	startAt map[string]int
}

func (s *soloRunner) RunLine(ctx context.Context, r Request) Response {
	s.mu.Lock()
	s.now++
	s.startAt[r.RequestID] = s.now
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.now--; s.mu.Unlock() }()
	time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond) // lines overlap: the running seldom all end at once
	return s.fakeRunner.RunLine(ctx, r)
}

// A line on probation runs alone across jobs, and a busy job does not starve it: the
// manager stops starting other lines until the running ones end and it has run.
func TestProbationDrainsOtherJobs(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewManager(s, &fakeRunner{delay: time.Hour}, Options{Checker: price, Concurrency: 4})
	x := startJob(t, m, 4, 0)
	y := startJob(t, m, 3000, 0)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		a, _, _ := s.crashes(x.ID)
		b, _, _ := s.crashes(y.ID)
		if len(a) == 4 && len(b) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lines did not start")
		}
	}
	m.Close()
	if err := s.markStarted(x.ID, []int{0, 1, 2, 3}, 11); err != nil { // a run that died
		t.Fatal(err)
	}
	r := &soloRunner{startAt: map[string]int{}}
	m = NewManager(s, r, Options{Checker: price, Concurrency: 8, Poll: 5 * time.Millisecond})
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	x = waitTerminal(t, s, x.ID)
	if y, _ = s.Job("t1", y.ID); y.Status.Terminal() {
		t.Errorf("the lines on probation waited for the other job to end")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range 4 {
		if n := r.startAt[fmt.Sprintf("%s-%d", x.ID, i)]; n != 1 {
			t.Errorf("line %d on probation started with %d lines running", i, n)
		}
	}
}
