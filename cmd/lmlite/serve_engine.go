package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/gateway"
)

// newBlockEngine is the embedded engine of `lmlite serve` (engine: {mode:
// inprocess}): a Block serving the embedded models.
func newBlockEngine(cfgs []engine.ModelConfig, opts engineOptions) (gateway.Engine, error) {
	b, err := engine.New(engine.Config{Models: cfgs, MemoryBudget: opts.MemBudget, Devices: opts.Devices,
		Leases: opts.Leases, Logger: engineLogger()})
	if err != nil {
		return nil, err
	}
	return blockEngine{b}, nil
}

// loadTimeout bounds an admin load: the file is mapped and warmed up with one forward
// pass, which takes seconds even for large models.
const loadTimeout = 10 * time.Minute

// blockEngine is the embedded engine as the gateway sees it: the Block with the
// admin API's gateway.ModelLoader (whose Load has no context; the Block's waits with
// one). The Block's other methods, its Stats and io.Closer included,
// are promoted.
type blockEngine struct{ *engine.Block }

var (
	_ gateway.ModelLoader   = blockEngine{}
	_ gateway.AdapterLoader = blockEngine{}
	_ gateway.AdapterSource = blockEngine{}
	_ gateway.StatsSource   = blockEngine{}
	_ io.Closer             = blockEngine{}
)

// Load loads the model (if it is not loaded) and returns when it is ready.
func (e blockEngine) Load(modelID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	return e.Block.Load(ctx, modelID)
}

// engineLogger logs the engine's lifecycle (model loaded with its load time,
// unloaded) and its warnings to stderr.
func engineLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// storiesGGUF is the demo's real model: llama2.c's stories260K (MIT; demo/README.md
// says where it comes from, demo/LICENSE its license).
//
//go:embed demo/stories260K.gguf
var storiesGGUF []byte

// demoStoriesID is the demo's real model.
const demoStoriesID = "demo-stories"

// demoLongContextID is the demo's random model on the fast tier (after demo-stories):
// what "auto" serves when a request does not fit the story model's context.
const demoLongContextID = "demo-random-qwen3"

// randomOwner is the owned_by that /v1/models shows for the demo's random models.
const randomOwner = "lmlite-demo-random-weights"

// randomSpecs are the demo's random models: small generated models (seeded, so every
// data directory gets the same files) of two architectures and quantizations, to
// exercise the system. Their weights are random: they answer in noise.
var randomSpecs = []struct {
	id   string
	opts genmodel.Options
}{
	{"demo-random-llama", genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}},
	{"demo-random-qwen3", genmodel.Options{Arch: "qwen3", Preset: "tiny", Type: "q4_k_m", Seed: 2}},
}

// generateDemoModels writes the demo models into dataDir/models unless they are there:
// demo-stories (real, and the demo's embedding model) and the random ones.
func generateDemoModels(dataDir string) (real, random []engine.ModelConfig, err error) {
	dir := filepath.Join(dataDir, "models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, demoStoriesID+".gguf")
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, storiesGGUF) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, storiesGGUF, 0o644); err != nil {
			return nil, nil, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, nil, err
		}
	}
	// demo-stories also embeds (/v1/embeddings: its last hidden states, mean-pooled),
	// so every endpoint of the README can be tried on the demo; a 64-dimension story
	// model's vectors are a toy, not a retrieval model.
	real = append(real, engine.ModelConfig{ID: demoStoriesID, Path: path, MaxModelLen: 512, Replicas: 1, Embeddings: true})
	for _, d := range randomSpecs {
		path := filepath.Join(dir, d.id+".gguf")
		if _, err := os.Stat(path); err != nil {
			fmt.Fprintf(os.Stderr, "generating demo model %s (%s %s %s, random weights) into %s\n", d.id, d.opts.Arch, d.opts.Preset, d.opts.Type, path)
			if err := genmodel.Generate(d.opts, path); err != nil {
				return nil, nil, err
			}
		}
		random = append(random, engine.ModelConfig{ID: d.id, Path: path, MaxModelLen: 2048, Replicas: 1})
	}
	return real, random, nil
}
