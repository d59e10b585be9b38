package batch

import (
	"context"
	"sync"
	"testing"
	"time"
)

// clock is a settable now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// budgetRunner refuses every line for the tenant's budget until the clock reaches
// reset, then runs it.
type budgetRunner struct {
	fakeRunner
	clk   *clock
	reset time.Time
}

func (b *budgetRunner) RunLine(ctx context.Context, r Request) Response {
	if b.clk.now().Before(b.reset) {
		return Response{Refused: RefusedBudget, Until: b.reset}
	}
	return b.fakeRunner.RunLine(ctx, r)
}

func TestBudgetPausesJobUntilWindowResets(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clk := &clock{t: time.Date(2026, 3, 1, 20, 0, 0, 0, time.UTC)}
	br := &budgetRunner{clk: clk, reset: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)}
	m := NewManager(s, br, Options{Checker: price, Concurrency: 4, Now: clk.now, Poll: 5 * time.Millisecond})
	defer m.Close()
	j := startJob(t, m, 20, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := s.Job("t1", j.ID)
		if got.Status == InProgress && got.PausedReason != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not paused: %+v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // still paused: nothing ran
	if got, _ := s.Job("t1", j.ID); got.Status != InProgress || got.Counts.Completed != 0 {
		t.Fatalf("paused job moved: %+v", got)
	}
	clk.add(4 * time.Hour) // the daily window resets
	j = waitTerminal(t, s, j.ID)
	if j.Status != Completed || j.Counts.Completed != 20 || j.PausedReason != "" {
		t.Fatalf("job %+v", j)
	}
}

// expiringRunner moves the clock past the window on its sixth line.
type expiringRunner struct {
	fakeRunner
	clk *clock
	mu  sync.Mutex
	n   int
}

func (e *expiringRunner) RunLine(ctx context.Context, r Request) Response {
	e.mu.Lock()
	e.n++
	if e.n == 6 {
		e.clk.add(25 * time.Hour)
	}
	e.mu.Unlock()
	return e.fakeRunner.RunLine(ctx, r)
}

func TestExpiredJobDrainsUnrunLines(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clk := &clock{t: time.Now()}
	m := NewManager(s, &expiringRunner{clk: clk}, Options{Checker: price, Concurrency: 2, Now: clk.now, Poll: 5 * time.Millisecond})
	defer m.Close()
	j := waitTerminal(t, s, startJob(t, m, 40, 0).ID)
	out, errs := readLines(t, s, j)
	if j.Status != Expired || j.ExpiredAt == 0 || len(out) < 6 || len(out)+len(errs) != 40 {
		t.Fatalf("job %s: %d out, %d errors", j.Status, len(out), len(errs))
	}
	for id, code := range errs {
		if code != CodeExpired {
			t.Fatalf("%s: %s", id, code)
		}
	}
}
