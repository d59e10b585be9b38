package device

import (
	"fmt"
	"strings"

	"github.com/lmlite/lmlite/engine/lease"
)

// GPU is one GPU as NVML saw it.
type GPU struct {
	Index       int       `json:"index"` // NVML's index: the lease device is "gpu:<index>"
	Name        string    `json:"name"`
	UUID        string    `json:"uuid"`
	MemoryTotal int64     `json:"memory_total_bytes"`         // 0 when unknown (see Errors)
	MemoryUsed  int64     `json:"memory_used_bytes"`          // by every process, lmlite's included
	UtilGPU     int       `json:"utilization_gpu_percent"`    // -1 when unknown
	UtilMemory  int       `json:"utilization_memory_percent"` // -1 when unknown
	Processes   []Process `json:"processes"`                  // compute processes
	Errors      []string  `json:"errors,omitempty"`           // NVML calls that failed for this GPU
}

// Process is a compute process on a GPU.
type Process struct {
	PID        uint32 `json:"pid"`
	UsedMemory int64  `json:"used_memory_bytes"`
}

// LeaseDevice is the GPU's device name in engine/lease: "gpu:<index>".
func (g GPU) LeaseDevice() string { return fmt.Sprintf("gpu:%d", g.Index) }

// Inventory is one snapshot of the devices. The zero value is a CPU-only machine.
type Inventory struct {
	Driver string `json:"driver,omitempty"` // NVIDIA driver version
	NVML   string `json:"nvml,omitempty"`   // why there are no GPUs, when there are none: "library not found", …
	GPUs   []GPU  `json:"gpus"`
}

// Summary is the one line to log at start-up.
func (inv Inventory) Summary() string {
	if len(inv.GPUs) == 0 {
		if inv.NVML == "" {
			return "devices: CPU only"
		}
		return "devices: CPU only (NVML: " + inv.NVML + ")"
	}
	var gs []string
	for _, g := range inv.GPUs {
		s := fmt.Sprintf("%s %s %d MiB", g.LeaseDevice(), g.Name, g.MemoryTotal>>20)
		if len(g.Errors) > 0 {
			s += " (" + strings.Join(g.Errors, "; ") + ")"
		}
		gs = append(gs, s)
	}
	return fmt.Sprintf("devices: host and %d GPU(s), driver %s: %s", len(inv.GPUs), inv.Driver, strings.Join(gs, ", "))
}

// GPUMargin is the memory of a GPU left out of its lease budget: max(5% of its total,
// 256 MiB), for the CUDA context and other processes.
func GPUMargin(total int64) int64 { return max(total/20, 256<<20) }

// Capacities returns the lease budget of every device: lease.HostDevice gets
// hostBudget (lease.HostBudget or the configured memory budget), each GPU its total
// memory minus GPUMargin. A GPU whose memory is unknown, or too small for the margin,
// gets no budget (no lease fits on it).
func (inv Inventory) Capacities(hostBudget int64) map[string]int64 {
	caps := map[string]int64{lease.HostDevice: hostBudget}
	for _, g := range inv.GPUs {
		if b := g.MemoryTotal - GPUMargin(g.MemoryTotal); g.MemoryTotal > 0 && b > 0 {
			caps[g.LeaseDevice()] = b
		}
	}
	return caps
}
