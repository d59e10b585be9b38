package kvcache

import "encoding/binary"

// FNV-1a, 64 bits: a stable hash of the chain, the same in every process. A collision
// only costs a miss: an entry also holds the parent key, the salt and the tokens it
// stands for, and a lookup compares them.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// rootKey is the parent key of a sequence's first block: the salt alone.
func rootKey(salt string) uint64 {
	h := uint64(fnvOffset)
	for _, c := range []byte("kvcache/salt\x00" + salt) {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// chainKey is the key of a full block: its parent's key and its tokens.
func chainKey(parent uint64, tokens []int32) uint64 {
	h := uint64(fnvOffset)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	for _, t := range tokens {
		u := uint32(t)
		for range 4 {
			h = (h ^ uint64(u&0xff)) * fnvPrime
			u >>= 8
		}
	}
	return h
}

// hotFind returns the hot block holding the block with this key and contents.
func (p *Pool) hotFind(key, parent uint64, salt string, tokens []int32) (BlockID, bool) {
	b, ok := p.hot[key]
	if !ok || !p.blocks[b].matches(parent, salt, tokens) {
		return 0, false
	}
	return b, true
}

// Peek returns how many leading tokens of tokens (whole blocks) the cache holds for
// salt, hot or warm, without changing anything: for cache-affine routing. Unlike the
// other methods, it may be called from any goroutine.
func (p *Pool) Peek(salt string, tokens []int32) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	parent, n := rootKey(salt), 0
	for n+p.bt <= len(tokens) {
		toks := tokens[n : n+p.bt]
		key := chainKey(parent, toks)
		if _, ok := p.hotFind(key, parent, salt, toks); !ok && (p.warm == nil || p.warm.find(key, parent, salt, toks) == nil) {
			break
		}
		parent, n = key, n+p.bt
	}
	return n
}

// lookup takes a reference on each block of the longest cached prefix of tokens
// (whole blocks, limit tokens at most) for salt, replaying warm blocks into fresh hot
// ones, and returns the blocks and their keys.
func (p *Pool) lookup(salt string, tokens []int32, limit int) ([]BlockID, []uint64) {
	var blocks []BlockID
	var keys []uint64
	parent := rootKey(salt)
	for n := 0; n+p.bt <= min(len(tokens), limit); n += p.bt {
		toks := tokens[n : n+p.bt]
		key := chainKey(parent, toks)
		if b, ok := p.hotFind(key, parent, salt, toks); ok {
			blk := &p.blocks[b]
			if blk.ref == 0 {
				p.lru.Remove(blk.elem)
				blk.elem = nil
			}
			blk.ref++
			blocks, keys, parent = append(blocks, b), append(keys, key), key
			continue
		}
		if p.warm == nil {
			break
		}
		we := p.warm.find(key, parent, salt, toks)
		if we == nil {
			break
		}
		b, ok := p.replay(we)
		if !ok {
			break
		}
		blocks, keys, parent = append(blocks, b), append(keys, key), key
	}
	p.stats.lookups.Add(1)
	hit := len(blocks) * p.bt
	p.stats.hitTokens.Add(uint64(hit))
	p.stats.missTokens.Add(uint64(len(tokens) - hit))
	p.gauges()
	return blocks, keys
}

// replay copies a warm block back into a fresh hot block, referenced once.
func (p *Pool) replay(we *warmEntry) (BlockID, bool) {
	p.mu.Lock()
	p.warm.take(we)
	p.mu.Unlock()
	b, err := p.Alloc()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.warm.restore(we)
		return 0, false
	}
	copy(p.data(b), p.warm.slot(we.slot))
	p.warm.release(we)
	p.cache(b, we.entry)
	p.stats.replays.Add(1)
	return b, true
}

// cache puts referenced block b into the hot tier under e; p.mu is held.
func (p *Pool) cache(b BlockID, e entry) {
	blk := &p.blocks[b]
	blk.entry = e
	blk.cached = true
	p.hot[e.key] = b
}

// publish enters referenced, full block b into the prefix cache. It reports false
// when the cache holds the same contents already in another hot block (b stays
// private then).
func (p *Pool) publish(b BlockID, key, parent uint64, salt string, tokens []int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocks[b].cached {
		return p.blocks[b].key == key
	}
	if _, ok := p.hot[key]; ok {
		return false
	}
	if p.warm != nil {
		if we := p.warm.index[key]; we != nil {
			p.warm.remove(we) // superseded by the hot copy
		}
	}
	p.cache(b, entry{key: key, parent: parent, salt: salt, tokens: append([]int32(nil), tokens...)})
	p.gauges()
	return true
}
