package paymentsapi

import (
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
)

// Lease mode on PostgreSQL: the payment's autocommitted INSERT is applied
// but its answer is lost. The API answers outcome-unknown, never "The
// payment was not made" (the report: 5 of 37 such answers for payments that
// existed), and the retry with the same key answers the payment that was
// made: one intent, one payment.
func TestPayments_LostInsertAnswerIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := tcpfault.Start(t, u.Host)
	u.Host = proxy.Addr()
	var once sync.Once
	b := setup(t, &Config{DSN: u.String(), SweepInterval: -1, Mode: ModeLease}, func(h *handlers) {
		h.onChargeStart = func(string, string) { once.Do(func() { proxy.DropReply(tcpfault.Contains([]byte("INSERT 0 1\x00"))) }) }
	})

	first := b.pay(t, "alice", "intent-1", usd40)
	requireProblem(t, first, 503, wire.ProblemOutcomeUnknown)
	require.NotContains(t, string(first.body), "not made")
	require.Len(t, b.list(t, "alice"), 1, "the payment was made")

	again := b.pay(t, "alice", "intent-1", usd40)
	require.Equal(t, 201, again.status, "body %s", again.body)
	require.Len(t, b.list(t, "alice"), 1, "one intent, one payment")
}
