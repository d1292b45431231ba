package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// newRegistry returns the process's metrics registry with the Go runtime and
// process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ledgerMetrics observes the ledger: commit latency and size from the
// committer, record counts from Stats (kept as counters, so a scrape does
// not scan the file).
type ledgerMetrics struct {
	commitSeconds  prometheus.Histogram
	requestsCommit prometheus.Histogram
	commitErrors   prometheus.Counter

	mu       sync.Mutex
	st       statser // set once the ledger is open
	shared   bool    // st is a shared store: its counts are read in the background
	last     ledger.Stats
	lastRead time.Time // when the counts in last were read; zero before
	tried    time.Time // when the last background read started
	reading  bool      // a background read is under way
	ctx      context.Context
	stop     context.CancelFunc
	reads    sync.WaitGroup

	records    *prometheus.Desc
	oldest     *prometheus.Desc
	fileBytes  *prometheus.Desc
	commitsAll *prometheus.Desc
}

func newLedgerMetrics(reg prometheus.Registerer) *ledgerMetrics {
	m := &ledgerMetrics{
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sqsonce", Name: "ledger_commit_duration_seconds",
			Help:    "Time of one ledger commit, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 0.1ms .. 3.3s
		}),
		requestsCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sqsonce", Name: "ledger_requests_per_commit",
			Help:    "Write requests (claim batches, completions, failures, extensions) grouped into one commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sqsonce", Name: "ledger_commit_errors_total",
			Help: "Ledger commits that failed (full disk, I/O error).",
		}),
		records:    prometheus.NewDesc("sqsonce_ledger_records", "Ledger records by state.", []string{"state"}, nil),
		oldest:     prometheus.NewDesc("sqsonce_ledger_oldest_in_progress_seconds", "Age of the oldest in-progress claim; 0 when none.", nil, nil),
		fileBytes:  prometheus.NewDesc("sqsonce_ledger_file_bytes", "Size of the ledger file.", nil, nil),
		commitsAll: prometheus.NewDesc("sqsonce_ledger_commits_total", "Ledger commits (one fsync each) since start.", nil, nil),
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	reg.MustRegister(m.commitSeconds, m.requestsCommit, m.commitErrors, m)
	return m
}

// onCommit is the ledger's commit hook.
func (m *ledgerMetrics) onCommit(requests int, took time.Duration, err error) {
	m.commitSeconds.Observe(took.Seconds())
	m.requestsCommit.Observe(float64(requests))
	if err != nil {
		m.commitErrors.Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *ledgerMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.records
	ch <- m.oldest
	ch <- m.fileBytes
	ch <- m.commitsAll
}

// statser is the part of a ledger that the metrics read.
type statser interface {
	Stats(ctx context.Context) (ledger.Stats, error)
}

// sharedStatsEvery is how often a scrape has the counts of a shared ledger
// read again: they cost a query over its table (a scan on DynamoDB), where
// the embedded ledger keeps them as counters.
const sharedStatsEvery = time.Minute

// statsTimeout bounds one read of the counts.
const statsTimeout = 10 * time.Second

// observe starts reporting the counts of st. The embedded ledger's are read
// at each scrape. A shared store's are read in the background, when a
// scrape finds them older than sharedStatsEvery (or finds none): a scrape
// never waits on the store, which may be slow to count or not answer at
// all while it is away, and it reports the last counts read (none before
// the first read). The returned func stops the reading and waits for a read
// under way; call it before closing st. It may be called more than once.
func (m *ledgerMetrics) observe(st statser) (stop func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = st
	_, local := st.(*ledger.DB)
	m.shared = !local
	return func() {
		m.stop()
		m.reads.Wait()
	}
}

// stats returns the ledger's counts and whether there are any.
func (m *ledgerMetrics) stats() (ledger.Stats, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return ledger.Stats{}, false
	}
	if m.shared {
		if !m.reading && m.ctx.Err() == nil && (m.tried.IsZero() || time.Since(m.tried) >= sharedStatsEvery) {
			m.reading, m.tried = true, time.Now()
			m.reads.Go(m.readShared)
		}
		return m.last, !m.lastRead.IsZero()
	}
	ctx, cancel := context.WithTimeout(m.ctx, statsTimeout)
	st, err := m.st.Stats(ctx)
	cancel()
	if err != nil {
		return m.last, !m.lastRead.IsZero()
	}
	m.last, m.lastRead = st, time.Now()
	return m.last, true
}

