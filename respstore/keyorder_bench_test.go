//go:build unix

package respstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPutKeyOrder is the process's CPU per Put (cpu-µs/op: the applier's bbolt
// commits included) of 16 concurrent Putters of ~1 KiB records, on a store already
// holding 4096 responses, their ids random (as the gateway's response ids were: its
// request ids' random digits) or in time order (as they are: openai.ResponseID).
// A commit of random ids rewrites a page for about each Put; in time order it
// appends to the last pages (appendFill).
func BenchmarkPutKeyOrder(b *testing.B) {
	for _, order := range []string{"random", "time"} {
		b.Run(order, func(b *testing.B) {
			s, err := OpenBolt(filepath.Join(b.TempDir(), "r.db"), Options{ProcessSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Uint64
			id := func() string {
				if order == "random" {
					return fmt.Sprintf("resp_%016x", rand.Uint64())
				}
				return fmt.Sprintf("resp_%08x%08x", n.Add(1), rand.Uint32())
			}
			for range 4096 {
				if err := s.Put(context.Background(), gcRec("a", id(), 1000)); err != nil {
					b.Fatal(err)
				}
			}
			s.flushTo(0)
			b.SetParallelism(16)
			b.ResetTimer()
			cpu0 := procCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Put(context.Background(), gcRec("a", id(), 1000)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			s.flushTo(0)
			b.ReportMetric(float64((procCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
