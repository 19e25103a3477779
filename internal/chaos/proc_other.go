//go:build !linux

package chaos

import "os/exec"

// setDeathSignal: only Linux can tie a child's life to its parent's; elsewhere the run
// kills its holders itself when it ends.
func setDeathSignal(*exec.Cmd) {}
