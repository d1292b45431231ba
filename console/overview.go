package console

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// A worker writes its registration every beatInterval (worker.FlowConfig's
// loop); the console marks a process whose last beat, by the ledger's
// clock, is older than two beats down.
const (
	beatInterval = 5 * time.Second
	downAfter    = 2 * beatInterval
)

// activityWindow is how far back the overview's chart goes.
const activityWindow = 3 * time.Hour

// readTimeout bounds the reads of one page view.
const readTimeout = 20 * time.Second

// snapshot is what the pages of live state show, read at once: the
// ledger's overview, its registry of processes and its flow documents, and
// the queues' depths. Each part has its own error: one that cannot be read
// hides nothing of the others.
type snapshot struct {
	Overview     ledger.Overview
	OverviewErr  string
	Processes    []ledger.Process
	ProcessesErr string
	Flows        []flowScope
	FlowsErr     string
	Queue, DLQ   queueDepth
	// ReadAt is when the reads ended, by the console's clock; the ages of
	// the processes' beats are as of then.
	ReadAt time.Time
	readAt time.Time // the same, on this host's monotonic clock
}

// flowScope is a scope's flow document as the overview shows it.
type flowScope struct {
	Scope   string
	Doc     worker.PauseDoc
	Err     string // the document is not a pause state
	Version int64
	Updated time.Time
	Expires time.Time
}

// readSnapshot reads a snapshot, its parts at once.
func (h *Handler) readSnapshot(ctx context.Context) *snapshot {
	s := &snapshot{}
	var wg sync.WaitGroup
	wg.Go(func() {
		o, err := h.cfg.Ledger.Overview(ctx, h.cfg.now().Add(-activityWindow))
		if err != nil {
			s.OverviewErr = err.Error()
			return
		}
		s.Overview = o
	})
	wg.Go(func() {
		ps, err := h.cfg.Ledger.Processes(ctx)
		if err != nil {
			s.ProcessesErr = err.Error()
			return
		}
		s.Processes = ps
	})
	wg.Go(func() {
		docs, err := h.cfg.Ledger.ListFlows(ctx)
		if err != nil {
			s.FlowsErr = err.Error()
			return
		}
		for _, d := range docs {
			f := flowScope{Scope: d.Scope, Version: d.Version, Updated: d.Updated, Expires: d.Expires}
			if err := json.Unmarshal(d.Data, &f.Doc); err != nil || f.Doc.State == "" {
				f.Err = "not a pause state: " + cut(string(d.Data), 200)
			}
			s.Flows = append(s.Flows, f)
		}
	})
	wg.Go(func() { s.Queue = readDepth(ctx, h.cfg.SQS, h.cfg.QueueURL, h.cfg.now()) })
	if h.cfg.DLQURL != "" {
		wg.Go(func() { s.DLQ = readDepth(ctx, h.cfg.SQS, h.cfg.DLQURL, h.cfg.now()) })
	}
	wg.Wait()
	s.ReadAt, s.readAt = h.cfg.now(), time.Now()
	return s
}

// snap returns the snapshot of at most Config.Refresh ago.
func (h *Handler) snap(ctx context.Context) *snapshot {
	return h.cache.snapshot(ctx, h.cfg.Refresh, h.readSnapshot)
}

// process is a process of the registry as the pages show it.
type process struct {
	ledger.Process
	Age    time.Duration // of its last beat, when the page was drawn
	Down   bool          // no beat for more than downAfter
	Claims int           // claims in progress under its owner tokens
	Lapsed int           // of them, those whose lease lapsed
}

// workersOf is the processes of s, and the processes holding claims that
// the registry does not list (Registered false), the live ones first, at
// now.
func workersOf(s *snapshot, now time.Time) (listed, unlisted []process) {
	claims := map[string]ledger.OwnerClaims{}
	for _, o := range s.Overview.Owners {
		claims[o.Owner] = o
	}
	for _, p := range s.Processes {
		// Whole milliseconds, as the page shows the age, so that the
		// status shown agrees with the age shown.
		age := (p.BeatAge + now.Sub(s.ReadAt)).Truncate(time.Millisecond)
		v := process{Process: p, Age: age, Down: age > downAfter}
		if c, ok := claims[p.ID]; ok {
			v.Claims, v.Lapsed = c.Claims, c.Lapsed
			delete(claims, p.ID)
		}
		listed = append(listed, v)
	}
	slices.SortFunc(listed, func(a, b process) int {
		return cmp.Or(boolCmp(a.Down, b.Down), strings.Compare(a.Host, b.Host), a.Started.Compare(b.Started), strings.Compare(a.ID, b.ID))
	})
	for _, c := range claims {
		unlisted = append(unlisted, process{Process: ledger.Process{ID: c.Owner}, Claims: c.Claims, Lapsed: c.Lapsed})
	}
	slices.SortFunc(unlisted, func(a, b process) int { return cmp.Or(cmp.Compare(b.Claims, a.Claims), strings.Compare(a.ID, b.ID)) })
	return listed, unlisted
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// overviewData is what the overview page shows.
type overviewData struct {
	Snap *snapshot
	// The tiles: counts by what will become of the operations.
	ToRetry, FailedDead int
	Lapsed, Live        []ledger.Record
	Chart               chart
	Up, Down            int
	Unlisted            []process
	Flows               []flowScope
	PauseScope          string
	// DLQTotal is SQS's approximate count of the dead-letter queue's
	// messages (visible, in flight, delayed).
	DLQTotal int
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	s := h.snap(ctx)
	now := h.cfg.now()
	d := overviewData{Snap: s, PauseScope: h.cfg.FlowScope, Flows: s.Flows}
	o := s.Overview
	if s.OverviewErr == "" {
		d.ToRetry, d.FailedDead = o.Failed-o.FailedDeadLettered, o.FailedDeadLettered
		for _, rec := range o.OldestClaims {
			if rec.LeaseExpiry.After(o.Now) {
				d.Live = append(d.Live, rec)
			} else {
				d.Lapsed = append(d.Lapsed, rec)
			}
		}
		d.Chart = newChart(o.Activity, o.Now, activityWindow)
	}
	listed, unlisted := workersOf(s, now)
	for _, p := range listed {
		if p.Down {
			d.Down++
		} else {
			d.Up++
		}
	}
	d.Unlisted = unlisted
	d.DLQTotal = s.DLQ.Visible + s.DLQ.InFlight + s.DLQ.Delayed
	status := http.StatusOK
	if s.OverviewErr != "" {
		status = http.StatusBadGateway
	}
	h.render(w, r, status, "overview", "Overview", d)
}

func (h *Handler) workers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	s := h.snap(ctx)
	listed, unlisted := workersOf(s, h.cfg.now())
	d := struct {
		Snap     *snapshot
		Listed   []process
		Unlisted []process
		Beat     time.Duration
		DownAt   time.Duration
	}{s, listed, unlisted, beatInterval, downAfter}
	status := http.StatusOK
	if s.ProcessesErr != "" {
		status = http.StatusBadGateway
	}
	h.render(w, r, status, "workers", "Workers", d)
}
