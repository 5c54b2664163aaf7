package conform_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/fakeprovider"
	"github.com/idemkit/idemkit/internal/conform"
	"github.com/idemkit/idemkit/internal/testkit"
)

// execDelay is how long a fake's execution takes: long enough that the
// battery's duplicates overlap the first one.
const execDelay = 500 * time.Millisecond

// failBody is the --error-data of the tests: the fakes answer it 500.
var failBody = []byte(`{"amount": 4000, "currency": "USD", "fail": true}`)

func failWhen(body []byte) int {
	if bytes.Contains(body, []byte(`"fail": true`)) {
		return http.StatusInternalServerError
	}
	return 0
}

// config is the battery the tests run: alice, with bob as the second
// caller, and a body the fakes refuse.
func config(url, profile string) *conform.Config {
	return &conform.Config{
		URL:         url,
		Dialect:     profile,
		Header:      http.Header{"Authorization": {"Bearer alice"}, "Content-Type": {"application/json"}},
		OtherHeader: http.Header{"Authorization": {"Bearer bob"}},
		Body:        []byte(`{"amount": 4000, "currency": "USD", "description": "check"}`),
		ErrorBody:   failBody,
	}
}

// verdicts is what every test compares: the full verdict set.
type verdicts = map[string]conform.Verdict

// allPass is the verdict set of a conforming API, window told.
func allPass() verdicts {
	return verdicts{
		conform.PropReplay: conform.Pass, conform.PropWindow: conform.Pass, conform.PropChangedBody: conform.Pass,
		conform.PropConcurrent: conform.Pass, conform.PropInFlight: conform.Pass, conform.PropScoped: conform.Pass,
		conform.PropHostileKeys: conform.Pass, conform.PropErrorStorage: conform.Pass,
	}
}

func with(v verdicts, changes verdicts) verdicts {
	out := verdicts{}
	for k, x := range v {
		out[k] = x
	}
	for k, x := range changes {
		out[k] = x
	}
	return out
}

// requireVerdicts runs cfg and requires exactly want, printing the report
// when it differs.
func requireVerdicts(t *testing.T, cfg *conform.Config, want verdicts) *conform.Report {
	t.Helper()
	rep, err := conform.Run(testkit.Ctx(t), cfg)
	require.NoError(t, err)
	var text strings.Builder
	require.NoError(t, conform.WriteText(&text, rep, false))
	t.Logf("report:\n%s", text.String())
	require.Equal(t, want, rep.Verdicts(), "report:\n%s", text.String())
	require.LessOrEqual(t, rep.Requests, rep.MaxRequests)
	return rep
}

func startFake(t *testing.T, profile string, broken fakeprovider.Broken) *fakeprovider.Server {
	t.Helper()
	return fakeprovider.Start(t, profile, &fakeprovider.Config{Delay: execDelay, ErrorWhenFunc: failWhen, Broken: broken})
}
