//go:build cgo

package device

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU is a mock device; fail names a call that returns ERROR_UNKNOWN.
func fakeGPU(name string, total, used uint64, fail string) *mock.Device {
	ret := func(call string) nvml.Return {
		if call == fail {
			return nvml.ERROR_UNKNOWN
		}
		return nvml.SUCCESS
	}
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return name, ret("name") },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-" + name, ret("uuid") },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: total, Used: used, Free: total - used}, ret("memory")
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 37, Memory: 12}, ret("utilization")
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: used}, {Pid: 7, UsedGpuMemory: ^uint64(0)}}, ret("processes")
		},
	}
}

// fakeNVML is a mock NVML with these devices; shutdowns counts Shutdown calls.
func fakeNVML(init nvml.Return, devs []*mock.Device, shutdowns *int) *mock.Interface {
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return init },
		ShutdownFunc:               func() nvml.Return { *shutdowns++; return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if devs[i] == nil {
				return nil, nvml.ERROR_GPU_IS_LOST
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

func TestDiscoverInitFails(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "devices: CPU only (NVML: library libnvidia-ml not found)"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "devices: CPU only (NVML: NVIDIA driver not loaded)"},
		{nvml.ERROR_NO_PERMISSION, "devices: CPU only (NVML: ERROR_NO_PERMISSION)"},
	} {
		var shut int
		inv := Discover(fakeNVML(tc.ret, nil, &shut))
		if len(inv.GPUs) != 0 || inv.Summary() != tc.want || shut != 0 {
			t.Errorf("init %v: %+v, summary %q, %d shutdowns", tc.ret, inv, inv.Summary(), shut)
		}
		if caps := inv.Capacities(1000); len(caps) != 1 || caps["host"] != 1000 {
			t.Errorf("CPU-only capacities %v", caps)
		}
	}
}

func TestDiscoverNoDevices(t *testing.T) {
	var shut int
	inv := Discover(fakeNVML(nvml.SUCCESS, nil, &shut))
	if len(inv.GPUs) != 0 || inv.Summary() != "devices: CPU only (NVML: no GPU found)" || shut != 1 {
		t.Fatalf("%+v, summary %q, %d shutdowns", inv, inv.Summary(), shut)
	}
}

func TestDiscoverTwoDevices(t *testing.T) {
	var shut int
	inv := Discover(fakeNVML(nvml.SUCCESS, []*mock.Device{
		fakeGPU("A100", 80<<30, 1<<30, ""),
		fakeGPU("T4", 16<<30, 0, ""),
	}, &shut))
	if shut != 1 || inv.Driver != "550.54.15" || len(inv.GPUs) != 2 {
		t.Fatalf("%+v, %d shutdowns", inv, shut)
	}
	g := inv.GPUs[0]
	if g.Index != 0 || g.Name != "A100" || g.UUID != "GPU-A100" || g.MemoryTotal != 80<<30 || g.MemoryUsed != 1<<30 ||
		g.UtilGPU != 37 || g.UtilMemory != 12 || len(g.Errors) != 0 ||
		len(g.Processes) != 2 || g.Processes[0] != (Process{PID: 4242, UsedMemory: 1 << 30}) || g.Processes[1] != (Process{PID: 7}) {
		t.Fatalf("gpu 0: %+v", g)
	}
	if inv.GPUs[1].LeaseDevice() != "gpu:1" {
		t.Fatalf("gpu 1: %+v", inv.GPUs[1])
	}
	caps := inv.Capacities(8 << 30)
	// 5% margins: 4 GiB of 80, 819.2 MiB of 16.
	if len(caps) != 3 || caps["host"] != 8<<30 || caps["gpu:0"] != 76<<30 || caps["gpu:1"] != 16<<30-16<<30/20 {
		t.Fatalf("capacities %v", caps)
	}
	if s := inv.Summary(); s != "devices: host and 2 GPU(s), driver 550.54.15: gpu:0 A100 81920 MiB, gpu:1 T4 16384 MiB" {
		t.Fatalf("summary %q", s)
	}
}

// TestDiscoverOneDeviceCallFails: a failing call of one GPU is recorded on that GPU
// and the rest is read; a GPU whose memory is unknown gets no lease budget, and one
// whose handle fails is still listed, with the error.
func TestDiscoverOneDeviceCallFails(t *testing.T) {
	var shut int
	inv := Discover(fakeNVML(nvml.SUCCESS, []*mock.Device{
		fakeGPU("A", 24<<30, 0, "utilization"),
		fakeGPU("B", 24<<30, 0, "memory"),
		nil, // handle: GPU is lost
		fakeGPU("D", 24<<30, 0, ""),
	}, &shut))
	if len(inv.GPUs) != 4 || shut != 1 {
		t.Fatalf("%+v", inv)
	}
	a, b, c, d := inv.GPUs[0], inv.GPUs[1], inv.GPUs[2], inv.GPUs[3]
	if a.UtilGPU != -1 || a.MemoryTotal != 24<<30 || len(a.Processes) != 2 || len(a.Errors) != 1 || !strings.HasPrefix(a.Errors[0], "utilization: ") {
		t.Errorf("utilization failed: %+v", a)
	}
	if b.MemoryTotal != 0 || b.UtilGPU != 37 || len(b.Errors) != 1 || !strings.HasPrefix(b.Errors[0], "memory: ") {
		t.Errorf("memory failed: %+v", b)
	}
	if c.Index != 2 || c.Name != "" || len(c.Errors) != 1 || c.Errors[0] != "handle: ERROR_GPU_IS_LOST" {
		t.Errorf("handle failed: %+v", c)
	}
	if len(d.Errors) != 0 || d.MemoryTotal != 24<<30 {
		t.Errorf("healthy gpu after the failures: %+v", d)
	}
	caps := inv.Capacities(1 << 30)
	if _, ok := caps["gpu:1"]; ok || len(caps) != 3 || caps["gpu:0"] == 0 || caps["gpu:3"] == 0 {
		t.Errorf("capacities %v", caps)
	}
	if s := inv.Summary(); !strings.Contains(s, "gpu:1 B 0 MiB (memory: ") || !strings.Contains(s, "gpu:2  0 MiB (handle: ERROR_GPU_IS_LOST)") {
		t.Errorf("summary %q", s)
	}
}

// TestDiscoverNotSupportedIsNoError: GPUs that do not report utilization or
// processes (NOT_SUPPORTED, common on consumer cards) show them unknown, not failed.
func TestDiscoverNotSupportedIsNoError(t *testing.T) {
	g := fakeGPU("GeForce", 8<<30, 0, "")
	g.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	g.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	var shut int
	inv := Discover(fakeNVML(nvml.SUCCESS, []*mock.Device{g}, &shut))
	if got := inv.GPUs[0]; got.UtilGPU != -1 || len(got.Errors) != 0 || len(got.Processes) != 0 {
		t.Fatalf("%+v", got)
	}
}
