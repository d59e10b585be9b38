package tenancy

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/usage"
)

func openStore(t *testing.T, path string, mode SyncMode) *Store {
	t.Helper()
	s, err := Open(path, Options{Sync: mode})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// policy is the quota of a tenant on plan p, resolved as the server does.
func policy(t *testing.T, tenant string, p policies.Plan) *Quota {
	t.Helper()
	pol, err := policies.Resolve(tenant, "test", p, policies.Override{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Quota{Tenant: pol.Tenant, RequestsPerSecond: pol.RequestsPerSecond, Burst: pol.Burst,
		TokensPerMinute: pol.TokensPerMinute, MaxConcurrency: pol.MaxConcurrency,
		DailyBudget: pol.DailyBudget, MonthlyBudget: pol.MonthlyBudget}
}

func TestKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s := openStore(t, path, SyncFsync)
	now := time.Unix(1_700_000_000, 0)
	key, ki, err := s.CreateKey("acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "lml_"+ki.ID+"_") || len(key) != 4+8+1+32 {
		t.Fatalf("key %q", key)
	}
	if ten, id, err := s.Authenticate(key); err != nil || ten != "acme" || id != ki.ID {
		t.Fatalf("Authenticate = %q %q %v", ten, id, err)
	}
	other := "a" // a last character that differs from the key's
	if strings.HasSuffix(key, "a") {
		other = "b"
	}
	bad := []string{"", "lml_", "sk-abc", key[:len(key)-1], key[:len(key)-1] + other, "lml_" + ki.ID + "x" + key[12:],
		strings.Replace(key, ki.ID, "aaaaaaaa", 1)}
	for _, b := range bad {
		if _, _, err := s.Authenticate(b); !errors.Is(err, ErrBadKey) {
			t.Errorf("Authenticate(%q) = %v, want ErrBadKey", b, err)
		}
	}
	key2, _, _ := s.CreateKey("other", now)
	if _, err := s.RevokeKey(ki.ID, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Authenticate(key); !errors.Is(err, ErrBadKey) || !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked key: %v", err)
	}
	if _, err := s.RevokeKey("zzzzzzzz", now); !errors.Is(err, ErrNoKey) {
		t.Errorf("RevokeKey(unknown) = %v", err)
	}
	s.Close()

	// The keys survive a restart; only hashes are on disk.
	s = openStore(t, path, SyncFsync)
	defer s.Close()
	if _, _, err := s.Authenticate(key); !errors.Is(err, ErrRevoked) {
		t.Errorf("after reopen, revoked key: %v", err)
	}
	if ten, _, err := s.Authenticate(key2); err != nil || ten != "other" {
		t.Errorf("after reopen: %q %v", ten, err)
	}
	keys := s.Keys()
	if len(keys) != 2 || keys[0].Tenant != "acme" || keys[0].Revoked.IsZero() || keys[0].Hash != nil {
		t.Errorf("Keys = %+v", keys)
	}
	s.Close()
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), key[13:]) {
		t.Error("a secret is stored in clear")
	}
}

func TestAdmitQuotas(t *testing.T) {
	ten := New(nil)
	now := time.Unix(1_700_000_000, 0)
	pol := policy(t, "a", policies.Plan{RequestsPerSecond: 2, Burst: 2, MaxConcurrency: 3, TokensPerMinute: 600})

	var tickets []*Ticket
	for i := 0; i < 2; i++ {
		tk, err := ten.Admit(pol, now, 10)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		tickets = append(tickets, tk)
	}
	// The burst is spent: the third request waits half a second.
	_, err := ten.Admit(pol, now, 10)
	var le *LimitError
	if !errors.As(err, &le) || le.Reason != "requests" || le.RetryAfter != 500*time.Millisecond || !errors.Is(err, ErrLimited) {
		t.Fatalf("third: %v", err)
	}
	// A rejection consumes nothing: half a second later it passes.
	tk, err := ten.Admit(pol, now.Add(500*time.Millisecond), 10)
	if err != nil {
		t.Fatal(err)
	}
	tickets = append(tickets, tk)
	// Three in flight: the concurrency limit answers.
	if _, err := ten.Admit(pol, now.Add(10*time.Second), 10); !errors.As(err, &le) || le.Reason != "concurrency" {
		t.Fatalf("fourth: %v", err)
	}
	// Settling charges tokens: 600 tokens/min with 590 used leaves 10.
	if _, err := tickets[0].Settle(Entry{Time: now.Add(10 * time.Second), PromptTokens: 90, CompletionTokens: 500}); err != nil {
		t.Fatal(err)
	}
	at := now.Add(10 * time.Second)
	if _, err := ten.Admit(pol, at, 50); !errors.As(err, &le) || le.Reason != "tokens" || le.RetryAfter != 4*time.Second {
		t.Fatalf("tokens: %v", err)
	}
	if _, err := ten.Admit(pol, at.Add(4*time.Second), 50); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
	if RetryAfterSeconds(500*time.Millisecond) != 1 || RetryAfterSeconds(2100*time.Millisecond) != 3 {
		t.Error("RetryAfterSeconds")
	}
}

func TestBudgetReserveSettle(t *testing.T) {
	ten := New(nil)
	now := time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)
	pol := policy(t, "a", policies.Plan{DailyBudgetUSD: 1, MonthlyBudgetUSD: 1.5})
	tk, _ := ten.Admit(pol, now, 0)
	if r := tk.Remaining(now); r != money.USD(1) {
		t.Fatalf("Remaining = %v", r)
	}
	if err := tk.Reserve(now, money.USD(0.8)); err != nil {
		t.Fatal(err)
	}
	tk2, _ := ten.Admit(pol, now, 0)
	if err := tk2.Reserve(now, money.USD(0.3)); !errors.Is(err, ErrInsufficientQuota) {
		t.Fatalf("over the daily ceiling: %v", err)
	}
	// Actual cost above the reservation is capped at it.
	if c, _ := tk.Settle(Entry{Time: now, Cost: money.USD(5)}); c != money.USD(0.8) {
		t.Fatalf("charged %v", c)
	}
	if r := tk2.Remaining(now); r != money.USD(0.2) {
		t.Fatalf("Remaining = %v", r)
	}
	// The next day the daily budget is fresh; the month still counts.
	next := now.Add(2 * time.Minute)
	if r := tk2.Remaining(next); r != money.USD(0.7) { // 1.5 - 0.8 left this month
		t.Fatalf("next day Remaining = %v, want $0.7", r)
	}
	if r := tk2.Remaining(next.Add(24 * time.Hour)); r != money.USD(1) { // December
		t.Fatalf("next month Remaining = %v, want $1", r)
	}
}

func TestBudgetConcurrent(t *testing.T) {
	// 200 goroutines race to spend a budget that covers 50 of them.
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s := openStore(t, path, SyncProcess)
	defer s.Close()
	ten := New(s)
	now := time.Now()
	pol := policy(t, "race", policies.Plan{DailyBudgetUSD: 0.05})
	worst, actual := money.USD(0.001), money.USD(0.0007)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, refused := 0, 0
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := ten.Admit(pol, now, 10)
			if err != nil {
				t.Error(err)
				return
			}
			if err := tk.Reserve(now, worst); err != nil {
				if !errors.Is(err, ErrInsufficientQuota) {
					t.Error(err)
				}
				tk.Settle(Entry{Time: now, Status: 429})
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			if _, err := tk.Settle(Entry{Time: now, Cost: actual, Status: 200}); err != nil {
				t.Error(err)
			}
			mu.Lock()
			ran++
			mu.Unlock()
		}()
	}
	wg.Wait()
	day, _, err := s.Spent("race", now)
	if err != nil {
		t.Fatal(err)
	}
	if day > money.USD(0.05) || ran+refused != 200 || ran < 50 {
		t.Fatalf("spent %v of $0.05, ran %d, refused %d", day, ran, refused)
	}
	if day != money.Money(ran)*actual {
		t.Errorf("spent %v, want %d × %v", day, ran, actual)
	}
	t.Logf("ran %d, refused %d, spent %v, %d commits", ran, refused, day, s.Commits())
}

func TestSpendSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s := openStore(t, path, SyncFsync)
	now := time.Now()
	pol := policy(t, "a", policies.Plan{DailyBudgetUSD: 1})
	tk, _ := New(s).Admit(pol, now, 0)
	tk.Reserve(now, money.USD(0.6))
	tk.Settle(Entry{Time: now, RequestID: "r1", Cost: money.USD(0.6), Status: 200})
	s.Close()
	s = openStore(t, path, SyncFsync)
	defer s.Close()
	tk, _ = New(s).Admit(pol, now, 0)
	if r := tk.Remaining(now); r != money.USD(0.4) {
		t.Errorf("after restart Remaining = %v, want $0.4", r)
	}
	var ids []string
	s.Ledger(func(e Entry) error { ids = append(ids, e.RequestID); return nil })
	if len(ids) != 1 || ids[0] != "r1" {
		t.Errorf("ledger = %v", ids)
	}
	if _, err := Open(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open = %v, want ErrLocked", err)
	}
}

// TestLedgerSurvivesKill runs a child process that settles requests from several
// goroutines and prints each request id once Settle returned (the moment the gateway
// acknowledges a response); the parent kills it with SIGKILL mid-stream and checks
// that every acknowledged entry is in the ledger and in the spend totals.
func TestLedgerSurvivesKill(t *testing.T) {
	if os.Getenv("LMLITE_LEDGER_CHILD") != "" {
		t.Skip("in the child")
	}
	for _, mode := range []string{"fsync", "process"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lmlite.db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "LMLITE_LEDGER_CHILD="+path, "LMLITE_LEDGER_MODE="+mode)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			acked := map[string]bool{}
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				id, ok := strings.CutPrefix(sc.Text(), "ack ")
				if !ok {
					continue
				}
				acked[id] = true
				if len(acked) == 300 {
					cmd.Process.Signal(syscall.SIGKILL)
				}
			}
			cmd.Wait()
			if len(acked) < 300 {
				t.Fatalf("child acknowledged only %d entries", len(acked))
			}
			s := openStore(t, path, SyncFsync)
			defer s.Close()
			found := map[string]bool{}
			var sum money.Money
			s.Ledger(func(e Entry) error { found[e.RequestID] = true; sum += e.Cost; return nil })
			for id := range acked {
				if !found[id] {
					t.Errorf("acknowledged entry %s lost", id)
				}
			}
			day, _, _ := s.Spent("kill", time.Now())
			if day != sum {
				t.Errorf("spend total %v, ledger sum %v", day, sum)
			}
			// The rollups were written in the ledger's transactions: after the kill
			// they hold exactly the entries the ledger holds.
			if n, cost := rollupTotals(t, s); n != int64(len(found)) || cost != sum {
				t.Errorf("rollups %d requests %v, ledger %d entries %v", n, cost, len(found), sum)
			}
			t.Logf("%s: %d acknowledged, %d in the ledger", mode, len(acked), len(found))
		})
	}
}

