package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
)

// Without redis: the stored responses are a bbolt file in the data directory, kept
// for the configured retention; the sweeper removes the expired ones at once.
func TestServeKeepsResponsesInTheDataDir(t *testing.T) {
	dir := t.TempDir()
	cfg, err := configs.Parse([]byte("data_dir: " + dir + "\nresponses: {retention: 1h}\nmodels: [{id: m, path: a.gguf}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, closeStore, err := openResponses(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := s.(*respstore.Bolt); !ok {
		t.Fatalf("store %T, want *respstore.Bolt", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "responses.db")); err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now()
	old := respstore.Record{Tenant: "a", ID: "resp_old", Created: now.Add(-2 * time.Hour)} // expired an hour ago
	fresh := respstore.Record{Tenant: "a", ID: "resp_new", Created: now}
	for _, r := range []respstore.Record{old, fresh} {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.Get(ctx, "a", "resp_new", now); err != nil || !r.Expires.Equal(now.Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("retention: expires %v (%v), want an hour after %v", r.Expires, err, now)
	}
	stop := sweepResponses(s, time.Hour, slog.New(slog.DiscardHandler))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if u, _ := s.Usage(ctx, "a"); u.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not remove the expired response")
		}
	}
	stop()
}

// With redis: the stored responses are in Redis under the key prefix, so another
// process (another store on the same Redis) reads them.
func TestServeSharesResponsesThroughRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg, err := configs.Parse([]byte("data_dir: " + t.TempDir() + "\nredis: {url: '" + srv.URL(0) + "', key_prefix: 'x:'}\nmodels: [{id: m, path: a.gguf}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var stores []respstore.Store
	for range 2 {
		rc, err := rediscli.New(rediscli.Options{URL: srv.URL(0)})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		s, closeStore, err := openResponses(cfg, rc)
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		stores = append(stores, s)
	}
	ctx, now := context.Background(), time.Now()
	if err := stores[0].Put(ctx, respstore.Record{Tenant: "a", ID: "resp_1", Created: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[1].Get(ctx, "a", "resp_1", now); err != nil {
		t.Fatalf("the other process: %v", err)
	}
	rc, _ := rediscli.New(rediscli.Options{URL: srv.URL(0)})
	defer rc.Close()
	if n, err := rc.Exists(ctx, "x:resp:{a}:id:resp_1").Result(); n != 1 || err != nil {
		t.Errorf("the record is not under the key prefix: %d %v", n, err)
	}
}
