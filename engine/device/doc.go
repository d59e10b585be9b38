// Package device finds the devices whose memory models lease (engine/lease): host
// memory always, and NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml), which loads
// libnvidia-ml at run time, so building needs no GPU and no driver.
//
// Probe takes one snapshot: for each GPU its name, UUID, memory total and used,
// utilization and compute processes. Without the library, without a driver or without
// a GPU it returns a CPU-only Inventory whose Summary is the one info line to log;
// that is not an error. Capacities turns an Inventory into lease budgets: "host" (the
// host budget) and "gpu:N" (a GPU's total memory minus a margin); a GPU whose memory
// could not be read gets none.
//
// NO GPU HAS RUN THIS CODE. The machines of this project have none: the discovery
// logic is tested only against go-nvml's own mock package (pkg/nvml/mock), including
// an NVML that fails to initialise, zero devices, two devices, and a device call that
// fails; on the real library the tests check only the CPU-only path. GPU execution
// itself is not part of lmlite (issue 19).
//
// Where it is used: engine.New takes Capacities as the Block's lease budgets
// (engine.Config.Devices; `lmlite serve` probes once and prints Summary as one line on
// stderr), engine.Block.Devices reports each device with a fresh Probe and its live
// leases (GET /admin/devices, lmlite_device_memory_bytes{device,kind},
// lmlite_device_utilization_ratio{device}), and engine/worker gives a worker whose
// models lease on gpu:N the environment CUDA_VISIBLE_DEVICES=N. What ran: the
// CPU-only path end to end (serve, /admin/devices, metrics) and the worker
// environment against a hand-written capacity table; a gpu:N lease, a GPU's numbers
// in /admin/devices and a worker on a real GPU have not.
//
// go-nvml needs cgo; a build without cgo (CGO_ENABLED=0) has Probe report CPU only.
package device
