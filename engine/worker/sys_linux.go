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
