package idemkit

import (
	"testing"

	"github.com/idemkit/idemkit/server"
)

// FuzzKeyHeaderValue: every key the client accepts reaches the server's
// parser as exactly that key.
func FuzzKeyHeaderValue(f *testing.F) {
	for _, k := range []string{"abc", " padded ", `"quoted"`, "a,b", `back\slash`, "ключ", "\"", ",", " ", "a\u0085b"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if validateKey(k) != nil {
			return
		}
		got, err := server.ParseKey([]string{keyHeaderValue(k)})
		if err != nil {
			t.Fatalf("key %q sent as %q: server refuses it: %v", k, keyHeaderValue(k), err)
		}
		if got != k {
			t.Fatalf("key %q sent as %q arrives as %q", k, keyHeaderValue(k), got)
		}
	})
}
