package queue

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

// testOwner is the lease owner of the test queues.
var testOwner = Owner{Host: "test-host", PID: 4242, Start: "1"}

// newTestQueue opens a queue file of its own, migrated and located, as a
// client would.
func newTestQueue(t *testing.T) *Queue {
	t.Helper()
	return newTestQueueWith(t, Config{})
}

// newTestQueueWith is newTestQueue with the fields of extra that are set
// (HoldWriter).
func newTestQueueWith(t *testing.T, extra Config) *Queue {
	t.Helper()
	path := filepath.Join(t.TempDir(), "queue.db")
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	p, _ := policy.Known("idemkit")
	q := New(db, Config{Owner: testOwner.String(), PerHour: policy.HourlyAttemptsDefault, Window: 24 * time.Hour,
		Safety: time.Minute, Hosts: policy.Hosts{Default: &p}, HoldWriter: extra.HoldWriter})
	t.Cleanup(q.Close)
	ctx := context.Background()
	require.NoError(t, q.Migrate(ctx, time.Now()))
	require.NoError(t, q.ReadJournalMode(ctx))
	require.NoError(t, q.Locate(ctx, "test-host", path, wire.FormatTime(time.Now())))
	return q
}

// explain returns the query plan of query as one string.
func explain(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(plan, "; ")
}

func TestQueue_DueLookupUsesIndex(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t)
	now := wire.FormatTime(time.Now())
	require.Contains(t, explain(t, q.DB(), sqlSelectDue, now, q.Origin(), q.Self(), `["x"]`), "USING INDEX idemkit_intents_due")
	require.Contains(t, explain(t, q.DB(), sqlNextDue, q.Origin(), q.Self(), `["x"]`), "idemkit_intents_due")
	require.Contains(t, explain(t, q.DB(), sqlPruneBatch, now), "idemkit_intents_terminal")
}

// TestQueue_OneMillionIntents fills a queue with a million intents (most of
// them terminal, as in a long-lived queue) and checks that the due lookup,
// the claim and prune stay on their indexes.
func TestQueue_OneMillionIntents(t *testing.T) {
	t.Parallel()
	if testing.Short() || testkit.RaceEnabled {
		t.Skip("inserts 1,000,000 rows: run without -short and -race (about 10 s)")
	}
	q := newTestQueue(t)
	ctx := context.Background()
	old := wire.FormatTime(time.Now().Add(-48 * time.Hour))
	_, err := q.DB().ExecContext(ctx, `
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000)
		INSERT INTO idemkit_intents (id, key, state, method, url, host, header, body, fingerprint, next_attempt_at, created_at, updated_at)
		SELECT 'id-' || i, 'key-' || i, CASE WHEN i % 100 = 0 THEN 'pending' ELSE 'succeeded' END,
		       'POST', 'http://127.0.0.1:1/x', 'http://127.0.0.1:1', X'7B7D', X'', X'00', ?, ?, ?
		FROM n`, old, old, old)
	require.NoError(t, err)
	_, err = q.DB().ExecContext(ctx, `ANALYZE`)
	require.NoError(t, err)
	require.Contains(t, explain(t, q.DB(), sqlSelectDue, wire.FormatTime(time.Now()), q.Origin(), q.Self(), `["x"]`), "USING INDEX idemkit_intents_due")
	lo, hi := HostPrefixRange(testOwner.Host)
	require.Contains(t, explain(t, q.DB(), sqlLeaseOwners, lo, hi, q.Owner(), wire.FormatTime(time.Now()), takeoverOwnersMax),
		"USING INDEX idemkit_intents_leased", "the takeover lookup reads leased intents only")

	cl, err := q.Claim(ctx, "", time.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	counts, err := q.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 10000, counts[Pending])

	pruned, err := q.Prune(ctx, time.Now().Add(-24*time.Hour), nil)
	require.NoError(t, err)
	require.Equal(t, 990000, pruned)
	counts, err = q.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[State]int{Pending: 10000}, counts, "pending intents are never pruned")
}

func TestQueue_TakeOverUsesIndex(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t)
	now := wire.FormatTime(time.Now())
	lo, hi := HostPrefixRange("h")
	require.Contains(t, explain(t, q.DB(), sqlLeaseOwners, lo, hi, "h/1/1", now, 32), "SEARCH idemkit_intents USING INDEX idemkit_intents_leased")
	require.Contains(t, explain(t, q.DB(), sqlLeasesOf, "h/1/1", now, 256), "SEARCH idemkit_intents USING INDEX idemkit_intents_leased")
	require.Contains(t, explain(t, q.DB(), sqlLeaseOfID, "id", now), "sqlite_autoindex_idemkit_intents_1")
}
