package chaos

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

const validPayment = `{"amount":4000,"currency":"USD","description":"hostile"}`

// hostileServer starts a payments server on SQLite for one hostile test.
func hostileServer(ctx context.Context, t *testing.T) (*paymentsServer, *inspector) {
	t.Helper()
	bins := binaries(t)
	target, args := paymentsTarget(t, storeSQLite, t.TempDir())
	srv := startPayments(ctx, t, bins.payments, &lockedBuffer{}, args...)
	return srv, openInspector(t, storeSQLite, target)
}

// rawRequest writes raw bytes on a new connection to host, half-closes it if
// asked, and reads one response.
func rawRequest(ctx context.Context, host string, raw []byte, halfClose bool) (reply, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write(raw); err != nil {
		return reply{}, err
	}
	if halfClose {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			return reply{}, err
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func rawPayment(host, keyHeaderLines, body string, contentLength int) []byte {
	return fmt.Appendf(nil, "POST /v1/payments HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer alice\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		host, keyHeaderLines, contentLength, body)
}

// requireStillServing makes one good payment with a fresh key.
func requireStillServing(ctx context.Context, t *testing.T, srv *paymentsServer, key string) {
	t.Helper()
	r, err := post(ctx, srv.URL()+"/v1/payments", "alice", key, "application/json", []byte(validPayment))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.status, "the server keeps serving: %s", r.body)
}

// TestHostile_Keys sends malformed Idempotency-Key headers over raw
// connections (net/http would refuse to send most of them). Each is a 400
// with a problem type, nothing is charged, and the server keeps serving.
func TestHostile_Keys(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 60*time.Second)
	srv, insp := hostileServer(ctx, t)
	host := strings.TrimPrefix(srv.URL(), "http://")

	// The subtests run in sequence: the checks after them count what they
	// did to the ledger.
	for _, tc := range []struct {
		name  string
		lines string // the key header lines, each ending in \r\n
		slug  string
	}{
		{"256 bytes", "Idempotency-Key: " + strings.Repeat("k", 256) + "\r\n", wire.ProblemKeyInvalid},
		{"4 KiB", "Idempotency-Key: " + strings.Repeat("k", 4096) + "\r\n", wire.ProblemKeyInvalid},
		{"quoted 256 bytes", `Idempotency-Key: "` + strings.Repeat("q", 256) + "\"\r\n", wire.ProblemKeyInvalid},
		{"tab inside", "Idempotency-Key: ab\tcd\r\n", wire.ProblemKeyInvalid},
		{"control byte", "Idempotency-Key: ab\x01cd\r\n", wire.ProblemKeyInvalid},
		{"DEL", "Idempotency-Key: ab\x7fcd\r\n", wire.ProblemKeyInvalid},
		{"invalid UTF-8", "Idempotency-Key: ab\xff\xfecd\r\n", wire.ProblemKeyInvalid},
		{"truncated UTF-8", "Idempotency-Key: ab\xe2\x82\r\n", wire.ProblemKeyInvalid},
		{"repeated header", "Idempotency-Key: one\r\nIdempotency-Key: two\r\n", wire.ProblemKeyInvalid},
		{"repeated same value", "Idempotency-Key: one\r\nIdempotency-Key: one\r\n", wire.ProblemKeyInvalid},
		{"empty quoted", "Idempotency-Key: \"\"\r\n", wire.ProblemKeyInvalid},
		{"unterminated quote", "Idempotency-Key: \"abc\r\n", wire.ProblemKeyInvalid},
		{"missing", "", wire.ProblemKeyMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := rawRequest(ctx, host, rawPayment(host, tc.lines, validPayment, len(validPayment)), false)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, r.status, "body: %s", r.body)
			if r.header.Get("Content-Type") != "application/problem+json" {
				// net/http itself refused the request line or header
				// before the middleware saw it: a 400 all the same.
				t.Logf("%s: rejected by net/http: %q", tc.name, r.body)
				return
			}
			testkit.RequireProblem(t, r.status, r.header, r.body, http.StatusBadRequest, tc.slug)
			require.NotContains(t, string(r.body), "\xff", "the problem does not echo raw bytes")
		})
	}

	// The longest keys, bare and quoted, and a non-ASCII one, are fine.
	for _, lines := range []string{
		"Idempotency-Key: " + strings.Repeat("k", 255) + "\r\n",
		"Idempotency-Key: \"" + strings.Repeat("q", 255) + "\"\r\n",
		"Idempotency-Key: ключ-🔑\r\n",
	} {
		r, err := rawRequest(ctx, host, rawPayment(host, lines, validPayment, len(validPayment)), false)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, r.status, "%q: %s", lines, r.body)
		again, err := rawRequest(ctx, host, rawPayment(host, lines, validPayment, len(validPayment)), false)
		require.NoError(t, err)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed), "%q is the same key the second time", lines)
	}

	requireStillServing(ctx, t, srv, "after-hostile-keys")
	rows, err := insp.payments(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 4, "only the valid requests made payments")

	// The SDK refuses the same keys before queueing anything.
	c, err := idemkit.Open(ctx, filepath.Join(t.TempDir(), "q.db"), nil)
	require.NoError(t, err)
	defer c.Close()
	for _, key := range []string{strings.Repeat("k", 256), "ab\tcd", "ab\x01cd", "ab\x7fcd", "ab\xff\xfecd", "ab\ncd"} {
		_, err := c.Submit(ctx, paymentRequest(srv.URL(), key, 100))
		require.ErrorIs(t, err, idemkit.ErrInvalidRequest, "key %q", key)
	}
	_, err = c.Submit(ctx, &idemkit.Request{URL: srv.URL() + "/v1/payments", Header: http.Header{"Idempotency-Key": {"one", "two"}}})
	require.ErrorIs(t, err, idemkit.ErrInvalidRequest, "repeated Idempotency-Key header")
	all, err := c.List(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, all, "nothing was queued")
}

