package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// A lease-mode process SIGKILLed while a payment waits in its --delay
// leaves the claim in progress; the next process, run with --recover,
// finds no payment in the ledger and releases the claim, and the client's
// retry makes the payment once. (A process killed after the ledger write
// is completed instead: see paymentsapi's
// TestRecover_PaymentWhoseProcessDiedAfterTheLedgerWrite, which can hold
// the handler between the write and the stored response.)
func TestBinary_RecoverReleasesAPaymentWhoseProcessWasKilled(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db := filepath.Join(t.TempDir(), "payments.db")
	base := []string{"--addr", "127.0.0.1:0", "--db", db, "--mode", "lease", "--lease", "1s", "--sweep", "0", "--window", "1h"}

	first := startBinary(t, bin, append(base, "--delay", "1h")...)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		req, err := http.NewRequest(http.MethodPost, first.url+"/v1/payments", strings.NewReader(usd40))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k1")
		if resp, err := http.DefaultClient.Do(req); err == nil { // the kill cuts it
			resp.Body.Close()
		}
	}()

	// Wait for the claim to commit, then kill the process in its delay.
	ctx := context.Background()
	sdb, err := sqlitestore.Open(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sdb.Close() })
	store, err := sqlitestore.New(sdb, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		recs, err := store.InFlight(ctx, time.Now(), 0, 10)
		require.NoError(t, err)
		return len(recs) == 1
	}, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, first.cmd.Process.Kill())
	<-sent

	second := startBinary(t, bin, append(base, "--recover", "--recover-interval", "50ms")...)
	scope := server.Scope{Principal: "alice", Endpoint: "*", Key: "k1"}
	require.Eventually(t, func() bool {
		_, err := store.Get(ctx, scope, time.Now())
		return err != nil
	}, 60*time.Second, 20*time.Millisecond, "the recoverer releases the claim; stderr:\n%s", second.stderr.String())
	require.Contains(t, second.stderr.String(), "recoverer released a claim")

	resp, body := second.pay(t, "alice", "k1", usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
	require.Empty(t, resp.Header.Get(wire.HeaderReplayed), "the retry made the payment")
	again, againBody := second.pay(t, "alice", "k1", usd40)
	require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
	require.Equal(t, body, againBody)
	rec, err := store.Get(ctx, scope, time.Now())
	require.NoError(t, err)
	require.Equal(t, server.StateCompleted, rec.State)
	second.stop(t)
}

func TestParseFlags_Recover(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--mode", "lease", "--recover", "--recover-interval", "5s"}, &testkit.SyncBuffer{})
	require.NoError(t, err)
	require.True(t, o.cfg.Recover)
	require.Equal(t, 5*time.Second, o.cfg.RecoverInterval)
	var stderr testkit.SyncBuffer
	_, err = parseFlags([]string{"--recover-interval", "-1s"}, &stderr)
	require.ErrorContains(t, err, "--recover-interval")
}

// A lease-mode process SIGKILLed after the payment reached the ledger,
// while its handler waits in --delay-after (the answer never sent), leaves
// the payment made and the claim in progress. The next process, run with
// --recover, finds the payment in the ledger and completes the claim with
// the payment's response: the client's retry gets it replayed, and there
// is still exactly one payment.
func TestBinary_RecoverCompletesAPaymentWhoseProcessDiedAfterTheLedgerWrite(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db := filepath.Join(t.TempDir(), "payments.db")
	base := []string{"--addr", "127.0.0.1:0", "--db", db, "--mode", "lease", "--lease", "1s", "--sweep", "0", "--window", "1h"}
	first := startBinary(t, bin, append(base, "--delay-after", "1h")...)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		req, err := http.NewRequest(http.MethodPost, first.url+"/v1/payments", strings.NewReader(usd40))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil { // the kill cuts it
			resp.Body.Close()
		}
	}()
	// Wait for the payment to be in the ledger, then kill the process
	// before it answers.
	listed := func(p *proc) []map[string]any {
		req, err := http.NewRequest(http.MethodGet, p.url+"/v1/payments", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var list struct {
			Payments []map[string]any `json:"payments"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
		return list.Payments
	}
	require.Eventually(t, func() bool { return len(listed(first)) == 1 }, 60*time.Second, 10*time.Millisecond)
	made := listed(first)[0]["id"]
	require.NoError(t, first.cmd.Process.Kill())
	<-sent

	ctx := context.Background()
	sdb, err := sqlitestore.Open(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sdb.Close() })
	store, err := sqlitestore.New(sdb, nil)
	require.NoError(t, err)
	scope := server.Scope{Principal: "alice", Endpoint: "*", Key: "k1"}
	rec, err := store.Get(ctx, scope, time.Now())
	require.NoError(t, err)
	require.Equal(t, server.StateInProgress, rec.State, "the killed process never completed its claim")

	second := startBinary(t, bin, append(base, "--recover", "--recover-interval", "50ms")...)
	require.Eventually(t, func() bool {
		rec, err := store.Get(ctx, scope, time.Now())
		return err == nil && rec.State == server.StateCompleted
	}, 60*time.Second, 20*time.Millisecond, "the recoverer completes the claim; stderr:\n%s", second.stderr.String())
	require.Contains(t, second.stderr.String(), "recoverer completed a claim")

	resp, body := second.pay(t, "alice", "k1", usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
	require.Equal(t, "true", resp.Header.Get(wire.HeaderReplayed), "the retry is answered from the recovered record")
	var receipt map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &receipt))
	require.Equal(t, made, receipt["id"], "the recovered response is the payment that was made")
	require.Len(t, listed(second), 1, "exactly one payment")
	second.stop(t)
}
