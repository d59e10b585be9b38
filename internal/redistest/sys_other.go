//go:build !linux

package redistest

import "os/exec"

// DieWithParent: only Linux has PDEATHSIG; elsewhere a server started by a test
// that is killed outright outlives it (Stop and the test's cleanup still end it).
func DieWithParent(cmd *exec.Cmd) {}
