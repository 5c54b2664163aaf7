package idemkit

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idemkit/internal/queue"
	"github.com/idemkit/idemkit/internal/wire"
	_ "modernc.org/sqlite" // the driver behind Open; NewClient takes any *sql.DB
)

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

// Client sends intents from a SQLite queue. It is safe for concurrent use,
// and several processes may share one queue file.
type Client struct {
	cfg   *Config
	q     *queue.Queue
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

	limit attemptLimit // Config.MaxAttempts (maxattempts.go)

	nmu     sync.Mutex
	changed chan struct{} // closed and replaced when an intent ends here

	credMu sync.Mutex
	creds  map[string]http.Header // intent id -> credential headers, memory only

	progMu   sync.Mutex
	progAt   time.Time           // when EventProgress was last considered
	progLast map[IntentState]int // the counts it last sent
}

// Open opens or creates the queue file at path (created 0600, and so are
// its -wal and -shm files) with modernc.org/sqlite
// (journal_mode WAL, synchronous FULL so a returned Submit is on disk,
// BEGIN IMMEDIATE transactions, the write lock waited for up to 5 s when
// another process holds it), migrates it and returns a
// Client that owns it. A file that is not a SQLite database is refused with
// a Corrupt [QueueError] and left untouched, and so is a queue a newer
// version migrated (Newer).
func Open(ctx context.Context, path string, cfg *Config) (*Client, error) {
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("%w (got %q; Open takes a file path, not a URI)", queue.ErrInMemory, path)
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
	if err := queue.FirstQuery(ctx, db, busyTimeout); err != nil {
		db.Close()
		return nil, fmt.Errorf("idemkit: open queue %s: %w", path, err)
	}
	c, err := newClient(ctx, db, cfg, busyTimeout, true)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("idemkit: open queue %s: %w", path, err)
	}
	return c, nil
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
		return queue.Errorf(queue.Corrupt, "%s is not a SQLite database (left untouched)", path)
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
	return newClient(ctx, db, cfg, 0, false)
}

