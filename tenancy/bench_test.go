package tenancy

import (
	"encoding/binary"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
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

// BenchmarkRecordBoltBatch is the alternative to the ledger's log that issue 37 asks
// about: each Record as one bbolt DB.Batch call (bbolt coalesces concurrent calls into
// one transaction, fsynced at commit) writing the entry and its day's spend, from 8
// goroutines. Compare with BenchmarkRecord/fsync (the log: one fsynced append per
// group, applied to bbolt in the background); docs/PERFORMANCE.md has the figures.
func BenchmarkRecordBoltBatch(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "batch.db"), 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, k := range [][]byte{bucketLedger, bucketSpend} {
			if _, err := tx.CreateBucketIfNotExists(k); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	e := Entry{Time: time.Now(), RequestID: "req_0123456789abcdef", Tenant: "bench", KeyID: "abcdefgh", Model: "m", Tier: "balanced",
		Status: 200, Finish: "stop", PromptTokens: 12, CompletionTokens: 1, Cost: 14000, Latency: 123456}
	var seq atomic.Uint64
	d, _ := windows(e.Time)
	sk := []byte(spendKey(e.Tenant, 'd', d))
	b.SetParallelism(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v := appendEntry(nil, &e)
			err := db.Batch(func(tx *bolt.Tx) error {
				var k [8]byte
				binary.BigEndian.PutUint64(k[:], seq.Add(1))
				if err := tx.Bucket(bucketLedger).Put(k[:], v); err != nil {
					return err
				}
				sp := tx.Bucket(bucketSpend)
				var cur uint64
				if old := sp.Get(sk); len(old) == 8 {
					cur = binary.BigEndian.Uint64(old)
				}
				var nv [8]byte
				binary.BigEndian.PutUint64(nv[:], cur+uint64(e.Cost))
				return sp.Put(sk, nv[:])
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAdmitReserveSettleInProcess: one request's quota work in-process (no
// store): Admit (concurrency, requests/s, tokens/min), Reserve and Settle, from 8
// goroutines over 8 tenants.
func BenchmarkAdmitReserveSettleInProcess(b *testing.B) {
	ten := New(nil)
	qs := make([]Quota, 8)
	for i := range qs {
		qs[i] = Quota{Tenant: "t" + string(rune('a'+i)), RequestsPerSecond: 1e9, Burst: 1e6, TokensPerMinute: 1e9, MaxConcurrency: 1000, DailyBudget: 1e15}
	}
	var next atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		q := &qs[next.Add(1)%8]
		for pb.Next() {
			now := time.Now()
			tk, err := ten.Admit(q, now, 10)
			if err == nil {
				err = tk.Reserve(now, 1000)
			}
			if err == nil {
				_, err = tk.Settle(Entry{Time: now, PromptTokens: 10, CompletionTokens: 1, Cost: 900})
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
