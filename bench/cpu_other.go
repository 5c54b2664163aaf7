//go:build !unix

package main

import "time"

// processCPU is unavailable outside Unix: -1.
func processCPU() time.Duration { return -1 }
