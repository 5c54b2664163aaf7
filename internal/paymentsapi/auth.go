package paymentsapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// maxAccountBytes bounds the account name a bearer token may carry.
const maxAccountBytes = 64

// errNoAccount is wrapped by every error bearerAccount returns.
var errNoAccount = errors.New("no account")

// bearerAccount is the demo's server.PrincipalFunc: the bearer token names
// the account ("Authorization: Bearer alice" is account alice). It checks
// nothing. A real deployment plugs in its own function that verifies the
// credential (a session, a signed token, an API key) and returns the
// identity it proves; keys are scoped to what this function returns.
func bearerAccount(r *http.Request) (string, error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return "", fmt.Errorf("%w: the Authorization header is missing; send Authorization: Bearer <account>", errNoAccount)
	}
	if len(h) > 1 {
		return "", fmt.Errorf("%w: more than one Authorization header", errNoAccount)
	}
	scheme, token, ok := strings.Cut(h[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: the Authorization header must be Bearer <account>", errNoAccount)
	}
	token = strings.TrimSpace(token)
	if token == "" || len(token) > maxAccountBytes {
		return "", fmt.Errorf("%w: the account must be 1 to %d bytes", errNoAccount, maxAccountBytes)
	}
	for _, c := range []byte(token) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("%w: the account may hold only letters, digits, '-', '_' and '.'", errNoAccount)
		}
	}
	return token, nil
}
