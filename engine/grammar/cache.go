package grammar

import "sync"

// maxCached bounds a SchemaCache; it is emptied when full.
const maxCached = 256

// SchemaCache compiles JSON schemas once: the same text returns the same Grammar. Its
// zero value is ready; it is safe for concurrent use. The engine's Block and the
// worker pool's parent side each keep one.
type SchemaCache struct {
	mu sync.Mutex // guards m
	m  map[string]*Grammar
}

// Compile is CompileSchema through the cache.
func (c *SchemaCache) Compile(schema []byte) (*Grammar, error) {
	c.mu.Lock()
	g, ok := c.m[string(schema)]
	c.mu.Unlock()
	if ok {
		return g, nil
	}
	g, err := CompileSchema(schema)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCached {
		c.m = map[string]*Grammar{}
	}
	c.m[string(schema)] = g
	c.mu.Unlock()
	return g, nil
}

// maskCache holds a vocabulary's masks by grammar and state. Each grammar's masks
// are a map of their own, bounded by perGrammar bytes: a grammar that fills its share
// empties its own map, never another grammar's, so one tenant's fresh schemas cannot
// flush the masks the others' steps rely on. All of them together are bounded by
// limit bytes: past it, the grammar used least recently is dropped whole. It is
// safe for concurrent use.
type maskCache struct {
	mu           sync.Mutex // guards all below
	grammars     map[string]*grammarMasks
	bytes        int // the masks' and keys' bytes, all grammars
	limit        int
	perGrammar   int
	clock        uint64 // lookups so far: a grammar's last use, for eviction
	hits, misses uint64
}

// grammarMasks are one grammar's cached masks, keyed by the matcher's state.
type grammarMasks struct {
	m     map[string]mask
	bytes int
	used  uint64 // the clock at its last lookup
}

// MaskCacheStats describes a Vocab's mask cache.
type MaskCacheStats struct {
	Hits, Misses uint64 // lookups since the Vocab was made
	Grammars     int    // grammars with masks cached
	Masks        int    // masks cached, all grammars
	Bytes        int    // their size (bit sets and keys)
}

func newMaskCache(limit int) *maskCache {
	return &maskCache{grammars: map[string]*grammarMasks{}, limit: limit, perGrammar: max(limit/4, 1)}
}

// get returns grammar g's mask of state, if cached. It does not allocate.
func (c *maskCache) get(g string, state []byte) (mask, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	if gm := c.grammars[g]; gm != nil {
		gm.used = c.clock
		if e, ok := gm.m[string(state)]; ok {
			c.hits++
			return e, true
		}
	}
	c.misses++
	return mask{}, false
}

// put caches grammar g's mask of state.
func (c *maskCache) put(g string, state []byte, e mask) {
	size := len(e.bits)*8 + len(state)
	if size > c.perGrammar {
		return // larger than a grammar's share: never cached
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gm := c.grammars[g]
	if gm == nil {
		gm = &grammarMasks{m: map[string]mask{}}
		c.grammars[g] = gm
	}
	gm.used = c.clock
	if _, ok := gm.m[string(state)]; ok {
		return // another matcher found it meanwhile
	}
	if gm.bytes+size > c.perGrammar {
		c.bytes -= gm.bytes
		clear(gm.m)
		gm.bytes = 0
	}
	for c.bytes+size > c.limit {
		c.evictLocked(g)
	}
	gm.m[string(state)] = e
	gm.bytes += size
	c.bytes += size
}

// evictLocked drops the masks of the grammar used least recently other than keep
// (keep's own when it is the only one).
func (c *maskCache) evictLocked(keep string) {
	var victim string
	var oldest uint64
	found := false
	for k, gm := range c.grammars {
		if k != keep && (!found || gm.used < oldest) {
			victim, oldest, found = k, gm.used, true
		}
	}
	if !found {
		victim = keep
	}
	gm := c.grammars[victim]
	c.bytes -= gm.bytes
	if victim == keep {
		clear(gm.m)
		gm.bytes = 0
		return
	}
	delete(c.grammars, victim)
}

func (c *maskCache) stats() MaskCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := MaskCacheStats{Hits: c.hits, Misses: c.misses, Grammars: len(c.grammars), Bytes: c.bytes}
	for _, gm := range c.grammars {
		s.Masks += len(gm.m)
	}
	return s
}
