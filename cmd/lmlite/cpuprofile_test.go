package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
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

// TestStartWaitProfiles: each path given gets its profile (gzip) once stop is called;
// no path writes nothing; a path that cannot be created is an error.
func TestStartWaitProfiles(t *testing.T) {
	dir := t.TempDir()
	block, mutex := filepath.Join(dir, "block.pprof"), filepath.Join(dir, "mutex.pprof")
	stop := startWaitProfiles(block, mutex)
	c := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(c) }()
	<-c // a blocking receive the block profile records
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{block, mutex} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Errorf("%s (%d bytes) is not gzip", p, len(b))
		}
	}
	if err := startWaitProfiles("", "")(); err != nil {
		t.Fatal(err)
	}
	if err := startWaitProfiles(filepath.Join(dir, "missing", "b.pprof"), "")(); err == nil {
		t.Error("no error for a directory that does not exist")
	}
}
