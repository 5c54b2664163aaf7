//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// prepareChild does nothing outside Unix.
func prepareChild(*exec.Cmd) {}

// killChild kills the child.
func killChild(p *os.Process) error { return p.Kill() }

// terminateChild kills the child: there is no SIGTERM to send outside Unix,
// so the server does not shut down gracefully there.
func terminateChild(p *os.Process) error { return p.Kill() }
