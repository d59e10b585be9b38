package worker

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// TestWorkersShareRedisLeases: two Pools (two lmlite processes on one machine) whose
// workers lease their models' memory in one Redis (a real redis-server) never
// over-commit the device: with room for one model, the second process's model is
// refused (ErrNoMemory, across its worker's socket) while the first's worker holds
// its lease. Killed with SIGKILL (and not restarted: its circuit opens at the first
// crash), that worker's lease expires after its TTL and the second model loads. A
// worker that stops gives its lease back at once.
func TestWorkersShareRedisLeases(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t, redistest.Options{})
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	store := lease.NewRedis(rc, "wk:", "reader")
	leases := func() []lease.Lease {
		t.Helper()
		ls, err := store.List(ctx, time.Now(), lease.HostDevice)
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}
	const ttl = 3 * time.Second // the Block beats its leases every second
	path := llamaModel(t)
	a := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: path, MaxModelLen: 256, IdleTimeout: -1}},
		Command: testCommand(), Redis: &RedisLeases{URL: rs.URL(0), KeyPrefix: "wk:", Node: "proc-a"}, LeaseTTL: ttl,
		MemoryBudget: 1 << 30, Policy: Policy{MaxCrashes: 1}})
	ls := leases()
	if len(ls) != 1 || ls[0].Node != "proc-a/a" || !strings.HasPrefix(ls[0].Holder, "a@") || ls[0].Bytes <= 0 {
		t.Fatalf("leases after a's worker loaded: %+v", ls)
	}
	budget := ls[0].Bytes + ls[0].Bytes/2 // room for one of the two
	overCommitted := func() {
		t.Helper()
		var sum int64
		for _, l := range leases() {
			sum += l.Bytes
		}
		if sum > budget {
			t.Fatalf("%d bytes leased, over the budget of %d", sum, budget)
		}
	}

	b, err := New(Config{OpenPrep: openEnginePrep, Models: []engine.ModelConfig{{ID: "b", Path: path, MaxModelLen: 256, IdleTimeout: -1}},
		Command: testCommand(), Redis: &RedisLeases{URL: rs.URL(0), KeyPrefix: "wk:", Node: "proc-b"}, LeaseTTL: ttl,
		MemoryBudget: budget, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitFor(t, 20*time.Second, "b's worker running", func() bool { return b.Workers()[0].State == "running" })
	req := engine.Request{Prompt: []int32{1}, MaxTokens: 2}
	if r := run(b, "b", req); !errors.Is(r.err, engine.ErrNoMemory) {
		t.Fatalf("b beside a's live lease: %v, want ErrNoMemory", r.err)
	}
	overCommitted()

	pid := workerPID(t, a, "a")
	syscall.Kill(pid, syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, 5*time.Second, "a failed", func() bool { return state(a, "a").State == engine.StateFailed })
	for {
		r := run(b, "b", req)
		if r.err == nil {
			break
		}
		if !errors.Is(r.err, engine.ErrNoMemory) {
			t.Fatal(r.err)
		}
		overCommitted()
		if time.Since(killed) > ttl+10*time.Second { // slack for a loaded machine
			t.Fatalf("the killed worker's lease outlived its TTL of %v", ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("b loaded %v after a's worker was killed (lease TTL %v)", time.Since(killed).Round(time.Millisecond), ttl)
	ls = leases()
	if len(ls) != 1 || ls[0].Node != "proc-b/b" || !strings.HasPrefix(ls[0].Holder, "b@") {
		t.Fatalf("leases after b loaded: %+v", ls)
	}
	b.Close()
	if ls := leases(); len(ls) != 0 {
		t.Fatalf("leases after b's worker stopped: %+v, want none (given back, not left to expire)", ls)
	}
}
