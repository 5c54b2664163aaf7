package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a running fault-injecting reverse proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	cfg          *Config
	upstream     *url.URL
	ln           net.Listener
	srv          *http.Server
	transport    http.RoundTripper
	ownTransport *http.Transport
	baseCtx      context.Context
	cancel       context.CancelFunc
	serveDone    chan struct{}
	seq          atomic.Uint64

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	attempts map[string]int
	records  []Record
	counts   map[Action]int

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, listens on 127.0.0.1 on a free port and serves until
// Close. Errors for a bad cfg wrap ErrInvalidConfig.
func Start(cfg Config) (*Proxy, error) {
	c := cfg.WithDefaults()
	up, err := c.validate()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		cfg:       c,
		upstream:  up,
		ln:        ln,
		transport: c.Transport,
		serveDone: make(chan struct{}),
		attempts:  make(map[string]int),
		counts:    make(map[Action]int),
	}
	if p.transport == nil {
		p.ownTransport = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true, // relay the client's Accept-Encoding and the upstream's bytes as they are
		}
		p.transport = p.ownTransport
	}
	p.baseCtx, p.cancel = context.WithCancel(context.Background())
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return p.baseCtx },
	}
	if c.Logger != nil {
		p.srv.ErrorLog = slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn)
	}
	go func() {
		defer close(p.serveDone)
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

// URL returns the proxy's base URL, e.g. "http://127.0.0.1:41234".
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Log returns a copy of the records of every request so far, ordered by
// Seq. A request still in progress has the fields known so far: its Action
// (empty only for the instant before it is decided), the upstream status
// before the client sees any byte of the response, Chunks before the first
// chunk is written. Err may be filled in after the client got its answer.
func (p *Proxy) Log() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.records)
}

// Counts returns how many requests got each action so far (counted when
// the action is decided). Every Action
// is present, with 0 for those that never fired.
func (p *Proxy) Counts() map[Action]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Action]int, len(Actions))
	for _, a := range Actions {
		out[a] = p.counts[a]
	}
	return out
}

// Close stops the proxy: it closes the listener and every client
// connection, cancels requests in flight upstream and in delays, waits for
// every handler to return and closes the idle upstream connections of the
// transport it owns. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		err := p.srv.Close() // first the connections, so no handler answers after this...
		p.cancel()           // ...then whatever is still waiting upstream or in a delay
		<-p.serveDone
		p.inflight.Wait()
		if p.ownTransport != nil {
			p.ownTransport.CloseIdleConnections()
		}
		p.closeErr = err
	})
	return p.closeErr
}

// ServeHTTP implements http.Handler: it decides, acts and records.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := unquoteKey(r.Header.Get("Idempotency-Key"))
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = hangUp(w, true)
		return
	}
	p.inflight.Add(1)
	defer p.inflight.Done()
	ident := "req\x00" + r.Method + " " + r.URL.Path
	if key != "" {
		ident = "key\x00" + key
	}
	p.attempts[ident]++
	info := RequestInfo{
		Seq:     p.seq.Add(1), // under mu, so Seq, Attempt and the records index agree
		Method:  r.Method,
		Path:    r.URL.Path,
		Key:     key,
		Attempt: p.attempts[ident],
	}
	p.records = append(p.records, Record{Seq: info.Seq, Method: info.Method, Path: info.Path, Key: info.Key, Attempt: info.Attempt})
	p.mu.Unlock()

	d := decide(p.cfg.Seed, p.cfg.Mode, p.cfg.Rates, p.cfg.MaxDelay, info)
	rec := Record{
		Seq:     info.Seq,
		Method:  info.Method,
		Path:    info.Path,
		Key:     info.Key,
		Attempt: info.Attempt,
		Action:  d.action,
	}
	if p.cfg.DecideFunc != nil {
		rec.Action = p.cfg.DecideFunc(info)
		if !rec.Action.valid() {
			rec.Err = fmt.Sprintf("DecideFunc returned unknown action %q; passed through", rec.Action)
			rec.Action = ActionPass
		}
	}
	if rec.Action == ActionDelay {
		rec.Delay = d.delay
	}
	p.mu.Lock()
	p.counts[rec.Action]++
	p.mu.Unlock()
	p.save(&rec)

	switch rec.Action {
	case ActionPass:
		p.pass(w, r, &rec)
	case ActionDropResponse:
		p.dropResponse(w, r, &rec)
	case ActionReset:
		setErr(&rec, hangUp(w, true))
	case ActionUnavailable:
		p.unavailable(w)
	case ActionDelay:
		p.delay(w, r, &rec)
	case ActionSlowWrite:
		p.slowWrite(w, r, &rec)
	}
	p.save(&rec)
	p.logRecord(r.Context(), rec)
}

// save publishes rec in the log. Handlers call it before every step the
// client can observe, so that a client that got its answer (or its error)
// finds every field that shaped it in Log.
func (p *Proxy) save(rec *Record) {
	p.mu.Lock()
	p.records[rec.Seq-1] = *rec
	p.mu.Unlock()
}

func (p *Proxy) logRecord(ctx context.Context, rec Record) {
	if p.cfg.Logger != nil {
		p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "faultproxy",
			slog.Uint64("seq", rec.Seq),
			slog.String("method", rec.Method),
			slog.String("path", rec.Path),
			slog.String("key", rec.Key),
			slog.Int("attempt", rec.Attempt),
			slog.String("action", string(rec.Action)),
			slog.Duration("delay", rec.Delay),
			slog.Int("chunks", rec.Chunks),
			slog.Int("upstream_status", rec.UpstreamStatus),
			slog.String("err", rec.Err),
		)
	}
}

