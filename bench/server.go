package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

// The server modes. baselineMode is the batched hand-written idempotent
// POST every other mode is compared with in the same round; naiveMode, the
// unbatched one, is the second reference.
const (
	baselineMode = "batched"
	naiveMode    = "handwritten"
	// expiringMode is the batched baseline on a table indexed on
	// expires_at, as a table whose keys expire needs (a third reference).
	expiringMode = "batched-expiring"
	headerCell   = "X-Bench-Cell"
	headerAcct   = "X-Account"
	requestBody  = `{"amount":4000,"currency":"eur"}`
)

// serverMode is one route of the server: a way of answering POST /pay.
type serverMode struct {
	name    string
	handler http.Handler
	// replays is false for a mode with no idempotency (the bare insert):
	// it has no replay cell.
	replays bool
	// noEffect is true for the overhead route (noop): it writes no effect
	// row.
	noEffect bool
	// section, when set, is the report's section of the mode's cells
	// instead of its server's (a store measured against a baseline of its
	// own, in the same rounds as the server's modes).
	section string
}

// pgEnv is the PostgreSQL schema, the HTTP server on loopback and the client
// that the server and sweeper sections share.
type pgEnv struct {
	target
	pool    *pgxpool.Pool
	store   *pgstore.Store
	version string
	schema  string
	close   func()
}

const benchSchemaSQL = `
CREATE TABLE bench_payments (
    id         text        PRIMARY KEY,
    mode       text        NOT NULL,
    cell       integer     NOT NULL,
    idem_key   text        NOT NULL,
    account    text        NOT NULL,
    amount     bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bench_payments_cell_idx ON bench_payments (cell);
-- The hand-written baselines' own idempotency tables.
CREATE TABLE handwritten_keys (
    principal   text        NOT NULL,
    key         text        NOT NULL,
    fingerprint bytea       NOT NULL,
    status      smallint,
    body        bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (principal, key)
);
CREATE TABLE batched_keys (LIKE handwritten_keys INCLUDING ALL);
-- The batched baseline with what expiring its keys needs: an index the
-- sweep's range scan uses (idemkit's idempotency_keys has the same).
CREATE TABLE batched_expiring_keys (LIKE handwritten_keys INCLUDING ALL);
CREATE INDEX batched_expiring_keys_expires_at_idx ON batched_expiring_keys (expires_at);`

// newPgEnv creates a schema of its own on cfg.DSN (dropped by close), the
// idemkit store and the benchmark tables in it, and serves every mode on
// 127.0.0.1.
func newPgEnv(ctx context.Context, cfg config) (env *pgEnv, err error) {
	schema := "idemkit_bench_" + uuid.NewString()[:8]
	admin, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer admin.Close(ctx)
	env = &pgEnv{schema: schema, target: target{section: "server"}}
	env.effects = env.countEffects
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&env.version); err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, err
	}
	var closers []func()
	env.close = func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}
	closers = append(closers, func() {
		c, err := pgx.Connect(context.Background(), cfg.DSN)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(context.Background())
		}
	})
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, err
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pcfg.MaxConns = int32(cfg.Pool)
	if env.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	closers = append(closers, env.pool.Close)
	if env.store, err = pgstore.New(env.pool, nil); err != nil {
		return nil, err
	}
	if err := env.store.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := env.pool.Exec(ctx, benchSchemaSQL); err != nil {
		return nil, err
	}
	if env.modes, err = defaultModes(env); err != nil {
		return nil, err
	}
	if cfg.extraModes != nil {
		env.modes = append(env.modes, cfg.extraModes(env)...)
	}
	if cfg.Redis != "" {
		rm, closeRedis, err := redisModes(ctx, env, cfg.Redis, cfg.Pool)
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeRedis)
		env.modes = append(env.modes, rm...)
	}
	if env.modes, err = selectModes(env.modes, cfg.Modes); err != nil {
		return nil, err
	}
	stop, err := env.serve(cfg.maxClients())
	if err != nil {
		return nil, err
	}
	closers = append(closers, stop)
	return env, nil
}

// countEffects is the server section's target.effects.
func (env *pgEnv) countEffects(ctx context.Context, cellID int, mode string) (rows, keys, otherMode int64, err error) {
	err = env.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT idem_key), count(*) FILTER (WHERE mode <> $2)
