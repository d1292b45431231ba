package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// forgetQuery is what a bulk forget matches: a state, a reason group, a
// key pattern (path.Match) and a window of the last write, as the form
// gives them.
type forgetQuery struct {
	State, Group, Key, Since, Until string
}

func (q forgetQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "group": q.Group, "key": q.Key, "since": q.Since, "until": q.Until} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Encode is q as a query string.
func (q forgetQuery) Encode() string { return q.values().Encode() }

// Text is q as the action log and the pages say it.
func (q forgetQuery) Text() string {
	return filterText([][2]string{{"state", q.State}, {"reason group", q.Group}, {"key", q.Key}, {"written since", q.Since}, {"written before", q.Until}}, "every operation")
}

// readForgetQuery reads the form into the ledger filter it walks and the
// key pattern it matches, or says what is wrong. A bulk forget needs a
// state, a reason group or a key pattern: "everything" is not a filter.
func readForgetQuery(v url.Values, now time.Time) (forgetQuery, ledger.Filter, error) {
	q := forgetQuery{State: v.Get("state"), Group: v.Get("group"), Key: strings.TrimSpace(v.Get("key")),
		Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until"))}
	var errs []string
	f, ok := stateFilter(q.State)
	if !ok {
		errs = append(errs, "state: want in_progress, complete, retry, dead, permanent or failed")
	}
	if q.Group != "" && f.State == 0 {
		f.State = ledger.StateFailed
	}
	if q.Key != "" {
		if err := validGlob(q.Key); err != nil {
			errs = append(errs, fmt.Sprintf("key: %q is not a pattern: %v", q.Key, err))
		}
	}
	if q.State == "" && q.Group == "" && q.Key == "" {
		errs = append(errs, "name a state, a reason group or a key pattern: a bulk forget does not take every operation")
	}
	f.ReasonGroup, f.Prefix = q.Group, globPrefix(q.Key)
	var err error
	if f.Since, err = parseWhen(q.Since, now); err != nil {
		errs = append(errs, "since: "+err.Error())
	}
	if f.Until, err = parseWhen(q.Until, now); err != nil {
		errs = append(errs, "until: "+err.Error())
	}
	if len(errs) == 0 {
		if err := f.Validate(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return q, f, errors.New(strings.Join(errs, "; "))
	}
	return q, f, nil
}

// forgetJob is one bulk forget, or its dry run, started from the console.
type forgetJob struct {
	ID         int
	DryRun     bool
	Query      forgetQuery
	Actor      string
	Started    time.Time
	FromDryRun int
	// Max bounds a forget: no more than its dry run counted.
	Max int

	cancel context.CancelFunc
	act    *logEntry

	mu        sync.Mutex
	looked    int
	matched   int // a dry run's count; a forget's forgotten
	failed    int
	sample    []string
	done      bool
	stopped   bool
	ended     time.Time
	err       error
	firstFail string
}

func (j *forgetJob) stop() {
	j.mu.Lock()
	j.stopped = true
	j.mu.Unlock()
	j.cancel()
}

// forgetView is a job as its page shows it.
type forgetView struct {
	*forgetJob
	Running         bool
	Looked, Matched int
	Failed          int
	FirstFail       string
	Sample          []string
	Err             string
	Stopped         bool
	Ended           time.Time
	CanForget       bool // a finished dry run that matched some: it may be followed
	FormValues      url.Values
}

func (j *forgetJob) view(latest bool) forgetView {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := forgetView{forgetJob: j, Running: !j.done, Looked: j.looked, Matched: j.matched, Failed: j.failed, FirstFail: j.firstFail,
		Sample: append([]string(nil), j.sample...), Stopped: j.stopped, Ended: j.ended, FormValues: j.Query.values()}
	if j.err != nil {
		v.Err = j.err.Error()
	}
	v.CanForget = latest && j.done && j.DryRun && j.err == nil && !j.stopped && j.matched > 0
	return v
}

// run walks the records of f in key order, a bounded page at a time, and
// counts (a dry run) or forgets those whose key matches the pattern, up
// to Max.
func (j *forgetJob) run(ctx context.Context, l Ledger, f ledger.Filter) error {
	after := ""
	for {
		page, err := l.List(ctx, f, after, ledger.MaxListLimit)
		if err != nil {
			return err
		}
		for _, rec := range page.Records {
			if j.Query.Key != "" {
				if ok, _ := path.Match(j.Query.Key, rec.Key); !ok {
					continue
				}
			}
			if !j.DryRun {
				j.mu.Lock()
				full := j.matched >= j.Max
				j.mu.Unlock()
				if full {
					return nil
				}
				if err := l.Forget(ctx, rec.Key); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					j.mu.Lock()
					if j.failed++; j.firstFail == "" {
						j.firstFail = rec.Key + ": " + err.Error()
					}
					j.mu.Unlock()
					continue
				}
			}
			j.mu.Lock()
			j.matched++
			if len(j.sample) < sampleSize {
				j.sample = append(j.sample, rec.Key)
			}
			j.mu.Unlock()
		}
		j.mu.Lock()
		j.looked += page.Scanned
		j.mu.Unlock()
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

type forgetPage struct {
	Query  forgetQuery
	Error  string
	Jobs   []forgetView
	States []struct{ Name, Label string }
}

func (h *Handler) forgetForm(w http.ResponseWriter, r *http.Request) {
	q, _, err := readForgetQuery(r.URL.Query(), h.cfg.now())
	d := forgetPage{Query: q, Jobs: h.forgetViews(), States: stateChoices}
	if err != nil && len(r.URL.Query()) > 0 {
		d.Error = err.Error()
	}
	h.render(w, r, http.StatusOK, "forget", "Forget operations", d)
}

func (h *Handler) forgetViews() []forgetView {
	h.jobsMu.Lock()
	jobs := append([]*forgetJob(nil), h.forgets...)
	h.jobsMu.Unlock()
	var out []forgetView
	for i := len(jobs) - 1; i >= 0; i-- {
		out = append(out, jobs[i].view(false))
	}
	return out
}

func (h *Handler) findForget(id int) (*forgetJob, bool) {
	h.jobsMu.Lock()
	defer h.jobsMu.Unlock()
	for i, j := range h.forgets {
		if j.ID == id {
			return j, i == len(h.forgets)-1
		}
	}
	return nil, false
}

// forgetStart starts a dry run of a bulk forget, or the forget a dry run
// counted.
func (h *Handler) forgetStart(w http.ResponseWriter, r *http.Request) {
	dryRun := r.FormValue("dry_run") == "1"
	action := "forget_many"
	if dryRun {
		action = "forget_dry_run"
	}
	q, f, err := readForgetQuery(r.PostForm, h.cfg.now())
	refuse := func(status int, msg string) {
		h.count(action, "refused")
		h.record(r, map[bool]string{true: "forget dry run", false: "forget"}[dryRun], q.Text(), 0, "refused: "+msg)
		d := forgetPage{Query: q, Error: msg, Jobs: h.forgetViews(), States: stateChoices}
		h.render(w, r, status, "forget", "Forget operations", d)
	}
	if err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	j := &forgetJob{DryRun: dryRun, Query: q, Actor: actor(r), Started: h.cfg.now()}
	if !dryRun {
		id, _ := strconv.Atoi(r.FormValue("from_dry_run"))
		dry, latest := h.findForget(id)
		if dry == nil || !dry.DryRun {
			refuse(http.StatusConflict, "Run a dry run first: a forget takes what a dry run has counted.")
			return
		}
		v := dry.view(latest)
		if !v.CanForget || dry.Query != q {
			refuse(http.StatusConflict, "This forget does not follow the latest finished dry run with the same filter: run the dry run again.")
			return
		}
		if r.FormValue("confirm") != "1" {
			refuse(http.StatusUnprocessableEntity, "Tick the box that confirms the forget.")
			return
		}
		j.FromDryRun, j.Max = id, v.Matched
	}
	h.jobsMu.Lock()
	switch {
	case h.closed:
		h.jobsMu.Unlock()
		refuse(http.StatusServiceUnavailable, "The console is shutting down.")
		return
	case h.forgetting != nil:
		running := h.forgetting.ID
		h.jobsMu.Unlock()
		refuse(http.StatusConflict, fmt.Sprintf("Forget #%d is still running: one at a time.", running))
		return
	}
	h.nextJob++
	j.ID = h.nextJob
	ctx, cancel := context.WithCancel(context.Background()) // it outlives the request
	j.cancel = cancel
	h.forgets = append(h.forgets, j)
	if len(h.forgets) > maxJobs {
		h.forgets = h.forgets[len(h.forgets)-maxJobs:]
	}
	h.forgetting = j
	h.jobWG.Add(1)
	h.jobsMu.Unlock()

	what := "forget"
	if dryRun {
		what = "forget dry run"
	}
	j.act = h.changes.add(logEntry{At: j.Started, Actor: j.Actor, What: what, Filter: q.Text(), Count: -1,
		Link: h.link("/forget/job?id=" + strconv.Itoa(j.ID))})
	h.log.Info("console: forget of many operations started", "actor", j.Actor, "job", j.ID, "dry_run", dryRun, "filter", q.Text(), "max", j.Max)
	go func() {
		defer h.jobWG.Done()
		defer cancel()
		err := j.run(ctx, h.cfg.Ledger, f)
		j.mu.Lock()
		j.done, j.err, j.ended = true, err, h.cfg.now()
		n, failed := j.matched, j.failed
		j.mu.Unlock()
		h.jobsMu.Lock()
		h.forgetting = nil
		h.jobsMu.Unlock()
		if !dryRun {
			h.cache.forget()
		}
		outcome := "done"
		switch {
		case err != nil:
			outcome = "failed: " + err.Error()
			h.count(action, "failed")
		case failed > 0:
			outcome = fmt.Sprintf("done; %d could not be forgotten", failed)
			h.count(action, "failed")
		default:
			h.count(action, "done")
		}
		h.changes.end(j.act, n, outcome)
		h.log.Info("console: forget of many operations ended", "actor", j.Actor, "job", j.ID, "dry_run", dryRun, "matched", n, "failed", failed, "error", err)
	}()
	http.Redirect(w, r, h.link("/forget/job?id="+strconv.Itoa(j.ID)), http.StatusSeeOther)
}

func (h *Handler) forgetJobPage(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(r.URL.Query().Get("id"))
	j, latest := h.findForget(id)
	if j == nil {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("No forget #%s here: the console keeps the last %d.", r.URL.Query().Get("id"), maxJobs))
		return
	}
	h.render(w, r, http.StatusOK, "forgetjob", fmt.Sprintf("Forget #%d", j.ID), j.view(latest))
}
