package kvcache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// A warm file outlives its pool: at Close the pool demotes its cached hot blocks into
// the warm tier and writes the warm tier's index (which slot holds which block, in
// LRU order) beside the file, in WarmFile + ".index"; the next pool on the same file
// and geometry (an unload and a reload, or a restart of the process) reads the index
// back, so a long system prompt cached before a scale to zero is replayed after it.
// The index is removed as soon as it is read: after a crash the file's slots may be
// half-written, and a pool that finds no index starts with an empty warm tier. The
// header names the geometry and Config.WarmFileTag (the model), so a file written for
// another model is never replayed.

const indexMagic = "lmlite-kv-warm-2\n"

func indexPath(warmFile string) string { return warmFile + ".index" }

// header is what a pool must match to read an index.
// The K and V types are part of it: the slots hold the blocks as the pool stores
// them (quantized, for a quantized cache), and a pool of other types must not read
// them.
type header struct {
	Layers, KVHeads, HeadDim, BlockTokens, Slots, TypeK, TypeV int64
}

func (p *Pool) header() header {
	return header{int64(p.cfg.Layers), int64(p.cfg.KVHeads), int64(p.cfg.HeadDim), int64(p.bt), int64(p.warm.slots()),
		int64(p.cfg.TypeK), int64(p.cfg.TypeV)}
}

// saveWarmIndex writes the warm tier's index, atomically (a temporary file renamed).
func (p *Pool) saveWarmIndex() error {
	path := indexPath(p.cfg.WarmFile)
	f, err := os.CreateTemp(dirOf(path), ".kv-warm-index-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriter(f)
	put := func(v any) { binary.Write(w, binary.LittleEndian, v) }
	putStr := func(s string) { put(uint32(len(s))); w.WriteString(s) }
	w.WriteString(indexMagic)
	putStr(p.cfg.WarmFileTag)
	put(p.header())
	put(uint32(p.warm.lru.Len()))
	for e := p.warm.lru.Front(); e != nil; e = e.Next() {
		we := e.Value.(*warmEntry)
		put(uint32(we.slot))
		put(we.key)
		put(we.parent)
		putStr(we.salt)
		put(uint32(len(we.tokens)))
		put(we.tokens)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// loadWarmIndex reads the index a previous pool left, if it fits this pool, into the
// (empty) warm tier, and removes it. It returns the number of blocks restored.
func (p *Pool) loadWarmIndex() (int, error) {
	path := indexPath(p.cfg.WarmFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	defer os.Remove(path)
	r := bufio.NewReader(f)
	var ferr error
	get := func(v any) {
		if ferr == nil {
			ferr = binary.Read(r, binary.LittleEndian, v)
		}
	}
	getStr := func() string {
		var n uint32
		get(&n)
		if ferr != nil || n > 1<<20 {
			ferr = cmpErr(ferr, "string too long")
			return ""
		}
		b := make([]byte, n)
		if ferr == nil {
			_, ferr = io.ReadFull(r, b)
		}
		return string(b)
	}
	magic := make([]byte, len(indexMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != indexMagic {
		return 0, fmt.Errorf("kvcache: %s is not a warm index", path)
	}
	tag := getStr()
	var h header
	get(&h)
	var n uint32
	get(&n)
	if ferr != nil {
		return 0, fmt.Errorf("kvcache: reading %s: %w", path, ferr)
	}
	if tag != p.cfg.WarmFileTag || h != p.header() {
		return 0, nil // another model's or another geometry's file: start empty
	}
	w := p.warm
	used := map[int]bool{}
	var entries []*warmEntry
	for range n {
		var slot, nt uint32
		var e entry
		get(&slot)
		get(&e.key)
		get(&e.parent)
		e.salt = getStr()
		get(&nt)
		if ferr == nil && (nt > uint32(p.bt) || int(slot) >= w.slots() || used[int(slot)]) {
			ferr = errors.New("entry out of range")
		}
		if ferr != nil {
			return 0, fmt.Errorf("kvcache: reading %s: %w", path, ferr)
		}
		e.tokens = make([]int32, nt)
		get(e.tokens)
		used[int(slot)] = true
		entries = append(entries, &warmEntry{entry: e, slot: int(slot)})
	}
	if ferr != nil {
		return 0, fmt.Errorf("kvcache: reading %s: %w", path, ferr)
	}
	w.free = w.free[:0]
	for i := w.slots() - 1; i >= 0; i-- {
		if !used[i] {
			w.free = append(w.free, i)
		}
	}
	for _, we := range entries {
		we.elem = w.lru.PushBack(we)
		w.index[we.key] = we
	}
	return len(entries), nil
}

func cmpErr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			return path[:i+1]
		}
	}
	return "."
}
