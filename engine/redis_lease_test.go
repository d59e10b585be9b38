package engine

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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/internal/testenv"
)

// These tests run Blocks on lease.Redis against a real redis-server: each Block has
// its own store with its own node id, as separate processes would (one test runs a
// real second process).

func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: url, Name: "engine-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// storiesBytes is what one stories260K model leases with the tests' settings.
func storiesBytes(t *testing.T, mc ModelConfig) int64 {
	t.Helper()
	mc.ID, mc.Path = "probe", testenv.SharedFile(t, "models/stories260K.gguf")
	b, err := New(Config{Models: []ModelConfig{mc}, Devices: map[string]int64{lease.HostDevice: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	return b.models["probe"].leaseBytes()
}

// redisBlock is a Block of the given stories models on a Redis store of node node;
// it does not wait for the loads.
func redisBlock(t *testing.T, c *redis.Client, node string, budget int64, models ...ModelConfig) *Block {
	t.Helper()
	path := testenv.SharedFile(t, "models/stories260K.gguf")
	for i := range models {
		models[i].Path = path
	}
	b, err := New(Config{Models: models, Leases: lease.NewRedis(c, "t:", node),
		Devices: map[string]int64{lease.HostDevice: budget}, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func leased(t *testing.T, c *redis.Client) (sum int64, holders []string) {
	t.Helper()
	r := lease.NewRedis(c, "t:", "reader")
	ls, err := r.List(context.Background(), time.Now(), lease.HostDevice)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		sum += l.Bytes
		holders = append(holders, l.Holder)
	}
	return sum, holders
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func modelState(b *Block, id string) ModelState {
	var s ModelState
	b.call(func() { s = b.models[id].life.state })
	return s
}

// TestRedisHigherPriorityLoadUnloadsIdleModelOfOtherProcess: process B's load of
// priority 5 that does not fit asks process A (over its preempt channel) to unload its
// idle model of priority 0; A's janitor decides so and unloads it, and B's model loads.
// A busy model of A is not unloaded: B's load then fails.
func TestRedisHigherPriorityLoadUnloadsIdleModelOfOtherProcess(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := redisClient(t, s.URL(0))
	mc := ModelConfig{MaxModelLen: 64, IdleTimeout: -1}
	n := storiesBytes(t, mc)
	low, high := mc, mc
	low.ID, high.ID, high.Priority = "low", "high", 5
	a := redisBlock(t, c, "node-a", n*3/2, low)
	if err := a.Load(context.Background(), "low"); err != nil {
		t.Fatal(err)
	}
	// Busy: A's model serves a request while B wants the memory.
	in := a.models["low"]
	a.call(func() { in.life.active++ })
	time.Sleep(1500 * time.Millisecond) // a heartbeat records it busy
	b := redisBlock(t, c, "node-b", n*3/2, high)
	if err := b.Load(context.Background(), "high"); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("load while the other process's model is busy: %v", err)
	}
	a.call(func() { in.life.active-- })
	// Idle now: once a heartbeat says so, B's load asks A to unload it.
	waitUntil(t, 5*time.Second, "A's lease idle in Redis", func() bool {
		ls, _ := lease.NewRedis(c, "t:", "r").List(context.Background(), time.Now(), lease.HostDevice)
		return len(ls) == 1 && ls[0].Idle
	})
	if err := b.Load(context.Background(), "high"); err != nil {
		t.Fatalf("load after the other process's model is idle: %v", err)
	}
	if st := modelState(a, "low"); st != StateUnloaded {
		t.Fatalf("A's model is %s", st)
	}
	if sum, hs := leased(t, c); sum > n*3/2 || len(hs) != 1 || !strings.HasPrefix(hs[0], "high@") {
		t.Fatalf("leases %d bytes %v", sum, hs)
	}
}

// TestRedisTwoBlocksNeverExceedBudget: two Blocks (two stores, two node ids) with two
// models each share a budget that holds two models; random loads and unloads from
// both never lease more than the budget, as read from Redis after every step and by
// a poller in between.
func TestRedisTwoBlocksNeverExceedBudget(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := redisClient(t, s.URL(0))
	mc := ModelConfig{MaxModelLen: 64, IdleTimeout: -1}
	n := storiesBytes(t, mc)
	budget := 2*n + n/2
	m1, m2 := mc, mc
	m1.ID, m2.ID = "m1", "m2"
	blocks := []*Block{redisBlock(t, c, "node-a", budget, m1, m2), redisBlock(t, c, "node-b", budget, m1, m2)}
	stop := make(chan struct{})
	var over []int64
	var mu sync.Mutex
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if sum, _ := leased(t, c); sum > budget {
				mu.Lock()
				over = append(over, sum)
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	loads := make([]int, 2)
	for i, b := range blocks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for range 25 {
				id := []string{"m1", "m2"}[rng.IntN(2)]
				if rng.IntN(3) == 0 {
					b.Unload(id)
				} else if err := b.Load(context.Background(), id); err == nil {
					loads[i]++
				} else if !errors.Is(err, ErrNoMemory) {
					t.Errorf("load %s: %v", id, err)
				}
				if sum, hs := leased(t, c); sum > budget {
					t.Errorf("leased %d > budget %d: %v", sum, budget, hs)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	if len(over) > 0 {
		t.Fatalf("the poller saw leases over the budget %d: %v", budget, over)
	}
	// Which Block won the budget depends on how the two goroutines interleaved (one
	// may finish holding both models before the other starts); both must be able to
	// load: once one lets go of everything, the other loads both models.
	for i, b := range blocks {
		other := blocks[1-i]
		other.Unload("m1")
		other.Unload("m2")
		for _, id := range []string{"m1", "m2"} {
			if err := b.Load(context.Background(), id); err != nil {
				t.Fatalf("block %d, the other holding nothing: load %s: %v", i, id, err)
			}
			loads[i]++
		}
		if sum, hs := leased(t, c); sum > budget {
			t.Fatalf("leased %d > budget %d: %v", sum, budget, hs)
		}
	}
	t.Logf("loads per Block %v", loads)
}

// TestRedisKilledHolderLeaseExpires: a second process (this test binary, re-executed)
// loads a model on the shared budget and is killed with SIGKILL; its lease is gone
// within its TTL (2 s) and this process's model, refused while it lived, then loads.
func TestRedisKilledHolderLeaseExpires(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := redisClient(t, s.URL(0))
	mc := ModelConfig{MaxModelLen: 64, IdleTimeout: -1}
	n := storiesBytes(t, mc)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisLeaseHolderProcess$")
	cmd.Env = append(os.Environ(), "LMLITE_TEST_LEASE_HOLDER="+s.URL(0), fmt.Sprintf("LMLITE_TEST_LEASE_BUDGET=%d", n*3/2))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
	}
	if _, hs := leased(t, c); len(hs) != 1 || !strings.HasPrefix(hs[0], "held@") {
		t.Fatalf("the child's lease: %v", hs)
	}
	mine := mc
	mine.ID = "mine"
	b := redisBlock(t, c, "node-parent", n*3/2, mine)
	if err := b.Load(context.Background(), "mine"); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("load while the other process holds the memory: %v", err)
	}
	cmd.Process.Kill()
	killed := time.Now()
	waitUntil(t, 3*time.Second, "the killed process's lease gone", func() bool { _, hs := leased(t, c); return len(hs) == 0 })
	t.Logf("lease gone %v after SIGKILL (TTL 2s)", time.Since(killed).Round(10*time.Millisecond))
	if err := b.Load(context.Background(), "mine"); err != nil {
		t.Fatalf("load after the holder died: %v", err)
	}
}

// TestRedisLeaseHolderProcess is the child of TestRedisKilledHolderLeaseExpires; it
// does nothing in a normal run.
func TestRedisLeaseHolderProcess(t *testing.T) {
	url := os.Getenv("LMLITE_TEST_LEASE_HOLDER")
	if url == "" {
		t.Skip("the child process of TestRedisKilledHolderLeaseExpires")
	}
	var budget int64
	fmt.Sscan(os.Getenv("LMLITE_TEST_LEASE_BUDGET"), &budget)
	c := redisClient(t, url)
	b := redisBlock(t, c, "node-child", budget, ModelConfig{ID: "held", MaxModelLen: 64, IdleTimeout: -1})
	if err := b.Load(context.Background(), "held"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	select {} // until killed
}

// TestRedisLostLeaseAcquiredAgain: when Redis forgets the leases (a restart without
// persistence, here FLUSHDB), the next heartbeat answers ErrNotHeld and the Block
// acquires the lease again; if the memory has been taken meanwhile, its idle model is
// unloaded instead.
func TestRedisLostLeaseAcquiredAgain(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := redisClient(t, s.URL(0))
	mc := ModelConfig{ID: "m", MaxModelLen: 64, IdleTimeout: -1}
	n := storiesBytes(t, mc)
	b := redisBlock(t, c, "node-a", n*3/2, mc)
	if err := b.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	c.FlushDB(context.Background())
	waitUntil(t, 5*time.Second, "the lease acquired again", func() bool { _, hs := leased(t, c); return len(hs) == 1 })
	if st := modelState(b, "m"); st != StateReady {
		t.Fatalf("model %s after re-acquiring", st)
	}
	// Forgotten again, and another process takes the memory first: the model unloads.
	c.FlushDB(context.Background())
	other := lease.NewRedis(c, "t:", "node-b")
	if _, err := other.Acquire(context.Background(), time.Now(), lease.Lease{Device: lease.HostDevice, Holder: "x@b", Bytes: n, TTL: time.Minute}, n*3/2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the model unloaded", func() bool { return modelState(b, "m") == StateUnloaded })
}

// TestRedisCloseDuringPreemptionRefusesTheLoad: Close while a load waits for another
// process to give up its memory (a preemption in flight, off the janitor) waits for
// the preemption to report its end and then refuses the load with ErrClosed; the
// load's waiter is not left waiting for a janitor that has stopped.
func TestRedisCloseDuringPreemptionRefusesTheLoad(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := redisClient(t, s.URL(0))
	mc := ModelConfig{MaxModelLen: 64, IdleTimeout: -1}
	n := storiesBytes(t, mc)
	budget := n * 3 / 2

	// The other process: an idle lease of priority 0 that gives itself up only when
	// the test says so.
	other := lease.NewRedis(c, "t:", "node-a")
	if _, err := other.Acquire(context.Background(), time.Now(), lease.Lease{Device: lease.HostDevice, Holder: "x@a",
		Bytes: n, TTL: time.Minute, Idle: true}, budget); err != nil {
		t.Fatal(err)
	}
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop, err := other.Listen(func(lease.PreemptRequest) error {
		once.Do(func() { close(asked) })
		<-release
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	high := mc
	high.ID, high.Priority = "high", 5
	b := redisBlock(t, c, "node-b", budget, high)
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the other process was never asked to unload")
	}
	loaded := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		loaded <- b.Load(ctx, "high")
	}()
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
		t.Error("Close returned while a preemption was in flight")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	<-closed
	if err := <-loaded; !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close during its preemption: %v, want ErrClosed", err)
	}
}
