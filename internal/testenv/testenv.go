// Package testenv finds what tests need outside the repository: ../shared (the real
// models and test vectors) and the repository root.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot is the directory holding go.mod above the working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: go.mod not found above the test directory")
		}
		dir = parent
	}
}

// InCI reports whether the tests run in CI (CI=true), where nothing may be skipped for
// want of ../shared or a peer.
func InCI() bool { return os.Getenv("CI") == "true" }

// Shared returns the path of ../shared beside the repository root. When it is absent
// the test is skipped with a loud message, or fails in CI.
func Shared(t testing.TB) string {
	t.Helper()
	shared := filepath.Join(RepoRoot(t), "..", "shared")
	if _, err := os.Stat(shared); err != nil {
		Missing(t, "../shared (the shared models and test data)", err)
	}
	return shared
}

// SharedFile returns the path of a file under ../shared, skipping or failing as Shared.
func SharedFile(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Shared(t), rel)
	if _, err := os.Stat(p); err != nil {
		Missing(t, p, err)
	}
	return p
}

// Missing skips the test loudly, or fails it in CI, for a missing prerequisite.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("testenv: %s is missing in CI: %v", what, err)
	}
	t.Skipf("SKIPPING: %s is missing (%v); this test needs it (and fails in CI without it)", what, err)
}
