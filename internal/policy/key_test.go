package policy

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
	p, _ := Known("idemkit")
	f.Fuzz(func(t *testing.T, k string) {
		for _, quoted := range []bool{false, true} {
			if CheckKey(&p, k, quoted) != nil {
				continue
			}
			v := KeyValue(k, quoted)
			got, err := wire.ParseKey([]string{v})
			if err != nil {
				t.Fatalf("quoted %v: key %q sent as %q: server refuses it: %v", quoted, k, v, err)
			}
			if got != k {
				t.Fatalf("quoted %v: key %q sent as %q arrives as %q", quoted, k, v, got)
			}
		}
	})
}
