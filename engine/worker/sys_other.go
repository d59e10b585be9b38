//go:build !linux

package worker

import (
	"os/exec"
	"syscall"
)

// setDeathSignal: only Linux has PDEATHSIG; elsewhere the worker exits when its
// socket closes.
func setDeathSignal(cmd *exec.Cmd) {}

// socketPair makes the parent's and the worker's ends of a stream socket. Without
// SOCK_CLOEXEC (not on every BSD), close-on-exec is set just after creation, under
// syscall.ForkLock so no concurrent exec inherits the descriptors in between.
func socketPair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
