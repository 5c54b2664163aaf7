package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
)

func TestWriteProblem(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	writeProblem(w, http.StatusConflict, wire.ProblemInFlight, "detail here", 7)
	res := w.Result()
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	require.Equal(t, "7", res.Header.Get("Retry-After"))
	var p map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	require.Equal(t, map[string]any{
		"type":   "https://github.com/idemkit/idemkit/blob/main/docs/problems.md#in-flight",
		"title":  wire.ProblemTitle(wire.ProblemInFlight),
		"status": float64(409),
		"detail": "detail here",
	}, p)
}
