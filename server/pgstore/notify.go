package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// Change notifications (Config.NotifyChanges): Complete and Release call
// pg_notify in the statement that writes, so the notification is delivered
// when that write commits and never for one that rolls back; SubscribeChange
// listens for them on one connection per Store.
//
// The channel is named after the schema of the key table (the pool's
// current_schema()), so that stores in two schemas of one database do not
// wake each other; the payload is scopeHash of the record's scope (a scope
// holds arbitrary text, a payload at most 8000 bytes).
const (
	// pgNotifyChannel is the channel of the key table, evaluated by the
	// statement that notifies.
	pgNotifyChannel = `'idemkit_' || left(md5(current_schema()), 16)`

	pgNotifyChannelName = `SELECT ` + pgNotifyChannel

	pgCompleteNotify = `WITH u AS (` + pgComplete + `
RETURNING 1)
SELECT pg_notify(` + pgNotifyChannel + `, $10) FROM u`

	pgReleaseNotify = `WITH u AS (` + pgRelease + `
RETURNING 1)
SELECT pg_notify(` + pgNotifyChannel + `, $5) FROM u`

	// pgNotify is the notification a transactional-mode completion queues
	// before its UPDATE: PostgreSQL delivers it on COMMIT, and drops it if
	// the transaction rolls back.
	pgNotify = `SELECT pg_notify(` + pgNotifyChannel + `, $1)`
)

// Bounds of the listener's reconnection backoff.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// errStoreClosed is the cause of SubscribeChange's error after Close.
var errStoreClosed = errors.New("idemkit/server/pgstore: the store is closed")

// scopeHash is the payload of a scope's notifications: the first 16 bytes
// of the SHA-256 of its length-prefixed fields, in hex.
func scopeHash(sc server.Scope) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range []string{sc.Principal, sc.Endpoint, sc.Key} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// notifyDialect is a dialect whose Complete and Release notify the scope's
// channel in the same statement.
type notifyDialect struct{ sqlstore.Dialect }

// notifyReaderDialect is notifyDialect keeping the ClaimReader capability
// of the plain table's dialect.
type notifyReaderDialect struct {
	notifyDialect
	sqlstore.ClaimReader
}

// withNotify returns d notifying its changes, with d's capabilities.
func withNotify(d sqlstore.Dialect) sqlstore.Dialect {
	if r, ok := d.(sqlstore.ClaimReader); ok {
		return notifyReaderDialect{notifyDialect{d}, r}
	}
	return notifyDialect{d}
}

func (d notifyDialect) Complete(sc server.Scope, token int64, now time.Time, resp sqlstore.EncodedResponse) (string, []any) {
	_, args := d.Dialect.Complete(sc, token, now, resp)
	return pgCompleteNotify, append(args, scopeHash(sc))
}

func (d notifyDialect) Release(sc server.Scope, token int64) (string, []any) {
	_, args := d.Dialect.Release(sc, token)
	return pgReleaseNotify, append(args, scopeHash(sc))
}

// SubscribeChange implements server.ChangeSubscriber: the returned channel is
// closed once the record of sc may have changed after the call returned —
// it was completed or released by a Store with Config.NotifyChanges, in this
// process or another, in lease or transactional mode (on COMMIT) — or
// spuriously, when the listener's connection failed or the Store was
// closed. The caller must call stop, which is idempotent, when it no longer
// waits. A lease takeover does not close it (the record stays in progress),
// nor does an expiry or a sweep.
//
// Without Config.NotifyChanges no Store notifies: the channel is then never
// closed and the caller's polling decides.
//
// The first call starts the Store's listener: one connection of its own,
// opened with the pool's connection config (pgx.ConnectConfig on
// Pool().Config().ConnConfig; the pool's AfterConnect is not run on it) and
// outside the pool's MaxConns, so that waiting never takes a connection
// from the claims. It lives until Close, reconnecting with backoff
// (50ms to 5s) when it fails. SubscribeChange returns once the listener is
// listening, so that no change committed after it returned can be missed;
// ctx bounds only that wait (the first connection, or a reconnection): when
// ctx ends first the error wraps ctx's error and server.ErrStoreUnavailable.
func (s *Store) SubscribeChange(ctx context.Context, sc server.Scope) (changed <-chan struct{}, stop func(), err error) {
	if err := sqlstore.ValidateScope(sc); err != nil {
		return nil, nil, err
	}
	if !s.cfg.NotifyChanges {
		return nil, func() {}, nil // a nil channel: this store does not notify, poll
	}
	return s.changeListener().subscribe(ctx, scopeHash(sc))
}

// Close stops the listener of SubscribeChange, if it was started, and
// closes the channels of its subscribers; a later SubscribeChange fails. It
// does not close the pool, which is the caller's. It is safe to call more
// than once.
func (s *Store) Close() {
	s.listenMu.Lock()
	l := s.listen
	s.listenClosed = true
	s.listenMu.Unlock()
	if l != nil {
		l.close()
	}
}

