//go:build unix && !linux

package idemkit

import (
	"errors"
	"syscall"
)

// takeoverSupported: this OS can tell a dead lease holder from a live one
// (by pid only: no start time to tell a reused pid).
const takeoverSupported = true

// hostSuffix is empty: the hostname alone names the host.
func hostSuffix() string { return "" }

// processStartTime is unknown here.
func processStartTime(int) string { return "" }

// processGone reports whether no process has the pid (kill(pid, 0) fails
// with ESRCH). A reused pid looks alive: the lease is then left to run out.
func processGone(pid int, _ string) (bool, string) {
	if pid <= 0 {
		return false, ""
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true, "no such process"
	}
	return false, ""
}
