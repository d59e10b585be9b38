package respstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
)

// env is one store's backing data (a bbolt file, or a key prefix in a Redis), which
// open opens as a process starting would: a second open is a restart (bbolt: the
// first is closed) or another process (Redis: another client).
type env struct {
	t    *testing.T
	open func(o respstore.Options) respstore.Store
}

// backends run every case of the suite against each implementation.
var backends = []struct {
	name  string
	setup func(t *testing.T) func(t *testing.T) *env // per backend, then per case
}{
	{"bolt", func(*testing.T) func(t *testing.T) *env {
		return func(t *testing.T) *env {
			path := filepath.Join(t.TempDir(), "responses.db")
			var open *respstore.Bolt
			t.Cleanup(func() {
				if open != nil {
					open.Close()
				}
			})
			return &env{t: t, open: func(o respstore.Options) respstore.Store {
				if open != nil {
					if err := open.Close(); err != nil {
						t.Fatal(err)
					}
				}
				s, err := respstore.OpenBolt(path, o)
				if err != nil {
					t.Fatal(err)
				}
				open = s
				return s
			}}
		}
	}},
	{"bolt-ledger", func(*testing.T) func(t *testing.T) *env { // ledger mode: the Puts are side records of a ledger's writes
		return func(t *testing.T) *env {
			path := filepath.Join(t.TempDir(), "responses.db")
			var closeOpen func() error
			t.Cleanup(func() {
				if closeOpen != nil {
					closeOpen()
				}
			})
			return &env{t: t, open: func(o respstore.Options) respstore.Store {
				if closeOpen != nil {
					if err := closeOpen(); err != nil {
						t.Fatal(err)
					}
				}
				s, c, err := respstore.OpenBoltLedgerForTest(path, o)
				if err != nil {
					t.Fatal(err)
				}
				closeOpen = c
				return s
			}}
		}
	}},
	{"redis", func(t *testing.T) func(t *testing.T) *env {
		srv := redistest.Start(t, redistest.Options{})
		n := 0
		return func(t *testing.T) *env {
			n++
			prefix := "test" + strconv.Itoa(n) + ":" // each case its own keys
			return &env{t: t, open: func(o respstore.Options) respstore.Store {
				c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "respstore-test"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return respstore.NewRedis(c, prefix, o)
			}}
		}
	}},
}

// suite is the table of cases every Store must pass.
var suite = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"PutGetRoundTrip", testRoundTrip},
	{"OtherTenantIsNotFound", testTenantIsolation},
	{"NotFoundIsIndistinguishable", testNotFoundIndistinguishable},
	{"ExpiryOnRead", testExpiry},
	{"SweepRemovesExpired", testSweep},
	{"SweepTenantRemovesOnlyTheTenants", testSweepTenant},
	{"InputItemsPages", testPagination},
	{"ConversationFollowsChain", testConversation},
	{"ConversationBoundedInDepth", testChainDepth},
	{"ConversationBoundedInBytes", testChainBytes},
	{"ConversationCycleBounded", testChainCycle},
	{"LimitsRefusePut", testLimits},
	{"ConcurrentPutsNeverPassTheLimit", testConcurrentLimit},
	{"UsageCounts", testUsage},
	{"ReopenKeepsEverything", testRestart},
	{"ConcurrentPutGet", testConcurrent},
	{"InvalidRecordRefused", testInvalid},
}

func TestStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			newEnv := b.setup(t)
			for _, c := range suite {
				t.Run(c.name, func(t *testing.T) { c.run(t, newEnv(t)) })
			}
		})
	}
}

var ctx = context.Background()

// t0 is now, to the millisecond: Redis expires keys by its own clock.
var t0 = time.Now().Truncate(time.Millisecond)

// rec is a response of tenant made at t0 with n input and one output item.
func rec(tenant, id, prev string, n int) respstore.Record {
	r := respstore.Record{Tenant: tenant, ID: id, Created: t0, Model: "m1", Previous: prev,
		Response: []byte(`{"id":"` + id + `","object":"response"}`)}
	for i := range n {
		iid := fmt.Sprintf("msg_%s_%d", id, i)
		r.Input = append(r.Input, respstore.Item{ID: iid, JSON: []byte(`{"id":"` + iid + `","type":"message"}`)})
	}
	oid := "msg_" + id + "_out"
	r.Output = []respstore.Item{{ID: oid, JSON: []byte(`{"id":"` + oid + `","type":"message","role":"assistant"}`)}}
	return r
}

