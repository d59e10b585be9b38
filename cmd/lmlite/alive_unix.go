//go:build unix

package main

import (
	"errors"
	"syscall"
)

// alive says whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
