package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteProblem(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	writeProblem(w, http.StatusConflict, ProblemInFlight, "detail here", 7)
	res := w.Result()
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	require.Equal(t, "7", res.Header.Get("Retry-After"))
	var p map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	require.Equal(t, map[string]any{
		"type":   "https://github.com/idemkit/idemkit/blob/main/docs/problems.md#in-flight",
		"title":  problemTitles[ProblemInFlight],
		"status": float64(409),
		"detail": "detail here",
	}, p)
}

// Every problem type URI must resolve to a section of docs/problems.md.
func TestProblemTypes_Documented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "problems.md"))
	require.NoError(t, err)
	for slug, title := range problemTitles {
		require.NotEmpty(t, title)
		require.Contains(t, string(doc), "\n## "+slug+"\n", "docs/problems.md needs a section for %s", slug)
		require.Regexp(t, `^[a-z]+(-[a-z]+)*$`, slug, "a slug must be its own GitHub anchor")
	}
}
