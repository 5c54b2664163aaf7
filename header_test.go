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

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

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
	in, err := b.c.Submit(testkit.Ctx(t), &Request{URL: srv.URL, Header: http.Header{"X-Name": {value}}, Body: body})
	require.NoError(t, err)
	require.NoError(t, b.c.Close())
	var stored []byte
	require.NoError(t, rawDB(t, b.path).QueryRow(`SELECT header FROM idemkit_intents WHERE id = ?`, in.ID).Scan(&stored))
	require.Equal(t, wire.EncodeHeader(http.Header{"X-Name": {value}}), stored, "the queue stores the header with the wire codec")

	c := b.reopen(t, testConfig())
	got, err := c.driveID(testkit.Ctx(t), in.ID)
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
		// The whole body first: an HTTP/1 handler that starts its
		// response before reading the request body has the rest of it
		// discarded (io.Copy to the ResponseWriter writes the header after
		// 512 bytes).
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
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
