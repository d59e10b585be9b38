package enginemetrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/workerapi"
)

// TestBlockMetrics registers the Collector of a Block with a generated tiny model and reads its
// metrics while loaded and after an unload.
func TestBlockMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, path); err != nil {
		t.Fatal(err)
	}
	b, err := engine.New(engine.Config{Models: []engine.ModelConfig{{ID: "tiny", Path: path, MaxModelLen: 128, Replicas: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Load(context.Background(), "tiny"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(New(b.Stats)); err != nil {
		t.Fatal(err)
	}
	gauge := func(name, state string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.Metric {
				if labels(m)["model"] == "tiny" && (state == "" || labels(m)["state"] == state) {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no %s{state=%q}", name, state)
		return 0
	}
	if gauge("lmlite_engine_model_state", "ready") != 1 || gauge("lmlite_engine_model_state", "loading") != 0 {
		t.Error("state: not ready=1, loading=0")
	}
	if m := gauge("lmlite_engine_model_memory_bytes", ""); m <= 0 {
		t.Errorf("memory %v while loaded", m)
	}
	if gauge("lmlite_engine_model_replicas", "") != 2 || gauge("lmlite_engine_model_max_len_tokens", "") != 128 || gauge("lmlite_engine_queue_depth", "") != 0 {
		t.Error("replicas, max len or queue depth")
	}
	value := func(name, label, want string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				if mf.GetName() == name && (label == "" || labels(m)[label] == want) {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no %s{%s=%q}", name, label, want)
		return 0
	}
	for range 2 {
		s, err := b.Generate(context.Background(), "tiny", engine.Request{Prompt: make([]int32, 40), MaxTokens: 5, CacheSalt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		for range s.Tokens {
		}
		if _, err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if v := value("lmlite_engine_batch_steps_total", "", ""); v < 10 {
		t.Errorf("batch steps %v after two requests of 5 tokens", v)
	}
	if v := value("lmlite_engine_batch_tokens_total", "", ""); v != 40+4+8+4 { // the second prompt is 32 tokens from the cache
		t.Errorf("batch tokens %v", v)
	}
	if value("lmlite_engine_model_loads_total", "", "") != 1 || value("lmlite_engine_prefix_cache_lookups_total", "", "") != 2 {
		t.Error("loads or prefix-cache lookups")
	}
	if hit := value("lmlite_engine_prefix_cache_tokens_total", "result", "hit"); hit != 32 {
		t.Errorf("prefix-cache hit tokens %v, want 32 (the second request's two whole blocks)", hit)
	}
	if v := value("lmlite_engine_kv_blocks", "tier", "hot_cached"); v <= 0 {
		t.Errorf("hot cached blocks %v", v)
	}
	// Structured outputs: the same constrained request twice, its masks computed the
	// first time, found in the cache the second.
	for range 2 {
		s, err := b.Generate(context.Background(), "tiny", engine.Request{Prompt: make([]int32, 8), MaxTokens: 5, Grammar: grammar.JSONObject()})
		if err != nil {
			t.Fatal(err)
		}
		for range s.Tokens {
		}
		if _, err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	miss, hit := value("lmlite_engine_grammar_mask_lookups_total", "result", "miss"), value("lmlite_engine_grammar_mask_lookups_total", "result", "hit")
	if miss <= 0 || hit < miss || value("lmlite_engine_grammar_mask_cache_bytes", "", "") <= 0 {
		t.Errorf("grammar masks: %v misses, %v hits, %v bytes; want the second request's masks all hits", miss, hit, value("lmlite_engine_grammar_mask_cache_bytes", "", ""))
	}
	if err := b.Unload("tiny"); err != nil {
		t.Fatal(err)
	}
	if value("lmlite_engine_model_unloads_total", "", "") != 1 {
		t.Error("unloads")
	}
	if gauge("lmlite_engine_model_state", "unloaded") != 1 || gauge("lmlite_engine_model_state", "ready") != 0 || gauge("lmlite_engine_model_memory_bytes", "") != 0 {
		t.Error("after Unload: not unloaded=1, ready=0, memory 0")
	}
}

// TestExpertLoadMetrics serves a generated mixture of experts (8 experts, 2 used, 2
// layers) and reads the tokens routed to each expert: a series per layer and expert,
// each layer's summing to the tokens computed times the experts used (the batches'
// tokens plus at most one warm-up token per replica); none once unloaded.
func TestExpertLoadMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "moe.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "mixtral", Preset: "tiny", Type: "q8_0", Seed: 1}, path); err != nil {
		t.Fatal(err)
	}
	b, err := engine.New(engine.Config{Models: []engine.ModelConfig{{ID: "moe", Path: path, MaxModelLen: 128, Replicas: 2}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Load(context.Background(), "moe"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(New(b.Stats)); err != nil {
		t.Fatal(err)
	}
	s, err := b.Generate(context.Background(), "moe", engine.Request{Prompt: []int32{1, 574, 568, 260, 562, 300, 301}, MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	for range s.Tokens {
	}
	if _, err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	type key struct{ layer, expert string }
	gather := func() (map[key]float64, float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		load, tokens := map[key]float64{}, 0.0
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				switch mf.GetName() {
				case "lmlite_engine_expert_tokens_total":
					l := labels(m)
					load[key{l["layer"], l["expert"]}] = m.GetCounter().GetValue()
				case "lmlite_engine_batch_tokens_total":
					tokens = m.GetCounter().GetValue()
				}
			}
		}
		return load, tokens
	}
	load, tokens := gather()
	if len(load) != 2*8 {
		t.Fatalf("%d expert series, want 16 (2 layers × 8 experts): %v", len(load), load)
	}
	for _, layer := range []string{"0", "1"} {
		sum, used := 0.0, 0
		for e := range 8 {
			n := load[key{layer, fmt.Sprint(e)}]
			sum += n
			if n > 0 {
				used++
			}
		}
		if sum < tokens*2 || sum > (tokens+2)*2 || used < 3 {
			t.Errorf("layer %s: %v routings over %d experts for %v tokens × 2 used", layer, sum, used, tokens)
		}
	}
	if err := b.Unload("moe"); err != nil {
		t.Fatal(err)
	}
	if load, _ := gather(); len(load) != 0 {
		t.Errorf("%d expert series after Unload", len(load))
	}
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestWorkerSeries reads the workers mode's series from a Stats with two worker
// groups: each model of a group gets its group's crashes, and up is 1 only while the
// group's process runs.
func TestWorkerSeries(t *testing.T) {
	st := engine.Stats{Workers: []workerapi.Status{
		{Group: "g", Models: []string{"a", "b"}, State: "running", Crashes: 2},
		{Group: "c", Models: []string{"c"}, State: "backoff", Crashes: 5},
	}}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(New(func() engine.Stats { return st })); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			got[mf.GetName()+"/"+labels(m)["model"]] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"lmlite_engine_worker_crashes_total/a": 2, "lmlite_engine_worker_crashes_total/b": 2, "lmlite_engine_worker_crashes_total/c": 5,
		"lmlite_engine_worker_up/a": 1, "lmlite_engine_worker_up/b": 1, "lmlite_engine_worker_up/c": 0,
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}
