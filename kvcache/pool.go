package kvcache

import (
	"container/list"
	"errors"
	"fmt"
	"sync"

	"github.com/lmlite/lmlite/engine/kernels"
)

// BlockID names a hot block of a Pool: 0 ≤ id < Config.Blocks.
type BlockID int32

// Errors, matched with errors.Is.
var (
	ErrNoBlocks = errors.New("kvcache: no free KV blocks")
	ErrConfig   = errors.New("kvcache: bad config")
)

// Config describes the KV geometry of one model and the sizes of the tiers. Fields
// marked required have no default.
type Config struct {
	Layers      int            // required
	KVHeads     int            // required
	HeadDim     int            // required
	BlockTokens int            // tokens per block; 0: 16
	Blocks      int            // hot blocks; required (see BlocksFor)
	WarmBytes   int64          // the warm tier's size; 0: no warm tier (evicted blocks are dropped)
	WarmFile    string         // when set, the warm tier is this file, mapped; it outlives the pool (persist.go); "": host memory
	WarmFileTag string         // names what the warm file's blocks belong to (the model): a file left by another tag is not replayed
	TypeK       kernels.KVType // how K rows are stored: f16 (the zero value), q8_0 or q4_0 (llama.cpp's -ctk)
	TypeV       kernels.KVType // how V rows are stored (llama.cpp's -ctv)
}

// RowValues is the width of one token's K (or V) row in one layer: KVHeads × HeadDim.
func (c Config) RowValues() int { return c.KVHeads * c.HeadDim }

// RowUnits is the width of one token's K row and V row in one layer in the pool's
// uint16 units: RowValues binary16 values, or their Q8_0 / Q4_0 blocks
// (kernels.KVType.Units).
func (c Config) RowUnits() (k, v int) {
	return c.TypeK.Units(c.RowValues()), c.TypeV.Units(c.RowValues())
}

// BlockBytes is the memory of one block: K and V rows of all layers for BlockTokens
// tokens, as TypeK and TypeV store them. The budget counts these bytes, so that a
// quantized cache holds more blocks in the same kv_cache.
func (c Config) BlockBytes() int64 {
	k, v := c.RowUnits()
	return int64(c.Layers) * int64(c.blockTokens()) * int64(k+v) * 2
}

// Bytes is the memory the pool allocates: its hot blocks and its warm tier (whole
// blocks). It is what a model leases for its KV cache, besides its weights.
func (c Config) Bytes() int64 {
	bb := c.BlockBytes()
	if bb <= 0 {
		return 0
	}
	return int64(c.Blocks)*bb + c.WarmBytes/bb*bb
}

func (c Config) blockTokens() int {
	if c.BlockTokens == 0 {
		return 16
	}
	return c.BlockTokens
}

// BlocksFor is the number of blocks that hold seqs sequences of maxLen tokens each
// (the pool size of MaxModelLen × MaxModelConcurrency), or that fit in budget bytes
// when budget > 0 (whichever is smaller).
func (c Config) BlocksFor(maxLen, seqs int, budget int64) int {
	bt := c.blockTokens()
	n := seqs * ((maxLen + bt - 1) / bt)
	if budget > 0 && c.BlockBytes() > 0 {
		n = min(n, int(budget/c.BlockBytes()))
	}
	return n
}

// block is the bookkeeping of one hot block.
type block struct {
	ref    int32
	cached bool // its key is in Pool.hot; its contents never change again
	entry       // the cache key and what it verifies (when cached)
	elem   *list.Element
}

// entry identifies the contents of a full block in the prefix cache: the chained key
// and what the key stands for, so that a hash collision is a miss, never a wrong hit.
type entry struct {
	key    uint64
	parent uint64
	salt   string
	tokens []int32
}

func (e *entry) matches(parent uint64, salt string, tokens []int32) bool {
	if e.parent != parent || e.salt != salt || len(e.tokens) != len(tokens) {
		return false
	}
	for i, t := range tokens {
		if e.tokens[i] != t {
			return false
		}
	}
	return true
}

