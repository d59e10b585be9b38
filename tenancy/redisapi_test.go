package tenancy

import (
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

func newJobShared(t *testing.T, srv *redistest.Server, node string, ttl time.Duration) *RedisShared {
	t.Helper()
	rc, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	sh := NewRedisShared(rc, RedisOptions{KeyPrefix: "jobs:", Node: node, TTL: ttl})
	t.Cleanup(sh.Close)
	return sh
}

// The unfinished jobs of a tenant are bounded across the processes sharing a Redis:
// one more is refused on either, a job admitted again is not counted twice, an
// ended job frees its place, a resumed job counts even past the bound, and the jobs
// of a process that stopped (crashed: no EndJob) stop counting within the TTL.
func TestRedisUnfinishedJobsAcrossProcessesSelfHeal(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newJobShared(t, srv, "a", time.Second)
	b := newJobShared(t, srv, "b", time.Second)
	admit := func(sh *RedisShared, id string, max int) bool {
		t.Helper()
		ok, err := sh.AdmitJob("acme", id, max)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !admit(a, "j1", 2) || !admit(b, "j2", 2) {
		t.Fatal("two jobs of two refused")
	}
	if admit(a, "j3", 2) || admit(b, "j3", 2) {
		t.Fatal("a third job of two admitted")
	}
	if !admit(a, "j1", 2) {
		t.Fatal("a job already counted refused")
	}
	if !admit(b, "x", 0) { // max 0: no bound
		t.Fatal("no bound refused")
	}
	b.EndJob("acme", "x")
	if ok, _ := b.AdmitJob("zeta", "z1", 1); !ok {
		t.Fatal("another tenant refused")
	}
	b.EndJob("acme", "j2")
	if !admit(b, "j4", 2) {
		t.Fatal("refused after a job ended")
	}
	b.HoldJob("acme", "resumed") // three now: held past the bound
	if admit(b, "j5", 3) {
		t.Fatal("a resumed job not counted")
	}
	// Redis's clock decides expiry: the jobs of live processes stay past the TTL
	// (renewed).
	time.Sleep(1500 * time.Millisecond)
	if admit(b, "j6", 3) {
		t.Fatal("renewed jobs stopped counting")
	}
	b.Close() // b dies: j4 and resumed are no longer renewed, never ended
	for deadline := time.Now().Add(5 * time.Second); !admit(a, "j7", 2); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a dead process's jobs still count after its TTL")
		}
	}
}
