package idemkit

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	_ "modernc.org/sqlite" // the driver behind Open; NewClient takes any *sql.DB
)

// Defaults of [Config], as its field docs state them.
const (
	windowDefault         = 24 * time.Hour // Stripe's
	safetyMarginDefault   = time.Minute
	maxSleepDefault       = 30 * time.Second
	leaseDurationDefault  = 2 * time.Minute
	attemptTimeoutDefault = 30 * time.Second
	concurrencyDefault    = 4
)

// maxAttemptsPerHourDefault is the default Config.MaxAttemptsPerHour: one
// attempt every 30 s on average, the backoff cap.
const maxAttemptsPerHourDefault = 120

const (
	// busyTimeout is how long Open's Client waits for the write lock held
	// by another process before a Locked QueueError.
	busyTimeout = 5 * time.Second
	// sqliteBusyTimeout is the busy_timeout Open sets on its connections:
	// short, writes retry in Go (see queue.busyRetry).
	sqliteBusyTimeout = 50 * time.Millisecond
	// pollIntervalDefault bounds how long Run and Wait sleep before looking
	// at the queue again (other processes may have changed it).
	pollIntervalDefault = time.Second
	// submitBatchMax is the most intents one group commit inserts.
	submitBatchMax = 256
	// gatherWait bounds how long the group committer waits for the callers
	// of its previous batch to come back (see commitLoop).
	gatherWait = time.Millisecond
)

