package engine

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
)

// This file is a model's LoRA adapters (ModelConfig.Adapters): checked at New,
// loaded on demand while the model is loaded, named by requests (Request.Adapters).
// A request's adapters become its sequence's model.Item.LoRA; its prefix-cache salt
// gets each adapter's tag, so that cached blocks are only reused under the same
// adapters (their K and V rows are the adapted model's).
//
// Lifecycle: an adapter loads on the first request that names it (or the admin's
// LoadAdapter), within the model's AdapterMemory: adapterRoom decides which idle
// adapters to unload first, least recently used first; a request that cannot get
// room (every loaded adapter busy) is refused with ErrNoMemory. An adapter no
// request used for the model's idle timeout is unloaded by the janitor
// (idleAdapters); all are unloaded with the model. The decisions are pure
// functions of the adapters' uses and an explicit time; the instance's mu guards
// the slots they apply to.

// adapterSlot is one configured adapter of a model.
type adapterSlot struct {
	cfg  AdapterConfig
	size int64  // its file's size: what it costs loaded
	tag  string // its prefix-cache salt

	// Guarded by the instance's mu.
	lora     model.LoRA // Adapter nil: not loaded
	active   int        // requests in flight that apply it
	lastUsed time.Time
	loads    uint64
	unloads  uint64
}

// adapterUse is an adapter's state for the decisions.
type adapterUse struct {
	ID       string
	Loaded   bool
	Active   int
	LastUsed time.Time
	Bytes    int64
}

// adapterRoom decides which loaded adapters to unload so that the adapters need
// (loaded or not) fit in budget bytes beside the others loaded: idle ones not in
// need, least recently used first (ties by id). ok is false when unloading every
// such adapter does not free the room.
func adapterRoom(uses []adapterUse, need []string, budget int64) (evict []string, ok bool) {
	var used int64
	var idle []adapterUse
	for _, u := range uses {
		in := slices.Contains(need, u.ID)
		switch {
		case in:
			used += u.Bytes
		case u.Loaded:
			used += u.Bytes
			if u.Active == 0 {
				idle = append(idle, u)
			}
		}
	}
	slices.SortFunc(idle, func(a, b adapterUse) int {
		return cmp.Or(a.LastUsed.Compare(b.LastUsed), strings.Compare(a.ID, b.ID))
	})
	for _, u := range idle {
		if used <= budget {
			break
		}
		evict = append(evict, u.ID)
		used -= u.Bytes
	}
	return evict, used <= budget
}

// idleAdapters are the loaded adapters no request has used for timeout at now
// (timeout < 0: never).
func idleAdapters(uses []adapterUse, now time.Time, timeout time.Duration) []string {
	if timeout < 0 {
		return nil
	}
	var out []string
	for _, u := range uses {
		if u.Loaded && u.Active == 0 && now.Sub(u.LastUsed) >= timeout {
			out = append(out, u.ID)
		}
	}
	return out
}

// checkAdapters validates a model's adapter configuration at New: ids present and
// unique, each file an adapter of the model's architecture (the tensors are checked
// when it loads), each within the adapter budget. It returns the slots and the
// bytes the model leases for adapters (ModelConfig.AdapterMemory, or all of them).
func checkAdapters(mc ModelConfig, arch string) (map[string]*adapterSlot, []string, int64, error) {
	var total int64
	slots := map[string]*adapterSlot{}
	var order []string
	for _, ac := range mc.Adapters {
		if ac.ID == "" {
			return nil, nil, 0, configErrorf("engine: model %s: an adapter has no id (path %q)", mc.ID, ac.Path)
		}
		if _, dup := slots[ac.ID]; dup {
			return nil, nil, 0, configErrorf("engine: model %s: adapter id %q configured twice", mc.ID, ac.ID)
		}
		f, err := gguf.Open(ac.Path)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("engine: model %s: adapter %s: %w", mc.ID, ac.ID, err)
		}
		err = model.CheckAdapterHeader(f, arch)
		size := f.Size()
		f.Close()
		if err != nil {
			return nil, nil, 0, fmt.Errorf("engine: model %s: adapter %s: %w", mc.ID, ac.ID, err)
		}
		if mc.AdapterMemory > 0 && size > mc.AdapterMemory {
			return nil, nil, 0, configErrorf("engine: model %s: adapter %s: its %d bytes are more than adapter_memory %d", mc.ID, ac.ID, size, mc.AdapterMemory)
		}
		total += size
		// The file (path, size, modification time) and the scale: what the blocks'
		// bits depend on, so that a warm file never replays another adapter's blocks.
		var mod int64
		if fi, err := os.Stat(ac.Path); err == nil {
			mod = fi.ModTime().UnixNano()
		}
		slots[ac.ID] = &adapterSlot{cfg: ac, size: size,
			tag: fmt.Sprintf("%s size=%d mtime=%d scale=%g", ac.Path, size, mod, adapterScale(ac))}
		order = append(order, ac.ID)
	}
	if mc.AdapterMemory > 0 {
		total = min(total, mc.AdapterMemory)
	}
	return slots, order, total, nil
}

