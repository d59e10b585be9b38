package tenancy

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/usage"
)

// The ledger's write path is package ledger's Log (group commit, segments, the
// background apply, replay); this file is what the Store gives it as its Owner: the
// groups (entries and holds, as a record's JSON array), the batches and how a batch
// is applied (storeBatch: the entries, spend totals and usage rollups in one
// transaction), and how a record is replayed.
//
// Record appends its entry, encoded as JSON, to the log's current group under the
// log's append lock (where it also gets its seq, so that seqs follow the order of the
// log), then commits it. A record's payload is a JSON array of entries and holds
// ({"open": hold}).

// group is the entries acknowledged together.
type group struct {
	buf    []byte        // the entries' JSON objects, comma-separated
	spend  []spent       // what the spend totals need of each entry
	evs    []usage.Event // what the usage rollups need of each entry
	first  uint64        // seq of the first entry; 0: no entry
	last   uint64
	holds  []Hold    // the holds logged with the group (Store.Hold)
	hbuf   []byte    // their JSON objects, comma-separated
	closes []uint64  // the holds its entries settle (Entry.Hold)
	agg    []aggMark // its coalesced refusals (RecordRefusal), in evs order
}

// Payload is the group's record: a JSON array of its entries, then its holds.
func (g *group) Payload(rec []byte) []byte {
	rec = append(rec, '[')
	rec = append(rec, g.buf...)
	if len(g.hbuf) > 0 {
		if len(g.buf) > 0 {
			rec = append(rec, ',')
		}
		rec = append(rec, g.hbuf...)
	}
	return append(rec, ']')
}

// Empty reports that the group holds neither entries nor holds.
func (g *group) Empty() bool { return g.first == 0 && len(g.holds) == 0 }

// spent is an entry's cost in its tenant's day and month windows.
type spent struct {
	tenant     string
	day, month int
	cost       money.Money
}

// batch is the logged entries not yet in the database.
type batch struct {
	json   []byte // the entries' JSON objects, comma-separated
	parts  []part // the groups in json, in seq order (groups with entries)
	spend  []spent
	evs    []usage.Event
	holds  []Hold   // in hold seq order
	closes []uint64 // the holds the entries settle

	scratch *[]byte // the Store's, for the database values (used under the log's apply lock)
}

// part is one group of a batch.
type part struct {
	end         int // in batch.json
	first, last uint64
}

// Empty reports that the batch holds neither entries nor holds.
func (b *batch) Empty() bool { return len(b.parts) == 0 && len(b.holds) == 0 }

// Entries is how many entries the batch holds.
func (b *batch) Entries() int {
	if len(b.parts) == 0 {
		return 0
	}
	return int(b.parts[len(b.parts)-1].last - b.parts[0].first + 1)
}

// Add takes a logged group: its entries' JSON, costs, rollup events, seqs and holds.
func (b *batch) Add(lg ledger.Group) {
	g := lg.(*group)
	if g.first != 0 {
		b.add(g.buf, g.spend, g.evs, g.first, g.last)
	}
	b.holds = append(b.holds, g.holds...)
	b.closes = append(b.closes, g.closes...)
}

// Apply stores the batch (storeBatch).
func (b *batch) Apply(tx *bolt.Tx) error { return storeBatch(tx, b, b.scratch) }

// Append takes the groups of newer after its own.
func (b *batch) Append(newer ledger.Batch) { b.addBatch(newer.(*batch)) }

// Reset empties the batch, keeping its buffers (up to a size).
func (b *batch) Reset() {
	if cap(b.json) > 4<<20 {
		*b = batch{scratch: b.scratch}
		return
	}
	b.reset()
}

func (b *batch) reset() {
	clear(b.evs) // drop the strings
	clear(b.holds)
	b.json, b.parts, b.spend, b.evs = b.json[:0], b.parts[:0], b.spend[:0], b.evs[:0]
	b.holds, b.closes = b.holds[:0], b.closes[:0]
}

// add appends a group: its entries' JSON, costs, rollup events and seqs.
func (b *batch) add(js []byte, sp []spent, evs []usage.Event, first, last uint64) {
	if len(b.parts) > 0 {
		b.json = append(b.json, ',')
	}
	b.json = append(b.json, js...)
	b.parts = append(b.parts, part{len(b.json), first, last})
	b.spend = append(b.spend, sp...)
	b.evs = append(b.evs, evs...)
}

