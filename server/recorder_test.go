package server

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
)

func TestRecorder_BuffersUntilSent(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	rec := newRecorder(w, 1<<20)
	rec.Header().Set("X-A", "1")
	rec.WriteHeader(http.StatusAccepted)
	rec.Header().Set("X-Late", "ignored") // after WriteHeader, as in net/http
	_, _ = io.WriteString(rec, "<html>hello")
	rec.WriteHeader(http.StatusTeapot) // superfluous, ignored
	require.NoError(t, http.NewResponseController(rec).Flush(), "Flush is a no-op while buffered")
	require.False(t, w.Flushed)
	require.Zero(t, w.Body.Len(), "nothing reaches the client before send")

	status, h := rec.result()
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, "1", h.Get("X-A"))
	require.Empty(t, h.Get("X-Late"))
	require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"), "sniffed like net/http, so it is stored")

	rec.send(http.Header{wire.HeaderReplayed: {"true"}})
	require.Equal(t, http.StatusAccepted, w.Code)
	require.Equal(t, "<html>hello", w.Body.String())
	require.Equal(t, "11", w.Header().Get("Content-Length"))
	require.Equal(t, "true", w.Header().Get(wire.HeaderReplayed))
}

func TestRecorder_NoWriteIs200(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	rec := newRecorder(w, 10)
	rec.WriteHeader(http.StatusContinue) // 1xx are dropped
	status, _ := rec.result()
	require.Equal(t, http.StatusOK, status)
	rec.send(nil)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "0", w.Header().Get("Content-Length"))
}

func TestRecorder_OverflowStreams(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	rec := newRecorder(w, 4)
	calls := 0
	write := func(s string) {
		if _, overflow, _ := rec.write([]byte(s)); overflow {
			calls++
			rec.stream()
		}
	}
	write("abc")
	require.Zero(t, w.Body.Len())
	write("def")
	require.Equal(t, 1, calls)
	require.True(t, rec.streaming)
	require.Equal(t, "abcdef", w.Body.String(), "the buffer is sent once the cap is passed")
	write("ghi")
	require.Equal(t, 1, calls, "overflow is reported once")
	require.NoError(t, http.NewResponseController(rec).Flush())
	require.True(t, w.Flushed, "Flush reaches the client once streaming")
	require.Equal(t, "abcdefghi", w.Body.String())
	require.Empty(t, w.Header().Get("Content-Length"))
	rec.send(nil) // no-op once streaming
	require.Equal(t, "abcdefghi", w.Body.String())
}

func TestRecorder_OverflowKeepsBuffering(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	rec := newRecorder(w, 4)
	_, overflow, _ := rec.write([]byte(strings.Repeat("x", 10)))
	require.True(t, overflow, "the write past the cap reports it")
	_, overflow, _ = rec.write([]byte("y"))
	require.False(t, overflow, "once")
	require.True(t, rec.overflowed)
	require.False(t, rec.streaming)
	require.Zero(t, w.Body.Len())
	rec.send(nil)
	require.Equal(t, 11, w.Body.Len())
}

func TestRecorder_ResponseController(t *testing.T) {
	t.Parallel()
	// Against a real server connection: deadlines reach it through Unwrap,
	// Hijack is refused.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := newRecorder(w, 100)
		rc := http.NewResponseController(rec)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			http.Error(w, "deadline: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if _, _, err := rc.Hijack(); !errors.Is(err, http.ErrNotSupported) {
			http.Error(w, "hijack allowed", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(rec, "ok")
		rec.send(nil)
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body %s", body)
	require.Equal(t, "ok", string(body))
}

// net/http does not sniff a Content-Type for a body with a Content-Encoding
// (issue 31753), nor for a status that has no body; the recorder must not
// add (and store) one either.
func TestRecorder_SniffsLikeNetHTTP(t *testing.T) {
	t.Parallel()
	t.Run("content-encoding", func(t *testing.T) {
		t.Parallel()
		w := httptest.NewRecorder()
		rec := newRecorder(w, 1<<20)
		rec.Header().Set("Content-Encoding", "gzip")
		_, _ = rec.Write([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"))
		_, h := rec.result()
		_, ok := h["Content-Type"]
		require.False(t, ok, "Content-Type %q sniffed for an encoded body", h.Get("Content-Type"))
	})
	t.Run("no-content", func(t *testing.T) {
		t.Parallel()
		w := httptest.NewRecorder()
		rec := newRecorder(w, 1<<20)
		rec.WriteHeader(http.StatusNoContent)
		_, _ = io.WriteString(rec, "<html>")
		_, h := rec.result()
		_, ok := h["Content-Type"]
		require.False(t, ok, "Content-Type %q sniffed for a 204", h.Get("Content-Type"))
	})
}

// net/http sniffs the Content-Type from the first 512 bytes it buffered, not
// from the first Write: a handler that writes a page in small pieces gets
// text/html, not the type of its first fragment.
func TestRecorder_SniffsBufferedBody(t *testing.T) {
	t.Parallel()
	page := []string{"\n", "<html>", "<body>hi</body></html>"}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, p := range page {
			_, _ = io.WriteString(w, p)
		}
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	res, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	_ = res.Body.Close()
	want := res.Header.Get("Content-Type")
	require.Equal(t, "text/html; charset=utf-8", want, "what net/http itself sends")

	rec := newRecorder(httptest.NewRecorder(), 1<<20)
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	_, h := rec.result()
	require.Equal(t, want, h.Get("Content-Type"))
}
