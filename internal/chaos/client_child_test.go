package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

const roleClient = "client"

// What a client child does (clientSpec.Kind).
const (
	// clientChaos submits the spec's N intents (again, after a restart:
	// Submit of a queued key returns the queued intent) and runs the queue
	// until no intent is pending, then exits 0.
	clientChaos = "chaos"
	// clientSubmitBlock submits one intent, prints "SUBMITTED <id> <key>"
	// and blocks without sending it: the parent kills it there.
	clientSubmitBlock = "submit-block"
	// clientHoldResponse submits one intent and runs the queue; as soon as
	// a response has arrived (body read) and before the client records it,
	// the transport prints "RESPONSE <status>" and blocks forever.
	clientHoldResponse = "hold-response"
	// clientResume runs the queue until no intent is pending.
	clientResume = "resume"
)

// clientSpec configures a client child process.
type clientSpec struct {
	Kind    string `json:"kind"`
	Queue   string `json:"queue"`
	URL     string `json:"url"` // base URL of the payments API (or the proxy)
	Account string `json:"account"`
	// Prefix and N name the intents of clientChaos: keys intentKey(Prefix,
	// Account, i) for i in [0, N).
	Prefix      string `json:"prefix"`
	N           int    `json:"n"`
	Concurrency int    `json:"concurrency"`
	// Window is Config.Window: the longest window the client relies on.
	Window time.Duration `json:"window"`
	// Key is the key of the one intent of clientSubmitBlock and
	// clientHoldResponse.
	Key string `json:"key"`
}

// childLease is the client lease of child processes: short, so that an
// intent held by a killed client is taken over within seconds.
const (
	childLease          = 3 * time.Second
	childAttemptTimeout = 2 * time.Second
)

// childBackoff is full jitter over [20ms, 400ms]: fast retries, so that a
// chaos run with thousands of faults stays short.
func childBackoff(_, _ time.Duration, n int, _ *http.Response) time.Duration {
	ceiling := 400 * time.Millisecond
	if n < 5 {
		ceiling = min(ceiling, 20*time.Millisecond<<n)
	}
	return rand.N(ceiling) + time.Millisecond
}

func childConfig(s clientSpec, transport http.RoundTripper) *idemkit.Config {
	cfg := &idemkit.Config{
		LeaseDuration:  childLease,
		AttemptTimeout: childAttemptTimeout,
		Concurrency:    max(s.Concurrency, 1),
		Window:         s.Window,
		Backoff:        childBackoff,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+s.Account)
			return nil
		},
	}
	if transport != nil {
		cfg.HTTPClient = &http.Client{Transport: transport}
	}
	return cfg
}

// intentKey is the Idempotency-Key of intent i of an account in a run; the
// payment's description carries it too.
func intentKey(prefix, account string, i int) string {
	return fmt.Sprintf("%s-%s-%05d", prefix, account, i)
}

// paymentRequest is the request of the intent with key key: the same bytes
// every time, so that a resubmission after a restart is the same request.
func paymentRequest(baseURL, key string, amount int) *idemkit.Request {
	return &idemkit.Request{
		URL:    baseURL + "/v1/payments",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   fmt.Appendf(nil, `{"amount":%d,"currency":"USD","description":%q}`, amount, key),
		Key:    key,
	}
}

// intentAmount is the amount of intent i, in cents.
func intentAmount(i int) int { return 100 + i }

func clientMain(s clientSpec) error {
	ctx := context.Background()
	var transport http.RoundTripper
	if s.Kind == clientHoldResponse {
		transport = &holdTransport{next: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c, err := idemkit.Open(ctx, s.Queue, childConfig(s, transport))
	if err != nil {
		return err
	}
	defer c.Close()

	switch s.Kind {
	case clientChaos:
		if err := submitAll(ctx, c, s); err != nil {
			return err
		}
		fmt.Println("SUBMITTED", s.N)
		return runUntilDone(ctx, c, 5*time.Minute)
	case clientSubmitBlock:
		in, err := c.Submit(ctx, paymentRequest(s.URL, s.Key, 4000))
		if err != nil {
			return err
		}
		fmt.Println("SUBMITTED", in.ID, in.Key)
		blockUntilKilled() // before anything is sent
		return nil
	case clientHoldResponse:
		if _, err := c.Submit(ctx, paymentRequest(s.URL, s.Key, 4000)); err != nil {
			return err
		}
		return runUntilDone(ctx, c, time.Minute)
	case clientResume:
		return runUntilDone(ctx, c, 2*time.Minute)
	}
	return fmt.Errorf("unknown client kind %q", s.Kind)
}

// submitAll submits the spec's intents, 32 at a time (they share group
// commits). A Locked QueueError is retried.
func submitAll(ctx context.Context, c *idemkit.Client, s clientSpec) error {
	sem := make(chan struct{}, 32)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i := range s.N {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key := intentKey(s.Prefix, s.Account, i)
			var err error
			for range 20 {
				_, err = c.Submit(ctx, paymentRequest(s.URL, key, intentAmount(i)))
				if !queueLocked(err) {
					break
				}
			}
			if err != nil {
				mu.Lock()
				first = cmpErr(first, fmt.Errorf("submit %s: %w", key, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// runUntilDone runs the queue until no intent is pending (in any process).
func runUntilDone(ctx context.Context, c *idemkit.Client, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		counts, err := c.Counts(ctx)
		if err == nil && counts[idemkit.StatePending] == 0 {
			fmt.Println("DONE")
			return nil
		}
		if err != nil && !queueLocked(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("intents still pending: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// holdTransport lets a request through, reads the whole response and then
// announces it on stdout and blocks forever: the client process is killed
// with the response in memory, before it can record it.
type holdTransport struct {
	next http.RoundTripper
}

func (h *holdTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("RESPONSE", resp.StatusCode)
	blockUntilKilled()
	return nil, errors.New("not killed")
}

// blockUntilKilled parks a child process where its parent kills it. It is
// bounded (a timer, not select{}), so that a forgotten child ends by itself
// and the runtime never sees a deadlock.
func blockUntilKilled() {
	t := time.NewTimer(10 * time.Minute)
	defer t.Stop()
	<-t.C
}

// queueLocked reports a queue file locked by another process.
func queueLocked(err error) bool {
	var qe *idemkit.QueueError
	return errors.As(err, &qe) && qe.Locked()
}
