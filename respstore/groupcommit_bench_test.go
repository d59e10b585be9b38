package respstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkPutConcurrent compares ways of committing concurrent Puts (conns
// goroutines, each Putting one response after the other), all fsynced: "update",
// one db.Update per Put (the store before its group commit); "dbbatch", bbolt's
// DB.Batch (its MaxBatchDelay of 10 ms, and 1 ms); "group", the store's Put
// (commitLoop: one journal record and fdatasync per group, bbolt committing off the
// Puts' path). ns/op is per Put.
func BenchmarkPutConcurrent(b *testing.B) {
	for _, conns := range []int{1, 16} {
		for _, how := range []string{"update", "dbbatch-10ms", "dbbatch-1ms", "group"} {
			b.Run(fmt.Sprintf("%s/conns=%d", how, conns), func(b *testing.B) {
				s, err := OpenBolt(filepath.Join(b.TempDir(), "r.db"), Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if how == "dbbatch-1ms" {
					s.db.MaxBatchDelay = time.Millisecond
				}
				put := func(rec Record) error {
					rec, _ = s.o.prepare(rec)
					op := &putOp{rec: rec, val: appendRecord(nil, &rec), size: rec.Size()}
					tx := func(tx *bolt.Tx) error { return putTx(tx, op) }
					switch how {
					case "update":
						return s.db.Update(tx)
					case "group":
						return s.Put(context.Background(), rec)
					}
					return s.db.Batch(tx)
				}
				var n atomic.Int64
				b.SetParallelism(conns) // × GOMAXPROCS goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := put(gcRec("a", fmt.Sprintf("resp_%d", n.Add(1)), 200)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
