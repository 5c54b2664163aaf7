package server

import "time"

// StoreStats describes the size of a store, for the metrics an operator
// watches: the row count should stay roughly flat at request rate times the
// retention window, the sweep backlog near zero, and the oldest live record
// no older than the window.
type StoreStats struct {
	// Rows is the number of rows, including expired rows the sweeper has not
	// deleted yet.
	Rows int64
	// Expired is the number of rows whose ExpiresAt is not after now: the
	// sweep backlog.
	Expired int64
	// InProgress is the number of live rows in StateInProgress.
	InProgress int64
	// OldestCreatedAt is the CreatedAt of the oldest live row; zero when
	// there is none.
	OldestCreatedAt time.Time
	StoreHealth
}

// StoreHealth is what StoreStats adds for an operator beyond the counts;
// it is embedded in StoreStats. pgstore.Store and sqlitestore.Store fill
// it; a store that cannot tell leaves it zero.
type StoreHealth struct {
	// Stuck is the number of live rows in StateInProgress whose lease ended
	// (LockedUntil not after now): claims whose holder died or froze and
	// that no retry has taken over yet. In transactional mode no row is
	// ever visible in progress, so it stays 0.
	Stuck int64
	// OldestExpiresAt is the least ExpiresAt of all rows, expired ones
	// included; zero when the table is empty. Once it is in the past, now
	// minus it is how long the oldest expired row has waited for the
	// sweeper: it should stay below the sweeper's interval plus its grace.
	OldestExpiresAt time.Time
	// TableBytes is the on-disk size of the table's rows (PostgreSQL: with
	// its TOAST data; partitions summed), and IndexBytes that of its
	// indexes.
	TableBytes, IndexBytes int64
}

// PoolStats is the saturation of a store's connection pool, for the
// metrics an operator watches: InUse at MaxConns with Waits growing means
// requests queue for a connection, and past the store timeout they are
// answered 503 store-unavailable. pgstore.Store and sqlitestore.Store have
// a PoolStats method.
type PoolStats struct {
	// MaxConns is the pool's upper bound; 0 means unbounded.
	MaxConns int64
	// InUse is the number of connections in use now, and Idle the number
	// open and idle.
	InUse, Idle int64
	// Waits is the number of acquisitions, since the pool opened, that
	// found no idle connection and had to wait (pgxpool: for a new
	// connection or a released one), and WaitDuration their total wait.
	Waits        int64
	WaitDuration time.Duration
	// Canceled is the number of acquisitions that gave up waiting because
	// their context ended (pgxpool's CanceledAcquireCount; 0 for a
	// *sql.DB, which does not count them): in transactional mode, requests
	// answered 503 store-unavailable because the pool was full.
	Canceled int64
}