func put(t *testing.T, s respstore.Store, r respstore.Record) {
	t.Helper()
	if err := s.Put(ctx, r); err != nil {
		t.Fatalf("Put %s/%s: %v", r.Tenant, r.ID, err)
	}
}

func ids(items []respstore.Item) []string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = items[i].ID
	}
	return out
}

func testRoundTrip(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	want := rec("a", "resp_1", "", 3)
	want.Response = []byte("{\n  \"id\": \"resp_1\"\n}") // kept byte for byte, whitespace too
	put(t, s, want)
	got, err := s.Get(ctx, "a", "resp_1", t0)
	if err != nil {
		t.Fatal(err)
	}
	want.Expires = t0.Add(respstore.DefaultRetention)
	if !got.Created.Equal(want.Created) || !got.Expires.Equal(want.Expires) {
		t.Fatalf("times %v %v, want %v %v", got.Created, got.Expires, want.Created, want.Expires)
	}
	got.Created, got.Expires, want.Created, want.Expires = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func testTenantIsolation(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	put(t, s, rec("a", "resp_1", "", 2))
	if _, err := s.Get(ctx, "b", "resp_1", t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("Get of another tenant's: %v", err)
	}
	if _, _, err := s.InputItems(ctx, "b", "resp_1", respstore.Page{}, t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("InputItems of another tenant's: %v", err)
	}
	if _, err := s.Conversation(ctx, "b", "resp_1", t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("Conversation of another tenant's: %v", err)
	}
	if err := s.Delete(ctx, "b", "resp_1", t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("Delete of another tenant's: %v", err)
	}
	// b continuing a's response is refused too: its chain is looked up as b's.
	put(t, s, rec("b", "resp_2", "resp_1", 1))
	if _, err := s.Conversation(ctx, "b", "resp_2", t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("Conversation through another tenant's: %v", err)
	}
	if _, err := s.Get(ctx, "a", "resp_1", t0); err != nil {
		t.Errorf("the owner's Get after another tenant's Delete: %v", err)
	}
	if u, _ := s.Usage(ctx, "b"); u.Count != 1 {
		t.Errorf("b's usage %+v counts a's response", u)
	}
}

func testNotFoundIndistinguishable(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	put(t, s, rec("a", "resp_other", "", 1))
	exp := rec("b", "resp_expired", "", 1)
	exp.Expires = t0.Add(time.Hour)
	put(t, s, exp)
	put(t, s, rec("b", "resp_deleted", "", 1))
	if err := s.Delete(ctx, "b", "resp_deleted", t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(2 * time.Hour)
	var msgs []string
	for _, id := range []string{"resp_missing", "resp_other", "resp_expired", "resp_deleted", "bad/id", ""} {
		_, err := s.Get(ctx, "b", id, now)
		if !errors.Is(err, respstore.ErrNotFound) {
			t.Fatalf("Get %q: %v", id, err)
		}
		msgs = append(msgs, err.Error())
		if err := s.Delete(ctx, "b", id, now); err == nil || err.Error() != msgs[0] {
			t.Errorf("Delete %q: %v, want %q", id, err, msgs[0])
		}
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("errors differ: %q and %q", msgs[0], m)
		}
	}
}

func testExpiry(t *testing.T, e *env) {
	s := e.open(respstore.Options{Retention: 48 * time.Hour})
	put(t, s, rec("a", "resp_ret", "", 1))
	short := rec("a", "resp_short", "", 1)
	short.Expires = t0.Add(time.Hour) // its own expiry beats the retention
	put(t, s, short)
	for _, c := range []struct {
		id   string
		at   time.Duration
		live bool
	}{
		{"resp_ret", 48*time.Hour - time.Millisecond, true},
		{"resp_ret", 48 * time.Hour, false},
		{"resp_short", time.Hour - time.Millisecond, true},
		{"resp_short", time.Hour, false},
	} {
		_, err := s.Get(ctx, "a", c.id, t0.Add(c.at))
		_, _, ierr := s.InputItems(ctx, "a", c.id, respstore.Page{}, t0.Add(c.at))
		_, cerr := s.Conversation(ctx, "a", c.id, t0.Add(c.at))
		for _, err := range []error{err, ierr, cerr} {
			if c.live && err != nil || !c.live && !errors.Is(err, respstore.ErrNotFound) {
				t.Errorf("%s at +%v: %v (live %v)", c.id, c.at, err, c.live)
			}
		}
	}
	// The default retention is 30 days.
	d := e.open(respstore.Options{})
	put(t, d, rec("a", "resp_default", "", 1))
	if _, err := d.Get(ctx, "a", "resp_default", t0.Add(30*24*time.Hour-time.Second)); err != nil {
		t.Errorf("default retention, a second before 30 days: %v", err)
	}
	if _, err := d.Get(ctx, "a", "resp_default", t0.Add(30*24*time.Hour)); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("default retention, at 30 days: %v", err)
	}
}

