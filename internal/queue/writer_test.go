package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With HoldWriter, the queue's writes share one connection and the insert
// of one intent is prepared on it once: preparing that statement costs
// SQLite more than running it (BENCHMARKS.md, "Client").
func TestHeldWriter_PreparesTheInsertOnce(t *testing.T) {
	t.Parallel()
	q := newTestQueueWith(t, Config{HoldWriter: true})
	now := time.Now().UTC()
	queueOne(t, q, "a", now)
	first := q.insertOne
	require.NotNil(t, first, "the insert is prepared on the held writer")
	queueOne(t, q, "b", now)
	require.Same(t, first, q.insertOne, "and reused")
	counts, err := q.Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, counts[Pending])
}

// A failed write transaction may leave its connection in any state: the
// held writer is discarded, the next write takes a fresh one, and Close
// hands the writer back to the pool.
func TestHeldWriter_FailedWriteTakesAFreshConnection(t *testing.T) {
	t.Parallel()
	q := newTestQueueWith(t, Config{HoldWriter: true})
	ctx := context.Background()
	now := time.Now().UTC()
	queueOne(t, q, "a", now)
	held := q.writer
	require.NotNil(t, held)

	boom := errors.New("boom")
	err := q.InTx(ctx, func(ex execer) error {
		if _, err := ex.ExecContext(ctx, `UPDATE idemkit_intents SET last_error = 'x' WHERE id = 'a'`); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Nil(t, q.writer, "the failed transaction's connection is not kept")
	require.Nil(t, q.insertOne)

	queueOne(t, q, "b", now)
	require.NotNil(t, q.writer)
	require.NotSame(t, held, q.writer)
	var lastError string
	require.NoError(t, q.DB().QueryRowContext(ctx, `SELECT last_error FROM idemkit_intents WHERE id = 'a'`).Scan(&lastError))
	require.Empty(t, lastError, "the failed transaction rolled back")

	require.Equal(t, 1, q.DB().Stats().InUse, "the writer is held between writes")
	q.Close()
	require.Zero(t, q.DB().Stats().InUse, "Close hands it back")
}

// Without HoldWriter (a database the caller opened, perhaps with a pool of
// one connection) no connection is kept between writes: a read after a
// write does not wait for one.
func TestQueue_WithoutHoldWriterKeepsNoConnection(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t)
	q.DB().SetMaxOpenConns(1)
	queueOne(t, q, "a", time.Now().UTC())
	require.Nil(t, q.writer)
	require.Zero(t, q.DB().Stats().InUse)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, err := q.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts[Pending])
}
