package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const ttl = 10 * time.Second

func lease(holder string, bytes int64, prio int, idle bool) Lease {
	return Lease{Device: HostDevice, Holder: holder, Bytes: bytes, Priority: prio, TTL: ttl, Idle: idle, Expires: t0.Add(ttl)}
}

func holders(ls []Lease) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Holder)
	}
	return strings.Join(s, ",")
}

func TestVictims(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
		leases []Lease
		want   Lease
		out    string // victims, or "error"
	}{
		{"fits", 100, []Lease{lease("a", 40, 0, true)}, lease("new", 60, 5, false), ""},
		{"fits exactly with nothing", 100, nil, lease("new", 100, 0, false), ""},
		{"too big for the device", 100, nil, lease("new", 101, 9, false), "error"},
		{"one idle lower victim", 100, []Lease{lease("a", 50, 1, true), lease("b", 30, 0, false)}, lease("new", 60, 5, false), "a"},
		{"busy models stay", 100, []Lease{lease("a", 50, 1, false), lease("b", 30, 0, false)}, lease("new", 60, 5, false), "error"},
		{"equal priority stays", 100, []Lease{lease("a", 50, 5, true)}, lease("new", 60, 5, false), "error"},
		{"lowest priority first", 100, []Lease{lease("a", 40, 2, true), lease("b", 40, 1, true)}, lease("new", 50, 5, false), "b"},
		{"largest first within a priority", 100, []Lease{lease("a", 20, 1, true), lease("b", 60, 1, true), lease("c", 20, 1, true)}, lease("new", 60, 5, false), "b"},
		{"as many as needed", 100, []Lease{lease("a", 30, 1, true), lease("b", 30, 1, true), lease("c", 30, 1, true)}, lease("new", 70, 5, false), "a,b"},
		{"trimmed of the unneeded", 100, []Lease{lease("small", 10, 0, true), lease("big", 60, 1, true), lease("busy", 30, 0, false)}, lease("new", 60, 5, false), "big"},
		{"expired leases do not count", 100, []Lease{{Device: HostDevice, Holder: "dead", Bytes: 90, TTL: ttl, Expires: t0}}, lease("new", 60, 0, false), ""},
		{"other devices do not count", 100, []Lease{{Device: "gpu:0", Holder: "g", Bytes: 90, TTL: ttl, Expires: t0.Add(ttl)}}, lease("new", 60, 0, false), ""},
		{"own earlier lease does not count", 100, []Lease{lease("new", 80, 0, false)}, lease("new", 90, 0, false), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Victims(t0, tc.budget, tc.leases, tc.want)
			if tc.out == "error" {
				var ne *NoMemoryError
				if !errors.Is(err, ErrNoMemory) || !errors.As(err, &ne) || ne.Want != tc.want.Bytes || ne.Budget != tc.budget {
					t.Fatalf("want a NoMemoryError, got %v, %v", v, err)
				}
				return
			}
			if err != nil || holders(v) != tc.out {
				t.Fatalf("victims %q, %v; want %q", holders(v), err, tc.out)
			}
		})
	}
}

func TestNoMemoryErrorText(t *testing.T) {
	_, err := Victims(t0, 100, []Lease{lease("a", 50, 1, true), lease("b", 30, 0, false)}, lease("new", 90, 5, false))
	want := "lease: not enough device memory: host needs 90 bytes; budget 100, leased 80, of which 50 idle at a lower priority"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if nm, ok := errors.AsType[*NoMemoryError](err); !ok || !errors.Is(err, ErrNoMemory) || nm.Want != 90 {
		t.Errorf("%v: not a *NoMemoryError (ErrNoMemory) for 90 bytes", err)
	}
}

// TestStore: acquire within the budget, resize, heartbeat, expiry (never renewed
// after), release, validation; for every Store.
func TestStore(t *testing.T) { forEachStore(t, testStore) }

func testStore(t *testing.T, m Store) {
	ctx := context.Background()
	a, err := m.Acquire(ctx, t0, lease("a", 60, 1, false), 100)
	if err != nil || !a.Expires.Equal(t0.Add(ttl)) {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if _, err := m.Acquire(ctx, t0, lease("b", 50, 1, false), 100); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("over budget: %v", err)
	}
	// Re-acquiring resizes a's own lease.
	if _, err := m.Acquire(ctx, t0, lease("a", 90, 1, false), 100); err != nil {
		t.Fatalf("resize: %v", err)
	}
	// Heartbeats keep a alive; b fits once a stops beating and expires.
	now := t0.Add(8 * time.Second)
	if err := m.Heartbeat(ctx, now, HostDevice, "a", true); err != nil {
		t.Fatal(err)
	}
	ls, _ := m.List(ctx, t0.Add(15*time.Second), HostDevice)
	if len(ls) != 1 || !ls[0].Idle || !ls[0].Expires.Equal(now.Add(ttl)) {
		t.Fatalf("after heartbeat: %+v", ls)
	}
	later := now.Add(ttl)
	if ls, _ := m.List(ctx, later, HostDevice); len(ls) != 0 {
		t.Fatalf("expired lease listed: %+v", ls)
	}
	if err := m.Heartbeat(ctx, later, HostDevice, "a", false); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("heartbeat after expiry: %v", err)
	}
	if _, err := m.Acquire(ctx, later, lease("b", 50, 1, false), 100); err != nil {
		t.Fatalf("acquire after expiry: %v", err)
	}
	if err := m.Release(ctx, HostDevice, "b"); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, HostDevice, "b"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("double release: %v", err)
	}
	if _, err := m.Acquire(ctx, t0, Lease{Device: HostDevice, Holder: "x", Bytes: 1}, 100); !errors.Is(err, ErrInvalid) {
		t.Fatalf("lease without TTL: %v", err)
	}
}

