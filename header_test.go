package idemkit

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
)

// TestHeaderCodec_RoundTripsBytes: stored headers come back byte for byte,
// including values that are not UTF-8; rows written as JSON before the
// binary codec still decode.
func TestHeaderCodec_RoundTripsBytes(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.Header{
		"empty":        {},
		"latin-1":      {"X-Name": {"Jos\xe9 M\xfcller"}},
		"invalid utf8": {"X-Raw": {"\xff\xfe\x80", "second"}, "Content-Type": {"application/json"}},
		"tab and 8bit": {"X-A": {"a\tb", "", "\u00e9\x85"}},
	} {
		got, err := wire.DecodeHeader(wire.EncodeHeader(h))
		require.NoError(t, err, name)
		require.Equal(t, h, got, name)
	}
	legacy, err := wire.DecodeHeader([]byte(`{"Content-Type":["application/json"],"x-lower":["v"]}`))
	require.NoError(t, err)
	require.Equal(t, http.Header{"Content-Type": {"application/json"}, "X-Lower": {"v"}}, legacy)
	for _, bad := range [][]byte{{0}, {0, 9}, {0, 1, 5}, {0, 1, 1, 3, 'a', 'b'}, {0, 1, 1, 1, 'a', 1, 1, '\n'}, append(wire.EncodeHeader(http.Header{"A": {"b"}}), 0)} {
		_, err := wire.DecodeHeader(bad)
		require.Error(t, err, "%q", bad)
	}
}

// TestHeaderBytes_SurviveResume: header values and bodies that are not
// UTF-8 reach the server unchanged after the queue is closed and reopened
// by another Client, and the outcome's headers and body are stored as
// received.
func TestHeaderBytes_SurviveResume(t *testing.T) {
	t.Parallel()
	value, body := "Jos\xe9 \xff\xfe", []byte("\xff\x00\x01 r\xe9sum\xe9")
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", r.Header.Get("X-Name"))
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	b := setup(t, nil, nil)
	in, err := b.c.Submit(testCtx(t), &Request{URL: srv.URL, Header: http.Header{"X-Name": {value}}, Body: body})
	require.NoError(t, err)
	require.NoError(t, b.c.Close())
	var stored []byte
	require.NoError(t, rawDB(t, b.path).QueryRow(`SELECT header FROM idemkit_intents WHERE id = ?`, in.ID).Scan(&stored))
	require.Equal(t, wire.EncodeHeader(http.Header{"X-Name": {value}}), stored, "the queue stores the header with the wire codec")

	c := b.reopen(t, testConfig())
	got, err := c.driveID(testCtx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, value, (<-seen).Get("X-Name"), "the request header arrives byte for byte")
	require.Equal(t, body, got.Outcome.Body)
	require.Equal(t, value, got.Outcome.Header.Get("Content-Type"), "the outcome header is stored byte for byte")
}

// fuzzQueue is a pair of Clients on one queue file (fsync off: a fuzz
// target runs thousands of times) and an echo server.
type fuzzQueue struct {
	submit, resume *Client
	srv            *httptest.Server
	seen           chan http.Header
}

func newFuzzQueue(f *testing.F) *fuzzQueue {
	path := filepath.Join(f.TempDir(), "q.db")
	fq := &fuzzQueue{seen: make(chan http.Header, 1)}
	fq.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fq.seen <- r.Header.Clone()
		for _, v := range r.Header.Values("X-Fuzz") {
			w.Header().Add("Content-Type", v) // an allowlisted outcome header
		}
		_, _ = io.Copy(w, r.Body)
	}))
	f.Cleanup(fq.srv.Close)
	open := func() *Client {
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_txlock=immediate")
		if err != nil {
			f.Fatal(err)
		}
		c, err := NewClient(context.Background(), db, testConfig())
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { c.Close(); db.Close() })
		return c
	}
	fq.submit, fq.resume = open(), open()
	return fq
}

// FuzzHeaderBytesSurviveResume: any header value a net/http client may send
// (no control bytes but tab; surrounding spaces are not part of a field
// value, RFC 9110 §5.5) and any body reach the server unchanged when one
// Client queues the intent and another, reading it back from the file,
// sends it; the outcome comes back byte for byte too.
func FuzzHeaderBytesSurviveResume(f *testing.F) {
	f.Add("plain", []byte("{}"))
	f.Add("Jos\xe9", []byte("\xff"))
	f.Add("\xff\xfe\x80\x85", []byte(nil))
	f.Add("a\tb", []byte("\x00\x01"))
	f.Add("\u00e9\u4e16", []byte("body"))
	fq := newFuzzQueue(f)
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		trimmed := len(value) > 0 && (value[0] == ' ' || value[0] == '\t' || value[len(value)-1] == ' ' || value[len(value)-1] == '\t')
		if value == "" || trimmed || !validHeaderValue(value) || len(body) > 1<<16 {
			return
		}
		ctx := context.Background()
		in, err := fq.submit.Submit(ctx, &Request{URL: fq.srv.URL, Header: http.Header{"X-Fuzz": {value}}, Body: body})
		if err != nil {
			t.Fatalf("Submit(%q): %v", value, err)
		}
		got, err := fq.resume.driveID(ctx, in.ID)
		if err != nil {
			t.Fatalf("drive: %v", err)
		}
		if h := <-fq.seen; h.Get("X-Fuzz") != value {
			t.Fatalf("sent %q, the server got %q", value, h.Get("X-Fuzz"))
		}
		if got.State != StateSucceeded || !bytes.Equal(got.Outcome.Body, body) && !(len(body) == 0 && len(got.Outcome.Body) == 0) {
			t.Fatalf("outcome %s body %q, want %q", got.State, got.Outcome.Body, body)
		}
		if got.Outcome.Header.Get("Content-Type") != value {
			t.Fatalf("outcome header %q, want %q", got.Outcome.Header.Get("Content-Type"), value)
		}
	})
}

// FuzzHeaderCodec: every header the queue may store round-trips, and no
// input makes decodeHeader panic.
func FuzzHeaderCodec(f *testing.F) {
	f.Add("X-A", "v", []byte{0, 1, 0})
	f.Add("Content-Type", "caf\xe9", []byte(`{"A":["b"]}`))
	f.Fuzz(func(t *testing.T, name, value string, raw []byte) {
		_, _ = wire.DecodeHeader(raw)
		if !validToken(name) || !validHeaderValue(value) {
			return
		}
		h := http.Header{http.CanonicalHeaderKey(name): {value, value}}
		got, err := wire.DecodeHeader(wire.EncodeHeader(h))
		if err != nil {
			t.Fatal(err)
		}
		if got.Get(name) != value || len(got.Values(name)) != 2 {
			t.Fatalf("%q: %q round-trips as %q", name, value, got.Values(name))
		}
	})
}

// validHeaderValue reports whether net/http's client sends v as a field
// value: no control bytes other than horizontal tab (bytes 0x80 and up,
// obs-text, are sent as they are).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
