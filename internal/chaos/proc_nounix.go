//go:build !unix

package chaos

import (
	"errors"
	"os/exec"
)

var errNoSignals = errors.New("chaos: pausing a process needs SIGSTOP (unix only)")

func stop(*exec.Cmd) error   { return errNoSignals }
func resume(*exec.Cmd) error { return errNoSignals }
