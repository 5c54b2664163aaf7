package idemkit

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/internal/queue"
	"github.com/stretchr/testify/require"
)

func TestLeaseOwner_ParseAndFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want leaseOwner
		err  bool
	}{
		{in: "web-1/4242/987654", want: leaseOwner{Host: "web-1", PID: 4242, Start: "987654"}},
		{in: "web-1@6c1b-42:4026531836/1/0", want: leaseOwner{Host: "web-1@6c1b-42:4026531836", PID: 1, Start: "0"}},
		{in: "mac.local/77/", want: leaseOwner{Host: "mac.local", PID: 77, Start: ""}},
		{in: "a/b/12/34", want: leaseOwner{Host: "a/b", PID: 12, Start: "34"}}, // the last two fields are pid and start
		{in: "", err: true},
		{in: "web-1", err: true},
		{in: "web-1/4242", err: true},
		{in: "/4242/1", err: true},
		{in: "web-1/0/1", err: true},
		{in: "web-1/-3/1", err: true},
		{in: "web-1/+3/1", err: true},
		{in: "web-1/042/1", err: true},
		{in: "web-1/x/1", err: true},
		{in: "web-1/42/1a", err: true},
		{in: "web-1/99999999999999999999/1", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseLeaseOwner(tc.in)
			if tc.err {
				require.Error(t, err, "got %+v want an error", got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.in, got.String(), "format(parse(s)) == s")
		})
	}
}

func TestLeaseOwner_Current(t *testing.T) {
	t.Parallel()
	self := currentLeaseOwner()
	require.Equal(t, os.Getpid(), self.PID)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(self.Host, host), "host %q starts with the hostname %q", self.Host, host)
	got, err := parseLeaseOwner(self.String())
	require.NoError(t, err)
	require.Equal(t, self, got)
	require.True(t, got.SameHost(self))
	require.False(t, leaseOwner{Host: "elsewhere", PID: self.PID}.SameHost(self))
	require.False(t, got.SameHost(leaseOwner{PID: 1}), "a process without a hostname matches no host")
	if runtime.GOOS == "linux" {
		require.NotEmpty(t, self.Start, "Linux knows the start time")
		raw, err := os.ReadFile("/proc/self/stat")
		require.NoError(t, err)
		require.Equal(t, strings.Fields(string(raw))[21], self.Start, "field 22 of /proc/self/stat")
		require.Contains(t, self.Host, "@", "Linux qualifies the hostname with boot id and pid namespace")
	}
	lo, hi := queue.HostPrefixRange(self.Host)
	require.True(t, lo <= self.String() && self.String() < hi, "%q within [%q, %q)", self.String(), lo, hi)
	require.False(t, lo <= self.Host+"-2/1/1" && self.Host+"-2/1/1" < hi, "a longer hostname is another host")
}

func TestProcessGone(t *testing.T) {
	t.Parallel()
	if !takeoverSupported {
		t.Skip("no liveness check on " + runtime.GOOS)
	}
	self := currentLeaseOwner()

	gone, why := processGone(self.PID, self.Start)
	require.False(t, gone, "this process, with its own start time, is alive (%s)", why)
	gone, _ = processGone(self.PID, "")
	require.False(t, gone, "this process, start time unknown, is alive")
	gone, _ = processGone(0, "")
	require.False(t, gone, "pid 0 is never checked")
	gone, _ = processGone(-1, "")
	require.False(t, gone, "pid -1 is never checked")

	pid := deadPid(t)
	gone, why = processGone(pid, "")
	require.True(t, gone, "child %d exited and was reaped", pid)
	require.Equal(t, "no such process", why)
}

func FuzzParseLeaseOwner(f *testing.F) {
	for _, s := range []string{"web-1/4242/987654", "h/1/", "a/b/12/34", "", "/", "//", "h/0/1", "h/1/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := parseLeaseOwner(s)
		if err != nil {
			return
		}
		require.Equal(t, s, o.String())
		require.Positive(t, o.PID)
		require.NotEmpty(t, o.Host)
	})
}
