//go:build race

package parallel

// Under the race detector every atomic load is a call into its runtime (a vector-clock
// acquire, some hundred nanoseconds), so polling is the costliest thing a race-built
// test does: on a loaded 2-core machine, a worker's spin and Run's wait for the other
// parts took most of the CPU of the engine's batch-invariance tests. A race build polls
// briefly and then parks (workers) or yields its core to the OS on every 64th poll
// (Run's caller), as a worker process does; the synchronisation is the same, only the
// polling budget differs.
const (
	spinIters = 512
	raceBuild = true
)
