package usage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/money"
)

// The durable rollups: a bbolt bucket in the ledger's own database (package
// tenancy), written by PutBolt inside the transaction that stores a batch of ledger
// entries, so the rollups hold exactly the entries the ledger holds (the same
// transaction records the ledger's applied seq; a crash loses both or neither, and
// the ledger's log tail replayed at start goes through the same transaction). At
// start LoadBolt fills a Memory from them: the ledger is never scanned.
//
// A key is
//
//	width (1 byte) | bucket index (8 bytes, big-endian, sign bit flipped) |
//	uvarint len | tenant | uvarint len | model | tier
//
// so each width's buckets are in time order and pruning is a range delete from the
// width's first key; a value is a Counts (appendCounts).

// BoltBucket is the name of the rollups' bbolt bucket.
var BoltBucket = []byte("usage")

var keyPruned = []byte{0xff, 'p'} // the hour index of the last prune (sorts after every width)

// PutBolt adds evs to the rollups in tx (creating the bucket if needed) and prunes the
// minute and hour buckets past their retention, at most once an hour of the events'
// time.
func PutBolt(tx *bolt.Tx, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(BoltBucket)
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	// Sum the batch per key first: a batch of thousands touches few cells.
	type agg struct {
		key []byte
		c   Counts
	}
	sums := map[string]*agg{}
	var kb []byte
	var latest time.Time
	for i := range evs {
		e := &evs[i]
		if e.Time.After(latest) {
			latest = e.Time
		}
		for w := Width(0); w < numWidths; w++ {
			kb = appendKey(kb[:0], w, w.index(e.Time), e.Tenant, seriesModel(e.Model, e.Adapter), e.Tier)
			a := sums[string(kb)]
			if a == nil {
				a = &agg{key: bytes.Clone(kb)}
				sums[string(kb)] = a
			}
			a.c.add(e)
		}
	}
	// In key order (bbolt fills its pages best so), from one buffer for every value:
	// bbolt holds the values until the transaction ends.
	order := make([]*agg, 0, len(sums))
	for _, a := range sums {
		order = append(order, a)
	}
	slices.SortFunc(order, func(x, y *agg) int { return bytes.Compare(x.key, y.key) })
	vb := make([]byte, 0, len(sums)*48)
	for _, a := range order {
		if v := b.Get(a.key); v != nil {
			var old Counts
			if err := decodeCounts(v, &old); err != nil {
				return fmt.Errorf("usage: rollup %x: %w", a.key, err)
			}
			a.c.Merge(&old)
		}
		v0 := len(vb)
		vb = appendCounts(vb, &a.c)
		if err := b.Put(a.key, vb[v0:len(vb):len(vb)]); err != nil {
			return fmt.Errorf("usage: %w", err)
		}
	}
	now := Hour.index(latest)
	if v := b.Get(keyPruned); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= now {
		return nil
	}
	if err := pruneBolt(b, latest); err != nil {
		return err
	}
	var pb [8]byte
	binary.BigEndian.PutUint64(pb[:], uint64(now))
	return b.Put(keyPruned, pb[:])
}

// pruneBolt deletes the minute and hour buckets past their retention at now.
func pruneBolt(b *bolt.Bucket, now time.Time) error {
	for _, w := range []Width{Minute, Hour} {
		first := appendIndex([]byte{byte(w)}, 0)[:1]
		oldest := appendIndex([]byte{byte(w)}, w.index(now.Add(-w.Retention())))
		var dead [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(first); k != nil && bytes.Compare(k, oldest) < 0; k, _ = c.Next() {
			dead = append(dead, bytes.Clone(k))
		}
		for _, k := range dead { // deleting while iterating can skip keys in bbolt
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("usage: prune: %w", err)
			}
		}
	}
	return nil
}

