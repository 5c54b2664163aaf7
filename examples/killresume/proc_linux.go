//go:build linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// prepareChild puts a child in a process group of its own (a Ctrl-C in the
// terminal reaches only the demo, which then stops its children itself) and
// has the kernel kill it if the demo dies without cleaning up.
func prepareChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killChild sends SIGKILL to the child's process group.
func killChild(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// terminateChild sends SIGTERM to the child's process group.
func terminateChild(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }
