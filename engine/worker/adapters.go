package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/lmlite/lmlite/engine/api"
)

// LoRA adapters in the workers mode: the Pool loads, unloads and reports a model's
// adapters in the worker that runs the model (the Block's LoadAdapter,
// UnloadAdapter and Adapters over the socket: fLoadAdapter, fUnloadAdapter,
// fAdapters), so the gateway's admin API acts on them as on the Block in process.

// adapterOf checks that the model has the adapter in its configuration.
func (p *Pool) adapterOf(modelID, id string) (*pmodel, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	if !slices.ContainsFunc(m.cfg.Adapters, func(a api.AdapterConfig) bool { return a.ID == id }) {
		return nil, fmt.Errorf("%w: %q (model %s)", api.ErrUnknownAdapter, id, modelID)
	}
	return m, nil
}

// LoadAdapter loads the model's adapter in its worker (starting the worker, and
// loading the model, if need be), as a request naming it would, and waits until it
// is loaded.
func (p *Pool) LoadAdapter(ctx context.Context, modelID, id string) error {
	m, err := p.adapterOf(modelID, id)
	if err != nil {
		return err
	}
	pr, _, err := m.g.acquire(ctx, modelID)
	if err != nil {
		return err
	}
	defer m.g.release(modelID)
	return pr.rpcMsg(ctx, fLoadAdapter, modelMsg{Model: modelID, Adapter: id})
}

// UnloadAdapter unloads the model's adapter in its worker, if the worker runs (a
// stopped worker holds nothing). api.ErrAdapterBusy: requests are using it.
func (p *Pool) UnloadAdapter(modelID, id string) error {
	m, err := p.adapterOf(modelID, id)
	if err != nil {
		return err
	}
	m.g.mu.Lock()
	pr, running := m.g.proc, m.g.state == gRunning
	m.g.mu.Unlock()
	if !running {
		return nil
	}
	return pr.rpcMsg(context.Background(), fUnloadAdapter, modelMsg{Model: modelID, Adapter: id})
}

// adaptersTimeout bounds the wait for a running worker's adapters report.
const adaptersTimeout = 5 * time.Second

// Adapters reports every model's adapters in configuration order: a running
// worker's as its Block reports them; a stopped worker's (or one that does not
// answer within adaptersTimeout) as unloaded, at their files' sizes.
func (p *Pool) Adapters() []api.AdapterStatus {
	ctx, cancel := context.WithTimeout(context.Background(), adaptersTimeout)
	defer cancel()
	reported := map[*group]map[string]api.AdapterStatus{}
	var out []api.AdapterStatus
	for _, id := range p.order {
		m := p.models[id]
		if len(m.cfg.Adapters) == 0 {
			continue
		}
		rep, asked := reported[m.g]
		if !asked {
			rep = p.askAdapters(ctx, m.g)
			reported[m.g] = rep
		}
		for _, ac := range m.cfg.Adapters {
			st, ok := rep[id+"\x00"+ac.ID]
			if !ok {
				st = api.AdapterStatus{ID: ac.ID, Model: id, State: api.AdapterUnloaded}
				if fi, err := os.Stat(ac.Path); err == nil {
					st.Bytes = fi.Size()
				}
			}
			out = append(out, st)
		}
	}
	return out
}

// askAdapters is the adapters a running group's worker reports, by model and id;
// nil when it is not running or does not answer.
func (p *Pool) askAdapters(ctx context.Context, g *group) map[string]api.AdapterStatus {
	g.mu.Lock()
	pr, running := g.proc, g.state == gRunning
	g.mu.Unlock()
	if !running {
		return nil
	}
	c, _, err := pr.begin(fAdapters, nil, nil)
	if err == nil {
		select {
		case err = <-c.answer:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		if !errors.Is(err, api.ErrRestarting) {
			p.log.Warn("worker adapters report", "group", g.name, "error", err)
		}
		return nil
	}
	out := map[string]api.AdapterStatus{}
	for _, st := range c.adapters {
		out[st.Model+"\x00"+st.ID] = st
	}
	return out
}
