package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

func TestNew_Validate(t *testing.T) {
	t.Parallel()
	st := mwNewStore(t, mwSQLite).store

	_, err := server.New(st, nil)
	require.ErrorContains(t, err, "PrincipalFunc")
	_, err = server.New(st, &server.Config{})
	require.ErrorContains(t, err, "PrincipalFunc")
	_, err = server.New(nil, &server.Config{PrincipalFunc: mwPrincipal})
	require.ErrorContains(t, err, "store")
	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, Mode: server.Mode(7)})
	require.ErrorContains(t, err, "Config.Mode")
	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, LeaseDuration: 48 * time.Hour})
	require.ErrorContains(t, err, "Config.LeaseDuration")
	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, ReplayHeaders: []string{"Bad Header"}})
	require.ErrorContains(t, err, "Config.ReplayHeaders")

	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, Window: -time.Hour})
	require.ErrorContains(t, err, "Config.Window")
	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, LockTimeout: -time.Second})
	require.ErrorContains(t, err, "Config.LockTimeout")
	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, MaxFingerprintBytes: -1, MaxResponseBytes: -1})
	require.ErrorContains(t, err, "Config.MaxFingerprintBytes")
	require.ErrorContains(t, err, "Config.MaxResponseBytes", "every invalid field is named")

	m, err := server.New(st, &server.Config{PrincipalFunc: mwPrincipal})
	require.NoError(t, err)
	require.Equal(t, server.ModeLease, server.ConfigOf(m).Mode)
	require.Equal(t, 24*time.Hour, server.ConfigOf(m).Window)
	require.Equal(t, 30*time.Second, server.ConfigOf(m).LeaseDuration)
	require.Equal(t, 3*time.Second, server.ConfigOf(m).LockTimeout)
	require.Equal(t, int64(1<<20), server.ConfigOf(m).MaxFingerprintBytes)
	require.Equal(t, 1<<20, server.ConfigOf(m).MaxResponseBytes)
	require.Equal(t, "86400", server.WindowOf(m))
	require.False(t, server.ReplayHeadersOf(m)["Set-Cookie"])
	require.True(t, server.ReplayHeadersOf(m)["Location"])

	// Set-Cookie and Authorization are never stored, even when listed.
	m, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, ReplayHeaders: []string{"set-cookie", "authorization", "x-custom"}})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"X-Custom": true}, server.ReplayHeadersOf(m))
}

func TestConfig_WithDefaults(t *testing.T) {
	t.Parallel()
	var nilCfg *server.Config
	c := nilCfg.WithDefaults()
	require.Equal(t, 24*time.Hour, c.Window)
	require.NotNil(t, c.Logger)
	require.Nil(t, c.EndpointFunc, "keys belong to the principal unless the API names operations")

	orig := &server.Config{Window: time.Hour, ReplayHeaders: []string{"Location"}}
	c = orig.WithDefaults()
	require.Equal(t, time.Hour, c.Window)
	c.ReplayHeaders[0] = "changed"
	require.Equal(t, "Location", orig.ReplayHeaders[0], "WithDefaults must copy")
	require.Zero(t, orig.LeaseDuration, "WithDefaults must not modify its receiver")
}

func TestLegacyPatternEndpoint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ method, pattern, path, want string }{
		{"POST", "POST /payments", "/payments", "POST /payments"},
		{"POST", "/payments", "/payments", "POST /payments"},
		{"PUT", "PUT /items/{id}", "/items/7", "PUT /items/{id}"},
		{"POST", "POST example.com/payments", "/payments", "POST /payments"},
		{"POST", "example.com/", "/x/y", "POST /"},
		{"POST", "", "/raw/path", "POST /raw/path"},
	} {
		r := httptest.NewRequest(tt.method, tt.path, nil)
		r.Pattern = tt.pattern
		require.Equal(t, tt.want, legacyPatternEndpoint(r), "pattern %q", tt.pattern)
	}
}

// A handler that returns without writing anything because its client went
// away (the usual `case <-r.Context().Done(): return`) produced no outcome.
// Storing it as an empty 200 would replay "success" to the retry although
// the work never happened (and, in transactional mode, commit the claim
// without the effect). The claim must be released or rolled back instead,
// so that the retry runs the handler.
func TestMiddleware_EmptyAnswerToGoneClientIsNotStored(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.LeaseDuration = 20 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		firstCtx, cancelFirst := context.WithCancel(ctx)
		firstDone := make(chan error, 1)
		go func() {
			_, err := b.send(firstCtx, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
			firstDone <- err
		}()
		require.Equal(t, "alice", mwRecv(t, b.started))
		cancelFirst()
		require.Error(t, mwRecv(t, firstDone))

		// Wait until the middleware has finished with the first request.
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if evs := b.eventsCopy(); len(evs) > 0 {
				require.Len(t, evs, 1)
				require.NotEqual(t, server.OutcomeExecuted, evs[0].Outcome, "an empty answer to a gone client must not be stored")
				break
			}
			require.True(t, time.Now().Before(deadline), "the first request never finished")
			<-tick.C
		}

		close(b.release)
		res := b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status, "body %s", res.Body)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed), "the retry must run the handler, not replay an empty 200")
		require.Equal(t, 1, b.count(t, mwCountEffects))
	})
}
