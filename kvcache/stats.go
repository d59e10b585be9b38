package kvcache

import "sync/atomic"

// Stats is a snapshot of a Pool's counters (since New) and gauges.
type Stats struct {
	Lookups    uint64 // Seq.Prefix calls
	HitTokens  uint64 // tokens found in the cache (hot or warm)
	MissTokens uint64 // tokens looked up and not found
	Demotions  uint64 // blocks moved from hot to warm
	Replays    uint64 // blocks copied back from warm to hot
	Evictions  uint64 // cached blocks dropped (from warm, or from hot without a warm tier)

	HotUsed    int64 // hot blocks referenced by sequences
	HotCached  int64 // hot blocks cached and unreferenced (evictable, LRU)
	HotFree    int64 // hot blocks free
	WarmBlocks int64 // blocks in the warm tier
	WarmSlots  int64 // warm tier capacity in blocks

	HotBytes  int64 // bytes of hot blocks in use or cached
	WarmBytes int64 // bytes of warm blocks
	BlockSize int64 // bytes of one block
}

type counters struct {
	lookups, hitTokens, missTokens, demotions, replays, evictions atomic.Uint64
	used, cached, free, warm                                      atomic.Int64
}

// gauges refreshes the gauges from the pool's state.
func (p *Pool) gauges() {
	free, cached := int64(len(p.free)), int64(p.lru.Len())
	p.stats.free.Store(free)
	p.stats.cached.Store(cached)
	p.stats.used.Store(int64(len(p.blocks)) - free - cached)
	if p.warm != nil {
		p.stats.warm.Store(int64(len(p.warm.index)))
	}
}

// Stats returns a snapshot; it may be called from any goroutine.
func (p *Pool) Stats() Stats {
	st := &p.stats
	s := Stats{
		Lookups: st.lookups.Load(), HitTokens: st.hitTokens.Load(), MissTokens: st.missTokens.Load(),
		Demotions: st.demotions.Load(), Replays: st.replays.Load(), Evictions: st.evictions.Load(),
		HotUsed: st.used.Load(), HotCached: st.cached.Load(), HotFree: st.free.Load(), WarmBlocks: st.warm.Load(),
		BlockSize: p.cfg.BlockBytes(),
	}
	if p.warm != nil {
		s.WarmSlots = int64(p.warm.slots())
	}
	s.HotBytes = (s.HotUsed + s.HotCached) * s.BlockSize
	s.WarmBytes = s.WarmBlocks * s.BlockSize
	return s
}
