package paymentsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server/recoverer"
)

// leaseConfig is a lease-mode copy of cfg with a short lease, so that a
// dead process's claim lapses soon.
func leaseConfig(cfg *Config) *Config {
	c := *cfg
	c.Mode = ModeLease
	c.LeaseDuration = time.Second
	return &c
}

// dieAt pays k1 for alice on a process (an App on the backend of cfg)
// that dies at one of its hooks: "made", after the ledger write and before
// the stored response, or "start", before the payment. The handler is held
// at the hook while the process's database handles close (the process is
// gone: no heartbeat, no completion reaches the store); when its lease has
// run out the handler is let go. It returns what that handler answered
// (nothing of it was stored).
func dieAt(t *testing.T, cfg *Config, hook string) response {
	t.Helper()
	held := make(chan struct{})
	letGo := make(chan struct{})
	c := leaseConfig(cfg)
	block := func(string, string) {
		close(held)
		<-letGo
	}
	if hook == "made" {
		c.OnChargeMadeFunc = block
	} else {
		c.OnChargeStartFunc = block
	}
	dead := setup(t, c, nil)
	got := make(chan response, 1)
	go func() { got <- dead.pay(t, "alice", "k1", usd40) }()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never reached its hook")
	}
	dead.app.Close() // the process's store and ledger are gone
	close(letGo)
	select {
	case r := <-got:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("the dead process's request never ended")
		return response{}
	}
}

// recoverConfig is a lease-mode copy of cfg that runs the recoverer often.
func recoverConfig(cfg *Config) *Config {
	c := leaseConfig(cfg)
	c.Recover = true
	c.RecoverInterval = 50 * time.Millisecond
	c.RecoverMinAge = 10 * time.Millisecond
	return c
}

// A lease-mode payment whose process died after the ledger write and
// before the response was stored: the next process's recoverer finds the
// lapsed claim, reconstructs the 201 from the ledger, and the client's
// retry gets it replayed, byte for byte what the handler sent, with one
// payment in the ledger.
func TestRecover_PaymentWhoseProcessDiedAfterTheLedgerWrite(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		original := dieAt(t, cfg, "made")
		require.Equal(t, http.StatusCreated, original.status, "the dead handler had made the payment: %s", original.body)

		rc := recoverConfig(cfg)
		reg := prometheus.NewRegistry()
		rc.Metrics = reg
		b := setup(t, rc, nil)
		require.Eventually(t, func() bool {
			return b.app.recoverer.Stats().Outcomes[recoverer.OutcomeCompleted] == 1
		}, 60*time.Second, 20*time.Millisecond, "logs:\n%s", b.logs.String())
		require.Equal(t, 1.0, recoveredMetric(t, reg, "completed"), "idemkit_recoverer_claims_total{outcome=completed}")

		retry := b.pay(t, "alice", "k1", usd40)
		require.Equal(t, http.StatusCreated, retry.status, "body: %s", retry.body)
		require.Equal(t, "true", retry.header.Get(wire.HeaderReplayed))
		require.Equal(t, "application/json", retry.header.Get("Content-Type"))
		require.Equal(t, string(original.body), string(retry.body), "the replay is what the handler sent, byte for byte")
		ps := b.list(t, "alice")
		require.Len(t, ps, 1, "exactly one payment")
		var p Payment
		require.NoError(t, json.Unmarshal(retry.body, &p))
		require.Equal(t, ps[0].ID, p.ID)
		require.Contains(t, b.logs.String(), "recoverer completed a claim")
	})
}

// A lease-mode payment whose process died before the payment: the
// recoverer finds no payment in the ledger and releases the claim; the
// client's retry makes the payment, once.
func TestRecover_PaymentWhoseProcessDiedBeforeThePayment(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		dieAt(t, cfg, "start")

		b := setup(t, recoverConfig(cfg), nil)
		require.Empty(t, b.list(t, "alice"), "the dead process made no payment")
		require.Eventually(t, func() bool {
			return b.app.recoverer.Stats().Outcomes[recoverer.OutcomeReleased] == 1
		}, 60*time.Second, 20*time.Millisecond, "logs:\n%s", b.logs.String())

		retry := b.pay(t, "alice", "k1", usd40)
		require.Equal(t, http.StatusCreated, retry.status, "body: %s", retry.body)
		require.Empty(t, retry.header.Get(wire.HeaderReplayed), "the retry made the payment")
		require.Len(t, b.list(t, "alice"), 1)
		again := b.pay(t, "alice", "k1", usd40)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Equal(t, string(retry.body), string(again.body))
	})
}

// The recovered response is the handler's own rendering.
func TestPaymentResponse_IsWhatTheHandlerWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, &Config{DB: t.TempDir() + "/p.db", SweepInterval: -1}, nil)
	resp := b.pay(t, "alice", "k1", usd40)
	require.Equal(t, http.StatusCreated, resp.status)
	ps := b.list(t, "alice")
	require.Len(t, ps, 1)
	want := paymentResponse(ps[0])
	require.Equal(t, want.Status, resp.status)
	require.Equal(t, want.Header.Get("Content-Type"), resp.header.Get("Content-Type"))
	require.True(t, bytes.Equal(want.Body, resp.body), "got %q want %q", resp.body, want.Body)
}

func TestRecover_Config(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), &Config{DB: t.TempDir() + "/p.db", Recover: true, Mode: ModeTransactional})
	require.ErrorContains(t, err, "Config.Recover")
	_, err = Open(t.Context(), &Config{DB: t.TempDir() + "/p.db", Mode: ModeLease, RecoverInterval: -time.Second, RecoverMinAge: -time.Second})
	require.ErrorContains(t, err, "Config.RecoverInterval")
	require.ErrorContains(t, err, "Config.RecoverMinAge")

	c := (&Config{Recover: true, Mode: ModeLease, LeaseDuration: 7 * time.Second}).WithDefaults()
	require.Equal(t, 30*time.Second, c.RecoverInterval)
	require.Equal(t, 7*time.Second, c.RecoverMinAge, "a claim is left to its client for one more lease")
}

// Redis keeps no index of its in-flight claims: --recover is refused with
// recoverer.ErrNoListing.
func TestRecover_RedisIsRefused(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Redis)
	_, err := Open(t.Context(), &Config{DSN: dsn, DB: t.TempDir() + "/p.db", Recover: true, SweepInterval: -1})
	require.True(t, errors.Is(err, recoverer.ErrNoListing), "got %v", err)
}

// recoveredMetric returns idemkit_recoverer_claims_total{outcome} from reg.
func recoveredMetric(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "idemkit_recoverer_claims_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "outcome" && lp.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no idemkit_recoverer_claims_total{outcome=%q}", outcome)
	return 0
}
