package redistest

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

func client(t *testing.T, s *Server) *redis.Client {
	opt, err := redis.ParseURL(s.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestKillRestartLosesDataWithoutPersistence: the default server keeps nothing across
// a SIGKILL, comes back on the same port, and is gone after Stop.
func TestKillRestartLosesDataWithoutPersistence(t *testing.T) {
	ctx := context.Background()
	s := Start(t, Options{})
	if s.port == 6379 {
		t.Fatal("port 6379 used")
	}
	c := client(t, s)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if s.Running() || ping(s.Addr()) == nil {
		t.Fatal("server still answers after Kill")
	}
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET succeeded while the server is dead")
	}
	s.Restart()
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after restart without persistence: %v, want redis.Nil", err)
	}
	s.Stop()
	if ping(s.Addr()) == nil {
		t.Fatal("server answers after Stop")
	}
	s.Stop() // idempotent
}

// TestPersistSurvivesKill: with Persist the append-only file brings the data back
// after a SIGKILL.
func TestPersistSurvivesKill(t *testing.T) {
	ctx := context.Background()
	s := Start(t, Options{Persist: true})
	c := client(t, s)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Restart()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart with persistence: %q %v", v, err)
	}
}

// TestServersAreIndependent: two servers in one test get different ports.
func TestServersAreIndependent(t *testing.T) {
	a, b := Start(t, Options{}), Start(t, Options{})
	if a.Addr() == b.Addr() {
		t.Fatalf("both on %s", a.Addr())
	}
}
