package riverchaos

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testdb"
)

// The test binary doubles as the service processes: with serviceEnv set,
// TestMain runs one (see service) instead of the tests.
const (
	serviceEnv = "IDEMKIT_RIVERCHAOS_SERVICE" // the service's name
	dsnEnv     = "IDEMKIT_RIVERCHAOS_DSN"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(serviceEnv); name != "" {
		os.Exit(service(name, os.Getenv(dsnEnv)))
	}
	os.Exit(testdb.Report(m).Run())
}

// serviceConfig is the idemriver configuration of every service process:
// short leases, so that a killed service's intents are taken over within
// seconds.
func serviceConfig(name string) *idemriver.Config {
	return &idemriver.Config{
		MaxWorkers:        4,
		LeaseDuration:     2 * time.Second,
		AttemptTimeout:    time.Second,
		FetchPollInterval: 100 * time.Millisecond,
		Backoff: func(_, _ time.Duration, n int, _ *http.Response) time.Duration {
			return min(50*time.Millisecond<<min(n, 4), 500*time.Millisecond)
		},
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer shop") // never stored
			r.Header.Set("X-Service", name)
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
}

// service works the queue until it is killed.
func service(name, dsn string) int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "riverchaos service %s: %v\n", name, err)
		return 2
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fail(err)
	}
	pcfg.MaxConns = 5
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fail(err)
	}
	c, err := idemriver.NewClient(pool, serviceConfig(name))
	if err != nil {
		return fail(err)
	}
	if err := c.Start(ctx); err != nil {
		return fail(err)
	}
	select {} // until SIGKILL
}
