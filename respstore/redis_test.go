package respstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
)

func redisStore(t *testing.T, o respstore.Options) (*respstore.Redis, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "respstore-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return respstore.NewRedis(c, "p:", o), c
}

// Every key of a tenant's response names the tenant (as its hash tag) and sits under
// the prefix, and the record expires with the retention.
func TestRedisKeysNameTheTenantAndExpire(t *testing.T) {
	s, c := redisStore(t, respstore.Options{Retention: time.Hour})
	put(t, s, rec("a", "resp_1", "", 2))
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 5 {
		t.Errorf("keys %v, want the record, its 3 index keys and the tenants set", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "p:resp:") || k != "p:resp:tenants" && !strings.HasPrefix(k, "p:resp:{a}:") {
			t.Errorf("key %q is not the tenant's, under the prefix", k)
		}
	}
	ttl, err := c.PTTL(ctx, "p:resp:{a}:id:resp_1").Result()
	if err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("the record's TTL %v (%v), want at most the retention", ttl, err)
	}
}

// A record that Redis expired by its own clock is still taken off its tenant's
// usage by Sweep.
func TestRedisSweepAfterTheRecordExpired(t *testing.T) {
	s, c := redisStore(t, respstore.Options{})
	r := rec("a", "resp_1", "", 1)
	r.Expires = t0.Add(time.Hour)
	put(t, s, r)
	if err := c.Del(ctx, "p:resp:{a}:id:resp_1").Err(); err != nil { // as its TTL would
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, t0.Add(time.Hour)); n != 1 || err != nil {
		t.Fatalf("Sweep removed %d (%v)", n, err)
	}
	if u, _ := s.Usage(ctx, "a"); u != (respstore.Usage{}) {
		t.Errorf("usage %+v after the sweep", u)
	}
}
