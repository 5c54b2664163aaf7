// Package conform is the battery behind `idemkit check`: a bounded,
// documented set of requests to one endpoint that tells whether an API's
// idempotency holds, property by property, from its answers alone.
//
// [Run] sends the battery and returns a [Report]: for each property (see
// the Prop constants) pass, fail or cannot tell, with the exchanges that
// decided it. [Plan] says what Run would send, without sending. The
// battery never sends more than Config.MaxRequests requests, never to
// another URL than Config.URL (redirects are answers, not followed), and
// uses fresh keys for every property. What it expects of the API depends
// on the dialect ([LookupDialect]: the client's profiles, with which of
// their answers the provider promises): it fails only what the dialect
// promises, and says "cannot tell" when the answers cannot decide (no
// overlap between duplicates, no id to tell executions apart, no second
// caller, no request the API refuses).
//
// [WriteText], [WriteJUnit] and encoding/json render a Report.
package conform
