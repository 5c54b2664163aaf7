//go:build race

package testkit

// RaceEnabled: the race detector is on. modernc.org/sqlite (transpiled C)
// runs about ten times slower under it, so the million-row tests skip
// themselves.
const RaceEnabled = true
