package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// TestMergeDevices: the workers' leases are added to the parent's devices; a lease
// that several workers report (a shared Redis store) counts once and is local if any
// worker holds it; a device only a worker knows is kept.
func TestMergeDevices(t *testing.T) {
	base := []engine.DeviceStatus{{ID: "host", Kind: "host", MemoryTotal: 100, Budget: 90}, {ID: "gpu:0", Kind: "gpu", Budget: 50}}
	la := engine.DeviceLease{Holder: "a@w1", Model: "a", Bytes: 10, Local: true}
	lb := engine.DeviceLease{Holder: "b@w2", Model: "b", Bytes: 20, Local: true}
	lx := engine.DeviceLease{Holder: "x@other", Model: "x", Bytes: 5, Node: "elsewhere"}
	w1 := []engine.DeviceStatus{{ID: "host", Leases: []engine.DeviceLease{la, func() engine.DeviceLease { l := lb; l.Local = false; return l }(), lx}}}
	w2 := []engine.DeviceStatus{{ID: "host", Leases: []engine.DeviceLease{func() engine.DeviceLease { l := la; l.Local = false; return l }(), lb, lx}},
		{ID: "gpu:1", Kind: "gpu", Budget: 7, Leases: []engine.DeviceLease{{Holder: "g@w2", Bytes: 3, Local: true}}}}
	got := mergeDevices(base, [][]engine.DeviceStatus{w1, w2})
	var b strings.Builder
	for _, d := range got {
		fmt.Fprintf(&b, "%s budget=%d total=%d leased=%d:", d.ID, d.Budget, d.MemoryTotal, d.Leased)
		for _, l := range d.Leases {
			fmt.Fprintf(&b, " %s/%d/%v", l.Holder, l.Bytes, l.Local)
		}
		b.WriteString("\n")
	}
	want := "gpu:0 budget=50 total=0 leased=0:\n" +
		"gpu:1 budget=7 total=0 leased=3: g@w2/3/true\n" +
		"host budget=90 total=100 leased=35: a@w1/10/true b@w2/20/true x@other/5/false\n"
	if b.String() != want {
		t.Fatalf("merged:\n%s\nwant:\n%s", b.String(), want)
	}
	if base[0].Leases != nil {
		t.Fatal("mergeDevices changed its base")
	}
	if got := mergeDevices(base, nil); len(got) != 2 || got[1].Leases == nil || len(got[1].Leases) != 0 {
		t.Fatalf("no workers: %+v", got)
	}
}

// TestPoolDevices: the workers mode reports its devices as the in-process Block does
// (the gateway's /admin/devices and device metrics): host memory, and each running
// worker's model leases, local; an unloaded model's lease is gone.
func TestPoolDevices(t *testing.T) {
	path := llamaModel(t)
	p := newPool(t, Config{Models: []engine.ModelConfig{{ID: "a", Path: path, MaxModelLen: 256}, {ID: "b", Path: path, MaxModelLen: 128}},
		Command: testCommand()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	report := func() engine.DeviceStatus {
		t.Helper()
		ds, err := p.Devices(ctx)
		if err != nil || len(ds) != 1 || ds[0].ID != "host" || ds[0].MemoryTotal <= 0 || ds[0].Budget <= 0 {
			t.Fatalf("devices: %+v %v", ds, err)
		}
		return ds[0]
	}
	d := report()
	if len(d.Leases) != 2 || d.Leases[0].Model != "a" || d.Leases[1].Model != "b" || !d.Leases[0].Local || !d.Leases[1].Local ||
		d.Leased != d.Leases[0].Bytes+d.Leases[1].Bytes || d.Leases[0].Bytes <= d.Leases[1].Bytes {
		t.Fatalf("host with both models loaded: %+v", d)
	}
	if err := p.Unload("a"); err != nil {
		t.Fatal(err)
	}
	if d := report(); len(d.Leases) != 1 || d.Leases[0].Model != "b" {
		t.Fatalf("host after a's unload: %+v", d)
	}
}
