// Package idemriver queues intents on River, the PostgreSQL job queue, for
// services with many instances: the same contract as the SQLite client of
// package idemkit (one key per intent, minted once and durable before the
// first byte; retries within the downstream API's window, honouring
// Retry-After; an attempt budget; the outcome-unknown state; takeover after a
// crash; credentials never stored) with the queue in the PostgreSQL the
// service already runs, and the intent written in the same transaction as the
// business change that caused it (a transactional outbox).
//
// River, riverpgxv5 and pgx are linked only here: a program that imports this
// package links no SQLite, and one that imports the root package links no
// River.
//
// # Usage
//
//	if err := idemriver.Migrate(ctx, pool, ""); err != nil { ... } // River's tables, and this package's
//	c, err := idemriver.NewClient(pool, &idemriver.Config{
//		SendHookFunc: func(host string, r *http.Request) error {
//			r.Header.Set("Authorization", "Bearer "+token) // never stored
//			return nil
//		},
//	})
//	if err := c.Start(ctx); err != nil { ... } // workers; omit in insert-only processes
//	defer c.Stop(context.WithoutCancel(ctx))
//
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders ...`)
//	in, err := c.SubmitTx(ctx, tx, &idemriver.Request{URL: "https://api.example.com/charges", Body: body})
//	_ = tx.Commit(ctx) // the order and its payment intent commit together, or neither does
//
//	in, err = c.Wait(ctx, in.ID) // or Get, from any instance
//
// # How an intent is a River job
//
// An intent is one job of kind "idemkit_intent" in Config.Queue. Its args hold
// the intent id, the key (minted at submit: a UUIDv7, also the id), the
// method, URL, stored headers and body. Each time a worker picks the job, it
// makes at most one HTTP attempt:
//
//  1. River's fetch has already committed the run (the job's attempt number
//     and attempted_at) before the worker is called: that is the attempt's
//     durable record, before its first byte, at no extra write. A run River
//     counted whose result was never recorded is an attempt whose worker died,
//     perhaps with the request on the wire: the next worker counts it (its
//     answer lost, see outcome unknown in package idemkit), and the intent's
//     first attempt and horizon are never later than such a run;
//  2. it sends the request with the key in the host profile's header, the
//     send hook adding credentials;
//  3. it decides, with the client's policy, what the answer means, and applies
//     that with one River state change: completed (succeeded), cancelled with
//     the reason (failed, outcome unknown, expired), or snoozed until the next
//     attempt (a retry: Retry-After, backoff, or the attempt budget).
//
// The outcome (status, replay marker, allowlisted headers, body) is the job's
// recorded output (River's "output" metadata) and the intent's progress is its
// "idemkit" metadata; Client.Get and Client.Wait read both back by intent id.
// Snoozes do not count against River's MaxAttempts: the horizon and
// Config.MaxAttemptsPerHour bound the attempts.
//
// Client.Resend puts an intent that ended outcome-unknown or failed back in
// the queue under the same key (River's JobRetry), the way out of an unknown
// outcome; Client.Cancel cancels a pending one (River's JobCancel).
//
// # Takeover
//
// A worker that dies with its attempt on the wire leaves the job running.
// Every started Client rescues jobs of its queue that have been running
// longer than Config.LeaseDuration (River's own rescuer does the same after an
// hour by default): the next worker sees a run that recorded no result,
// counts it as an attempt possibly sent (see outcome unknown in package
// idemkit), and sends again with the same key, within the horizon counted
// from the intent's first attempt. River's JobTimeout is set between
// Config.AttemptTimeout and Config.LeaseDuration so that a live worker never
// holds a job past its lease.
//
// # Credentials
//
// Nothing secret is stored: credential headers (Config.CredentialHeaders) of a
// submitted request are dropped at submit (their names are kept) and the send
// hook supplies them to whichever instance sends the intent; URLs with
// credentials are refused; outcomes keep only Config.OutcomeHeaders, never
// Set-Cookie or a credential header.
//
// # Watching it
//
// The jobs are River jobs: River UI (riverui) lists them by queue and state,
// with their args (request, key), metadata (progress, output) and errors
// (each failed attempt's reason).
//
// # Stability
//
// idemriver is v0, like the module. The job args and metadata are versioned
// by their kind; the package's table (idemriver_host) is created by Migrate.
package idemriver