// TestHostile_TruncatedResponse: a fake upstream announces a 201 body and
// hangs up halfway through it. The client must not record the cut answer as
// the outcome: it retries with the same key and records the full one.
func TestHostile_TruncatedResponse(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 30*time.Second)
	const full = `{"id":"pay_1","status":"made"}`
	var (
		calls atomic.Int32
		mu    sync.Mutex
		keys  []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if calls.Add(1) == 1 {
			hj, ok := w.(http.Hijacker)
			if !ok {
				http.Error(w, "no hijacker", http.StatusInternalServerError)
				return
			}
			conn, buf, err := hj.Hijack()
			if err != nil {
				return
			}
			fmt.Fprintf(buf, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(full), full[:8])
			_ = buf.Flush()
			_ = conn.Close()
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, full)
	}))
	defer up.Close()
	c, err := idemkit.Open(ctx, filepath.Join(t.TempDir(), "q.db"), &idemkit.Config{Backoff: childBackoff})
	require.NoError(t, err)
	defer c.Close()
	in, err := c.Do(ctx, &idemkit.Request{URL: up.URL + "/x", Body: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, idemkit.StateSucceeded, in.State)
	require.Equal(t, full, string(in.Outcome.Body), "the full answer, not the cut one")
	require.True(t, in.Outcome.Replayed)
	require.EqualValues(t, 2, calls.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{in.Key, in.Key}, keys, "the retry used the same key")
}

