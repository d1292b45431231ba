package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/ingest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// metricInfo is what the reference says of a metric, or what the code
// registers: its type, its labels and, for a label whose values are
// known, those values.
type metricInfo struct {
	where  string
	typ    string              // counter, gauge, histogram, summary, untyped
	labels map[string][]string // label → its values (nil: any)
}

// recorder is a prometheus.Registerer that registers into a real registry
// and keeps, for each metric of each collector registered, its name, type
// and labels, whether or not the metric has a series yet.
type recorder struct {
	t    *testing.T
	reg  *prometheus.Registry
	seen map[string]*metricInfo
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, reg: prometheus.NewRegistry(), seen: map[string]*metricInfo{}}
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.add(c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// dtoType is a written metric's type.
func dtoType(m *dto.Metric) string {
	switch {
	case m.Counter != nil:
		return "counter"
	case m.Gauge != nil:
		return "gauge"
	case m.Histogram != nil:
		return "histogram"
	case m.Summary != nil:
		return "summary"
	}
	return "untyped"
}

// add records c's metrics. A metric's type is read from a series c
// collects, or for a vector without series yet from the vector's type.
func (r *recorder) add(c prometheus.Collector) {
	types := map[*prometheus.Desc]string{}
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			r.t.Fatal(err)
		}
		types[m.Desc()] = dtoType(&d)
	}
	descs := make(chan *prometheus.Desc)
	go func() { c.Describe(descs); close(descs) }()
	for d := range descs {
		typ, ok := types[d]
		if !ok {
			switch c.(type) {
			case *prometheus.CounterVec:
				typ = "counter"
			case *prometheus.GaugeVec:
				typ = "gauge"
			case *prometheus.HistogramVec:
				typ = "histogram"
			case *prometheus.SummaryVec:
				typ = "summary"
			default:
				// A collector of its own without series yet: its type is
				// read when it is added again (see registered).
			}
		}
		name, labels := describe(r.t, d)
		info := r.seen[name]
		if info == nil {
			info = &metricInfo{typ: typ, labels: map[string][]string{}}
			r.seen[name] = info
		}
		switch {
		case info.typ == "":
			info.typ = typ
		case typ != "" && info.typ != typ:
			r.t.Fatalf("%s registered as a %s and as a %s", name, info.typ, typ)
		}
		for l, v := range labels {
			if slices.Contains(info.labels[l], v) {
				continue
			}
			if v == variableLabel {
				if _, ok := info.labels[l]; !ok {
					info.labels[l] = nil
				}
				continue
			}
			info.labels[l] = append(info.labels[l], v)
		}
	}
}

// variableLabel stands for the value of a variable label in describe.
const variableLabel = "\x00variable"

// describe reads a Desc's name and labels through a registry: a constant
// metric of it, with as many variable labels as the Desc takes, gathered.
// A constant label maps to its value, a variable one to variableLabel.
func describe(t *testing.T, d *prometheus.Desc) (string, map[string]string) {
	t.Helper()
	for n := 0; n < 10; n++ {
		values := make([]string, n)
		for i := range values {
			values[i] = variableLabel
		}
		m, err := prometheus.NewConstMetric(d, prometheus.UntypedValue, 0, values...)
		if err != nil {
			continue
		}
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(constCollector{d, m}); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gather %v: %v", d, err)
		}
		labels := map[string]string{}
		for _, lp := range mfs[0].GetMetric()[0].GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		return mfs[0].GetName(), labels
	}
	t.Fatalf("%v: no number of label values fits", d)
	return "", nil
}

type constCollector struct {
	d *prometheus.Desc
	m prometheus.Metric
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }
func (c constCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }

// registered returns the metrics that sqsonce's processes register: the
// worker's and its ledger's (sqsonce run), the receiver's (sqsonce ingest)
// and the console's (sqsonce console), each made as the command makes it,
// on real parts.
func registered(t *testing.T) map[string]*metricInfo {
	t.Helper()
	rec := newRecorder(t)
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{})
	cfg := probeBase()
	cfg.Queue.URL = q.URL
	cfg.Ledger.Path = filepath.Join(t.TempDir(), "ledger.db")
	log := slog.New(slog.DiscardHandler)

	// sqsonce run: the ledger's metrics, then the worker's.
	lm := newLedgerMetrics(rec)
	db, err := ledger.Open(cfg.Ledger.Path, ledger.Options{OnCommit: lm.onCommit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	stop := lm.observe(db)
	t.Cleanup(stop)
	rec.add(lm) // its series exist once it observes a ledger: read their types again
	wcfg := workerConfig(cfg, log)
	wcfg.Registerer = rec
	if _, err := worker.New(wcfg, client, db, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })); err != nil {
		t.Fatal(err)
	}

	// sqsonce ingest.
	cfg.Ingest.Source = []IngestSource{{Name: "hooks", Path: "/hooks", Verify: ingest.SchemeNone, KeyPointer: "/id"}}
	icfg, err := ingestConfig(cfg, func(string) (string, bool) { return "", false }, log)
	if err != nil {
		t.Fatal(err)
	}
	icfg.Registerer = rec
	if _, err := ingest.New(icfg, client); err != nil {
		t.Fatal(err)
	}

	// sqsonce console.
	keyOf, err := worker.MessageKeyFunc(keyConfig(cfg.Key))
	if err != nil {
		t.Fatal(err)
	}
	h, err := console.New(console.Config{Ledger: db, SQS: client, QueueURL: q.URL, KeyOf: keyOf, Logger: log, Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })

	out := map[string]*metricInfo{}
	for name, info := range rec.seen {
		if info.typ == "" {
			t.Fatalf("%s: no series to read its type from", name)
		}
		if strings.HasPrefix(name, "sqsonce_") {
			out[name] = info
		}
	}
	return out
}