// Config configures a [Client]. The zero value is valid: every field has a
// default.
type Config struct {
	// HTTPClient sends the attempts. It is copied with Timeout set to
	// AttemptTimeout (or kept if shorter) and, unless it sets
	// CheckRedirect, redirects not followed (a 3xx is a definitive answer:
	// following a 302 would turn a POST into a GET). Defaults to a client
	// on a pooled transport of its own that Close releases.
	HTTPClient *http.Client

	// Window is the longest retention window the client relies on, for
	// hosts whose Profile publishes none (Profile.Window replaces it for
	// the others: Stripe's 24 h, Adyen's 31 days). The effective window of
	// an intent is the smaller of that and the Idempotency-Window its host
	// last advertised (remembered in the queue). Defaults to 24h (Stripe's
	// window).
	Window time.Duration

	// SafetyMargin is subtracted from the effective window to get the
	// horizon; the margin used is the smaller of SafetyMargin and a tenth of
	// the effective window (a 30 s window keeps a 3 s margin). It should
	// exceed AttemptTimeout plus clock skew. Defaults to 1m.
	SafetyMargin time.Duration

	// CredentialHeaders are request headers never written to the queue:
	// names, or "*-Suffix" patterns matching every header that ends so. A
	// process keeps those given to Submit or Do in memory; one that resumes
	// the intent later gets them from SendHookFunc. They are also never
	// stored from a response. Defaults to Authorization,
	// Proxy-Authorization, Cookie, X-Api-Key, Api-Key, X-Auth-Token,
	// X-Amz-Security-Token, *-Token, *-Secret, *-Api-Key, *-Password,
	// *-Credential, *-Credentials and *-Session.
	CredentialHeaders []string

	// StoredHeaders, when not nil, switches to allowlist mode: only these
	// request headers (names or "*-Suffix" patterns) are written to the
	// queue, and every other one is treated as a credential. Defaults to
	// nil (the CredentialHeaders denylist).
	StoredHeaders []string

	// AllowURLCredentials accepts URLs whose query carries a parameter
	// that looks like a credential (api_key, key, token, access_token,
	// secret, client_secret, password, signature, …), which would be
	// written to the queue with the URL. Defaults to false: such a Request
	// is refused with ErrInvalidRequest.
	AllowURLCredentials bool

	// OutcomeHeaders are the response headers stored with an Outcome (names
	// or "*-Suffix" patterns), besides the host profile's replay markers
	// and key header; Set-Cookie and CredentialHeaders never are. Defaults
	// to Content-Type, Content-Language, Location, Date, ETag,
	// Last-Modified, Retry-After, Idempotency-Window, Request-Id and
	// X-Request-Id.
	OutcomeHeaders []string

	// OmitOutcomeBody keeps response bodies and headers out of the queue:
	// an Outcome is stored with its status and replay marker only, for
	// callers who must not hold receipts on disk. Do still returns the
	// body (from memory) to its caller; Get, Wait and List do not.
	// Defaults to false.
	OmitOutcomeBody bool

	// Profile is the idempotency dialect of hosts not in Profiles (see
	// [KnownProfile]). Defaults to KnownProfile("idemkit").
	Profile *Profile

	// Profiles maps a host, as in the request URL ("api.stripe.com", or
	// "host:port" to tell ports apart), to the dialect it speaks:
	//
	//	stripe, _ := idemkit.KnownProfile("stripe")
	//	cfg.Profiles = map[string]idemkit.Profile{"api.stripe.com": stripe}
	//
	// A host:port entry wins over the host's own. Defaults to none.
	Profiles map[string]Profile

	// MaxAttemptsPerHour bounds the attempts of one intent in any hour,
	// whatever the server says (a Retry-After of 0, over and over): once
	// reached, the next attempt waits until the oldest of them is an hour
	// old. Defaults to 120 (one every 30 s on average, the backoff cap).
	MaxAttemptsPerHour int

	// MaxAttempts, if positive, bounds the attempts this Client starts
	// for one intent (counted in memory since Open or NewClient): once an
	// intent reached it without a definitive answer, it stays pending with
	// its next attempt time, Run and Drain no longer claim it, and Do
	// returns it with ErrMaxAttempts. Another Client (a later run) may
	// send it again. Defaults to 0: only the horizon ends the retries.
	MaxAttempts int

	// SendHookFunc is called before every attempt, with the intent's host
	// (as in the URL: "api.stripe.com", or "host:port") and the request
	// about to be sent: add credentials here, for that host only (a process
	// resuming an intent after a restart has no other source for them). An
	// error skips the attempt and reschedules the intent. Defaults to nil.
	SendHookFunc func(host string, r *http.Request) error

	// CheckRetry decides, after each attempt the host's Profile does not
	// decide, whether to retry. It is called with the response (nil on a
	// transport error; its body already read, and readable again) and the
	// transport error. Return true to retry with the same key. Return false
	// with a nil error when resp is a definitive answer (2xx ends the intent
	// succeeded, anything else failed). Return false with an error to give
	// up: the intent ends failed with that error. The signature is that of
	// go-retryablehttp's CheckRetry, so its policies can be wrapped too.
	// Defaults to DefaultCheckRetry.
	CheckRetry func(ctx context.Context, resp *http.Response, err error) (bool, error)

	// Backoff returns how long to wait before retry number attemptNum (0
	// for the wait after the first attempt), between min and max, which are
	// always 500ms and 30s. resp is the last response, nil after a
	// transport error. A Retry-After on a 409, 429 or 503 overrides it
	// (see [Client.Do]). The signature is that of go-retryablehttp's
	// Backoff. Defaults to exponential backoff with full jitter: a
	// uniformly random wait in [0, min(max, min·2^attemptNum)).
	Backoff func(min, max time.Duration, attemptNum int, resp *http.Response) time.Duration

	// MaxSleep is the longest wait (backoff or Retry-After) slept inside the
	// process; a longer one is written to the queue as the intent's next
	// attempt time and the worker moves on. Defaults to 30s.
	MaxSleep time.Duration

	// LeaseDuration is how long a process owns an intent it is sending,
	// renewed at every attempt. Another process takes the intent over (with
	// a new fencing token) once the lease runs out, or at once if the
	// holder is a process on the same host that died: on Unix, no process
	// has its pid any more (on Linux also: the pid now belongs to a process
	// that started later); elsewhere only the end of the lease counts. A
	// holder on another host, or one that is alive but stuck, is waited
	// for. Must exceed AttemptTimeout. Defaults to 2m.
	LeaseDuration time.Duration

	// AttemptTimeout bounds one HTTP attempt, reading the response body
	// included. Defaults to 30s.
	AttemptTimeout time.Duration

	// Concurrency is how many intents Run sends at once. Defaults to 4.
	Concurrency int

	// OnEventFunc, if set, is called for every step of an intent in this
	// process: attempt started, answered, retrying, rescheduled, ended
	// (see [Event]). It is an observer: it runs synchronously on the
	// worker's goroutine, so it must return quickly, and nothing it does
	// changes what the client does next. Defaults to nil.
	OnEventFunc func(e Event)

	// Logger receives the client's logs: state changes (an intent ended)
	// at INFO, each attempt and retry at DEBUG, problems at WARN. It is
	// go-retryablehttp's LeveledLogger, which a *slog.Logger satisfies.
	// Defaults to slog.Default().
	Logger retryablehttp.LeveledLogger

	// timeNowFunc is the clock (tests inject one). Defaults to a wall clock
	// advanced by the monotonic clock.
	timeNowFunc func() time.Time
	// pollInterval defaults to pollIntervalDefault.
	pollInterval time.Duration
	// instanceHost overrides hostID() (tests play another host).
	instanceHost string
}

