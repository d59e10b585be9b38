package worker

import (
	"slices"
	"strings"
	"testing"

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
			if err == nil || !strings.Contains(err.Error(), tc.err) {
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
