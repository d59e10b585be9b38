package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
)

// DeviceSource is an engine that reports the devices its models lease memory on
// (engine.Block, and worker.Pool in workers mode): /admin/devices and the device
// metrics show them. An engine without it (upstream only) shows none.
type DeviceSource interface {
	Devices(ctx context.Context) ([]engine.DeviceStatus, error)
}

// deviceTimeout bounds a device report (the lease store may be Redis).
const deviceTimeout = 2 * time.Second

// adminDevices answers GET /admin/devices: OpenAI's list shape, one object "device"
// per device, with its memory (total, used by every process, lease budget, leased)
// and utilization, and the live leases on it with their holders' node, model, bytes
// and priority.
func (s *Server) adminDevices(ctx *fasthttp.RequestCtx, reqID string) {
	src, ok := s.eng.(DeviceSource)
	if s.eng == nil || !ok {
		writeJSON(ctx, 200, map[string]any{"object": "list", "data": []any{}})
		return
	}
	c, cancel := context.WithTimeout(context.Background(), deviceTimeout)
	defer cancel()
	devs, err := src.Devices(c)
	if err != nil {
		s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", message: "device report unavailable: " + err.Error()})
		return
	}
	rows := []deviceJSON{}
	for _, d := range devs {
		rows = append(rows, deviceJSONOf(d))
	}
	writeJSON(ctx, 200, map[string]any{"object": "list", "data": rows})
}

// deviceJSON is one row of /admin/devices (the engine's DeviceStatus carries no
// JSON of its own: the admin API's format is the gateway's).
type deviceJSON struct {
	Object      string      `json:"object"` // "device"
	ID          string      `json:"id"`     // the lease device: "host", "gpu:0", …
	Kind        string      `json:"kind"`   // "host" or "gpu"
	Name        string      `json:"name"`
	MemoryTotal int64       `json:"memory_total_bytes"`  // 0 when unknown
	MemoryUsed  int64       `json:"memory_used_bytes"`   // by every process (host: total − available)
	Budget      int64       `json:"memory_budget_bytes"` // what the leases may take
	Leased      int64       `json:"memory_leased_bytes"` // what the live leases hold, of every process
	Utilization float64     `json:"utilization"`         // GPU busy ratio 0–1; -1 when unknown (always for host)
	Leases      []leaseJSON `json:"leases"`
}

// leaseJSON is one live lease of a deviceJSON.
type leaseJSON struct {
	Holder   string `json:"holder"` // model@process
	Model    string `json:"model"`
	Node     string `json:"node"` // the holding process's node id ("" with the in-process store)
	Bytes    int64  `json:"bytes"`
	Priority int    `json:"priority"`
	Idle     bool   `json:"idle"`
	Local    bool   `json:"local"` // held by the engine that reports
}

func deviceJSONOf(d engine.DeviceStatus) deviceJSON {
	r := deviceJSON{Object: "device", ID: d.ID, Kind: d.Kind, Name: d.Name, MemoryTotal: d.MemoryTotal, MemoryUsed: d.MemoryUsed,
		Budget: d.Budget, Leased: d.Leased, Utilization: d.Utilization}
	if d.Leases != nil {
		r.Leases = make([]leaseJSON, 0, len(d.Leases))
	}
	for _, l := range d.Leases {
		r.Leases = append(r.Leases, leaseJSON(l))
	}
	return r
}

// deviceCollector exports the devices as metrics:
// lmlite_device_memory_bytes{device,kind=total|used|budget|leased} and
// lmlite_device_utilization_ratio{device} (GPUs that report it).
type deviceCollector struct{ src DeviceSource }

var (
	deviceMemoryDesc = prometheus.NewDesc("lmlite_device_memory_bytes",
		"Memory of each device whose memory models lease: total, used (by every process), the lease budget, and leased (by every process sharing the lease store).",
		[]string{"device", "kind"}, nil)
	deviceUtilDesc = prometheus.NewDesc("lmlite_device_utilization_ratio",
		"GPU utilization (0–1) as NVML reports it.", []string{"device"}, nil)
)

func (d deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- deviceMemoryDesc
	ch <- deviceUtilDesc
}

func (d deviceCollector) Collect(ch chan<- prometheus.Metric) {
	c, cancel := context.WithTimeout(context.Background(), deviceTimeout)
	defer cancel()
	devs, err := d.src.Devices(c)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(deviceMemoryDesc, err)
		return
	}
	for _, dv := range devs {
		for _, kv := range []struct {
			kind string
			v    int64
		}{{"total", dv.MemoryTotal}, {"used", dv.MemoryUsed}, {"budget", dv.Budget}, {"leased", dv.Leased}} {
			ch <- prometheus.MustNewConstMetric(deviceMemoryDesc, prometheus.GaugeValue, float64(kv.v), dv.ID, kv.kind)
		}
		if dv.Utilization >= 0 {
			ch <- prometheus.MustNewConstMetric(deviceUtilDesc, prometheus.GaugeValue, dv.Utilization, dv.ID)
		}
	}
}
