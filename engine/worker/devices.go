package worker

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/lease"
)

// cudaEnv is the environment of a worker serving cfgs: base with CUDA_VISIBLE_DEVICES
// set to the GPUs its models lease on (ModelConfig.Device "gpu:N" → N; several, comma
// separated, in order), as DJL does for its GPU workers, so that a CUDA runtime in the
// worker sees only its GPUs. A group without a GPU model gets base unchanged. A
// device not in caps (the capacity table, device.Probe().Capacities) is an error.
//
// NVML enumerates every GPU whatever CUDA_VISIBLE_DEVICES says, so the worker's own
// lease devices (engine/device) keep their machine-wide "gpu:N" names. No GPU has run
// this: the models execute on the CPU (there is no CUDA backend yet).
func cudaEnv(base []string, cfgs []api.ModelConfig, caps map[string]int64) ([]string, error) {
	var idx []int
	for _, mc := range cfgs {
		dev := cmp.Or(mc.Device, lease.HostDevice)
		if _, ok := caps[dev]; !ok {
			return nil, api.ConfigErrorf("worker: model %s: device %q not found (devices: %s)", mc.ID, dev, strings.Join(slices.Sorted(maps.Keys(caps)), ", "))
		}
		if dev == lease.HostDevice {
			continue
		}
		n, ok := strings.CutPrefix(dev, "gpu:")
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < 0 {
			return nil, api.ConfigErrorf("worker: model %s: device %q is neither host nor gpu:N", mc.ID, dev)
		}
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return base, nil
	}
	slices.Sort(idx)
	var ids []string
	for _, i := range idx {
		ids = append(ids, strconv.Itoa(i))
	}
	env := slices.DeleteFunc(slices.Clone(base), func(kv string) bool { return strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") })
	return append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(ids, ",")), nil
}
