package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/gateway"
)

// The embedded engine and the demo models of `lmlite serve`.
func init() {
	demoModels = generateDemoModels
	newEngine = func(cfgs []engine.ModelConfig, memBudget int64) (gateway.Engine, error) {
		b, err := engine.New(engine.Config{Models: cfgs, MemoryBudget: memBudget, Logger: quietLogger()})
		if err != nil {
			return nil, err
		}
		return blockEngine{b}, nil
	}
}

// loadTimeout bounds an admin load: the file is mapped and warmed up with one forward
// pass, which takes seconds even for large models.
const loadTimeout = 10 * time.Minute

// blockEngine is the embedded engine as the gateway sees it: the Block with the
// admin API's gateway.ModelLoader (whose Load has no context; the Block's waits with
// one). The Block's other methods, its prometheus.Collector and io.Closer included,
// are promoted.
type blockEngine struct{ *engine.Block }

var (
	_ gateway.ModelLoader  = blockEngine{}
	_ prometheus.Collector = blockEngine{}
	_ io.Closer            = blockEngine{}
)

// Load loads the model (if it is not loaded) and returns when it is ready.
func (e blockEngine) Load(modelID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	return e.Block.Load(ctx, modelID)
}

// demoSpecs are the demo models: small generated models (seeded, so every data
// directory gets the same files), the first on the Fast tier, the second above it.
var demoSpecs = []struct {
	id   string
	opts genmodel.Options
}{
	{"demo-fast", genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}},
	{"demo-balanced", genmodel.Options{Arch: "qwen3", Preset: "tiny", Type: "q4_k_m", Seed: 2}},
}

// generateDemoModels writes the demo models into dataDir/models unless they are there.
func generateDemoModels(dataDir string) ([]engine.ModelConfig, error) {
	dir := filepath.Join(dataDir, "models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []engine.ModelConfig
	for _, d := range demoSpecs {
		path := filepath.Join(dir, d.id+".gguf")
		if _, err := os.Stat(path); err != nil {
			fmt.Fprintf(os.Stderr, "generating demo model %s (%s %s %s) into %s\n", d.id, d.opts.Arch, d.opts.Preset, d.opts.Type, path)
			if err := genmodel.Generate(d.opts, path); err != nil {
				return nil, err
			}
		}
		out = append(out, engine.ModelConfig{ID: d.id, Path: path, MaxModelLen: 2048, Replicas: 1})
	}
	return out, nil
}