// TestHostile_Bodies sends huge, non-JSON and truncated bodies.
func TestHostile_Bodies(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 60*time.Second)
	srv, insp := hostileServer(ctx, t)
	host := strings.TrimPrefix(srv.URL(), "http://")
	url := srv.URL() + "/v1/payments"

	// The subtests run in sequence: the ledger check after them counts
	// what they did.
	t.Run("huge with Content-Length", func(t *testing.T) {
		huge := bytes.Repeat([]byte("x"), 2<<20)
		// Only the headers and the start of the body go out: the server
		// answers from the Content-Length.
		raw := rawPayment(host, "Idempotency-Key: huge-cl\r\n", "", len(huge))
		r, err := rawRequest(ctx, host, append(raw, huge[:1024]...), true)
		require.NoError(t, err)
		testkit.RequireProblem(t, r.status, r.header, r.body, http.StatusRequestEntityTooLarge, wire.ProblemBodyTooLarge)
	})
	t.Run("huge chunked", func(t *testing.T) {
		body := io.MultiReader(strings.NewReader(`{"description":"`), bytes.NewReader(bytes.Repeat([]byte("y"), 2<<20)), strings.NewReader(`"}`))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
		require.NoError(t, err)
		req.ContentLength = -1 // unknown: sent chunked
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "huge-chunked")
		req.Header.Set("Content-Type", "application/json")
		resp, err := noKeepAlive.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		testkit.RequireProblem(t, resp.StatusCode, resp.Header, b, http.StatusRequestEntityTooLarge, wire.ProblemBodyTooLarge)
	})
	t.Run("not JSON", func(t *testing.T) {
		r, err := post(ctx, url, "alice", "not-json", "text/plain", []byte("this is not json\x00\xff"))
		require.NoError(t, err)
		testkit.RequireProblem(t, r.status, r.header, r.body, http.StatusBadRequest, "invalid-payment")
		again, err := post(ctx, url, "alice", "not-json", "text/plain", []byte("this is not json\x00\xff"))
		require.NoError(t, err)
		require.Equal(t, r.status, again.status)
		require.False(t, again.replayed(), "a validation failure is marked not stored: nothing happened")
		require.Equal(t, r.body, again.body)
		// So the corrected request with the same key is processed.
		other, err := post(ctx, url, "alice", "not-json", "application/json", []byte(validPayment))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, other.status, "body: %s", other.body)
	})
	t.Run("truncated", func(t *testing.T) {
		raw := rawPayment(host, "Idempotency-Key: truncated\r\n", validPayment[:10], len(validPayment))
		r, err := rawRequest(ctx, host, raw, true)
		require.NoError(t, err)
		testkit.RequireProblem(t, r.status, r.header, r.body, http.StatusBadRequest, wire.ProblemBodyUnreadable)
		// Nothing was claimed: the full request with the same key runs.
		full, err := post(ctx, url, "alice", "truncated", "application/json", []byte(validPayment))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, full.status, "body: %s", full.body)
		require.False(t, full.replayed())
	})

	requireStillServing(ctx, t, srv, "after-hostile-bodies")
	rows, err := insp.payments(ctx)
	require.NoError(t, err)
	keys := []string{}
	for _, r := range rows {
		keys = append(keys, r.Key)
	}
	require.ElementsMatch(t, []string{"truncated", "not-json", "after-hostile-bodies"}, keys, "only the valid requests made payments")
}

