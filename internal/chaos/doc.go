// Package chaos is idemkit's reliability suite: tests that run the real
// system (the payments example as a process, the idemkit client in separate
// processes, PostgreSQL and SQLite) and break it on purpose, then check from
// the payments ledger and the client queues that every intent had exactly
// one effect.
//
// The package has no API; everything is in its test files:
//
//   - TestChaos: the payments API behind the fault proxy, many accounts and
//     client processes (SDK children and the idemkit CLI), client and server
//     processes SIGKILLed and restarted at seeded moments; PostgreSQL and
//     SQLite, transactional and lease mode, two replicas on one database, a
//     window of seconds with the sweeper running. One summary line per run.
//   - TestCrashPoint_*: one targeted kill at each interesting point of a
//     request's life (after the claim, after the effect, after the reply,
//     between the client's commit and its send).
//   - TestHostile_*: malformed keys and bodies against the real middleware,
//     hostile Retry-After values and cut responses against the client, bad
//     queue files and rows against the SDK and the CLI.
//   - TestTenantIsolation*: tenant B probes every key tenant A used while
//     A's requests are in flight; keys forwarded downstream.
//
// The test binary doubles as the child processes of these tests: when
// IDEMKIT_CHAOS_ROLE is set, TestMain runs that role instead of the tests.
//
// Reproduce a chaos run with IDEMKIT_CHAOS_SEED=N (the seed is logged);
// IDEMKIT_CHAOS_DUMP=DIR writes each run's server and CLI logs there.
//
// # Stability
//
// Internal to idemkit's test suites.
package chaos
