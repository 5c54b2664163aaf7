package paymentsapi

import (
	"bytes"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
)

// replyDropper is a loopback TCP proxy to PostgreSQL that, once armed,
// closes the client's connection instead of relaying the next server reply
// containing given bytes: the statement was applied, its answer lost.
type replyDropper struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	drop   []byte
	wg     sync.WaitGroup
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &replyDropper{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.wg.Add(2)
			go p.pipe(c, up, false)
			go p.pipe(up, c, true)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *replyDropper) arm(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = b
}

func (p *replyDropper) pipe(src, dst net.Conn, fromServer bool) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromServer {
				p.mu.Lock()
				hit := p.drop != nil && bytes.Contains(buf[:n], p.drop)
				if hit {
					p.drop = nil
				}
				p.mu.Unlock()
				if hit {
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Lease mode on PostgreSQL: the payment's autocommitted INSERT is applied
// but its answer is lost. The API answers outcome-unknown, never "The
// payment was not made" (the report: 5 of 37 such answers for payments that
// existed), and the retry with the same key answers the payment that was
// made: one intent, one payment.
func TestPayments_LostInsertAnswerIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newReplyDropper(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	var once sync.Once
	b := setup(t, &Config{DSN: u.String(), SweepInterval: -1, Mode: ModeLease}, func(h *handlers) {
		h.onChargeStart = func(string, string) { once.Do(func() { proxy.arm([]byte("INSERT 0 1\x00")) }) }
	})

	first := b.pay(t, "alice", "intent-1", usd40)
	requireProblem(t, first, 503, wire.ProblemOutcomeUnknown)
	require.NotContains(t, string(first.body), "not made")
	require.Len(t, b.list(t, "alice"), 1, "the payment was made")

	again := b.pay(t, "alice", "intent-1", usd40)
	require.Equal(t, 201, again.status, "body %s", again.body)
	require.Len(t, b.list(t, "alice"), 1, "one intent, one payment")
}
