package faultproxy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecide_Pure(t *testing.T) {
	t.Parallel()

	rates := Rates{DropResponse: 0.2, Reset: 0.2, Unavailable: 0.2, Delay: 0.2, SlowWrite: 0.1}
	for _, m := range []Mode{ModeSequence, ModeKeyed} {
		for n := uint64(1); n <= 200; n++ {
			info := RequestInfo{Seq: n, Method: "POST", Path: "/p", Key: "k", Attempt: int(n)}
			a := decide(42, m, rates, time.Second, info)
			b := decide(42, m, rates, time.Second, info)
			require.Equal(t, a, b, "mode %s n %d", m, n)
			require.True(t, a.action.valid())
			require.GreaterOrEqual(t, a.delay, time.Duration(0))
			require.LessOrEqual(t, a.delay, time.Second)
		}
	}
}

func TestDecide_RateOne(t *testing.T) {
	t.Parallel()

	for _, a := range faultOrder {
		var r Rates
		switch a {
		case ActionDropResponse:
			r.DropResponse = 1
		case ActionReset:
			r.Reset = 1
		case ActionUnavailable:
			r.Unavailable = 1
		case ActionDelay:
			r.Delay = 1
		case ActionSlowWrite:
			r.SlowWrite = 1
		}
		for n := uint64(1); n <= 100; n++ {
			got := decide(7, ModeSequence, r, time.Millisecond, RequestInfo{Seq: n})
			require.Equal(t, a, got.action, "n %d", n)
		}
	}
}

func TestDecide_KeyedIgnoresSeq(t *testing.T) {
	t.Parallel()

	rates := Rates{DropResponse: 0.3, Reset: 0.3}
	for attempt := 1; attempt <= 50; attempt++ {
		a := decide(9, ModeKeyed, rates, time.Second, RequestInfo{Seq: 1, Key: "k", Attempt: attempt})
		b := decide(9, ModeKeyed, rates, time.Second, RequestInfo{Seq: 999, Key: "k", Attempt: attempt})
		require.Equal(t, a, b, "attempt %d", attempt)
	}
}

func TestUnquoteKey(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ in, want string }{
		{"abc", "abc"},
		{`"abc"`, "abc"},
		{`"a\"b"`, `a"b`},
		{`"a\\b"`, `a\b`},
		{`"a\b"`, `"a\b"`}, // invalid escape: unchanged
		{`"a"b"`, `"a"b"`}, // bare quote inside: unchanged
		{`"`, `"`},
		{"", ""},
	} {
		require.Equal(t, tc.want, unquoteKey(tc.in), "unquoteKey(%q)", tc.in)
	}
}
