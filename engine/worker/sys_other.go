//go:build !linux

package worker

import "os/exec"

// setDeathSignal: only Linux has PDEATHSIG; elsewhere the worker exits when its
// socket closes.
func setDeathSignal(cmd *exec.Cmd) {}
