package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// storeTarget is one database the store commands run against.
type storeTarget struct {
	name string
	// args selects the database: --db FILE or --dsn DSN.
	args []string
	// seed fills the migrated store: a completed record of alice (key
	// "paid", body "receipt-1"), a claim of bob whose lease ended ten
	// minutes ago ("stuck", created ten minutes ago), a fresh claim of
	// carol ("fresh", lease of an hour) and a record expired an hour ago.
	seed func(t *testing.T)
	// snapshot returns a digest of everything in the database that a
	// write would change.
	snapshot func(t *testing.T) string
}

var storeSeedBody = []byte("receipt-1")

// seedStore fills store as storeTarget.seed says; now is the time of the
// "fresh" claim, and backdate moves the "stuck" claim ten minutes back if
// the store decides by its own clock.
func seedStore(t *testing.T, ctx context.Context, store server.Store, now time.Time) {
	t.Helper()
	claim := func(principal, key string, at time.Time, window, lease time.Duration) int64 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: principal, Endpoint: "*", Key: key},
			Fingerprint: []byte{0xab, 0xcd}, FingerprintVersion: 1, Now: at,
			ExpiresAt: at.Add(window), LockedUntil: at.Add(lease),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Token
	}
	tok := claim("alice", "paid", now, time.Hour, time.Minute)
	require.NoError(t, store.Complete(ctx, server.Scope{Principal: "alice", Endpoint: "*", Key: "paid"}, tok, now,
		&server.StoredResponse{Status: 201, Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: storeSeedBody}))
	claim("bob", "stuck", now.Add(-10*time.Minute), time.Hour, time.Second)
	claim("carol", "fresh", now, time.Hour, time.Hour)
	claim("dave", "old", now.Add(-3*time.Hour), time.Hour, time.Second)
}

func sqliteTarget(t *testing.T) storeTarget {
	dir := t.TempDir()
	path := filepath.Join(dir, "idem.db")
	return storeTarget{
		name: "sqlite",
		args: []string{"--db", path},
		seed: func(t *testing.T) {
			ctx := testkit.Ctx(t)
			db, err := sqlitestore.Open(ctx, path)
			require.NoError(t, err)
			defer db.Close()
			st, err := sqlitestore.New(db, nil)
			require.NoError(t, err)
			seedStore(t, ctx, st, time.Now().UTC())
		},
		snapshot: func(t *testing.T) string {
			// The database file's bytes, and the frames of its -wal: none
			// (reading a WAL database read-only may create the empty
			// -wal and -shm side files it needs, never a frame).
			f, err := os.Open(path)
			require.NoError(t, err)
			h := sha256.New()
			_, err = io.Copy(h, f)
			require.NoError(t, f.Close())
			require.NoError(t, err)
			var wal int64
			if fi, err := os.Stat(path + "-wal"); err == nil {
				wal = fi.Size()
			}
			return hex.EncodeToString(h.Sum(nil)) + " wal=" + strconv.FormatInt(wal, 10)
		},
	}
}

