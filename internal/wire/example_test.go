package wire_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

func ExampleParseKey() {
	for _, v := range [][]string{{"order-42"}, {`"order-42"`}, {`"a,b"`}, {"a,b"}, nil} {
		key, err := wire.ParseKey(v)
		switch {
		case errors.Is(err, wire.ErrKeyMissing):
			fmt.Println("missing")
		case errors.Is(err, wire.ErrKeyInvalid):
			fmt.Println("invalid:", err.(*wire.KeyError).Reason)
		default:
			fmt.Printf("%q\n", key)
		}
	}
	// Output:
	// "order-42"
	// "order-42"
	// "a,b"
	// invalid: a bare key must not contain a comma (it looks like a list of keys); quote it
	// missing
}

// A client sends a key bare when it can and as an sf-string otherwise.
func ExampleQuoteString() {
	for _, k := range []string{"order-42", " padded", `say "hi"`, "ключ"} {
		if err := wire.CheckKey(k, wire.MaxKeyBytes); err != nil {
			fmt.Println(err)
			continue
		}
		if !wire.NeedsQuotes(k) {
			fmt.Printf("%s: %s\n", wire.HeaderKey, k)
			continue
		}
		q, ok := wire.QuoteString(k)
		if !ok {
			fmt.Printf("%q cannot be sent unchanged\n", k)
			continue
		}
		fmt.Printf("%s: %s\n", wire.HeaderKey, q)
	}
	// Output:
	// Idempotency-Key: order-42
	// Idempotency-Key: " padded"
	// Idempotency-Key: say "hi"
	// Idempotency-Key: ключ
}

func ExampleEncodeHeader() {
	h := http.Header{"X-Name": {"Jos\xe9"}} // Latin-1, not UTF-8
	b := wire.EncodeHeader(h)
	fmt.Printf("% x\n", b)
	back, err := wire.DecodeHeader(b)
	fmt.Printf("%q %v\n", back.Get("X-Name"), err)
	// Output:
	// 00 01 01 06 58 2d 4e 61 6d 65 01 04 4a 6f 73 e9
	// "Jos\xe9" <nil>
}

func ExampleFormatTime() {
	t := time.Date(2026, 12, 1, 10, 5, 7, 123_456_789, time.FixedZone("CET", 3600))
	s := wire.FormatTime(t)
	fmt.Println(s)
	back, _ := wire.ParseTime(s)
	fmt.Println(back)
	// Output:
	// 2026-12-01T09:05:07.123Z
	// 2026-12-01 09:05:07.123 +0000 UTC
}

func ExampleProblemSlug() {
	uri := wire.ProblemType(wire.ProblemKeyReused)
	fmt.Println(uri)
	slug, ok := wire.ProblemSlug(uri)
	fmt.Println(slug, ok, wire.ProblemTitle(slug))
	// Output:
	// https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused
	// key-reused true Idempotency-Key reused with a different request
}
