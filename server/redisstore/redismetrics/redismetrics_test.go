package redismetrics_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/redisstore/redismetrics"
)

func TestCollector_EvictedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testredis.Start(t, "maxmemory", "4mb", "maxmemory-policy", "allkeys-lru")
	client := srv.Client(t)
	store, err := redisstore.New(client, &redisstore.Config{AllowEviction: true})
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	_, err = redismetrics.New(store, reg)
	require.NoError(t, err)
	require.Equal(t, 0.0, gathered(t, reg, "idemkit_redis_scrape_error"))
	require.Equal(t, 0.0, gathered(t, reg, "idemkit_redis_evicted_keys_total"))

	value := strings.Repeat("x", 16<<10)
	for i := range 1024 {
		require.NoError(t, client.Set(ctx, fmt.Sprintf("filler:%d", i), value, 0).Err())
	}
	require.Positive(t, gathered(t, reg, "idemkit_redis_evicted_keys_total"))
}

type failing struct{}

func (failing) Evictions(context.Context) (int64, error) { return 0, errors.New("down") }

func TestCollector_ScrapeError(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	_, err := redismetrics.New(failing{}, reg)
	require.NoError(t, err)
	require.Equal(t, 1.0, gathered(t, reg, "idemkit_redis_scrape_error"))
	_, err = redismetrics.New(nil, reg)
	require.Error(t, err)
}

func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The alert rule of the package doc fires on an eviction.
func TestAlertRule_Promtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed: under CI=true the alert rules must be checked")
		}
		t.Skip("promtool is not installed: skipping the alert rule test (apt-get install prometheus)")
	}
	out, err := exec.CommandContext(t.Context(), promtool, "test", "rules", "testdata/alerts_test.yml").CombinedOutput()
	require.NoError(t, err, "%s", out)
}
