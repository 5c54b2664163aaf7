package testmysql

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/tcpfault"
)

// Proxy is a [tcpfault.Proxy] under the names package server's MySQL tests
// (server/mysql_test.go) still use. It is an adapter, not a proxy of its
// own: new tests use tcpfault directly, and this file goes once
// server/mysql_test.go is migrated (Cut(0) is CutFor(0),
// DropNextCommitReply is DropReplyTo(tcpfault.MySQLCommitQuery),
// CommitRepliesDropped is Dropped).
type Proxy struct {
	*tcpfault.Proxy
}

// NewProxy starts a proxy to target (host:port), closed when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return &Proxy{tcpfault.Start(t, target)}
}

// Cut closes every connection and refuses new ones for d
// ([tcpfault.Proxy.CutFor]).
func (p *Proxy) Cut(d time.Duration) { p.CutFor(d) }

// DropNextCommitReply makes the proxy forward the next COMMIT and close the
// client's connection once MariaDB answered it, without relaying the
// answer.
func (p *Proxy) DropNextCommitReply() { p.DropReplyTo(tcpfault.MySQLCommitQuery) }

// CommitRepliesDropped counts the COMMIT answers the proxy dropped.
func (p *Proxy) CommitRepliesDropped() int { return p.Dropped() }
