package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"
)

// The monitoring files that ship in deploy/.
const (
	dashboardFile = "../../deploy/grafana/sqsonce.json"
	rulesFile     = "../../deploy/prometheus/sqsonce.rules.yml"
	rulesTestFile = "../../deploy/prometheus/sqsonce.rules.test.yml"
)

// exported is what one scrape of /metrics holds: for each name a query can
// select (a histogram's _bucket, _sum and _count, a summary's own name,
// _sum and _count), the labels of each of its series.
type exported map[string][]map[string]string

// parseExposition reads the text exposition format.
func parseExposition(text string) (exported, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	exp := exported{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			with := func(k, v string) map[string]string {
				l := map[string]string{k: v}
				for a, b := range labels {
					l[a] = b
				}
				return l
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, b := range m.GetHistogram().GetBucket() {
					exp[name+"_bucket"] = append(exp[name+"_bucket"], with("le", model.SampleValue(b.GetUpperBound()).String()))
				}
				exp[name+"_bucket"] = append(exp[name+"_bucket"], with("le", "+Inf"))
				exp[name+"_sum"] = append(exp[name+"_sum"], labels)
				exp[name+"_count"] = append(exp[name+"_count"], labels)
			case dto.MetricType_SUMMARY:
				for _, q := range m.GetSummary().GetQuantile() {
					exp[name] = append(exp[name], with("quantile", model.SampleValue(q.GetQuantile()).String()))
				}
				exp[name+"_sum"] = append(exp[name+"_sum"], labels)
				exp[name+"_count"] = append(exp[name+"_count"], labels)
			default:
				exp[name] = append(exp[name], labels)
			}
		}
	}
	return exp, nil
}

// targetLabels are the labels Prometheus gives every series of a scrape
// target: never in the exposition, always in a query.
var targetLabels = map[string]bool{"job": true, "instance": true}

// deploymentLabels hold names of a deployment's own (its queues, its
// targets): a query or a test may use any value of them.
var deploymentLabels = map[string]bool{"job": true, "instance": true, "queue": true, "dead_letter_queue": true}

// monitoringCheck collects what the monitoring files name that the
// exposition does not hold.
type monitoringCheck struct {
	exp      exported
	problems []string
}

func (c *monitoringCheck) fail(where, format string, args ...any) {
	c.problems = append(c.problems, where+": "+fmt.Sprintf(format, args...))
}

// labelsOf returns the label names of a metric's series.
func (c *monitoringCheck) labelsOf(name string) map[string]bool {
	ls := map[string]bool{}
	for _, s := range c.exp[name] {
		for l := range s {
			ls[l] = true
		}
	}
	return ls
}

// selector checks that sel names an exported metric, labels it has, and
// (for = and =~ matchers of a fixed value) a value one of its series has.
// valueFree labels may hold any value. It returns the labels of the metric.
func (c *monitoringCheck) selector(where string, sel promqlSelector, valueFree map[string]bool) map[string]bool {
	series, ok := c.exp[sel.Name]
	if !ok {
		c.fail(where, "names the metric %s, which sqsonce does not export", sel.Name)
		return nil
	}
	have := c.labelsOf(sel.Name)
	for _, m := range sel.Matchers {
		if m.Label == "__name__" {
			continue
		}
		if !have[m.Label] && !targetLabels[m.Label] {
			c.fail(where, "matches the label %s of %s, which has only %v", m.Label, sel.Name, sortedKeys(have))
			continue
		}
		if valueFree[m.Label] || strings.Contains(m.Value, "$") || (m.Op != "=" && m.Op != "=~") {
			continue
		}
		match := func(v string) bool { return v == m.Value }
		if m.Op == "=~" {
			re, err := regexp.Compile("^(?:" + m.Value + ")$")
			if err != nil {
				c.fail(where, "bad regular expression %q: %v", m.Value, err)
				continue
			}
			match = re.MatchString
		}
		found := false
		var values []string
		for _, s := range series {
			found = found || match(s[m.Label])
			if !slices.Contains(values, s[m.Label]) {
				values = append(values, s[m.Label])
			}
		}
		if !found {
			sort.Strings(values)
			c.fail(where, "matches %s%s%q of %s, which takes only %q", m.Label, m.Op, m.Value, sel.Name, values)
		}
	}
	return have
}

