package chaos

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes a holder process die with its parent.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
