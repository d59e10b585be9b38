//go:build !linux

package parallel

// osYield is a no-op where sched_yield is not called (see yield_linux.go).
func osYield() {}