// WithDefaults returns a copy of c (which may be nil) with every unset field
// set to its default.
func (c *Config) WithDefaults() *Config {
	out := &Config{}
	if c != nil {
		*out = *c
	}
	out.Window = cmp.Or(out.Window, windowDefault)
	out.SafetyMargin = cmp.Or(out.SafetyMargin, safetyMarginDefault)
	if out.CredentialHeaders == nil {
		out.CredentialHeaders = credentialHeadersDefault
	}
	if out.OutcomeHeaders == nil {
		out.OutcomeHeaders = outcomeHeadersDefault
	}
	if out.CheckRetry == nil {
		out.CheckRetry = DefaultCheckRetry
	}
	if out.Backoff == nil {
		out.Backoff = defaultBackoff
	}
	out.MaxSleep = cmp.Or(out.MaxSleep, maxSleepDefault)
	out.LeaseDuration = cmp.Or(out.LeaseDuration, leaseDurationDefault)
	out.AttemptTimeout = cmp.Or(out.AttemptTimeout, attemptTimeoutDefault)
	out.Concurrency = cmp.Or(out.Concurrency, concurrencyDefault)
	out.MaxAttemptsPerHour = cmp.Or(out.MaxAttemptsPerHour, maxAttemptsPerHourDefault)
	if out.Profile == nil {
		p, _ := KnownProfile("idemkit")
		out.Profile = &p
	} else {
		p := out.Profile.withDefaults()
		out.Profile = &p
	}
	if out.Profiles != nil {
		m := make(map[string]Profile, len(out.Profiles))
		for host, p := range out.Profiles {
			m[strings.ToLower(host)] = p.withDefaults()
		}
		out.Profiles = m
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	out.pollInterval = cmp.Or(out.pollInterval, pollIntervalDefault)
	return out
}

func (c *Config) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Window", c.Window}, {"SafetyMargin", c.SafetyMargin}, {"MaxSleep", c.MaxSleep},
		{"LeaseDuration", c.LeaseDuration}, {"AttemptTimeout", c.AttemptTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("idemkit: Config.%s must be positive, got %v", d.name, d.v)
		}
	}
	if c.Window < time.Second {
		return fmt.Errorf("idemkit: Config.Window must be at least 1s, got %v", c.Window)
	}
	if c.LeaseDuration <= c.AttemptTimeout {
		return fmt.Errorf("idemkit: Config.LeaseDuration (%v) must exceed Config.AttemptTimeout (%v), or a slow attempt could be taken over while in flight", c.LeaseDuration, c.AttemptTimeout)
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("idemkit: Config.Concurrency must be at least 1, got %d", c.Concurrency)
	}
	for _, l := range []struct {
		name  string
		names []string
	}{{"CredentialHeaders", c.CredentialHeaders}, {"StoredHeaders", c.StoredHeaders}, {"OutcomeHeaders", c.OutcomeHeaders}} {
		for _, h := range l.names {
			if !validHeaderPattern(h) {
				return fmt.Errorf("idemkit: Config.%s: %q is not a header name or *-Suffix pattern", l.name, h)
			}
		}
	}
	if c.MaxAttempts < 0 {
		return fmt.Errorf("idemkit: Config.MaxAttempts must not be negative, got %d", c.MaxAttempts)
	}
	if c.MaxAttemptsPerHour < 1 {
		return fmt.Errorf("idemkit: Config.MaxAttemptsPerHour must be at least 1, got %d", c.MaxAttemptsPerHour)
	}
	if err := c.Profile.validate("Config.Profile"); err != nil {
		return err
	}
	for host, p := range c.Profiles {
		if host == "" || strings.ContainsAny(host, "/?#@ ") {
			return fmt.Errorf("idemkit: Config.Profiles: %q is not a host", host)
		}
		if err := p.validate("Config.Profiles[" + host + "]"); err != nil {
			return err
		}
	}
	return nil
}

