package engine

import (
	"fmt"
	"os"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
)

// This file is a model's LoRA adapters (ModelConfig.Adapters): checked at New,
// loaded and unloaded with the model, named by requests (Request.Adapters). A
// request's adapters become its sequence's model.Item.LoRA; its prefix-cache salt
// gets each adapter's tag, so that cached blocks are only reused under the same
// adapters (their K and V rows are the adapted model's).

// checkAdapters validates a model's adapter configuration at New: ids present and
// unique, each file an adapter of the model's architecture (the tensors are checked
// when the model loads). It returns the files' total size (they are mapped with the
// model) and each adapter's prefix-cache tag.
func checkAdapters(mc ModelConfig, arch string) (int64, map[string]string, error) {
	var bytes int64
	tags := map[string]string{}
	for _, ac := range mc.Adapters {
		if ac.ID == "" {
			return 0, nil, fmt.Errorf("engine: model %s: an adapter has no id (path %q)", mc.ID, ac.Path)
		}
		if _, dup := tags[ac.ID]; dup {
			return 0, nil, fmt.Errorf("engine: model %s: adapter id %q configured twice", mc.ID, ac.ID)
		}
		f, err := gguf.Open(ac.Path)
		if err != nil {
			return 0, nil, fmt.Errorf("engine: model %s: adapter %s: %w", mc.ID, ac.ID, err)
		}
		err = model.CheckAdapterHeader(f, arch)
		size := f.Size()
		f.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("engine: model %s: adapter %s: %w", mc.ID, ac.ID, err)
		}
		bytes += size
		// The file (path, size, modification time) and the scale: what the blocks'
		// bits depend on, so that a warm file never replays another adapter's blocks.
		var mod int64
		if fi, err := os.Stat(ac.Path); err == nil {
			mod = fi.ModTime().UnixNano()
		}
		tags[ac.ID] = fmt.Sprintf("%s size=%d mtime=%d scale=%g", ac.Path, size, mod, adapterScale(ac))
	}
	return bytes, tags, nil
}

// adapterScale is an adapter's user scale: its Scale, 1 when 0.
func adapterScale(ac AdapterConfig) float32 {
	if ac.Scale == 0 {
		return 1
	}
	return ac.Scale
}

// loadAdapters loads a model's adapters over m.
func loadAdapters(m *model.Model, cfgs []AdapterConfig) (map[string]model.LoRA, error) {
	if len(cfgs) == 0 {
		return nil, nil
	}
	ads := map[string]model.LoRA{}
	for _, ac := range cfgs {
		a, err := m.OpenAdapter(ac.Path)
		if err != nil {
			closeAdapters(ads)
			return nil, fmt.Errorf("adapter %s: %w", ac.ID, err)
		}
		ads[ac.ID] = model.LoRA{Adapter: a, Scale: adapterScale(ac)}
	}
	return ads, nil
}

// closeAdapters releases loaded adapters.
func closeAdapters(ads map[string]model.LoRA) {
	for _, l := range ads {
		l.Adapter.Close()
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
		tag, ok := in.adapterTags[id]
		if !ok {
			return fmt.Errorf("%w: %q (model %s)", ErrUnknownAdapter, id, in.cfg.ID)
		}
		b.WriteString("\x00lora\x00")
		b.WriteString(tag)
	}
	req.CacheSalt = b.String()
	return nil
}

// submit hands a job to a replica of the loaded model, with its adapters. The
// model stays loaded while the job is in flight, and its adapters with it.
func (in *instance) submit(req Request, j *job) {
	if len(req.Adapters) > 0 {
		in.mu.Lock()
		for _, id := range req.Adapters {
			j.loras = append(j.loras, in.adapters[id])
		}
		in.mu.Unlock()
	}
	in.pick(req).submit(j)
}
