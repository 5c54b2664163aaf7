package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/mysqlstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// proxiedBundle is a migrated store whose pool reaches MariaDB through a
// tcpfault.Proxy, and a direct pool for checks while the proxy misbehaves.
type proxiedBundle struct {
	ctx    context.Context
	proxy  *tcpfault.Proxy
	store  *mysqlstore.Store
	direct *sql.DB
}

func setupProxied(t *testing.T) *proxiedBundle {
	t.Helper()
	cfg := testmysql.DatabaseConfig(t)
	b := &proxiedBundle{ctx: storetest.Context(t), direct: openPool(t, cfg)}
	b.proxy = tcpfault.Start(t, cfg.Addr)
	proxied := cfg.Clone()
	proxied.Addr = b.proxy.Addr()
	proxied.Timeout = 2 * time.Second
	db := openPool(t, proxied)
	store, err := mysqlstore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(b.ctx))
	_, err = b.direct.ExecContext(b.ctx, "CREATE TABLE payments (k VARCHAR(64) NOT NULL, amount BIGINT NOT NULL) ENGINE = InnoDB")
	require.NoError(t, err)
	b.store = store
	return b
}

func faultClaim(key string) server.ClaimRequest {
	now := time.Now()
	return server.ClaimRequest{Scope: server.Scope{Principal: "p", Endpoint: "POST /payments", Key: key},
		Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)}
}

// A COMMIT whose answer is lost may have committed: Commit says
// outcome-unknown, never "not applied", and here it did commit, claim,
// effect and response together.
func TestMySQLStore_LostCommitReplyIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	b := setupProxied(t)
	req := faultClaim("lost-commit")
	tx, err := b.store.BeginTx(b.ctx, time.Second)
	require.NoError(t, err)
	res, err := tx.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	_, err = tx.Handle().(*sql.Tx).ExecContext(b.ctx, "INSERT INTO payments (k, amount) VALUES ('lost-commit', 4000)")
	require.NoError(t, err)
	require.NoError(t, tx.Complete(b.ctx, req.Scope, res.Token, req.Now, &server.StoredResponse{Status: 201, Body: []byte("ok")}))

	b.proxy.DropReplyTo(tcpfault.MySQLCommitQuery)
	err = tx.Commit(b.ctx)
	require.Equal(t, 1, b.proxy.Dropped())
	require.ErrorIs(t, err, server.ErrOutcomeUnknown, "a COMMIT whose answer was lost is outcome-unknown")
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.NoError(t, tx.Rollback(b.ctx), "Rollback after Commit is a no-op")

	var amount int
	require.NoError(t, b.direct.QueryRowContext(b.ctx, "SELECT amount FROM payments WHERE k = 'lost-commit'").Scan(&amount))
	require.Equal(t, 4000, amount, "the effect committed although the answer was lost")
	rec, err := b.store.Get(b.ctx, req.Scope, time.Now())
	require.NoError(t, err, "the store works again on a new connection")
	require.Equal(t, server.StateCompleted, rec.State)
	require.Equal(t, "ok", string(rec.Response.Body))
}

// A cut connection is server.ErrStoreUnavailable, in both modes, and the
// store recovers once the path is back. A transaction cut before its
// COMMIT committed nothing.
func TestMySQLStore_CutConnections(t *testing.T) {
	t.Parallel()
	b := setupProxied(t)
	tx, err := b.store.BeginTx(b.ctx, time.Second)
	require.NoError(t, err)
	req := faultClaim("cut-tx")
	res, err := tx.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)

	b.proxy.Cut()
	_, err = tx.Handle().(*sql.Tx).ExecContext(b.ctx, "INSERT INTO payments (k, amount) VALUES ('cut-tx', 1)")
	require.Error(t, err)
	err = tx.Commit(b.ctx)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.False(t, errors.Is(err, server.ErrOutcomeUnknown), "no COMMIT went out on a connection known to be broken: got %v", err)
	_, err = b.store.Claim(b.ctx, faultClaim("cut-lease"))
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	_, err = b.store.BeginTx(b.ctx, time.Second)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)

	b.proxy.Restore() // refuse no more
	require.Eventually(t, func() bool {
		res, err := b.store.Claim(b.ctx, faultClaim("cut-lease"))
		return err == nil && res.Acquired
	}, 10*time.Second, 20*time.Millisecond)
	var n int
	require.NoError(t, b.direct.QueryRowContext(b.ctx, "SELECT count(*) FROM idempotency_keys WHERE `key` = 'cut-tx'").Scan(&n))
	require.Zero(t, n, "the cut transaction committed nothing")
}

