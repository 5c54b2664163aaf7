package idemkit

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "120", "-1", "+1", "1.5", " 7 ", "", "abc",
		"99999999999999999999999999", "Tue, 01 Dec 2026 09:00:30 GMT", "Tuesday, 01-Dec-26 09:01:00 GMT",
		"Tue Dec  1 09:00:05 2026", "Mon, 30 Nov 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("parseRetryAfter(%q) = %v, false: want 0 when rejected", v, d)
			}
			return
		}
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("parseRetryAfter(%q) = %v, out of [0, %v]", v, d, maxRetryAfter)
		}
		// Whatever the server says, the schedule never passes the horizon.
		horizon := now.Add(time.Hour)
		if next, ok := schedule(now, horizon, 0, d, true, 0, time.Second); ok && next.After(horizon) {
			t.Fatalf("Retry-After %q scheduled at %v, after the horizon %v", v, next, horizon)
		}
	})
}

func FuzzDecodeIntent(f *testing.F) {
	ts := "2026-12-01T09:00:00.000Z"
	f.Add("id-1", "key-1", "pending", "POST", []byte(`{"Content-Type":["application/json"]}`), ts, ts, int64(0), []byte(nil), int64(2))
	f.Add("id-2", "key-2", "succeeded", "GET", []byte(`{}`), ts, ts, int64(201), []byte(`{"X":["y"]}`), int64(1))
	f.Add("id-3", "k", "bogus", "PO ST", []byte(`{"X Y":["a"]}`), "yesterday", "", int64(99), []byte(`[`), int64(-1))
	f.Add("", "a\nb", "failed", "", []byte(`{"A":["b\r\nc"]}`), "2026-13-01T09:00:00.000Z", ts, int64(1000), []byte(`null`), int64(1<<40))
	f.Fuzz(func(t *testing.T, id, key, state, method string, header []byte, next, first string, status int64, outHeader []byte, attempts int64) {
		r := &row{id: id, key: key, state: state, method: method, url: "http://h/", host: "http://h",
			header: header, body: []byte("b"), fp: []byte{1}, attempts: attempts, nextAttemptAt: next,
			firstAttemptAt: &first, createdAt: ts, updatedAt: ts}
		if status != 0 {
			r.outcomeStatus = &status
			r.outcomeHeader = outHeader
		}
		in, err := decodeIntent(r)
		if err != nil {
			if !isQueue(err, queueCorrupt) {
				t.Fatalf("decodeIntent error %v is not a Corrupt QueueError", err)
			}
			return
		}
		// What decodes is usable: valid state, key, method and headers that
		// round-trip through the stored encoding.
		if !in.State.valid() || validateKey(in.Key) != nil || !validToken(in.Method) {
			t.Fatalf("decoded an invalid intent: %+v", in)
		}
		again, err := wire.DecodeHeader(wire.EncodeHeader(in.Header))
		if err != nil || !bytes.Equal(wire.EncodeHeader(again), wire.EncodeHeader(in.Header)) {
			t.Fatalf("header does not round-trip: %v", err)
		}
		if _, err := http.NewRequest(in.Method, in.URL, nil); err != nil {
			t.Fatalf("decoded intent cannot be sent: %v", err)
		}
		if in.Outcome != nil && (in.Outcome.Status < 100 || in.Outcome.Status > 999) {
			t.Fatalf("outcome status %d", in.Outcome.Status)
		}
	})
}
