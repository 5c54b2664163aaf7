//go:build unix && !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// prepareChild puts a child in a process group of its own: a Ctrl-C in the
// terminal reaches only the demo, which then stops its children itself.
// (There is no parent-death signal outside Linux: a demo killed with
// SIGKILL leaves its children running.)
func prepareChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killChild sends SIGKILL to the child's process group.
func killChild(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// terminateChild sends SIGTERM to the child's process group.
func terminateChild(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }
