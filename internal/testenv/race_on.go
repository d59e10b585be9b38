//go:build race

package testenv

// Race reports whether the race detector is on. Tests of pure numerics (one goroutine's
// arithmetic, many times) skip under it: it slows them tenfold and can find nothing
// there; `make test` runs them again without it.
const Race = true
