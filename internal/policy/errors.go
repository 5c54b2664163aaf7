package policy

import (
	"errors"
	"fmt"
)

// ErrInvalidRequest means a request or key was refused before anything
// was queued or sent. The root package re-exports it as
// idemkit.ErrInvalidRequest.
var ErrInvalidRequest = errors.New("idemkit: invalid request")

// Invalidf returns an error matching ErrInvalidRequest, saying why.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}
