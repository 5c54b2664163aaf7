//go:build !linux

package main

// fsType is only known on Linux: "".
func fsType(string) string { return "" }