// pass forwards r and relays the response in one piece.
func (p *Proxy) pass(w http.ResponseWriter, r *http.Request, rec *Record) {
	resp, err := p.forward(r)
	if err != nil {
		setErr(rec, err)
		p.save(rec)
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rec.UpstreamStatus = resp.StatusCode
	p.save(rec)
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		setErr(rec, fmt.Errorf("relay: %w", err))
	}
}

// dropResponse forwards r, reads the whole response and hangs up on the
// client without writing a byte.
func (p *Proxy) dropResponse(w http.ResponseWriter, r *http.Request, rec *Record) {
	resp, err := p.forward(r)
	if err != nil {
		setErr(rec, err)
	} else {
		rec.UpstreamStatus = resp.StatusCode
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			setErr(rec, fmt.Errorf("read upstream body: %w", err))
		}
		resp.Body.Close()
	}
	p.save(rec)
	if err := hangUp(w, false); err != nil {
		setErr(rec, err)
	}
}

// unavailable answers 503 with Retry-After.
func (p *Proxy) unavailable(w http.ResponseWriter) {
	secs := int64((p.cfg.RetryAfter + time.Second - 1) / time.Second)
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"faultproxy: injected 503"}`)
}

// delay waits rec.Delay (or until the client or the proxy goes away), then
// passes r through.
func (p *Proxy) delay(w http.ResponseWriter, r *http.Request, rec *Record) {
	t := time.NewTimer(rec.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		p.pass(w, r, rec)
	case <-r.Context().Done():
		setErr(rec, fmt.Errorf("during delay: %w", r.Context().Err()))
	}
}

// slowWrite forwards r, reads the whole response body, then relays it in
// ChunkSize pieces, flushing each and pausing ChunkPause between them.
func (p *Proxy) slowWrite(w http.ResponseWriter, r *http.Request, rec *Record) {
	resp, err := p.forward(r)
	if err != nil {
		setErr(rec, err)
		p.save(rec)
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	rec.UpstreamStatus = resp.StatusCode
	if err != nil {
		setErr(rec, fmt.Errorf("read upstream body: %w", err))
		p.save(rec)
		_ = hangUp(w, false) // a truncated body must not be relayed as a whole one
		return
	}
	rec.Chunks = (len(body) + p.cfg.ChunkSize - 1) / p.cfg.ChunkSize
	p.save(rec)

	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush() // the status line and headers go out on their own
	pause := time.NewTimer(p.cfg.ChunkPause)
	defer pause.Stop()
	for i := 0; len(body) > 0; i++ {
		if i > 0 {
			pause.Reset(p.cfg.ChunkPause)
			select {
			case <-pause.C:
			case <-r.Context().Done():
				setErr(rec, fmt.Errorf("slow write: %w", r.Context().Err()))
				return
			}
		}
		n := min(p.cfg.ChunkSize, len(body))
		if _, err := w.Write(body[:n]); err != nil {
			setErr(rec, fmt.Errorf("slow write: %w", err))
			return
		}
		if err := rc.Flush(); err != nil {
			setErr(rec, fmt.Errorf("slow write: flush: %w", err))
			return
		}
		body = body[n:]
	}
}

// forward sends r to the upstream. The request's context (cancelled when
// the client goes away or the proxy closes) bounds the round trip.
func (p *Proxy) forward(r *http.Request) (*http.Response, error) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	u := *p.upstream
	base := strings.TrimSuffix(p.upstream.Path, "/")
	u.Path = base + r.URL.Path
	if r.URL.RawPath != "" {
		u.RawPath = strings.TrimSuffix(p.upstream.EscapedPath(), "/") + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	out.URL = &u
	out.Host = p.upstream.Host
	out.Header = r.Header.Clone()
	removeHopHeaders(out.Header)
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return resp, nil
}

// hangUp takes the connection over from net/http and closes it without a
// response; with reset it sets SO_LINGER to 0 first, so the peer gets a TCP
// RST instead of a FIN.
func hangUp(w http.ResponseWriter, reset bool) error {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("hijack: %w", err)
	}
	if reset {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	if err := conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close client connection: %w", err)
	}
	return nil
}

// hopHeaders are the hop-by-hop headers of RFC 9110 section 7.6.1, which a
// proxy does not forward.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = slices.Clone(vv)
	}
	removeHopHeaders(dst)
}

func setErr(rec *Record, err error) {
	if err == nil {
		return
	}
	if rec.Err != "" {
		rec.Err += "; "
	}
	rec.Err += err.Error()
}

// unquoteKey turns an RFC 8941 quoted-string key ("abc") into its bare form,
// so that both spellings of one key count as the same key. Anything else is
// returned unchanged.
func unquoteKey(k string) string {
	if len(k) < 2 || k[0] != '"' || k[len(k)-1] != '"' {
		return k
	}
	var b strings.Builder
	in := k[1 : len(k)-1]
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c == '\\' {
			if i+1 >= len(in) || (in[i+1] != '"' && in[i+1] != '\\') {
				return k
			}
			i++
			c = in[i]
		} else if c == '"' {
			return k
		}
		b.WriteByte(c)
	}
	return b.String()
}
