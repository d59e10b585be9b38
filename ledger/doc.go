// Package ledger is the durable usage ledger's log format: the records and segment
// files of the write-ahead log that tenancy.Store writes every settled request to
// before it answers, and the segment files' life: created with the next number
// (CreateSegment), read back after a kill (ReadSegments), deleted once applied
// (RemoveSegments). Issue 37 moves the ledger here piece by piece; the group commit,
// the bbolt apply and the rollups still live in tenancy/ledger.go.
//
// A record is
//
//	uint32 length | uint32 CRC-32 (IEEE) of the payload | payload
//
// big-endian. A log is a sequence of segment files, BASE.wal.N (N ≥ 1, in number
// order; BASE.wal, the single log of earlier versions, counts as number 0). A segment
// ends at its first torn record: a write the process never finished, so never
// acknowledged (Records stops there; ReadSegments goes on with the next segment).
package ledger
