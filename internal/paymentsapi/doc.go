// Package paymentsapi is the small payments API of idemkit's examples, built
// on the server package: POST /v1/payments is protected by an
// Idempotency-Key, and in transactional mode the payment row and the
// idempotency record commit in one database transaction, so a crash can
// never leave one without the other. GET /v1/payments lists the caller's
// payments.
//
// The API runs on an embedded SQLite file or on PostgreSQL:
//
//	app, err := paymentsapi.Open(ctx, &paymentsapi.Config{DB: "payments.db", Delay: 3 * time.Second})
//	...
//	defer app.Close()
//	http.Serve(ln, app.Handler())
//
// examples/payments serves it as a command; examples/killresume runs it in a
// child process and kills its clients mid-payment.
//
// Authentication is a demo: "Authorization: Bearer alice" is account alice,
// unchecked. A real deployment plugs its own server.Config.PrincipalFunc.
//
// This package is internal to the examples and has no stability promise.
package paymentsapi