// LoadBolt adds the rollups in tx to m, leaving out buckets past their retention at
// now. A database without the bucket loads nothing.
func LoadBolt(tx *bolt.Tx, m *Memory, now time.Time) error {
	b := tx.Bucket(BoltBucket)
	if b == nil {
		return nil
	}
	var oldest [numWidths]int64
	for w := Width(0); w < numWidths; w++ {
		oldest[w] = -1 << 63
		if r := w.Retention(); r > 0 {
			oldest[w] = w.index(now.Add(-r))
		}
	}
	return b.ForEach(func(k, v []byte) error {
		if k[0] >= byte(numWidths) {
			return nil // keyPruned
		}
		w, i, tenant, model, tier, err := parseKey(k)
		if err != nil {
			return err
		}
		if i < oldest[w] {
			return nil
		}
		var c Counts
		if err := decodeCounts(v, &c); err != nil {
			return fmt.Errorf("usage: rollup %x: %w", k, err)
		}
		m.merge(w, i, tenant, series{model, tier}, &c)
		return nil
	})
}

func appendIndex(b []byte, i int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(i)^(1<<63))
}

func appendKey(b []byte, w Width, i int64, tenant, model, tier string) []byte {
	b = append(b, byte(w))
	b = appendIndex(b, i)
	b = binary.AppendUvarint(b, uint64(len(tenant)))
	b = append(b, tenant...)
	b = binary.AppendUvarint(b, uint64(len(model)))
	b = append(b, model...)
	return append(b, tier...)
}

var errBadRollup = errors.New("malformed")

func parseKey(k []byte) (w Width, i int64, tenant, model, tier string, err error) {
	if len(k) < 9 || k[0] >= byte(numWidths) {
		return 0, 0, "", "", "", errBadRollup
	}
	w, i = Width(k[0]), int64(binary.BigEndian.Uint64(k[1:])^(1<<63))
	rest := k[9:]
	str := func() (string, bool) {
		n, l := binary.Uvarint(rest)
		if l <= 0 || uint64(len(rest)-l) < n {
			return "", false
		}
		s := string(rest[l : l+int(n)])
		rest = rest[l+int(n):]
		return s, true
	}
	var ok1, ok2 bool
	tenant, ok1 = str()
	model, ok2 = str()
	if !ok1 || !ok2 {
		return 0, 0, "", "", "", fmt.Errorf("usage: rollup key %x: %w", k, errBadRollup)
	}
	return w, i, tenant, model, string(rest), nil
}

// countsVersion is appendCounts's; versions 1 (before the cold starts) and 2 (before
// the grammar time) still decode.
const countsVersion = 3

// appendCounts appends c as a version byte and varints: the totals, the refusals by
// reason, both histograms, then the cold starts and their time (version 2), then the
// grammar time (version 3).
func appendCounts(b []byte, c *Counts) []byte {
	b = append(b, countsVersion)
	for _, v := range [...]int64{c.Requests, c.Errors, c.InputTokens, c.OutputTokens, c.CachedTokens, int64(c.Cost)} {
		b = binary.AppendVarint(b, v)
	}
	for _, v := range c.Refusals[1:] {
		b = binary.AppendVarint(b, v)
	}
	for _, h := range [...]*Hist{&c.Latency, &c.TTFT} {
		for _, v := range h {
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	b = binary.AppendVarint(b, c.ColdStarts)
	b = binary.AppendVarint(b, int64(c.ColdStartTime))
	return binary.AppendVarint(b, int64(c.GrammarTime))
}

func decodeCounts(b []byte, c *Counts) error {
	if len(b) == 0 || b[0] < 1 || b[0] > countsVersion {
		return errBadRollup
	}
	version := b[0]
	b = b[1:]
	next := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	*c = Counts{}
	c.Requests, c.Errors, c.InputTokens, c.OutputTokens, c.CachedTokens = next(), next(), next(), next(), next()
	c.Cost = money.Money(next())
	for r := 1; r < len(c.Refusals); r++ {
		c.Refusals[r] = next()
	}
	for _, h := range [...]*Hist{&c.Latency, &c.TTFT} {
		for j := range h {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return errBadRollup
			}
			h[j] = uint32(v)
			b = b[n:]
		}
	}
	var tail []*int64
	if version >= 2 {
		tail = append(tail, &c.ColdStarts, (*int64)(&c.ColdStartTime))
	}
	if version >= 3 {
		tail = append(tail, (*int64)(&c.GrammarTime))
	}
	for _, p := range tail {
		v, n := binary.Varint(b)
		if n <= 0 {
			return errBadRollup
		}
		*p = v
		b = b[n:]
	}
	if len(b) != 0 {
		return errBadRollup
	}
	return nil
}
