// Package wire is the contract the two halves of idemkit share byte for
// byte: the client (package idemkit) and the server (package server).
//
// It holds the header names, the rules for an Idempotency-Key and its
// RFC 8941 sf-string form, the stored header codec, the timestamp layout of
// the SQLite files, and the RFC 9457 problem types the server answers with
// and the client recognises. It imports only the standard library.
//
// The package is internal: its API may change with any commit.
package wire
