package server

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A limit of math.MaxInt64 ("no limit") must not overflow into a reader that
// reads nothing: the fingerprint and the handler would both see an empty body.
func TestReadBody_MaxInt64IsNoLimit(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":4000}`))
	r.ContentLength = -1
	body, err := readBody(r, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, `{"amount":4000}`, string(body))
}
