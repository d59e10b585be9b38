//go:build !purego

package kernels

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGODEBUGCapsTheSIMDLevel: GODEBUG=cpu.avx512f=off (golang.org/x/sys/cpu's
// option, read once at start) runs the process on the AVX2 kernels of an AVX-512
// CPU, the way docs/PERFORMANCE.md measures the AVX2 level on such machines: the
// test binary, run again with it, reports the levels generic and avx2 only.
func TestGODEBUGCapsTheSIMDLevel(t *testing.T) {
	if os.Getenv("LMLITE_SIMD_LEVELS_PROBE") != "" {
		fmt.Printf("levels: %s\n", strings.Join(simdLevels(), " "))
		return
	}
	requireSIMD(t, "avx512")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGODEBUGCapsTheSIMDLevel$")
	cmd.Env = append(os.Environ(), "LMLITE_SIMD_LEVELS_PROBE=1", "GODEBUG=cpu.avx512f=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "levels: generic avx2\n") {
		t.Fatalf("with GODEBUG=cpu.avx512f=off: %s, want the levels generic avx2", out)
	}
}
