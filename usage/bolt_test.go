package usage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/money"
)

func openBolt(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "u.db"), 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// randomEvents are n settlements and refusals over 3 tenants, 2 models (a third of
// the settlements with an adapter), 2 tiers and span, from t0.
func randomEvents(r *rand.Rand, n int, span time.Duration) []Event {
	evs := make([]Event, n)
	for i := range evs {
		e := settled(t0.Add(time.Duration(r.Int64N(int64(span)))), []string{"a", "b", "c"}[r.IntN(3)],
			[]string{"m1", "m2"}[r.IntN(2)], []string{"fast", "smart"}[r.IntN(2)], r.IntN(1000), r.IntN(500),
			money.Money(r.IntN(1e6)), time.Duration(r.IntN(5000))*time.Millisecond)
		e.CachedTokens = r.IntN(e.InputTokens + 1)
		if i%3 == 0 {
			e.Adapter = "ft-" + e.Tenant
		}
		if r.IntN(5) == 0 { // waited for its model's load or worker's start
			e.ColdStart = time.Duration(1+r.IntN(3000)) * time.Millisecond
		}
		switch r.IntN(5) {
		case 0:
			e.Status, e.Refused = 429, Budget
		case 1:
			e = Event{Time: e.Time, Tenant: e.Tenant, Refused: Reasons[r.IntN(len(Reasons))]}
		}
		evs[i] = e
	}
	return evs
}

// The rollups written to bbolt in batches of any size and loaded back answer every
// query as the in-memory rollups fed the same events do.
func TestBoltHoldsWhatMemoryHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	evs := randomEvents(r, 3000, 40*time.Hour)
	db := openBolt(t)
	live := NewMemory()
	for len(evs) > 0 {
		n := min(len(evs), 1+r.IntN(300))
		if err := db.Update(func(tx *bolt.Tx) error { return PutBolt(tx, evs[:n]) }); err != nil {
			t.Fatal(err)
		}
		for _, e := range evs[:n] {
			live.Add(e)
		}
		evs = evs[n:]
	}
	loaded := NewMemory()
	if err := db.View(func(tx *bolt.Tx) error { return LoadBolt(tx, loaded, t0.Add(40*time.Hour)) }); err != nil {
		t.Fatal(err)
	}
	for w := Width(0); w < numWidths; w++ {
		for _, g := range [][4]bool{{false, false, false, false}, {true, true, true, true}, {false, true, false, false}, {false, false, false, true}} {
			q := Query{Start: t0, End: t0.Add(40 * time.Hour), Width: w, ByTenant: g[0], ByModel: g[1], ByTier: g[2], ByAdapter: g[3]}
			want, err1 := live.Query(q)
			got, err2 := loaded.Query(q)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("width %s grouping %v: loaded rollups differ from live ones", w, g)
			}
		}
	}
}

// boltKeys counts the rollup keys of width w.
func boltKeys(t *testing.T, db *bolt.DB, w Width) int {
	n := 0
	db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(BoltBucket).ForEach(func(k, _ []byte) error {
			if k[0] == byte(w) {
				n++
			}
			return nil
		})
	})
	return n
}

// Minute buckets go 48 h after their minute, hour buckets 90 days after their hour,
// day buckets never; a load leaves out what a prune has not reached yet.
func TestBoltPrunesPastRetention(t *testing.T) {
	db := openBolt(t)
	put := func(at time.Time) {
		t.Helper()
		e := settled(at, "a", "m", "fast", 1, 1, 1, time.Millisecond)
		if err := db.Update(func(tx *bolt.Tx) error { return PutBolt(tx, []Event{e}) }); err != nil {
			t.Fatal(err)
		}
	}
	count := func() [numWidths]int {
		return [numWidths]int{boltKeys(t, db, Minute), boltKeys(t, db, Hour), boltKeys(t, db, Day)}
	}
	put(t0)
	put(t0.Add(47 * time.Hour))
	if got, want := count(), [numWidths]int{2, 2, 2}; got != want {
		t.Errorf("after 47 h: keys %v, want %v", got, want)
	}
	put(t0.Add(48*time.Hour + time.Minute)) // t0's minute is now past 48 h
	if got, want := count(), [numWidths]int{2, 3, 3}; got != want {
		t.Errorf("after 48 h: keys %v, want %v", got, want)
	}
	put(t0.Add(93 * 24 * time.Hour))
	if got, want := count(), [numWidths]int{1, 1, 4}; got != want {
		t.Errorf("after 93 days: keys %v, want %v", got, want)
	}
	m := NewMemory()
	db.View(func(tx *bolt.Tx) error { return LoadBolt(tx, m, t0.Add(200*24*time.Hour)) })
	bs, _ := m.Query(Query{Start: t0, End: t0.Add(94 * 24 * time.Hour), Width: Hour})
	for _, b := range bs {
		if len(b.Results) != 0 {
			t.Errorf("hour %v loaded 200 days on", b.Start)
		}
	}
	bs, _ = m.Query(Query{Start: t0, End: t0.Add(94 * 24 * time.Hour), Width: Day})
	var n int64
	for _, b := range bs {
		for _, r := range b.Results {
			n += r.Requests
		}
	}
	if n != 4 {
		t.Errorf("days hold %d requests, want 4", n)
	}
}

