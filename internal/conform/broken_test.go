package conform_test

import (
	"testing"

	"github.com/idemkit/idemkit/fakeprovider"
	"github.com/idemkit/idemkit/internal/conform"
)

// Each deliberately broken server fails exactly the properties its bug
// breaks, and passes the others.
func TestRun_BrokenServersFailExactlyWhatTheyBreak(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		broken fakeprovider.Broken
		want   verdicts
	}{
		{"conforming", 0, allPass()},
		// Every duplicate runs, so none is ever answered in flight.
		{"check-then-act", fakeprovider.CheckThenAct, verdicts{conform.PropConcurrent: conform.Fail, conform.PropInFlight: conform.CannotTell}},
		{"unscoped keys", fakeprovider.Unscoped, verdicts{conform.PropScoped: conform.Fail}},
		{"no fingerprint", fakeprovider.NoFingerprint, verdicts{conform.PropChangedBody: conform.Fail}},
		{"replay with a different body", fakeprovider.ReplayDifferentBody, verdicts{conform.PropReplay: conform.Fail}},
		{"in-flight answer without Retry-After", fakeprovider.NoRetryAfter, verdicts{conform.PropInFlight: conform.Fail}},
		{"stored 5xx replayed forever", fakeprovider.StoreServerErrors, verdicts{conform.PropErrorStorage: conform.Fail}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t, "idemkit", tt.broken)
			rep := requireVerdicts(t, config(fake.URL, "idemkit"), with(allPass(), tt.want))
			if tt.broken != 0 && rep.OK() {
				t.Fatalf("a broken server passed: %s", conform.Summary(rep))
			}
		})
	}
}
