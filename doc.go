// Package idemkit sends HTTP requests that must take effect exactly once —
// a payment, an order, a transfer — over networks that lose answers.
//
// A request that times out may or may not have happened; the only safe
// policy is to retry it with the same idempotency key until the server gives
// a definitive answer. idemkit makes that survive crashes: each user action
// is an [Intent] with one key, minted once and written (fsynced) to a SQLite
// queue file before the first byte is sent. Every retry, in this process or
// in the next one after a crash, carries the same key; the server (see
// package github.com/idemkit/idemkit/server) replays its stored response
// instead of running the handler twice.
//
// # Usage
//
//	c, err := idemkit.Open(ctx, "payments-queue.db", &idemkit.Config{
//		SendHookFunc: func(_ string, r *http.Request) error {
//			r.Header.Set("Authorization", "Bearer "+token) // never stored
//			return nil
//		},
//	})
//	if err != nil { ... }
//	defer c.Close()
//
//	in, err := c.Do(ctx, &idemkit.Request{
//		URL:    "https://api.example.com/charges",
//		Header: http.Header{"Content-Type": {"application/json"}},
//		Body:   []byte(`{"amount": 4000, "currency": "eur"}`),
//	})
//	switch {
//	case err == nil: // in.Outcome.Status is 2xx; in.Outcome.Replayed if an earlier attempt did it
//	case errors.Is(err, idemkit.ErrKeyReused): // 422: a bug, the key was used for another request
//	case errors.Is(err, idemkit.StateFailed): // a definitive 4xx: in.Outcome has the answer
//	case errors.Is(err, idemkit.StateUnknown): // an answer was lost, the next says nothing: reconcile (Client.Resend: same key)
//	case errors.Is(err, idemkit.StateExpired): // unknown outcome: reconcile, never re-send with a new key
//	default: // ctx ended or the queue failed: the intent stays queued
//	}
//
// # Outcome unknown
//
// An answer speaks for the attempt it answers. When an attempt's answer was
// lost (a timeout, a reset, a process interrupted or killed mid-request),
// that attempt may have taken effect; an answer after it that is neither a
// success nor a replay (a 401 for a bad credential, a 403, a proxy's error
// page) says nothing about it. The intent then ends [StateUnknown], never
// [StateFailed]: a failed intent invites a retry under a new key, which
// would take effect a second time. A 409 no profile explains, after such a
// loss, is taken as "still in progress" and retried with the same key.
// [Client.Resend] is the way out: the same key again, and the server
// replays the lost attempt's result or runs it once.
//
// For offline-first agents, [Client.Submit] only persists (concurrent calls
// share one fsync), [Client.Run] is a worker that sends due intents until
// its context ends, and keeps going when the network comes back, and
// [Client.Drain] sends what is due and returns once nothing is left to send
// soon. Run is fair: a worker whose intent must wait gives its slot to the
// other due intents. While a host gives no answer, one of its intents
// probes it every second; its first answer makes the others due at once.
// Config.OnEventFunc observes every step ([Event]); Config.Logger (default
// slog.Default()) logs each intent that ends at INFO.
// [Client.SubmitTx] queues an intent inside the caller's own SQLite
// transaction (a transactional outbox).
//
// # Retries
//
// A response marked as a replay (Idempotent-Replayed: true, or the markers of
// the host's Profile) is the server's final answer: the intent ends succeeded
// for 2xx and failed otherwise, Outcome.Replayed set, and it is never retried.
// Otherwise network errors, timeouts, 408, 425, 5xx except 501, and a 409 or 429
// that carries a Retry-After are retried (DefaultCheckRetry), and so are the
// answers the host's Profile lists as "in progress" or "rate limited" (the
// idemkit server's in-flight problem, Stripe's idempotency_key_in_use, …); a
// 409 or 429 that is a handler's own answer is failed. The answers the Profile
// lists as "key reused" end the intent with ErrKeyReused. Waits use full jitter
// exponential backoff, 500 ms base, 30 s cap (Config.Backoff); a Retry-After (on
// 409, 429 and 503; seconds or an HTTP-date, read against the response's Date
// header) is honoured but never waits less than 100 ms plus the backoff, so a
// "Retry-After: 0" cannot become a hot loop, and no intent gets more than
// Config.MaxAttemptsPerHour attempts in any hour. Waits up to Config.MaxSleep
// are slept, context-aware (by a Run worker only while no other intent is
// due); longer ones are written to the queue as the intent's next attempt
// time and the worker moves on. Config.MaxAttempts bounds the attempts one
// Client makes per intent. Each claimed intent is driven by one loop
// (attempt, classify, persist, then wait or return) over Config.HTTPClient;
// go-retryablehttp supplies the classification of transport errors no
// retry can fix and the LeveledLogger interface of Config.Logger.
//
// # Other APIs
//
// Each host speaks a dialect, a [Profile]: the key header and its encoding, the
// window it keeps keys for, its replay marker and its "in progress" and "key
// reused" answers. [KnownProfile] returns the shipped ones ("idemkit", the
// default; "ietf"; "stripe"; "adyen"; "checkout"; "paypal"); Config.Profiles
// picks one per host.
//
// # The horizon
//
// No attempt starts after the intent's horizon: its first attempt time, plus
// the smaller of Config.Window and the Idempotency-Window the server
// advertised (remembered per host in the queue), minus a safety margin.
// Past the horizon the server may have forgotten the key, so a retry could
// run the effect twice; the intent ends [StateExpired] instead. A wait that
// would cross the horizon is cut so that one last attempt starts just
// before it. Within a process the clock is monotonic; across restarts the
// stored horizon is used and only ever moves earlier.
//
// # Credentials
//
// Nothing secret is written to the queue by default. The queue file and its
// -wal and -shm are created 0600. Headers matching Config.CredentialHeaders
// (Authorization, Proxy-Authorization, Cookie, X-Api-Key, Api-Key,
// X-Auth-Token, *-Token, *-Secret, … by default; or everything outside
// Config.StoredHeaders in allowlist mode) are never written: a process keeps
// those given to Submit or Do in memory while it drives the intent; a
// process that resumes it after a restart gets them from
// Config.SendHookFunc, which is told the intent's host. URLs with
// user:password@, or with a query parameter such as api_key, token or
// client_secret, are refused (unless Config.AllowURLCredentials). Outcomes
// keep only the response headers of Config.OutcomeHeaders, and with
// Config.OmitOutcomeBody only their status and replay marker.
//
// # Where the queue lives
//
// The queue records the host and absolute path of its first open, and each
// intent the instance that queued it. A copy of the file opened on another
// host or at another path does not send the pending intents it did not
// queue (they may have been sent already, and their server's window may
// be over): Do and Wait return a Foreign [QueueError] for them, Run skips
// them, and [Client.Adopt] sends them on purpose. In-memory databases are
// refused.
//
// # Many processes
//
// Several processes may share one queue file. Each attempt runs under a
// lease with a fencing token (claimed with BEGIN IMMEDIATE, within the
// SQLite busy timeout) that also names its holder: host, pid and process
// start time. When a process dies mid-attempt (a SIGKILL, a crash), the
// next process on the same host that looks for work ([Client.Run], or
// [Client.Do] with the intent's key) sees that the holder is gone and takes
// the intent over at once, with a new fencing token and the same key,
// logging "taking over intent of dead process pid N". A holder on another
// host, or alive but stuck, keeps the intent until its lease
// (Config.LeaseDuration) runs out; so does any holder on Windows and other
// systems without the Unix liveness check. Two processes never send the
// same intent at the same time.
//
// # Queue file
//
// The queue is a SQLite database (journal_mode WAL, synchronous FULL, strict
// tables, schema embedded and migrated by Open/NewClient). Open uses
// modernc.org/sqlite (pure Go, no cgo); NewClient takes any *sql.DB the
// caller opened. The due lookup is an index on pending intents only, so a
// queue holding a million terminal intents stays fast; [Client.Prune]
// deletes old terminal intents in chunks. Bodies are limited to
// 10 MiB. A file that is not a queue is refused with
// a Corrupt [QueueError] and left untouched; a write lock held by another
// process beyond the busy timeout is a Locked one.
//
// Memory does not grow with the queue: intents are read from the file one
// at a time when claimed, so a Client holds at most Config.Concurrency
// intents (request and body, up to 10 MiB each) per running Run or
// Drain, plus the one of each Do or Wait in progress and the requests of
// the Submit calls in progress (their callers' own, at most 256 per group
// commit), whatever the number of queued intents. List and Counts return
// at most ListOptions.Limit intents and one count per state. The only
// per-intent state kept beyond that is small bookkeeping of intents this
// process touched and that have not ended: their credential headers
// (given to Submit or Do, never written), their attempt count
// (Config.MaxAttempts) and, for those past it or waiting for a host's
// probe, their id.
//
// # Stability
//
// idemkit is v0: the API may change before v1. The queue schema is
// versioned and migrated forward automatically; a queue migrated by a newer
// version is refused (a Newer [QueueError]).
package idemkit