// On a frozen path (connections up, nothing forwarded) every call ends
// with its context: a claim is not held forever, and a COMMIT that went
// out is outcome-unknown.
func TestMySQLStore_FrozenPath(t *testing.T) {
	t.Parallel()
	b := setupProxied(t)
	tx, err := b.store.BeginTx(b.ctx, time.Second)
	require.NoError(t, err)
	req := faultClaim("frozen-tx")
	res, err := tx.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.NoError(t, tx.Complete(b.ctx, req.Scope, res.Token, req.Now, &server.StoredResponse{Status: 201}))

	b.proxy.Freeze()
	ctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = tx.Commit(ctx)
	require.ErrorIs(t, err, server.ErrOutcomeUnknown, "the COMMIT went out into the frozen path")
	require.Less(t, time.Since(start), 10*time.Second, "Commit ended with its context")

	ctx2, cancel2 := context.WithTimeout(b.ctx, 300*time.Millisecond)
	defer cancel2()
	start = time.Now()
	_, err = b.store.Claim(ctx2, faultClaim("frozen-lease"))
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "Claim ended with its context")
	b.proxy.Thaw()

	// Once thawed, the frozen COMMIT reached MariaDB or died with its
	// connection; either way the store answers again and the record
	// says which.
	require.Eventually(t, func() bool {
		_, err := b.store.Get(b.ctx, req.Scope, time.Now())
		return err == nil || errors.Is(err, server.ErrRecordNotFound)
	}, 10*time.Second, 20*time.Millisecond)
}

// The store's errors keep MySQL's error number visible.
func TestMySQLStore_ErrorKeepsNumber(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	first, err := b.store.BeginTx(b.ctx, time.Second)
	require.NoError(t, err)
	defer first.Rollback(b.ctx)
	req := faultClaim("number")
	res, err := first.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	second, err := b.store.BeginTx(b.ctx, time.Second)
	require.NoError(t, err)
	defer second.Rollback(b.ctx)
	_, err = second.Claim(b.ctx, req)
	require.ErrorIs(t, err, server.ErrInFlight)
	var myErr *mysql.MySQLError
	require.ErrorAs(t, err, &myErr)
	require.EqualValues(t, 1205, myErr.Number, "innodb_lock_wait_timeout played lock_timeout's part")
}

// A process that froze inside a transaction (or whose network path did)
// does not block its key forever: MariaDB ends the idle transaction after
// Config.IdleInTransactionTimeout, releasing the claim's lock, and a retry
// from another process acquires the key.
func TestMySQLStore_FrozenClientReleasesItsClaim(t *testing.T) {
	t.Parallel()
	b := setupProxied(t)
	frozen, err := mysqlstore.New(b.store.DB(), &mysqlstore.Config{IdleInTransactionTimeout: time.Second})
	require.NoError(t, err)
	tx, err := frozen.BeginTx(b.ctx, time.Second)
	require.NoError(t, err)
	req := faultClaim("frozen-client")
	res, err := tx.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	b.proxy.Freeze()
	defer func() {
		b.proxy.Thaw()
		_ = tx.Rollback(b.ctx) // its session is gone: the rollback fails, and ends the *sql.Tx
	}()

	other, err := mysqlstore.New(b.direct, nil)
	require.NoError(t, err)
	start := time.Now()
	require.Eventually(t, func() bool {
		retry, err := other.BeginTx(b.ctx, 5*time.Second)
		if err != nil {
			return false
		}
		defer retry.Rollback(b.ctx)
		res, err := retry.Claim(b.ctx, req)
		return err == nil && res.Acquired
	}, 30*time.Second, 100*time.Millisecond, "the retry must acquire once MariaDB ended the idle transaction")
	require.Less(t, time.Since(start), 15*time.Second)
}
