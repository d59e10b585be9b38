package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
)

// TestAdaptersLoadUnloadThroughWorker: in the workers mode a model's LoRA adapter
// is listed before its worker has it (unloaded, at its file's size), loads in the
// worker process on the admin's load (the model's worker answers loaded, one load),
// a request with it gives the same bits as the in-process Block with it, it unloads
// on the admin's unload, and an unknown adapter is engine.ErrUnknownAdapter as in
// process.
func TestAdaptersLoadUnloadThroughWorker(t *testing.T) {
	base := llamaModel(t)
	lora := filepath.Join(t.TempDir(), "ft.gguf")
	if err := genmodel.GenerateLoRA(genmodel.LoRAOptions{Base: base, Rank: 16, Alpha: 16, Seed: 41}, lora); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(lora)
	if err != nil {
		t.Fatal(err)
	}
	mc := engine.ModelConfig{ID: "a", Path: base, MaxModelLen: 256, Adapters: []engine.AdapterConfig{{ID: "ft", Path: lora}}}
	p := newPool(t, Config{Models: []engine.ModelConfig{mc}, Command: testCommand()})
	adapter := func() engine.AdapterStatus {
		t.Helper()
		as := p.Adapters()
		if len(as) != 1 || as[0].ID != "ft" || as[0].Model != "a" {
			t.Fatalf("adapters: %+v", as)
		}
		return as[0]
	}
	if a := adapter(); a.State != engine.AdapterUnloaded || a.Bytes != fi.Size() || a.Loads != 0 {
		t.Fatalf("before any load: %+v (file %d bytes)", a, fi.Size())
	}
	if err := p.LoadAdapter(context.Background(), "a", "ft"); err != nil {
		t.Fatal(err)
	}
	if a := adapter(); a.State != engine.AdapterLoaded || a.Loads != 1 || a.Bytes != fi.Size() {
		t.Errorf("after the load: %+v", a)
	}

	block, err := engine.New(engine.Config{Models: []engine.ModelConfig{mc}})
	if err != nil {
		t.Fatal(err)
	}
	defer block.Close()
	if err := block.Load(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	req := engine.Request{Prompt: []int32{1, 15, 27, 99, 4}, MaxTokens: 12, Sampling: engine.Sampling{Temperature: 0.8, Seed: 5}, Adapters: []string{"ft"}}
	want, got := run(block, "a", req), run(p, "a", req)
	if err := want.same(got); err != nil {
		t.Errorf("with the adapter, the worker differs from the in-process Block: %v", err)
	}
	bare := req
	bare.Adapters = nil
	if run(block, "a", bare).same(want) == nil {
		t.Errorf("the adapter changed nothing")
	}

	if err := p.UnloadAdapter("a", "ft"); err != nil {
		t.Fatal(err)
	}
	if a := adapter(); a.State != engine.AdapterUnloaded || a.Unloads != 1 {
		t.Errorf("after the unload: %+v", a)
	}
	for _, err := range []error{p.LoadAdapter(context.Background(), "a", "nope"), p.UnloadAdapter("a", "nope")} {
		if !errors.Is(err, engine.ErrUnknownAdapter) {
			t.Errorf("an unknown adapter: %v, want engine.ErrUnknownAdapter", err)
		}
	}
	if err := p.LoadAdapter(context.Background(), "nope", "ft"); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("an unknown model: %v", err)
	}
}
