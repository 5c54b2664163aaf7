package idemkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// leaseOwner names the process holding a lease, as stored in lease_owner:
// "<host>/<pid>/<start>". host is the hostname (on Linux followed by the
// boot id and the pid namespace, so that a reboot, another machine with the
// same name or a container with a pid space of its own never counts as the
// same host); start is the process's start time where the OS tells it
// (Linux: field 22 of /proc/<pid>/stat, in clock ticks since boot), so a
// reused pid is not mistaken for the holder; elsewhere it is empty.
type leaseOwner struct {
	host  string
	pid   int
	start string
}

// String formats o as stored.
func (o leaseOwner) String() string {
	return o.host + "/" + strconv.Itoa(o.pid) + "/" + o.start
}

// parseLeaseOwner parses a stored lease_owner.
func parseLeaseOwner(s string) (leaseOwner, error) {
	rest, start, ok := cutLast(s, "/")
	if !ok {
		return leaseOwner{}, fmt.Errorf("lease owner %q: want host/pid/start", s)
	}
	host, pidText, ok := cutLast(rest, "/")
	if !ok || host == "" {
		return leaseOwner{}, fmt.Errorf("lease owner %q: want host/pid/start", s)
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pidText {
		return leaseOwner{}, fmt.Errorf("lease owner %q: pid %q is not a positive decimal", s, pidText)
	}
	for i := 0; i < len(start); i++ {
		if start[i] < '0' || start[i] > '9' {
			return leaseOwner{}, fmt.Errorf("lease owner %q: start time %q is not decimal", s, start)
		}
	}
	return leaseOwner{host: host, pid: pid, start: start}, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// currentLeaseOwner is the lease owner of this process. Its host is empty
// when the hostname is unknown: such a process never takes a lease over.
func currentLeaseOwner() leaseOwner {
	name, err := os.Hostname()
	if err != nil {
		name = ""
	}
	name = strings.ReplaceAll(name, "/", "_")
	pid := os.Getpid()
	o := leaseOwner{pid: pid, start: processStartTime(pid)}
	if name != "" {
		o.host = name + hostSuffix()
	}
	return o
}

// sameHost reports whether o runs on the host of self, in the same pid
// space, so that o.pid can be looked up here.
func (o leaseOwner) sameHost(self leaseOwner) bool {
	return self.host != "" && o.host == self.host
}

// hostPrefixRange returns the bounds of the lease_owner values of host:
// every "host/..." sorts in [host+"/", host+"0") ('0' follows '/').
func hostPrefixRange(host string) (lo, hi string) { return host + "/", host + "0" }
