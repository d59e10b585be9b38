package kernels

import "github.com/lmlite/lmlite/engine/parallel"

// SetThreads resizes the package's worker pool to n workers (n <= 0: one per CPU)
// and returns the previous size. Results do not depend on it (every output row is
// computed whole by one worker); only speed does. It waits for a running product to
// finish.
func SetThreads(n int) int {
	p := pool()
	poolMu.Lock()
	defer poolMu.Unlock()
	prev := p.Size()
	if np := parallel.New(n); np.Size() != prev {
		thePool = np
		p.Close()
	} else {
		np.Close()
	}
	return prev
}

// Threads is the size of the package's worker pool.
func Threads() int {
	pool()
	poolMu.Lock()
	defer poolMu.Unlock()
	return thePool.Size()
}
