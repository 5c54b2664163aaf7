//go:build linux

package idemkit

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	tail := " 1 1 0 -1 4194560 100 0 0 0 3 1 0 0 20 0 1 0 0 %s 1000 100 18446744073709551615"
	for _, tc := range []struct {
		name, in  string
		state     byte
		start     string
		wantError bool
	}{
		{name: "plain", in: "4242 (idemkit) S" + fmt.Sprintf(tail, "987654"), state: 'S', start: "987654"},
		{name: "comm with spaces and parens", in: "4242 (a) (b c) Z" + fmt.Sprintf(tail, "12"), state: 'Z', start: "12"},
		{name: "truncated", in: "4242 (idemkit) S 1 1", wantError: true},
		{name: "no comm", in: "4242 idemkit S", wantError: true},
		{name: "start not a number", in: "4242 (idemkit) S" + fmt.Sprintf(tail, "x"), wantError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := parseProcStat([]byte(tc.in))
			if tc.wantError {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, string(tc.state), string(st.state))
			require.Equal(t, tc.start, st.start)
		})
	}
}

// TestProcessGone_Linux: a pid whose start time differs from the holder's
// was reused, and a zombie (exited, not reaped) is dead.
func TestProcessGone_Linux(t *testing.T) {
	t.Parallel()
	self := currentLeaseOwner()
	start, err := strconv.ParseUint(self.Start, 10, 64)
	require.NoError(t, err)
	gone, why := processGone(self.PID, strconv.FormatUint(start+1, 10))
	require.True(t, gone, "a pid whose start time differs belongs to another process")
	require.Contains(t, why, "pid reused")

	// A child that exited but was not reaped yet (a zombie) is dead too.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Wait() }()
	zstart := processStartTime(cmd.Process.Pid)
	testkit.Eventually(t, 20*time.Second, func() bool {
		st, err := readProcStat(cmd.Process.Pid)
		return err == nil && st.state == 'Z'
	}, "the child became a zombie")
	gone, why = processGone(cmd.Process.Pid, zstart)
	require.True(t, gone, "a zombie is dead")
	require.Contains(t, why, "not yet reaped")
}
