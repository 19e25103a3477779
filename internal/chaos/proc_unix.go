//go:build unix

package chaos

import (
	"os/exec"
	"syscall"
)

// stop freezes a process whole (SIGSTOP), like a frozen Lambda execution environment.
func stop(cmd *exec.Cmd) error { return cmd.Process.Signal(syscall.SIGSTOP) }

// resume thaws it (SIGCONT).
func resume(cmd *exec.Cmd) error { return cmd.Process.Signal(syscall.SIGCONT) }
