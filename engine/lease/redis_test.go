package lease

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// forEachStore runs test against the in-process store and against the Redis store on
// a real redis-server.
func forEachStore(t *testing.T, test func(*testing.T, Store)) {
	t.Run("memory", func(t *testing.T) { test(t, &Memory{}) })
	t.Run("redis", func(t *testing.T) {
		test(t, newRedisStore(t, redistest.Start(t, redistest.Options{}), "node-a"))
	})
}

// newRedisStore is one process's store: its own client (own connections) and node.
func newRedisStore(t *testing.T, s *redistest.Server, node string) *Redis {
	t.Helper()
	c := newClient(t, s)
	return NewRedis(c, "test:", node)
}

func newClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: s.URL(0), Name: "lease-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// liveBytes reads a device's leased bytes straight from Redis's keys, independently of
// the store's scripts: the members of the sorted set scored after now whose heartbeat
// key exists, summed from their hashes. It runs as one script, so it sees one state.
var liveBytesScript = redis.NewScript(`
local sum, n = 0, 0
local m = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #m, 2 do
  if tonumber(m[i+1]) > tonumber(ARGV[2]) and redis.call('EXISTS', ARGV[1] .. 'hb:' .. m[i]) == 1 then
    local b = redis.call('HGET', ARGV[1] .. 'l:' .. m[i], 'bytes')
    if not b then return redis.error_reply('live lease ' .. m[i] .. ' without its hash') end
    sum, n = sum + tonumber(b), n + 1
  end
end
return {sum, n}
`)

func liveBytes(t *testing.T, c *redis.Client, prefix, device string, now time.Time) (sum, n int64) {
	base := prefix + "lease:{" + device + "}:"
	v, err := liveBytesScript.Run(context.Background(), c, []string{base + "z"}, base, now.UnixMilli()).Int64Slice()
	if err != nil {
		t.Errorf("reading Redis: %v", err)
		return 0, 0
	}
	return v[0], v[1]
}

// TestRedisKeyLayout: the keys docs/REDIS.md describes hold what it says.
func TestRedisKeyLayout(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	r := newRedisStore(t, s, "node-a")
	c := newClient(t, s)
	l := Lease{Device: "gpu:0", Holder: "m1/0@p", Bytes: 1 << 40, Priority: 3, TTL: 1500 * time.Millisecond, Idle: true}
	if _, err := r.Acquire(ctx, t0, l, 2<<40); err != nil {
		t.Fatal(err)
	}
	base := "test:lease:{gpu:0}:"
	if sc, err := c.ZScore(ctx, base+"z", "m1/0@p").Result(); err != nil || int64(sc) != t0.Add(1500*time.Millisecond).UnixMilli() {
		t.Errorf("score %v %v", sc, err)
	}
	h, err := c.HGetAll(ctx, base+"l:m1/0@p").Result()
	if err != nil || fmt.Sprint(h) != "map[bytes:1099511627776 gen:1 idle:1 node:node-a prio:3 ttl:1500]" {
		t.Errorf("hash %v %v", h, err)
	}
	if v, err := c.Get(ctx, base+"hb:m1/0@p").Result(); err != nil || v != "node-a" {
		t.Errorf("heartbeat key %q %v", v, err)
	}
	if pttl, err := c.PTTL(ctx, base+"hb:m1/0@p").Result(); err != nil || pttl <= 0 || pttl > 1500*time.Millisecond {
		t.Errorf("heartbeat TTL %v %v", pttl, err)
	}
	if d, err := c.SMembers(ctx, "test:lease:devices").Result(); err != nil || fmt.Sprint(d) != "[gpu:0]" {
		t.Errorf("devices %v %v", d, err)
	}
	if err := r.Release(ctx, "gpu:0", "m1/0@p"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, base+"z", base+"l:m1/0@p", base+"hb:m1/0@p").Result(); n != 0 {
		t.Errorf("%d keys left after release", n)
	}
}