// TestHostile_RetryAfter: a fake upstream answers 503 with a Retry-After of
// a year (in seconds, and as an HTTP-date) or a negative one. The client
// clamps the year to its horizon and ends the intent expired instead of
// sleeping; it ignores the negative value and retries on its backoff.
func TestHostile_RetryAfter(t *testing.T) {
	t.Parallel()

	for _, ra := range []string{"31536000", "Fri, 31 Dec 9999 23:59:59 GMT", "99999999999999999999999"} {
		t.Run("a year/"+ra, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 40*time.Second)
			var calls atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Retry-After", ra)
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer up.Close()
			// A 10s window: the horizon is 9s after the first attempt, the
			// last attempt 0.25s before it; room for a slow first attempt.
			c, err := idemkit.Open(ctx, filepath.Join(t.TempDir(), "q.db"), &idemkit.Config{Window: 10 * time.Second})
			require.NoError(t, err)
			defer c.Close()
			in, err := c.Do(ctx, &idemkit.Request{URL: up.URL + "/x", Body: []byte(`{}`)})
			require.ErrorIs(t, err, idemkit.StateExpired, "the year-long wait ends at the horizon, not at the context deadline")
			require.NotNil(t, in, "Do returns the intent with its error")
			require.Equal(t, idemkit.StateExpired, in.State)
			require.False(t, in.Horizon.After(in.FirstAttemptAt.Add(10*time.Second)), "horizon within the window")
			attempts, err := c.Attempts(ctx, in.ID)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(attempts), 2, "one last attempt before the horizon")
			for _, a := range attempts {
				require.False(t, a.StartedAt.After(in.Horizon), "attempt %d started after the horizon", a.N)
			}
			require.EqualValues(t, len(attempts), calls.Load())
		})
	}

	for _, ra := range []string{"-5", "-1", "1.5", "+3", "soon"} {
		t.Run("rejected/"+ra, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 30*time.Second)
			var calls atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.Header().Set("Retry-After", ra)
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			defer up.Close()
			c, err := idemkit.Open(ctx, filepath.Join(t.TempDir(), "q.db"), &idemkit.Config{Backoff: childBackoff})
			require.NoError(t, err)
			defer c.Close()
			in, err := c.Do(ctx, &idemkit.Request{URL: up.URL + "/x", Body: []byte(`{}`)})
			require.NoError(t, err)
			require.Equal(t, idemkit.StateSucceeded, in.State)
			require.Equal(t, 2, in.Attempts)
			require.EqualValues(t, 2, calls.Load())
		})
	}
}

