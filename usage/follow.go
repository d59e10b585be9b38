package usage

import "sync"

// Following is a Memory that follows a Source (the process's ledger): every Query
// and Tenants first counts the entries the source acknowledged after the last one
// counted, so the ledger is the one feed of the rollups (settlements and refusals
// alike) and a caller sees its own requests. Nothing else adds to it.
type Following struct {
	m   *Memory
	src Source

	mu  sync.Mutex // serialises catching up; guards seq
	seq uint64     // the source's last seq counted in m
}

// Follow returns m following src from the entry after seq (m holds those up to seq:
// what LoadBolt loaded, tenancy.Store.LoadRollups).
func Follow(m *Memory, src Source, seq uint64) *Following {
	return &Following{m: m, src: src, seq: seq}
}

// CatchUp counts the entries the source acknowledged since the last call.
func (f *Following) CatchUp() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.src.UsageSince(f.seq, func(seq uint64, e Event) error {
		f.m.Add(e)
		f.seq = seq
		return nil
	})
}

// Query answers q once the source's latest entries are counted.
func (f *Following) Query(q Query) ([]Bucket, error) {
	if err := f.CatchUp(); err != nil {
		return nil, err
	}
	return f.m.Query(q)
}

// Tenants lists the tenants with any rollup, the source's latest entries counted.
func (f *Following) Tenants() []string {
	_ = f.CatchUp() // an unreadable ledger: the tenants counted so far
	return f.m.Tenants()
}
