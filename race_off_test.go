//go:build !race

package idemkit

const raceEnabled = false
