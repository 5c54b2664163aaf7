package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

const roleServer = "server"

// Stores of the crash-point server child.
const (
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
	// storeRedis is the payments binary with --dsn redis://… (lease mode,
	// the ledger in SQLite); see paymentsTarget.
	storeRedis = "redis"
)

// The effect the crash-point handler performs (serverSpec.Effect).
const (
	// effectFile appends "<principal> <key>" to a file: an external effect
	// that knows nothing of idempotency.
	effectFile = "file"
	// effectDownstream POSTs to an idempotent downstream service with a key
	// derived from the request's scope (see downstreamKey).
	effectDownstream = "downstream"
	// effectTx inserts a row into the effects table on the middleware's
	// transaction (transactional mode).
	effectTx = "tx"
)

// Where the crash-point handler blocks (serverSpec.Block), after printing
// a line the parent waits for.
const (
	blockNone   = ""
	blockBefore = "before" // "CLAIMED <key>", before the effect
	blockAfter  = "after"  // "EFFECT <key>", after the effect, before answering
)

// serverSpec configures a crash-point server child: the server package's
// middleware over a real store, with a handler that performs one effect.
type serverSpec struct {
	Store         string        `json:"store"`
	Target        string        `json:"target"` // SQLite path or PostgreSQL DSN
	Mode          string        `json:"mode"`   // "lease" or "transactional"
	Lease         time.Duration `json:"lease"`
	Effect        string        `json:"effect"`
	EffectFile    string        `json:"effect_file"`
	DownstreamURL string        `json:"downstream_url"`
	Block         string        `json:"block"`
	Addr          string        `json:"addr"`
}

const (
	effectsTableSQLite   = `CREATE TABLE IF NOT EXISTS effects (principal TEXT NOT NULL, key TEXT NOT NULL) STRICT`
	effectsTablePostgres = `CREATE TABLE IF NOT EXISTS effects (principal text NOT NULL, key text NOT NULL)`
	insertEffectSQLite   = `INSERT INTO effects (principal, key) VALUES (?, ?)`
	insertEffectPostgres = `INSERT INTO effects (principal, key) VALUES ($1, $2)`
)

// downstreamKey is the idempotency key a handler forwards downstream: a
// hash of the whole scope, not the bare client key, because a downstream
// called on behalf of many principals must not merge two principals that
// happen to pick the same key.
func downstreamKey(s server.Scope) string { return s.DownstreamKey() }

// bearerPrincipal is the crash-point server's PrincipalFunc.
func bearerPrincipal(r *http.Request) (string, error) {
	p, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || p == "" {
		return "", errors.New("no bearer token")
	}
	return p, nil
}

func serverMain(s serverSpec) error {
	ctx := context.Background()
	var (
		store  server.Store
		insert func(ctx context.Context, principal, key string) error
	)
	switch s.Store {
	case storeSQLite:
		db, err := sqlitestore.Open(ctx, s.Target)
		if err != nil {
			return err
		}
		defer db.Close()
		st, err := sqlitestore.New(db, nil)
		if err != nil {
			return err
		}
		if err := st.Migrate(ctx); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, effectsTableSQLite); err != nil {
			return err
		}
		store = st
		insert = func(ctx context.Context, principal, key string) error {
			tx, ok := sqlitestore.Tx(ctx)
			if !ok {
				return errors.New("no SQL transaction in the context")
			}
			_, err := tx.ExecContext(ctx, insertEffectSQLite, principal, key)
			return err
		}
	case storePostgres:
		pool, err := pgxpool.New(ctx, s.Target)
		if err != nil {
			return err
		}
		defer pool.Close()
		st, err := pgstore.New(pool, nil)
		if err != nil {
			return err
		}
		if err := st.Migrate(ctx); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, effectsTablePostgres); err != nil {
			return err
		}
		store = st
		insert = func(ctx context.Context, principal, key string) error {
			tx, ok := pgstore.Tx(ctx)
			if !ok {
				return errors.New("no pgx transaction in the context")
			}
			_, err := tx.Exec(ctx, insertEffectPostgres, principal, key)
			return err
		}
	default:
		return fmt.Errorf("unknown store %q", s.Store)
	}

	mode := server.ModeLease
	if s.Mode == "transactional" {
		mode = server.ModeTransactional
	}
	mw, err := server.New(store, &server.Config{PrincipalFunc: bearerPrincipal, Mode: mode, LeaseDuration: s.Lease, Window: time.Hour})
	if err != nil {
		return err
	}
	downstream := &http.Client{Timeout: 10 * time.Second}
	handler := func(w http.ResponseWriter, r *http.Request) {
		sc, _ := server.ScopeFromContext(r.Context())
		if s.Block == blockBefore {
			fmt.Println("CLAIMED", sc.Key)
			blockUntilKilled()
		}
		var err error
		switch s.Effect {
		case effectFile:
			err = appendLine(s.EffectFile, sc.Principal+" "+sc.Key)
		case effectDownstream:
			err = callDownstream(r.Context(), downstream, s.DownstreamURL, downstreamKey(sc))
		case effectTx:
			err = insert(r.Context(), sc.Principal, sc.Key)
		default:
			err = fmt.Errorf("unknown effect %q", s.Effect)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if s.Block == blockAfter {
			fmt.Println("EFFECT", sc.Key)
			blockUntilKilled()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"principal": sc.Principal, "key": sc.Key})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /effects", mw.Wrap(http.HandlerFunc(handler)))

	ln, err := net.Listen("tcp", cmpStr(s.Addr, "127.0.0.1:0"))
	if err != nil {
		return err
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// appendLine appends line to path and syncs it: once it returns, the
// effect survives the process.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func callDownstream(ctx context.Context, c *http.Client, url, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(`{}`)))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("downstream answered %d", resp.StatusCode)
	}
	return nil
}
