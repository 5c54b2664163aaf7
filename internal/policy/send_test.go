package policy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSend: the answer's body is read up to MaxBodySize+1 bytes and can be
// read again from the response; an answer cut off mid-body is no answer.
func TestSend(t *testing.T) {
	t.Parallel()
	answer := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id": 1}`))
		case "/large":
			_, _ = w.Write(bytes.Repeat([]byte("x"), MaxBodySize+100))
		case "/cut":
			w.Header().Set("Content-Length", strconv.Itoa(1000))
			_, _ = w.Write([]byte("only part"))
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(answer))
	t.Cleanup(srv.Close)
	send := func(path string) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, nil)
		require.NoError(t, err)
		return Send(srv.Client(), req)
	}

	resp, body, err := send("/small")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, `{"id": 1}`, string(body))
	again, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, body, again, "the body reads again")

	_, body, err = send("/large")
	require.NoError(t, err)
	require.Len(t, body, MaxBodySize+1, "one byte more than is kept, to tell a longer body apart")

	resp, body, err = send("/cut")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Nil(t, resp)
	require.Nil(t, body)

	srv.Close()
	resp, _, err = send("/small")
	require.Error(t, err, "no server: a transport error")
	require.Nil(t, resp)
}
