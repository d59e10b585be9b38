//go:build unix

package model

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's CPU time so far (user and system, all threads).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
