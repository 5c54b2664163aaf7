package conform_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/conform"
)

// Every fake speaks its provider's dialect as documented, and the battery
// under that profile passes it. The IETF draft and PayPal publish no
// window: "cannot tell", which is not required.
func TestRun_PassesEveryFakeUnderItsProfile(t *testing.T) {
	t.Parallel()
	for _, profile := range conform.DialectNames {
		t.Run(profile, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t, profile, 0)
			want := allPass()
			if profile == "ietf" || profile == "paypal" {
				want[conform.PropWindow] = conform.CannotTell
			}
			if profile == "stripe" {
				// Stripe documents storing 500s ("including 500 errors"):
				// the battery calls that what it is.
				want[conform.PropErrorStorage] = conform.Fail
			}
			if profile == "checkout" || profile == "paypal" || profile == "adyen" || profile == "ietf" {
				// No replay marker: a replayed 500 and a new one look alike.
				want[conform.PropErrorStorage] = conform.CannotTell
			}
			rep := requireVerdicts(t, config(fake.URL, profile), want)
			require.True(t, rep.OK() == (want[conform.PropErrorStorage] != conform.Fail))
			// One execution per key the battery accepted: replay, changed
			// body, concurrent, two for scoped (two callers), two for the
			// refused request (5xx not stored) or one (stored).
			require.LessOrEqual(t, fake.Executions(), 7)
		})
	}
}
