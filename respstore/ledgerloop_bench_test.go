//go:build unix

package respstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/ledger"
)

// BenchmarkLedgerClosedLoop is the server's ledger write under gwbench's load, in
// ledger mode with the ledger's sync: fsync: conns workers, each thinking (a sleep,
// as a 1-token request's generation) and then settling one request, again and
// again: "entry" writes a ledger entry alone (chat's settlement), "stored" Puts a
// ~1.3 KiB response (ids in time order, as the server's) carried by its entry's
// write (PutCarried: a stored response's); "stored-4k" is "stored" in a bbolt file
// of the OS's 4 KiB pages (the store's files before pageSize). It reports the mean
// time a settlement waited (wait-µs: what it adds to its request), the process's
// CPU per settlement (cpu-µs/op, every goroutine's: the ledger's and the store's
// appliers too; the figure to read under load) and the ledger writes (so syncs) per
// settlement. The ledger applies every 200 ms and the store commits when it asks, as
// in the server.
func BenchmarkLedgerClosedLoop(b *testing.B) {
	for _, conns := range []int{1, 16} {
		for _, what := range []string{"entry", "stored", "stored-4k"} {
			b.Run(fmt.Sprintf("conns=%d/%s", conns, what), func(b *testing.B) {
				if what == "stored-4k" {
					defer func(p int) { pageSize = p }(pageSize)
					pageSize = os.Getpagesize()
				}
				dir := b.TempDir()
				s, err := OpenBoltLedger(filepath.Join(dir, "responses.db"), Options{})
				if err != nil {
					b.Fatal(err)
				}
				l, err := openTestLedger(dir, s, ledger.SyncFsync)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				defer l.close()
				const think = 2 * time.Millisecond
				var n, waitNs atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				cpu0, w0 := rusageCPU(), l.log.Commits()
				for range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := n.Add(1); i <= int64(b.N); i = n.Add(1) {
							time.Sleep(think)
							t := time.Now()
							var err error
							if what == "entry" {
								err = l.settle(nil)
							} else {
								rec := gcRec("a", fmt.Sprintf("resp_%011x%016x", time.Now().UnixMilli(), i), 1200)
								err = s.PutCarried(context.Background(), rec, Limits{}, func(sd ledger.Side) { l.settle(sd) })
							}
							if err != nil {
								b.Error(err)
								return
							}
							waitNs.Add(int64(time.Since(t)))
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(waitNs.Load())/float64(b.N)/1e3, "wait-µs")
				b.ReportMetric(float64((rusageCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
				b.ReportMetric(float64(l.log.Commits()-w0)/float64(b.N), "ledger-writes/op")
			})
		}
	}
}

// rusageCPU is the process's user + system CPU time so far.
func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
