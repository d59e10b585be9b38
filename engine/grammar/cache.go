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