func postgresTarget(t *testing.T) storeTarget {
	dsn := testpg.SchemaDSN(t)
	pool := func(t *testing.T) *pgxpool.Pool {
		p, err := pgxpool.New(testkit.Ctx(t), dsn)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	return storeTarget{
		name: "postgres",
		args: []string{"--dsn", dsn},
		seed: func(t *testing.T) {
			ctx := testkit.Ctx(t)
			p := pool(t)
			st, err := pgstore.New(p, nil)
			require.NoError(t, err)
			// The database's clock decides: claim now, then move the
			// stuck and the old claims back.
			seedStore(t, ctx, st, time.Now().UTC())
			_, err = p.Exec(ctx, `UPDATE idempotency_keys SET created_at = created_at - interval '10 minutes',
				locked_until = locked_until - interval '10 minutes' WHERE key = 'stuck'`)
			require.NoError(t, err)
			_, err = p.Exec(ctx, `UPDATE idempotency_keys SET created_at = created_at - interval '3 hours',
				expires_at = expires_at - interval '3 hours', locked_until = locked_until - interval '3 hours' WHERE key = 'old'`)
			require.NoError(t, err)
		},
		snapshot: func(t *testing.T) string {
			// Each row's version (xmin changes with any write to it) and
			// the migrations applied.
			var s string
			require.NoError(t, pool(t).QueryRow(testkit.Ctx(t), `SELECT coalesce((SELECT string_agg(key || '@' || xmin::text || ctid::text, ',' ORDER BY key) FROM idempotency_keys), '')
				|| '|' || (SELECT count(*) FROM idempotency_migrations)`).Scan(&s))
			return s
		},
	}
}

// The operator's CLI on a server's store, PostgreSQL and SQLite: migrate
// creates the table; stats, inflight, show and partitions print the
// store's health, its in-progress claims (principals hashed unless asked)
// and one record (no body unless asked) without writing anything (the
// file's bytes, the rows' versions unchanged); sweep deletes the expired
// record.
func TestStore_Commands(t *testing.T) {
	t.Parallel()
	for _, target := range []func(t *testing.T) storeTarget{sqliteTarget, postgresTarget} {
		tg := target(t)
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			env := binEnv(t)
			run := func(args ...string) binResult {
				t.Helper()
				return runBin(t, env, "", append(append([]string{"store"}, args...), tg.args...)...)
			}
			r := run("migrate")
			require.Equal(t, 0, r.code, "migrate: %s", r.stderr)
			require.Equal(t, "migrated\n", r.stdout)
			tg.seed(t)
			before := tg.snapshot(t)

			// stats
			r = run("stats", "--json")
			require.Equal(t, 0, r.code, "stats: %s", r.stderr)
			var st storeStatsJSON
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
			require.Equal(t, storeStatsJSON{Rows: 4, InProgress: 2, Completed: 1, Expired: 1, Stuck: 1,
				TableBytes: st.TableBytes, IndexBytes: st.IndexBytes, OldestCreatedAt: st.OldestCreatedAt, OldestExpiresAt: st.OldestExpiresAt,
				OldestRecordAgeSeconds: st.OldestRecordAgeSeconds, OldestExpiredAgeSecs: st.OldestExpiredAgeSecs}, st)
			require.InDelta(t, 600, st.OldestRecordAgeSeconds, 30, "the stuck claim, ten minutes old")
			require.InDelta(t, 7200, st.OldestExpiredAgeSecs, 60, "the record expired two hours ago")
			require.Positive(t, st.TableBytes)
			r = run("stats")
			require.Equal(t, 0, r.code, "stats: %s", r.stderr)
			require.Regexp(t, `(?m)^stuck\s+1\s+\(in progress, lease ended\)$`, r.stdout)

			// inflight: hashed principals, oldest first, --older-than.
			r = run("inflight", "--json")
			require.Equal(t, 0, r.code, "inflight: %s", r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			require.Len(t, lines, 2, r.stdout)
			var stuck, fresh inflightJSON
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &stuck))
			require.NoError(t, json.Unmarshal([]byte(lines[1]), &fresh))
			require.Equal(t, "stuck", stuck.Key)
			require.Equal(t, redact.Hash("bob"), stuck.Principal)
			require.True(t, stuck.Stuck)
			require.Equal(t, int64(1), stuck.Token)
			require.InDelta(t, 600, stuck.AgeSeconds, 30)
			require.Equal(t, "fresh", fresh.Key)
			require.False(t, fresh.Stuck)
			require.NotContains(t, r.stdout, "bob")

			r = run("inflight", "--older-than", "5m")
			require.Equal(t, 0, r.code, "inflight: %s", r.stderr)
			require.Contains(t, r.stdout, redact.Hash("bob"))
			require.Contains(t, r.stdout, "stuck: ended")
			require.NotContains(t, r.stdout, "fresh")
			r = run("inflight", "--older-than", "5m", "--show-principal")
			require.Regexp(t, `(?m)^bob\s+\*\s+stuck\s`, r.stdout)

			// show: no body unless --body.
			r = run("show", "--principal", "alice", "paid")
			require.Equal(t, 0, r.code, "show: %s", r.stderr)
			require.Regexp(t, `(?m)^state\s+completed$`, r.stdout)
			require.Regexp(t, `(?m)^status\s+201$`, r.stdout)
			require.Regexp(t, `(?m)^body\s+9 bytes$`, r.stdout)
			require.NotContains(t, r.stdout, "receipt-1")
			r = run("show", "--principal", "alice", "paid", "--json", "--body")
			require.Equal(t, 0, r.code, "show: %s", r.stderr)
			var rec recordJSON
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
			require.Equal(t, "receipt-1", *rec.Body)
			require.Equal(t, "abcd", rec.Fingerprint)
			r = run("show", "--principal", "alice", "nope")
			require.Equal(t, exitNotFound, r.code)
			require.Contains(t, r.stderr, "no live record")

			// partitions: a plain table.
			r = run("partitions", "--json")
			require.Equal(t, 0, r.code, "partitions: %s", r.stderr)
			require.JSONEq(t, `{"partitioned":false,"partitions":[]}`, r.stdout)

			require.Equal(t, before, tg.snapshot(t), "the read commands wrote to the database")

			// sweep deletes the expired record only.
			r = run("sweep", "--json")
			require.Equal(t, 0, r.code, "sweep: %s", r.stderr)
			var sw struct{ Deleted int }
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &sw))
			require.Equal(t, 1, sw.Deleted)
			r = run("stats", "--json")
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
			require.Equal(t, int64(3), st.Rows)
			require.Equal(t, int64(0), st.Expired)
		})
	}
}