// profileFor returns the profile of the host of rawURL.
func (c *Config) profileFor(rawURL string) *Profile {
	if len(c.Profiles) > 0 {
		if u, err := url.Parse(rawURL); err == nil {
			for _, h := range []string{strings.ToLower(u.Host), strings.ToLower(u.Hostname())} {
				if p, ok := c.Profiles[h]; ok {
					return &p
				}
			}
		}
	}
	return c.Profile
}

// Client sends intents from a SQLite queue. It is safe for concurrent use,
// and several processes may share one queue file.
type Client struct {
	cfg   *Config
	q     *queue
	self  leaseOwner // this process, as lease owner
	ownDB bool
	httpc *http.Client
	ownHC bool
	log   retryablehttp.LeveledLogger

	clockMu sync.Mutex
	lastNow time.Time

	submitCh  chan *submitOp
	closeCtx  context.Context
	closeFunc context.CancelFunc
	closeOnce sync.Once
	lifeMu    sync.RWMutex
	isClosed  bool
	wg        sync.WaitGroup // the committer, Run, Do and Wait calls

	wake chan struct{} // a Submit happened: Run looks at the queue

	// runActive counts Run workers claiming or driving an intent;
	// claimGen counts their claims (Drain reads both).
	runActive atomic.Int64
	claimGen  atomic.Uint64

	probes probes // hosts that stopped answering (probe.go)

	triesMu   sync.Mutex
	tries     map[string]int // intent id -> attempts started here (Config.MaxAttempts)
	exhausted []string       // ids that reached Config.MaxAttempts here

	nmu     sync.Mutex
	changed chan struct{} // closed and replaced when an intent ends here

	credMu sync.Mutex
	creds  map[string]http.Header // intent id -> credential headers, memory only
}

// Open opens or creates the queue file at path (created 0600, and so are
// its -wal and -shm files) with modernc.org/sqlite
// (journal_mode WAL, synchronous FULL so a returned Submit is on disk,
// BEGIN IMMEDIATE transactions, the write lock waited for up to 5 s when
// another process holds it), migrates it and returns a
// Client that owns it. A file that is not a SQLite database is refused with
// ErrQueueCorrupt and left untouched.
func Open(ctx context.Context, path string, cfg *Config) (*Client, error) {
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("%w (got %q; Open takes a file path, not a URI)", errInMemory, path)
	}
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("idemkit: queue path %q: must be non-empty, without ? or #", path)
	}
	if err := checkHeader(path); err != nil {
		return nil, err
	}
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	dsn := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate",
		path, sqliteBusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("idemkit: open queue %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	if err := firstQuery(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("idemkit: open queue %s: %w", path, err)
	}
	c, err := newClient(ctx, db, cfg, busyTimeout)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("idemkit: open queue %s: %w", path, err)
	}
	c.ownDB = true
	return c, nil
}