// Pool is the paged KV memory of one model: Blocks hot blocks of BlockTokens tokens in
// one binary16 arena, reference-counted, a prefix cache over the full ones, and a warm
// tier in host memory that evicted cached blocks are demoted to.
//
// A Pool (and its Seqs) belongs to one goroutine, the Block's; the model may read the
// K/V slices from several goroutines during a forward pass. Stats may be called from
// any goroutine.
type Pool struct {
	cfg      Config
	bt       int // tokens per block
	krow     int // units per token's K row (RowUnits)
	vrow     int // units per token's V row
	kspan    int // units per (block, layer) of K
	vspan    int // units per (block, layer) of V
	bfl      int // units per block
	arena    []uint16
	blocks   []block
	free     []BlockID          // never-cached blocks with ref 0
	lru      *list.List         // cached blocks with ref 0, least recently used at the front; Value BlockID
	hot      map[uint64]BlockID // prefix cache, hot tier
	mu       sync.RWMutex       // held by the owner while it changes the index (hot, the blocks' entries, the warm index), and by Peek to read it
	warm     *warm
	mappings []*mapping // the arena's, the warm tier's (arena.go)
	stats    counters
}

// New allocates a Pool.
func New(cfg Config) (*Pool, error) {
	if cfg.Layers <= 0 || cfg.KVHeads <= 0 || cfg.HeadDim <= 0 || cfg.Blocks <= 0 || cfg.BlockTokens < 0 || cfg.WarmBytes < 0 {
		return nil, fmt.Errorf("%w: %+v", ErrConfig, cfg)
	}
	for _, t := range []kernels.KVType{cfg.TypeK, cfg.TypeV} {
		if err := kernels.CheckKVType(t, cfg.HeadDim); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	cfg.BlockTokens = cfg.blockTokens()
	p := &Pool{cfg: cfg, bt: cfg.BlockTokens, lru: list.New(), hot: map[uint64]BlockID{}}
	p.krow, p.vrow = cfg.RowUnits()
	p.kspan, p.vspan = p.bt*p.krow, p.bt*p.vrow
	p.bfl = cfg.Layers * (p.kspan + p.vspan)
	if int64(p.bfl)*int64(cfg.Blocks) > 1<<40 {
		return nil, fmt.Errorf("%w: %d blocks of %d bytes", ErrConfig, cfg.Blocks, cfg.BlockBytes())
	}
	p.arena = p.allocate(p.bfl * cfg.Blocks)
	p.blocks = make([]block, cfg.Blocks)
	p.free = make([]BlockID, cfg.Blocks)
	for i := range p.free {
		p.free[i] = BlockID(cfg.Blocks - 1 - i) // pop from the end: block 0 first
	}
	if slots := int(cfg.WarmBytes / cfg.BlockBytes()); slots > 0 {
		var data []uint16
		if cfg.WarmFile != "" {
			d, unmap, reused, err := mapWarmFile(cfg.WarmFile, slots*p.bfl)
			if err != nil {
				return nil, err
			}
			data = d
			p.track(unmap)
			p.warm = newWarm(data, slots, p.bfl)
			if reused {
				if _, err := p.loadWarmIndex(); err != nil {
					p.warm = newWarm(data, slots, p.bfl) // a damaged index: start empty
				}
			}
		} else {
			data = p.allocate(slots * p.bfl)
			p.warm = newWarm(data, slots, p.bfl)
		}
	}
	p.gauges()
	return p, nil
}

// Close releases the pool's memory (the arena, the warm tier and its file's mapping).
// The pool must not be used after.
func (p *Pool) Close() error {
	var errs []error
	if p.warm != nil && p.cfg.WarmFile != "" && p.mappings != nil {
		// The cached hot blocks go to the file too, and the index beside it, so that
		// the next pool on this file (a reload, a restart) replays them.
		p.DemoteAll()
		errs = append(errs, p.saveWarmIndex())
	}
	for _, m := range p.mappings {
		errs = append(errs, m.release())
	}
	p.mappings, p.warm, p.arena = nil, nil, nil
	return errors.Join(errs...)
}

// Config returns the pool's configuration with defaults filled in.
func (p *Pool) Config() Config { return p.cfg }

// BlockTokens is the number of tokens per block.
func (p *Pool) BlockTokens() int { return p.bt }

// Blocks is the number of hot blocks.
func (p *Pool) Blocks() int { return len(p.blocks) }

// Available is the number of blocks Alloc can hand out now: free ones and cached ones
// that no sequence references (which Alloc evicts, least recently used first).
func (p *Pool) Available() int { return len(p.free) + p.lru.Len() }

// K returns the K rows of block b in layer l: BlockTokens rows of k units
// (RowUnits), token t of the block at [t*k, (t+1)*k): binary16 values, or the row's
// Q8_0 / Q4_0 blocks.
func (p *Pool) K(b BlockID, l int) []uint16 {
	off := int(b)*p.bfl + l*(p.kspan+p.vspan)
	return p.arena[off : off+p.kspan : off+p.kspan]
}

// V is K's counterpart for the V rows (v units each).
func (p *Pool) V(b BlockID, l int) []uint16 {
	off := int(b)*p.bfl + l*(p.kspan+p.vspan) + p.kspan
	return p.arena[off : off+p.vspan : off+p.vspan]
}

// data is the whole of block b: its K and V rows of every layer, contiguous.
func (p *Pool) data(b BlockID) []uint16 {
	off := int(b) * p.bfl
	return p.arena[off : off+p.bfl : off+p.bfl]
}

// Alloc takes a block with reference count 1 for a sequence to write. When no block
// is free it evicts the least recently used cached block that nobody references,
// demoting it to the warm tier if there is one.
func (p *Pool) Alloc() (BlockID, error) {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		p.blocks[b].ref = 1
		p.gauges()
		return b, nil
	}
	front := p.lru.Front()
	if front == nil {
		return 0, fmt.Errorf("%w: all %d blocks are in use", ErrNoBlocks, len(p.blocks))
	}
	b := front.Value.(BlockID)
	p.evict(b)
	p.blocks[b].ref = 1
	p.gauges()
	return b, nil
}

