// Command agent is an offline-first agent built on the idemkit SDK: it
// decides on a few payments, queues them at once (no network needed: each
// is on disk, with its idempotency key, before anything is sent), and
// drains the queue whenever the API is reachable. Kill it at any moment
// (SIGKILL included) and start it again: it resumes the same intents with
// the same keys, so every payment takes effect exactly once.
//
//	go run ./examples/payments &             # the API, on 127.0.0.1:8080
//	go run ./examples/agent --orders 3       # queues 3 payments, sends them, exits 0
//
// Started while the API is down, it queues the payments, retries with a
// short probe (one intent per host, every second) and sends everything
// within about a second of the API coming back. The bearer token is a
// credential: it is added at send time by Config.SendHookFunc and never
// written to the queue.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemkit/idemkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	queue := fs.String("queue", "agent-queue.db", "the agent's queue file (created if missing)")
	api := fs.String("api", "http://127.0.0.1:8080", "the payments API")
	token := fs.String("token", "alice", "bearer token: the account (never stored in the queue)")
	orders := fs.Int("orders", 3, "how many payments the agent decides on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := idemkit.Open(ctx, *queue, &idemkit.Config{
		// INFO: a line per state change (an intent ended, a host down or
		// back, a dead agent's intent taken over); never a key or a token.
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+*token)
			return nil
		},
		OnEventFunc: func(e idemkit.Event) { report(stdout, e) },
	})
	if err != nil {
		return err
	}
	defer c.Close()

	// Queue every payment first. The key is the agent's own order id: a
	// restarted agent submitting the same orders gets the queued intents
	// back (same request, same key), never new ones.
	for i := 1; i <= *orders; i++ {
		in, err := c.Submit(ctx, &idemkit.Request{
			URL:    *api + "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   fmt.Appendf(nil, `{"amount":%d,"currency":"usd","description":"order %d"}`, 1000*i, i),
			Key:    fmt.Sprintf("agent-order-%d", i),
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "agent: order %d queued: %s (key %s)\n", i, in.State, in.Key)
	}

	// Drain returns once nothing is left to send soon; with the API down it
	// keeps retrying (short waits) until ctx ends.
	counts, err := c.Drain(ctx)
	fmt.Fprintf(stdout, "agent: drained: %d succeeded, %d failed, %d unknown, %d expired, %d pending\n",
		counts[idemkit.StateSucceeded], counts[idemkit.StateFailed], counts[idemkit.StateUnknown], counts[idemkit.StateExpired], counts[idemkit.StatePending])
	if err != nil {
		return err
	}
	if n := counts[idemkit.StateSucceeded]; n < *orders {
		return fmt.Errorf("%d of %d payments succeeded", n, *orders)
	}
	return nil
}

// report prints what happens to the payments, one line per step.
func report(w io.Writer, e idemkit.Event) {
	switch e.Kind {
	case idemkit.EventAnswered:
		fmt.Fprintf(w, "agent: %s attempt %d: %d replayed=%v\n", e.Key, e.Attempt, e.Status, e.Replayed)
	case idemkit.EventRetrying:
		if e.Queued {
			fmt.Fprintf(w, "agent: %s attempt %d: %s; next attempt at %s\n", e.Key, e.Attempt, e.Reason, e.Next.Format("15:04:05.000"))
		} else {
			fmt.Fprintf(w, "agent: %s attempt %d: %s; retrying in %v\n", e.Key, e.Attempt, e.Reason, e.Wait)
		}
	case idemkit.EventEnded:
		fmt.Fprintf(w, "agent: %s ended %s after %d attempt(s)\n", e.Key, e.State, e.Attempt)
	case idemkit.EventHostDown:
		fmt.Fprintf(w, "agent: %s is down (%s): payments wait\n", e.Host, e.Reason)
	case idemkit.EventProbing:
		fmt.Fprintf(w, "agent: probing %s at %s\n", e.Host, e.Next.Format("15:04:05.000"))
	case idemkit.EventHostBack:
		fmt.Fprintf(w, "agent: %s is back\n", e.Host)
	case idemkit.EventProgress:
		fmt.Fprintf(w, "agent: queue: %d pending, %d succeeded, %d failed, %d unknown, %d expired\n",
			e.Counts[idemkit.StatePending], e.Counts[idemkit.StateSucceeded], e.Counts[idemkit.StateFailed],
			e.Counts[idemkit.StateUnknown], e.Counts[idemkit.StateExpired])
	}
}
