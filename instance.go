package idemkit

import (
	"context"
	"os"
	"strings"
)

// A queue knows where it lives. Its first open records the host and the
// absolute path of the file; every intent records the instance (host and
// path) that queued it. A copy of the file opened on another host or at
// another path (a backup restored elsewhere, a disk image cloned) does not send the
// intents it did not start: they may have been sent already, and the
// server's window may be over, so sending them again could charge twice.
// Client.Adopt sends them anyway, on purpose. The host is named by its
// hostname and machine id: renaming the host, or reaching the file by
// another path (a bind mount elsewhere), also counts as elsewhere. A backup
// restored in place (same host, same path) passes this check: the
// generation counter of generation.go catches it.

// hostID names this host: the hostname and, where there is one, the
// machine id (which a cloned disk image shares, but a copied file does
// not move with).
func hostID() string {
	name, _ := os.Hostname()
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return name + "#" + id
			}
		}
	}
	return name
}

// Adopt makes pending intents queued by the queue file at another host or
// path (see [QueueError.Foreign]) this instance's own, so that they are
// sent from here: the intent with the given id, or every such intent when
// id is empty. It returns how many it adopted. Adopt only intents you know
// were never sent, or whose server still remembers their key: the window
// is counted from their first attempt, wherever it happened.
func (c *Client) Adopt(ctx context.Context, id string) (int, error) {
	if c.closed() {
		return 0, ErrClosed
	}
	n, err := c.q.Adopt(ctx, id)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		c.log.Info("idemkit: adopted intents queued elsewhere", "count", n, "here", c.q.Self())
		c.poke()
	}
	return n, nil
}
