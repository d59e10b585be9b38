package worker

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// TestCUDAEnv: a worker whose models lease on GPUs gets CUDA_VISIBLE_DEVICES with
// their indices (replacing an inherited one); a CPU-only group's environment is
// unchanged; an unknown or malformed device is an error. The capacity table is fake:
// no GPU exists on the machines of this project.
func TestCUDAEnv(t *testing.T) {
	caps := map[string]int64{"host": 8 << 30, "gpu:0": 76 << 30, "gpu:1": 15 << 30, "gpu:3": 15 << 30}
	base := []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=7"}
	for _, tc := range []struct {
		name    string
		devices []string
		want    string // the CUDA_VISIBLE_DEVICES entries of the result; "inherited": base unchanged
		err     string
	}{
		{"cpu only", []string{"", "host"}, "inherited", ""},
		{"one gpu", []string{"gpu:1"}, "CUDA_VISIBLE_DEVICES=1", ""},
		{"gpus and host, repeated", []string{"gpu:3", "host", "gpu:0", "gpu:3"}, "CUDA_VISIBLE_DEVICES=0,3", ""},
		{"unknown gpu", []string{"gpu:2"}, "", `device "gpu:2" not found (devices: gpu:0, gpu:1, gpu:3, host)`},
		{"malformed", []string{"tpu:0"}, "", `device "tpu:0" not found`},
	} {
		var cfgs []engine.ModelConfig
		for i, d := range tc.devices {
			cfgs = append(cfgs, engine.ModelConfig{ID: string(rune('a' + i)), Device: d})
		}
		env, err := cudaEnv(base, cfgs, caps)
		if tc.err != "" {
			if !errors.Is(err, engine.ErrConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.want == "inherited" {
			if !slices.Equal(env, base) {
				t.Errorf("%s: env %v", tc.name, env)
			}
			continue
		}
		var got []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") {
				got = append(got, kv)
			}
		}
		if len(got) != 1 || got[0] != tc.want || !slices.Contains(env, "PATH=/bin") {
			t.Errorf("%s: env %v, want %s", tc.name, env, tc.want)
		}
	}
	// gpu:x with a table that has it (a hand-written table) is still no GPU index.
	if _, err := cudaEnv(nil, []engine.ModelConfig{{ID: "x", Device: "gpu:x"}}, map[string]int64{"gpu:x": 1}); err == nil {
		t.Error("gpu:x accepted")
	}
}

// TestGPUWorkerProcessGetsCUDAVisibleDevices: the worker process of a model leasing
// on gpu:1 is started with CUDA_VISIBLE_DEVICES=1 in its environment, replacing the
// parent's own value (the child writes what it got to a file, then exits as a crash
// at load: no GPU exists here to serve from). The capacity table is fake.
func TestGPUWorkerProcessGetsCUDAVisibleDevices(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cuda")
	p, err := New(Config{OpenPrep: openEnginePrep, Models: []engine.ModelConfig{{ID: "a", Path: llamaModel(t), MaxModelLen: 256, Device: "gpu:1"}},
		Devices: map[string]int64{"host": 8 << 30, "gpu:0": 16 << 30, "gpu:1": 16 << 30},
		Command: testCommand("CUDA_VISIBLE_DEVICES=7", envCUDAOut+"="+out, envCrashAtLoad+"=1"),
		Policy:  Policy{MinBackoff: time.Hour}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got []byte
	waitFor(t, 15*time.Second, "the worker's environment", func() bool {
		got, err = os.ReadFile(out)
		return err == nil && len(got) > 0
	})
	if string(got) != "true 1" {
		t.Errorf("the worker's CUDA_VISIBLE_DEVICES: %q, want set to 1", got)
	}
}
