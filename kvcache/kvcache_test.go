package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// check verifies the pool's invariants: every block is exactly one of free,
// cached-and-idle (in the LRU list) or referenced; the hot index points at cached
// blocks; warm slots are either free or hold one entry; the gauges agree.
func (p *Pool) check() error {
	inFree := map[BlockID]bool{}
	for _, b := range p.free {
		if inFree[b] {
			return fmt.Errorf("block %d twice in the free list", b)
		}
		inFree[b] = true
	}
	inLRU := map[BlockID]bool{}
	for e := p.lru.Front(); e != nil; e = e.Next() {
		b := e.Value.(BlockID)
		if inLRU[b] {
			return fmt.Errorf("block %d twice in the LRU list", b)
		}
		inLRU[b] = true
	}
	used := 0
	for i := range p.blocks {
		b, blk := BlockID(i), &p.blocks[i]
		switch {
		case blk.ref < 0:
			return fmt.Errorf("block %d: ref %d", b, blk.ref)
		case blk.ref > 0:
			used++
			if inFree[b] || inLRU[b] {
				return fmt.Errorf("referenced block %d is free or evictable", b)
			}
		case blk.cached:
			if !inLRU[b] || inFree[b] || blk.elem == nil {
				return fmt.Errorf("idle cached block %d is not (only) in the LRU list", b)
			}
		default:
			if !inFree[b] {
				return fmt.Errorf("idle block %d is lost", b)
			}
		}
		if blk.cached && p.hot[blk.key] != b {
			return fmt.Errorf("cached block %d is not indexed under its key", b)
		}
		if !blk.cached && (inLRU[b] || blk.elem != nil) {
			return fmt.Errorf("uncached block %d is in the LRU list", b)
		}
	}
	for key, b := range p.hot {
		if !p.blocks[b].cached || p.blocks[b].key != key {
			return fmt.Errorf("hot index %x points at block %d which is not cached under it", key, b)
		}
	}
	if len(p.free)+p.lru.Len()+used != len(p.blocks) {
		return fmt.Errorf("free %d + idle cached %d + used %d != %d", len(p.free), p.lru.Len(), used, len(p.blocks))
	}
	st := p.Stats()
	if st.HotFree != int64(len(p.free)) || st.HotCached != int64(p.lru.Len()) || st.HotUsed != int64(used) {
		return fmt.Errorf("gauges %+v disagree with free %d cached %d used %d", st, len(p.free), p.lru.Len(), used)
	}
	if w := p.warm; w != nil {
		slots := map[int]bool{}
		for _, s := range w.free {
			if slots[s] {
				return fmt.Errorf("warm slot %d freed twice", s)
			}
			slots[s] = true
		}
		if w.lru.Len() != len(w.index) {
			return fmt.Errorf("warm LRU %d entries, index %d", w.lru.Len(), len(w.index))
		}
		for key, we := range w.index {
			if we.key != key || slots[we.slot] {
				return fmt.Errorf("warm entry %x misfiled (slot %d)", key, we.slot)
			}
			slots[we.slot] = true
		}
		if len(slots) != w.slots() {
			return fmt.Errorf("warm slots: %d accounted of %d", len(slots), w.slots())
		}
		if st.WarmBlocks != int64(len(w.index)) {
			return fmt.Errorf("warm gauge %d, entries %d", st.WarmBlocks, len(w.index))
		}
	}
	return nil
}

func newPool(t testing.TB, blocks int, warmBlocks int) *Pool {
	t.Helper()
	cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockTokens: 4, Blocks: blocks}
	cfg.WarmBytes = int64(warmBlocks) * cfg.BlockBytes()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func toks(vals ...int32) []int32 { return vals }

func seqOf(n int, base int32) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = base + int32(i)
	}
	return t
}

