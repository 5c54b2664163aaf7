// Package riverchaos is the chaos configuration of the River backend
// (package idemriver): three service processes share one River queue on
// PostgreSQL and are SIGKILLed and restarted at seeded moments while intents
// flow to the payments example API behind the fault proxy (dropped answers,
// resets, 503s, delays), the first kill landing on a service whose payment is
// being made. It checks from the payments ledger and the queue that
// every intent ended, that each succeeded intent paid exactly once, and that
// no intent reached the API under two keys.
//
// It is a package of its own, apart from internal/chaos, so that River is
// linked only where it is used. The package has no API: see its test.
//
// Reproduce a run with IDEMKIT_CHAOS_SEED=N (the seed is logged).
//
// # Stability
//
// Internal to idemkit's test suites.
package riverchaos