// expr checks a PromQL expression: its metrics, the labels it matches,
// groups and matches by, and the labels its output is said to carry
// (legends, annotations).
func (c *monitoringCheck) expr(where, expr string, outputLabels []string) {
	refs, err := promqlNames(expr)
	if err != nil {
		c.fail(where, "cannot read %q: %v", expr, err)
		return
	}
	if len(refs.Selectors) == 0 {
		c.fail(where, "selects no metric: %q", expr)
	}
	known := map[string]bool{}
	for l := range targetLabels {
		known[l] = true
	}
	for _, sel := range refs.Selectors {
		for l := range c.selector(where, sel, deploymentLabels) {
			known[l] = true
		}
	}
	for _, l := range refs.Labels {
		if !known[l] {
			c.fail(where, "groups or matches by the label %s, which none of its metrics has (%v)", l, sortedKeys(known))
		}
	}
	for _, l := range outputLabels {
		if !known[l] {
			c.fail(where, "shows the label %s, which none of its metrics has (%v)", l, sortedKeys(known))
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// The dashboard's JSON, as far as the tests read it.
type (
	grafanaDashboard struct {
		Inputs []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		UID           string         `json:"uid"`
		Title         string         `json:"title"`
		SchemaVersion int            `json:"schemaVersion"`
		Panels        []grafanaPanel `json:"panels"`
		Templating    struct {
			List []grafanaVariable `json:"list"`
		} `json:"templating"`
	}
	grafanaPanel struct {
		ID         int                `json:"id"`
		Type       string             `json:"type"`
		Title      string             `json:"title"`
		Datasource *grafanaDatasource `json:"datasource"`
		GridPos    struct{ H, W, X, Y int }
		Targets    []struct {
			RefID        string             `json:"refId"`
			Expr         string             `json:"expr"`
			LegendFormat string             `json:"legendFormat"`
			Datasource   *grafanaDatasource `json:"datasource"`
		} `json:"targets"`
		Panels []grafanaPanel `json:"panels"` // of a collapsed row
	}
	grafanaVariable struct {
		Name       string             `json:"name"`
		Type       string             `json:"type"`
		Datasource *grafanaDatasource `json:"datasource"`
		Query      json.RawMessage    `json:"query"` // a string, or {"query": "..."}
	}
	grafanaDatasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
)

// query returns a query variable's query.
func (v grafanaVariable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	json.Unmarshal(v.Query, &o)
	return o.Query
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaBuiltins are the variables Grafana defines, as the checks replace
// them; the dashboard's own variables stay (they only occur in strings).
var grafanaBuiltins = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

var labelValuesRE = regexp.MustCompile(`^label_values\((?:(.+),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardQuery is one query of the dashboard: where it is, its PromQL
// (builtins replaced) and the labels its legend shows.
type dashboardQuery struct {
	where, expr string
	legend      []string
}

var legendRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// queries returns every query of the dashboard: each panel's targets and
// each variable's label_values selector.
func (d grafanaDashboard) queries() ([]dashboardQuery, error) {
	var qs []dashboardQuery
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				q := dashboardQuery{where: fmt.Sprintf("panel %q, target %s", p.Title, tg.RefID), expr: grafanaBuiltins.Replace(tg.Expr)}
				for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
					q.legend = append(q.legend, m[1])
				}
				qs = append(qs, q)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(v.query()))
		if m == nil || m[1] == "" {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.query())
		}
		qs = append(qs, dashboardQuery{where: "variable " + v.Name, expr: m[1], legend: []string{m[2]}})
	}
	return qs, nil
}

// The rule file's YAML, as far as the tests read it.
type promRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type promRulesTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// loadYAML reads path into v. The rules file is read strictly (a
// misspelt field such as "annotation" is an error); its tests, of which v
// holds only a part, are checked by promtool.
func loadYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	unmarshal := yaml.Unmarshal
	if path == rulesFile {
		unmarshal = yaml.UnmarshalStrict
	}
	if err := unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

var annotationLabelRE = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// checkMonitoring checks the dashboard, the rules and the rules' tests
// against exp and returns the problems found.
func checkMonitoring(t *testing.T, exp exported, d grafanaDashboard, rules promRules, tests promRulesTests) []string {
	t.Helper()
	c := &monitoringCheck{exp: exp}
	qs, err := d.queries()
	if err != nil {
		c.fail("dashboard", "%v", err)
	}
	for _, q := range qs {
		c.expr("dashboard: "+q.where, q.expr, q.legend)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			var shown []string
			for _, text := range r.Annotations {
				for _, m := range annotationLabelRE.FindAllStringSubmatch(text, -1) {
					shown = append(shown, m[1])
				}
			}
			c.expr("rules: "+r.Alert+r.Record, r.Expr, shown)
		}
	}
	// The rules' tests feed series as sqsonce exports them: a test of a
	// metric that does not exist would prove nothing.
	for i, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			where := fmt.Sprintf("rules test %d: series %s", i+1, s.Series)
			refs, err := promqlNames(s.Series)
			if err != nil || len(refs.Selectors) != 1 {
				c.fail(where, "not one series: %v", err)
				continue
			}
			c.selector(where, refs.Selectors[0], deploymentLabels)
		}
	}
	return c.problems
}

// scrapeWorker runs a real worker on a queue with a dead-letter queue,
// lets it handle a few messages, and returns its /metrics once its first
// read of the queues' depth is in.
func scrapeWorker(t *testing.T) string {
	t.Helper()
	e := newEnv(t, false, "cat >/dev/null\n")
	e.run("send", "{\"id\":\"a\"}\n{\"id\":\"a\"}\n{\"id\":\"b\"}\n")
	cmd, out := e.start("run --log-format json")
	base := "http://" + adminAddr(t, e, out)
	e.waitFor("the queue to empty", 20*time.Second, e.queueEmpty)
	var metrics string
	e.waitFor("the queue's depth in /metrics", 20*time.Second, func() bool {
		_, metrics = get(t, base+"/metrics")
		return strings.Contains(metrics, "sqsonce_dead_letter_queue_messages{")
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 15*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	return metrics
}

// Every metric and label that the dashboard, the alert rules and the
// rules' tests name is one a running worker exports.
func TestDeploy_MonitoringNamesExist(t *testing.T) {
	t.Parallel()
	exp, err := parseExposition(scrapeWorker(t))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	var rules promRules
	loadYAML(t, rulesFile, &rules)
	var tests promRulesTests
	loadYAML(t, rulesTestFile, &tests)
	for _, p := range checkMonitoring(t, exp, loadDashboard(t), rules, tests) {
		t.Error(p)
	}
}

// The check itself finds a wrong metric, label, label value, grouping
// label and legend, in the dashboard, the rules and their tests alike.
func TestDeploy_MonitoringCheckFindsMistakes(t *testing.T) {
	t.Parallel()
	exp, err := parseExposition(`# TYPE sqsonce_ledger_up gauge
sqsonce_ledger_up 1
# TYPE sqsonce_operations_failed_total counter
sqsonce_operations_failed_total{class="retryable"} 0
sqsonce_operations_failed_total{class="permanent"} 0
# TYPE sqsonce_ledger_call_duration_seconds histogram
sqsonce_ledger_call_duration_seconds_bucket{call="claim_batch",le="0.1"} 0
sqsonce_ledger_call_duration_seconds_bucket{call="claim_batch",le="+Inf"} 0
sqsonce_ledger_call_duration_seconds_sum{call="claim_batch"} 0
sqsonce_ledger_call_duration_seconds_count{call="claim_batch"} 0
`)
	if err != nil {
		t.Fatal(err)
	}
	good := []string{
		`sqsonce_ledger_up{job=~"$job"} == 0`,
		`sum by (class, instance) (rate(sqsonce_operations_failed_total{class=~"retry.*"}[5m]))`,
		`histogram_quantile(0.99, sum by (le, call) (rate(sqsonce_ledger_call_duration_seconds_bucket{call="claim_batch", le!="0.1"}[5m])))`,
		`sqsonce_ledger_call_duration_seconds_count / on (job, instance, call) sqsonce_ledger_call_duration_seconds_sum`,
	}
	bad := map[string]string{
		`sqsonce_ledger_down == 0`:                                             "sqsonce_ledger_down",
		`rate(sqsonce_operations_failed_total{kind="permanent"}[5m])`:          "label kind",
		`rate(sqsonce_operations_failed_total{class="fatal"}[5m])`:             `class="fatal"`,
		`rate(sqsonce_operations_failed_total{class=~"fat.*"}[5m])`:            `class=~"fat.*"`,
		`sum by (reason) (rate(sqsonce_operations_failed_total[5m]))`:          "label reason",
		`rate(sqsonce_operations_failed_total_bucket[5m])`:                     "sqsonce_operations_failed_total_bucket",
		`sqsonce_ledger_call_duration_seconds{call="claim_batch"}`:             "sqsonce_ledger_call_duration_seconds,",
		`sum by (le) (sqsonce_ledger_up)`:                                      "label le",
		`histogram_quantlie(0.9, sqsonce_ledger_call_duration_seconds_bucket)`: "unknown function",
	}
	for _, expr := range good {
		c := &monitoringCheck{exp: exp}
		c.expr("good", expr, []string{"instance"})
		if len(c.problems) > 0 {
			t.Errorf("%s: %v", expr, c.problems)
		}
	}
	for expr, want := range bad {
		c := &monitoringCheck{exp: exp}
		c.expr("bad", expr, nil)
		if len(c.problems) == 0 || !strings.Contains(strings.Join(c.problems, "\n"), want) {
			t.Errorf("%s: problems %q, want one naming %s", expr, c.problems, want)
		}
	}
	c := &monitoringCheck{exp: exp}
	c.expr("legend", `sqsonce_ledger_up`, []string{"state"})
	if len(c.problems) != 1 {
		t.Errorf("a legend showing a label the query has not: %q", c.problems)
	}

	// The same checks run on the files: a mistake in each is found.
	d := loadDashboard(t)
	d.Panels = append(d.Panels, grafanaPanel{Title: "wrong", Targets: []struct {
		RefID        string             `json:"refId"`
		Expr         string             `json:"expr"`
		LegendFormat string             `json:"legendFormat"`
		Datasource   *grafanaDatasource `json:"datasource"`
	}{{RefID: "A", Expr: `rate(sqsonce_operations_complete_total[$__rate_interval])`}}})
	var rules promRules
	loadYAML(t, rulesFile, &rules)
	rules.Groups[0].Rules[0].Expr = `sqsonce_ledger_up{state="up"} == 0`
	var tests promRulesTests
	loadYAML(t, rulesTestFile, &tests)
	tests.Tests[0].InputSeries[0].Series = `sqsonce_ledger_up{job="a",instance="b",call="x"}`
	problems := strings.Join(checkMonitoring(t, exp, d, rules, tests), "\n")
	for _, want := range []string{`panel "wrong", target A: names the metric sqsonce_operations_complete_total`,
		`rules: ` + rules.Groups[0].Rules[0].Alert + `: matches the label state of sqsonce_ledger_up`,
		`rules test 1: series sqsonce_ledger_up{job="a",instance="b",call="x"}: matches the label call`} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
}

// The dashboard imports into Grafana 10 and 11: a Prometheus data source
// asked for on import and used by every panel, the job, queue and instance
// variables, panels laid out on the 24-column grid without overlapping,
// and every query filtered by the variables.
func TestDeploy_GrafanaDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs: %+v, want one Prometheus data source DS_PROMETHEUS", d.Inputs)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	wantDS := grafanaDatasource{Type: "prometheus", UID: "${DS_PROMETHEUS}"}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Datasource == nil || *v.Datasource != wantDS {
			t.Errorf("variable %s: data source %+v, want %+v", v.Name, v.Datasource, wantDS)
		}
	}
	for _, v := range []string{"job", "queue", "instance"} {
		if !vars[v] {
			t.Errorf("no variable %s", v)
		}
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			g := p.GridPos
			if g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
				t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := taken[cell{x, y}]; ok {
						t.Errorf("panel %q overlaps %q at %d,%d", p.Title, other, x, y)
					}
					taken[cell{x, y}] = p.Title
				}
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || *p.Datasource != wantDS {
				t.Errorf("panel %q: data source %+v, want %+v", p.Title, p.Datasource, wantDS)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refIDs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refIDs[tg.RefID] {
					t.Errorf("panel %q: refId %q missing or used twice", p.Title, tg.RefID)
				}
				refIDs[tg.RefID] = true
				if tg.Datasource != nil && *tg.Datasource != wantDS {
					t.Errorf("panel %q, target %s: data source %+v", p.Title, tg.RefID, tg.Datasource)
				}
				for _, v := range regexp.MustCompile(`\$\{?([a-zA-Z_]+)`).FindAllStringSubmatch(tg.Expr, -1) {
					if !vars[v[1]] && !strings.HasPrefix(v[1], "__") {
						t.Errorf("panel %q, target %s: variable $%s is not defined", p.Title, tg.RefID, v[1])
					}
				}
				refs, err := promqlNames(grafanaBuiltins.Replace(tg.Expr))
				if err != nil {
					t.Errorf("panel %q, target %s: %v", p.Title, tg.RefID, err)
					continue
				}
				for _, sel := range refs.Selectors {
					if !slices.Contains(sel.Matchers, promqlMatcher{"job", "=~", "$job"}) ||
						!slices.Contains(sel.Matchers, promqlMatcher{"instance", "=~", "$instance"}) {
						t.Errorf("panel %q, target %s: %s is not filtered by $job and $instance", p.Title, tg.RefID, sel.Name)
					}
				}
			}
		}
	}
	walk(d.Panels)
	if len(ids) < 20 {
		t.Errorf("%d panels", len(ids))
	}
}

// The dashboard passes a strict reading by Grafana's dashboard schema (as
// the Grafana Foundation SDK generates it, with the schemas of the panels):
// no field it does not know, none of the wrong type, none it requires
// missing. The fields Grafana reads only on import are taken out first.
func TestDeploy_GrafanaDashboardSchema(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"__inputs", "__requires", "__elements"} {
		delete(raw, k)
	}
	if b, err = json.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	// The classic schema, the one Grafana 10 and 11 import; the SDK
	// prefers the v2 schema of later Grafanas.
	//lint:ignore SA1019 the dashboard is in the classic schema on purpose
	var d dashboard.Dashboard
	// UnmarshalJSONStrict returns its error list typed even when empty.
	if err := d.UnmarshalJSONStrict(b); err != nil {
		if errs, ok := err.(cog.BuildErrors); !ok || len(errs) > 0 {
			t.Fatalf("%s: %v", dashboardFile, err)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels read")
	}
}

// Every alert says how bad it is and what to do: a severity, a summary and
// a description that names a sqsonce command, and a for: so that one
// evaluation does not page; and each is tested firing.
func TestDeploy_AlertRulesShape(t *testing.T) {
	t.Parallel()
	var rules promRules
	loadYAML(t, rulesFile, &rules)
	var tests promRulesTests
	loadYAML(t, rulesTestFile, &tests)
	firing := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || !strings.Contains(r.Annotations["description"], "`sqsonce ") {
				t.Errorf("%s: a summary and a description naming a `sqsonce ...` command are needed", r.Alert)
			}
			if !firing[r.Alert] {
				t.Errorf("%s: no test in %s expects it to fire", r.Alert, rulesTestFile)
			}
		}
	}
	for _, want := range []string{"SqsonceDeadLetterQueueGrowing", "SqsonceLedgerDown", "SqsonceLeasesLapsing", "SqsonceNotReceiving"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
	for name := range firing {
		if !alerts[name] {
			t.Errorf("%s tests the alert %s, which the rules do not have", rulesTestFile, name)
		}
	}
}

// The rules pass promtool's check and their unit tests, and every query of
// the dashboard is valid PromQL for promtool's parser (as a recording
// rule of a file made for it).
func TestDeploy_PrometheusRules(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool", "prometheus")
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", rulesFile)
	run("test", "rules", rulesTestFile)

	qs, err := loadDashboard(t).queries()
	if err != nil {
		t.Fatal(err)
	}
	type record struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var records []record
	for i, q := range qs {
		records = append(records, record{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: q.expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboard", "rules": records}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", path)
}
