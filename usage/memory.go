package usage

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// Memory is the embedded Rollups: per tenant, per width, a map from bucket index to
// the bucket's cells (one per model and tier, a short slice: a tenant uses few). Tenants are spread over shards, each
// with its own lock, so settlements of different tenants rarely contend. Old minute
// and hour buckets are pruned as time advances, at most once an hour per tenant (so a
// bucket may outlive its retention by up to an hour).
//
// It holds no history of its own across restarts: the server loads it from the
// durable rollups (LoadBolt) when it starts; queries never scan the ledger.
type Memory struct {
	seed   maphash.Seed
	shards [64]shard
}

type shard struct {
	mu      sync.RWMutex
	tenants map[string]*tenantRoll
}

type series struct{ model, tier string }

type cell struct {
	s series
	c Counts
}

type tenantRoll struct {
	buckets [numWidths]map[int64][]cell
	pruned  int64 // hour index of the last prune
}

// NewMemory returns empty rollups.
func NewMemory() *Memory {
	m := &Memory{seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].tenants = map[string]*tenantRoll{}
	}
	return m
}

func (m *Memory) shard(tenant string) *shard {
	return &m.shards[maphash.String(m.seed, tenant)%uint64(len(m.shards))]
}

// tenantLocked returns tenant's rollups, made if needed. sh.mu is held.
func (sh *shard) tenantLocked(tenant string) *tenantRoll {
	tr := sh.tenants[tenant]
	if tr == nil {
		tr = &tenantRoll{}
		for w := range tr.buckets {
			tr.buckets[w] = map[int64][]cell{}
		}
		sh.tenants[tenant] = tr
	}
	return tr
}

// cell returns the cell of series k in bucket i of width w, made if needed.
func (tr *tenantRoll) cell(w Width, i int64, k series) *Counts {
	cells := tr.buckets[w][i]
	j := 0
	for j < len(cells) && cells[j].s != k {
		j++
	}
	if j == len(cells) {
		cells = append(cells, cell{s: k})
		tr.buckets[w][i] = cells
	}
	return &cells[j].c
}

// merge adds c to one cell (LoadBolt).
func (m *Memory) merge(w Width, i int64, tenant string, k series, c *Counts) {
	sh := m.shard(tenant)
	sh.mu.Lock()
	sh.tenantLocked(tenant).cell(w, i, k).Merge(c)
	sh.mu.Unlock()
}

// Add counts e in its minute, hour and day buckets.
func (m *Memory) Add(e Event) {
	sh := m.shard(e.Tenant)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tr := sh.tenantLocked(e.Tenant)
	k := series{seriesModel(e.Model, e.Adapter), e.Tier}
	for w := Width(0); w < numWidths; w++ {
		tr.cell(w, w.index(e.Time), k).add(&e)
	}
	if now := Hour.index(e.Time); now > tr.pruned {
		tr.pruned = now
		tr.prune(e.Time)
	}
}

// prune drops the buckets past their width's retention at now.
func (tr *tenantRoll) prune(now time.Time) {
	for w := Width(0); w < numWidths; w++ {
		ret := w.Retention()
		if ret == 0 {
			continue
		}
		oldest := w.index(now.Add(-ret))
		for i := range tr.buckets[w] {
			if i < oldest {
				delete(tr.buckets[w], i)
			}
		}
	}
}

// Tenants lists the tenants with rollups, sorted.
func (m *Memory) Tenants() []string {
	var ts []string
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		for t := range sh.tenants {
			ts = append(ts, t)
		}
		sh.mu.RUnlock()
	}
	slices.Sort(ts)
	return ts
}

// MaxBuckets bounds the buckets of one query.
const MaxBuckets = 100_000

// Query answers q from the buckets it covers: one map lookup per tenant and bucket.
func (m *Memory) Query(q Query) ([]Bucket, error) {
	first, end := q.Width.index(q.Start), q.Width.index(q.End.Add(-time.Nanosecond))+1
	if !q.End.After(q.Start) {
		return nil, nil
	}
	if end-first > MaxBuckets {
		return nil, ErrTooManyBuckets
	}
	tenants := q.Tenants
	if tenants == nil {
		tenants = m.Tenants()
	}
	step := int64(q.Width.Duration() / time.Second)
	out := make([]Bucket, end-first)
	acc := make([]map[Group]*Counts, end-first)
	for _, t := range tenants {
		sh := m.shard(t)
		sh.mu.RLock()
		tr := sh.tenants[t]
		if tr == nil {
			sh.mu.RUnlock()
			continue
		}
		bs := tr.buckets[q.Width]
		visit := func(i int64, cells []cell) {
			a := acc[i-first]
			if a == nil {
				a = map[Group]*Counts{}
				acc[i-first] = a
			}
			for n := range cells {
				k, c := cells[n].s, &cells[n].c
				g := q.group(t, k.model, k.tier)
				r := a[g]
				if r == nil {
					r = &Counts{}
					a[g] = r
				}
				r.Merge(c)
			}
		}
		if int64(len(bs)) < end-first { // sparse: walk the tenant's buckets
			for i, cells := range bs {
				if i >= first && i < end {
					visit(i, cells)
				}
			}
		} else {
			for i := first; i < end; i++ {
				if cells := bs[i]; cells != nil {
					visit(i, cells)
				}
			}
		}
		sh.mu.RUnlock()
	}
	for n := range out {
		i := first + int64(n)
		out[n].Start = time.Unix(i*step, 0).UTC()
		out[n].End = time.Unix((i+1)*step, 0).UTC()
		for g, c := range acc[n] {
			out[n].Results = append(out[n].Results, Result{Group: g, Counts: *c})
		}
		slices.SortFunc(out[n].Results, func(a, b Result) int { return compareGroups(a.Group, b.Group) })
	}
	return out, nil
}

// ErrTooManyBuckets is a query over more than MaxBuckets buckets.
var ErrTooManyBuckets = errorString("usage: too many buckets in one query")

type errorString string

func (e errorString) Error() string { return string(e) }
