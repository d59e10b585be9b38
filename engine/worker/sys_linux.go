package worker

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the worker when its parent dies (even by
// SIGKILL), the first of the two guards against orphans; the second is the worker
// exiting when its socket closes.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// socketPair makes the parent's and the worker's ends of a stream socket, neither
// inherited by other children (SOCK_CLOEXEC, atomically with the socket's creation).
func socketPair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
