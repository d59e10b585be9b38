package respstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPageSize: a new store's bbolt file has pageSize pages (16 KiB: a quarter as
// many page writes per commit as the OS's 4 KiB pages), in both modes; a file made
// with other pages (by an earlier version) keeps them, and its responses read back.
func TestPageSize(t *testing.T) {
	for _, led := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "responses.db")
		open := OpenBolt
		if led {
			open = OpenBoltLedger
		}
		s, err := open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.db.Info().PageSize; got != 16<<10 {
			t.Errorf("ledger mode %v: a new file's pages are %d bytes, want %d", led, got, 16<<10)
		}
		s.Close()
	}

	path := filepath.Join(t.TempDir(), "responses.db")
	old := pageSize
	pageSize = os.Getpagesize()
	s, err := OpenBolt(path, Options{})
	pageSize = old
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Put(ctx, gcRec("a", "resp_1", 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenBolt(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.db.Info().PageSize; got != os.Getpagesize() {
		t.Errorf("a file of %d-byte pages opened again has %d-byte pages", os.Getpagesize(), got)
	}
	if _, err := s.Get(ctx, "a", "resp_1", time.Now()); err != nil {
		t.Errorf("a response of the older file: %v", err)
	}
	if err := s.Put(ctx, gcRec("a", "resp_2", 10)); err != nil {
		t.Errorf("a Put into the older file: %v", err)
	}
}
