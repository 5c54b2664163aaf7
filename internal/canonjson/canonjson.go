// Package canonjson writes the canonical form of a JSON text: object members
// sorted by key (by Unicode code point), no insignificant whitespace, strings
// re-escaped minimally, and numbers written as an exact canonical decimal, so
// that 1, 1.0, 10e-1 and 1E0 are the same text while large integers keep
// every digit. Two texts have the same canonical form exactly when they denote
// the same JSON value. It is the form version 1 of the server's request
// fingerprint hashes, and must never change.
//
// Numbers are written as the shortest digit string d with no leading or
// trailing zeros and an exponent e (value d×10^e): as an integer when
// 0 ≤ e and len(d)+e ≤ 21, as a decimal fraction when -len(d)-6 < e < 0, and
// otherwise as d[0].d[1:]e±x. Zero is 0 (also for -0).
//
// # Cost
//
// [Parse] checks the whole text and indexes it; [Document.WriteTo] then
// streams the canonical form to a writer, usually a hash, without building it
// in memory. Memory is proportional to the nesting depth plus the members of
// objects whose keys are not already in order, never to the size of strings,
// numbers or arrays: the index holds 4 bytes per member of such an object and
// 8 per object of three members or more, less than 1.3 times the text; work
// is O(n log n) for a text of n bytes.
//
// # Rejected input
//
// Besides syntax errors (grammar of RFC 8259), Parse rejects invalid UTF-8,
// lone surrogate escapes, objects with a duplicate key (after decoding
// escapes), nesting deeper than [Limits.MaxDepth], exponents beyond
// ±1,000,000,000 and texts longer than [Limits.MaxBytes]. Every error is an
// [*Error] wrapping one of the sentinels below.
package canonjson

import (
	"errors"
	"fmt"
	"math"
)

// Sentinels wrapped by every [*Error] Parse returns; test with errors.Is.
var (
	// ErrSyntax means the text is not JSON: a grammar error, invalid UTF-8, a
	// control character in a string, or a lone surrogate escape.
	ErrSyntax = errors.New("canonjson: invalid JSON")
	// ErrDuplicateKey means an object has two members with the same key.
	ErrDuplicateKey = errors.New("canonjson: duplicate object key")
	// ErrTooDeep means arrays and objects nest deeper than Limits.MaxDepth.
	ErrTooDeep = errors.New("canonjson: nesting too deep")
	// ErrTooLarge means the text is longer than Limits.MaxBytes.
	ErrTooLarge = errors.New("canonjson: text too large")
	// ErrExponentRange means a number's exponent is beyond ±1,000,000,000.
	ErrExponentRange = errors.New("canonjson: exponent out of range")
)

// Error is the error Parse returns for a text it cannot canonicalise. Err is
// one of the sentinels (ErrSyntax, ErrDuplicateKey, ErrTooDeep, ErrTooLarge,
// ErrExponentRange) and Unwrap returns it.
type Error struct {
	// Offset is the byte offset in the text where the problem was found.
	Offset int
	// Err is the sentinel classifying the problem.
	Err error
	// Detail says what was found, e.g. `duplicate object key "a"`.
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("canonjson: at offset %d: %s", e.Offset, e.Detail)
}

func (e *Error) Unwrap() error { return e.Err }

const (
	// MaxDepthDefault is the nesting depth Limits.MaxDepth defaults to.
	MaxDepthDefault = 1000
	// MaxBytesLimit is the longest text Parse accepts whatever
	// Limits.MaxBytes says: offsets into the text are kept in 31 bits.
	MaxBytesLimit = math.MaxInt32

	// maxExponent bounds the exponent of a number, so that a short text
	// cannot ask for a billion digits.
	maxExponent = 1_000_000_000
)

// Limits bounds what Parse accepts. The zero value is ready to use.
type Limits struct {
	// MaxDepth is the deepest nesting accepted. The top-level value is at
	// depth 0 and the elements and member values of a container at depth d
	// are at depth d+1: with MaxDepth 1 the text [[]] is accepted and [[1]]
	// is not. Defaults to MaxDepthDefault (1000).
	MaxDepth int
	// MaxBytes is the longest text accepted, in bytes. Defaults to, and is
	// capped at, MaxBytesLimit (2 GiB − 1).
	MaxBytes int
}

func (l *Limits) withDefaults() Limits {
	var out Limits
	if l != nil {
		out = *l
	}
	if out.MaxDepth <= 0 {
		out.MaxDepth = MaxDepthDefault
	}
	if out.MaxBytes <= 0 || out.MaxBytes > MaxBytesLimit {
		out.MaxBytes = MaxBytesLimit
	}
	return out
}
