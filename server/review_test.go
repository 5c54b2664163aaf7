package server

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A handler that returns without writing anything because its client went
// away (the usual `case <-r.Context().Done(): return`) produced no outcome.
// Storing it as an empty 200 would replay "success" to the retry although
// the work never happened (and, in transactional mode, commit the claim
// without the effect). The claim must be released or rolled back instead,
// so that the retry runs the handler.
func TestReview_CanceledHandlerThatWroteNothingIsNotStored(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode Mode) {
		b := mwSetup(t, kind, mode, func(c *Config) { c.LeaseDuration = 20 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		firstCtx, cancelFirst := context.WithCancel(ctx)
		firstDone := make(chan error, 1)
		go func() {
			_, err := b.send(firstCtx, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
			firstDone <- err
		}()
		require.Equal(t, "alice", mwRecv(t, b.started))
		cancelFirst()
		require.Error(t, mwRecv(t, firstDone))

		// Wait until the middleware has finished with the first request.
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if evs := b.eventsCopy(); len(evs) > 0 {
				require.Len(t, evs, 1)
				require.NotEqual(t, OutcomeExecuted, evs[0].Outcome, "an empty answer to a gone client must not be stored")
				break
			}
			require.True(t, time.Now().Before(deadline), "the first request never finished")
			<-tick.C
		}

		close(b.release)
		res := b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status, "body %s", res.Body)
		require.Empty(t, res.Header.Get(HeaderReplayed), "the retry must run the handler, not replay an empty 200")
		require.Equal(t, 1, b.count(t, mwCountEffects))
	})
}

// net/http does not sniff a Content-Type for a body with a Content-Encoding
// (issue 31753), nor for a status that has no body; the recorder must not
// add (and store) one either.
func TestReview_RecorderSniffsLikeNetHTTP(t *testing.T) {
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

// A limit of math.MaxInt64 ("no limit") must not overflow into a reader that
// reads nothing: the fingerprint and the handler would both see an empty body.
func TestReview_ReadBodyMaxInt64Limit(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":4000}`))
	r.ContentLength = -1
	body, err := readBody(r, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, `{"amount":4000}`, string(body))
}

// net/http sniffs the Content-Type from the first 512 bytes it buffered, not
// from the first Write: a handler that writes a page in small pieces gets
// text/html, not the type of its first fragment.
func TestReview_RecorderSniffsBufferedBody(t *testing.T) {
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
