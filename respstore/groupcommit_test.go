package respstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/ledger"
	bolt "go.etcd.io/bbolt"
)

// gcRec is a response of tenant with one input and one output item, made now.
func gcRec(tenant, id string, pad int) Record {
	return Record{Tenant: tenant, ID: id, Created: time.Now(), Model: "m",
		Response: []byte(`{"id":"` + id + `","pad":"` + strings.Repeat("x", pad) + `"}`),
		Input:    []Item{{ID: "msg_in", JSON: []byte(`{"type":"message"}`)}},
		Output:   []Item{{ID: "msg_out", JSON: []byte(`{"type":"message","role":"assistant"}`)}}}
}

// TestGroupCommitKeepsLimitsExact: 300 concurrent Puts of three tenants, two of them
// against limits (a count, a byte budget), share transactions (fewer commits than
// Puts: the group commit happened) and still store exactly up to each limit, every
// other Put a LimitError; each tenant reads only its own responses. Run with -race.
func TestGroupCommitKeepsLimitsExact(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "r.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const each = 100
	size := func(tenant string) int64 { r := gcRec(tenant, "resp_00000", 10); return r.Size() }
	lims := map[string]Limits{
		"count": {MaxCount: 37},
		"bytes": {MaxBytes: 23*size("bytes") + size("bytes")/2}, // room for 23 and a half
		"free":  {},
	}
	want := map[string]int64{"count": 37, "bytes": 23, "free": each}
	var mu sync.Mutex
	stored := map[string][]string{}
	refused := map[string]int64{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for tenant, lim := range lims {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				id := fmt.Sprintf("resp_%05d", i)
				err := s.PutWithin(context.Background(), gcRec(tenant, id, 10), lim)
				var le *LimitError
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					stored[tenant] = append(stored[tenant], id)
				case errors.As(err, &le):
					refused[tenant]++
				default:
					t.Errorf("%s/%s: %v", tenant, id, err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for tenant, n := range want {
		u, err := s.Usage(context.Background(), tenant)
		if err != nil || int64(len(stored[tenant])) != n || refused[tenant] != each-n || u.Count != n || u.Bytes != n*size(tenant) {
			t.Errorf("%s: %d stored, %d refused, usage %+v (%v); want %d stored, %d bytes", tenant, len(stored[tenant]), refused[tenant], u, err, n, n*size(tenant))
		}
		for _, id := range stored[tenant] {
			if _, err := s.Get(context.Background(), tenant, id, time.Now()); err != nil {
				t.Errorf("%s/%s stored but not read: %v", tenant, id, err)
			}
		}
	}
	// Each tenant has a resp_00000 stored only if its Put won; another tenant's is
	// never read through this one.
	if _, err := s.Get(context.Background(), "nobody", "resp_00000", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's response: %v, want ErrNotFound", err)
	}
	if c := s.commits.Load(); c >= 3*each {
		t.Errorf("%d commits for %d concurrent Puts: none was grouped", c, 3*each)
	} else {
		t.Logf("%d Puts in %d commits", 3*each, c)
	}
}

// TestGroupCommitRefusedPutDoesNotAbortGroup: a Put replacing one of the tenant's
// responses with a larger one past the byte limit is refused alone, its old record
// kept, while the Puts grouped with it are stored.
func TestGroupCommitRefusedPutDoesNotAbortGroup(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "r.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	small := gcRec("a", "resp_x", 1)
	lim := Limits{MaxBytes: small.Size() * 40}
	if err := s.PutWithin(ctx, small, lim); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var bigErr error
	errs := make([]error, 30)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.PutWithin(ctx, gcRec("a", "resp_"+strconv.Itoa(i), 1), lim) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); bigErr = s.PutWithin(ctx, gcRec("a", "resp_x", 100*int(small.Size())), lim) }()
	wg.Wait()
	if !errors.Is(bigErr, ErrLimit) {
		t.Errorf("the replacement past the byte limit: %v, want a LimitError", bigErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("resp_%d: %v", i, err)
		}
	}
	got, err := s.Get(ctx, "a", "resp_x", time.Now())
	if err != nil || string(got.Response) != string(small.Response) {
		t.Errorf("resp_x after its refused replacement: %s (%v), want the small one", got.Response, err)
	}
	want := small.Size()
	for i := range errs {
		r := gcRec("a", "resp_"+strconv.Itoa(i), 1)
		want += r.Size()
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 31 || u.Bytes != want {
		t.Errorf("usage %+v, want 31 responses, %d bytes", u, want)
	}
}

// TestPutAfterCloseIsErrClosed: a Put on a closed store fails (it is not left
// waiting for a committer that stopped).
func TestPutAfterCloseIsErrClosed(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "r.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Put(context.Background(), gcRec("a", "resp_1", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v, want ErrClosed", err)
	}
}

