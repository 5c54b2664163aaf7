package idemriver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The windows hosts advertised (Idempotency-Window), remembered per host
// (scheme://host) for every worker of the database: a later intent to the
// host gets the shorter horizon before its first answer.

// hostWindowTTL is how long a Client trusts the window it read for a host
// before reading it again. A window another instance learned reaches this
// one within it: a horizon computed meanwhile can be this much later than
// the new window allows, far within the safety margin (Config.SafetyMargin,
// 1m by default). A window this Client learns applies at once.
const hostWindowTTL = time.Second

// windowCache holds the host windows a Client read recently.
type windowCache struct {
	mu sync.Mutex
	m  map[string]cachedWindow
}

type cachedWindow struct {
	w    time.Duration
	read time.Time
}

func (wc *windowCache) get(host string, now time.Time) (time.Duration, bool) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	e, ok := wc.m[host]
	if !ok || now.Sub(e.read) > hostWindowTTL || now.Before(e.read) {
		return 0, false
	}
	return e.w, true
}

func (wc *windowCache) put(host string, w time.Duration, now time.Time) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.m == nil {
		wc.m = map[string]cachedWindow{}
	}
	wc.m[host] = cachedWindow{w: w, read: now}
}

// hostWindow is the window host last advertised, 0 if none.
func (c *Client) hostWindow(ctx context.Context, host string) (time.Duration, error) {
	now := time.Now()
	if w, ok := c.windows.get(host, now); ok {
		return w, nil
	}
	w, err := c.readHostWindow(ctx, host)
	if err == nil {
		c.windows.put(host, w, now)
	}
	return w, err
}

func (c *Client) readHostWindow(ctx context.Context, host string) (time.Duration, error) {
	var ms int64
	err := c.pool.QueryRow(ctx, `SELECT window_ms FROM `+c.hostTable+` WHERE host = $1`, host).Scan(&ms)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("idemriver: host window: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// learnWindow remembers the window host advertised.
func (c *Client) learnWindow(ctx context.Context, host string, w time.Duration) error {
	c.windows.put(host, w, time.Now())
	_, err := c.pool.Exec(context.WithoutCancel(ctx), `INSERT INTO `+c.hostTable+` (host, window_ms) VALUES ($1, $2)
		ON CONFLICT (host) DO UPDATE SET window_ms = excluded.window_ms, updated_at = now()`, host, max(w.Milliseconds(), 1))
	return err
}
