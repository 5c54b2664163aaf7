package queue

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/wire"
)

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
			if !Is(err, Corrupt) {
				t.Fatalf("decodeIntent error %v is not a Corrupt Error", err)
			}
			return
		}
		// What decodes is usable: valid state, key, method and headers that
		// round-trip through the stored encoding.
		if !in.State.Valid() || policy.ValidateKey(in.Key) != nil || !wire.ValidToken(in.Method) {
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
