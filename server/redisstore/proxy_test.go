package redisstore_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpProxy is a loopback TCP proxy between a store's client and Redis that
// a test can cut (close every connection and refuse new ones), freeze
// (keep connections up but forward nothing) and make lose the reply to the
// next command containing some bytes (forward the command, then close the
// client's connection without relaying Redis's answer).
type tcpProxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	cut       bool
	thaw      chan struct{} // closed while not frozen
	loseReply []byte        // the command whose reply to lose, once
	lost      int

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
	t.Cleanup(p.close)
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
		cut := p.cut
		p.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pair := &connPair{client: c, up: up}
		p.wg.Add(2)
		go p.pipe(pair, c, up, true)
		go p.pipe(pair, up, c, false)
	}
}

// connPair is one proxied connection; drop is set when the next reply on it
// must be lost.
type connPair struct {
	client, up net.Conn
	mu         sync.Mutex
	drop       bool
}

func (p *tcpProxy) pipe(pair *connPair, from, to net.Conn, toRedis bool) {
	defer p.wg.Done()
	defer func() { _ = from.Close(); _ = to.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw
			chunk := buf[:n]
			if toRedis {
				p.mu.Lock()
				if p.loseReply != nil && bytes.Contains(chunk, p.loseReply) {
					p.loseReply = nil
					p.lost++
					pair.mu.Lock()
					pair.drop = true
					pair.mu.Unlock()
				}
				p.mu.Unlock()
			} else {
				pair.mu.Lock()
				drop := pair.drop
				pair.mu.Unlock()
				if drop {
					return // the reply is lost with the connection
				}
			}
			if _, err := to.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// Cut closes every connection and refuses new ones until Restore.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Freeze stops forwarding until Restore.
func (p *tcpProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw:
		p.thaw = make(chan struct{})
	default:
	}
}

// Restore undoes Cut and Freeze.
func (p *tcpProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	select {
	case <-p.thaw:
	default:
		close(p.thaw)
	}
}

// LoseReplyTo makes the proxy lose the reply to the next command that
// contains b.
func (p *tcpProxy) LoseReplyTo(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseReply = b
}

// Lost returns how many replies the proxy lost.
func (p *tcpProxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

func (p *tcpProxy) close() {
	_ = p.ln.Close()
	p.Restore()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
