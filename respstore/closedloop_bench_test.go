package respstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPutClosedLoop is the store under gwbench's load: conns workers, each
// working think (a sleep, as a 1-token request's generation) and then Putting one
// ~300-byte response, again and again. It reports the Puts per second of them all
// and the mean time a Put took (put-µs): the time a stored response adds to its
// request. The bbolt commits (every 100 ms) happen as in the server. fsync: each
// group's journal record fdatasynced (the default); process: Options.ProcessSync.
func BenchmarkPutClosedLoop(b *testing.B) {
	for _, conns := range []int{1, 16} {
		for _, mode := range []string{"fsync", "process"} {
			b.Run(fmt.Sprintf("conns=%d/%s", conns, mode), func(b *testing.B) {
				s, err := OpenBolt(filepath.Join(b.TempDir(), "r.db"), Options{ProcessSync: mode == "process"})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				const think = 2 * time.Millisecond
				var n, putNs atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := n.Add(1); i <= int64(b.N); i = n.Add(1) {
							time.Sleep(think)
							t := time.Now()
							if err := s.Put(context.Background(), gcRec("a", fmt.Sprintf("resp_%d", i), 200)); err != nil {
								b.Error(err)
								return
							}
							putNs.Add(int64(time.Since(t)))
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.ReportMetric(float64(b.N)/el.Seconds(), "puts/s")
				b.ReportMetric(float64(putNs.Load())/float64(b.N)/1e3, "put-µs")
			})
		}
	}
}