func TestBoltKeysRoundTrip(t *testing.T) {
	for _, c := range []struct {
		w                   Width
		i                   int64
		tenant, model, tier string
	}{
		{Minute, 29_000_000, "acme", "tiny", "fast"},
		{Day, -3, "", "", ""},
		{Hour, 1 << 40, "t\x00x", "m/odd\xff", "tier\x00"},
	} {
		w, i, tn, m, tr, err := parseKey(appendKey(nil, c.w, c.i, c.tenant, c.model, c.tier))
		if err != nil || w != c.w || i != c.i || tn != c.tenant || m != c.model || tr != c.tier {
			t.Errorf("%+v: got %v %v %q %q %q %v", c, w, i, tn, m, tr, err)
		}
	}
	// Keys of one width sort by bucket, negative indices first.
	a, b := appendKey(nil, Hour, -1, "z", "", ""), appendKey(nil, Hour, 0, "a", "", "")
	if string(a) >= string(b) {
		t.Error("bucket -1 sorts after bucket 0")
	}
}

func FuzzCounts(f *testing.F) {
	f.Add(int64(3), int64(1), int64(100), int64(50), int64(7), int64(12345), int64(2), uint32(9), int64(1), int64(2e9))
	f.Add(int64(-1), int64(0), int64(1<<62), int64(0), int64(0), int64(-5), int64(0), uint32(1<<31), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, req, errs, in, out, cached, cost, ref int64, bin uint32, colds, coldNs int64) {
		c := Counts{Requests: req, Errors: errs, InputTokens: in, OutputTokens: out, CachedTokens: cached, Cost: money.Money(cost),
			ColdStarts: colds, ColdStartTime: time.Duration(coldNs), GrammarTime: time.Duration(coldNs / 3)}
		c.Refusals[Budget] = ref
		c.Latency[int(uint32(bin)%uint32(len(Bins)))] = bin
		c.TTFT[len(Bins)-1] = bin / 2
		b := appendCounts(nil, &c)
		var back Counts
		if err := decodeCounts(b, &back); err != nil || back != c {
			t.Fatalf("%+v: back %+v, %v", c, back, err)
		}
		// Any truncation or extension is malformed, never a panic.
		for n := range b {
			if decodeCounts(b[:n], &back) == nil {
				t.Fatalf("truncated to %d decoded", n)
			}
		}
		if decodeCounts(binary.AppendUvarint(b, 1), &back) == nil {
			t.Fatal("trailing bytes decoded")
		}
	})
}

// BenchmarkQuery30DaysFromBolt writes 1,000,000 settlements over 1,000 tenants spread
// over 30 days through the durable rollups (PutBolt, in transactions of 65,536 events:
// the ledger applies up to 4,096 at a time, but generating fewer, larger transactions
// is faster and ends in the same rollups), loads them as a restarted server does (LoadBolt), then times
// 30-day queries: one tenant by day and by hour, every tenant by day. It reports the
// p95 of each (ms), and the write and load times of the setup.
func BenchmarkQuery30DaysFromBolt(b *testing.B) {
	const tenants, requests, batch = 1000, 1_000_000, 1 << 16
	db := openBolt(b)
	end := t0.Add(30 * 24 * time.Hour)
	r := rand.New(rand.NewPCG(3, 4))
	models := []string{"tiny", "small", "big"}
	tiersOf := []string{"fast", "balanced", "smart"}
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%04d", i)
	}
	start := time.Now()
	evs := make([]Event, 0, batch)
	for i := range requests {
		at := t0.Add(time.Duration(int64(i) * int64(end.Sub(t0)) / requests))
		k := r.IntN(3)
		evs = append(evs, settled(at, names[r.IntN(tenants)], models[k], tiersOf[k], 100+r.IntN(900), r.IntN(500),
			money.Money(r.IntN(1e6)), time.Duration(r.IntN(3000))*time.Millisecond))
		if len(evs) == batch || i == requests-1 {
			if err := db.Update(func(tx *bolt.Tx) error { return PutBolt(tx, evs) }); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	write := time.Since(start)
	start = time.Now()
	m := NewMemory()
	if err := db.View(func(tx *bolt.Tx) error { return LoadBolt(tx, m, end) }); err != nil {
		b.Fatal(err)
	}
	load := time.Since(start)
	all, err := m.Query(Query{Start: t0, End: end, Width: Day})
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, bk := range all {
		for _, r := range bk.Results {
			n += r.Requests
		}
	}
	if n != requests {
		b.Fatalf("the loaded rollups hold %d requests, want %d", n, requests)
	}
	b.ResetTimer()
	for _, c := range []struct {
		name string
		q    func(i int) Query
	}{
		{"tenant_by_day", func(i int) Query {
			return Query{Tenants: []string{names[i%tenants]}, Start: t0, End: end, Width: Day, ByModel: true, ByTier: true}
		}},
		{"tenant_by_hour", func(i int) Query {
			return Query{Tenants: []string{names[i%tenants]}, Start: t0, End: end, Width: Hour, ByModel: true}
		}},
		{"all_by_day", func(i int) Query { return Query{Start: t0, End: end, Width: Day, ByModel: true} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			for b.Loop() {
				s := time.Now()
				if _, err := m.Query(c.q(i)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(s))
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*95/100])/1e6, "p95-ms")
			b.ReportMetric(write.Seconds(), "write-s")
			b.ReportMetric(load.Seconds(), "load-s")
		})
	}
}

