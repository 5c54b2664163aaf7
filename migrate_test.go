package idemkit

import (
	"database/sql"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/internal/queue"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

// snapshot returns every row of table, in rowid order, with the given
// columns (all of them when cols is nil), and the column names.
func snapshot(t *testing.T, db *sql.DB, table string, cols []string) ([][]any, []string) {
	t.Helper()
	list := "*"
	if cols != nil {
		list = strings.Join(cols, ", ")
	}
	order := "rowid"
	if table == "idemkit_attempts" { // WITHOUT ROWID
		order = "intent_id, n"
	}
	rows, err := db.Query("SELECT " + list + " FROM " + table + " ORDER BY " + order)
	require.NoError(t, err)
	defer rows.Close()
	names, err := rows.Columns()
	require.NoError(t, err)
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		out = append(out, vals)
	}
	require.NoError(t, rows.Err())
	return out, names
}

// migrationsTable is the versions table as clients before the module's
// migration runner created it (without its name column).
const migrationsTable = `CREATE TABLE IF NOT EXISTS idemkit_client_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at TEXT    NOT NULL
) STRICT`

func migrationVersions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.Query(`SELECT version FROM idemkit_client_migrations ORDER BY version`)
	require.NoError(t, err)
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestMigrate_From001: a queue file created at schema 001 (by the 001 SQL
// itself, as a client of that version left it) is migrated to 002 by Open
// without losing or changing any intent, attempt or host; a lease taken
// by a 001 client (no holder named) is left to run out; the file then
// works as any other, and opening it again applies nothing twice.
func TestMigrate_From001(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	path := filepath.Join(t.TempDir(), "queue.db")
	db := rawDB(t, path)
	script, err := queue.Schema.ReadFile("schema/001_create_queue.up.sql")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, string(script))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, migrationsTable)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO idemkit_client_migrations (version, applied_at) VALUES (1, ?)`, wire.FormatTime(time.Now()))
	require.NoError(t, err)

	now := time.Now()
	past, leaseEnd := wire.FormatTime(now.Add(-time.Hour)), wire.FormatTime(now.Add(10*time.Minute))
	horizon := wire.FormatTime(now.Add(23 * time.Hour))
	intents := []struct {
		id, state, next string
		attempts, token int
		status          any
	}{
		{"new", "pending", past, 0, 0, nil},
		{"leased", "pending", leaseEnd, 1, 1, nil}, // in flight in a 001 client
		{"later", "pending", wire.FormatTime(now.Add(time.Hour)), 2, 2, nil},
		{"paid", "succeeded", past, 2, 2, 201},
		{"refused", "failed", past, 1, 1, 402},
		{"reused", "failed", past, 1, 1, 422}, // a 001 client's "key reused"
		{"unknown", "expired", past, 9, 3, nil},
		{"dropped", "canceled", past, 0, 0, nil},
	}
	for _, in := range intents {
		var first, hz any
		if in.attempts > 0 {
			first, hz = past, horizon
		}
		var hdr, body, replayed any
		if in.status != nil {
			hdr, body, replayed = []byte(`{"Content-Type":["application/json"]}`), []byte(`{"id":"pay_1"}`), 1
			if in.status == 422 {
				replayed = 0
			}
		}
		_, err := db.ExecContext(ctx, `INSERT INTO idemkit_intents (id, key, state, method, url, host, header, body, fingerprint,
			attempts, next_attempt_at, first_attempt_at, horizon, lease_token, outcome_status, outcome_header, outcome_body,
			outcome_replayed, last_error, created_at, updated_at)
			VALUES (?, ?, ?, 'POST', 'http://127.0.0.1:1/charges', 'http://127.0.0.1:1', X'7B7D', X'7B7D', X'00',
			?, ?, ?, ?, ?, ?, ?, ?, ?, 'status 503', ?, ?)`,
			in.id, "key-"+in.id, in.state, in.attempts, in.next, first, hz, in.token, in.status, hdr, body, replayed, past, past)
		require.NoError(t, err)
		for n := 1; n <= in.attempts; n++ {
			_, err := db.ExecContext(ctx, `INSERT INTO idemkit_attempts (intent_id, n, token, started_at, finished_at, status, error, replayed)
				VALUES (?, ?, ?, ?, ?, 503, 'status 503', 0)`, in.id, n, in.token, past, past)
			require.NoError(t, err)
		}
	}
	_, err = db.ExecContext(ctx, `INSERT INTO idemkit_hosts (host, window_seconds, updated_at) VALUES ('http://127.0.0.1:1', 3600, ?)`, past)
	require.NoError(t, err)

	before := map[string][][]any{}
	columns := map[string][]string{}
	for _, table := range []string{"idemkit_intents", "idemkit_attempts", "idemkit_hosts"} {
		before[table], columns[table] = snapshot(t, db, table, nil)
		require.NotEmpty(t, before[table], table)
	}
	require.Len(t, before["idemkit_intents"], len(intents))

	c, err := Open(ctx, path, testConfig())
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, migrationVersions(t, db))
	for table, rows := range before {
		after, _ := snapshot(t, db, table, columns[table])
		require.Equal(t, rows, after, "%s is unchanged by the migration", table)
	}
	var owners int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM idemkit_intents WHERE lease_owner IS NOT NULL`).Scan(&owners))
	require.Zero(t, owners, "no holder is known for leases taken before 002")
	all, err := c.List(ctx, &ListOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, all, len(intents), "every intent decodes")
	paid, err := c.Get(ctx, "paid")
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, paid.State)
	require.Equal(t, 201, paid.Outcome.Status)
	require.True(t, paid.Outcome.Replayed)
	require.Equal(t, http.Header{"Content-Type": {"application/json"}}, paid.Outcome.Header, "a JSON header row still reads")
	// 003 keeps what a 001 client meant: a fresh 422 was "key reused".
	for id, want := range map[string]error{"reused": ErrKeyReused, "refused": StateFailed, "paid": nil} {
		in, err := c.Get(ctx, id)
		require.NoError(t, err)
		if want == nil {
			require.NoError(t, result(in), id)
			continue
		}
		require.ErrorIs(t, result(in), want, id)
	}
	require.NotErrorIs(t, result(mustGet(t, c, "refused")), ErrKeyReused)

	// The 001 client's lease names no holder: it runs out as before.
	c.takeOver(ctx, "")
	c.takeOver(ctx, "leased")
	leased, err := c.Get(ctx, "leased")
	require.NoError(t, err)
	require.Equal(t, leaseEnd, wire.FormatTime(leased.NextAttemptAt))
	require.NoError(t, c.Close())

	// Opened again: nothing is applied twice, and the queue works.
	var mu sync.Mutex
	var got []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c2 := (&testBundle{path: path}).reopen(t, testConfig())
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, migrationVersions(t, db))
	in, err := c2.Do(ctx, &Request{URL: srv.URL + "/new-charge", Key: "after-migration"})
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, in.State)
	mu.Lock()
	require.Equal(t, []string{"after-migration"}, got)
	mu.Unlock()
}

