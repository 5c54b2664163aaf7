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

// Stripe's API takes forms: the changed body bumps the amount in the form.
func TestRun_FormBodyAgainstTheStripeFake(t *testing.T) {
	t.Parallel()
	fake := startFake(t, "stripe", 0)
	cfg := config(fake.URL, "stripe")
	cfg.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cfg.Body = []byte("amount=4000&currency=usd")
	cfg.ErrorBody = nil
	rep := requireVerdicts(t, cfg, with(allPass(), verdicts{conform.PropErrorStorage: conform.CannotTell}))
	res, _ := rep.Result(conform.PropChangedBody)
	require.Equal(t, "amount=4001&currency=usd", res.Evidence[1].ReqBody)
}
