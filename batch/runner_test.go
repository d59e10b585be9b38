package batch

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/money"
)

// fakeRunner answers each line at once, costing a random part of its cap
// (MaxCost), like a model that stops before max_tokens. It counts runs per request id.
type fakeRunner struct {
	mu    sync.Mutex
	runs  map[string]int
	delay time.Duration
}

func (f *fakeRunner) RunLine(ctx context.Context, r Request) Response {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return Response{StatusCode: 499}
		}
	}
	f.mu.Lock()
	if f.runs == nil {
		f.runs = map[string]int{}
	}
	f.runs[r.RequestID]++
	f.mu.Unlock()
	cost := money.Money(1 + rand.Int64N(int64(r.MaxCost)))
	body, _ := json.Marshal(map[string]any{"echo": json.RawMessage(r.Body), "cost": cost})
	return Response{StatusCode: 200, Body: body, PromptTokens: 3, CompletionTokens: int(cost), Cost: cost}
}

// price is the Checker of these tests: every line's worst case is 100.
var price = checkFunc(func(_, _ string, _ []byte) (money.Money, error) { return 100, nil })

func input(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"p%d"}}`+"\n", i, i)
	}
	return b.String()
}

func startJob(t *testing.T, m *Manager, n int, cap money.Money) Job {
	t.Helper()
	f, err := m.Store().PutFile("t1", "batch", "in.jsonl", strings.NewReader(input(n)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j, err := m.Create("t1", "k1", f.ID, "/v1/completions", "24h", nil, cap)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func waitTerminal(t *testing.T, s *Store, id string) Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		j, err := s.Job("t1", id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Terminal() {
			return j
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("job %s did not end", id)
	return Job{}
}

// readLines returns the custom_ids of a job's output file and error file lines
// (with the error codes), failing on any custom_id seen twice.
func readLines(t *testing.T, s *Store, j Job) (out, errs map[string]string) {
	t.Helper()
	out, errs = map[string]string{}, map[string]string{}
	seen := map[string]bool{}
	for _, x := range []struct {
		id string
		m  map[string]string
	}{{j.OutputFileID, out}, {j.ErrorFileID, errs}} {
		if x.id == "" {
			continue
		}
		f, _, err := s.Open(j.Tenant, x.id)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l outputLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if seen[l.CustomID] {
				t.Fatalf("custom_id %s twice", l.CustomID)
			}
			seen[l.CustomID] = true
			code := ""
			if l.Error != nil {
				code = l.Error.Code
			}
			x.m[l.CustomID] = code
		}
		f.Close()
	}
	return out, errs
}

func TestJobRunsEveryLineOnce(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fr := &fakeRunner{}
	m := NewManager(s, fr, Options{Checker: price, Concurrency: 8})
	defer m.Close()
	j := waitTerminal(t, s, startJob(t, m, 100, 0).ID)
	out, errs := readLines(t, s, j)
	if j.Status != Completed || len(out) != 100 || len(errs) != 0 || j.Counts != (Counts{Total: 100, Completed: 100}) {
		t.Fatalf("job %+v: %d out, %d errors", j, len(out), len(errs))
	}
	if j.InProgressAt == 0 || j.FinalizingAt == 0 || j.CompletedAt == 0 {
		t.Fatalf("timestamps %+v", j)
	}
	for id, n := range fr.runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
}

// The cap: 200 lines whose worst cases total 4× the cap, 16 at once. Spend stays
// under the cap, the job stops cancelled with max_cost_reached, and every line is in
// exactly one of the files.
func TestCapStopsJobWithinBudget(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewManager(s, &fakeRunner{delay: time.Millisecond}, Options{Checker: price, Concurrency: 16})
	defer m.Close()
	cap := money.Money(200 * 100 / 4)
	j := waitTerminal(t, s, startJob(t, m, 200, cap).ID)
	out, errs := readLines(t, s, j)
	if j.Status != Cancelled || len(j.Errors) != 1 || j.Errors[0].Code != CodeMaxCost {
		t.Fatalf("job %+v", j)
	}
	if j.Spent > cap {
		t.Fatalf("spent %d > cap %d", j.Spent, cap)
	}
	if len(out)+len(errs) != 200 || len(out) < 50 {
		t.Fatalf("%d out + %d errors", len(out), len(errs))
	}
	for id, code := range errs {
		if code != CodeMaxCost {
			t.Fatalf("%s: %s", id, code)
		}
	}
	rs, _ := s.Results("t1", j.ID)
	var sum money.Money
	for _, r := range rs {
		sum += r.Cost
	}
	if sum != j.Spent {
		t.Fatalf("sum of line costs %d != spent %d", sum, j.Spent)
	}
}

func TestCancelDrainsUnrunLines(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewManager(s, &fakeRunner{delay: 20 * time.Millisecond}, Options{Checker: price, Concurrency: 2})
	defer m.Close()
	j := startJob(t, m, 100, 0)
	time.Sleep(60 * time.Millisecond)
	c, err := m.Cancel("t1", j.ID)
	if err != nil || (c.Status != Cancelling && c.Status != Cancelled) {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	j = waitTerminal(t, s, j.ID)
	out, errs := readLines(t, s, j)
	if j.Status != Cancelled || len(out)+len(errs) != 100 || len(errs) == 0 || j.CancelledAt == 0 {
		t.Fatalf("job %s: %d out %d errors", j.Status, len(out), len(errs))
	}
	if _, err := m.Cancel("t2", j.ID); err != ErrNotFound {
		t.Fatalf("another tenant's cancel: %v", err)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("BATCH_KILL_CHILD") != "" {
		killChild()
		return
	}
	if os.Getenv("BATCH_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	if os.Getenv("BATCH_REDIS_WORKER") != "" {
		redisWorkerChild()
		return
	}
	os.Exit(m.Run())
}

// gaugeRunner is a fakeRunner that records the most lines it ran at once.
type gaugeRunner struct {
	fakeRunner
	mu        sync.Mutex
	now, most int
}

func (g *gaugeRunner) RunLine(ctx context.Context, r Request) Response {
	g.mu.Lock()
	g.now++
	g.most = max(g.most, g.now)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.now--; g.mu.Unlock() }()
	return g.fakeRunner.RunLine(ctx, r)
}

// TestConcurrencyOfTenant: a tenant's own batch concurrency (its plan's
// batch_max_concurrency) replaces the server's for its jobs: never more lines at once,
// and the job still completes; 0 keeps the server's.
func TestConcurrencyOfTenant(t *testing.T) {
	for _, c := range []struct{ own, want int }{{2, 2}, {0, 8}} {
		s, err := OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		g := &gaugeRunner{fakeRunner: fakeRunner{delay: 2 * time.Millisecond}}
		m := NewManager(s, g, Options{Checker: price, Concurrency: 8,
			ConcurrencyOf: func(tenant string) int {
				if tenant != "t1" {
					t.Errorf("asked for tenant %q", tenant)
				}
				return c.own
			}})
		j := waitTerminal(t, s, startJob(t, m, 60, 0).ID)
		m.Close()
		s.Close()
		if j.Status != Completed || j.Counts.Completed != 60 {
			t.Fatalf("own %d: job %+v", c.own, j)
		}
		if g.most > c.want || c.own == 0 && g.most <= 2 {
			t.Errorf("own %d: at most %d lines at once, want up to %d", c.own, g.most, c.want)
		}
	}
}
