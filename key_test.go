package idemkit

import (
	"testing"

	"github.com/idemkit/idemkit/internal/wire"
)

// FuzzKeyHeaderValue: every key a profile accepts reaches the server's
// parser as exactly that key, bare or as an RFC 8941 string.
func FuzzKeyHeaderValue(f *testing.F) {
	for _, k := range []string{"abc", " padded ", `"quoted"`, "a,b", `back\slash`, "ключ", "\"", ",", " ", "a\u0085b"} {
		f.Add(k)
	}
	bare, _ := KnownProfile("idemkit")
	quoted, _ := KnownProfile("ietf")
	f.Fuzz(func(t *testing.T, k string) {
		for _, p := range []*Profile{&bare, &quoted} {
			if p.checkKey(k) != nil {
				continue
			}
			v := p.keyValue(k)
			got, err := wire.ParseKey([]string{v})
			if err != nil {
				t.Fatalf("profile %s: key %q sent as %q: server refuses it: %v", p.Name, k, v, err)
			}
			if got != k {
				t.Fatalf("profile %s: key %q sent as %q arrives as %q", p.Name, k, v, got)
			}
		}
	})
}