// fill writes the rows of positions [from, to) of s with values derived from seed and
// the position, and returns them for comparison.
func fill(t testing.TB, s *Seq, from, to int, seed uint64) {
	t.Helper()
	if err := s.Grow(to); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(from)))
	for pos := from; pos < to; pos++ {
		for l := range s.p.cfg.Layers {
			k, v := s.Row(pos, l) // of different widths with different K and V types
			for i := range max(len(k), len(v)) {
				if i < len(k) {
					k[i] = uint16(rng.Uint32()) // any bits, NaN payloads too
				}
				if i < len(v) {
					v[i] = uint16(rng.Uint32())
				}
			}
		}
	}
}

// rows copies the K and V bits of positions [0, n) of s.
func rows(s *Seq, n int) []uint16 {
	var out []uint16
	for pos := range n {
		for l := range s.p.cfg.Layers {
			k, v := s.Row(pos, l)
			out = append(append(out, k...), v...)
		}
	}
	return out
}

func equalBits(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLayout(t *testing.T) {
	p := newPool(t, 3, 0)
	if p.Config().BlockBytes() != 2*2*4*8*2 {
		t.Fatalf("block bytes %d", p.Config().BlockBytes())
	}
	if c := (Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockTokens: 4, Blocks: 3, WarmBytes: 2*256 + 100}); c.Bytes() != 5*256 {
		t.Fatalf("Bytes = %d, want 5 blocks of 256", c.Bytes())
	}
	// Every (block, layer, K/V) span is distinct and covers the arena exactly once.
	seen := map[*uint16]bool{}
	for b := range BlockID(3) {
		for l := range 2 {
			for _, s := range [][]uint16{p.K(b, l), p.V(b, l)} {
				if len(s) != 4*8 || cap(s) != len(s) {
					t.Fatalf("span len %d cap %d", len(s), cap(s))
				}
				if seen[&s[0]] {
					t.Fatal("spans overlap")
				}
				seen[&s[0]] = true
			}
		}
	}
	s := p.NewSeq("t")
	if err := s.Grow(6); err != nil {
		t.Fatal(err)
	}
	k, v := s.Row(5, 1) // block 1, row 1
	want := p.K(s.Blocks()[1], 1)[8:16]
	if &k[0] != &want[0] || len(k) != 8 || &v[0] != &p.V(s.Blocks()[1], 1)[8] {
		t.Fatal("Row does not address block 1, row 1")
	}
	if got := (Config{Layers: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}).BlocksFor(100, 3, 0); got != 21 {
		t.Fatalf("BlocksFor = %d, want 3×7", got)
	}
	if _, err := New(Config{Layers: 1, KVHeads: 1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad config: %v", err)
	}
}

func TestRefcountsAndSharing(t *testing.T) {
	p := newPool(t, 8, 0)
	prompt := seqOf(10, 100) // 2 full blocks + 2 tokens
	a := p.NewSeq("t")
	if hit := a.Prefix(prompt[:9]); hit != 0 {
		t.Fatalf("cold cache hit %d", hit)
	}
	fill(t, a, 0, 10, 1)
	a.Publish(prompt)
	if a.Cached() != 8 {
		t.Fatalf("published %d tokens, want 8", a.Cached())
	}
	b := p.NewSeq("t")
	if hit := b.Prefix(prompt[:9]); hit != 8 {
		t.Fatalf("hit %d tokens, want 8", hit)
	}
	for i := range 2 {
		if b.Blocks()[i] != a.Blocks()[i] || p.Refs(a.Blocks()[i]) != 2 {
			t.Fatalf("block %d not shared with refcount 2", i)
		}
	}
	if !equalBits(rows(a, 8), rows(b, 8)) {
		t.Fatal("shared prefix differs")
	}
	fill(t, b, 8, 12, 2)
	if p.Refs(a.Blocks()[2]) != 1 || b.Blocks()[2] == a.Blocks()[2] {
		t.Fatal("the partial block must be private")
	}
	p.Ref(b.Blocks()[0]) // a third holder, e.g. a fork
	if p.Refs(b.Blocks()[0]) != 3 {
		t.Fatal("Ref should add a reference")
	}
	p.Release(b.Blocks()[0])
	a.Release()
	if p.Refs(b.Blocks()[0]) != 1 {
		t.Fatal("release should drop one reference")
	}
	b.Release()
	st := p.Stats()
	if st.HotUsed != 0 || st.HotCached != 2 || st.HotFree != 6 {
		t.Fatalf("after release: %+v", st)
	}
	if st.Lookups != 2 || st.HitTokens != 8 || st.MissTokens != 10 {
		t.Fatalf("counters %+v", st)
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("releasing a free block must panic (a double free is a bug)")
		}
	}()
	p.Release(0)
}