// readShared reads a shared store's counts in the background; a failed
// read keeps the last counts.
func (m *ledgerMetrics) readShared() {
	ctx, cancel := context.WithTimeout(m.ctx, statsTimeout)
	defer cancel()
	st, err := m.st.Stats(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading = false
	if err == nil {
		m.last, m.lastRead = st, time.Now()
	}
}

// Collect implements prometheus.Collector.
func (m *ledgerMetrics) Collect(ch chan<- prometheus.Metric) {
	st, ok := m.stats()
	if !ok {
		return
	}
	for state, n := range map[string]int{
		"in_progress": st.InProgress, "complete": st.Complete,
		"failed": st.Failed, "failed_permanently": st.FailedPermanently,
	} {
		ch <- prometheus.MustNewConstMetric(m.records, prometheus.GaugeValue, float64(n), state)
	}
	age := 0.0
	if !st.OldestInProgress.IsZero() {
		age = time.Since(st.OldestInProgress).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(m.oldest, prometheus.GaugeValue, age)
	m.mu.Lock()
	shared := m.shared
	m.mu.Unlock()
	if !shared {
		// A file and its commits: the embedded ledger's alone.
		ch <- prometheus.MustNewConstMetric(m.fileBytes, prometheus.GaugeValue, float64(st.FileSize))
		ch <- prometheus.MustNewConstMetric(m.commitsAll, prometheus.CounterValue, float64(st.Commits))
	}
}

// adminServer is the admin HTTP listener.
type adminServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// healthState is what the admin listener and systemd hear of a running
// command: alive (its loops turn), ready (it does its job now) and the
// fields of /healthz's and /readyz's JSON body.
type healthState struct {
	Alive, Ready bool
	Fields       map[string]any
}

// workerHealth is what the admin listener and systemd hear of a worker.
func workerHealth(h worker.Health) healthState {
	return healthState{Alive: h.Alive, Ready: h.Ready, Fields: map[string]any{
		"running": h.Running, "alive": h.Alive, "ready": h.Ready,
		"draining": h.Draining, "ledger_down": h.LedgerDown, "last_receive": h.LastReceive, "in_flight": h.InFlight,
	}}
}

// adminListener is where one command serves its admin listener.
type adminListener struct {
	key    string // the setting of the address, for errors
	listen string // host:port; empty: no listener
	pprof  bool
}

// runAdmin is where `sqsonce run` serves its admin listener: admin.listen.
func (c Config) runAdmin() adminListener {
	return adminListener{key: "admin.listen", listen: c.Admin.Listen, pprof: c.Admin.PProf}
}

// ingestAdmin is where `sqsonce ingest` serves its admin listener:
// ingest.admin_listen, apart from the worker's.
func (c Config) ingestAdmin() adminListener {
	return adminListener{key: "ingest.admin_listen", listen: c.Ingest.AdminListen, pprof: c.Admin.PProf}
}

// startAdmin listens on a.listen and serves /metrics, /healthz, /readyz
// and, when enabled, /debug/pprof/. It returns nil when the listener is
// disabled.
func startAdmin(a adminListener, reg *prometheus.Registry, health func() healthState, log *slog.Logger) (*adminServer, error) {
	if a.listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.listen)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", a.key, a.listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		h := health()
		writeHealth(w, h.Alive, h)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		h := health()
		writeHealth(w, h.Ready, h)
	})
	if a.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &adminServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { srv.done <- srv.srv.Serve(ln) }()
	log.Info("admin listener started", "address", ln.Addr().String(), "pprof", a.pprof, "setting", a.key)
	return srv, nil
}

// Addr is the address the listener is bound to.
func (a *adminServer) Addr() string { return a.ln.Addr().String() }

// Close stops the listener, waiting briefly for requests in progress.
func (a *adminServer) Close() error {
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := a.srv.Shutdown(ctx)
	if serr := <-a.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

func writeHealth(w http.ResponseWriter, ok bool, h healthState) {
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	body := map[string]any{"ok": ok}
	for k, v := range h.Fields {
		body[k] = v
	}
	json.NewEncoder(w).Encode(body)
}
