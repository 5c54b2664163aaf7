package conform

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Defaults of [Config].
const (
	// ConcurrencyDefault is how many duplicates are sent at once.
	ConcurrencyDefault = 5
	// MaxRequestsDefault is the request budget of one run.
	MaxRequestsDefault = 30
	// RequestTimeoutDefault bounds each request.
	RequestTimeoutDefault = 30 * time.Second
	// MaxWaitDefault is the longest Retry-After the battery waits.
	MaxWaitDefault = 10 * time.Second
)

// maxBodyRead is how much of an answer's body the battery reads.
const maxBodyRead = 1 << 20

// Config is one run of the battery against one endpoint.
type Config struct {
	// Method is the request method. Defaults to POST.
	Method string
	// URL is the endpoint; every request goes to it and nowhere else
	// (redirects are reported, never followed). Required.
	URL string
	// Header is sent with every request of the first caller (credentials,
	// Content-Type). The key header is added per request.
	Header http.Header
	// Body is the request body: a request the API accepts (2xx).
	Body []byte
	// OtherHeader, if set, are the second caller's headers: they replace
	// the same-named headers of Header for the scoping property (without
	// it, scoping cannot be told).
	OtherHeader http.Header
	// ErrorBody, if set, is a body the API refuses; the battery sends it
	// twice with one key to see whether the error was stored.
	ErrorBody []byte
	// Dialect is the API's idempotency dialect, one of DialectNames.
	// Defaults to "idemkit".
	Dialect string
	// IDField is the top-level JSON member of a 2xx body that names the
	// resource made. Defaults to "id"; a body without it is compared whole.
	IDField string
	// Concurrency is how many duplicates are sent at once. Defaults to
	// ConcurrencyDefault (5).
	Concurrency int
	// MaxRequests bounds the requests sent. Defaults to MaxRequestsDefault
	// (30).
	MaxRequests int
	// RequestTimeout bounds each request. Defaults to RequestTimeoutDefault
	// (30s).
	RequestTimeout time.Duration
	// MaxWait is the longest Retry-After the battery waits before a retry.
	// Defaults to MaxWaitDefault (10s).
	MaxWait time.Duration
	// Transport sends the requests. Defaults to a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
	// NewKeyFunc mints the fresh keys. Defaults to random UUIDs.
	NewKeyFunc func() string
}

// withDefaults returns a copy of c with its defaults filled in.
func (c *Config) withDefaults() *Config {
	out := *c
	if out.Method == "" {
		out.Method = http.MethodPost
	}
	if out.Dialect == "" {
		out.Dialect = "idemkit"
	}
	if out.IDField == "" {
		out.IDField = "id"
	}
	if out.Concurrency == 0 {
		out.Concurrency = ConcurrencyDefault
	}
	if out.MaxRequests == 0 {
		out.MaxRequests = MaxRequestsDefault
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = RequestTimeoutDefault
	}
	if out.MaxWait == 0 {
		out.MaxWait = MaxWaitDefault
	}
	if out.Transport == nil {
		out.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if out.NewKeyFunc == nil {
		out.NewKeyFunc = uuid.NewString
	}
	if out.Header == nil {
		out.Header = http.Header{}
	}
	return &out
}

// ErrConfig is matched by every error of an invalid Config.
var ErrConfig = errors.New("conform: invalid config")

func configErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// validate returns an error naming the field that is wrong. Call it on a
// Config with defaults.
func (c *Config) validate() (*url.URL, Dialect, error) {
	d, ok := LookupDialect(c.Dialect)
	if !ok {
		return nil, d, configErrorf("profile %q: want one of %s", c.Dialect, strings.Join(DialectNames, ", "))
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, d, configErrorf("URL %q: want an absolute http:// or https:// URL", c.URL)
	}
	if u.User != nil {
		return nil, d, configErrorf("URL %q: put credentials in a header, not in the URL", c.URL)
	}
	switch {
	case c.Concurrency < 2:
		return nil, d, configErrorf("Concurrency %d: want at least 2", c.Concurrency)
	case c.Concurrency > 64:
		return nil, d, configErrorf("Concurrency %d: at most 64", c.Concurrency)
	case c.MaxRequests < 1:
		return nil, d, configErrorf("MaxRequests %d: want at least 1", c.MaxRequests)
	case c.RequestTimeout < 0 || c.MaxWait < 0:
		return nil, d, configErrorf("RequestTimeout and MaxWait must not be negative")
	}
	for name := range c.Header {
		if strings.EqualFold(name, d.KeyHeader) {
			return nil, d, configErrorf("header %s: the battery sends its own keys; remove it", d.KeyHeader)
		}
	}
	for name := range c.OtherHeader {
		if strings.EqualFold(name, d.KeyHeader) {
			return nil, d, configErrorf("second caller's header %s: the battery sends its own keys; remove it", d.KeyHeader)
		}
	}
	if c.OtherHeader != nil && len(c.OtherHeader) == 0 {
		return nil, d, configErrorf("OtherHeader is empty: give the second caller's credential header")
	}
	return u, d, nil
}
