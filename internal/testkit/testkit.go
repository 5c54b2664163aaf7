// Package testkit holds the test helpers idemkit's packages share: a test
// context, polling for a condition, a buffer safe for concurrent writes, a
// closed loopback address, a check of a problem+json answer, and whether
// the race detector is on. It is imported by tests only, and links nothing
// of idemkit but internal/wire: no store, no queue, no River.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
)

// CtxTimeout bounds every test context: generous, for a loaded 2-core
// machine under -race.
const CtxTimeout = 60 * time.Second

// Ctx returns a context that ends after CtxTimeout or with the test.
func Ctx(t testing.TB) context.Context {
	t.Helper()
	return CtxFor(t, CtxTimeout)
}

// CtxFor returns a context that ends after d or with the test, for tests
// that need a longer bound than CtxTimeout.
func CtxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 5 ms until it holds, failing the test with
// msg if it does not within d.
func Eventually(t testing.TB, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", d, msg)
		}
		timer := time.NewTimer(5 * time.Millisecond)
		<-timer.C
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use (a logger's or a
// child process's output read while it is written).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ClosedAddr is a loopback address nothing listens on (connection
// refused).
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// RequireProblem checks that an answer (its status, header and body) is an
// RFC 9457 problem+json of the given status whose type is the idemkit
// problem type slug (one of the wire.Problem* slugs, or an API's own) and
// whose body repeats the status and carries a title.
func RequireProblem(t testing.TB, gotStatus int, header http.Header, body []byte, status int, slug string) {
	t.Helper()
	require.Equal(t, status, gotStatus, "body: %s", body)
	require.Equal(t, "application/problem+json", header.Get("Content-Type"), "body: %s", body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &p), "body: %s", body)
	require.Equal(t, wire.ProblemTypeBase+slug, p.Type)
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Title, "body: %s", body)
}
