package respstore_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
)

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