// TestEvictionOrder: LRU among idle cached blocks, the tail of a prefix before its
// head, and referenced blocks are never evicted.
func TestEvictionOrder(t *testing.T) {
	p := newPool(t, 4, 0)
	older := p.NewSeq("t")
	older.Prefix(nil)
	fill(t, older, 0, 8, 1)
	older.Publish(seqOf(8, 0))
	o0, o1 := older.Blocks()[0], older.Blocks()[1]
	older.Release() // LRU now: o1 (tail first), o0
	newer := p.NewSeq("t")
	fill(t, newer, 0, 8, 2)
	newer.Publish(seqOf(8, 50)) // takes the two free blocks
	n0, n1 := newer.Blocks()[0], newer.Blocks()[1]
	newer.Release() // LRU: o1, o0, n1, n0

	x := p.NewSeq("u")
	for i, want := range []BlockID{o1, o0, n1} {
		if err := x.Grow(4 * (i + 1)); err != nil {
			t.Fatal(err)
		}
		if got := x.Blocks()[i]; got != want {
			t.Fatalf("eviction %d took block %d, want %d", i, got, want)
		}
	}
	if st := p.Stats(); st.Evictions != 3 || st.HotCached != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The head of the newer prefix is still cached: a lookup hits it and pins it.
	y := p.NewSeq("t")
	if hit := y.Prefix(seqOf(8, 50)); hit != 4 || y.Blocks()[0] != n0 {
		t.Fatalf("hit %d", hit)
	}
	// Everything is referenced now: no block to evict.
	if err := x.Grow(16); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("Grow with all blocks referenced: %v", err)
	}
	if p.Refs(n0) != 1 {
		t.Fatal("the referenced block was taken")
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// TestSaltIsolation: two tenants publish the same prompt with different KV bits;
// each one's lookup then hits its own blocks (its own bits, not the other's), a third
// tenant hits nothing, and the shared salt ("") serves everyone who uses it its own
// copy. It fails if the salt is left out of the keys (the second tenant could not
// cache its blocks) or out of the lookup (one tenant would read the other's).
func TestSaltIsolation(t *testing.T) {
	p := newPool(t, 16, 8)
	prompt := seqOf(9, 7)
	publish := func(salt string, seed uint64) []uint16 {
		t.Helper()
		s := p.NewSeq(salt)
		if hit := s.Prefix(prompt); hit != 0 {
			t.Fatalf("salt %q: the first lookup hit %d tokens of another salt's prefix", salt, hit)
		}
		fill(t, s, 0, 9, seed)
		s.Publish(prompt)
		r := rows(s, 8)
		s.Release()
		return r
	}
	own := map[string][]uint16{
		"tenant-a": publish("tenant-a", 1),
		"tenant-b": publish("tenant-b", 2),
		"":         publish("", 3),
	}
	if equalBits(own["tenant-a"], own["tenant-b"]) {
		t.Fatal("the two tenants' rows are the same bits: the test cannot tell them apart")
	}
	for _, salt := range []string{"tenant-a", "tenant-b", "", ""} {
		if n := p.Peek(salt, prompt); n != 8 {
			t.Fatalf("Peek under %q: %d tokens, want 8", salt, n)
		}
		s := p.NewSeq(salt)
		if hit := s.Prefix(prompt); hit != 8 {
			t.Fatalf("salt %q: its own prefix hit %d tokens, want 8", salt, hit)
		}
		if !equalBits(rows(s, 8), own[salt]) {
			t.Fatalf("salt %q: the hit's KV bits are not the ones it published", salt)
		}
		s.Release()
	}
	if p.Peek("tenant-c", prompt) != 0 {
		t.Fatal("a third tenant peeks another's prefix")
	}
	c := p.NewSeq("tenant-c")
	if hit := c.Prefix(prompt); hit != 0 {
		t.Fatalf("a third tenant hit %d tokens of another's prefix", hit)
	}
	c.Release()
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// TestPrefixLimit: PrefixLimit takes no more than the blocks asked for, and counts
// the lookup over all the tokens.
func TestPrefixLimit(t *testing.T) {
	p := newPool(t, 16, 0)
	prompt := seqOf(13, 1)
	s := p.NewSeq("a")
	s.Prefix(prompt)
	fill(t, s, 0, 13, 1)
	s.Publish(prompt)
	s.Release()
	before := p.Stats()
	q := p.NewSeq("a")
	if n := q.PrefixLimit(prompt, 4); n != 4 || len(q.Blocks()) != 1 {
		t.Fatalf("limit 4: %d tokens, %d blocks", n, len(q.Blocks()))
	}
	after := p.Stats()
	if after.Lookups-before.Lookups != 1 || after.HitTokens-before.HitTokens != 4 || after.MissTokens-before.MissTokens != 9 {
		t.Fatalf("stats %+v → %+v", before, after)
	}
	q.Release()
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// TestDemoteReplay: blocks evicted from hot go to warm and come back bit for bit, in
// host memory or in a file.
func TestDemoteReplay(t *testing.T) {
	t.Run("memory", func(t *testing.T) { demoteReplay(t, newPool(t, 3, 2)) })
	t.Run("file", func(t *testing.T) {
		cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockTokens: 4, Blocks: 3}
		cfg.WarmBytes = 2 * cfg.BlockBytes()
		cfg.WarmFile = filepath.Join(t.TempDir(), "warm")
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		demoteReplay(t, p)
	})
}

func demoteReplay(t *testing.T, p *Pool) {
	prompt := seqOf(9, 1)
	a := p.NewSeq("t")
	a.Prefix(prompt)
	fill(t, a, 0, 9, 42)
	a.Publish(prompt)
	want := rows(a, 8)
	a.Release()

	// Push both cached blocks out of hot with another sequence's three blocks.
	b := p.NewSeq("other")
	fill(t, b, 0, 12, 7)
	st := p.Stats()
	if st.Demotions != 2 || st.WarmBlocks != 2 || st.Evictions != 0 || st.WarmBytes != 2*st.BlockSize {
		t.Fatalf("after pressure: %+v", st)
	}
	if p.Peek("t", prompt) != 8 {
		t.Fatal("warm blocks should count for Peek")
	}
	b.Release()

	c := p.NewSeq("t")
	if hit := c.Prefix(prompt); hit != 8 {
		t.Fatalf("warm hit %d", hit)
	}
	if got := rows(c, 8); !equalBits(got, want) {
		t.Fatal("replayed blocks differ from the demoted ones")
	}
	st = p.Stats()
	if st.Replays != 2 || st.WarmBlocks != 0 {
		t.Fatalf("after replay: %+v", st)
	}
	// The replayed blocks are hot and cached again: a second lookup hits them in hot.
	d := p.NewSeq("t")
	if hit := d.Prefix(prompt); hit != 8 || d.Blocks()[0] != c.Blocks()[0] {
		t.Fatalf("hot hit after replay: %d", hit)
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// TestWarmLRU: a full warm tier drops its least recently used block.
func TestWarmLRU(t *testing.T) {
	p := newPool(t, 2, 1)
	for i := range int32(3) {
		s := p.NewSeq("t")
		fill(t, s, 0, 4, uint64(i))
		s.Publish(seqOf(4, 10*i))
		s.Release()
	}
	// Blocks: 0 and 1 hot... three prefixes through a pool of 2 with 1 warm slot.
	s := p.NewSeq("x")
	fill(t, s, 0, 8, 9) // evicts the two idle hot ones: one demoted over another
	st := p.Stats()
	if st.WarmBlocks != 1 || st.Demotions != 3 || st.Evictions != 2 {
		t.Fatalf("stats %+v", st)
	}
	if p.Peek("t", seqOf(4, 20)) != 4 || p.Peek("t", seqOf(4, 0)) != 0 || p.Peek("t", seqOf(4, 10)) != 0 {
		t.Fatal("the warm tier should keep the most recently demoted block")
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// TestReplayNeedsRoom: a warm hit with no hot block to replay into is a miss, and the
// warm block stays.
func TestReplayNeedsRoom(t *testing.T) {
	p := newPool(t, 1, 1)
	a := p.NewSeq("t")
	fill(t, a, 0, 4, 1)
	a.Publish(seqOf(4, 0))
	a.Release()
	b := p.NewSeq("u")
	fill(t, b, 0, 4, 2) // demotes a's block
	c := p.NewSeq("t")
	if hit := c.Prefix(seqOf(4, 0)); hit != 0 {
		t.Fatalf("replay without a hot block: hit %d", hit)
	}
	if p.Peek("t", seqOf(4, 0)) != 4 {
		t.Fatal("the warm block was lost")
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPrefix is a lookup of a 64-token cached prefix and its release.
func BenchmarkPrefix(b *testing.B) {
	p := newPool(b, 64, 0)
	prompt := seqOf(65, 1)
	s := p.NewSeq("t")
	fill(b, s, 0, 65, 1)
	s.Publish(prompt)
	b.ReportAllocs()
	for b.Loop() {
		q := p.NewSeq("t")
		if q.Prefix(prompt[:64]) != 64 {
			b.Fatal("miss")
		}
		q.Release()
	}
}

// TestDemoteAll: every unreferenced cached block goes warm, bit for bit; referenced
// ones stay hot; Peek (from another goroutine) sees both tiers.
func TestDemoteAll(t *testing.T) {
	p := newPool(t, 6, 4)
	prompt := seqOf(8, 1)
	a := p.NewSeq("t")
	fill(t, a, 0, 8, 5)
	a.Publish(prompt)
	want := rows(a, 8)
	a.Release()
	busy := p.NewSeq("u")
	fill(t, busy, 0, 4, 6)
	busy.Publish(seqOf(4, 50))
	if n := p.DemoteAll(); n != 2 {
		t.Fatalf("DemoteAll moved %d blocks, want the 2 unreferenced ones", n)
	}
	st := p.Stats()
	if st.WarmBlocks != 2 || st.HotCached != 0 || st.HotUsed != 1 {
		t.Fatalf("after DemoteAll: %+v", st)
	}
	done := make(chan int)
	go func() { done <- p.Peek("t", prompt) + p.Peek("u", seqOf(4, 50)) }()
	if n := <-done; n != 12 {
		t.Fatalf("Peek from another goroutine: %d tokens, want 12", n)
	}
	c := p.NewSeq("t")
	if hit := c.Prefix(prompt); hit != 8 || !equalBits(rows(c, 8), want) {
		t.Fatalf("replay after DemoteAll: hit %d", hit)
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// TestWarmFileSurvivesClose: a warm file outlives its pool. Blocks cached (hot) when
// the pool closes are in the next pool on the same file, bit for bit; a pool with
// another tag (another model) finds nothing; and the index is consumed when read, so
// a pool after one that did not close cleanly (a crash) starts empty.
func TestWarmFileSurvivesClose(t *testing.T) {
	cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockTokens: 4, Blocks: 3, WarmFileTag: "model-a"}
	cfg.WarmBytes = 4 * cfg.BlockBytes()
	cfg.WarmFile = filepath.Join(t.TempDir(), "warm")
	open := func(cfg Config) *Pool {
		t.Helper()
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	prompt := seqOf(9, 1)
	p := open(cfg)
	a := p.NewSeq("t")
	a.Prefix(prompt)
	fill(t, a, 0, 9, 42)
	a.Publish(prompt)
	want := rows(a, 8)
	a.Release()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	other := cfg
	other.WarmFileTag = "model-b"
	if q := open(other); q.Peek("t", prompt) != 0 {
		t.Fatal("another model's pool found the blocks")
	} else if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// model-b's Close wrote its own (empty) index: model-a's blocks are gone now, as
	// the file was reused by another model. Write them again.
	p = open(cfg)
	a = p.NewSeq("t")
	a.Prefix(prompt)
	fill(t, a, 0, 9, 42)
	a.Publish(prompt)
	a.Release()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	q := open(cfg)
	if n := q.Peek("t", prompt); n != 8 {
		t.Fatalf("after reopening: %d tokens cached, want 8", n)
	}
	c := q.NewSeq("t")
	if hit := c.Prefix(prompt); hit != 8 {
		t.Fatalf("warm hit %d after reopening", hit)
	}
	if got := rows(c, 8); !equalBits(got, want) {
		t.Fatal("blocks replayed after reopening differ from the ones written")
	}
	c.Release()
	if err := q.check(); err != nil {
		t.Fatal(err)
	}
	// q never closes (a crash): the next pool starts empty.
	if r := open(cfg); r.Peek("t", prompt) != 0 {
		t.Fatal("a pool after an unclean end replayed blocks without an index")
	}
}

// TestTruncate: rolling a sequence back frees the blocks past the kept tokens (the
// pool's accounting stays whole), keeps the cached prefix and the kept rows' bits,
// and refuses to cut into the cached prefix.
func TestTruncate(t *testing.T) {
	p := newPool(t, 8, 0)
	prompt := seqOf(10, 100)
	a := p.NewSeq("t")
	fill(t, a, 0, 10, 1)
	a.Publish(prompt[:8])
	before := rows(a, 10)
	fill(t, a, 10, 21, 3) // a speculative step's drafts: 6 blocks
	if a.Cap() != 24 {
		t.Fatalf("cap %d", a.Cap())
	}
	a.Truncate(11)
	if a.Cap() != 12 || len(a.Blocks()) != 3 {
		t.Fatalf("after Truncate(11): cap %d, %d blocks", a.Cap(), len(a.Blocks()))
	}
	if !equalBits(rows(a, 10), before) {
		t.Fatal("the kept rows changed")
	}
	if st := p.Stats(); st.HotUsed != 3 || st.HotFree != 5 {
		t.Fatalf("after truncation: %+v", st)
	}
	a.Truncate(12) // nothing past
	if a.Cap() != 12 {
		t.Fatal("Truncate within the last block freed it")
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("truncating into the cached prefix must panic")
		}
	}()
	a.Truncate(7)
}

// TestPublishRefusedStaysPrivate: two sequences of one salt compute the same
// prompt side by side (neither found the other's blocks); the second's Publish is
// refused (the first's blocks cache those contents), so its blocks stay private:
// Cached says 0, the sequence may roll back into them, and once the first's blocks
// are gone from the cache the next Publish enters the second's.
func TestPublishRefusedStaysPrivate(t *testing.T) {
	p := newPool(t, 4, 0)
	prompt := seqOf(8, 100) // 2 full blocks
	a, b := p.NewSeq("t"), p.NewSeq("t")
	fill(t, a, 0, 8, 1)
	fill(t, b, 0, 8, 1)
	a.Publish(prompt)
	b.Publish(prompt)
	if a.Cached() != 8 || b.Cached() != 0 {
		t.Fatalf("cached: first %d, second %d tokens; want 8 and 0 (the second's publish was refused)", a.Cached(), b.Cached())
	}
	b.Truncate(4) // below a refused block: allowed, it is private
	if b.Cap() != 4 {
		t.Fatalf("cap %d after Truncate(4)", b.Cap())
	}
	a.Release()
	for range 3 { // the cache's two idle blocks are evicted for these
		if _, err := p.Alloc(); err != nil {
			t.Fatal(err)
		}
	}
	b.Publish(prompt[:4])
	if b.Cached() != 4 {
		t.Fatalf("after the first's blocks were evicted, the second published %d tokens, want 4", b.Cached())
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}
