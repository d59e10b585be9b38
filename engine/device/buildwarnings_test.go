//go:build cgo

package device

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makeCgoCflags returns CGO_CFLAGS as the repository's Makefile exports it to every
// target (make build, run, test; .ci/run runs make test), with none in the environment.
func makeCgoCflags(t *testing.T, root string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", root,
		"--eval", "print-cgo-cflags: ; @printf '%s' \"$$CGO_CFLAGS\"", "print-cgo-cflags")
	cmd.Env = withoutEnv(os.Environ(), "CGO_CFLAGS", "MAKEFLAGS", "MFLAGS")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make print-cgo-cflags: %v\n%s", err, out)
	}
	return string(out)
}

func withoutEnv(env []string, names ...string) []string {
	var kept []string
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		kept = append(kept, kv)
	}
	return kept
}

// TestNVMLBuildsWithoutWarnings compiles go-nvml (the one cgo package lmlite builds)
// from an empty build cache with the Makefile's CGO_CFLAGS and fails on any compiler
// warning: without -Wno-deprecated-declarations gcc prints ~150 lines about
// deprecated NVML functions on a user's first `make run` (issue 35). Only the package
// and what it imports are built (~25 s). LMLITE_FRESH_BUILD_TEST=1 builds the whole
// binary (./cmd/lmlite) the same way (2–5 min on a loaded 2-core machine).
func TestNVMLBuildsWithoutWarnings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds from an empty cache")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cflags := makeCgoCflags(t, root)
	if !strings.Contains(cflags, "-Wno-deprecated-declarations") {
		t.Errorf("the Makefile's CGO_CFLAGS = %q: no -Wno-deprecated-declarations", cflags)
	}
	target := "github.com/NVIDIA/go-nvml/pkg/nvml"
	if os.Getenv("LMLITE_FRESH_BUILD_TEST") == "1" {
		target = "./cmd/lmlite"
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "out"), target)
	cmd.Dir = root
	cmd.Env = append(withoutEnv(os.Environ(), "CGO_CFLAGS", "GOCACHE"),
		"CGO_CFLAGS="+cflags, "GOCACHE="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", target, err, out)
	}
	if strings.Contains(string(out), "warning") {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Errorf("go build %s with CGO_CFLAGS=%q printed %d lines with warnings, the first:\n%s",
			target, cflags, len(lines), strings.Join(lines[:min(len(lines), 6)], "\n"))
	}
}