// TestQueue_LeaseOwnerLifecycle: every claim and attempt names this
// process as the holder; an in-process sleep keeps it; a release, a
// persisted wait, an end and a cancel clear it; a claim that moves the
// token without naming a holder (a client from before 002) clears it too.
func TestQueue_LeaseOwnerLifecycle(t *testing.T) {
	t.Parallel()
	var b *testBundle
	type seen struct {
		owner *string
		err   error
	}
	var mu sync.Mutex
	var seenOwners []seen
	var status = []int{http.StatusServiceUnavailable, http.StatusOK}
	b = setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		db := rawDB(t, b.path)
		var s seen
		s.err = db.QueryRow(`SELECT lease_owner FROM idemkit_intents WHERE key = ?`, r.Header.Get("Idempotency-Key")).Scan(&s.owner)
		mu.Lock()
		code := status[min(len(seenOwners), len(status)-1)]
		seenOwners = append(seenOwners, s)
		mu.Unlock()
		if r.URL.Path == "/later" {
			w.Header().Set("Retry-After", "3600")
			code = http.StatusTooManyRequests
		}
		w.WriteHeader(code)
	}))
	ctx := testkit.Ctx(t)
	db := rawDB(t, b.path)
	ownerOf := func(id string) *string {
		var o *string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT lease_owner FROM idemkit_intents WHERE id = ?`, id).Scan(&o))
		return o
	}

	// Held through the first attempt, the in-process sleep and the retry;
	// cleared at the end.
	in, err := b.c.Do(ctx, &Request{URL: b.srv.URL + "/now"})
	require.NoError(t, err)
	mu.Lock()
	require.Len(t, seenOwners, 2)
	for i, s := range seenOwners {
		require.NoError(t, s.err)
		require.NotNil(t, s.owner, "attempt %d names its holder", i+1)
		require.Equal(t, b.c.q.Owner(), *s.owner)
	}
	mu.Unlock()
	require.Nil(t, ownerOf(in.ID), "cleared when the intent ended")

	// A persisted wait (Retry-After: 1h) releases the lease.
	later, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/later"})
	require.NoError(t, err)
	cl, err := b.c.q.Claim(ctx, later.ID, time.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, b.c.q.Owner(), *ownerOf(later.ID))
	got, err := b.c.send(ctx, cl, false)
	require.NoError(t, err)
	require.True(t, got.NextAttemptAt.After(time.Now().Add(30*time.Minute)))
	require.Nil(t, ownerOf(later.ID), "a persisted wait holds no lease")

	// A canceled lease names no holder.
	cancelMe, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/never"})
	require.NoError(t, err)
	cl, err = b.c.q.Claim(ctx, cancelMe.ID, time.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.NoError(t, b.c.Cancel(ctx, cancelMe.ID))
	require.Nil(t, ownerOf(cancelMe.ID))

	// A released lease (the caller's context ended) names no holder.
	rel, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/released"})
	require.NoError(t, err)
	cl, err = b.c.q.Claim(ctx, rel.ID, time.Now(), time.Minute, nil)
	require.NoError(t, err)
	_, err = b.c.q.Apply(ctx, cl.Lease, time.Now(), queue.Change{State: queue.Pending, Due: time.Now(), LastError: "released"})
	require.NoError(t, err)
	require.Nil(t, ownerOf(rel.ID))

	// A 001 client's claim (token moved, holder not named), once the lease
	// ran out by its clock, clears the name of the previous holder, who no
	// longer holds the lease; a claim that names its holder keeps it.
	cl, err = b.c.q.Claim(ctx, rel.ID, time.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, b.c.q.Owner(), *ownerOf(rel.ID), "a claim after a release names its holder")
	ranOut := time.Now().Add(2 * time.Minute)
	_, err = db.ExecContext(ctx, `UPDATE idemkit_intents SET lease_token = lease_token + 1, attempts = attempts + 1, next_attempt_at = ?, updated_at = ? WHERE id = ?`,
		wire.FormatTime(ranOut.Add(time.Minute)), wire.FormatTime(ranOut), rel.ID)
	require.NoError(t, err)
	require.Nil(t, ownerOf(rel.ID), "the 001 client's lease names no holder")
	_, err = db.ExecContext(ctx, `UPDATE idemkit_intents SET lease_token = lease_token + 1, lease_owner = 'h/1/1' WHERE id = ?`, rel.ID)
	require.NoError(t, err)
	require.Equal(t, "h/1/1", *ownerOf(rel.ID))
	_, err = db.ExecContext(ctx, `UPDATE idemkit_intents SET lease_token = lease_token + 1, lease_owner = 'h/2/1' WHERE id = ?`, rel.ID)
	require.NoError(t, err)
	require.Equal(t, "h/2/1", *ownerOf(rel.ID), "a takeover by another holder names it")
}

func mustGet(t *testing.T, c *Client, id string) *Intent {
	t.Helper()
	in, err := c.Get(testkit.Ctx(t), id)
	require.NoError(t, err)
	return in
}

// TestQueueSchemaVersion_IsTheLastMigration: the version this package writes is the
// number of the last embedded migration, and what a fresh queue records.
func TestQueueSchemaVersion_IsTheLastMigration(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(queue.Schema, "schema/*.sql")
	require.NoError(t, err)
	sort.Strings(names)
	last, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(names[len(names)-1], "schema/"), "_", 2)[0])
	require.NoError(t, err)
	require.Equal(t, last, queue.SchemaVersion)
	b := setup(t, nil, nil)
	var v int
	require.NoError(t, rawDB(t, b.path).QueryRow(`SELECT MAX(version) FROM idemkit_client_migrations`).Scan(&v))
	require.Equal(t, queue.SchemaVersion, v)
	got, err := b.c.SchemaVersion(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, queue.SchemaVersion, got)
}

// TestMigrate_LeaseEndMovesToLeasedUntil: a queue file at schema 005, with
// an intent leased by a named holder (its next_attempt_at the lease's
// end) and one merely due, is migrated by 006: the lease's end moves to
// leased_until, due times stay, the leased intent is not claimable before
// its lease ends and the other is.
func TestMigrate_LeaseEndMovesToLeasedUntil(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	path := filepath.Join(t.TempDir(), "queue.db")
	db := rawDB(t, path)
	_, err := db.ExecContext(ctx, migrationsTable)
	require.NoError(t, err)
	for v, name := range []string{"001_create_queue", "002_lease_owner", "003_outcome_key_reused", "004_instance", "005_credential_headers"} {
		script, err := queue.Schema.ReadFile("schema/" + name + ".up.sql")
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, string(script))
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, `INSERT INTO idemkit_client_migrations (version, applied_at) VALUES (?, ?)`, v+1, wire.FormatTime(time.Now()))
		require.NoError(t, err)
	}
	now := time.Now()
	past, leaseEnd := wire.FormatTime(now.Add(-time.Hour)), wire.FormatTime(now.Add(10*time.Minute))
	for _, r := range []struct {
		id, next string
		owner    any
	}{{"held", leaseEnd, "h/1/1"}, {"due", past, nil}} {
		_, err := db.ExecContext(ctx, `INSERT INTO idemkit_intents (id, key, state, method, url, host, header, body, fingerprint,
			attempts, next_attempt_at, lease_token, lease_owner, created_at, updated_at)
			VALUES (?, ?, 'pending', 'POST', 'http://127.0.0.1:1/charges', 'http://127.0.0.1:1', X'7B7D', X'', X'00', 1, ?, 1, ?, ?, ?)`,
			r.id, "key-"+r.id, r.next, r.owner, past, past)
		require.NoError(t, err)
	}

	c, err := Open(ctx, path, testConfig())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, migrationVersions(t, db))
	for id, want := range map[string]struct{ next, until any }{
		"held": {leaseEnd, leaseEnd},
		"due":  {past, nil},
	} {
		var next string
		var until any
		require.NoError(t, db.QueryRowContext(ctx, `SELECT next_attempt_at, leased_until FROM idemkit_intents WHERE id = ?`, id).Scan(&next, &until))
		require.Equal(t, want.next, next, "%s: due time kept", id)
		require.Equal(t, want.until, until, "%s: leased_until", id)
	}
	held := mustGet(t, c, "held")
	require.Equal(t, leaseEnd, wire.FormatTime(held.NextAttemptAt), "a held intent is next attempted when its lease ends")
	cl, err := c.q.Claim(ctx, "held", now, time.Minute, nil)
	require.NoError(t, err)
	require.Nil(t, cl, "still leased")
	cl, err = c.q.Claim(ctx, "due", now, time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl, "due and not leased")
}

// TestOpen_RefusesANewerQueue: a queue migrated by a newer version (a
// schema this one cannot write safely: 006 moved the lease's end out of
// next_attempt_at, which an older client would claim through) is refused,
// and left as it was.
func TestOpen_RefusesANewerQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	require.NoError(t, b.c.Close())
	db := rawDB(t, b.path)
	_, err := db.Exec(`INSERT INTO idemkit_client_migrations (version, name, applied_at) VALUES (?, 'from_the_future', ?)`,
		queue.SchemaVersion+1, wire.FormatTime(time.Now()))
	require.NoError(t, err)
	_, err = Open(testkit.Ctx(t), b.path, testConfig())
	requireQueueError(t, err, (*QueueError).Newer)
	require.ErrorIs(t, err, migrate.ErrNewerSchema)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, migrationVersions(t, db))
}

// TestMigrate_OlderClientCannotClaimALiveLease: a client from before 006
// sharing the file claims by next_attempt_at alone, which is now the due
// time of an intent whose lease is live: its claim (the 005 claim
// statement) is refused while the lease runs by its own clock, and passes
// once it has run out.
func TestMigrate_OlderClientCannotClaimALiveLease(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	in, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/x"})
	require.NoError(t, err)
	now := time.Now()
	cl, err := b.c.q.Claim(ctx, in.ID, now, time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	const claim005 = `UPDATE idemkit_intents SET
		lease_token = lease_token + 1, lease_owner = ?5, attempts = attempts + 1,
		first_attempt_at = COALESCE(first_attempt_at, ?1),
		horizon = CASE WHEN horizon IS NULL OR horizon > ?2 THEN ?2 ELSE horizon END,
		next_attempt_at = ?3, updated_at = ?1
	WHERE id = ?4 AND state = 'pending'`
	db := rawDB(t, b.path)
	old := func(at time.Time) error {
		_, err := db.ExecContext(ctx, claim005, wire.FormatTime(at), wire.FormatTime(at.Add(time.Hour)),
			wire.FormatTime(at.Add(time.Minute)), in.ID, "h/1/1")
		return err
	}
	err = old(now.Add(time.Second))
	require.ErrorContains(t, err, "leased")
	var token int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT lease_token FROM idemkit_intents WHERE id = ?`, in.ID).Scan(&token))
	require.Equal(t, cl.Token, token, "the live lease is untouched")

	require.NoError(t, old(now.Add(2*time.Minute)), "a lease that ran out may be claimed")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT lease_token FROM idemkit_intents WHERE id = ?`, in.ID).Scan(&token))
	require.Equal(t, cl.Token+1, token)
}
