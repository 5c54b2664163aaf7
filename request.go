package idemkit

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/queue"
	"github.com/idemkit/idemkit/internal/wire"
)

// Request preparation: what a Request must be to be queued (method, URL,
// headers, key, body), what of it is stored and what is kept in memory
// (credentials.go), and its fingerprint.

// fingerprintVersion prefixes every client fingerprint.
const fingerprintVersion = "idemkit-client-fp-v1"

func fingerprint(method, rawURL string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%d\n", fingerprintVersion, method, rawURL, len(body))
	h.Write(body)
	return h.Sum(nil)
}

// prepared is a validated Request split into what is stored and what is
// only kept in memory.
type prepared struct {
	method, url, host string
	key               string
	header            http.Header // stored
	creds             http.Header // memory only
	body              []byte
	fp                []byte
}

// credNames are the names of the credential headers, sorted.
func (p *prepared) credNames() []string {
	if len(p.creds) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(p.creds))
}

// queued is p as the queue stores it, with id, queued at now.
func (p *prepared) queued(id string, now time.Time) *queue.NewIntent {
	return &queue.NewIntent{ID: id, Key: p.key, Method: p.method, URL: p.url, Host: p.host, Header: p.header,
		Body: p.body, Fingerprint: p.fp, CredentialHeaders: p.credNames(), Now: now}
}

// prepare validates req for the host's profile prof and separates the
// credential headers.
func prepare(req *Request, cfg *Config, prof *Profile) (*prepared, error) {
	if req == nil {
		return nil, invalidf("nil Request")
	}
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	if !wire.ValidToken(method) {
		return nil, invalidf("method %q is not a valid HTTP token", method)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, invalidf("URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalidf("URL %q: scheme must be http or https", redact(req.URL))
	}
	if u.Host == "" {
		return nil, invalidf("URL %q: no host", redact(req.URL))
	}
	if u.User != nil {
		return nil, invalidf("URL: user:password@ would be stored in the queue; send credentials with Config.SendHookFunc")
	}
	if err := cfg.checkQuery(u); err != nil {
		return nil, err
	}
	if len(req.Body) > maxBodySize {
		return nil, invalidf("body is %d bytes, more than the limit (%d)", len(req.Body), maxBodySize)
	}
	p := &prepared{
		method: method,
		url:    u.String(),
		host:   strings.ToLower(u.Scheme + "://" + u.Host),
		header: http.Header{},
		creds:  http.Header{},
		body:   req.Body,
		key:    req.Key,
	}
	if p.body == nil {
		p.body = []byte{}
	}
	for name, values := range req.Header {
		if !wire.ValidToken(name) {
			return nil, invalidf("header name %q is not a valid HTTP token", name)
		}
		// The stored codec refuses what no HTTP client may send.
		if _, err := wire.DecodeHeader(wire.EncodeHeader(http.Header{name: values})); err != nil {
			return nil, invalidf("header %s: value contains a control character (CR, LF, NUL, …), which no HTTP client may send", name)
		}
		cn := http.CanonicalHeaderKey(name)
		switch {
		case cn == http.CanonicalHeaderKey(prof.KeyHeader):
			if len(values) != 1 {
				return nil, invalidf("%s header given %d times", cn, len(values))
			}
			if p.key == "" {
				p.key = values[0]
			} else if p.key != values[0] {
				return nil, invalidf("Request.Key and the %s header differ", cn)
			}
		case cfg.memoryOnly(cn):
			p.creds[cn] = append([]string(nil), values...)
		default:
			p.header[cn] = append([]string(nil), values...)
		}
	}
	if p.key != "" {
		if err := policy.CheckKey(prof, p.key, prof.KeyQuoted); err != nil {
			return nil, err
		}
	}
	p.fp = fingerprint(p.method, p.url, p.body)
	return p, nil
}

// redact removes user info and the query from a URL for logs and errors.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	return u.String()
}

// newIntent validates req for the queue and mints the intent's id, which is
// also its key unless the caller supplied one. The key is minted here, once,
// and never again for this intent.
//
// The id is a UUIDv7 (RFC 9562: a millisecond timestamp, then 74 random
// bits): time-ordered, so each new row appends to the right edge of the id
// and key indexes instead of dirtying a random leaf page of each. With
// random (UUIDv4) ids and keys a batch of 30 intents wrote ~60 scattered
// 4 KiB pages to the WAL, and checkpointed them again; BenchmarkSubmit at
// 32 callers spent ~35 µs more per intent with a random key alone. A minted
// key therefore stays the id: all it tells the server beyond a random key is
// the millisecond the intent was queued, which the first attempt, sent at
// once, tells it anyway. The short id the CLI shows is the last 8 hex
// characters, random in UUIDv7 as in the UUIDv4 ids of older queues, which
// stay valid (see cmd/idemkit).
func (c *Client) newIntent(req *Request) (*prepared, string, error) {
	if c.closed() {
		return nil, "", ErrClosed
	}
	var prof *Profile
	if req != nil {
		prof = c.cfg.profileFor(req.URL)
	}
	p, err := prepare(req, c.cfg, prof)
	if err != nil {
		return nil, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, "", err
	}
	if p.key == "" {
		p.key = id.String()
	}
	return p, id.String(), nil
}
