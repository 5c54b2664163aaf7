package main

import (
	"strings"
	"testing"
)

// FuzzShellQuote: what resumeHint quotes reads back as the same word.
func FuzzShellQuote(f *testing.F) {
	for _, s := range []string{"", "/tmp/q.db", "it's", "a b", "Authorization: …", "''", `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := shellQuote(s)
		got, ok := shellUnquote(q)
		if !ok || got != s {
			t.Fatalf("shellQuote(%q) = %q reads back as %q (ok %v)", s, q, got, ok)
		}
	})
}

// shellUnquote reads one POSIX shell word made of bare safe characters,
// '...' and \' (all shellQuote writes); ok is false for anything else.
func shellUnquote(q string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'':
			j := strings.IndexByte(q[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(q[i+1 : i+1+j])
			i += j + 1
		case c == '\\' && i+1 < len(q) && q[i+1] == '\'':
			b.WriteByte('\'')
			i++
		case strings.IndexByte(" \t\n\"\\$`;&|<>()*?[]{}~#!", c) >= 0:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), q != ""
}

// FuzzParseHeaders: any header line is accepted as Name: value or refused,
// never a panic; an accepted one round-trips its name.
func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{"A: b", "nocolon", ": v", "X-Y:", "Authorization: Bearer x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		h, err := parseHeaders([]string{line})
		if err != nil {
			return
		}
		name, _, _ := strings.Cut(line, ":")
		if len(h) != 1 || h.Values(strings.TrimSpace(name)) == nil {
			t.Fatalf("parseHeaders(%q) = %v", line, h)
		}
	})
}