// changeListener returns the Store's listener, started on first use (or a
// closed one after Close).
func (s *Store) changeListener() *listener {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.listen == nil {
		s.listen = newListener(s)
		if s.listenClosed {
			s.listen.close()
		} else {
			s.listen.start()
		}
	}
	return s.listen
}

// subscription is one SubscribeChange: ch is closed at most once, by the
// listener, when it removes the subscription from its map.
type subscription struct {
	ch  chan struct{}
	key string
}

// listener is the Store's LISTEN connection and its subscribers, by scope
// hash.
type listener struct {
	st     *Store
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	subs      map[string]map[*subscription]struct{}
	listening bool
	up        chan struct{} // closed when listening starts (or on close)
	started   bool
	closed    bool
	lastErr   error  // why the last connection failed
	pid       uint32 // the listening connection's backend (tests)
}

func newListener(s *Store) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{st: s, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		subs: map[string]map[*subscription]struct{}{}, up: make(chan struct{})}
}

func (l *listener) start() {
	l.mu.Lock()
	l.started = true
	l.mu.Unlock()
	go l.run()
}

// close stops the listener and waits for it.
func (l *listener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return
	}
	l.closed = true
	if !l.listening {
		close(l.up) // wakes the subscribers waiting for it, who find it closed
	}
	started := l.started
	l.mu.Unlock()
	l.cancel()
	if !started {
		close(l.done)
	}
	<-l.done
}

func (l *listener) subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, nil, sqlstore.WrapError(server.ErrStoreUnavailable, "subscribe", errStoreClosed)
		}
		if l.listening {
			sub := &subscription{ch: make(chan struct{}), key: key}
			set := l.subs[key]
			if set == nil {
				set = map[*subscription]struct{}{}
				l.subs[key] = set
			}
			set[sub] = struct{}{}
			l.mu.Unlock()
			var once sync.Once
			return sub.ch, func() { once.Do(func() { l.unsubscribe(sub) }) }, nil
		}
		up, lastErr := l.up, l.lastErr
		l.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
			err := ctx.Err()
			if lastErr != nil {
				err = errors.Join(err, lastErr)
			}
			return nil, nil, sqlstore.WrapError(server.ErrStoreUnavailable, "subscribe: the listener is not connected", err)
		}
	}
}

func (l *listener) unsubscribe(sub *subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if set := l.subs[sub.key]; set != nil {
		delete(set, sub)
		if len(set) == 0 {
			delete(l.subs, sub.key)
		}
	}
}

// wake closes the channels of the subscribers of key (every subscriber when
// all is set) and forgets them.
func (l *listener) wake(key string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if all {
		for _, set := range l.subs {
			for sub := range set {
				close(sub.ch)
			}
		}
		clear(l.subs)
		return
	}
	for sub := range l.subs[key] {
		close(sub.ch)
	}
	delete(l.subs, key)
}

// run connects, listens and dispatches until close, reconnecting with
// backoff.
func (l *listener) run() {
	defer close(l.done)
	var channel string
	backoff := listenBackoffMin
	for l.ctx.Err() == nil {
		conn, err := l.connect(&channel)
		if err != nil {
			l.mu.Lock()
			l.lastErr = err
			l.mu.Unlock()
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
			}
			backoff = min(2*backoff, listenBackoffMax)
			continue
		}
		backoff = listenBackoffMin
		l.mu.Lock()
		l.listening, l.lastErr, l.pid = true, nil, conn.PgConn().PID()
		if !l.closed {
			close(l.up)
		}
		l.mu.Unlock()
		for {
			n, err := conn.WaitForNotification(l.ctx)
			if err != nil {
				l.mu.Lock()
				l.lastErr = interpretError(err)
				l.mu.Unlock()
				break
			}
			if n.Channel == channel {
				l.wake(n.Payload, false)
			}
		}
		// The connection failed (or close): nothing delivered from now on
		// reaches the subscribers, who are woken to read the record again.
		l.mu.Lock()
		l.listening = false
		if !l.closed {
			l.up = make(chan struct{})
		}
		l.mu.Unlock()
		l.wake("", true)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}
}

// connect opens the listening connection; channel is read from the pool on
// the first success (the notifying statements run on the pool's
// connections, so their current_schema() decides).
func (l *listener) connect(channel *string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	if *channel == "" {
		if err := l.st.pool.QueryRow(ctx, pgNotifyChannelName).Scan(channel); err != nil {
			return nil, interpretError(err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, l.st.pool.Config().ConnConfig)
	if err != nil {
		return nil, interpretError(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{*channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("LISTEN: %w", interpretError(err))
	}
	return conn, nil
}

// listenerPID is the backend of the listening connection, 0 when none.
func (s *Store) listenerPID() uint32 {
	s.listenMu.Lock()
	l := s.listen
	s.listenMu.Unlock()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.listening {
		return 0
	}
	return l.pid
}
