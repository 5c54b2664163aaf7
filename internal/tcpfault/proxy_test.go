package tcpfault_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
)

// startEcho starts a TCP server on loopback that writes back what it reads,
// and stops it when the test ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, p *tcpfault.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip sends msg and requires it back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, string(got))
}

// requireClosed requires the proxy to close c: a read ends with an error
// that is not the deadline.
func requireClosed(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	n, err := c.Read(make([]byte, 64))
	require.Zero(t, n, "no byte may arrive on a closed connection")
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection was left open: %v", err)
}

// requireSilent requires nothing to arrive on c for a moment.
func requireSilent(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(150*time.Millisecond)))
	n, err := c.Read(make([]byte, 64))
	require.Zero(t, n, "a frozen proxy forwarded bytes")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

func TestProxy_ForwardsBothWays(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, a, "hello")
	roundTrip(t, b, "world")

	// A payload larger than the proxy's buffer, written while read.
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	require.NoError(t, a.SetDeadline(time.Now().Add(30*time.Second)))
	werr := make(chan error, 1)
	go func() { _, err := a.Write(big); werr <- err }()
	got := make([]byte, len(big))
	_, err := io.ReadFull(a, got)
	require.NoError(t, err)
	require.NoError(t, <-werr)
	require.Equal(t, big, got)
	require.Zero(t, p.Dropped())
}

func TestProxy_CutClosesAndRefusesUntilRestore(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	c := dial(t, p)
	roundTrip(t, c, "before")

	p.Cut()
	requireClosed(t, c)
	requireClosed(t, dial(t, p)) // accepted, then closed at once

	p.Restore()
	roundTrip(t, dial(t, p), "after")
}

func TestProxy_CutForZeroClosesAndAccepts(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	c := dial(t, p)
	roundTrip(t, c, "before")

	p.CutFor(0)
	requireClosed(t, c)
	roundTrip(t, dial(t, p), "after")
}

func TestProxy_CutForRefusesUntilItsDeadline(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tcpfault.SetNow(p, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	c := dial(t, p)
	roundTrip(t, c, "before")

	p.CutFor(time.Minute)
	requireClosed(t, c)
	mu.Lock()
	now = now.Add(59 * time.Second)
	mu.Unlock()
	requireClosed(t, dial(t, p))

	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	roundTrip(t, dial(t, p), "after")
}

func TestProxy_CutEndsAnEarlierCutFor(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	p.Cut()
	requireClosed(t, dial(t, p))
	p.CutFor(0) // refuse no more
	roundTrip(t, dial(t, p), "after")
}

func TestProxy_FreezeHoldsExistingAndNewTraffic(t *testing.T) {
	for _, resume := range []string{"Thaw", "Restore"} {
		t.Run(resume, func(t *testing.T) {
			t.Parallel()
			p := tcpfault.Start(t, startEcho(t))
			old := dial(t, p)
			roundTrip(t, old, "warm")

			p.Freeze()
			p.Freeze() // twice is once
			_, err := old.Write([]byte("held"))
			require.NoError(t, err)
			requireSilent(t, old)
			fresh := dial(t, p) // accepted, but nothing moves
			_, err = fresh.Write([]byte("new"))
			require.NoError(t, err)
			requireSilent(t, fresh)

			if resume == "Thaw" {
				p.Thaw()
			} else {
				p.Restore()
			}
			for c, want := range map[net.Conn]string{old: "held", fresh: "new"} {
				require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
				got := make([]byte, len(want))
				_, err := io.ReadFull(c, got)
				require.NoError(t, err)
				require.Equal(t, want, string(got), "the held bytes are delivered")
			}
			roundTrip(t, old, "flowing")
		})
	}
}

func TestProxy_ThawDoesNotEndACut(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	p.Cut()
	p.Thaw()
	requireClosed(t, dial(t, p))
}

func TestProxy_CutWhileFrozenClosesTheHeldConnections(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	c := dial(t, p)
	roundTrip(t, c, "warm")
	p.Freeze()
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	requireSilent(t, c)

	p.Cut()
	requireClosed(t, c)
	p.Thaw()
	requireClosed(t, dial(t, p)) // still cut
}

func TestProxy_DropReply(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	c, other := dial(t, p), dial(t, p)
	roundTrip(t, c, "plain")

	p.DropReply(tcpfault.Contains([]byte("secret")))
	roundTrip(t, c, "plain again") // not matching: relayed
	_, err := c.Write([]byte("the secret"))
	require.NoError(t, err)
	requireClosed(t, c)
	require.Equal(t, 1, p.Dropped())

	roundTrip(t, other, "a secret") // the rule fired once
	roundTrip(t, dial(t, p), "another secret")
	require.Equal(t, 1, p.Dropped())
}

func TestProxy_DropReplyToLosesTheNextReplyOnThatConnection(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	c, other := dial(t, p), dial(t, p)
	roundTrip(t, c, "warm")
	roundTrip(t, other, "warm")

	p.DropReplyTo(func(chunk []byte) bool { return string(chunk) == "COMMIT" })
	roundTrip(t, other, "commit") // not matching: relayed
	_, err := c.Write([]byte("COMMIT"))
	require.NoError(t, err)
	requireClosed(t, c)
	require.Equal(t, 1, p.Dropped())

	roundTrip(t, other, "COMMIT") // the rule fired once
	require.Equal(t, 1, p.Dropped())
}

func TestProxy_RulesFireInTurn(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	p.DropReply(tcpfault.Contains([]byte("x")))
	p.DropReplyTo(tcpfault.Contains([]byte("y")))
	a, b := dial(t, p), dial(t, p)
	_, err := a.Write([]byte("x"))
	require.NoError(t, err)
	requireClosed(t, a)
	_, err = b.Write([]byte("y"))
	require.NoError(t, err)
	requireClosed(t, b)
	require.Equal(t, 2, p.Dropped())
	roundTrip(t, dial(t, p), "xy")
}

func TestProxy_UnreachableTargetClosesTheClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	p := tcpfault.Start(t, target)
	requireClosed(t, dial(t, p))
}

func TestProxy_CloseClosesEverything(t *testing.T) {
	t.Parallel()
	p := tcpfault.Start(t, startEcho(t))
	c := dial(t, p)
	roundTrip(t, c, "warm")
	held := dial(t, p)
	p.Freeze()
	_, err := held.Write([]byte("held"))
	require.NoError(t, err)

	p.Close()
	requireClosed(t, c)
	requireClosed(t, held)
	_, err = net.DialTimeout("tcp", p.Addr(), 10*time.Second)
	require.Error(t, err, "a closed proxy does not listen")
	p.Close() // twice is fine
}
