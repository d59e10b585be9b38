package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
)

// deviceEngine is the fake engine that also reports devices (as engine.Block does).
type deviceEngine struct {
	*fakeEngine
	devs []engine.DeviceStatus
	err  error
}

func (e deviceEngine) Devices(context.Context) ([]engine.DeviceStatus, error) { return e.devs, e.err }

func startDeviceServer(t *testing.T, eng Engine) string {
	t.Helper()
	cfg := parseConfig(t, testConfig, t.TempDir())
	store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	srv, err := New(mustGatewayConfig(t, cfg), eng, tenancy.New(store), Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AdminKey: "admin-secret"})
	if err != nil {
		t.Fatal(err)
	}
	return serveLoopback(t, srv)
}

func getWith(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminDevices: /admin/devices lists the engine's devices in OpenAI's list shape
// with their leases (admin key only), the device metrics show the same numbers, a
// failing report is a 503 in OpenAI's error shape, and an engine without devices
// lists none. The GPU row is made up: no GPU exists here.
func TestAdminDevices(t *testing.T) {
	devs := []engine.DeviceStatus{
		{ID: "gpu:0", Kind: "gpu", Name: "A100", MemoryTotal: 80 << 30, MemoryUsed: 10 << 30, Budget: 76 << 30, Leased: 3 << 30, Utilization: 0.37,
			Leases: []engine.DeviceLease{{Holder: "big@p1", Model: "big", Node: "gw-2", Bytes: 3 << 30, Priority: 5}}},
		{ID: "host", Kind: "host", Name: "host memory", MemoryTotal: 16 << 30, MemoryUsed: 4 << 30, Budget: 14 << 30, Utilization: -1, Leases: []engine.DeviceLease{}},
	}
	base := startDeviceServer(t, deviceEngine{fakeEngine: newFakeEngine(), devs: devs})
	if code, _ := getWith(t, base+"/admin/devices", "wrong"); code != 401 {
		t.Errorf("wrong admin key: %d", code)
	}
	code, body := getWith(t, base+"/admin/devices", "admin-secret")
	var list struct {
		Object string
		Data   []map[string]any
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || list.Object != "list" || len(list.Data) != 2 {
		t.Fatalf("%d %s %v", code, body, err)
	}
	g := list.Data[0]
	if g["object"] != "device" || g["id"] != "gpu:0" || g["kind"] != "gpu" || g["memory_total_bytes"] != float64(80<<30) ||
		g["memory_used_bytes"] != float64(10<<30) || g["utilization"] != 0.37 {
		t.Errorf("gpu row %v", g)
	}
	if ls, _ := g["leases"].([]any); len(ls) != 1 || !strings.Contains(body, `"node":"gw-2","bytes":3221225472,"priority":5`) {
		t.Errorf("gpu leases %s", body)
	}
	_, m := getWith(t, base+"/metrics", "")
	for _, want := range []string{
		`lmlite_device_memory_bytes{device="gpu:0",kind="leased"} 3.221225472e+09`,
		`lmlite_device_memory_bytes{device="host",kind="total"} 1.7179869184e+10`,
		`lmlite_device_utilization_ratio{device="gpu:0"} 0.37`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, `lmlite_device_utilization_ratio{device="host"}`) {
		t.Error("host utilization exported though unknown")
	}

	failing := startDeviceServer(t, deviceEngine{fakeEngine: newFakeEngine(), err: errors.New("lease: redis list: connection refused")})
	if code, body := getWith(t, failing+"/admin/devices", "admin-secret"); code != 503 || !strings.Contains(body, `"type":"server_error"`) {
		t.Errorf("failing report: %d %s", code, body)
	}
	none := startDeviceServer(t, newFakeEngine())
	if code, body := getWith(t, none+"/admin/devices", "admin-secret"); code != 200 || body != `{"data":[],"object":"list"}` {
		t.Errorf("engine without devices: %d %s", code, body)
	}
}
