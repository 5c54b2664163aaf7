package prommetrics_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool (Debian's prometheus package; .ci/run
// installs it). It skips the test when promtool is missing, except in CI.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found in CI: %v", err)
		}
		t.Skip("promtool not installed")
	}
	return p
}

// rulesDir is the repository's docs/prometheus.
var rulesDir = filepath.Join("..", "..", "docs", "prometheus")

// The shipped alert rules are valid Prometheus rules, and each alert fires
// (and stays quiet) on the series of docs/prometheus/alerts_test.yml.
func TestAlertRules_Promtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	out, err := exec.Command(bin, "check", "rules", filepath.Join(rulesDir, "alerts.yml")).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
	cmd := exec.Command(bin, "test", "rules", "alerts_test.yml")
	cmd.Dir = rulesDir
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
}

// Every alert links its own entry of docs/runbook.md, and every entry
// belongs to an alert.
func TestAlertRules_RunbookEntries(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(rulesDir, "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	book, err := os.ReadFile(filepath.Join(rulesDir, "..", "runbook.md"))
	require.NoError(t, err)
	var headings []string
	for _, line := range strings.Split(string(book), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings = append(headings, h)
		}
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			require.Equal(t, "https://github.com/idemkit/idemkit/blob/main/docs/runbook.md#"+strings.ToLower(r.Alert),
				r.Annotations["runbook_url"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		}
	}
	require.ElementsMatch(t, alerts, headings, "one runbook heading per alert")
}
