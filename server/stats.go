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
}
