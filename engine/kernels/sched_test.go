package kernels

import (
	"sync"
	"testing"
)

// TestJobCoversRows: the workers of a job, however they interleave, compute every
// row exactly once, in parts that are whole multiples of the grain but for the
// range's end.
func TestJobCoversRows(t *testing.T) {
	for _, n := range []int{1, 2, 7, 8, 9, 63, 64, 100, 768, 1000, 4097} {
		for _, workers := range []int{1, 2, 3, 4} {
			for _, grain := range []int{1, 8} {
				for _, cost := range []int{1, 100, 1 << 14} {
					var mu sync.Mutex
					seen := make([]int, n)
					var j job
					j.start(n, cost, workers, grain)
					j.f = func(lo, hi int) {
						mu.Lock()
						defer mu.Unlock()
						if lo%grain != 0 || (hi%grain != 0 && hi != n) || lo >= hi {
							t.Errorf("n %d workers %d grain %d: part [%d, %d)", n, workers, grain, lo, hi)
						}
						for i := lo; i < hi; i++ {
							seen[i]++
						}
					}
					var wg sync.WaitGroup
					for w := 0; w < workers; w++ {
						wg.Add(1)
						go func() { defer wg.Done(); j.RunRange(w, w, w+1) }()
					}
					wg.Wait()
					for i, c := range seen {
						if c != 1 {
							t.Fatalf("n %d workers %d grain %d cost %d: row %d computed %d times", n, workers, grain, cost, i, c)
						}
					}
				}
			}
		}
	}
}
