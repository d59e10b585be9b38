package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// TestBenchNamesSlowPath: bench names the tensor types of a file that run on the
// pure-Go reference kernels, and only those.
func TestBenchNamesSlowPath(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		typ  string
		want map[string]int
	}{
		{"tq2_0", nil},
		{"tq1_0", nil},
		{"q4_k_m", nil},
		{"q3_k_m", nil},
	} {
		path := filepath.Join(dir, c.typ+".gguf")
		if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: c.typ, Seed: 1}, path); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := slowPathTypes(f, kernels.HasSIMD)
		f.Close()
		want := c.want
		if !kernels.HasSIMD(kernels.Q4_K) { // the purego build or a CPU without AVX2: all slow
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s: slow path %v, want %v", c.typ, got, want)
		}
	}
	// A type on the reference (every type has assembly on AVX2 now: one without
	// it, as on an older CPU; a file of one IQ1_M matrix and one IQ1_M vector,
	// which is not counted).
	w := gguf.NewWriter()
	if err := w.AddTensor("m.weight", gguf.GGMLType(kernels.IQ1_M), []uint64{256, 2}, make([]byte, 2*kernels.IQ1_M.BlockBytes())); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("v.weight", gguf.GGMLType(kernels.IQ1_M), []uint64{256}, make([]byte, kernels.IQ1_M.BlockBytes())); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "iq1_m.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	noIQ1M := func(t kernels.Type) bool { return t != kernels.IQ1_M && kernels.HasSIMD(t) }
	if got := slowPathTypes(f, noIQ1M); len(got) != 1 || got["IQ1_M"] != 1 {
		t.Errorf("iq1_m: slow path %v, want map[IQ1_M:1]", got)
	}
}

// TestBenchColdStartBreakdown: bench --cold-start --json on a generated tiny model
// reports, for the requests after an unload, the wait for the load and the engine's
// load phases (caught from its debug log), and for the warm requests no wait and no
// load phases; --drop-cache runs the same with the file dropped from the page cache.
func TestBenchColdStartBreakdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, path); err != nil {
		t.Fatal(err)
	}
	for _, drop := range []bool{false, true} {
		if drop && runtime.GOOS != "linux" {
			continue
		}
		var out bytes.Buffer
		if err := benchColdStart(&out, path, 1, 4, 2, drop, true); err != nil {
			t.Fatal(err)
		}
		var res coldResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		c, w := res.Cold, res.Warm
		if c.AwaitMs <= 0 || c.QueueMs < c.AwaitMs || c.ForwardMs <= 0 || res.DropCache != drop {
			t.Errorf("drop %v: after an unload: await %.3f, queue %.3f, forward %.3f ms (drop_cache %v)", drop, c.AwaitMs, c.QueueMs, c.ForwardMs, res.DropCache)
		}
		for _, k := range []string{"map_ms", "model_ms", "kv_ms", "total_ms"} {
			if _, ok := c.Phases[k]; !ok {
				t.Errorf("drop %v: load phase %s missing: %v", drop, k, c.Phases)
			}
		}
		if c.Phases["total_ms"] < c.Phases["map_ms"]+c.Phases["model_ms"] {
			t.Errorf("drop %v: load phases do not add up: %v", drop, c.Phases)
		}
		if w.AwaitMs != 0 || w.Phases != nil || w.ForwardMs <= 0 {
			t.Errorf("drop %v: warm: await %.3f ms, phases %v, forward %.3f ms", drop, w.AwaitMs, w.Phases, w.ForwardMs)
		}
	}
}
