// Package ledger is the durable usage ledger's write path: a write-ahead log beside a
// bbolt database, written with group commit and applied to the database in the
// background. It knows nothing of tenants, money or usage: its Owner (tenancy.Store)
// makes the groups and batches, encodes a record's payload and applies a batch
// (entries, spend totals and usage rollups in one transaction, tenancy's storeBatch),
// and reads a record back at replay.
//
//	l, err := ledger.Open(db, base, opts, owner) // replays what a killed process left
//	p, err := l.Append(func(g ledger.Group) { ... }) // under the append lock: number and add
//	err = l.Commit(p)                             // returns once p's group is logged
//	err = l.Sync()                                // the database holds everything logged
//	err = l.Close()
//
// Log (log.go) has the group commit and the apply; segment.go the log's format and
// the segment files' life: created with the next number (CreateSegment), read back
// after a kill (ReadSegments), deleted once applied (RemoveSegments).
//
// A record is
//
//	uint32 length | uint32 CRC-32 (IEEE) of the payload | payload
//
// big-endian. A log is a sequence of segment files, BASE.wal.N (N ≥ 1, in number
// order; BASE.wal, the single log of earlier versions, counts as number 0). A segment
// ends at its first torn record: a write the process never finished, so never
// acknowledged (Records stops there; ReadSegments goes on with the next segment).
//
// # Why not bbolt's DB.Batch
//
// bbolt's DB.Batch also groups concurrent writers into one transaction, but it waits
// up to MaxBatchDelay (10 ms by default) for company before committing, and each
// commit is a bbolt transaction: the changed B+tree pages, the meta page and two
// fsyncs. A lone write therefore waits about the delay, and every request settled
// waits for it. The log appends one small record (one write(2), one fsync with
// SyncFsync) and starts writing at once; writers that arrive during a write form the
// next group without waiting for a timer, and the B+tree is written once per batch
// (every 200 ms or 4096 entries) instead of once per group. Measured with
// BenchmarkLoneWrite (one writer, fsync, `go test -run X -bench LoneWrite
// -benchtime 200x ./ledger`, 2 shared cores at load average 21, three runs): the log
// 0.48–0.73 ms per acknowledged entry, DB.Batch 12.5–14.1 ms. With 8 concurrent
// writers DB.Batch still takes 3.9× as long per entry (tenancy's
// BenchmarkRecordBoltBatch against BenchmarkRecord, docs/PERFORMANCE.md). The price is
// the replay at Open and the segment files; the ledger keeps the log.
package ledger