// scraped returns the sqsonce_* metrics of a running worker's /metrics,
// with the values each label has there.
func scraped(t *testing.T) map[string]*metricInfo {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(scrapeWorker(t)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*metricInfo{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "sqsonce_") {
			continue
		}
		info := &metricInfo{typ: strings.ToLower(mf.GetType().String()), labels: map[string][]string{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				info.labels[lp.GetName()] = append(info.labels[lp.GetName()], lp.GetValue())
			}
		}
		out[name] = info
	}
	return out
}

// documentedMetrics reads the tables "| metric | type | labels | meaning |"
// of docs/operating.md. A labels cell is "—" or labels separated by ";",
// each a code span with its name, then code spans of its values when they
// are a fixed set.
func documentedMetrics(t *testing.T) map[string]*metricInfo {
	t.Helper()
	out := map[string]*metricInfo{}
	for _, tb := range tablesWith(t, filepath.Join(docsDir, "operating.md"), "metric", "type", "labels", "meaning") {
		for _, r := range tb.rows {
			name := firstCode(r.cells[0])
			if _, dup := out[name]; dup {
				t.Errorf("%s: %s is documented twice", tb.where(r), name)
			}
			info := &metricInfo{where: tb.where(r), typ: strings.TrimSpace(r.cells[1]), labels: map[string][]string{}}
			if cell := strings.TrimSpace(r.cells[2]); cell != "—" {
				for part := range strings.SplitSeq(cell, ";") {
					spans := codeSpans(part)
					if len(spans) == 0 {
						t.Errorf("%s: %s: a label without a name in %q", tb.where(r), name, cell)
						continue
					}
					info.labels[spans[0]] = spans[1:]
				}
			}
			out[name] = info
		}
	}
	return out
}

func labelNames(m map[string][]string) []string {
	var names []string
	for l := range m {
		names = append(names, l)
	}
	sort.Strings(names)
	return names
}

// The table of metrics names every sqsonce_* metric the commands register
// and a running worker serves, with its type and its labels, and the
// values of a label where it lists them; and it names no other metric.
func TestDocs_Metrics(t *testing.T) {
	t.Parallel()
	docs := documentedMetrics(t)
	reg := registered(t)
	run := scraped(t)
	for name, got := range run {
		if r, ok := reg[name]; ok && (r.typ != got.typ || !slices.Equal(labelNames(r.labels), labelNames(got.labels))) {
			t.Errorf("%s: registered as a %s %v, served as a %s %v", name, r.typ, labelNames(r.labels), got.typ, labelNames(got.labels))
		}
	}
	for _, code := range []struct {
		how     string
		metrics map[string]*metricInfo
	}{{"registered by a command", reg}, {"served by a running worker", run}} {
		for name, got := range code.metrics {
			d, ok := docs[name]
			if !ok {
				t.Errorf("docs/operating.md: %s (a %s, labels %v, %s) is not in the table of metrics", name, got.typ, labelNames(got.labels), code.how)
				continue
			}
			if d.typ != got.typ {
				t.Errorf("%s: %s is documented as a %s, the one %s is a %s", d.where, name, d.typ, code.how, got.typ)
			}
			if !slices.Equal(labelNames(d.labels), labelNames(got.labels)) {
				t.Errorf("%s: %s is documented with the labels %v, the one %s has %v", d.where, name, labelNames(d.labels), code.how, labelNames(got.labels))
				continue
			}
			for l, values := range got.labels {
				want := d.labels[l]
				if len(want) == 0 {
					continue // any value
				}
				for _, v := range values {
					if !slices.Contains(want, v) {
						t.Errorf("%s: %s{%s=%q}, %s: the table lists the values %v", d.where, name, l, v, code.how, want)
					}
				}
			}
		}
	}
	for name, d := range docs {
		if reg[name] == nil && run[name] == nil {
			t.Errorf("%s: %s is documented, but no command registers it", d.where, name)
		}
	}
	if len(reg) < 40 {
		t.Errorf("only %d metrics registered: the recorder missed some", len(reg))
	}
}