func TestExpire(t *testing.T) { forEachStore(t, testExpire) }

func testExpire(t *testing.T, m Store) {
	ctx := context.Background()
	for i, d := range []string{"host", "gpu:0", "host"} {
		l := lease(fmt.Sprint("h", i), 10, 0, false)
		l.Device = d
		l.TTL = time.Duration(i+1) * time.Second
		if _, err := m.Acquire(ctx, t0, l, 100); err != nil {
			t.Fatal(err)
		}
	}
	gone, _ := m.Expire(ctx, t0.Add(2*time.Second))
	if holders(gone) != "h1,h0" { // sorted by device then holder
		t.Fatalf("expired %q", holders(gone))
	}
	if ls, _ := m.List(ctx, t0, "host"); holders(ls) != "h2" {
		t.Fatalf("left %q", holders(ls))
	}
	if gone, _ := m.Expire(ctx, t0.Add(2*time.Second)); len(gone) != 0 {
		t.Fatal("expired twice")
	}
}

// TestAcquireUnloads: a high-priority load unloads an idle low-priority model through
// the callback and takes its memory; a load that cannot fit fails fast untouched.
func TestAcquireUnloads(t *testing.T) { forEachStore(t, testAcquireUnloads) }

func testAcquireUnloads(t *testing.T, m Store) {
	ctx := context.Background()
	for _, l := range []Lease{lease("low", 50, 0, true), lease("busy", 30, 0, false)} {
		if _, err := m.Acquire(ctx, t0, l, 100); err != nil {
			t.Fatal(err)
		}
	}
	var unloaded []string
	unload := func(l Lease) error { unloaded = append(unloaded, l.Holder); return nil }
	if _, err := Acquire(ctx, m, t0, 100, lease("big", 80, 5, false), unload); !errors.Is(err, ErrNoMemory) || len(unloaded) != 0 {
		t.Fatalf("80 bytes cannot fit beside busy's 30: %v, unloaded %v", err, unloaded)
	}
	got, err := Acquire(ctx, m, t0, 100, lease("high", 60, 5, false), unload)
	if err != nil || got.Holder != "high" || strings.Join(unloaded, ",") != "low" {
		t.Fatalf("acquire: %+v %v, unloaded %v", got, err, unloaded)
	}
	if ls, _ := m.List(ctx, t0, HostDevice); holders(ls) != "busy,high" {
		t.Fatalf("leases %q", holders(ls))
	}
	// An unload that fails stops the load.
	errServing := errors.New("still serving")
	failing := func(Lease) error { return errServing }
	if err := m.Heartbeat(ctx, t0, HostDevice, "high", true); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, m, t0, 100, lease("top", 60, 9, false), failing); !errors.Is(err, errServing) {
		t.Fatalf("failing unload: %v", err)
	}
}

// TestConcurrentAcquire: racing acquisitions never lease more than the budget.
func TestConcurrentAcquire(t *testing.T) { forEachStore(t, testConcurrentAcquire) }

func testConcurrentAcquire(t *testing.T, m Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Acquire(ctx, t0, lease(fmt.Sprint("h", i), 7, 0, false), 100)
		}()
	}
	wg.Wait()
	ls, _ := m.List(ctx, t0, HostDevice)
	var sum int64
	for _, l := range ls {
		sum += l.Bytes
	}
	if sum > 100 || len(ls) != 14 {
		t.Fatalf("%d leases of %d bytes", len(ls), sum)
	}
}

func TestMemTotal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // 0: error
	}{
		{"MemTotal:       24683620 kB\nMemFree: 1 kB\n", 24683620 << 10},
		{"MemFree: 1 kB\nMemTotal: 2048 kB\n", 2 << 20},
		{"MemTotal: 4096\n", 4096},
		{"MemTotal: 12 MB\n", 0},
		{"MemTotal: -5 kB\n", 0},
		{"MemTotal: kB\n", 0},
		{"MemTotal:\n", 0},
		{"MemTotal: 99999999999999999999 kB\n", 0},
		{"MemFree: 1 kB\n", 0},
		{"", 0},
	} {
		got, err := memTotal(strings.NewReader(tc.in))
		if tc.want == 0 && err == nil || tc.want != 0 && (err != nil || got != tc.want) {
			t.Errorf("memTotal(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	if b, err := budgetOf(10<<30, 0); err != nil || b != 9<<30 {
		t.Errorf("10 GiB with the default margin: %d %v", b, err)
	}
	if b, err := budgetOf(1<<30, 0); err != nil || b != 512<<20 {
		t.Errorf("1 GiB with the default margin: %d %v", b, err)
	}
	if _, err := budgetOf(256<<20, 0); err == nil {
		t.Error("256 MiB leaves nothing after the margin")
	}
}

func TestHostBudget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/meminfo")
	}
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo")
	}
	b, err := HostBudget(0)
	if err != nil || b <= 0 {
		t.Fatalf("HostBudget: %d %v", b, err)
	}
}

func FuzzMemTotal(f *testing.F) {
	f.Add("MemTotal:       24683620 kB\n")
	f.Add("MemTotal: 1\n")
	f.Add("MemTotal: 9007199254740992 kB\n")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := memTotal(strings.NewReader(s))
		if err == nil && n <= 0 {
			t.Fatalf("memTotal(%q) = %d without an error", s, n)
		}
	})
}