// TestRedisBudgetProperty: several processes (each its own client and node) lease one
// device's budget at random — acquire or resize, release, heartbeat busy or idle, load
// by unloading idle lower-priority leases, and stop beating so that leases expire as
// the shared clock advances — and Redis's own state never holds more than the budget,
// read concurrently with the operations and after every round.
func TestRedisBudgetProperty(t *testing.T) {
	const (
		budget  = 1000
		procs   = 3
		holders = 6 // per process
		rounds  = 40
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := redistest.Start(t, redistest.Options{})
	check := newClient(t, s)
	stores := make([]*Redis, procs)
	for i := range stores {
		stores[i] = newRedisStore(t, s, fmt.Sprint("node-", i))
	}
	ctx := context.Background()
	var now atomic.Int64 // ms; constant within a round, so that every caller agrees on liveness
	now.Store(t0.UnixMilli())
	var acquired, refused, maxSeen atomic.Int64

	for round := range rounds {
		at := time.UnixMilli(now.Load())
		stop := make(chan struct{})
		checkerDone := make(chan struct{})
		go func() { // reads Redis while the processes race
			defer close(checkerDone)
			for {
				sum, _ := liveBytes(t, check, "test:", HostDevice, at)
				if sum > budget {
					t.Errorf("round %d: %d bytes leased of %d", round, sum, budget)
				}
				if sum > maxSeen.Load() {
					maxSeen.Store(sum)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		var wg sync.WaitGroup
		for p, st := range stores {
			rng := rand.New(rand.NewPCG(seed, uint64(round*procs+p)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 8 {
					h := fmt.Sprintf("m%d@node-%d", rng.IntN(holders), p)
					switch op := rng.IntN(10); {
					case op < 4:
						l := Lease{Device: HostDevice, Holder: h, Bytes: int64(50 + rng.IntN(400)),
							Priority: rng.IntN(3), TTL: time.Duration(10+rng.IntN(30)) * time.Second, Idle: rng.IntN(2) == 0}
						unload := st.Unload(l, func(v Lease) error { return nil })
						var err error
						if op < 2 {
							_, err = st.Acquire(ctx, at, l, budget)
						} else { // through the victims; another process's idle victim is released for it
							_, err = Acquire(ctx, st, at, budget, l, func(v Lease) error {
								if err := unload(v); errors.Is(err, ErrNoListener) {
									return nil // Acquire releases it
								} else {
									return err
								}
							})
						}
						switch {
						case err == nil:
							acquired.Add(1)
						case errors.Is(err, ErrNoMemory):
							refused.Add(1)
						default:
							t.Errorf("acquire: %v", err)
						}
					case op < 6:
						if err := st.Release(ctx, HostDevice, h); err != nil && !errors.Is(err, ErrNotHeld) {
							t.Errorf("release: %v", err)
						}
					default:
						if err := st.Heartbeat(ctx, at, HostDevice, h, rng.IntN(2) == 0); err != nil && !errors.Is(err, ErrNotHeld) {
							t.Errorf("heartbeat: %v", err)
						}
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-checkerDone
		// After the round, the store's own view agrees with the raw keys.
		sum, n := liveBytes(t, check, "test:", HostDevice, at)
		ls, err := stores[0].List(ctx, at, HostDevice)
		var listed int64
		for _, l := range ls {
			listed += l.Bytes
		}
		if err != nil || listed != sum || int64(len(ls)) != n || sum > budget {
			t.Fatalf("round %d: List %d bytes in %d leases (%v); Redis %d in %d; budget %d", round, listed, len(ls), err, sum, n, budget)
		}
		// Some leases expire by the shared clock. The TTLs are long in real time, so
		// that no heartbeat key expires (by Redis's clock) between two reads above.
		now.Add(int64(rand.New(rand.NewPCG(seed, uint64(round))).IntN(15000)))
	}
	t.Logf("%d acquired, %d refused for want of memory, at most %d of %d bytes leased", acquired.Load(), refused.Load(), maxSeen.Load(), budget)
	if acquired.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("the random load never hit both outcomes (%d acquired, %d refused): not a test of the budget", acquired.Load(), refused.Load())
	}
}

// TestRedisDeadHolderLosesLease: a holder that beats keeps its lease past its TTL;
// once it stops (its process is gone), another process's load that did not fit beside
// it succeeds within the TTL, and the dead lease is never renewed.
func TestRedisDeadHolderLosesLease(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a, b := newRedisStore(t, s, "node-a"), newRedisStore(t, s, "node-b")
	const ttl = 400 * time.Millisecond
	la := Lease{Device: HostDevice, Holder: "big@node-a", Bytes: 600, TTL: ttl}
	lb := Lease{Device: HostDevice, Holder: "big@node-b", Bytes: 600, TTL: ttl}
	if _, err := a.Acquire(ctx, time.Now(), la, 1000); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 2*ttl { // beating for twice the TTL
		if err := a.Heartbeat(ctx, time.Now(), HostDevice, la.Holder, false); err != nil {
			t.Fatalf("heartbeat of a live lease: %v", err)
		}
		if _, err := b.Acquire(ctx, time.Now(), lb, 1000); !errors.Is(err, ErrNoMemory) {
			t.Fatalf("b fits beside a live a: %v", err)
		}
		time.Sleep(ttl / 8)
	}
	last := time.Now()
	if err := a.Heartbeat(ctx, last, HostDevice, la.Holder, false); err != nil {
		t.Fatal(err)
	}
	// a's process dies here: no more heartbeats.
	for {
		_, err := b.Acquire(ctx, time.Now(), lb, 1000)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoMemory) {
			t.Fatal(err)
		}
		if time.Since(last) > ttl+400*time.Millisecond { // slack for a loaded machine
			t.Fatalf("a's lease outlived its TTL of %v by 400ms", ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("b acquired %v after a's last heartbeat (TTL %v)", time.Since(last).Round(time.Millisecond), ttl)
	if time.Since(last) < ttl-50*time.Millisecond {
		t.Fatalf("b acquired %v after a's last heartbeat, before a's TTL of %v", time.Since(last), ttl)
	}
	if err := a.Heartbeat(ctx, time.Now(), HostDevice, la.Holder, false); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("an expired lease was renewed: %v", err)
	}
}

// TestRedisDeadHolderWithSkewedClock: a holder whose clock runs an hour ahead scores
// its lease an hour out, yet the lease is gone within its TTL by Redis's clock (its
// heartbeat key expires), and a late heartbeat cannot bring it back even with a time
// at which its score says it is live.
func TestRedisDeadHolderWithSkewedClock(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a, b := newRedisStore(t, s, "node-a"), newRedisStore(t, s, "node-b")
	const ttl = 300 * time.Millisecond
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	la := Lease{Device: HostDevice, Holder: "x@node-a", Bytes: 700, TTL: ttl}
	acquiredAt := ahead()
	if _, err := a.Acquire(ctx, acquiredAt, la, 1000); err != nil {
		t.Fatal(err)
	}
	if ls, _ := b.List(ctx, time.Now(), HostDevice); len(ls) != 1 {
		t.Fatalf("live lease not listed: %+v", ls)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	if ls, _ := b.List(ctx, time.Now(), HostDevice); len(ls) != 0 {
		t.Fatalf("lease listed after its heartbeat key expired: %+v", ls)
	}
	// Even by a clock that stood still since the acquisition (its score says live),
	// the heartbeat cannot revive it.
	if err := a.Heartbeat(ctx, acquiredAt, HostDevice, la.Holder, false); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("a lease past its TTL was renewed: %v", err)
	}
	if _, err := b.Acquire(ctx, time.Now(), Lease{Device: HostDevice, Holder: "y@node-b", Bytes: 700, TTL: ttl}, 1000); err != nil {
		t.Fatal(err)
	}
}

// TestRedisExpireReportsDeadLeases: Expire returns (and removes) the leases whose
// heartbeat key Redis expired, with their numbers, even when their score is ahead.
func TestRedisExpireReportsDeadLeases(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a := newRedisStore(t, s, "node-a")
	now := time.Now()
	if _, err := a.Acquire(ctx, now.Add(time.Hour), Lease{Device: "gpu:1", Holder: "h", Bytes: 5, Priority: 2, TTL: 50 * time.Millisecond}, 10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	gone, err := a.Expire(ctx, time.Now())
	if err != nil || len(gone) != 1 || gone[0].Holder != "h" || gone[0].Device != "gpu:1" || gone[0].Bytes != 5 || gone[0].Priority != 2 {
		t.Fatalf("expired %+v %v", gone, err)
	}
	if gone, _ := a.Expire(ctx, time.Now()); len(gone) != 0 {
		t.Fatalf("expired twice: %+v", gone)
	}
}

// TestRedisPreemptAcrossProcesses: a high-priority load on node b unloads an idle
// low-priority model of node a through a's preempt channel; a refusal (the model is
// busy again) fails the load within PreemptWait and leaves a's lease; a node that does
// not listen is reported at once.
func TestRedisPreemptAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a, b := newRedisStore(t, s, "node-a"), newRedisStore(t, s, "node-b")
	b.PreemptWait = 500 * time.Millisecond
	now := time.Now()
	low := Lease{Device: HostDevice, Holder: "low@node-a", Bytes: 600, Priority: 0, TTL: time.Minute, Idle: true}
	if _, err := a.Acquire(ctx, now, low, 1000); err != nil {
		t.Fatal(err)
	}
	high := Lease{Device: HostDevice, Holder: "high@node-b", Bytes: 600, Priority: 5, TTL: time.Minute}
	noLocal := func(v Lease) error { t.Errorf("local unload of %s held by another node", v.Holder); return nil }

	// No listener on node a.
	if _, err := Acquire(ctx, b, now, 1000, high, b.Unload(high, noLocal)); !errors.Is(err, ErrNoListener) {
		t.Fatalf("without a listener: %v", err)
	}

	var mu sync.Mutex
	busy := true
	var got []PreemptRequest
	stop, err := a.Listen(func(req PreemptRequest) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, req)
		if busy {
			return errors.New("busy again")
		}
		return nil // unloaded
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	start := time.Now()
	if _, err := Acquire(ctx, b, now, 1000, high, b.Unload(high, noLocal)); !errors.Is(err, ErrNotGivenUp) {
		t.Fatalf("refused preemption: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("refusal took %v", d)
	}
	if ls, _ := a.List(ctx, now, HostDevice); holders(ls) != "low@node-a" {
		t.Fatalf("after a refusal: %q", holders(ls))
	}

	mu.Lock()
	busy = false
	mu.Unlock()
	l, err := Acquire(ctx, b, now, 1000, high, b.Unload(high, noLocal))
	if err != nil || l.Holder != "high@node-b" {
		t.Fatalf("preempting: %+v %v", l, err)
	}
	if ls, _ := a.List(ctx, now, HostDevice); holders(ls) != "high@node-b" {
		t.Fatalf("after preemption: %q", holders(ls))
	}
	mu.Lock()
	defer mu.Unlock()
	want := PreemptRequest{Device: HostDevice, Holder: "low@node-a", By: "high@node-b", Priority: 5, Node: "node-b"}
	if len(got) != 2 || got[1] != want {
		t.Fatalf("requests %+v, want two, the last %+v", got, want)
	}
}

// TestRedisUnloadLocalVictim: a victim held by the same node is unloaded by the local
// function, with no message.
func TestRedisUnloadLocalVictim(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a := newRedisStore(t, s, "node-a")
	now := time.Now()
	if _, err := a.Acquire(ctx, now, Lease{Device: HostDevice, Holder: "low", Bytes: 60, TTL: time.Minute, Idle: true}, 100); err != nil {
		t.Fatal(err)
	}
	high := Lease{Device: HostDevice, Holder: "high", Bytes: 60, Priority: 1, TTL: time.Minute}
	var unloaded []string
	if _, err := Acquire(ctx, a, now, 100, high, a.Unload(high, func(v Lease) error { unloaded = append(unloaded, v.Holder); return nil })); err != nil {
		t.Fatal(err)
	}
	if strings.Join(unloaded, ",") != "low" {
		t.Fatalf("unloaded %v", unloaded)
	}
}

// TestRedisDownFailsClosed: with Redis dead every call fails with an error that is
// neither ErrNoMemory nor ErrNotHeld (no load proceeds unleased); after a restart
// without persistence the old lease is forgotten (heartbeat: ErrNotHeld) and leasing
// works again.
func TestRedisDownFailsClosed(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a := newRedisStore(t, s, "node-a")
	now := time.Now()
	l := Lease{Device: HostDevice, Holder: "m", Bytes: 10, TTL: time.Minute}
	if _, err := a.Acquire(ctx, now, l, 100); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	for name, err := range map[string]error{
		"acquire": func() error {
			_, err := a.Acquire(ctx, now, Lease{Device: HostDevice, Holder: "n", Bytes: 1, TTL: time.Minute}, 100)
			return err
		}(),
		"heartbeat": a.Heartbeat(ctx, now, HostDevice, "m", false),
		"release":   a.Release(ctx, HostDevice, "m"),
		"list":      func() error { _, err := a.List(ctx, now, HostDevice); return err }(),
		"expire":    func() error { _, err := a.Expire(ctx, now); return err }(),
	} {
		if !errors.Is(err, ErrRedis) || errors.Is(err, ErrNoMemory) || errors.Is(err, ErrNotHeld) || !strings.HasPrefix(err.Error(), "lease: redis "+name+": ") {
			t.Errorf("%s with Redis down: %v", name, err)
		}
	}
	s.Restart()
	if err := a.Heartbeat(ctx, now, HostDevice, "m", false); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("heartbeat after a restart without persistence: %v", err)
	}
	if _, err := a.Acquire(ctx, now, l, 100); err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
}

// TestRedisHelperHolder is not a test: TestRedisKilledProcessLosesLease runs the test
// binary with LEASE_HOLDER_URL set to make it a process that holds a lease and beats
// until it is killed.
func TestRedisHelperHolder(t *testing.T) {
	url := os.Getenv("LEASE_HOLDER_URL")
	if url == "" {
		t.Skip("a helper process of TestRedisKilledProcessLosesLease")
	}
	c, err := rediscli.New(rediscli.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	st := NewRedis(c, "test:", "node-child")
	l := Lease{Device: HostDevice, Holder: "big@node-child", Bytes: 600, TTL: killTTL}
	if _, err := st.Acquire(context.Background(), time.Now(), l, 1000); err != nil {
		t.Fatal(err)
	}
	fmt.Println("held")
	for {
		time.Sleep(killTTL / 4)
		if err := st.Heartbeat(context.Background(), time.Now(), HostDevice, l.Holder, false); err != nil {
			t.Fatalf("heartbeat: %v", err) // the parent and its Redis are gone: so is the child
		}
	}
}

const killTTL = 500 * time.Millisecond

// TestRedisKilledProcessLosesLease: a child process holds 600 of 1000 bytes and beats;
// while it lives no other 600 fits; after kill -9 the load fits within its TTL (the
// child beat at most TTL/4 before it died).
func TestRedisKilledProcessLosesLease(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisHelperHolder$", "-test.v")
	cmd.Env = append(os.Environ(), "LEASE_HOLDER_URL="+s.URL(0))
	redistest.DieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
	}
	if sc.Err() != nil || sc.Text() != "held" {
		t.Fatalf("the child did not report its lease: %v", sc.Err())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	b := newRedisStore(t, s, "node-b")
	lb := Lease{Device: HostDevice, Holder: "big@node-b", Bytes: 600, TTL: killTTL}
	time.Sleep(2 * killTTL) // the child keeps its lease past its TTL by beating
	if _, err := b.Acquire(ctx, time.Now(), lb, 1000); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("fits beside a live child: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()
	for {
		_, err := b.Acquire(ctx, time.Now(), lb, 1000)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoMemory) {
			t.Fatal(err)
		}
		if time.Since(killed) > killTTL+400*time.Millisecond { // slack for a loaded machine
			t.Fatalf("the killed child's lease outlived its TTL of %v", killTTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("acquired %v after kill -9 (TTL %v)", time.Since(killed).Round(time.Millisecond), killTTL)
}

// TestRedisListenKeepsReacquiredLease: a preempted model that is unloaded (its lease
// released) and loaded again for a new request before Listen has finished with the
// preempt request keeps its new lease: Listen releases only the lease it was asked
// about. A handler that gives a model up without releasing its lease still has the
// lease released.
func TestRedisListenKeepsReacquiredLease(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	a, b := newRedisStore(t, s, "node-a"), newRedisStore(t, s, "node-b")
	low := Lease{Device: HostDevice, Holder: "low@node-a", Bytes: 600, TTL: time.Minute, Idle: true}
	other := Lease{Device: HostDevice, Holder: "other@node-a", Bytes: 100, TTL: time.Minute, Idle: true}
	for _, l := range []Lease{low, other} {
		if _, err := a.Acquire(ctx, time.Now(), l, 1000); err != nil {
			t.Fatal(err)
		}
	}
	stop, err := a.Listen(func(req PreemptRequest) error {
		if req.Holder != low.Holder {
			return nil // unloaded without releasing: the lease is Listen's to release
		}
		// The model unloads (its lease released), and a new request loads it again at
		// once, before Listen is done with the preempt request.
		if err := a.Release(ctx, req.Device, req.Holder); err != nil {
			t.Error(err)
		}
		if _, err := a.Acquire(ctx, time.Now(), low, 1000); err != nil {
			t.Error(err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Listen handles a channel's requests in order: once other's lease is gone, it is
	// done with low's request.
	for _, h := range []string{low.Holder, other.Holder} {
		msg := `{"device":"host","holder":"` + h + `","by":"high@node-b","priority":5,"node":"node-b"}`
		if n, err := b.c.Publish(ctx, a.PreemptChannel("node-a"), msg).Result(); err != nil || n != 1 {
			t.Fatalf("publish: %d %v", n, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ls, err := a.List(ctx, time.Now(), HostDevice)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(holders(ls), other.Holder) {
			if holders(ls) != low.Holder {
				t.Fatalf("leases after the preemptions: %q, want %s (acquired again) alone", holders(ls), low.Holder)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not released: %q", other.Holder, holders(ls))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
