package kernels

import "sync/atomic"

// Scheduling of the pool's work. A static split (one equal part per worker) waits
// for its slowest part, and on a shared machine a worker is often slowed by another
// process's thread on its core. So each worker first takes its equal part of the
// first three quarters of the range, then the workers take chunks of the rest from
// a shared counter, each half of what remains per worker (guided self-scheduling),
// down to a minimum that keeps each chunk long enough to stream well (a chunk's
// first rows start cold: more, smaller chunks made decoding up to a tenth slower).
// Whichever worker is running takes more rows; every row is still computed whole by
// one worker, so the results do not depend on the split.

// job is the parallel job the pool runs; there is one, guarded by poolMu. It
// runs a func (Parallel), a matrix product (MatMul, which so needs no closure and
// allocates nothing per call) or a group of them (MatMuls).
type job struct {
	next atomic.Int64 // the first row not yet taken
	_    [56]byte     // the counter on its own cache line

	n, static, minChunk, workers, grain int
	f                                   func(lo, hi int)
	mm                                  matMul
	isMM                                bool
	group                               *mmGroup // MatMuls
}

var theJob job // guarded by poolMu

// minChunkWork is the least work (in MatMul's multiply-adds) a dynamic chunk holds.
const minChunkWork = 1 << 16

// start sets up a job over [0, n) for workers workers, each row costing cost;
// the parts are multiples of grain rows (but the last), so that the multi-row
// kernels get whole groups.
func (j *job) start(n, cost, workers, grain int) {
	j.n, j.workers, j.grain = n, workers, grain
	j.static = n * 3 / 4 / (workers * grain) * (workers * grain)
	j.minChunk = roundUp(max(1, minChunkWork/max(cost, 1)), grain)
	j.next.Store(int64(j.static))
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

func (j *job) run(lo, hi int) {
	if j.isMM {
		j.mm.rows(lo, hi)
	} else if j.group != nil {
		j.group.run(lo, hi)
	} else {
		j.f(lo, hi)
	}
}

// RunRange is worker w's share of the job (the pool gives worker w the range
// [w, w+1)).
func (j *job) RunRange(w, _, _ int) {
	lo, hi := j.static*w/j.workers, j.static*(w+1)/j.workers
	if lo < hi {
		j.run(lo, hi)
	}
	for {
		cur := int(j.next.Load())
		left := j.n - cur
		if left <= 0 {
			return
		}
		size := min(left, max(j.minChunk, left/(2*j.workers)/j.grain*j.grain))
		if j.next.CompareAndSwap(int64(cur), int64(cur+size)) {
			j.run(cur, cur+size)
		}
	}
}
