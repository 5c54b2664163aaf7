package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idemkit/idemkit/internal/testpg"
)

// docsDir is the repository's docs directory.
const docsDir = "../../docs"

// metricRef is one metric a rule or a panel names, with the label values
// it selects by equality (or by an alternation of literals).
type metricRef struct {
	name   string
	labels map[string][]string
	where  string
}

var (
	// selectorRe finds a metric name and its optional {matchers}.
	selectorRe = regexp.MustCompile(`\b(idemkit_[a-z0-9_]+)(\{[^}]*\})?`)
	// matcherRe finds label="value" and label=~"a|b" matchers.
	matcherRe = regexp.MustCompile(`([a-z_]+)\s*(=~|=)\s*"([^"]*)"`)
	// literalAltRe is a regex that is an alternation of plain words.
	literalAltRe = regexp.MustCompile(`^[a-z_]+(\|[a-z_]+)*$`)
)

// metricRefs returns the metrics expr names.
func metricRefs(expr, where string) []metricRef {
	var refs []metricRef
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		ref := metricRef{name: m[1], labels: map[string][]string{}, where: where}
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			label, op, value := mm[1], mm[2], mm[3]
			if label == "store" || (op == "=~" && !literalAltRe.MatchString(value)) {
				continue
			}
			ref.labels[label] = strings.Split(value, "|")
		}
		refs = append(refs, ref)
	}
	return refs
}

// docsMetricRefs returns every metric the alert rules and the dashboard
// name.
func docsMetricRefs(t *testing.T) []metricRef {
	t.Helper()
	var refs []metricRef

	raw, err := os.ReadFile(filepath.Join(docsDir, "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Expr, "rule %s%s", r.Alert, r.Record)
			refs = append(refs, metricRefs(r.Expr, "alert "+r.Alert)...)
		}
	}

	raw, err = os.ReadFile(filepath.Join(docsDir, "grafana", "idemkit.json"))
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(raw, &dash))
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				where = "panel " + title
			}
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					refs = append(refs, metricRefs(s, where)...)
				}
				walk(x, where)
			}
		case []any:
			for _, x := range v {
				walk(x, where)
			}
		}
	}
	walk(dash, "dashboard")
	require.Greater(t, len(refs), 20, "the rules and the dashboard name the metrics")
	return refs
}

// partitionedOnly are the metrics a store exports only on a PostgreSQL
// table partitioned by day, which the payments example does not run on:
// server/prommetrics's TestStoreCollector_PartitionsAhead shows them
// exported from the first scrape there.
var partitionedOnly = map[string]bool{"idemkit_store_partitions_ahead_seconds": true}

// recovererOnly reports whether name is a metric of the recoverer
// (prommetrics.RecovererCollector): the payments example exports them only
// with --recover, which runs one. Without a recoverer there is nothing to
// watch, and a zero "last success" would make IdemkitRecovererFailing fire
// for a recoverer that does not exist; so the rules and panels over them
// have no series there, and the runs with --recover below check them.
func recovererOnly(name string) bool { return strings.HasPrefix(name, "idemkit_recoverer_") }

// exposition is a /metrics page: the metric names it declares (a
// histogram's _bucket, _sum and _count included) and its series lines.
type exposition struct {
	names  map[string]bool
	series []string
}

func parseExposition(body string) exposition {
	e := exposition{names: map[string]bool{}}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			e.names[f[0]] = true
			if f[1] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					e.names[f[0]+s] = true
				}
			}
			continue
		}
		if line != "" && !strings.HasPrefix(line, "#") {
			e.series = append(e.series, line)
		}
	}
	return e
}

// has reports whether a series of ref.name carries each label value ref
// selects.
func (e exposition) has(ref metricRef, label, value string) bool {
	for _, s := range e.series {
		if (strings.HasPrefix(s, ref.name+"{") || strings.HasPrefix(s, ref.name+" ")) && strings.Contains(s, label+`="`+value+`"`) {
			return true
		}
	}
	return false
}

// Every metric the alert rules and the Grafana dashboard name is on the
// payments example's /metrics from its first scrape, before any request,
// with every label value they select: a rule over a metric that is never
// exported, or a vector without its series yet, would never fire. The
// waiting gauges and refusals are there whether --wait is on or not (0
// waiting when it is off); the recoverer's metrics are there exactly when
// --recover runs a recoverer (see recovererOnly).
func TestMetrics_DocsNameOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	refs := docsMetricRefs(t)
	bin := buildBinary(t)
	sqlite := func(t *testing.T) []string { return []string{"--db", filepath.Join(t.TempDir(), "payments.db")} }
	postgres := func(t *testing.T) []string { return []string{"--dsn", testpg.SchemaDSN(t)} }
	recoverWait := []string{"--mode", "lease", "--recover", "--wait", "5s"}
	for _, tc := range []struct {
		name, store string
		args        func(t *testing.T) []string
		flags       []string
		recoverer   bool
	}{
		{"sqlite", "sqlite", sqlite, nil, false},
		{"postgres", "postgres", postgres, nil, false},
		{"sqlite/recover+wait", "sqlite", sqlite, recoverWait, true},
		{"postgres/recover+wait", "postgres", postgres, recoverWait, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append(tc.args(t), tc.flags...), "--addr", "127.0.0.1:0", "--metrics")
			p := startBinary(t, bin, args...)
			resp, err := http.Get(p.url + "/metrics")
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, resp.Body.Close())
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
			e := parseExposition(string(body))

			var missing []string
			for _, ref := range refs {
				if partitionedOnly[ref.name] || (recovererOnly(ref.name) && !tc.recoverer) {
					continue
				}
				if !e.names[ref.name] {
					missing = append(missing, ref.name+" ("+ref.where+")")
					continue
				}
				for label, values := range ref.labels {
					for _, v := range values {
						if !e.has(ref, label, v) {
							missing = append(missing, ref.name+`{`+label+`="`+v+`"} (`+ref.where+")")
						}
					}
				}
			}
			sort.Strings(missing)
			require.Empty(t, missing, "named by docs/ but not exported at start by payments --metrics %v", tc.flags)
			require.Contains(t, string(body), `store="`+tc.store+`"`)
			if !tc.recoverer {
				for name := range e.names {
					require.False(t, recovererOnly(name), "%s exported without a recoverer", name)
				}
			}
			p.stop(t)
		})
	}
}

// Without --metrics there is no /metrics.
func TestMetrics_OffByDefault(t *testing.T) {
	t.Parallel()
	p := startBinary(t, buildBinary(t), "--db", filepath.Join(t.TempDir(), "payments.db"), "--addr", "127.0.0.1:0")
	resp, err := http.Get(p.url + "/metrics")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NotEqual(t, http.StatusOK, resp.StatusCode)
	p.stop(t)
}