// TestAcknowledgedPutSurvivesKill: a child process Puts from 16 goroutines and prints
// each id once its Put returned (what the gateway does before it answers); it is
// killed (SIGKILL) mid-stream. Every id it printed is in the file when it is opened
// again: a Put returns only after its group's journal record is written (and bbolt's
// commit follows; the Puts bbolt had not committed at the kill are applied again
// from the journal at open). (A kill keeps the kernel's page cache; that the record
// reached the disk is the journal's fdatasync, and bbolt's commits keep their fsync:
// the test checks NoSync is off.) It runs with the fdatasync (fsync) and with
// Options.ProcessSync (process).
func TestAcknowledgedPutSurvivesKill(t *testing.T) {
	if path := os.Getenv("RESPSTORE_CRASH_CHILD"); path != "" {
		crashChild(path, os.Getenv("RESPSTORE_CRASH_SYNC"))
		return
	}
	// process: Options.ProcessSync (ledger: {sync: process}), records written to the
	// OS only; a kill keeps them too. ledger-*: ledger mode, each Put carried by a
	// ledger entry's write (fsync: ledger.SyncFsync, process: ledger.SyncProcess).
	// ledger-then-journal: killed in ledger mode, opened again in journal mode (the
	// operator changed ledger.sync from process to fsync after the crash): the ledger
	// hands its side records to the journal-mode store, as lmlite serve opens it.
	// journal-then-ledger: killed in journal mode with its fdatasync (lmlite serve's
	// sync: fsync before it took ledger mode there too), opened again in ledger mode:
	// the journal's records are applied at the open.
	for _, mode := range []string{"fsync", "process", "ledger-fsync", "ledger-process", "ledger-then-journal", "journal-then-ledger"} {
		t.Run(mode, func(t *testing.T) { ackedPutsSurviveKill(t, mode) })
	}
}

func ackedPutsSurviveKill(t *testing.T, mode string) {
	path := filepath.Join(t.TempDir(), "r.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcknowledgedPutSurvivesKill$")
	child := mode
	switch mode {
	case "ledger-then-journal":
		child = "ledger-process"
	case "journal-then-ledger":
		child = "fsync"
	}
	cmd.Env = append(os.Environ(), "RESPSTORE_CRASH_CHILD="+path, "RESPSTORE_CRASH_SYNC="+child)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < 400 {
		if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked = append(acked, id)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if len(acked) < 400 {
		t.Fatalf("the child acknowledged only %d Puts", len(acked))
	}
	var s *Bolt
	if mode == "ledger-then-journal" {
		if s, err = OpenBolt(path, Options{}); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := openTestLedger(filepath.Dir(path), s, ledger.SyncFsync)
		if err != nil {
			t.Fatal(err)
		}
		defer l.close()
	} else if strings.HasPrefix(mode, "ledger-") || mode == "journal-then-ledger" {
		var closeAll func() error
		s, closeAll, err = OpenBoltLedgerForTest(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll()
	} else {
		s, err = OpenBolt(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	if s.db.NoSync {
		t.Fatal("the store opens bbolt with NoSync")
	}
	for _, id := range acked {
		if _, err := s.Get(context.Background(), "a", id, time.Now()); err != nil {
			t.Errorf("%s was acknowledged before the kill, then: %v", id, err)
		}
	}
	t.Logf("%d acknowledged Puts, all read back after SIGKILL (%d of them applied again from the journal or the ledger)", len(acked), s.replayed)
}

func crashChild(path string, mode string) {
	var s *Bolt
	var err error
	var l *testLedger
	if sync, ok := strings.CutPrefix(mode, "ledger-"); ok {
		if s, err = OpenBoltLedger(path, Options{}); err == nil {
			lsync := ledger.SyncFsync
			if sync == "process" {
				lsync = ledger.SyncProcess
			}
			l, err = openTestLedger(filepath.Dir(path), s, lsync)
		}
	} else {
		s, err = OpenBolt(path, Options{ProcessSync: mode == "process"})
	}
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("resp_%d_%d", g, i)
				var err error
				if l != nil { // carried by a settlement's ledger write
					err = s.PutCarried(context.Background(), gcRec("a", id, 200), Limits{}, func(sd ledger.Side) { l.settle(sd) })
				} else {
					err = s.Put(context.Background(), gcRec("a", id, 200))
				}
				if err != nil {
					fmt.Println("put:", err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Fprintln(w, "acked", id)
				w.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestApplierOneTransactionKeepsUsage: Puts of two tenants, interleaved, one of them
// replacing a response committed before and one replacing a Put of the same
// transaction, committed by the applier in one bbolt transaction, leave in bbolt the
// usage they would one by one (each tenant's count and bytes) and the last record
// of each id.
func TestApplierOneTransactionKeepsUsage(t *testing.T) {
	ctx := context.Background()
	s, err := openBolt(filepath.Join(t.TempDir(), "r.db"), Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(r Record) {
		t.Helper()
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	commit := func() {
		t.Helper()
		if err := s.exec(ctx, func() error { return nil }); err != nil { // bbolt commits every acknowledged Put first
			t.Fatal(err)
		}
	}
	put(gcRec("b", "resp_old", 500))
	commit()
	last := map[string]Record{}
	for i, r := range []Record{
		gcRec("a", "resp_1", 10), gcRec("b", "resp_2", 20), gcRec("a", "resp_3", 30),
		gcRec("b", "resp_old", 40), // replaces the committed one
		gcRec("a", "resp_1", 50),   // replaces a Put of this transaction
		gcRec("c", "resp_4", 60), gcRec("a", "resp_5", 70),
	} {
		r.Created = r.Created.Add(time.Duration(i) * time.Millisecond)
		put(r)
		last[r.Tenant+"/"+r.ID] = r
	}
	commits := 0
	s.commitHook = func() { commits++ }
	commit()
	if commits != 1 {
		t.Fatalf("%d bbolt transactions, want the 7 Puts in 1", commits)
	}
	want := map[string]Usage{}
	for _, r := range last {
		u := want[r.Tenant]
		u.Count++
		u.Bytes += r.Size()
		want[r.Tenant] = u
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		for tenant, w := range want {
			if u := getUsage(tx, tenant); u != w {
				t.Errorf("%s's usage in bbolt: %+v, want %+v", tenant, u, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range last {
		got, err := s.Get(ctx, r.Tenant, r.ID, time.Now())
		if err != nil || string(got.Response) != string(r.Response) {
			t.Errorf("%s: %q (%v), want the last Put's %q", k, got.Response, err, r.Response)
		}
	}
}