func testSweep(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	for i := range 5 {
		r := rec("a", "resp_"+strconv.Itoa(i), "", 1)
		r.Expires = t0.Add(time.Duration(i+1) * time.Hour)
		put(t, s, r)
	}
	keep := rec("b", "resp_b", "", 1)
	put(t, s, keep)
	n, err := s.Sweep(ctx, t0.Add(3*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("Sweep removed %d (%v), want 3", n, err)
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 2 {
		t.Errorf("a's usage after the sweep: %+v, want 2", u)
	}
	if n, err := s.Sweep(ctx, t0.Add(3*time.Hour)); n != 0 || err != nil {
		t.Errorf("a second Sweep removed %d (%v)", n, err)
	}
	// Swept means gone, even read at a time before its expiry.
	if _, err := s.Get(ctx, "a", "resp_0", t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("swept resp_0: %v", err)
	}
	if _, err := s.Get(ctx, "a", "resp_4", t0); err != nil {
		t.Errorf("unexpired resp_4: %v", err)
	}
	if _, err := s.Get(ctx, "b", "resp_b", t0); err != nil {
		t.Errorf("b's: %v", err)
	}
	if n, _ := s.Sweep(ctx, t0.Add(31*24*time.Hour)); n != 3 {
		t.Errorf("the last Sweep removed %d, want 3", n)
	}
	for _, tenant := range []string{"a", "b"} {
		if u, _ := s.Usage(ctx, tenant); u != (respstore.Usage{}) {
			t.Errorf("%s's usage after everything expired: %+v", tenant, u)
		}
	}
}

func testSweepTenant(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	for _, tenant := range []string{"a", "b"} {
		for i := range 3 {
			r := rec(tenant, "resp_"+strconv.Itoa(i), "", 1)
			r.Expires = t0.Add(time.Duration(i+1) * time.Hour)
			put(t, s, r)
		}
	}
	if n, err := s.SweepTenant(ctx, "a", t0); n != 0 || err != nil {
		t.Fatalf("nothing expired yet: removed %d (%v)", n, err)
	}
	if n, err := s.SweepTenant(ctx, "a", t0.Add(2*time.Hour)); n != 2 || err != nil {
		t.Fatalf("SweepTenant removed %d (%v), want 2", n, err)
	}
	left := rec("a", "resp_2", "", 1)
	if u, _ := s.Usage(ctx, "a"); u.Count != 1 || u.Bytes != left.Size() {
		t.Errorf("a's usage after its sweep: %+v", u)
	}
	if u, _ := s.Usage(ctx, "b"); u.Count != 3 {
		t.Errorf("b's usage after a's sweep: %+v, want 3 (not b's to sweep)", u)
	}
	for _, tenant := range []string{"nobody", "bad/tenant", ""} {
		if n, err := s.SweepTenant(ctx, tenant, t0.Add(time.Hour)); n != 0 || err != nil {
			t.Errorf("SweepTenant %q: %d %v", tenant, n, err)
		}
	}
}

func testPagination(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	r := rec("a", "resp_1", "", 45)
	put(t, s, r)
	all := ids(r.Input)
	rev := make([]string, len(all))
	for i := range all {
		rev[i] = all[len(all)-1-i]
	}
	walk := func(p respstore.Page) (got []string, pages []int) {
		t.Helper()
		for range 10 {
			items, more, err := s.InputItems(ctx, "a", "resp_1", p, t0)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(items)...)
			pages = append(pages, len(items))
			if !more {
				return
			}
			p.After = items[len(items)-1].ID
		}
		t.Fatal("more than 10 pages")
		return
	}
	for _, c := range []struct {
		p     respstore.Page
		want  []string
		pages []int
	}{
		{respstore.Page{}, rev, []int{20, 20, 5}}, // default: 20, newest first
		{respstore.Page{Order: respstore.Asc}, all, []int{20, 20, 5}},
		{respstore.Page{Order: respstore.Desc, Limit: 100}, rev, []int{45}},
		{respstore.Page{Order: respstore.Asc, Limit: 45}, all, []int{45}},
		{respstore.Page{Order: respstore.Asc, Limit: 1, After: all[43]}, all[44:], []int{1}},
		{respstore.Page{Order: respstore.Asc, After: all[44]}, nil, []int{0}},
		{respstore.Page{Order: respstore.Desc, Limit: 7, After: rev[10]}, rev[11:], []int{7, 7, 7, 7, 6}},
	} {
		got, pages := walk(c.p)
		if !reflect.DeepEqual(got, c.want) && !(len(got) == 0 && len(c.want) == 0) || !reflect.DeepEqual(pages, c.pages) {
			t.Errorf("%+v: pages %v of %v, want %v of %v", c.p, pages, got, c.pages, c.want)
		}
	}
	for _, p := range []respstore.Page{{Limit: 101}, {Limit: -1}, {Order: "up"}, {After: "msg_nope"}} {
		if _, _, err := s.InputItems(ctx, "a", "resp_1", p, t0); !errors.Is(err, respstore.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", p, err)
		}
	}
}

func testConversation(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	r1, r2, r3 := rec("a", "resp_1", "", 2), rec("a", "resp_2", "resp_1", 1), rec("a", "resp_3", "resp_2", 3)
	for _, r := range []respstore.Record{r1, r2, r3} {
		put(t, s, r)
	}
	var want []string
	for _, r := range []respstore.Record{r1, r2, r3} {
		want = append(append(want, ids(r.Input)...), ids(r.Output)...)
	}
	got, err := s.Conversation(ctx, "a", "resp_3", t0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("conversation %v, want %v", ids(got), want)
	}
	if string(got[0].JSON) != string(r1.Input[0].JSON) {
		t.Errorf("first item %s, want %s", got[0].JSON, r1.Input[0].JSON)
	}
	// The chain is broken when a response in it is deleted.
	if err := s.Delete(ctx, "a", "resp_2", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Conversation(ctx, "a", "resp_3", t0); !errors.Is(err, respstore.ErrNotFound) {
		t.Errorf("a broken chain: %v", err)
	}
	if got, err := s.Conversation(ctx, "a", "resp_1", t0); err != nil || len(got) != 3 {
		t.Errorf("the chain's first alone: %v %v", ids(got), err)
	}
}

// chain stores n responses, each continuing the one before, and returns the last's id.
func chain(t *testing.T, s respstore.Store, n int) string {
	prev := ""
	for i := range n {
		id := "resp_" + strconv.Itoa(i)
		put(t, s, rec("a", id, prev, 1))
		prev = id
	}
	return prev
}

func testChainDepth(t *testing.T, e *env) {
	s := e.open(respstore.Options{MaxDepth: 10})
	last := chain(t, s, 10)
	if got, err := s.Conversation(ctx, "a", last, t0); err != nil || len(got) != 20 {
		t.Fatalf("10 responses, at the bound: %d items, %v", len(got), err)
	}
	put(t, s, rec("a", "resp_10", last, 1))
	_, err := s.Conversation(ctx, "a", "resp_10", t0)
	var ce *respstore.ConversationError
	if !errors.As(err, &ce) || ce.Limit != "depth" || ce.Max != 10 || !errors.Is(err, respstore.ErrConversationTooLong) {
		t.Fatalf("11 responses: %v, want the depth's ConversationError", err)
	}
}

func testChainBytes(t *testing.T, e *env) {
	r := rec("a", "resp_0", "", 1)
	per := int64(len(r.Input[0].JSON) + len(r.Output[0].JSON)) // each response's items' bytes (resp_0 to resp_5 alike)
	s := e.open(respstore.Options{MaxConversationBytes: 5 * per})
	last := chain(t, s, 5)
	if _, err := s.Conversation(ctx, "a", last, t0); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	put(t, s, rec("a", "resp_5", last, 1))
	_, err := s.Conversation(ctx, "a", "resp_5", t0)
	var ce *respstore.ConversationError
	if !errors.As(err, &ce) || ce.Limit != "bytes" {
		t.Fatalf("past the bound: %v, want the bytes' ConversationError", err)
	}
}

func testChainCycle(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	put(t, s, rec("a", "resp_x", "resp_y", 1)) // a previous_response_id need not exist when stored
	put(t, s, rec("a", "resp_y", "resp_x", 1))
	if _, err := s.Conversation(ctx, "a", "resp_x", t0); !errors.Is(err, respstore.ErrConversationTooLong) {
		t.Fatalf("a cycle: %v, want ErrConversationTooLong", err)
	}
}

func testLimits(t *testing.T, e *env) {
	size := func(r respstore.Record) int64 { return r.Size() }
	s := e.open(respstore.Options{
		Limits: respstore.Limits{MaxCount: 2},
		LimitsOf: func(tenant string) respstore.Limits {
			if tenant == "bytes" {
				return respstore.Limits{MaxBytes: 2*size(rec("bytes", "resp_0", "", 1)) + 1}
			}
			return respstore.Limits{MaxCount: 2}
		},
	})
	short := rec("a", "resp_0", "", 1)
	short.Expires = t0.Add(time.Hour)
	put(t, s, short)
	put(t, s, rec("a", "resp_1", "", 1))
	err := s.Put(ctx, rec("a", "resp_2", "", 1))
	var le *respstore.LimitError
	if !errors.As(err, &le) || le.Limit != "responses_max_count" || le.Max != 2 || !errors.Is(err, respstore.ErrLimit) {
		t.Fatalf("a third response: %v", err)
	}
	put(t, s, rec("a", "resp_1", "", 3)) // replacing one at the limit
	put(t, s, rec("b", "resp_2", "", 1)) // another tenant's own count
	// A Put made after resp_0 expired removes it first.
	later := rec("a", "resp_2", "", 1)
	later.Created = t0.Add(time.Hour)
	put(t, s, later)
	if u, _ := s.Usage(ctx, "a"); u.Count != 2 {
		t.Errorf("usage %+v, want 2", u)
	}

	put(t, s, rec("bytes", "resp_0", "", 1))
	put(t, s, rec("bytes", "resp_1", "", 1))
	if err := s.Put(ctx, rec("bytes", "resp_2", "", 1)); !errors.As(err, &le) || le.Limit != "responses_max_bytes" {
		t.Fatalf("past the bytes: %v", err)
	}
	if err := s.Put(ctx, rec("bytes", "resp_1", "", 2)); !errors.As(err, &le) || le.Limit != "responses_max_bytes" {
		t.Fatalf("replacing one with a larger past the bytes: %v", err)
	}
	if err := s.Delete(ctx, "bytes", "resp_0", t0); err != nil {
		t.Fatal(err)
	}
	put(t, s, rec("bytes", "resp_2", "", 1))
	// PutWithin's limits (the plan's) replace the Options'.
	if err := s.PutWithin(ctx, rec("a", "resp_3", "", 1), respstore.Limits{MaxCount: 3}); err != nil {
		t.Errorf("PutWithin a larger count: %v", err)
	}
	if err := s.PutWithin(ctx, rec("c", "resp_0", "", 1), respstore.Limits{MaxBytes: 10}); !errors.As(err, &le) || le.Max != 10 {
		t.Errorf("PutWithin a smaller bytes: %v", err)
	}
}

// testConcurrentLimit: many Puts of one tenant at once, within a count limit, store
// exactly the limit; the others are LimitErrors.
func testConcurrentLimit(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	const n, limit = 24, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored, refused := 0, 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.PutWithin(ctx, rec("a", "resp_"+strconv.Itoa(i), "", 1), respstore.Limits{MaxCount: limit})
			var le *respstore.LimitError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case errors.As(err, &le):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if u, _ := s.Usage(ctx, "a"); stored != limit || refused != n-limit || u.Count != limit {
		t.Fatalf("%d stored, %d refused, usage %+v; want %d stored", stored, refused, u, limit)
	}
}

func testUsage(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	r1, r2 := rec("a", "resp_1", "", 1), rec("a", "resp_2", "", 4)
	put(t, s, r1)
	put(t, s, r2)
	check := func(want respstore.Usage) {
		t.Helper()
		if u, err := s.Usage(ctx, "a"); err != nil || u != want {
			t.Errorf("usage %+v (%v), want %+v", u, err, want)
		}
	}
	check(respstore.Usage{Count: 2, Bytes: r1.Size() + r2.Size()})
	r1b := rec("a", "resp_1", "", 7)
	put(t, s, r1b)
	check(respstore.Usage{Count: 2, Bytes: r1b.Size() + r2.Size()})
	if err := s.Delete(ctx, "a", "resp_2", t0); err != nil {
		t.Fatal(err)
	}
	check(respstore.Usage{Count: 1, Bytes: r1b.Size()})
	if u, _ := s.Usage(ctx, "nobody"); u != (respstore.Usage{}) {
		t.Errorf("a tenant without responses: %+v", u)
	}
}

func testRestart(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	last := chain(t, s, 3)
	before, err := s.Conversation(ctx, "a", last, t0)
	if err != nil {
		t.Fatal(err)
	}
	u1, _ := s.Usage(ctx, "a")
	s = e.open(respstore.Options{}) // bbolt: the file reopened; Redis: another process's client
	after, err := s.Conversation(ctx, "a", last, t0)
	if err != nil || !reflect.DeepEqual(ids(after), ids(before)) {
		t.Fatalf("after reopening: %v %v, want %v", ids(after), err, ids(before))
	}
	if u2, _ := s.Usage(ctx, "a"); u2 != u1 {
		t.Errorf("usage %+v after reopening, was %+v", u2, u1)
	}
	put(t, s, rec("a", "resp_next", last, 1)) // the conversation continues
	if got, err := s.Conversation(ctx, "a", "resp_next", t0); err != nil || len(got) != len(before)+2 {
		t.Errorf("continued: %d items (%v)", len(got), err)
	}
}

func testConcurrent(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			prev := ""
			for i := range each {
				id := fmt.Sprintf("resp_%d_%d", w, i)
				if err := s.Put(ctx, rec("a", id, prev, 2)); err != nil {
					t.Error(err)
					return
				}
				prev = id
			}
		}()
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("resp_%d_%d", w, i)
				for { // until its writer stored it
					r, err := s.Get(ctx, "a", id, t0)
					if err == nil {
						if r.ID != id || len(r.Input) != 2 {
							t.Errorf("read %s: %+v", id, r)
						}
						break
					}
					if !errors.Is(err, respstore.ErrNotFound) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	one := rec("a", "x", "", 2)
	if u, _ := s.Usage(ctx, "a"); u.Count != writers*each {
		t.Errorf("usage %+v, want %d responses", u, writers*each)
	}
	got, err := s.Conversation(ctx, "a", fmt.Sprintf("resp_0_%d", each-1), t0)
	if err != nil || len(got) != each*(len(one.Input)+len(one.Output)) {
		t.Errorf("a writer's chain: %d items (%v)", len(got), err)
	}
}

func testInvalid(t *testing.T, e *env) {
	s := e.open(respstore.Options{})
	dup := rec("a", "resp_dup", "", 2)
	dup.Input[1].ID = dup.Input[0].ID
	noID := rec("a", "resp_noid", "", 1)
	noID.Output[0].ID = ""
	noTime := rec("a", "resp_t", "", 1)
	noTime.Created = time.Time{}
	backwards := rec("a", "resp_b", "", 1)
	backwards.Expires = t0.Add(-time.Second)
	for _, r := range []respstore.Record{
		rec("", "resp_1", "", 1), rec("a/b", "resp_1", "", 1), rec("a", "", "", 1), rec("a", "resp/1", "", 1),
		rec("a", "resp_{1}", "", 1), rec("a", "resp_1", "resp_1", 1), rec("a", "resp_1", "x y", 1),
		dup, noID, noTime, backwards,
	} {
		if err := s.Put(ctx, r); !errors.Is(err, respstore.ErrInvalid) {
			t.Errorf("Put %q/%q: %v, want ErrInvalid", r.Tenant, r.ID, err)
		}
	}
	if u, _ := s.Usage(ctx, "a"); u != (respstore.Usage{}) {
		t.Errorf("invalid records were counted: %+v", u)
	}
}