func TestLedgerChild(t *testing.T) {
	path := os.Getenv("LMLITE_LEDGER_CHILD")
	if path == "" {
		t.Skip("only as the child of TestLedgerSurvivesKill")
	}
	mode := SyncFsync
	if os.Getenv("LMLITE_LEDGER_MODE") == "process" {
		mode = SyncProcess
	}
	// Small batches: the log switches segments and applies many times before the kill.
	s, err := Open(path, Options{Sync: mode, ApplyEntries: 64})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	ten := New(s)
	pol := policy(t, "kill", policies.Plan{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				now := time.Now()
				tk, err := ten.Admit(pol, now, 1)
				if err != nil {
					os.Exit(1)
				}
				id := "g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				tk.Reserve(now, 1000)
				if _, err := tk.Settle(Entry{Time: now, RequestID: id, Cost: 1000, Status: 200}); err != nil {
					os.Exit(1)
				}
				mu.Lock()
				os.Stdout.WriteString("ack " + id + "\n")
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestAppendEntry: the hand-written encoding decodes to the entry, and is
// encoding/json's byte for byte but for its HTML escapes (<, >, &).
func TestAppendEntry(t *testing.T) {
	for _, e := range []Entry{
		{},
		{Seq: 1, Time: time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC), RequestID: "req_1", Tenant: "acme", Status: 200},
		{Seq: 1 << 60, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), RequestID: "a\"b\\c\n\x01<&>\u2028é",
			Tenant: "t", KeyID: "k", Model: "m", Adapter: "ft:m:t:x", Tier: "fast", Status: 429, Finish: "length", PromptTokens: 7, CompletionTokens: 9,
			Cost: -3, Latency: 1234567, TTFT: 89, CachedTokens: 5, ColdStart: 250 * time.Millisecond, GrammarTime: 31 * time.Millisecond},
		{Seq: 2, RequestID: "batch_1-0", ClientRequestID: "c<1>", Tenant: "t", Line: "batch_1-0", Status: 200, Hold: 7},
		{Seq: 3, RequestID: "req_2", Tenant: "t", Status: 200, User: "0f1e2d3c4b5a69788796a5b4c3d2e1f0", SafetyIdentifier: "00112233445566778899aabbccddeeff"},
	} {
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		got := appendEntry(nil, &e)
		var back Entry
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		again, _ := json.Marshal(&back)
		html := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")
		if string(again) != string(want) || string(got) != html.Replace(string(want)) {
			t.Errorf("appendEntry:\n got %s\nwant %s", got, want)
		}
	}
}

// TestLedgerChunks: a large batch is stored as several values of about chunkBytes,
// and lists back whole and in order.
func TestLedgerChunks(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
	defer s.Close()
	pad := strings.Repeat("x", 200)
	for i := 0; i < 500; i++ {
		if err := s.Record(Entry{Time: time.Now(), RequestID: strconv.Itoa(i) + pad, Tenant: "a", Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	if err := s.Ledger(func(e Entry) error { ids = append(ids, strings.TrimSuffix(e.RequestID, pad)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 500 || ids[0] != "0" || ids[499] != "499" {
		t.Fatalf("%d entries, %v … %v", len(ids), ids[:1], ids[len(ids)-1:])
	}
	values, biggest := 0, 0
	s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedger).ForEach(func(_, v []byte) error {
			values++
			biggest = max(biggest, len(v))
			return nil
		})
	})
	if values < 500*200/chunkBytes || biggest > 2*chunkBytes {
		t.Errorf("%d values, the biggest %d bytes", values, biggest)
	}
	if day, _, _ := s.Spent("a", time.Now()); day != 500 {
		t.Errorf("spent %v", day)
	}
}

// TestLedgerOldValues: a database written one entry per value (before batches) still
// lists, beside batches.
func TestLedgerOldValues(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
	defer s.Close()
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedger).Put([]byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte(`{"seq":1,"time":"2026-11-22T12:00:00Z","request_id":"old","tenant":"a","status":200,"prompt_tokens":0,"completion_tokens":0,"cost_nano_usd":0,"latency_ns":0}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.seq = 1
	s.Record(Entry{Time: time.Now(), RequestID: "new", Tenant: "a"})
	var ids []string
	if err := s.Ledger(func(e Entry) error { ids = append(ids, e.RequestID); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != "old,new" {
		t.Errorf("ledger %v", ids)
	}
}

// TestLedgerReplay opens a copy of a store's files taken while it ran (as a killed
// process leaves them): every logged entry comes back once, from every segment and the
// single log file of earlier versions, a torn record ends its segment only, and the
// segments are gone after the replay.
func TestLedgerReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lmlite.db")
	s, err := Open(path, Options{Sync: SyncProcess, ApplyEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 10; i++ {
		if err := s.Record(Entry{Time: now, RequestID: "r" + strconv.Itoa(i), Tenant: "a", Cost: 10, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	// The "killed" copy: the database (nothing applied yet), the segment with a torn
	// record after the ten entries, and a log in the old single-file form.
	copyDir := t.TempDir()
	cp := filepath.Join(copyDir, "lmlite.db")
	segs, _ := ledger.Segments(s.path)
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	db, _ := os.ReadFile(path)
	seg, _ := os.ReadFile(segs[0].Path)
	os.WriteFile(cp, db, 0o600)
	os.WriteFile(filepath.Join(copyDir, filepath.Base(segs[0].Path)), append(seg, 0, 0, 0, 40, 1, 2, 3, 4, '['), 0o600)
	legacy := []byte(`[{"seq":11,"time":"2026-11-22T12:00:00Z","request_id":"old","tenant":"a","status":200,"prompt_tokens":0,"completion_tokens":0,"cost_nano_usd":5,"latency_ns":0}]`)
	rec := binary.BigEndian.AppendUint32(nil, uint32(len(legacy)))
	rec = binary.BigEndian.AppendUint32(rec, crc32.ChecksumIEEE(legacy))
	os.WriteFile(cp+".wal", append(rec, legacy...), 0o600)

	r, err := Open(cp, Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	r.Ledger(func(e Entry) error { ids = append(ids, e.RequestID); return nil })
	if len(ids) != 11 || ids[0] != "r0" || ids[9] != "r9" || ids[10] != "old" {
		t.Errorf("replayed ledger %v", ids)
	}
	if day, _, _ := r.Spent("a", now); day != 105 {
		t.Errorf("spent %v, want 105", day)
	}
	if n, cost := rollupTotals(t, r); n != 11 || cost != 105 {
		t.Errorf("rollups after the replay: %d requests %v, want 11 and 105", n, cost)
	}
	// New entries continue the sequence.
	if err := r.Record(Entry{Time: now, RequestID: "new", Tenant: "a", Status: 200}); err != nil {
		t.Fatal(err)
	}
	var last Entry
	r.Ledger(func(e Entry) error { last = e; return nil })
	if last.RequestID != "new" || last.Seq != 12 {
		t.Errorf("last entry %+v", last)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(cp + ".wal*"); len(left) != 0 {
		t.Errorf("log files left after Close: %v", left)
	}
}

// FuzzAuthenticate: arbitrary Authorization values never panic and never authenticate.
func FuzzAuthenticate(f *testing.F) {
	s, err := Open(filepath.Join(f.TempDir(), "lmlite.db"), Options{Sync: SyncProcess})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	key, _, _ := s.CreateKey("t", time.Now())
	f.Add(key[:len(key)-1] + "a")
	f.Add("lml_abcdefgh_" + strings.Repeat("a", 32))
	f.Add("lml__")
	f.Fuzz(func(t *testing.T, k string) {
		if ten, _, err := s.Authenticate(k); err == nil && k != key {
			t.Fatalf("%q authenticated as %q", k, ten)
		}
	})
}

// rollupTotals is what the store's usage rollups (loaded as a server loads them) hold
// over every day: requests and money.
func rollupTotals(t *testing.T, s *Store) (int64, money.Money) {
	t.Helper()
	m := usage.NewMemory()
	if _, err := s.LoadRollups(m, time.Now()); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	bs, err := m.Query(usage.Query{Start: from, End: time.Now().AddDate(1, 0, 0), Width: usage.Day})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var cost money.Money
	for _, b := range bs {
		for _, r := range b.Results {
			n += r.Requests
			cost += r.Cost
		}
	}
	return n, cost
}

// A store written before the rollups were kept in it gets them, once, from its
// ledger when it is opened; later entries add to them.
func TestRollupsMigratedFromAnOlderStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s := openStore(t, path, SyncProcess)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		if err := s.Record(Entry{Time: now, RequestID: strconv.Itoa(i), Tenant: "a", Model: "m", Cost: 7, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(usage.BoltBucket) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = openStore(t, path, SyncProcess)
	defer s.Close()
	if n, cost := rollupTotals(t, s); n != 5 || cost != 35 {
		t.Errorf("migrated rollups: %d requests %v, want 5 and 35", n, cost)
	}
	if err := s.Record(Entry{Time: now, RequestID: "5", Tenant: "a", Model: "m", Cost: 7, Status: 200}); err != nil {
		t.Fatal(err)
	}
	if n, cost := rollupTotals(t, s); n != 6 || cost != 42 {
		t.Errorf("after one more entry: %d requests %v, want 6 and 42", n, cost)
	}
}

// TestTicketChecksTokensPerMinute: a request admitted before its body was read (its
// slot and requests/s token taken, no estimate) has its prompt's estimate checked on
// its ticket afterwards, taking nothing; a refusal settled frees the slot, and the
// requests/s token stays spent.
func TestTicketChecksTokensPerMinute(t *testing.T) {
	ten := New(nil)
	q := &Quota{Tenant: "t", TokensPerMinute: 600, RequestsPerSecond: 1, Burst: 2, MaxConcurrency: 1}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tk, err := ten.Admit(q, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(Entry{Time: now, PromptTokens: 100, CompletionTokens: 495}) // 595 of 600 used
	tk, err = ten.Admit(q, now, 0)
	if err != nil {
		t.Fatalf("refused before its body: %v", err)
	}
	var le *LimitError
	if err := tk.CheckTokens(now, 10); !errors.As(err, &le) || le.Reason != "tokens" || le.RetryAfter <= 0 {
		t.Fatalf("a 10-token prompt with 5 tokens left: %v", err)
	}
	for range 2 {
		if err := tk.CheckTokens(now, 5); err != nil {
			t.Fatalf("a 5-token prompt with 5 left: %v", err)
		}
	}
	tk.Settle(Entry{Time: now, Status: 429})
	if n := ten.InFlight("t"); n != 0 {
		t.Fatalf("%d in flight after the refusal settled", n)
	}
	if _, err := ten.Admit(q, now, 0); !errors.As(err, &le) || le.Reason != "requests" {
		t.Fatalf("the burst of 2 was spent by two admissions; a third: %v", err)
	}
}

// TestHoldsAppendHoldIsEncodingJSON: a hold's hand-written encoding is encoding/json's
// byte for byte, escapes (quotes, controls, HTML, U+2028, invalid UTF-8) and
// omitempty fields included.
func TestHoldsAppendHoldIsEncodingJSON(t *testing.T) {
	for _, h := range []Hold{
		{},
		{Seq: 1, Time: time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC), RequestID: "req_1", Tenant: "acme", PromptTokens: 12, Reserved: 3400},
		{Seq: 1 << 60, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), RequestID: "a\"b\\c\n\x01\b\f\x7f<&>\u2028é\xff",
			ClientRequestID: "c<1>", Tenant: "t&u", KeyID: "k", Model: "m", Tier: "fast", PromptTokens: -7, Reserved: -3, Ticket: "tk:1"},
		{Seq: 2, Time: time.Date(1, 1, 1, 0, 0, 0, 1, time.FixedZone("y", -5*3600-30*60)), RequestID: "batch_1-0", Tenant: "t", Model: "ft:m:t:x"},
	} {
		want, err := json.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendHold(nil, &h); string(got) != string(want) {
			t.Errorf("appendHold:\n got %s\nwant %s", got, want)
		}
	}
}

// TestHoldsAppendHoldAllocs: a hold of plain ids is encoded into the group's buffer
// without allocating (encoding/json took one per request).
func TestHoldsAppendHoldAllocs(t *testing.T) {
	h := Hold{Seq: 9, Time: time.Now(), RequestID: "chatcmpl-0123456789abcdef", Tenant: "acme", KeyID: "key_1", Model: "m", Tier: "fast", PromptTokens: 99, Reserved: 12345}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = appendHold(buf[:0], &h) }); n != 0 {
		t.Errorf("appendHold: %v allocations, want 0", n)
	}
}
