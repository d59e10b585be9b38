package tenancy

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRecord: Settle's ledger write from 8 goroutines in each sync mode.
//
// (A log mapped into memory, copied into instead of written, was tried: on this
// machine's ext4 the first write to each mapped page faults at ~28µs, so it cost
// about what write(2) does, with SIGBUS and fallocate to worry about. Not kept.)
func BenchmarkRecord(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"process", Options{Sync: SyncProcess}},
		{"fsync", Options{Sync: SyncFsync}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "lmlite.db"), c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			e := Entry{Time: time.Now(), RequestID: "req_0123456789abcdef", Tenant: "bench", KeyID: "abcdefgh", Model: "m", Tier: "balanced",
				Status: 200, Finish: "stop", PromptTokens: 12, CompletionTokens: 1, Cost: 14000, Latency: 123456}
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Record(e); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkHoldThenRecord: what a held request adds to its ledger writes, from 8
// goroutines: HoldAsync (returns at once; its group committed in the background) and
// then Record of the entry that settles it. Compare with BenchmarkRecord.
func BenchmarkHoldThenRecord(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"process", Options{Sync: SyncProcess}},
		{"fsync", Options{Sync: SyncFsync}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "lmlite.db"), c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			e := Entry{Time: time.Now(), RequestID: "req_0123456789abcdef", Tenant: "bench", KeyID: "abcdefgh", Model: "m", Tier: "balanced",
				Status: 200, Finish: "stop", PromptTokens: 12, CompletionTokens: 1, Cost: 14000, Latency: 123456}
			h := Hold{Time: e.Time, RequestID: e.RequestID, Tenant: "bench", KeyID: "abcdefgh", Model: "m", Tier: "balanced",
				PromptTokens: 12, Reserved: 30000}
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					seq, err := s.HoldAsync(h)
					if err != nil {
						b.Error(err)
						return
					}
					e := e
					e.Hold = seq
					if err := s.Record(e); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
