package main

import (
	"context"
	"io"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/worker"
	"github.com/lmlite/lmlite/gateway"
)

// newWorkersEngine is the engine of `engine: {mode: workers}`: the models run in
// child `lmlite worker` processes (this executable), grouped by worker_group, with
// their pid files under the data directory. With `redis:` the workers lease their
// models' memory in Redis (as the in-process engine does), each worker group as node
// NODE_ID/GROUP.
func newWorkersEngine(cfg *configs.Config, cfgs []engine.ModelConfig, memBudget int64, opts engineOptions) (gateway.Engine, error) {
	wc := worker.Config{Models: cfgs, OpenPrep: openPrep, Groups: cfg.WorkerGroups(), DataDir: cfg.DataDir,
		MemoryBudget: memBudget, Devices: opts.Devices, Logger: engineLogger()}
	if r := cfg.Redis; r != nil && opts.Leases != nil {
		wc.Redis = &worker.RedisLeases{URL: r.URL, KeyPrefix: r.KeyPrefix, Node: r.NodeID}
	}
	p, err := worker.New(wc)
	if err != nil {
		return nil, err
	}
	return poolEngine{p}, nil
}

// poolEngine is the workers mode as the gateway sees it, as blockEngine is the
// in-process one.
type poolEngine struct{ *worker.Pool }

var (
	_ gateway.ModelLoader   = poolEngine{}
	_ gateway.WorkerSource  = poolEngine{}
	_ gateway.Features      = poolEngine{}
	_ gateway.StatsSource   = poolEngine{}
	_ gateway.AdapterLoader = poolEngine{}
	_ gateway.AdapterSource = poolEngine{}
	_ io.Closer             = poolEngine{}
)

// Load starts the model's worker if it must and returns when the model is ready.
func (e poolEngine) Load(modelID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	return e.Pool.Load(ctx, modelID)
}