// firstQuery reads the schema once, which opens a connection and so runs
// its pragmas. Several processes opening a fresh file at once contend for
// the switch to WAL, which does not wait on the busy handler long enough:
// a busy answer is retried, with jitter, for up to busyTimeout.
func firstQuery(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master`).Scan(&n)
		if err == nil {
			return nil
		}
		err = interpretError(err)
		if !isQueue(err, queueLocked) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(time.Duration(2+rand.IntN(20)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// createPrivate creates the queue file, if it does not exist yet, readable
// and writable by its owner only (0600): it holds requests and receipts.
// SQLite creates the -wal and -shm files with the database file's
// permissions.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("idemkit: create queue %s: %w", path, err)
	}
	return f.Close()
}

// checkHeader refuses an existing, non-empty file that is not SQLite.
func checkHeader(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("idemkit: open queue %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("idemkit: open queue %s: is a directory", path)
	}
	hdr := make([]byte, 16)
	n, err := io.ReadFull(f, hdr)
	if n == 0 && (err == io.EOF) {
		return nil
	}
	if n < 16 || string(hdr) != "SQLite format 3\x00" {
		return queueErrorf(queueCorrupt, "%s is not a SQLite database (left untouched)", path)
	}
	return nil
}

// NewClient returns a Client on a database the caller opened: the queue
// tables are created in it if needed. Use WAL and synchronous=FULL; with
// modernc.org/sqlite:
//
//	db, _ := sql.Open("sqlite", "queue.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
//
// The database's busy timeout is how long a write waits for another process
// holding the lock. Close does not close db.
func NewClient(ctx context.Context, db *sql.DB, cfg *Config) (*Client, error) {
	return newClient(ctx, db, cfg, 0)
}

func newClient(ctx context.Context, db *sql.DB, cfg *Config, busyRetry time.Duration) (*Client, error) {
	if db == nil {
		return nil, errors.New("idemkit: NewClient: nil *sql.DB")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	self := currentLeaseOwner()
	c := &Client{
		cfg:      cfg,
		q:        &queue{db: db, busyRetry: busyRetry, owner: self.String()},
		self:     self,
		log:      cfg.Logger,
		submitCh: make(chan *submitOp),
		wake:     make(chan struct{}, 1),
		changed:  make(chan struct{}),
		creds:    map[string]http.Header{},
		tries:    map[string]int{},
	}
	c.q.skip = c.skipped
	if cfg.timeNowFunc == nil {
		base := time.Now()
		cfg.timeNowFunc = func() time.Time { return base.Add(time.Since(base)) }
	}
	file, err := mainFile(ctx, db)
	if err != nil {
		return nil, err
	}
	if file == "" {
		return nil, errInMemory
	}
	c.httpc, c.ownHC = newHTTPClient(cfg)
	if err := c.q.migrate(ctx, c.now()); err != nil {
		return nil, fmt.Errorf("idemkit: migrate queue: %w", err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, fmt.Errorf("idemkit: queue journal mode: %w", interpretError(err))
	}
	c.q.wal = strings.EqualFold(mode, "wal")
	if err := c.q.locate(ctx, cmp.Or(cfg.instanceHost, hostID()), file, c.now()); err != nil {
		return nil, fmt.Errorf("idemkit: record where the queue lives: %w", err)
	}
	if c.q.origin != c.q.self {
		n, _ := c.q.countForeign(ctx)
		c.log.Warn("idemkit: the queue file was first opened elsewhere (copied or moved?): its pending intents are not sent from here unless adopted (Client.Adopt)",
			"origin", c.q.origin, "here", c.q.self, "pending", n)
	}
	c.closeCtx, c.closeFunc = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.commitLoop()
	return c, nil
}

func newHTTPClient(cfg *Config) (*http.Client, bool) {
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if cfg.HTTPClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 16
		return &http.Client{Transport: t, Timeout: cfg.AttemptTimeout, CheckRedirect: noRedirect}, true
	}
	hc := *cfg.HTTPClient
	if hc.Timeout == 0 || hc.Timeout > cfg.AttemptTimeout {
		hc.Timeout = cfg.AttemptTimeout
	}
	if hc.CheckRedirect == nil {
		hc.CheckRedirect = noRedirect
	}
	return &hc, false
}

// now is the client's clock: never earlier than a value it returned before,
// so a clock stepped back cannot stretch a horizon within this process.
func (c *Client) now() time.Time {
	t := c.cfg.timeNowFunc()
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if t.Before(c.lastNow) {
		return c.lastNow
	}
	c.lastNow = t
	return t
}

// Close stops the group committer, makes running Run, Do and Wait calls
// return ErrClosed or nil (attempts in flight are canceled and their intents
// released, to be resumed later with the same key) and waits for them. It
// closes the database if Open opened it. Queued intents stay queued.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.lifeMu.Lock()
		c.isClosed = true
		c.lifeMu.Unlock()
		c.closeFunc()
		c.wg.Wait()
		if c.ownHC {
			c.httpc.CloseIdleConnections()
		}
		if c.ownDB {
			err = c.q.db.Close()
		}
	})
	return err
}

func (c *Client) closed() bool { return c.closeCtx.Err() != nil }

// enter registers a blocking call that Close must wait for; it returns
// false once Close has begun.
func (c *Client) enter() bool {
	c.lifeMu.RLock()
	defer c.lifeMu.RUnlock()
	if c.isClosed {
		return false
	}
	c.wg.Add(1)
	return true
}

// commitLoop is the group committer: every Submit waiting when a batch
// starts is inserted in that batch's one transaction (one fsync).
//
// The callers of one batch are all answered at once and come back together,
// a few microseconds later; a committer that started the next batch with the
// first of them to arrive would commit it with one or two intents while the
// rest waited a whole fsync for the batch after, halving the batch size (16
// intents per fsync at 32 callers). So when a batch has fewer intents than
// the previous one, the committer waits for the missing ones, at most
// gatherWait (never longer than the previous commit took): a lone caller
// (previous batch of one) never waits, and callers that went away cost one
// short wait, after which the target shrinks to what came.
func (c *Client) commitLoop() {
	defer c.wg.Done()
	last := 1 // intents in the previous batch
	var lastTook time.Duration
	for {
		select {
		case op := <-c.submitCh:
			batch := c.gather([]*submitOp{op}, last, min(lastTook, gatherWait))
			start := time.Now()
			c.q.insertBatch(context.Background(), batch)
			last, lastTook = len(batch), time.Since(start)
		case <-c.closeCtx.Done():
			for {
				select {
				case op := <-c.submitCh:
					op.done <- submitResult{nil, ErrClosed}
				default:
					return
				}
			}
		}
	}
}

// gather adds to batch every Submit already waiting, then, while it holds
// fewer than want, those arriving within wait.
func (c *Client) gather(batch []*submitOp, want int, wait time.Duration) []*submitOp {
	for len(batch) < submitBatchMax {
		select {
		case op := <-c.submitCh:
			batch = append(batch, op)
			continue
		default:
		}
		break
	}
	if len(batch) >= want || wait <= 0 {
		return batch
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(batch) < want && len(batch) < submitBatchMax {
		select {
		case op := <-c.submitCh:
			batch = append(batch, op)
		case <-t.C:
			return batch
		case <-c.closeCtx.Done():
			return batch
		}
	}
	return batch
}

// newIntent validates req for the queue and mints the intent's id, which is
// also its key unless the caller supplied one. The key is minted here, once,
// and never again for this intent.
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
	id := uuid.NewString()
	if p.key == "" {
		p.key = id
	}
	return p, id, nil
}

// Submit validates req, mints its key (unless req.Key or an Idempotency-Key
// header gives one) and writes the intent to the queue. When Submit
// returns, the intent is on disk (fsynced); nothing has been sent. Concurrent
// Submit calls share one transaction and one fsync (group commit).
//
// Submitting a key already in the queue returns the queued intent if the
// request is the same (method, URL and body), and ErrKeyReused otherwise.
// It returns ErrInvalidRequest for a request that cannot be queued. ctx
// bounds the wait for a batch to start; once its batch has started, Submit
// reports that batch's result.
func (c *Client) Submit(ctx context.Context, req *Request) (*Intent, error) {
	p, id, err := c.newIntent(req)
	if err != nil {
		return nil, err
	}
	op := &submitOp{ctx: ctx, p: p, id: id, now: c.now(), done: make(chan submitResult, 1)}
	defer c.q.waiting.Add(-1)
	if c.q.waiting.Add(1) == 1 {
		// No other Submit in progress: commit it here, without the two
		// goroutine hand-offs to the committer and back (a lone caller
		// pays what one INSERT per transaction pays). Submit calls arriving
		// meanwhile go to the committer, which waits for the write lock.
		if !c.enter() {
			return nil, ErrClosed
		}
		c.q.insertBatch(context.Background(), []*submitOp{op})
		c.wg.Done()
	} else {
		select {
		case c.submitCh <- op:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closeCtx.Done():
			return nil, ErrClosed
		}
	}
	r := <-op.done
	if r.err != nil {
		return nil, r.err
	}
	if len(p.creds) > 0 && r.in.State == StatePending {
		c.credMu.Lock()
		c.creds[r.in.ID] = p.creds
		c.credMu.Unlock()
	}
	c.poke()
	return r.in, nil
}

// SubmitTx is like Submit, but within an existing transaction of the
// caller's on the queue database (the transactional outbox: the intent
// commits or rolls back with the caller's own writes). Credential headers of
// req are dropped: supply them with Config.SendHookFunc.
func (c *Client) SubmitTx(ctx context.Context, tx *sql.Tx, req *Request) (*Intent, error) {
	p, id, err := c.newIntent(req)
	if err != nil {
		return nil, err
	}
	in, err := insertOne(ctx, tx, p, id, c.now(), c.q.self)
	return in, interpretError(err)
}

// poke wakes a Run loop waiting for work.
func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) broadcast() {
	c.nmu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.nmu.Unlock()
}

func (c *Client) changedCh() <-chan struct{} {
	c.nmu.Lock()
	defer c.nmu.Unlock()
	return c.changed
}

// Do submits req and drives it to an outcome: it sends it, retries with the
// same key as the policy and the horizon allow, and waits out long
// Retry-After waits (or another process holding the intent). It returns the
// intent with a nil error when it succeeded, and a *ResultError wrapping
// ErrKeyReused, ErrFailed, ErrWindowExpired or ErrCanceled when it ended
// otherwise. If ctx ends first, Do returns ctx's error and the intent, which
// stays pending in the queue: a Run worker, or Wait, finishes it later.
func (c *Client) Do(ctx context.Context, req *Request) (*Intent, error) {
	p, id, err := c.newIntent(req)
	if err != nil {
		return nil, err
	}
	// Insert and claim in one transaction: the row (with its first attempt
	// recorded) is on disk before the first byte, with one fsync.
	now := c.now()
	in, cl, err := c.q.insertClaim(ctx, p, id, now, c.cfg.LeaseDuration, c.plan(now))
	if err != nil {
		return in, err // nil unless it is queued (a Foreign QueueError)
	}
	if len(p.creds) > 0 && in.State == StatePending {
		c.credMu.Lock()
		c.creds[in.ID] = p.creds
		c.credMu.Unlock()
	}
	return c.driveClaimed(ctx, in.ID, cl)
}

// Wait blocks until the intent with the given id reaches a terminal state
// and returns it like Do does; it does not send anything itself (a Run
// worker, in this process or another, does). Returns ErrNotFound if no
// intent has that id. If ctx ends first, Wait returns ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Intent, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	for {
		ch := c.changedCh()
		in, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if in.State != StatePending {
			return in, result(in)
		}
		if err := c.q.foreign(in); err != nil {
			return in, err // no worker here will send it
		}
		if err := c.sleepUntil(ctx, in.NextAttemptAt, ch); err != nil {
			return in, err
		}
	}
}

// sleepUntil waits until t (at most the poll interval), a change in this
// process, or the end of ctx.
func (c *Client) sleepUntil(ctx context.Context, t time.Time, ch <-chan struct{}) error {
	d := c.cfg.pollInterval
	if w := t.Sub(c.now()); w < d {
		d = max(w, time.Millisecond)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closeCtx.Done():
		return ErrClosed
	case <-ch:
	case <-timer.C:
	}
	return nil
}

// result is the error that goes with a terminal intent.
func result(in *Intent) error {
	switch in.State {
	case StateSucceeded, StatePending:
		return nil
	case StateExpired, StateCanceled:
		return resultOf(in, nil)
	}
	// Whether an answer meant "key reused" was decided by the profile when
	// it arrived (a replayed answer never does).
	if in.Outcome != nil && in.Outcome.keyReused {
		return resultOf(in, ErrKeyReused)
	}
	return resultOf(in, nil)
}

// Get returns the intent with the given id, or ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Intent, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	return c.q.get(ctx, id)
}

// List returns intents matching opts (nil lists the first 100): pending
// ones in due order, terminal ones by last update, all of them by creation.
// Rows that cannot be decoded are left out and reported: List then returns
// the others together with an error wrapping ErrQueueCorrupt for each
// damaged row (naming its intent id).
func (c *Client) List(ctx context.Context, opts *ListOptions) ([]*Intent, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	o := ListOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	return c.q.list(ctx, &o)
}

// Attempts returns the attempt log of an intent, oldest first.
func (c *Client) Attempts(ctx context.Context, id string) ([]*Attempt, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	return c.q.attempts(ctx, id)
}

// SchemaVersion returns the version of the queue file's schema: the number
// of the last migration applied to it, which is the newest this package
// knows (Open and NewClient migrate the file, and refuse one a newer
// version migrated).
func (c *Client) SchemaVersion(ctx context.Context) (int, error) {
	if c.closed() {
		return 0, ErrClosed
	}
	var v int
	err := c.q.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+migrationsVersionTable).Scan(&v)
	return v, interpretError(err)
}

// Counts returns the number of intents in each state. It reads the whole
// table: meant for progress displays, not hot paths.
func (c *Client) Counts(ctx context.Context) (map[IntentState]int, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	return c.q.counts(ctx)
}

// Cancel ends a pending intent as canceled so that it is never sent again.
// It cannot recall an attempt already on the wire: if one is in flight, its
// effect may still happen. Returns ErrNotFound if no intent has that id, and
// an error if the intent had already ended some other way.
func (c *Client) Cancel(ctx context.Context, id string) error {
	if c.closed() {
		return ErrClosed
	}
	ok, err := c.q.cancel(ctx, id, c.now())
	if err != nil {
		return err
	}
	if !ok {
		in, err := c.q.get(ctx, id)
		if err != nil {
			return err
		}
		if in.State != StateCanceled {
			return fmt.Errorf("idemkit: cancel %s: intent already %s", id, in.State)
		}
	}
	c.forget(id)
	c.broadcast()
	return nil
}

// Prune deletes terminal intents (and their attempt logs) last updated more
// than olderThan ago, and returns how many it deleted; with states, only
// intents in those states (Prune(ctx, 0, StateFailed) keeps the succeeded
// receipts). Pending intents are never pruned: StatePending is refused with
// ErrInvalidRequest. It deletes in chunks, so it never holds the write lock
// long.
func (c *Client) Prune(ctx context.Context, olderThan time.Duration, states ...IntentState) (int, error) {
	if c.closed() {
		return 0, ErrClosed
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("idemkit: Prune: negative olderThan %v", olderThan)
	}
	for _, s := range states {
		if !s.valid() || s == StatePending {
			return 0, invalidf("Prune: state %q is not a terminal state", s)
		}
	}
	return c.q.prune(ctx, c.now().Add(-olderThan), states)
}

// tried counts an attempt of intent id started here and reports whether
// it is the last Config.MaxAttempts allows.
func (c *Client) tried(id string) bool {
	c.triesMu.Lock()
	defer c.triesMu.Unlock()
	c.tries[id]++
	return c.cfg.MaxAttempts > 0 && c.tries[id] >= c.cfg.MaxAttempts
}

// exhaust marks intent id as past Config.MaxAttempts here.
func (c *Client) exhaust(id string) {
	c.triesMu.Lock()
	defer c.triesMu.Unlock()
	if !slices.Contains(c.exhausted, id) {
		c.exhausted = append(c.exhausted, id)
	}
}

func (c *Client) isExhausted(id string) bool {
	c.triesMu.Lock()
	defer c.triesMu.Unlock()
	return slices.Contains(c.exhausted, id)
}

// skipped is the JSON array of the ids claims pass over.
func (c *Client) skipped() string {
	c.triesMu.Lock()
	defer c.triesMu.Unlock()
	b, _ := json.Marshal(c.exhausted)
	if c.exhausted == nil {
		return "[]"
	}
	return string(b)
}

func (c *Client) credsFor(id string) http.Header {
	c.credMu.Lock()
	defer c.credMu.Unlock()
	return c.creds[id]
}

// forget drops what this process kept in memory about intent id, which
// ended: its credential headers and its attempt count (an ended intent is
// never claimed again).
func (c *Client) forget(id string) {
	c.credMu.Lock()
	delete(c.creds, id)
	c.credMu.Unlock()
	c.triesMu.Lock()
	delete(c.tries, id)
	c.triesMu.Unlock()
}
