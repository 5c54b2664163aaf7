//go:build !unix

package idemkit

// takeoverSupported is false: without a liveness check here, a dead
// holder's lease is only taken over once it runs out.
const takeoverSupported = false

// hostSuffix is empty: the hostname alone names the host.
func hostSuffix() string { return "" }

// processStartTime is unknown here.
func processStartTime(int) string { return "" }

// processGone always reports the holder alive.
func processGone(int, string) (bool, string) { return false, "" }
