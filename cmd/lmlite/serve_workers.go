package main

import (
	"context"
	"io"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/worker"
	"github.com/lmlite/lmlite/gateway"
)

// newWorkersEngine is the engine of `engine: {mode: workers}`: the models run in
// child `lmlite worker` processes (this executable), grouped by worker_group, with
// their pid files under the data directory.
func newWorkersEngine(cfg *configs.Config, cfgs []engine.ModelConfig, memBudget int64) (gateway.Engine, error) {
	p, err := worker.New(worker.Config{Models: cfgs, Groups: cfg.WorkerGroups(), DataDir: cfg.DataDir,
		MemoryBudget: memBudget, Logger: engineLogger()})
	if err != nil {
		return nil, err
	}
	return poolEngine{p}, nil
}

// poolEngine is the workers mode as the gateway sees it, as blockEngine is the
// in-process one.
type poolEngine struct{ *worker.Pool }

var (
	_ gateway.ModelLoader  = poolEngine{}
	_ gateway.Features     = poolEngine{}
	_ prometheus.Collector = poolEngine{}
	_ io.Closer            = poolEngine{}
)

// Load starts the model's worker if it must and returns when the model is ready.
func (e poolEngine) Load(modelID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	return e.Pool.Load(ctx, modelID)
}