// adapterScale is an adapter's user scale: its Scale, 1 when 0.
func adapterScale(ac AdapterConfig) float32 {
	if ac.Scale == 0 {
		return 1
	}
	return ac.Scale
}

// adapterUsesLocked is the decisions' view of the model's adapters.
func (in *instance) adapterUsesLocked() []adapterUse {
	out := make([]adapterUse, 0, len(in.adapterIDs))
	for _, id := range in.adapterIDs {
		s := in.adapters[id]
		out = append(out, adapterUse{ID: id, Loaded: s.lora.Adapter != nil, Active: s.active, LastUsed: s.lastUsed, Bytes: s.size})
	}
	return out
}

// loadedAdapterBytesLocked is the bytes of the model's loaded adapters.
func (in *instance) loadedAdapterBytesLocked() int64 {
	var n int64
	for _, s := range in.adapters {
		if s.lora.Adapter != nil {
			n += s.size
		}
	}
	return n
}

// acquireAdaptersLocked loads the adapters ids that are not loaded (first
// unloading idle ones for room, as adapterRoom decides) and counts a request in
// each; releaseAdapters undoes the count. The model must be loaded and in.mu held.
func (in *instance) acquireAdaptersLocked(m *model.Model, ids []string, now time.Time) ([]model.LoRA, error) {
	evict, ok := adapterRoom(in.adapterUsesLocked(), ids, in.adapterBudget)
	if !ok {
		return nil, fmt.Errorf("%w: model %s: the adapters %v do not fit in adapter_memory (%d bytes) beside the adapters in use", ErrNoMemory, in.cfg.ID, ids, in.adapterBudget)
	}
	for _, id := range evict {
		in.unloadAdapterLocked(id, "room for "+strings.Join(ids, ","))
	}
	for _, id := range ids {
		s := in.adapters[id]
		if s.lora.Adapter != nil {
			continue
		}
		a, err := m.OpenAdapter(s.cfg.Path)
		if err != nil {
			return nil, fmt.Errorf("engine: model %s: adapter %s: %w", in.cfg.ID, id, err)
		}
		s.lora = model.LoRA{Adapter: a, Scale: adapterScale(s.cfg)}
		s.loads++
		in.log.Info("adapter loaded", "adapter", id, "bytes", s.size)
	}
	loras := make([]model.LoRA, 0, len(ids))
	for _, id := range ids {
		s := in.adapters[id]
		s.active++
		s.lastUsed = now
		loras = append(loras, s.lora)
	}
	return loras, nil
}

// releaseAdapters ends a request's use of its adapters at now.
func (in *instance) releaseAdapters(ids []string, now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, id := range ids {
		s := in.adapters[id]
		s.active--
		s.lastUsed = now
	}
}

// unloadAdapterLocked unloads a loaded adapter no request uses.
func (in *instance) unloadAdapterLocked(id, reason string) {
	s := in.adapters[id]
	if s.lora.Adapter == nil || s.active > 0 {
		return
	}
	s.lora.Adapter.Close()
	s.lora = model.LoRA{}
	s.unloads++
	in.log.Info("adapter unloaded", "adapter", id, "reason", reason)
}

