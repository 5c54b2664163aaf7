//go:build linux

package idemkit

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// takeoverSupported: this OS can tell a dead lease holder from a live one.
const takeoverSupported = true

// hostSuffix qualifies the hostname with the boot id and the pid namespace:
// a pid means this process only within both.
func hostSuffix() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	b := strings.TrimSpace(string(boot))
	n := strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	if b == "" && n == "" {
		return ""
	}
	return "@" + b + ":" + n
}

// processStartTime returns field 22 of /proc/<pid>/stat (the start time in
// clock ticks since boot), or "" if it cannot be read.
func processStartTime(pid int) string {
	st, err := readProcStat(pid)
	if err != nil {
		return ""
	}
	return st.start
}

// procStat holds the fields of /proc/<pid>/stat the takeover needs.
type procStat struct {
	state byte   // field 3: R, S, D, Z (zombie), X (dead), ...
	start string // field 22: start time, clock ticks since boot
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat parses /proc/<pid>/stat: "pid (comm) state ...", where comm
// may hold spaces and parentheses, so fields are counted from its last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("/proc stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3, so field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc stat: %d fields after comm, want at least 20", len(f))
	}
	if _, err := strconv.ParseUint(f[19], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("/proc stat: start time %q", f[19])
	}
	return procStat{state: f[0][0], start: f[19]}, nil
}

// processGone reports whether the process pid that started at start ("" if
// unknown) has ended, and why. It errs on the side of alive: when it
// cannot tell, the lease is left to run out.
func processGone(pid int, start string) (bool, string) {
	if pid <= 0 {
		return false, ""
	}
	kerr := syscall.Kill(pid, 0)
	if errors.Is(kerr, syscall.ESRCH) {
		return true, "no such process"
	}
	// nil or EPERM (another user's): a process with that pid exists.
	st, err := readProcStat(pid)
	switch {
	case kerr == nil && errors.Is(err, fs.ErrNotExist):
		return true, "exited" // between the two looks
	case err != nil:
		return false, ""
	case st.state == 'Z' || st.state == 'X':
		return true, "exited (not yet reaped)"
	case start != "" && st.start != start:
		return true, "pid reused by another process (start time " + st.start + ", holder's " + start + ")"
	}
	return false, ""
}
