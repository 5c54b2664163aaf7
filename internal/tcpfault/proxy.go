package tcpfault

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// DialTimeout bounds the proxy's dial to its target for each accepted
// connection; when it fails the client's connection is closed.
const DialTimeout = 5 * time.Second

// Proxy is a loopback TCP proxy to one target address. Its methods are safe
// for concurrent use. Make one with [Start].
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // canceled by Close: ends pending dials
	cancel context.CancelFunc

	timeNowFunc func() time.Time // time.Now; tests set it

	mu          sync.Mutex
	pairs       map[*pair]struct{}
	cuts        int           // incremented by every cut, so a dial in flight knows
	refuse      bool          // Cut: refuse until Restore
	refuseUntil time.Time     // CutFor: refuse until then
	thaw        chan struct{} // closed while not frozen
	rules       []rule        // one-shot reply drops, in the order armed
	dropped     int
	closed      bool

	wg sync.WaitGroup
}

// rule is one armed reply drop: onRequest rules match what the client
// sends, the others what the target answers.
type rule struct {
	match     MatchFunc
	onRequest bool
}

// pair is one proxied connection: the client's and the target's side.
type pair struct {
	client, up net.Conn
	done       chan struct{} // closed by close
	once       sync.Once
	dropReply  bool // guarded by Proxy.mu: lose the target's next reply
}

func (pr *pair) close() {
	pr.once.Do(func() {
		close(pr.done)
		_ = pr.client.Close()
		_ = pr.up.Close()
	})
}

// Start starts a proxy to target (host:port) on 127.0.0.1:0 and closes it
// when the test ends. It fails the test if it cannot listen.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("tcpfault: listen: %v", err)
	}
	thaw := make(chan struct{})
	close(thaw)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, timeNowFunc: time.Now,
		pairs: make(map[*pair]struct{}), thaw: thaw}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (127.0.0.1:port), to dial instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// refusingLocked reports whether a new connection is to be closed at once.
func (p *Proxy) refusingLocked() bool {
	return p.closed || p.refuse || p.timeNowFunc().Before(p.refuseUntil)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, cuts := p.refusingLocked(), p.cuts
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		var d net.Dialer
		ctx, cancel := context.WithTimeout(p.ctx, DialTimeout)
		up, err := d.DialContext(ctx, "tcp", p.target)
		cancel()
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{client: c, up: up, done: make(chan struct{})}
		p.mu.Lock()
		// A cut or Close while dialing applies to this connection too.
		if p.cuts != cuts || p.refusingLocked() {
			p.mu.Unlock()
			pr.close()
			continue
		}
		p.pairs[pr] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(pr, c, up, true)
		go p.pipe(pr, up, c, false)
	}
}

// pipe copies src to dst until either side fails or the pair is closed.
// fromClient marks the client-to-target direction.
func (p *Proxy) pipe(pr *pair, src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.pairs, pr)
		p.mu.Unlock()
		pr.close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			select {
			case <-thaw:
			case <-pr.done: // cut or closed while frozen
				return
			}
			chunk := buf[:n]
			if p.drops(pr, chunk, fromClient) {
				return // the reply is lost with the connection
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

// drops applies the armed rules to chunk and reports whether it is a reply
// to lose.
func (p *Proxy) drops(pr *pair, chunk []byte, fromClient bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !fromClient && pr.dropReply {
		p.dropped++
		return true
	}
	for i, r := range p.rules {
		if r.onRequest != fromClient || !r.match(chunk) {
			continue
		}
		p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
		if fromClient {
			pr.dropReply = true
			return false
		}
		p.dropped++
		return true
	}
	return false
}

// Cut closes every connection and refuses new ones (accepts and closes them
// at once) until [Proxy.Restore].
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.closeAll()
}

// CutFor closes every connection and refuses new ones for d, by the wall
// clock; CutFor(0) closes the connections and refuses nothing. It ends an
// earlier [Proxy.Cut]. Prefer Cut and Restore when the test can say when
// the path is back.
func (p *Proxy) CutFor(d time.Duration) {
	p.mu.Lock()
	p.refuse = false
	p.refuseUntil = p.timeNowFunc().Add(d)
	p.mu.Unlock()
	p.closeAll()
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	p.cuts++
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		pr.close()
	}
}

// Freeze stops forwarding: connections, existing and new, stay open, and
// every byte read from either side is held until [Proxy.Thaw] or
// [Proxy.Restore]. Freezing a frozen proxy does nothing.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw:
		p.thaw = make(chan struct{})
	default: // already frozen
	}
}

// Thaw resumes forwarding after [Proxy.Freeze], starting with the bytes
// held. It does not end a cut.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawLocked()
}

func (p *Proxy) thawLocked() {
	select {
	case <-p.thaw:
	default:
		close(p.thaw)
	}
}

// Restore ends a cut ([Proxy.Cut] or [Proxy.CutFor]) and a freeze: new
// connections are accepted and forwarded again. Connections closed by the
// cut stay closed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
	p.refuseUntil = time.Time{}
	p.thawLocked()
}

// DropReply arms the proxy once: the next chunk from the target, on any
// connection, that match accepts is not relayed; the connection is closed
// instead (both sides). The statement it answers was applied, its answer
// is lost. Several rules may be armed at once; each fires once.
func (p *Proxy) DropReply(match MatchFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, rule{match: match})
}

// DropReplyTo arms the proxy once: the next chunk from a client, on any
// connection, that match accepts is forwarded, and the target's next reply
// on that connection is not relayed; the connection is closed instead
// (both sides). Several rules may be armed at once; each fires once.
func (p *Proxy) DropReplyTo(match MatchFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, rule{match: match, onRequest: true})
}

// Dropped returns how many replies the proxy lost by [Proxy.DropReply] and
// [Proxy.DropReplyTo].
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Close stops listening, closes every connection, ends pending dials and
// waits for the proxy's goroutines. It is safe to call more than once;
// [Start] calls it when the test ends.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	p.closeAll()
	p.wg.Wait()
}
