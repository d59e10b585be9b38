package main

import (
	"os"
	"runtime"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/worker"
)

func init() {
	register("worker", "serve models in a child process of `serve` (engine mode workers; not typed by hand)", workerMain)
}

// workerMain is `lmlite worker`: engine/worker's Main serving an engine.Block (the
// worker package does not import the engine; the program joins them).
// A worker loads Q4_K plain (model.PackQ4KDefault): its plain matrices are the
// page cache the workers share, where a packed copy would be each worker's own.
func workerMain(args []string) error {
	model.PackQ4K = model.PackQ4KDefault(runtime.GOOS, true, os.Getenv(model.EnvPackQ4K))
	return worker.Main(args, newWorkerBlock)
}

// newWorkerBlock is engine.New as a worker's Block.
func newWorkerBlock(cfg engine.Config) (worker.Block, error) {
	b, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// openPrep is engine.OpenPrep as a worker Pool's Prep (worker.Config.OpenPrep).
func openPrep(mc engine.ModelConfig) (worker.Prep, error) {
	p, err := engine.OpenPrep(mc)
	if err != nil {
		return nil, err
	}
	return p, nil
}