// unloadAdaptersLocked unloads every adapter (the model unloads; no request is in
// flight).
func (in *instance) unloadAdaptersLocked() {
	for _, id := range in.adapterIDs {
		in.unloadAdapterLocked(id, "model unloaded")
	}
}

// sweepAdapters unloads the adapters idle for their model's idle timeout at now
// (the janitor's pass).
func (b *Block) sweepAdapters(now time.Time) {
	for _, id := range b.order {
		in := b.models[id]
		if len(in.adapterIDs) == 0 || in.life.state != StateReady {
			continue
		}
		in.mu.Lock()
		for _, a := range idleAdapters(in.adapterUsesLocked(), now, in.cfg.IdleTimeout) {
			in.unloadAdapterLocked(a, "idle")
		}
		in.mu.Unlock()
	}
}

// saltAdapters refuses a request naming an adapter the model does not have and
// adds its adapters' tags to its prefix-cache salt.
func (in *instance) saltAdapters(req *Request) error {
	if len(req.Adapters) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(req.CacheSalt)
	for _, id := range req.Adapters {
		s, ok := in.adapters[id]
		if !ok {
			return fmt.Errorf("%w: %q (model %s)", ErrUnknownAdapter, id, in.cfg.ID)
		}
		b.WriteString("\x00lora\x00")
		b.WriteString(s.tag)
	}
	req.CacheSalt = b.String()
	return nil
}

// submit hands a job to a replica of the loaded model, with its adapters (loaded
// now if they are not). The model stays loaded while the job is in flight, and its
// adapters with it; the job's finish releases them.
func (in *instance) submit(req Request, j *job, h *replicaSet) {
	if len(req.Adapters) > 0 {
		in.mu.Lock()
		loras, err := in.acquireAdaptersLocked(h.model, req.Adapters, in.b.now())
		in.mu.Unlock()
		if err != nil {
			u := j.u
			j.finish(u, err)
			return
		}
		j.loras = loras
	}
	in.pick(req, h).submit(j)
}

// Adapters reports every model's adapters, in configuration order.
func (b *Block) Adapters() []AdapterStatus {
	var out []AdapterStatus
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		for _, aid := range in.adapterIDs {
			s := in.adapters[aid]
			st := AdapterStatus{ID: aid, Model: id, State: AdapterUnloaded, Bytes: s.size, Active: s.active,
				Loads: s.loads, Unloads: s.unloads, LastUsed: s.lastUsed}
			if s.lora.Adapter != nil {
				st.State = AdapterLoaded
			}
			out = append(out, st)
		}
		in.mu.Unlock()
	}
	return out
}

// adapterOf finds the model and slot of an adapter id.
func (b *Block) adapterOf(modelID, id string) (*instance, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	if _, ok := in.adapters[id]; !ok {
		return nil, fmt.Errorf("%w: %q (model %s)", ErrUnknownAdapter, id, modelID)
	}
	return in, nil
}

// LoadAdapter loads a model's adapter (and the model, if it is not loaded), as a
// request naming it would, and waits until it is.
func (b *Block) LoadAdapter(ctx context.Context, modelID, id string) error {
	in, err := b.adapterOf(modelID, id)
	if err != nil {
		return err
	}
	// Counted as a request while it loads, so that the model is not unloaded under it.
	g := b.begin(in, 1, true)
	if g.err != nil {
		return g.err
	}
	defer func() { b.end(endMsg{in: in, n: 1, now: b.now()}) }()
	h := g.h
	if h == nil {
		if h, _, err = await(ctx, g.la); err != nil {
			return err
		}
	}
	in.mu.Lock()
	_, err = in.acquireAdaptersLocked(h.model, []string{id}, b.now())
	in.mu.Unlock()
	if err != nil {
		return err
	}
	in.releaseAdapters([]string{id}, b.now())
	return nil
}

// UnloadAdapter unloads a model's adapter now if no request is using it.
func (b *Block) UnloadAdapter(modelID, id string) error {
	in, err := b.adapterOf(modelID, id)
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if s := in.adapters[id]; s.active > 0 {
		return fmt.Errorf("%w: %s of model %s has %d requests in flight", ErrAdapterBusy, id, modelID, s.active)
	}
	in.unloadAdapterLocked(id, "unload asked")
	return nil
}
