package canonjson_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"

	"github.com/idemkit/idemkit/internal/canonjson"
)

func ExampleParse() {
	doc, err := canonjson.Parse([]byte(`{"currency": "EUR", "amount": 4000.0, "n": 123456789012345678901234567890}`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := doc.WriteTo(os.Stdout); err != nil {
		fmt.Println(err)
	}
	fmt.Println()

	// The usual destination is a hash: the canonical form is never held in memory.
	h := sha256.New()
	if _, err := doc.WriteTo(h); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%x\n", h.Sum(nil)[:8])

	_, err = canonjson.Parse([]byte(`{"a":1,"\u0061":2}`), nil)
	fmt.Println(errors.Is(err, canonjson.ErrDuplicateKey), err)
	_, err = canonjson.Parse([]byte(`[[1]]`), &canonjson.Limits{MaxDepth: 1})
	fmt.Println(errors.Is(err, canonjson.ErrTooDeep))
	// Output:
	// {"amount":4000,"currency":"EUR","n":1.2345678901234567890123456789e+29}
	// 10eafa15c3c8ed73
	// true canonjson: at offset 18: duplicate object key "a"
	// true
}
