package sqlstore

import "fmt"

// storeError wraps a sentinel (server.ErrStoreBusy, server.ErrInFlight, ...)
// around the driver error that caused it, so that errors.Is finds both the
// sentinel and the cause, and the message shows both.
type storeError struct {
	sentinel error
	detail   string
	cause    error
}

func (e *storeError) Error() string {
	if e.detail != "" {
		return fmt.Sprintf("%v: %s: %v", e.sentinel, e.detail, e.cause)
	}
	return fmt.Sprintf("%v: %v", e.sentinel, e.cause)
}

func (e *storeError) Unwrap() []error { return []error{e.sentinel, e.cause} }

// WrapError returns an error that matches both sentinel and cause, with
// detail (which may be empty) between them in its message. Dialects build
// their error translation from it.
func WrapError(sentinel error, detail string, cause error) error {
	return &storeError{sentinel: sentinel, detail: detail, cause: cause}
}
