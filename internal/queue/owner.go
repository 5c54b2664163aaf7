package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// Owner names the process holding a lease, as stored in lease_owner:
// "<host>/<pid>/<start>". host is the hostname (on Linux followed by the
// boot id and the pid namespace, so that a reboot, another machine with the
// same name or a container with a pid space of its own never counts as the
// same host); start is the process's start time where the OS tells it
// (Linux: field 22 of /proc/<pid>/stat, in clock ticks since boot), so a
// reused pid is not mistaken for the holder; elsewhere it is empty.
type Owner struct {
	Host  string
	PID   int
	Start string
}

// String formats o as stored.
func (o Owner) String() string {
	return o.Host + "/" + strconv.Itoa(o.PID) + "/" + o.Start
}

// ParseOwner parses a stored lease_owner.
func ParseOwner(s string) (Owner, error) {
	rest, start, ok := cutLast(s, "/")
	if !ok {
		return Owner{}, fmt.Errorf("lease owner %q: want host/pid/start", s)
	}
	host, pidText, ok := cutLast(rest, "/")
	if !ok || host == "" {
		return Owner{}, fmt.Errorf("lease owner %q: want host/pid/start", s)
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pidText {
		return Owner{}, fmt.Errorf("lease owner %q: pid %q is not a positive decimal", s, pidText)
	}
	for i := 0; i < len(start); i++ {
		if start[i] < '0' || start[i] > '9' {
			return Owner{}, fmt.Errorf("lease owner %q: start time %q is not decimal", s, start)
		}
	}
	return Owner{Host: host, PID: pid, Start: start}, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// SameHost reports whether o runs on the host of self, in the same pid
// space, so that o.pid can be looked up here.
func (o Owner) SameHost(self Owner) bool {
	return self.Host != "" && o.Host == self.Host
}

// HostPrefixRange returns the bounds of the lease_owner values of host:
// every "host/..." sorts in [host+"/", host+"0") ('0' follows '/').
func HostPrefixRange(host string) (lo, hi string) { return host + "/", host + "0" }
