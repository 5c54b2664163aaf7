// Package queue is the SQLite queue of the idemkit client: every SQL
// statement the client runs (schema and migrations, claims, leases,
// takeover, group commit, instance identity, row decoding, SQLite error
// mapping). It knows nothing of the client: what it needs (the skip list,
// the window, margin and profiles a claim plans the horizon with, the lease
// length, the attempt budget) it is given as values, and its results are
// values (Intent, Claimed, Applied). The policy deciding what an answer
// means lives in internal/policy; the client applies each decision here
// with one call.
//
// # State changes of an intent
//
// Every write to an intent goes through one of these, each in one
// transaction (BEGIN IMMEDIATE, fsynced unless said otherwise):
//
//   - [Queue.InsertBatch], [Queue.InsertTx]: → pending, due now (a key
//     already queued with the same request returns that intent; another
//     request, ErrKeyReused).
//   - [Queue.InsertClaim]: → pending, then claimed as by Claim, in one
//     transaction (the client's Do).
//   - [Queue.Claim]: pending and due → pending, leased by this process
//     (new fencing token, attempts+1, attempt logged as started, horizon
//     planned, only ever earlier, key form fixed); or pending → expired
//     when its horizon passed; or held (due later, last error saying why)
//     when its attempt budget is spent; or quarantined (due in an hour)
//     when its row cannot be decoded.
//   - [Queue.StartAttempt]: pending, leased → pending, leased (the next
//     attempt within the same lease).
//   - [Queue.Apply]: pending, leased → pending (due at a time, lease kept
//     over an in-process sleep or released) or → succeeded, failed,
//     unknown, expired (with the answer as outcome; no fsync when there is
//     one), the attempt logged, a learned window remembered; plus other
//     intents made due (Change.Wake, Change.HandOff).
//   - [Queue.Cancel]: pending → canceled.
//   - [Queue.Resend]: unknown or failed → pending, due now, same key,
//     unless its horizon passed.
//   - [Queue.Reconcile]: unknown or expired → succeeded or failed, with the
//     response the server's idempotency record holds (Client.Reconcile).
//   - [Queue.MakeDue]: pending, nobody's → pending, due now.
//   - [Queue.ExpireLeases]: pending, leased by a dead process → pending,
//     due now, lease released (taken over by the next claim).
//   - [Queue.Adopt]: pending, queued elsewhere → pending, this instance's.
//   - [Queue.CheckRestored]: pending, never attempted, in a queue restored
//     from an older backup → held (marked with another instance).
//   - [Queue.Prune]: terminal → deleted, with its attempt log.
package queue
