package api

import (
	"bufio"
	"context"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine/device"
	"github.com/lmlite/lmlite/engine/lease"
)

// DeviceStatus is one device whose memory the models lease (the gateway's
// /admin/devices and device metrics present it).
type DeviceStatus struct {
	ID          string // the lease device: "host", "gpu:0", …
	Kind        string // "host" or "gpu"
	Name        string
	MemoryTotal int64   // 0 when unknown
	MemoryUsed  int64   // by every process (host: total − available)
	Budget      int64   // what the leases may take
	Leased      int64   // what the live leases hold, of every process
	Utilization float64 // GPU busy ratio 0–1; -1 when unknown (always for host)
	Leases      []DeviceLease
}

// DeviceLease is one live lease on a device.
type DeviceLease struct {
	Holder   string // model@process
	Model    string
	Node     string // the holding process's node id ("" with the in-process store)
	Bytes    int64
	Priority int
	Idle     bool
	Local    bool // held by this Block
}

// ReportDevices is Block.Devices for any lease table: each device of budgets (its
// memory from the OS or NVML) with the live leases of store at now; a lease whose
// holder is MODEL@proc is Local. (The workers mode reports its devices with it.)
func ReportDevices(ctx context.Context, budgets map[string]int64, store lease.Store, now time.Time, proc string) ([]DeviceStatus, error) {
	inv := device.Probe()
	gpus := map[string]device.GPU{}
	for _, g := range inv.GPUs {
		gpus[g.LeaseDevice()] = g
	}
	var out []DeviceStatus
	for _, id := range slices.Sorted(maps.Keys(budgets)) {
		st := DeviceStatus{ID: id, Kind: "gpu", Budget: budgets[id], Utilization: -1}
		if id == lease.HostDevice {
			st.Kind, st.Name = "host", "host memory"
			st.MemoryTotal, st.MemoryUsed = hostMemory()
		} else if g, ok := gpus[id]; ok {
			st.Name, st.MemoryTotal, st.MemoryUsed = g.Name, g.MemoryTotal, g.MemoryUsed
			if g.UtilGPU >= 0 {
				st.Utilization = float64(g.UtilGPU) / 100
			}
		}
		ls, err := store.List(ctx, now, id)
		if err != nil {
			return nil, err
		}
		st.Leases = []DeviceLease{}
		for _, l := range ls {
			model, p, _ := strings.Cut(l.Holder, "@")
			st.Leased += l.Bytes
			st.Leases = append(st.Leases, DeviceLease{Holder: l.Holder, Model: model, Node: l.Node, Bytes: l.Bytes,
				Priority: l.Priority, Idle: l.Idle, Local: p == proc})
		}
		out = append(out, st)
	}
	return out, nil
}

// hostMemory reads MemTotal and MemAvailable of /proc/meminfo: total and used bytes;
// zeros where it cannot.
func hostMemory() (total, used int64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	var avail int64 = -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "MemTotal":
			total = kb << 10
		case "MemAvailable":
			avail = kb << 10
		}
	}
	if total == 0 || avail < 0 {
		return total, 0
	}
	return total, total - avail
}