// newClient is NewClient, with Open's retry of a busy write lock.
// ownDB is set when Open opened db: Close closes it, and the queue holds
// one of its connections for writes (see queue.Config.HoldWriter).
func newClient(ctx context.Context, db *sql.DB, cfg *Config, busyRetry time.Duration, ownDB bool) (*Client, error) {
	if db == nil {
		return nil, errors.New("idemkit: NewClient: nil *sql.DB")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	self := currentLeaseOwner()
	c := &Client{
		cfg: cfg,
		q: queue.New(db, queue.Config{BusyRetry: busyRetry, Owner: self.String(), PerHour: cfg.MaxAttemptsPerHour,
			Window: cfg.Window, Safety: cfg.SafetyMargin, Hosts: cfg.hosts(), HoldWriter: ownDB}),
		ownDB:    ownDB,
		self:     self,
		log:      cfg.Logger,
		submitCh: make(chan *submitOp),
		wake:     make(chan struct{}, 1),
		changed:  make(chan struct{}),
		creds:    map[string]http.Header{},
		limit:    attemptLimit{max: cfg.MaxAttempts, tries: map[string]int{}},
	}
	if cfg.timeNowFunc == nil {
		base := time.Now()
		cfg.timeNowFunc = func() time.Time { return base.Add(time.Since(base)) }
	}
	file, err := queue.MainFile(ctx, db)
	if err != nil {
		return nil, err
	}
	if file == "" {
		return nil, queue.ErrInMemory
	}
	c.httpc, c.ownHC = newHTTPClient(cfg)
	if err := c.q.Migrate(ctx, c.now()); err != nil {
		return nil, fmt.Errorf("idemkit: migrate queue: %w", err)
	}
	if err := c.q.ReadJournalMode(ctx); err != nil {
		return nil, fmt.Errorf("idemkit: queue journal mode: %w", err)
	}
	if err := c.q.Locate(ctx, cmp.Or(cfg.instanceHost, hostID()), file, wire.FormatTime(c.now())); err != nil {
		return nil, fmt.Errorf("idemkit: record where the queue lives: %w", err)
	}
	if held, inFile, onDisk, err := c.q.CheckRestored(ctx, file, wire.FormatTime(c.now())); err != nil {
		return nil, fmt.Errorf("idemkit: check the queue's generation: %w", err)
	} else if onDisk > inFile {
		c.log.Warn("idemkit: the queue file is older than its last use here (restored from a backup?): its intents never attempted are not sent unless adopted (Client.Adopt); they may have been sent after the backup was taken",
			"generation", inFile, "last_seen", onDisk, "held", held)
	}
	if c.q.Origin() != c.q.Self() {
		n, _ := c.q.CountForeign(ctx)
		c.log.Warn("idemkit: the queue file was first opened elsewhere (copied or moved?): its pending intents are not sent from here unless adopted (Client.Adopt)",
			"origin", c.q.Origin(), "here", c.q.Self(), "pending", n)
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
		c.q.Close()
		if c.ownDB {
			err = c.q.DB().Close()
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
	op := &submitOp{ctx: ctx, n: p.queued(id, c.now()), done: make(chan submitResult, 1)}
	defer c.q.Waiting.Add(-1)
	if c.q.Waiting.Add(1) == 1 {
		// No other Submit in progress: commit it here, without the two
		// goroutine hand-offs to the committer and back (a lone caller
		// pays what one INSERT per transaction pays). Submit calls arriving
		// meanwhile go to the committer, which waits for the write lock.
		if !c.enter() {
			return nil, ErrClosed
		}
		c.insertBatch([]*submitOp{op})
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
	in, err := c.q.InsertTx(ctx, tx, p.queued(id, c.now()))
	return intentOf(in), err
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
// intent with a nil error when it succeeded, and an error matching its
// state (StateFailed, and ErrKeyReused for a reused key; StateExpired;
// StateCanceled; see [IntentState.Error]) when it ended otherwise. If ctx ends first, Do returns ctx's error and the intent, which
// stays pending in the queue: a Run worker, or Wait, finishes it later.
func (c *Client) Do(ctx context.Context, req *Request) (*Intent, error) {
	p, id, err := c.newIntent(req)
	if err != nil {
		return nil, err
	}
	// Insert and claim in one transaction: the row (with its first attempt
	// recorded) is on disk before the first byte, with one fsync.
	qi, cl, err := c.q.InsertClaim(ctx, p.queued(id, c.now()), c.cfg.LeaseDuration)
	in := intentOf(qi)
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
// worker, in this process or another, does). A lease on it held by a dead
// process on this host is ended at once, so a worker can take it over. Returns ErrNotFound if no
// intent has that id. If ctx ends first, Wait returns ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Intent, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	for {
		ch := c.changedCh()
		c.takeOver(ctx, id) // held by a dead process? then it is due now
		in, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if in.State != StatePending {
			return in, result(in)
		}
		if err := c.q.Foreign(in.queued()); err != nil {
			return in, err // no worker here will send it
		}
		if err := c.sleepUntil(ctx, in.NextAttemptAt, ch); err != nil {
			return in, err
		}
	}
}

// result is the error that goes with a terminal intent.
func result(in *Intent) error {
	switch in.State {
	case StateSucceeded, StatePending:
		return nil
	case StateUnknown, StateExpired, StateCanceled:
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
	return c.get(ctx, id)
}

// List returns intents matching opts (nil lists the first 100): pending
// ones in due order, terminal ones by last update, all of them by creation.
// Rows that cannot be decoded are left out and reported: List then returns
// the others together with a Corrupt [QueueError] for each damaged row
// (naming its intent id), joined.
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
	qs, err := c.q.List(ctx, &queue.ListOptions{State: queue.State(o.State), UpdatedSince: o.UpdatedSince, Limit: o.Limit})
	out := make([]*Intent, 0, len(qs))
	for _, qi := range qs {
		out = append(out, intentOf(qi))
	}
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// Attempts returns the attempt log of an intent, oldest first.
func (c *Client) Attempts(ctx context.Context, id string) ([]*Attempt, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	as, err := c.q.Attempts(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []*Attempt
	for _, a := range as {
		out = append(out, attemptOf(a))
	}
	return out, nil
}

// SchemaVersion returns the version of the queue file's schema: the number
// of the last migration applied to it, which is the newest this package
// knows (Open and NewClient migrate the file, and refuse one a newer
// version migrated).
func (c *Client) SchemaVersion(ctx context.Context) (int, error) {
	if c.closed() {
		return 0, ErrClosed
	}
	return c.q.StoredVersion(ctx)
}

// Counts returns the number of intents in each state. It reads the whole
// table: meant for progress displays, not hot paths.
func (c *Client) Counts(ctx context.Context) (map[IntentState]int, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	return c.counts(ctx)
}

// Cancel ends a pending intent as canceled so that it is never sent again.
// It cannot recall an attempt already on the wire: if one is in flight, its
// effect may still happen. Returns ErrNotFound if no intent has that id, and
// an error if the intent had already ended some other way.
func (c *Client) Cancel(ctx context.Context, id string) error {
	if c.closed() {
		return ErrClosed
	}
	ok, err := c.q.Cancel(ctx, id, c.now())
	if err != nil {
		return err
	}
	if !ok {
		in, err := c.get(ctx, id)
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
	qs := make([]queue.State, len(states))
	for i, st := range states {
		qs[i] = queue.State(st)
	}
	return c.q.Prune(ctx, c.now().Add(-olderThan), qs)
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
	c.limit.forget(id)
}

// get reads the intent with the given id.
func (c *Client) get(ctx context.Context, id string) (*Intent, error) {
	qi, err := c.q.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return intentOf(qi), nil
}

// counts reads the number of intents in each state.
func (c *Client) counts(ctx context.Context) (map[IntentState]int, error) {
	qc, err := c.q.Counts(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[IntentState]int, len(qc))
	for s, n := range qc {
		out[IntentState(s)] = n
	}
	return out, nil
}