// TestHostile_QueueFile: queue files that are not SQLite, damaged or
// read-only get a clear error from the SDK and the CLI, are left untouched,
// and lose no intent.
func TestHostile_QueueFile(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 60*time.Second)
	bins := binaries(t)
	dir := t.TempDir()

	// In sequence: each case is a few file operations.
	t.Run("not SQLite", func(t *testing.T) {
		path := filepath.Join(dir, "garbage.queue")
		garbage := bytes.Repeat([]byte("this is not a database\n"), 100)
		require.NoError(t, os.WriteFile(path, garbage, 0o600))
		_, err := idemkit.Open(ctx, path, nil)
		requireQueueError(t, err, (*idemkit.QueueError).Corrupt)

		for _, args := range [][]string{
			{"submit", "--queue", path, "--url", "http://127.0.0.1:1/x"},
			{"ls", "--queue", path},
			{"run", "--queue", path, "--until-done"},
		} {
			var stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, bins.idemkit, args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "idemkit %s", args[0])
			require.Equal(t, 1, ee.ExitCode(), "idemkit %s: %s", args[0], stderr.String())
			require.Contains(t, stderr.String(), "not a SQLite database", "idemkit %s", args[0])
			require.NotContains(t, stderr.String(), "panic")
		}
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, garbage, after, "the file is left untouched")
	})

	t.Run("damaged SQLite", func(t *testing.T) {
		path := filepath.Join(dir, "damaged.queue")
		c, err := idemkit.Open(ctx, path, nil)
		require.NoError(t, err)
		_, err = c.Submit(ctx, &idemkit.Request{URL: "http://127.0.0.1:1/x"})
		require.NoError(t, err)
		require.NoError(t, c.Close())
		for _, suffix := range []string{"-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		// Keep the header, scribble over every page after the first.
		for i := 4096; i < len(b); i++ {
			b[i] = 0xa5
		}
		require.NoError(t, os.WriteFile(path, b, 0o600))
		c, err = idemkit.Open(ctx, path, nil)
		if err == nil {
			_, err = c.List(ctx, nil)
			require.NoError(t, c.Close())
		}
		require.Error(t, err, "a damaged queue is an error, not a panic")
		t.Logf("damaged queue: %v", err)
	})

	t.Run("read-only connection", func(t *testing.T) {
		path := filepath.Join(dir, "ro.queue")
		rw, err := idemkit.Open(ctx, path, nil)
		require.NoError(t, err)
		first, err := rw.Submit(ctx, &idemkit.Request{URL: "http://127.0.0.1:1/x", Key: "kept"})
		require.NoError(t, err)
		require.NoError(t, rw.Close())

		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(1000)")
		require.NoError(t, err)
		defer db.Close()
		ro, err := idemkit.NewClient(ctx, db, nil)
		if err == nil {
			_, err = ro.Submit(ctx, &idemkit.Request{URL: "http://127.0.0.1:1/y", Key: "lost?"})
			require.NoError(t, ro.Close())
		}
		require.Error(t, err, "writing to a read-only queue fails")
		require.NotErrorIs(t, err, idemkit.ErrInvalidRequest)
		t.Logf("read-only queue: %v", err)
		roErr := err

		rw, err = idemkit.Open(ctx, path, nil)
		require.NoError(t, err)
		defer rw.Close()
		in, err := rw.Get(ctx, first.ID)
		require.NoError(t, err, "the intent written before is still there")
		require.Equal(t, idemkit.StatePending, in.State)
		all, err := rw.List(ctx, nil)
		require.NoError(t, err)
		require.Len(t, all, 1, "nothing half-written")

		// A clear error: a sentinel, not the bare driver text ("attempt to
		// write a readonly database (8)") it once was.
		requireQueueError(t, roErr, (*idemkit.QueueError).ReadOnly)
	})

	t.Run("read-only file", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: file permissions do not make a file read-only (the read-only connection case covers the error path)")
		}
		path := filepath.Join(dir, "ro-file.queue")
		rw, err := idemkit.Open(ctx, path, nil)
		require.NoError(t, err)
		_, err = rw.Submit(ctx, &idemkit.Request{URL: "http://127.0.0.1:1/x", Key: "kept"})
		require.NoError(t, err)
		require.NoError(t, rw.Close())
		require.NoError(t, os.Chmod(path, 0o400))
		t.Cleanup(func() { _ = os.Chmod(path, 0o600) })
		c, err := idemkit.Open(ctx, path, nil)
		if err == nil {
			_, err = c.Submit(ctx, &idemkit.Request{URL: "http://127.0.0.1:1/y"})
			_ = c.Close()
		}
		require.Error(t, err)
		require.False(t, errors.Is(err, idemkit.ErrInvalidRequest))
	})
}

// TestHostile_ClientKeys submits, through the SDK, caller-chosen keys that
// the client accepts but that the server's key grammar reads differently:
// a bare comma (refused by the server as a list), surrounding double quotes
// (unquoted by the server as an RFC 8941 sf-string, so `"k"` and `k` are
// one key there but two intents in the queue), a C1 control character
// (refused by the server) and surrounding spaces (trimmed by the server).
// Each must either be refused by Submit with ErrInvalidRequest (nothing
// queued) or reach the server as exactly that key: its payment carries the
// client's key and no two intents share a server record.
func TestHostile_ClientKeys(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 60*time.Second)
	srv, insp := hostileServer(ctx, t)

	// In sequence: one server, one account, small and fast.
	for i, tc := range []struct {
		name string
		keys []string // submitted in order, with different bodies
	}{
		{"bare comma", []string{"a,b"}},
		{"quotes collide with the bare key", []string{"collide", `"collide"`}},
		{"C1 control character", []string{"a\u0085b"}},
		{"surrounding spaces collide with the bare key", []string{"padded", " padded "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := idemkit.Open(ctx, filepath.Join(t.TempDir(), "q.db"), &idemkit.Config{
				Backoff: childBackoff,
				SendHookFunc: func(_ string, r *http.Request) error {
					r.Header.Set("Authorization", "Bearer alice")
					return nil
				},
			})
			require.NoError(t, err)
			defer c.Close()
			for j, key := range tc.keys {
				req := paymentRequest(srv.URL(), key, 1000*(i+1)+j)
				in, err := c.Do(ctx, req)
				if errors.Is(err, idemkit.ErrInvalidRequest) {
					counts, cerr := c.Counts(ctx)
					require.NoError(t, cerr)
					require.Zero(t, counts[idemkit.StatePending]+counts[idemkit.StateFailed], "a refused key queues nothing")
					continue
				}
				require.NoError(t, err, "key %q: the client accepted it, so the server must execute it as that key", key)
				require.Equal(t, idemkit.StateSucceeded, in.State)
				require.False(t, in.Outcome.Replayed, "key %q got the replay of another intent", key)
				n, err := insp.count(ctx, `SELECT count(*) FROM payments WHERE account = ? AND idempotency_key = ?`, "alice", key)
				require.NoError(t, err)
				require.Equal(t, 1, n, "the payment carries the client's key %q exactly", key)
			}
		})
	}
}

