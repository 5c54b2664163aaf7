package idemkit

import (
	"os"
	"strings"

	"github.com/idemkit/idemkit/internal/queue"
)

// leaseOwner names the process holding a lease (queue.Owner).
type leaseOwner = queue.Owner

// parseLeaseOwner parses a stored lease_owner.
func parseLeaseOwner(s string) (leaseOwner, error) { return queue.ParseOwner(s) }

// currentLeaseOwner is the lease owner of this process. Its host is empty
// when the hostname is unknown: such a process never takes a lease over.
func currentLeaseOwner() leaseOwner {
	name, err := os.Hostname()
	if err != nil {
		name = ""
	}
	name = strings.ReplaceAll(name, "/", "_")
	pid := os.Getpid()
	o := leaseOwner{PID: pid, Start: processStartTime(pid)}
	if name != "" {
		o.Host = name + hostSuffix()
	}
	return o
}