FROM bench_payments WHERE cell = $1`, cellID, mode).Scan(&rows, &keys, &otherMode)
	return rows, keys, otherMode, err
}

// selectModes keeps the baselines (the batched and the naive hand-written
// POST), the overhead route and the modes named (all when names is empty),
// failing on a name that is no mode.
func selectModes(modes []serverMode, names []string) ([]serverMode, error) {
	if len(names) == 0 {
		return modes, nil
	}
	var kept []serverMode
	for _, m := range modes {
		if m.name == baselineMode || m.name == naiveMode || m.name == overheadMode || slices.Contains(names, m.name) {
			kept = append(kept, m)
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(kept, func(m serverMode) bool { return m.name == n }) {
			return nil, fmt.Errorf("-modes: unknown server mode %q", n)
		}
	}
	return kept, nil
}

const insertPayment = `INSERT INTO bench_payments (id, mode, cell, idem_key, account, amount) VALUES ($1, $2, $3, $4, $5, $6)`

// execer is what a payment is inserted with: the pool, a pgx.Tx.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// payment is the effect every mode performs: one row in bench_payments
// (tagged with the mode, the cell and the request's key, so the checks can
// count effects), answered with a body unique to the payment.
func payment(ctx context.Context, q execer, mode string, r *http.Request, body []byte) (respBody []byte, err error) {
	cellID, _ := strconv.Atoi(r.Header.Get(headerCell))
	id := "pay_" + uuid.NewString()
	if _, err := q.Exec(ctx, insertPayment, id, mode, cellID, r.Header.Get(server.HeaderKey), r.Header.Get(headerAcct), 4000); err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `{"id":%q,"amount":4000,"currency":"eur","request_bytes":%d}`, id, len(body)), nil
}

func writeCreated(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// paymentHandler inserts the payment with the querier q returns for r.
func paymentHandler(mode string, q func(r *http.Request) execer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := payment(r.Context(), q(r), mode, r, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeCreated(w, resp)
	})
}

func defaultModes(env *pgEnv) ([]serverMode, error) {
	principal := func(r *http.Request) (string, error) { return r.Header.Get(headerAcct), nil }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := env.pool
	txMW, err := server.New(env.store, &server.Config{PrincipalFunc: principal, Mode: server.ModeTransactional, Logger: quiet})
	if err != nil {
		return nil, err
	}
	leaseMW, err := server.New(env.store, &server.Config{PrincipalFunc: principal, Mode: server.ModeLease, Logger: quiet})
	if err != nil {
		return nil, err
	}
	onTx := func(r *http.Request) execer {
		if tx, ok := pgstore.Tx(r.Context()); ok {
			return tx
		}
		return nil // not reached: the transactional middleware always opens one
	}
	onPool := func(*http.Request) execer { return pool }
	return []serverMode{
		{name: baselineMode, handler: newBatched(env.pool, baselineMode, "batched_keys"), replays: true},
		{name: expiringMode, handler: newBatched(env.pool, expiringMode, "batched_expiring_keys"), replays: true},
		{name: naiveMode, handler: &handwritten{pool: env.pool}, replays: true},
		{name: "transactional", handler: txMW.Wrap(paymentHandler("transactional", onTx)), replays: true},
		{name: "lease", handler: leaseMW.Wrap(paymentHandler("lease", onPool)), replays: true},
		{name: "bare", handler: paymentHandler("bare", onPool), replays: false},
		noopMode(),
	}, nil
}

// handwritten is the idempotent POST as one writes it naively by hand with
// pgx, the second reference: one transaction of BEGIN, the claim (INSERT ... ON CONFLICT DO
// NOTHING RETURNING), the effect insert, the response UPDATE and COMMIT — five
// round trips for a new key. When the claim returns no row the key exists:
// one SELECT of the stored response in the same transaction, then ROLLBACK
// (nothing was written).
type handwritten struct{ pool *pgxpool.Pool }

func (h *handwritten) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, principal := r.Header.Get(server.HeaderKey), r.Header.Get(headerAcct)
	if key == "" || principal == "" {
		http.Error(w, "Idempotency-Key and X-Account are required", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fp := sha256.Sum256(body)
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var claimed bool
	err = tx.QueryRow(ctx, `INSERT INTO handwritten_keys (principal, key, fingerprint, expires_at)
