package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server/sqlitestore"
)

// ledgerRow is one row of the payments table, read straight from the
// database.
type ledgerRow struct {
	ID          string
	Account     string
	Amount      int64
	Description string
	Key         string
}

// inspector reads a server's database directly (PostgreSQL schema or
// SQLite file): the ledger, the idempotency records, the effects table.
type inspector struct {
	pg *pgxpool.Pool
	db *sql.DB
}

// openInspector opens store's database at target (a DSN or a file path);
// it is closed with the test.
func openInspector(t *testing.T, store, target string) *inspector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := &inspector{}
	switch store {
	case storePostgres:
		pool, err := pgxpool.New(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		in.pg = pool
		t.Cleanup(pool.Close)
	case storeSQLite, storeRedis: // with Redis, the ledger is in SQLite
		db, err := sqlitestore.Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		in.db = db
		t.Cleanup(func() { _ = db.Close() })
	default:
		t.Fatalf("unknown store %q", store)
	}
	return in
}

// pgPlaceholders turns the ? placeholders of q into $1, $2, ...
func pgPlaceholders(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// count runs a SELECT count(*) query written with ? placeholders.
func (in *inspector) count(ctx context.Context, q string, args ...any) (int, error) {
	var n int
	var err error
	if in.pg != nil {
		err = in.pg.QueryRow(ctx, pgPlaceholders(q), args...).Scan(&n)
	} else {
		err = in.db.QueryRowContext(ctx, q, args...).Scan(&n)
	}
	return n, err
}

const selectLedger = `SELECT id, account, amount, description, idempotency_key FROM payments ORDER BY account, idempotency_key, id`

// payments returns every row of the payments table.
func (in *inspector) payments(ctx context.Context) ([]ledgerRow, error) {
	var out []ledgerRow
	if in.pg != nil {
		rows, err := in.pg.Query(ctx, selectLedger)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var r ledgerRow
			if err := rows.Scan(&r.ID, &r.Account, &r.Amount, &r.Description, &r.Key); err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
	rows, err := in.db.QueryContext(ctx, selectLedger)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r ledgerRow
		if err := rows.Scan(&r.ID, &r.Account, &r.Amount, &r.Description, &r.Key); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// record returns the state and token of the idempotency record of
// (principal, key) on any endpoint; found is false if there is none.
func (in *inspector) record(ctx context.Context, principal, key string) (state string, token int64, found bool, err error) {
	const q = `SELECT state, token FROM idempotency_keys WHERE principal = ? AND key = ?`
	if in.pg != nil {
		err = in.pg.QueryRow(ctx, pgPlaceholders(q), principal, key).Scan(&state, &token)
	} else {
		err = in.db.QueryRowContext(ctx, q, principal, key).Scan(&state, &token)
	}
	switch {
	case err == nil:
		return state, token, true, nil
	case errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows):
		return "", 0, false, nil
	}
	return "", 0, false, err
}

// apiPayment is one payment as the payments API returns it.
type apiPayment struct {
	ID          string `json:"id"`
	Account     string `json:"account"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description"`
}

// listPayments is GET /v1/payments as account, straight to the server.
func listPayments(ctx context.Context, baseURL, account string) ([]apiPayment, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/payments", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+account)
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/payments as %s: status %d: %s", account, resp.StatusCode, b)
	}
	var out struct {
		Payments []apiPayment `json:"payments"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/payments as %s: %w", account, err)
	}
	return out.Payments, nil
}

// noKeepAlive is the HTTP client of the tests' own requests: no idle
// connections are left behind for goleak to find, and no request is
// silently resent on a reused connection.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
