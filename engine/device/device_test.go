package device

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProbeWithoutGPU: on a machine without the NVIDIA library (every machine of this
// project) the real probe reports CPU only, with one reason, and no GPU lease budget.
func TestProbeWithoutGPU(t *testing.T) {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		if _, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1")); err == nil {
			t.Skipf("libnvidia-ml.so.1 is installed in %s: this test is for machines without it", dir)
		}
	}
	inv := Probe()
	if len(inv.GPUs) != 0 || !strings.HasPrefix(inv.Summary(), "devices: CPU only (NVML: ") {
		t.Fatalf("%+v: %q", inv, inv.Summary())
	}
	t.Log(inv.Summary())
	if caps := inv.Capacities(123); len(caps) != 1 || caps["host"] != 123 {
		t.Fatalf("capacities %v", caps)
	}
}

func TestGPUMargin(t *testing.T) {
	for _, tc := range []struct{ total, want int64 }{
		{80 << 30, 4 << 30},
		{4 << 30, 256 << 20},
		{0, 256 << 20},
	} {
		if got := GPUMargin(tc.total); got != tc.want {
			t.Errorf("GPUMargin(%d) = %d, want %d", tc.total, got, tc.want)
		}
	}
	small := Inventory{GPUs: []GPU{{Index: 0, MemoryTotal: 200 << 20}}}
	if caps := small.Capacities(1); len(caps) != 1 {
		t.Errorf("a GPU smaller than its margin got a budget: %v", caps)
	}
}