// A rollup value written before the cold starts were counted (version 1: no cold
// start fields) or before the grammar time (version 2) still decodes, without them;
// today's encoding (version 3) carries them.
func TestCountsVersion1StillDecodes(t *testing.T) {
	c := Counts{Requests: 4, InputTokens: 10, Cost: 7, ColdStarts: 2, ColdStartTime: 1500 * time.Millisecond, GrammarTime: 40 * time.Millisecond}
	c.Latency[3] = 4
	v3 := appendCounts(nil, &c)
	var back Counts
	if err := decodeCounts(v3, &back); err != nil || back != c {
		t.Fatalf("version 3: %+v, %v", back, err)
	}
	// Version 2 is version 3 without the trailing grammar time.
	v2 := append([]byte{2}, v3[1:len(v3)-binary.PutVarint(make([]byte, 10), int64(40*time.Millisecond))]...)
	want := c
	want.GrammarTime = 0
	if err := decodeCounts(v2, &back); err != nil || back != want {
		t.Fatalf("version 2: %+v, %v; want %+v", back, err, want)
	}
	// Version 1 is version 2 without the two trailing varints.
	v1 := append([]byte{1}, v2[1:len(v2)-binary.PutVarint(make([]byte, 10), 2)-binary.PutVarint(make([]byte, 10), int64(1500*time.Millisecond))]...)
	want.ColdStarts, want.ColdStartTime = 0, 0
	if err := decodeCounts(v1, &back); err != nil || back != want {
		t.Fatalf("version 1: %+v, %v; want %+v", back, err, want)
	}
}

// TestACoalescedRefusalCountsItsCount: a refusal before admission with Count n (a
// coalesced ledger entry) is n refusals in the memory and bolt rollups, and one with
// Count 0 (an entry written before coalescing) is one; an admitted request's Count is
// not a multiplier.
func TestACoalescedRefusalCountsItsCount(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	evs := []Event{
		{Time: t0, Tenant: "a", Model: "m", Status: 429, Refused: Rate, Count: 7000},
		{Time: t0, Tenant: "a", Model: "m", Status: 429, Refused: Rate},                                  // old: 1
		{Time: t0, Tenant: "a", Model: "m", Status: 429, Refused: Concurrency, Count: 1},                 // 1
		{Time: t0, Tenant: "a", Model: "m", Status: 400, Refused: BadRequest, Admitted: true, Count: 50}, // 1
	}
	m := NewMemory()
	for _, e := range evs {
		m.Add(e)
	}
	db := openBolt(t)
	if err := db.Update(func(tx *bolt.Tx) error { return PutBolt(tx, evs) }); err != nil {
		t.Fatal(err)
	}
	loaded := NewMemory()
	if err := db.View(func(tx *bolt.Tx) error { return LoadBolt(tx, loaded, t0) }); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Memory{"memory": m, "bolt": loaded} {
		bs, err := r.Query(Query{Start: t0, End: t0.Add(time.Minute), Width: Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("%s: %+v", name, bs)
		}
		c := bs[0].Results[0]
		if c.Refused(Rate) != 7001 || c.Refused(Concurrency) != 1 || c.Refused(BadRequest) != 1 || c.Requests != 1 {
			t.Errorf("%s: %d rate, %d concurrency, %d bad request refusals, %d requests; want 7001, 1, 1, 1",
				name, c.Refused(Rate), c.Refused(Concurrency), c.Refused(BadRequest), c.Requests)
		}
	}
}
