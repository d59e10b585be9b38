package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// TestServeRedisLeasesAndDevices: `lmlite serve` with `redis:` prints the device line
// (CPU only here: no NVML, no GPU), leases its model's memory in Redis under its
// node id (in workers mode: the model's worker, as node NODE_ID/GROUP), and shows the
// device and the lease in /admin/devices (admin key only) and in the device metrics.
func TestServeRedisLeasesAndDevices(t *testing.T) {
	for _, mode := range []string{"inprocess", "workers"} {
		t.Run(mode, func(t *testing.T) { testServeRedisLeasesAndDevices(t, mode) })
	}
}

func testServeRedisLeasesAndDevices(t *testing.T, mode string) {
	node := "node-x"
	if mode == "workers" {
		node = "node-x/tiny"
	}
	rs := redistest.Start(t, redistest.Options{})
	_, errOut := captureOutput(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, model); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("LMLITE_TEST_ADMIN_KEY", "admin-secret")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+filepath.Join(dir, "data")+`
demo_tenant: demo
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
engine: {mode: `+mode+`}
redis: {url: "`+rs.URL(0)+`", key_prefix: "dv:", node_id: node-x}
models:
  - {id: tiny, path: `+model+`, max_model_len: 128, idle_timeout: -1s, priority: 3}
tiers: {fast: [{model: tiny}]}
plans: {p: {}}
tenants: [{id: demo, plan: p}]
`), 0o644)
	done := startServe(t, addr, "--config", cfg)
	defer stopServe(t, done)
	if !strings.Contains(errOut.take(), "lmlite: devices: CPU only") {
		t.Error("no device line on stderr")
	}
	base := "http://" + addr

	// The lease is in Redis, under this process's node id.
	c, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ls []lease.Lease
	for range 1000 { // a worker (workers mode) starts first
		if ls, _ = lease.NewRedis(c, "dv:", "reader").List(context.Background(), time.Now(), lease.HostDevice); len(ls) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(ls) != 1 || ls[0].Node != node || !strings.HasPrefix(ls[0].Holder, "tiny@") || ls[0].Priority != 3 || ls[0].Bytes <= 0 {
		t.Fatalf("leases in Redis: %+v", ls)
	}

	if code, _ := call(t, "GET", base+"/admin/devices", "not-the-admin-key", ""); code != 401 && code != 403 {
		t.Errorf("/admin/devices without the admin key: %d", code)
	}
	code, body := call(t, "GET", base+"/admin/devices", "admin-secret", "")
	var list struct {
		Object string
		Data   []struct {
			Object, ID, Kind, Name string
			MemoryTotal            int64 `json:"memory_total_bytes"`
			MemoryUsed             int64 `json:"memory_used_bytes"`
			Budget                 int64 `json:"memory_budget_bytes"`
			Leased                 int64 `json:"memory_leased_bytes"`
			Utilization            float64
			Leases                 []struct {
				Model, Node string
				Bytes       int64
				Priority    int
				Local       bool
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || list.Object != "list" || len(list.Data) != 1 {
		t.Fatalf("/admin/devices: %d %s %v", code, body, err)
	}
	d := list.Data[0]
	if d.Object != "device" || d.ID != "host" || d.Kind != "host" || d.MemoryTotal <= 0 || d.MemoryUsed <= 0 || d.Budget <= 0 ||
		d.Leased != ls[0].Bytes || d.Utilization != -1 || len(d.Leases) != 1 {
		t.Fatalf("device %s", body)
	}
	if l := d.Leases[0]; l.Model != "tiny" || l.Node != node || l.Bytes != ls[0].Bytes || l.Priority != 3 || !l.Local {
		t.Fatalf("lease %s", body)
	}
	_, m := call(t, "GET", base+"/metrics", "", "")
	for _, want := range []string{`lmlite_device_memory_bytes{device="host",kind="leased"} `, `lmlite_device_memory_bytes{device="host",kind="total"} `,
		`lmlite_device_memory_bytes{device="host",kind="budget"} `} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
