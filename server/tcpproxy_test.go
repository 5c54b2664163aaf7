package server_test

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
)

// tcpProxy is a loopback TCP proxy between the store and PostgreSQL that a
// test can cut (close every connection and refuse new ones), freeze (keep
// connections up but forward nothing) and make drop the answer to the next
// COMMIT (forward the COMMIT, then close the client side without relaying
// the reply).
type tcpProxy struct {
	ln     net.Listener
	target string

	mu           sync.Mutex
	conns        map[net.Conn]struct{}
	refuseUntil  time.Time
	thaw         chan struct{} // closed while not frozen
	dropCommit   bool
	commitsDrops int
	dropReply    []byte // drop the next server reply containing these bytes
	closed       bool

	wg sync.WaitGroup
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	thaw := make(chan struct{})
	close(thaw)
	p := &tcpProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), thaw: thaw}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.closed || time.Now().Before(p.refuseUntil)
		if !refuse {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.drop(c)
			continue
		}
		p.mu.Lock()
		p.conns[up] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up, true)
		go p.pipe(up, c, false)
	}
}

func (p *tcpProxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// pipe copies src to dst. fromClient marks the client-to-server direction;
// the other one carries the answers, where a COMMIT's is looked for.
func (p *tcpProxy) pipe(src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer p.drop(src)
	defer p.drop(dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw // frozen: hold the bytes until thawed or closed
			chunk := buf[:n]
			if !fromClient && (p.isDroppedCommitReply(chunk) || p.isDroppedReply(chunk)) {
				// The server answered the COMMIT: cut the client off
				// without relaying the answer.
				return
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// commitComplete is PostgreSQL's CommandComplete message of a COMMIT.
var commitComplete = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

// isDroppedCommitReply reports whether chunk, from the server, answers a
// COMMIT (sent alone or at the end of a pipeline) whose answer the proxy was
// told to drop, and counts it.
func (p *tcpProxy) isDroppedCommitReply(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dropCommit || !bytes.Contains(chunk, commitComplete) {
		return false
	}
	p.dropCommit = false
	p.commitsDrops++
	return true
}

// Cut closes every connection and refuses new ones for d.
func (p *tcpProxy) Cut(d time.Duration) {
	p.mu.Lock()
	p.refuseUntil = time.Now().Add(d)
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Freeze stops forwarding bytes; connections stay open. Thaw resumes.
func (p *tcpProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw:
		p.thaw = make(chan struct{})
	default: // already frozen
	}
}

func (p *tcpProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw:
	default:
		close(p.thaw)
	}
}

// DropNextCommitReply makes the proxy forward the next COMMIT and close the
// client's connection once PostgreSQL answered it, without relaying the
// answer.
func (p *tcpProxy) DropNextCommitReply() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropCommit = true
}

// DropNextReplyContaining makes the proxy close the client's connection,
// without relaying it, once PostgreSQL answers with bytes containing b
// (for example the CommandComplete of an autocommitted UPDATE): the
// statement was applied, its answer is lost.
func (p *tcpProxy) DropNextReplyContaining(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReply = b
}

func (p *tcpProxy) isDroppedReply(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropReply == nil || !bytes.Contains(chunk, p.dropReply) {
		return false
	}
	p.dropReply = nil
	return true
}

func (p *tcpProxy) CommitRepliesDropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commitsDrops
}

// Close closes the listener and every connection and waits for the pipes.
func (p *tcpProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Thaw()
	_ = p.ln.Close()
	p.Cut(0)
	p.wg.Wait()
}

// proxiedPostgres is a fresh schema reached through a tcpProxy: pool goes
// through the proxy, direct does not (for checks while the proxy is cut).
type proxiedPostgres struct {
	proxy  *tcpProxy
	pool   *pgxpool.Pool
	direct *pgxpool.Pool
}

func newProxiedPostgres(t testing.TB) *proxiedPostgres {
	t.Helper()
	dsn := testpg.SchemaDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err, "IDEM_TEST_POSTGRES must be a URL for the proxy tests")
	p := newTCPProxy(t, u.Host)
	pu := *u
	pu.Host = p.Addr()
	q := pu.Query()
	q.Set("connect_timeout", "2")
	pu.RawQuery = q.Encode()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pu.String())
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	direct, err := pgxpool.New(ctx, dsn+"&pool_max_conns=2")
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		direct.Close()
	})
	require.NoError(t, pool.Ping(ctx))
	return &proxiedPostgres{proxy: p, pool: pool, direct: direct}
}
