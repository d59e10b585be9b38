package worker

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/lease"
)

// Devices reports the devices the models lease memory on, for /admin/devices and the
// device metrics, as engine.Block.Devices does: each device of the capacity table
// with its memory (read in the parent), and the live leases that the running workers
// report (each worker's Block.Devices, over the socket), merged. With Redis every
// worker sees every process's leases, so they are merged by holder; without it each
// worker leases in its own table against the whole budget, so the leased bytes of
// several workers may add up to more than the budget (the report shows it). A
// worker that is stopped holds no lease; one that dies while asked is left out.
func (p *Pool) Devices(ctx context.Context) ([]api.DeviceStatus, error) {
	budgets := maps.Clone(p.cfg.Devices)
	switch {
	case p.cfg.MemoryBudget > 0: // each worker's, as their Blocks take it
		budgets[lease.HostDevice] = p.cfg.MemoryBudget
	case budgets[lease.HostDevice] <= 0:
		budgets[lease.HostDevice], _ = lease.HostBudget(0)
	}
	base, err := api.ReportDevices(ctx, budgets, &lease.Memory{}, time.Now(), "")
	if err != nil {
		return nil, err
	}
	var reports [][]api.DeviceStatus
	for _, g := range p.groups {
		g.mu.Lock()
		pr, running := g.proc, g.state == gRunning
		g.mu.Unlock()
		if !running {
			continue
		}
		c, _, err := pr.begin(fDevices, nil, nil)
		if err == nil {
			select {
			case err = <-c.answer:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if errors.Is(err, api.ErrRestarting) {
			continue // it died meanwhile: its leases went with it (or expire)
		}
		if err != nil {
			return nil, err
		}
		reports = append(reports, c.devs)
	}
	return mergeDevices(base, reports), nil
}

// mergeDevices adds the workers' reports' leases to base (the parent's view of each
// device, without leases): a lease reported by several workers (a shared store)
// counts once, local if any worker holds it; Leased is the sum of the merged leases.
func mergeDevices(base []api.DeviceStatus, reports [][]api.DeviceStatus) []api.DeviceStatus {
	out := slices.Clone(base)
	index := map[string]int{}
	for i, d := range out {
		index[d.ID] = i
		out[i].Leases, out[i].Leased = []api.DeviceLease{}, 0
	}
	for _, r := range reports {
		for _, d := range r {
			i, ok := index[d.ID]
			if !ok { // a device the parent does not know: the worker's view of it
				i = len(out)
				index[d.ID] = i
				nd := d
				nd.Leases, nd.Leased = []api.DeviceLease{}, 0
				out = append(out, nd)
			}
		leases:
			for _, l := range d.Leases {
				for j, m := range out[i].Leases {
					if m.Holder == l.Holder {
						out[i].Leases[j].Local = m.Local || l.Local
						continue leases
					}
				}
				out[i].Leases = append(out[i].Leases, l)
				out[i].Leased += l.Bytes
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Leases, func(a, b api.DeviceLease) int { return cmp.Compare(a.Holder, b.Holder) })
	}
	slices.SortFunc(out, func(a, b api.DeviceStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
