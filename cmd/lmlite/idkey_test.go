package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// The hashes of end-user identifiers in the ledger compare across restarts only if the
// key outlives the process: kept in the data directory, or shared through Redis.
func TestIdentifierKeyOutlivesTheProcess(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	a, err := identifierKey(ctx, dir, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := identifierKey(ctx, dir, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 32 || !bytes.Equal(a, b) {
		t.Fatalf("a restart got another key: %x then %x", a, b)
	}
	if fi, err := os.Stat(filepath.Join(dir, "identifier-key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identifier-key file: %v %v, want mode 0600", fi, err)
	}
	other, err := identifierKey(ctx, filepath.Join(t.TempDir(), "data"), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, other) {
		t.Fatal("two data directories made the same key")
	}

	rs := redistest.Start(t, redistest.Options{})
	var keys [][]byte
	for i := range 2 { // two processes sharing one Redis, each with its own data directory
		rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		k, err := identifierKey(ctx, filepath.Join(t.TempDir(), "data", string(rune('a'+i))), rc, "lmlite:")
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys[0]) != 32 || !bytes.Equal(keys[0], keys[1]) {
		t.Fatalf("two processes on one Redis got different keys: %x, %x", keys[0], keys[1])
	}
}