// addBatch appends the groups of o.
func (b *batch) addBatch(o *batch) {
	start := 0
	for _, p := range o.parts {
		b.add(o.json[start:p.end], nil, nil, p.first, p.last)
		start = p.end + 1
	}
	b.spend = append(b.spend, o.spend...)
	b.evs = append(b.evs, o.evs...)
	b.holds = append(b.holds, o.holds...)
	b.closes = append(b.closes, o.closes...)
}

// appendEntry appends e as the JSON object encoding/json would write for it, by hand:
// this runs for every request.
func appendEntry(b []byte, e *Entry) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = jsonenc.AppendString(b, e.RequestID)
	str := func(b []byte, name, v string) []byte {
		if v == "" {
			return b
		}
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		return jsonenc.AppendString(b, v)
	}
	b = str(b, "client_request_id", e.ClientRequestID)
	b = append(b, `,"tenant":`...)
	b = jsonenc.AppendString(b, e.Tenant)
	b = str(b, "batch_line", e.Line)
	b = str(b, "key_id", e.KeyID)
	b = str(b, "model", e.Model)
	b = str(b, "adapter", e.Adapter)
	b = str(b, "tier", e.Tier)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = str(b, "finish_reason", e.Finish)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(e.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(e.CompletionTokens), 10)
	b = append(b, `,"cost_nano_usd":`...)
	b = strconv.AppendInt(b, int64(e.Cost), 10)
	b = append(b, `,"latency_ns":`...)
	b = strconv.AppendInt(b, int64(e.Latency), 10)
	if e.TTFT != 0 {
		b = append(b, `,"ttft_ns":`...)
		b = strconv.AppendInt(b, int64(e.TTFT), 10)
	}
	if e.CachedTokens != 0 {
		b = append(b, `,"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(e.CachedTokens), 10)
	}
	if e.ColdStart != 0 {
		b = append(b, `,"cold_start_ns":`...)
		b = strconv.AppendInt(b, int64(e.ColdStart), 10)
	}
	if e.GrammarTime != 0 {
		b = append(b, `,"grammar_ns":`...)
		b = strconv.AppendInt(b, int64(e.GrammarTime), 10)
	}
	b = str(b, "refused", e.Refused)
	if e.NotAdmitted {
		b = append(b, `,"not_admitted":true`...)
	}
	if e.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(e.Count), 10)
	}
	if e.Hold != 0 {
		b = append(b, `,"hold":`...)
		b = strconv.AppendUint(b, e.Hold, 10)
	}
	b = str(b, "lease", e.Lease)
	b = str(b, "user_hash", e.User)
	b = str(b, "safety_identifier_hash", e.SafetyIdentifier)
	return append(b, '}')
}

// Record appends e to the ledger and returns when the group holding it is logged
// (see SyncMode for how durable that is).
func (s *Store) Record(e Entry) error { return s.record(e, nil) }

// record is Record with side, when not nil, written in the same ledger write
// (ledger.Log.AppendWith).
func (s *Store) record(e Entry, side ledger.Side) error {
	var sp spent
	if e.Cost != 0 {
		sp.day, sp.month = windows(e.Time)
		sp.tenant, sp.cost = e.Tenant, e.Cost
	}
	p, err := s.log.AppendWith(func(lg ledger.Group) {
		g := lg.(*group)
		s.seq++
		e.Seq = s.seq
		if g.first == 0 {
			g.first = e.Seq
		} else {
			g.buf = append(g.buf, ',')
		}
		g.buf = appendEntry(g.buf, &e)
		g.evs = append(g.evs, e.event())
		g.last = e.Seq
		if sp.cost != 0 {
			g.spend = append(g.spend, sp)
		}
		if e.Hold != 0 {
			g.closes = append(g.closes, e.Hold)
		}
		s.drainRefusals(g)
	}, side)
	if err != nil {
		return err
	}
	return s.log.Commit(p)
}

// Hold logs h (a request's reservation, before it runs) and returns its seq when
// the group holding it is logged, as durable as an entry (SyncMode): the entry that
// settles the request names it (Entry.Hold). A hold is logged in the log's records
// beside the entries, as {"open": h}, and kept in the database's holds bucket until
// its entry is applied; it never shows among the entries.
func (s *Store) Hold(h Hold) (uint64, error) {
	seq, p, err := s.addHold(h)
	if err != nil {
		return 0, err
	}
	return seq, s.log.Commit(p)
}

// HoldAsync is Hold without the wait: the hold has its place in the log, before
// every entry recorded after HoldAsync returns (an entry that settles it comes after
// it), and a goroutine commits its group at once (group commit with any concurrent
// writer). A process killed before that write loses the hold.
func (s *Store) HoldAsync(h Hold) (uint64, error) {
	seq, p, err := s.addHold(h)
	if err != nil {
		return 0, err
	}
	go func() {
		if err := s.log.Commit(p); err != nil {
			slog.Default().Error("tenancy: logging a hold failed", "error", err)
		}
	}()
	return seq, nil
}

// addHold appends h to the current group and returns its seq and the group.
func (s *Store) addHold(h Hold) (uint64, *ledger.Pending, error) {
	p, err := s.log.Append(func(lg ledger.Group) {
		g := lg.(*group)
		s.hseq++
		h.Seq = s.hseq
		if len(g.holds) > 0 {
			g.hbuf = append(g.hbuf, ',')
		}
		g.hbuf = append(g.hbuf, `{"open":`...)
		g.hbuf = appendHold(g.hbuf, &h)
		g.hbuf = append(g.hbuf, '}')
		g.holds = append(g.holds, h)
	})
	return h.Seq, p, err
}

// appendHold appends h as JSON: encoding/json's bytes for h, written without its
// reflection and allocation (once per request). Strings are written by holdString.
func appendHold(b []byte, h *Hold) []byte {
	b = append(b, `{"hold":`...)
	b = strconv.AppendUint(b, h.Seq, 10)
	b = append(b, `,"time":`...)
	if y := h.Time.Year(); y < 0 || y > 9999 {
		js, err := json.Marshal(h.Time) // out of RFC 3339's range: encoding/json's answer
		if err != nil {
			panic(err)
		}
		b = append(b, js...)
	} else {
		b = append(b, '"')
		b = h.Time.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `,"request_id":`...)
	b = holdString(b, h.RequestID)
	if h.ClientRequestID != "" {
		b = append(b, `,"client_request_id":`...)
		b = holdString(b, h.ClientRequestID)
	}
	b = append(b, `,"tenant":`...)
	b = holdString(b, h.Tenant)
	str := func(b []byte, name, v string) []byte {
		if v == "" {
			return b
		}
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		return holdString(b, v)
	}
	b = str(b, "key_id", h.KeyID)
	b = str(b, "model", h.Model)
	b = str(b, "tier", h.Tier)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(h.PromptTokens), 10)
	b = append(b, `,"reserved_nano_usd":`...)
	b = strconv.AppendInt(b, int64(h.Reserved), 10)
	b = str(b, "ticket", h.Ticket)
	return append(b, '}')
}

// holdString appends s as encoding/json writes it: printable ASCII but for '"', '\\'
// and its HTML escapes ('<', '>', '&') as is; any other string (rare in ids and
// names) through encoding/json itself, so the bytes stay its own.
func holdString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			js, err := json.Marshal(s)
			if err != nil {
				panic(err) // a string: cannot fail
			}
			return append(b, js...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// logOwner is the Store as its log's owner (ledger.Owner). The log calls NewGroup
// and Written with its write lock held, which guards the spare buffers.
type logOwner struct {
	s *Store
	// the last group written and its buffers, for reuse
	spare      *group
	spareBuf   []byte
	spareSpend []spent
	spareEvs   []usage.Event
	// what Replay found that the database lacks
	found []Entry
	holds []Hold
}

// NewGroup returns an empty group: the last group written, with its buffers. The
// log holds no group it has written (Written) but in its spent Pending, which never
// reads it again.
func (o *logOwner) NewGroup() ledger.Group {
	g := o.spare
	if g == nil {
		g = new(group)
	}
	*g = group{buf: o.spareBuf[:0], spend: o.spareSpend[:0], evs: o.spareEvs[:0]}
	o.spare, o.spareBuf, o.spareSpend, o.spareEvs = nil, nil, nil, nil
	return g
}

// NewBatch returns an empty batch.
func (o *logOwner) NewBatch() ledger.Batch { return &batch{scratch: &o.s.valBuf} }

// Written counts a logged group's events in the followed rollups (FollowRollups),
// keeps them for UsageSince, and keeps its buffers for reuse.
func (o *logOwner) Written(lg ledger.Group, err error) {
	g := lg.(*group)
	s := o.s
	s.tailMu.Lock()
	if g.first != 0 {
		s.lastWritten = g.last
	}
	if err == nil {
		agg := g.agg
		for i := range g.evs {
			rs := s.rollups
			if len(agg) > 0 && agg[0].i == i { // counted when recorded, by the rollups then followed
				rs, agg = rs[agg[0].at:], agg[1:]
			}
			for _, m := range rs {
				m.Add(g.evs[i])
			}
		}
		s.tailLocked(g)
	}
	s.tailMu.Unlock()
	if err != nil {
		return
	}
	g.holds, g.hbuf, g.closes, g.agg = nil, nil, nil, nil
	if cap(g.buf) <= 1<<20 {
		clear(g.evs)
		o.spareBuf, o.spareSpend, o.spareEvs = g.buf[:0], g.spend[:0], g.evs[:0]
	}
	*g = group{}
	o.spare = g
}

// Replay keeps the entries and holds of a record left in the log that the database
// does not hold (by seq).
func (o *logOwner) Replay(p []byte) bool {
	var es []walItem
	if err := json.Unmarshal(p, &es); err != nil {
		return false
	}
	for _, e := range es {
		if e.Open != nil {
			if e.Open.Seq > o.s.hseq {
				o.holds = append(o.holds, *e.Open)
			}
		} else if e.Seq > o.s.seq {
			o.found = append(o.found, e.Entry)
		}
	}
	return true
}

// Replayed is the batch of what Replay kept, in seq order, once each; the store's
// seqs go on after it.
func (o *logOwner) Replayed() ledger.Batch {
	s := o.s
	found, holds := o.found, o.holds
	o.found, o.holds = nil, nil
	slices.SortFunc(found, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	found = slices.CompactFunc(found, func(a, b Entry) bool { return a.Seq == b.Seq })
	slices.SortFunc(holds, func(a, b Hold) int { return cmp.Compare(a.Seq, b.Seq) })
	holds = slices.CompactFunc(holds, func(a, b Hold) bool { return a.Seq == b.Seq })
	b := &batch{holds: holds, scratch: new([]byte)}
	for i := range found {
		e := &found[i]
		var sp []spent
		if e.Cost != 0 {
			d, m := windows(e.Time)
			sp = []spent{{e.Tenant, d, m, e.Cost}}
		}
		b.add(appendEntry(nil, e), sp, []usage.Event{e.event()}, e.Seq, e.Seq)
		if e.Hold != 0 {
			b.closes = append(b.closes, e.Hold)
		}
	}
	if len(found) > 0 {
		s.seq = found[len(found)-1].Seq
	}
	if len(holds) > 0 {
		s.hseq = holds[len(holds)-1].Seq
	}
	return b
}

// sync makes every acknowledged entry visible in the database.
func (s *Store) sync() error { return s.log.Sync() }

// chunkBytes is about the size of one ledger value. bbolt keeps at least two values
// in a leaf and rewrites the whole leaf when a value is added after them, so each
// apply rewrites the previous value too: values of a few pages bound that, where one
// value per batch would copy the whole previous batch again.
const chunkBytes = 16 << 10

// storeBatch writes b to the ledger bucket as a few values, JSON arrays of its groups
// keyed by their first seq, adds its costs to the spend totals and records its last
// seq as applied, and adds its entries to the usage rollups (usage.PutBolt): in one
// transaction, so the rollups always hold exactly the entries the ledger holds. buf is scratch space for the values (reused across calls; bbolt
// holds them until the transaction ends).
func storeBatch(tx *bolt.Tx, b *batch, buf *[]byte) error {
	if err := storeHolds(tx, b); err != nil {
		return err
	}
	if len(b.parts) == 0 {
		return nil
	}
	led, spend := tx.Bucket(bucketLedger), tx.Bucket(bucketSpend)
	led.FillPercent = 1 // keys only ever grow: pack the pages
	vals := (*buf)[:0]
	if n := len(b.json) + 2*len(b.parts); cap(vals) < n { // no reallocation below
		vals = make([]byte, 0, n)
	}
	var kb [8]byte
	start := 0 // of the chunk in b.json
	first := b.parts[0].first
	for i, p := range b.parts {
		if p.end-start < chunkBytes && i < len(b.parts)-1 {
			continue
		}
		v0 := len(vals)
		vals = append(vals, '[')
		vals = append(vals, b.json[start:p.end]...)
		vals = append(vals, ']')
		binary.BigEndian.PutUint64(kb[:], first)
		if err := led.Put(kb[:], vals[v0:]); err != nil {
			return err
		}
		start = p.end + 1
		if i+1 < len(b.parts) {
			first = b.parts[i+1].first
		}
	}
	if cap(vals) <= 4<<20 {
		*buf = vals
	}
	type window struct {
		tenant string
		kind   byte
		n      int
	}
	totals := map[window]money.Money{}
	for _, sp := range b.spend {
		totals[window{sp.tenant, 'd', sp.day}] += sp.cost
		totals[window{sp.tenant, 'm', sp.month}] += sp.cost
	}
	for w, add := range totals {
		k := []byte(spendKey(w.tenant, w.kind, w.n))
		old := money.Money(0)
		if v := spend.Get(k); len(v) == 8 {
			old = money.Money(binary.BigEndian.Uint64(v))
		}
		var vb [8]byte
		binary.BigEndian.PutUint64(vb[:], uint64(old+add))
		if err := spend.Put(k, vb[:]); err != nil {
			return err
		}
	}
	if err := usage.PutBolt(tx, b.evs); err != nil {
		return err
	}
	binary.BigEndian.PutUint64(kb[:], b.parts[len(b.parts)-1].last)
	return tx.Bucket(bucketMeta).Put(keyApplied, kb[:])
}

// storeHolds keeps b's holds that b does not settle in the holds bucket, deletes
// those b settles that an earlier batch kept, and records b's last hold seq as applied.
func storeHolds(tx *bolt.Tx, b *batch) error {
	if len(b.holds) == 0 && len(b.closes) == 0 {
		return nil
	}
	hb := tx.Bucket(bucketHolds)
	open := make(map[uint64]int, len(b.holds)) // seq → index in b.holds
	for i := range b.holds {
		open[b.holds[i].Seq] = i
	}
	var kb [8]byte
	for _, c := range b.closes {
		if _, ok := open[c]; ok {
			delete(open, c) // held and settled within the batch: never stored
			continue
		}
		binary.BigEndian.PutUint64(kb[:], c)
		if err := hb.Delete(kb[:]); err != nil {
			return err
		}
	}
	for seq, i := range open {
		v, err := json.Marshal(&b.holds[i])
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint64(kb[:], seq)
		if err := hb.Put(kb[:], v); err != nil {
			return err
		}
	}
	if len(b.holds) == 0 {
		return nil
	}
	binary.BigEndian.PutUint64(kb[:], b.holds[len(b.holds)-1].Seq)
	return tx.Bucket(bucketMeta).Put(keyHoldSeq, kb[:])
}

// walItem is one element of a log record: an entry, or a hold ({"open": hold}).
type walItem struct {
	Entry
	Open *Hold `json:"open,omitempty"`
}

// ledgerValue calls fn for each entry of a ledger bucket value: a JSON array (a
// batch), or one object (stores written before batches).
func ledgerValue(v []byte, fn func(Entry) error) error {
	if len(v) > 0 && v[0] == '{' {
		var e Entry
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("tenancy: ledger entry: %w", err)
		}
		return fn(e)
	}
	var es []Entry
	if err := json.Unmarshal(v, &es); err != nil {
		return fmt.Errorf("tenancy: ledger batch: %w", err)
	}
	for _, e := range es {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}
