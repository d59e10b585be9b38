package kvcache

import "container/list"

// warm is the warm tier: a compact host-memory area of fixed-size slots, one per
// demoted block, holding the block's K/V floats bit for bit, LRU among the slots.
type warm struct {
	data  []uint16 // slots × block floats
	bfl   int
	free  []int
	index map[uint64]*warmEntry
	lru   *list.List // *warmEntry, least recently used at the front
}

type warmEntry struct {
	entry
	slot int
	elem *list.Element
}

func newWarm(data []uint16, slots, bfl int) *warm {
	w := &warm{data: data, bfl: bfl, index: map[uint64]*warmEntry{}, lru: list.New()}
	for i := slots - 1; i >= 0; i-- {
		w.free = append(w.free, i)
	}
	return w
}

func (w *warm) slots() int { return len(w.data) / w.bfl }

func (w *warm) slot(i int) []uint16 { return w.data[i*w.bfl : (i+1)*w.bfl : (i+1)*w.bfl] }

// put stores a demoted block, dropping the least recently used warm block if there is
// no free slot. It reports false when there is no room at all (the block is dropped).
func (w *warm) put(e entry, src []uint16, st *counters) bool {
	if old, ok := w.index[e.key]; ok { // the same key again: the newer contents win
		w.remove(old)
	}
	if len(w.free) == 0 {
		front := w.lru.Front()
		if front == nil {
			return false
		}
		w.remove(front.Value.(*warmEntry))
		st.evictions.Add(1)
	}
	i := w.free[len(w.free)-1]
	w.free = w.free[:len(w.free)-1]
	copy(w.slot(i), src)
	we := &warmEntry{entry: e, slot: i}
	we.elem = w.lru.PushBack(we)
	w.index[e.key] = we
	return true
}

// find returns the warm entry for key if its contents are what the key stands for.
func (w *warm) find(key, parent uint64, salt string, tokens []int32) *warmEntry {
	we := w.index[key]
	if we == nil || !we.matches(parent, salt, tokens) {
		return nil
	}
	return we
}

// take removes an entry from the index and the LRU list but keeps its slot until
// release, so that making room for its replay cannot overwrite it.
func (w *warm) take(we *warmEntry) {
	w.lru.Remove(we.elem)
	delete(w.index, we.key)
}

func (w *warm) release(we *warmEntry) { w.free = append(w.free, we.slot) }

// restore undoes take (the replay found no hot block).
func (w *warm) restore(we *warmEntry) {
	we.elem = w.lru.PushFront(we)
	w.index[we.key] = we
}

func (w *warm) remove(we *warmEntry) {
	w.take(we)
	w.release(we)
}
