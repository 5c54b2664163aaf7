//go:build race

package idemkit

// raceEnabled: modernc.org/sqlite (transpiled C) runs about ten times slower
// under the race detector, so the million-row test skips itself.
const raceEnabled = true
