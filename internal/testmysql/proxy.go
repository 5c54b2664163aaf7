package testmysql

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy between a store and MariaDB that a
// test can cut (close every connection and refuse new ones), freeze (keep
// connections up but forward nothing) and make drop the answer to the next
// COMMIT (forward the COMMIT, then close the client side without relaying
// MariaDB's answer).
type Proxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	conns       map[net.Conn]struct{}
	refuseUntil time.Time
	thaw        chan struct{} // closed while not frozen
	dropCommit  bool
	dropped     int
	closed      bool

	wg sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port), closed when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	thaw := make(chan struct{})
	close(thaw)
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), thaw: thaw}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address, to dial instead of target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// pair is one proxied connection: commitSent is set when the client sent a
// COMMIT whose answer is to be dropped.
type pair struct {
	mu         sync.Mutex
	commitSent bool
}

func (p *Proxy) accept() {
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
		pr := &pair{}
		p.wg.Add(2)
		go p.pipe(c, up, pr, true)
		go p.pipe(up, c, pr, false)
	}
}

func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// comQueryCommit is the MySQL protocol's COM_QUERY (0x03) of the text
// "COMMIT", after the packet header (3 bytes of length, 1 of sequence).
var comQueryCommit = []byte("\x03COMMIT")

// hasCommit reports whether chunk, from the client, holds a COM_QUERY
// COMMIT packet. A chunk may hold several packets (go-sql-driver sends
// COM_STMT_CLOSE without waiting for an answer, so it may arrive with the
// next command); a packet split across chunks is not recognised, which
// loopback writes of a few bytes do not do.
func hasCommit(chunk []byte) bool {
	for len(chunk) >= 4 {
		n := int(chunk[0]) | int(chunk[1])<<8 | int(chunk[2])<<16
		if len(chunk) < 4+n {
			return false
		}
		if bytes.Equal(chunk[4:4+n], comQueryCommit) {
			return true
		}
		chunk = chunk[4+n:]
	}
	return false
}

// pipe copies src to dst. fromClient marks the client-to-server direction,
// where a COMMIT is looked for; its answer is the next chunk the server
// sends on that connection.
func (p *Proxy) pipe(src, dst net.Conn, pr *pair, fromClient bool) {
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
			if fromClient && hasCommit(chunk) {
				p.mu.Lock()
				if p.dropCommit {
					p.dropCommit = false
					pr.mu.Lock()
					pr.commitSent = true
					pr.mu.Unlock()
				}
				p.mu.Unlock()
			}
			if !fromClient {
				pr.mu.Lock()
				drop := pr.commitSent
				pr.mu.Unlock()
				if drop {
					// MariaDB answered the COMMIT: cut the client off
					// without relaying the answer.
					p.mu.Lock()
					p.dropped++
					p.mu.Unlock()
					return
				}
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

// Cut closes every connection and refuses new ones for d.
func (p *Proxy) Cut(d time.Duration) {
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

// Freeze stops forwarding bytes; connections stay open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw:
		p.thaw = make(chan struct{})
	default: // already frozen
	}
}

// Thaw resumes forwarding after Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw:
	default:
		close(p.thaw)
	}
}

// DropNextCommitReply makes the proxy forward the next COMMIT and close the
// client's connection once MariaDB answered it, without relaying the
// answer.
func (p *Proxy) DropNextCommitReply() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropCommit = true
}

// CommitRepliesDropped counts the COMMIT answers the proxy dropped.
func (p *Proxy) CommitRepliesDropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Close closes the listener and every connection and waits for the pipes.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Thaw()
	_ = p.ln.Close()
	p.Cut(0)
	p.wg.Wait()
}
