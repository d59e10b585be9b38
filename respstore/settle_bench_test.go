package respstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/tenancy"
)

// syncCounter counts the ledger's segment syncs (tenancy.Options.WrapSegment).
type syncCounter struct {
	ledger.SegmentFile
	n *atomic.Int64
}

func (f syncCounter) Sync() error { f.n.Add(1); return f.SegmentFile.Sync() }

// BenchmarkSettleThenStore is a stored request's end as the gateway makes it, under
// gwbench's closed loop: conns workers each think (a sleep, as a 1-token request's
// generation), then settle a ticket (its usage entry in the ledger, fsynced) and
// store a ~300-byte response, again and again. two-syncs: Settle waits for the
// ledger, then the Put for its journal (the store before UseLedger); one-sync: the
// store attached to the ledger, SettleAppend, the Put in the entry's group
// (PutLogged), Logged. It reports end-µs (the mean time from the settle's start to
// both being durable: what the request waits after its output) and syncs/req (the
// ledger's syncs plus the journal's records, per request: load-independent).
func BenchmarkSettleThenStore(b *testing.B) {
	for _, conns := range []int{1, 16} {
		for _, mode := range []string{"two-syncs", "one-sync"} {
			b.Run(fmt.Sprintf("conns=%d/%s", conns, mode), func(b *testing.B) {
				dir := b.TempDir()
				var syncs atomic.Int64
				ts, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncFsync,
					WrapSegment: func(f *os.File) ledger.SegmentFile { return syncCounter{f, &syncs} }})
				if err != nil {
					b.Fatal(err)
				}
				defer ts.Close()
				s, err := OpenBolt(filepath.Join(dir, "r.db"), Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if mode == "one-sync" {
					if err := s.UseLedger(ts.Log()); err != nil {
						b.Fatal(err)
					}
				}
				ten := tenancy.New(ts)
				q := &tenancy.Quota{Tenant: "a"}
				const think = 2 * time.Millisecond
				var n, endNs atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				syncs.Store(0)
				j0 := s.commits.Load()
				start := time.Now()
				for range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := n.Add(1); i <= int64(b.N); i = n.Add(1) {
							tk, err := ten.Admit(q, time.Now(), 10)
							if err != nil {
								b.Error(err)
								return
							}
							time.Sleep(think)
							t := time.Now()
							e := tenancy.Entry{Time: t, RequestID: fmt.Sprintf("req_%d", i), Status: 200, PromptTokens: 10, CompletionTokens: 1}
							rec := gcRec("a", fmt.Sprintf("resp_%d", i), 200)
							if mode == "one-sync" {
								_, err = tk.SettleAppend(e)
								if err == nil {
									err = s.PutLogged(context.Background(), rec, Limits{}, tk.Pending())
								}
								if lerr := tk.Logged(); err == nil {
									err = lerr
								}
							} else {
								_, err = tk.Settle(e)
								if err == nil {
									err = s.Put(context.Background(), rec)
								}
							}
							if err != nil {
								b.Error(err)
								return
							}
							endNs.Add(int64(time.Since(t)))
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
				b.ReportMetric(float64(endNs.Load())/float64(b.N)/1e3, "end-µs")
				b.ReportMetric(float64(syncs.Load()+s.commits.Load()-j0)/float64(b.N), "syncs/req")
			})
		}
	}
}