// evict takes cached, unreferenced block b out of the hot tier, demoting its
// contents to the warm tier when there is one.
func (p *Pool) evict(b BlockID) {
	blk := &p.blocks[b]
	p.lru.Remove(blk.elem)
	blk.elem = nil
	p.mu.Lock()
	delete(p.hot, blk.key)
	blk.cached = false
	demoted := p.warm != nil && p.warm.put(blk.entry, p.data(b), &p.stats)
	blk.entry = entry{}
	p.mu.Unlock()
	if demoted {
		p.stats.demotions.Add(1)
	} else {
		p.stats.evictions.Add(1)
	}
}

// Ref adds a reference to a block that is referenced already.
func (p *Pool) Ref(b BlockID) {
	if p.blocks[b].ref <= 0 {
		panic(fmt.Sprintf("kvcache: Ref of unreferenced block %d", b))
	}
	p.blocks[b].ref++
}

// Release drops one reference. A block nobody references goes back to the free list,
// or, when it is in the prefix cache, to the back of the LRU list.
func (p *Pool) Release(b BlockID) {
	blk := &p.blocks[b]
	if blk.ref <= 0 {
		panic(fmt.Sprintf("kvcache: Release of unreferenced block %d", b))
	}
	blk.ref--
	if blk.ref > 0 {
		return
	}
	if blk.cached {
		blk.elem = p.lru.PushBack(b)
	} else {
		p.free = append(p.free, b)
	}
	p.gauges()
}

// Refs returns a block's reference count.
func (p *Pool) Refs(b BlockID) int { return int(p.blocks[b].ref) }

// DemoteAll moves every cached block that no sequence references out of the hot tier:
// to the warm tier when there is one (dropped otherwise), as memory pressure would,
// one block at a time in LRU order. It returns how many blocks left the hot tier.
func (p *Pool) DemoteAll() int {
	n := 0
	for f := p.lru.Front(); f != nil; f = p.lru.Front() {
		b := f.Value.(BlockID)
		p.evict(b)
		p.free = append(p.free, b)
		n++
	}
	p.gauges()
	return n
}
