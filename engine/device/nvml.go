//go:build cgo

package device

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Probe takes a snapshot through the system's NVML (libnvidia-ml.so.1).
func Probe() Inventory { return Discover(nvml.New()) }

// Discover takes a snapshot through lib: it initialises NVML, reads every device, and
// shuts NVML down. An NVML that does not initialise (no library, no driver) or finds
// no device gives a CPU-only Inventory; a failed call for one device is recorded in
// that GPU's Errors and the others are read as usual.
func Discover(lib nvml.Interface) Inventory {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return Inventory{NVML: why(ret)}
	}
	defer lib.Shutdown()
	var inv Inventory
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Driver = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Inventory{NVML: "counting devices: " + why(ret)}
	}
	if n == 0 {
		return Inventory{NVML: "no GPU found", Driver: inv.Driver}
	}
	for i := range n {
		g := GPU{Index: i, UtilGPU: -1, UtilMemory: -1}
		fail := func(call string, ret nvml.Return) { g.Errors = append(g.Errors, call+": "+why(ret)) }
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fail("handle", ret)
			inv.GPUs = append(inv.GPUs, g)
			continue
		}
		if g.Name, ret = d.GetName(); ret != nvml.SUCCESS {
			fail("name", ret)
		}
		if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
			fail("uuid", ret)
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryTotal, g.MemoryUsed = clamp(m.Total), clamp(m.Used)
		} else {
			fail("memory", ret)
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.UtilGPU, g.UtilMemory = int(u.Gpu), int(u.Memory)
		} else if ret != nvml.ERROR_NOT_SUPPORTED {
			fail("utilization", ret)
		}
		if ps, ret := d.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
			for _, p := range ps {
				g.Processes = append(g.Processes, Process{PID: p.Pid, UsedMemory: clamp(p.UsedGpuMemory)})
			}
		} else if ret != nvml.ERROR_NOT_SUPPORTED {
			fail("processes", ret)
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// clamp converts NVML's unsigned byte counts; NVML reports an unavailable process
// memory as the all-ones value, which becomes 0.
func clamp(v uint64) int64 {
	if v > 1<<62 {
		return 0
	}
	return int64(v)
}

func why(ret nvml.Return) string {
	switch {
	case errors.Is(ret, nvml.ERROR_LIBRARY_NOT_FOUND):
		return "library libnvidia-ml not found"
	case errors.Is(ret, nvml.ERROR_DRIVER_NOT_LOADED):
		return "NVIDIA driver not loaded"
	}
	return fmt.Sprint(ret.Error())
}
