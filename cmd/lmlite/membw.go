package main

import (
	"time"
	"unsafe"

	"github.com/lmlite/lmlite/engine/parallel"
)

// readBandwidth measures memory read bandwidth in bytes/s: every worker of the pool
// sums its part of a buffer much larger than the caches, reps times; the best pass is
// reported (the figure the hardware allows, as STREAM reports).
func readBandwidth(threads int, bytes int64, reps int) float64 {
	words := make([]uint64, bytes/8)
	for i := range words {
		words[i] = uint64(i)
	}
	p := parallel.New(threads)
	defer p.Close()
	t := &sumTask{words: words, out: make([]uint64, threads*8)}
	best := 0.0
	for range reps {
		t0 := time.Now()
		p.Run(t, len(words)/4096, 1)
		if bw := float64(len(words)*8) / time.Since(t0).Seconds(); bw > best {
			best = bw
		}
	}
	sink = t.out[0]
	return best
}

var sink uint64

// sumTask sums 4096-word chunks with eight independent accumulators, so the loop is
// bound by loads, not by the adds' latency.
type sumTask struct {
	words []uint64
	out   []uint64 // per worker, padded to a cache line
}

func (t *sumTask) RunRange(worker, start, end int) {
	w := t.words[start*4096 : end*4096]
	var a0, a1, a2, a3, a4, a5, a6, a7 uint64
	for i := 0; i+8 <= len(w); i += 8 {
		v := (*[8]uint64)(unsafe.Pointer(&w[i]))
		a0 += v[0]
		a1 += v[1]
		a2 += v[2]
		a3 += v[3]
		a4 += v[4]
		a5 += v[5]
		a6 += v[6]
		a7 += v[7]
	}
	t.out[worker*8] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}