// Usage errors and a missing SQLite file exit 1 with words, and a read
// command does not create the file.
func TestStore_Errors(t *testing.T) {
	t.Parallel()
	env := binEnv(t)
	missing := filepath.Join(t.TempDir(), "missing.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"store", "stats"}, "give --dsn postgres://... or --db FILE"},
		{[]string{"store", "stats", "--db", missing, "--dsn", "postgres://x"}, "not both"},
		{[]string{"store", "stats", "--db", missing}, "no database at"},
		{[]string{"store", "inflight", "--db", missing, "--older-than", "-1s"}, "--older-than must not be negative"},
		{[]string{"store", "show", "--db", missing, "k"}, "--principal is required"},
		{[]string{"store", "show", "--db", missing}, "accepts 1 arg"},
	} {
		r := runBin(t, env, "", tc.args...)
		require.Equal(t, exitError, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
	_, err := os.Stat(missing)
	require.True(t, os.IsNotExist(err), "a read command created %s", missing)
}

// store migrate --partitioned creates the partitioned table on a fresh
// PostgreSQL schema with the partitions of today to a week ahead;
// partitions lists them (read-only) and --maintain has nothing to do.
func TestStore_Partitioned(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	env := binEnv(t)
	r := runBin(t, env, "", "store", "migrate", "--partitioned", "--dsn", dsn)
	require.Equal(t, 0, r.code, "migrate: %s", r.stderr)

	var got struct {
		Partitioned bool
		Partitions  []partitionJSON
		Created     []string
		Dropped     []string
	}
	r = runBin(t, env, "", "store", "partitions", "--json", "--dsn", dsn)
	require.Equal(t, 0, r.code, "partitions: %s", r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.True(t, got.Partitioned)
	require.Len(t, got.Partitions, 8, "today and 7 days ahead")
	require.Contains(t, got.Partitions[1].Bound, "FOR VALUES FROM")

	r = runBin(t, env, "", "store", "partitions", "--maintain", "--json", "--dsn", dsn)
	require.Equal(t, 0, r.code, "partitions --maintain: %s", r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Empty(t, got.Created)
	require.Empty(t, got.Dropped)

	r = runBin(t, env, "", "store", "migrate", "--convert", "--db", filepath.Join(t.TempDir(), "x.db"))
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "need --dsn")
}
