// Package policy is the client's idempotency policy, apart from any
// storage: the dialects of the APIs (profiles), how an answer reads under
// one, Retry-After and Idempotency-Window parsing, the horizon arithmetic,
// the attempt budget, and one decision function, [Decide], that turns the
// facts of one attempt into what happens to its intent next.
//
// It imports no database driver and nothing of the root package: the
// SQLite client (package idemkit) and the River backend (package
// idemriver) both call [Decide] after every attempt, and persist the
// [Decision] it returns in their own queue. The root package re-exports
// [Profile] and [Answer] as type aliases.
//
// How a backend calls it, after sending attempt n of an intent:
//
//	d := policy.Decide(ctx, policy.Facts{
//		Now:        now,
//		Attempt:    n,
//		Retries:    n - 1,          // the waits so far: the backoff's exponent
//		Profile:    &prof,          // the host's dialect
//		Resp:       resp, Body: body, // nil and nil on a transport error
//		Err:        err,            // the transport error, if any
//		CheckRetry: cfg.CheckRetry, // nil: DefaultCheckRetry
//		Backoff:    cfg.Backoff,    // nil: DefaultBackoff
//		Unanswered: unanswered,     // first earlier attempt whose answer was lost, 0 if none
//		Horizon:    hz,             // from NewHorizon at the claim
//		Budget:     policy.Budget{Max: 120, Oldest: nthLast},
//	})
//	switch d.Kind {
//	case policy.Retry:        // snooze until d.At (d.ServerDirected: a Retry-After)
//	case policy.Succeeded, policy.Failed, policy.KeyReused, policy.Unknown:
//		// terminal; d.Answered: resp is the outcome to store
//	case policy.Expired:      // terminal: no attempt may start before the horizon
//	}
//
// The intent's last error is d.Reason, its unanswered attempt
// d.Unanswered, its horizon d.Horizon.At (it only moves earlier), and
// the next call's Retries d.Retries.
package policy
