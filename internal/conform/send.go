package conform

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// errBudget is the error of a request the budget does not allow.
var errBudget = errors.New("the request budget (--max-requests) is spent")

// Caller names in the evidence.
const (
	callerFirst  = "first caller"
	callerSecond = "second caller"
)

// sender sends the battery's requests: only to the configured URL, never
// following a redirect, at most MaxRequests in all.
type sender struct {
	cfg    *Config
	u      *url.URL
	d      Dialect
	client *http.Client

	mu   sync.Mutex
	sent int
}

func newSender(cfg *Config, u *url.URL, d Dialect) *sender {
	return &sender{cfg: cfg, u: u, d: d, client: &http.Client{
		Transport: cfg.Transport,
		// A redirect is the answer: the battery never sends a request to
		// a URL that was not given.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// reserve takes n requests from the budget, all or none.
func (s *sender) reserve(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent+n > s.cfg.MaxRequests {
		return false
	}
	s.sent += n
	return true
}

// left is how many requests the budget still allows.
func (s *sender) left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.MaxRequests - s.sent
}

// header returns the first caller's headers, or the second caller's (the
// first caller's with OtherHeader's replacing the same names).
func (s *sender) header(caller string) http.Header {
	h := s.cfg.Header.Clone()
	if caller == callerSecond {
		for name, vs := range s.cfg.OtherHeader {
			h.Del(name)
			for _, v := range vs {
				h.Add(name, v)
			}
		}
	}
	return h
}

// send sends one request with key k (taken from the budget unless
// reserved is true).
func (s *sender) send(ctx context.Context, step, caller, k string, body []byte, reserved bool) Exchange {
	ex := Exchange{Step: step, Method: s.cfg.Method, URL: s.u.String(), Key: k, Caller: caller, ReqBody: printable(body)}
	if !reserved && !s.reserve(1) {
		ex.Err = errBudget.Error()
		return ex
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, s.cfg.Method, s.u.String(), bytes.NewReader(body))
	if err != nil {
		ex.Err = err.Error()
		return ex
	}
	req.Header = s.header(caller)
	req.Header.Set(s.d.KeyHeader, s.d.KeyValue(k))
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		ex.Took = time.Since(start)
		ex.Err = err.Error()
		return ex
	}
	defer resp.Body.Close()
	ex.Response = readResponse(resp)
	ex.Took = time.Since(start)
	return ex
}

// sendRaw sends one request whose key field lines are written as given,
// byte for byte (net/http refuses to send control characters), on a
// connection of its own to the configured host.
func (s *sender) sendRaw(ctx context.Context, step, shown string, keyLines []string, body []byte) Exchange {
	ex := Exchange{Step: step, Method: s.cfg.Method, URL: s.u.String(), Key: shown, Caller: callerFirst, ReqBody: printable(body)}
	if !s.reserve(1) {
		ex.Err = errBudget.Error()
		return ex
	}
	start := time.Now()
	resp, err := s.roundTripRaw(ctx, keyLines, body)
	ex.Took = time.Since(start)
	if err != nil {
		ex.Err = err.Error()
		return ex
	}
	ex.Response = resp
	return ex
}

func (s *sender) roundTripRaw(ctx context.Context, keyLines []string, body []byte) (*Response, error) {
	host := s.u.Host
	if s.u.Port() == "" {
		port := "80"
		if s.u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(s.u.Hostname(), port)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if s.u.Scheme == "https" {
		tc := &tls.Config{ServerName: s.u.Hostname()}
		if t, ok := s.cfg.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
			tc = t.TLSClientConfig.Clone()
			if tc.ServerName == "" {
				tc.ServerName = s.u.Hostname()
			}
		}
		tc.NextProtos = []string{"http/1.1"}
		tlsConn := tls.Client(conn, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		conn = tlsConn
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", s.cfg.Method, s.u.RequestURI(), s.u.Host)
	for name, vs := range s.header(callerFirst) {
		switch strings.ToLower(name) {
		case "host", "content-length", "connection", "transfer-encoding":
			continue
		}
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	for _, l := range keyLines {
		fmt.Fprintf(&b, "%s: %s\r\n", s.d.KeyHeader, l)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	b.Write(body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: s.cfg.Method})
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	defer resp.Body.Close()
	return readResponse(resp), nil
}

// readResponse reads at most maxBodyRead bytes of resp's body.
func readResponse(resp *http.Response) *Response {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyRead+1))
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
	if len(body) > maxBodyRead {
		r.Body, r.Truncated = string(body[:maxBodyRead]), true
	}
	return r
}

// printable is b as a string for the evidence.
func printable(b []byte) string {
	const max = 4096
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
