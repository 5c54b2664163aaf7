package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// errNoPayment is returned by the naive client when it gives up.
var errNoPayment = errors.New("no payment made")

// runNaive is the naive client role: plain net/http, nothing on disk, and a
// NEW Idempotency-Key minted for every attempt (so a retry, or a restart,
// is a new payment to the server). It retries errors and 5xx, 409 and 429
// after Retry-After (or a second), until clientTimeout.
func runNaive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f clientFlags
	fs := flag.NewFlagSet("killresume naive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	em := newEmitter(stdout)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 20 * time.Second}

	em.info("nothing on disk: this process knows of no earlier attempt")
	for {
		key := uuid.NewString()
		em.emit(event{Kind: evSend, Key: key, Text: fmt.Sprintf("-> POST /v1/payments  Idempotency-Key: %s  (a NEW key)", key)})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/payments", strings.NewReader(paymentBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+f.account)
		req.Header.Set("Idempotency-Key", key)
		wait := time.Second
		resp, err := hc.Do(req)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			em.emit(event{Kind: evResponse, Key: key, Text: "<- no answer: " + err.Error()})
		default:
			body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if rerr != nil {
				em.emit(event{Kind: evResponse, Key: key, Text: "<- answer cut off: " + rerr.Error()})
				break
			}
			ev := describeResponse(key, resp, body)
			em.emit(ev)
			if resp.StatusCode < 300 || (resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusTooManyRequests) {
				done := ev
				done.Kind, done.Text = evDone, fmt.Sprintf("outcome: %d, payment %s", resp.StatusCode, ev.Payment)
				em.emit(done)
				return nil
			}
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 && s <= 10 {
				wait = time.Duration(s) * time.Second
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", errNoPayment, ctx.Err())
		case <-t.C:
		}
	}
}