// TestHostile_CorruptQueueRow: one intent row of a queue is damaged on disk
// (its stored header is not JSON). The client keeps sending the others,
// never sends the damaged one, keeps its row (no intent is lost: it can be
// repaired), and reports it with a Corrupt QueueError; the CLI lists without
// panicking.
func TestHostile_CorruptQueueRow(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 60*time.Second)
	bins := binaries(t)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()

	path := filepath.Join(t.TempDir(), "q.db")
	c, err := idemkit.Open(ctx, path, nil)
	require.NoError(t, err)
	ids := map[string]string{}
	for _, key := range []string{"good-1", "damaged", "good-2"} {
		in, err := c.Submit(ctx, &idemkit.Request{URL: up.URL + "/x", Key: key, Body: []byte(key)})
		require.NoError(t, err)
		ids[key] = in.ID
	}
	require.NoError(t, c.Close())
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE idemkit_intents SET header = CAST('{not json' AS BLOB) WHERE key = 'damaged'`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	c, err = idemkit.Open(ctx, path, &idemkit.Config{Backoff: childBackoff})
	require.NoError(t, err)
	defer c.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	for _, key := range []string{"good-1", "good-2"} {
		in, err := c.Wait(ctx, ids[key])
		require.NoError(t, err, "the intact intent %s is sent", key)
		require.Equal(t, idemkit.StateSucceeded, in.State)
	}
	stop()
	require.NoError(t, <-done)

	_, err = c.Get(ctx, ids["damaged"])
	requireQueueError(t, err, (*idemkit.QueueError).Corrupt)
	mu.Lock()
	require.Zero(t, seen["damaged"], "the damaged intent is never sent")
	require.Equal(t, 1, seen["good-1"])
	require.Equal(t, 1, seen["good-2"])
	mu.Unlock()
	require.NoError(t, c.Close())

	db, err = sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM idemkit_intents WHERE key = 'damaged' AND state = 'pending'`).Scan(&n))
	require.Equal(t, 1, n, "the damaged row is kept, pending, for repair")

	var stdout, stderr bytes.Buffer
	ls := exec.CommandContext(ctx, bins.idemkit, "ls", "--queue", path, "--json")
	ls.Stdout, ls.Stderr = &stdout, &stderr
	err = ls.Run()
	t.Logf("idemkit ls on a queue with a damaged row: err=%v stdout=%q stderr=%q", err, stdout.String(), stderr.String())
	require.NotContains(t, stderr.String(), "panic")
	if err != nil {
		require.Contains(t, stderr.String(), "corrupt", "a failing ls says why")
	}
}

// requireQueueError asserts that err is, or wraps, an *idemkit.QueueError
// for which is (a method such as (*idemkit.QueueError).Corrupt) reports
// true.
func requireQueueError(t *testing.T, err error, is func(*idemkit.QueueError) bool) {
	t.Helper()
	var qe *idemkit.QueueError
	require.ErrorAs(t, err, &qe)
	require.True(t, is(qe), "%v: not the expected QueueError problem", err)
}