VALUES ($1, $2, $3, now() + interval '24 hours') ON CONFLICT DO NOTHING RETURNING true`, principal, key, fp[:]).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		var (
			storedFP []byte
			status   *int16
			stored   []byte
		)
		if err := tx.QueryRow(ctx, `SELECT fingerprint, status, body FROM handwritten_keys WHERE principal = $1 AND key = $2`,
			principal, key).Scan(&storedFP, &status, &stored); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = tx.Rollback(ctx)
		switch {
		case !bytes.Equal(storedFP, fp[:]):
			http.Error(w, "key reused with a different request", http.StatusUnprocessableEntity)
		case status == nil:
			http.Error(w, "in flight", http.StatusConflict) // not reached: the claim commits completed
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(wire.HeaderReplayed, "true")
			w.WriteHeader(int(*status))
			_, _ = w.Write(stored)
		}
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	resp, err := payment(ctx, tx, naiveMode, r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := tx.Exec(ctx, `UPDATE handwritten_keys SET status = $3, body = $4 WHERE principal = $1 AND key = $2`,
		principal, key, http.StatusCreated, resp); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeCreated(w, resp)
}

// replayPool keeps, per mode, the first response of completed keys (at most
// cap of them) for the replay cells.
type replayPool struct {
	mu   sync.Mutex
	cap  int
	keys []replayKey
}

type replayKey struct {
	account, key string
	contentType  string
	body         []byte
}

func (p *replayPool) add(k replayKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) < p.cap {
		p.keys = append(p.keys, k)
	}
}

// serverCell runs one cell of the server section: mode m at clients
// clients, new keys or replays of pool's keys, and checks it.
func serverCell(ctx context.Context, cfg config, env *target, m serverMode, scenario string, clients, cellID int, pool *replayPool) (*loadResult, error) {
	url := env.baseURL + m.name
	var keys []replayKey
	if scenario == scenarioReplay {
		keys = pool.keys
		if len(keys) == 0 {
			return nil, fmt.Errorf("%s: no completed key to replay (its new-key cell completed none)", m.name)
		}
	} else {
		pool.mu.Lock()
		pool.keys = pool.keys[:0]
		pool.mu.Unlock()
	}
	cellHeader := strconv.Itoa(cellID)
	op := func(ctx context.Context, i int64) error {
		var k replayKey
		if scenario == scenarioReplay {
			k = keys[i%int64(len(keys))]
		} else {
			k = replayKey{account: "acct_" + strconv.FormatInt(i%16, 10), key: uuid.NewString()}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(requestBody)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(headerAcct, k.account)
		req.Header.Set(server.HeaderKey, k.key)
		req.Header.Set(headerCell, cellHeader)
		if m.noEffect {
			req.Header.Set(headerScenario, scenario)
		}
		resp, err := env.hc.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("%s %s: status %d, want 201: %.200s", m.name, scenario, resp.StatusCode, body)
		}
		replayed := resp.Header.Get(wire.HeaderReplayed) == "true"
		if scenario == scenarioReplay {
			if !replayed {
				return fmt.Errorf("%s replay of key %s: no %s: true header: the handler ran again", m.name, k.key, wire.HeaderReplayed)
			}
			if !bytes.Equal(body, k.body) {
				return fmt.Errorf("%s replay of key %s: body %q differs from the first response %q", m.name, k.key, body, k.body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != k.contentType {
				return fmt.Errorf("%s replay of key %s: Content-Type %q differs from the first response's %q", m.name, k.key, ct, k.contentType)
			}
			return nil
		}
		if replayed {
			return fmt.Errorf("%s: a fresh key %s was answered as a replay", m.name, k.key)
		}
		k.body, k.contentType = body, resp.Header.Get("Content-Type")
		pool.add(k)
		return nil
	}
	res := load(ctx, clients, cfg.cell(), op)
	if res.errs > 0 {
		return res, fmt.Errorf("check failed: no errors: %d failed requests, first: %w", res.errs, res.firstErr)
	}
	// One effect row per fresh 201, none for a replay.
	want := res.ok
	if scenario == scenarioReplay || m.noEffect {
		want = 0
	}
	rows, keysSeen, otherMode, err := env.effects(ctx, cellID, m.name)
	if err != nil {
		return res, err
	}
	if rows != want || keysSeen != want || otherMode != 0 {
		return res, fmt.Errorf("check failed: one effect row per fresh 201: %s %s got %d rows for %d distinct keys (%d of another mode), want %d",
			m.name, scenario, rows, keysSeen, otherMode, want)
	}
	return res, nil
}

const (
	scenarioNewKey = "new-key"
	scenarioReplay = "replay"
)

// runServer runs the cells of env's section: cfg.Rounds rounds; in each,
// for each client count, every mode's new-key cell then every mode's replay
// cell, the modes in an order rotated by one each round.
func runServer(ctx context.Context, cfg config, env *target, rep *report, progress io.Writer) error {
	pools := make(map[string]*replayPool, len(env.modes))
	for _, m := range env.modes {
		pools[m.name] = &replayPool{cap: cfg.ReplayPool}
	}
	cellID := 0
	for round := 1; round <= cfg.Rounds; round++ {
		order := rotate(env.modes, round-1)
		for _, clients := range cfg.Clients {
			for _, scenario := range []string{scenarioNewKey, scenarioReplay} {
				for pos, m := range order {
					if scenario == scenarioReplay && (!m.replays || cfg.NewKeysOnly) {
						continue
					}
					if err := ctx.Err(); err != nil {
						return err
					}
					cellID++
					res, err := serverCell(ctx, cfg, env, m, scenario, clients, cellID, pools[m.name])
					if err != nil {
						return fmt.Errorf("round %d, %d clients, %s, %s: %w", round, clients, scenario, m.name, err)
					}
					c := res.cell(cmp.Or(m.section, env.section), scenario, m.name, clients, round, pos)
					c.servedBy = env.section
					rep.add(c)
					fmt.Fprintln(progress, c.progressLine())
				}
			}
		}
	}
	return nil
}

// rotate returns s rotated left by n.
func rotate[T any](s []T, n int) []T {
	n %= len(s)
	return append(append([]T(nil), s[n:]...), s[:n]...)
}
