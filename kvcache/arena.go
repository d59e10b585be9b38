package kvcache

import (
	"runtime"
	"sync"
)

// The pool's arena (and a warm tier in memory) is an anonymous mapping, not a Go
// slice: its pages are zero and are faulted in when a block is first written, so a
// pool of gigabytes costs nothing to allocate and nothing to zero, and its memory
// goes back to the system at Close. A Go slice of that size would be zeroed by the
// allocator whenever it reuses freed heap (a reload after an unload: tens of ms per
// GiB, every page touched) and would stay in the heap until the GC returns it.

// mapping is memory that Close (or, as a safety net, the garbage collector) unmaps
// once.
type mapping struct {
	once  sync.Once
	unmap func() error
	err   error
}

func (m *mapping) release() error {
	m.once.Do(func() {
		if m.unmap != nil {
			m.err = m.unmap()
		}
	})
	return m.err
}

// allocate returns n zero values of lazily faulted memory, and records its release
// on p (Close, or p becoming unreachable).
func (p *Pool) allocate(n int) []uint16 {
	data, unmap := anonMap(n)
	if unmap != nil {
		p.track(unmap)
	}
	return data
}

// track records a mapping for Close to release, and for the garbage collector to
// release if p becomes unreachable without Close (tests that drop their pools).
func (p *Pool) track(unmap func() error) {
	m := &mapping{unmap: unmap}
	p.mappings = append(p.mappings, m)
	runtime.AddCleanup(p, func(m *mapping) { m.release() }, m)
}
