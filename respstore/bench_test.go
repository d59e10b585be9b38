package respstore_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
)

// benchStores opens a bbolt store and a Redis one (on a redis-server of its own).
func benchStores(b *testing.B) map[string]respstore.Store {
	bs, err := respstore.OpenBolt(filepath.Join(b.TempDir(), "r.db"), respstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bs.Close() })
	srv := redistest.Start(b, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return map[string]respstore.Store{"bolt": bs, "redis": respstore.NewRedis(c, "b:", respstore.Options{})}
}

// BenchmarkAdmissionCheck is what the gateway's admission of a request that will
// store its response costs: Usage (a tenant with 100 responses), and SweepTenant with
// nothing expired (which it calls only for a tenant at its limit).
func BenchmarkAdmissionCheck(b *testing.B) {
	for name, s := range benchStores(b) {
		for i := range 100 {
			if err := s.Put(ctx, rec("a", "resp_"+strconv.Itoa(i), "", 2)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name+"/usage", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if u, err := s.Usage(ctx, "a"); err != nil || u.Count != 100 {
					b.Fatal(u, err)
				}
			}
		})
		b.Run(name+"/sweep-tenant-nothing-due", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if n, err := s.SweepTenant(ctx, "a", t0); err != nil || n != 0 {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkConversation is what continuing a response costs by the depth of its
// chain: one bbolt read transaction, or one Redis script.
func BenchmarkConversation(b *testing.B) {
	for _, backend := range []string{"bolt", "redis"} {
		var s respstore.Store
		if backend == "bolt" {
			bs, err := respstore.OpenBolt(filepath.Join(b.TempDir(), "r.db"), respstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer bs.Close()
			s = bs
		} else {
			srv := redistest.Start(b, redistest.Options{})
			c, err := rediscli.New(rediscli.Options{URL: srv.URL(0)})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s = respstore.NewRedis(c, "b:", respstore.Options{})
		}
		prev := ""
		for depth := 1; depth <= 100; depth++ {
			id := "resp_" + strconv.Itoa(depth)
			if err := s.Put(ctx, rec("a", id, prev, 2)); err != nil {
				b.Fatal(err)
			}
			prev = id
			if depth != 1 && depth != 10 && depth != 100 {
				continue
			}
			b.Run(backend+"/depth="+strconv.Itoa(depth), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					items, err := s.Conversation(ctx, "a", id, t0)
					if err != nil || len(items) != 3*depth {
						b.Fatal(len(items), err)
					}
				}
			})
		}
	}
}
