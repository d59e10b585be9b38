package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStartCPUProfile: a path gets a profile (gzip, as pprof writes it) once stop is called; no
// path writes nothing; a path that cannot be created is an error.
func TestStartCPUProfile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("the profile (%d bytes) is not gzip", len(b))
	}
	stop, err = startCPUProfile("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil {
		t.Error("no error for a directory that does not exist")
	}
}
