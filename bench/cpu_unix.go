//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU time of this process (getrusage
// RUSAGE_SELF, all threads); -1 if unavailable.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
