package migrate

import (
	"context"
	"errors"
	"fmt"
)

// A Target is one database, as each driver sees it. The runner decides what
// to apply; the target executes it, in its own transaction and under its own
// lock (PostgreSQL takes an advisory lock, SQLite BEGIN IMMEDIATE), so that
// processes migrating one database at once take turns and all but the first
// find nothing to do.
type Target interface {
	// Lock begins the exclusive migration step and returns the highest
	// applied version (0 if none), creating the versions table if needed.
	// If Lock fails, it leaves nothing begun and Unlock is not called.
	Lock(ctx context.Context) (current int, err error)
	// Apply runs m.SQL and records m.Version, within the step Lock began.
	Apply(ctx context.Context, m Migration) error
	// Unlock ends the step: it commits if err is nil and rolls back
	// otherwise, and releases the lock either way. It returns the error of
	// the commit; a rollback's error is its to swallow.
	Unlock(ctx context.Context, err error) error
}

// ErrNewerSchema is matched by the *NewerSchemaError of Run.
var ErrNewerSchema = errors.New("migrate: database schema is newer than this build")

// A NewerSchemaError is returned by Run for a database whose recorded
// version is above every migration it was given: a newer release migrated
// it, and this one must not write to it. It matches ErrNewerSchema.
type NewerSchemaError struct {
	// Current is the highest version the database records.
	Current int
	// Known is the highest version of the migrations Run was given.
	Known int
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("%v: it is at version %d, this build knows up to %d; run a newer release", ErrNewerSchema, e.Current, e.Known)
}

// Is reports whether target is ErrNewerSchema.
func (e *NewerSchemaError) Is(target error) bool { return target == ErrNewerSchema }

// Run applies, in order and in one step of t (Lock, Apply each, Unlock),
// every migration of ms above the database's current version, and returns
// how many it applied. A failure rolls the whole step back (applied is 0).
// It refuses a database whose current version is newer than the newest of
// ms with a *NewerSchemaError, and ms that are not in strictly increasing
// order of positive versions (Load returns them so).
//
// ctx bounds the whole step; the rollback after a failure runs even if ctx
// is done (Target implementations use context.WithoutCancel for it).
func Run(ctx context.Context, t Target, ms []Migration) (applied int, err error) {
	if len(ms) == 0 {
		return 0, errors.New("migrate: no migrations")
	}
	for i, m := range ms {
		if m.Version <= 0 || (i > 0 && m.Version <= ms[i-1].Version) {
			return 0, fmt.Errorf("migrate: %s: version %d out of order (want positive versions in increasing order)", m.Name, m.Version)
		}
	}
	current, err := t.Lock(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: lock: %w", err)
	}
	err = apply(ctx, t, ms, current, &applied)
	if uerr := t.Unlock(ctx, err); err == nil && uerr != nil {
		err = fmt.Errorf("migrate: commit: %w", uerr)
	}
	if err != nil {
		return 0, err
	}
	return applied, nil
}

// apply runs the migrations of ms above current, counting them in applied.
func apply(ctx context.Context, t Target, ms []Migration, current int, applied *int) error {
	if known := ms[len(ms)-1].Version; current > known {
		return &NewerSchemaError{Current: current, Known: known}
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if err := t.Apply(ctx, m); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		*applied++
	}
	return nil
}
