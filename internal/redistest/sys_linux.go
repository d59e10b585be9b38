package redistest

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel kill cmd's process when the process that started
// it (the test binary) dies, even by SIGKILL, so no server outlives its test.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
