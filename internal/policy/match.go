package policy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// CodeRule says where a JSON body carries its error codes: in the members
// named Fields (strings or numbers) and the strings of an "error_codes"
// array, of the body itself, of its "error" object and of each object of
// the arrays named Lists.
type CodeRule struct {
	Fields []string
	Lists  []string
}

// profileCodes is the rule of the profiles; ProfileCodes hands out copies.
var profileCodes = CodeRule{Fields: []string{"type", "code", "errorCode", "error_type", "name"}}

// ProfileCodes returns the rule the profiles read codes with (see Answer):
// the "type", "code", "errorCode", "error_type" or "name" of the body or of
// its "error" object, and its "error_codes". Each call returns a new
// value, which the caller may extend.
func ProfileCodes() CodeRule {
	return CodeRule{Fields: slices.Clone(profileCodes.Fields)}
}

// BodyCodes returns the error codes of body under r: none unless the
// Content-Type of h names JSON or the body starts with "{". Never nil.
func (r CodeRule) BodyCodes(h http.Header, body []byte) []string {
	out := []string{}
	ct := strings.ToLower(h.Get("Content-Type"))
	trimmed := bytes.TrimSpace(body)
	if !strings.Contains(ct, "json") && (len(trimmed) == 0 || trimmed[0] != '{') {
		return out
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(trimmed, &top) != nil {
		return out
	}
	collect := func(m map[string]json.RawMessage) {
		for _, f := range r.Fields {
			raw, ok := m[f]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				out = append(out, s)
				continue
			}
			var n json.Number
			if json.Unmarshal(raw, &n) == nil {
				out = append(out, n.String())
			}
		}
		if raw, ok := m["error_codes"]; ok {
			var list []string
			if json.Unmarshal(raw, &list) == nil {
				out = append(out, list...)
			}
		}
	}
	collect(top)
	if raw, ok := top["error"]; ok {
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) == nil {
			collect(inner)
		}
	}
	for _, l := range r.Lists {
		raw, ok := top[l]
		if !ok {
			continue
		}
		var list []map[string]json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			for _, m := range list {
				collect(m)
			}
		}
	}
	return out
}

// Matcher matches one answer (its status, header and body) against lists
// of Answers. It reads the codes of the body under Rule at most once, and
// only when an Answer with a Code has the answer's status.
type Matcher struct {
	Status int
	Header http.Header
	Body   []byte
	Rule   CodeRule

	codes []string // nil until read
}

// Match returns the first of as that the answer matches: its Status, and
// its Code (when not empty) among the codes of the body.
func (m *Matcher) Match(as []Answer) (Answer, bool) {
	for _, a := range as {
		if a.Status != m.Status {
			continue
		}
		if a.Code == "" {
			return a, true
		}
		if m.codes == nil {
			m.codes = m.Rule.BodyCodes(m.Header, m.Body)
		}
		if slices.Contains(m.codes, a.Code) {
			return a, true
		}
	}
	return Answer{}, false
}
