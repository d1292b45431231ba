package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/replay"
)

// Bounds of a replay from the console.
const (
	defaultRate  = 20   // messages a second, the form's first value
	maxRate      = 1000 // the fastest a console replay may go
	maxJobs      = 10   // replays kept to be shown
	sampleSize   = 20   // decisions of each kind a dry run keeps
	replayMovers = 4
)

// replayForm is what the operator asks of a replay: the filters of
// `sqsonce replay`.
type replayForm struct {
	Key            string
	Group          string // a reason group (replay.ReasonGroupOf)
	State          string // the operation's state: in_progress, complete or failed
	Since, Until   string
	Max            int
	Rate           float64
	MaxReplays     int
	DropComplete   bool
	IncludeKeyless bool
}

// values is f as form or query values.
func (f replayForm) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("key", f.Key)
	set("group", f.Group)
	set("state", f.State)
	set("since", f.Since)
	set("until", f.Until)
	if f.Max > 0 {
		v.Set("max", strconv.Itoa(f.Max))
	}
	v.Set("rate", strconv.FormatFloat(f.Rate, 'f', -1, 64))
	v.Set("max_replays", strconv.Itoa(f.MaxReplays))
	if f.DropComplete {
		v.Set("drop_complete", "1")
	}
	if f.IncludeKeyless {
		v.Set("include_keyless", "1")
	}
	return v
}

// Encode is f as a query string.
func (f replayForm) Encode() string { return f.values().Encode() }

// readReplayForm reads the form, or says what is wrong with it.
func readReplayForm(v url.Values) (replayForm, error) {
	f := replayForm{Key: strings.TrimSpace(v.Get("key")), Group: v.Get("group"), State: v.Get("state"),
		Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until")),
		Rate: defaultRate, MaxReplays: replay.DefaultMaxReplays,
		DropComplete: v.Get("drop_complete") == "1", IncludeKeyless: v.Get("include_keyless") == "1"}
	var errs []string
	if s := strings.TrimSpace(v.Get("max")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			errs = append(errs, "at most: want a number of messages, 0 or empty for no limit")
		}
		f.Max = n
	}
	if s := strings.TrimSpace(v.Get("rate")); s != "" {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(r) || r < 0.1 || r > maxRate {
			errs = append(errs, fmt.Sprintf("rate: want 0.1 to %d messages a second", maxRate))
		}
		f.Rate = r
	}
	if s := strings.TrimSpace(v.Get("max_replays")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, "max replays: want 1 or more")
		}
		f.MaxReplays = n
	}
	if f.Key != "" {
		if _, err := path.Match(f.Key, ""); err != nil {
			errs = append(errs, fmt.Sprintf("key: %q is not a pattern: %v", f.Key, err))
		}
	}
	if f.State != "" {
		if _, err := ledger.ParseState(f.State); err != nil {
			errs = append(errs, "state: want in_progress, complete or failed")
		}
	}
	if len(errs) > 0 {
		return f, errors.New(strings.Join(errs, "; "))
	}
	return f, nil
}

// Text is f's filters as the action log says them.
func (f replayForm) Text() string {
	return filterText([][2]string{{"key", f.Key}, {"reason group", f.Group}, {"state", f.State}, {"sent since", f.Since}, {"sent before", f.Until}}, "every dead letter")
}

// config is the replay.Config of f.
func (h *Handler) replayConfig(f replayForm, dryRun bool) (replay.Config, error) {
	now := h.cfg.now()
	c := replay.DefaultConfig()
	c.From, c.To, c.ToFIFO, c.KeyOf = h.cfg.DLQURL, h.cfg.QueueURL, h.cfg.QueueFIFO, h.cfg.KeyOf
	c.KeyGlob, c.Max, c.Rate, c.MaxReplays, c.ReasonGroup = f.Key, f.Max, f.Rate, f.MaxReplays, f.Group
	if f.State != "" {
		c.State, _ = ledger.ParseState(f.State)
	}
	c.DropComplete, c.IncludeKeyless, c.DryRun = f.DropComplete, f.IncludeKeyless, dryRun
	c.Concurrency = replayMovers
	c.Logger = h.log.With("replay", true)
	var errs []string
	var err error
	if c.Since, err = parseWhen(f.Since, now); err != nil {
		errs = append(errs, "sent since: "+err.Error())
	}
	if c.Until, err = parseWhen(f.Until, now); err != nil {
		errs = append(errs, "sent before: "+err.Error())
	}
	if len(errs) == 0 {
		if err := c.Validate(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return replay.Config{}, errors.New(strings.Join(errs, "; "))
	}
	return c, nil
}

// job is one replay started from the console.
type job struct {
	ID       int
	DryRun   bool
	Form     replayForm
	From, To string
	Actor    string
	Started  time.Time
	Backlog  int // the dead-letter queue's visible messages at the start
	// FromDryRun is the dry run a replay follows, and Counted what it
	// counted would move: a replay moves no more.
	FromDryRun int
	Counted    int

	replayer *replay.Replayer
	act      *logEntry

	mu      sync.Mutex
	moves   []replay.Decision
	left    []replay.Decision
	done    bool
	ended   time.Time
	summary replay.Summary
	err     error
}

// observe keeps the first decisions of each kind.
func (j *job) observe(d replay.Decision) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case d.Action == replay.ActionLeave && len(j.left) < sampleSize:
		j.left = append(j.left, d)
	case d.Action != replay.ActionLeave && len(j.moves) < sampleSize:
		j.moves = append(j.moves, d)
	}
}

// jobView is a job as a page shows it.
type jobView struct {
	*job
	Running   bool
	Summary   replay.Summary
	Line      string
	Err       string
	Moves     []replay.Decision
	Left      []replay.Decision
	Ended     time.Time
	CanReplay bool // a finished dry run that moved something: it may be followed
	// FormValues are the dry run's filters, for the form that follows it.
	FormValues url.Values
}

func (j *job) view(latest bool) jobView {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := jobView{job: j, Running: !j.done, FormValues: j.Form.values(), Moves: append([]replay.Decision(nil), j.moves...),
		Left: append([]replay.Decision(nil), j.left...), Ended: j.ended}
	if j.done {
		v.Summary = j.summary
		if j.err != nil {
			v.Err = j.err.Error()
		}
	} else {
		v.Summary = j.replayer.Progress()
	}
	v.Line = v.Summary.Line(j.From, j.To)
	v.CanReplay = latest && j.done && j.DryRun && j.err == nil && v.Summary.Moved+v.Summary.DroppedComplete > 0
	return v
}

type replayPage struct {
	Form       replayForm
	Error      string
	Jobs       []jobView
	Running    *jobView
	Configured bool
	// Groups are the groups of the dead letters' reasons the ledger
	// counts, to pick from.
	Groups []ledger.DeadLetterGroup
}

func (h *Handler) replayForm(w http.ResponseWriter, r *http.Request) {
	f, err := readReplayForm(r.URL.Query())
	d := replayPage{Form: f, Configured: h.cfg.DLQURL != "", Jobs: h.jobViews()}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	d.Groups = h.snap(ctx).Overview.DeadLetters
	if err != nil && len(r.URL.Query()) > 0 {
		d.Error = err.Error()
	}
	h.render(w, r, http.StatusOK, "replay", "Replay", d)
}

func (h *Handler) jobViews() []jobView {
	h.jobsMu.Lock()
	jobs := append([]*job(nil), h.jobs...)
	h.jobsMu.Unlock()
	var out []jobView
	for i := len(jobs) - 1; i >= 0; i-- {
		out = append(out, jobs[i].view(false))
	}
	return out
}

// replayStart starts a dry run, or the replay a dry run showed.
func (h *Handler) replayStart(w http.ResponseWriter, r *http.Request) {
	dryRun := r.FormValue("dry_run") == "1"
	action := "replay"
	if dryRun {
		action = "dry_run"
	}
	refuse := func(status int, msg string, f replayForm) {
		h.count(action, "refused")
		h.record(r, map[bool]string{true: "replay dry run", false: "replay"}[dryRun], f.Text(), 0, "refused: "+msg)
		d := replayPage{Form: f, Error: msg, Configured: h.cfg.DLQURL != "", Jobs: h.jobViews()}
		h.render(w, r, status, "replay", "Replay", d)
	}
	if h.cfg.DLQURL == "" {
		refuse(http.StatusConflict, "The queue has no dead-letter queue to replay from.", replayForm{})
		return
	}
	if err := r.ParseForm(); err != nil {
		refuse(http.StatusBadRequest, err.Error(), replayForm{})
		return
	}
	f, err := readReplayForm(r.PostForm)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error(), f)
		return
	}
	fromDry := 0
	if !dryRun {
		// A replay follows the dry run that showed it, with its filters:
		// what moves is what the operator saw counted.
		id, _ := strconv.Atoi(r.FormValue("from_dry_run"))
		dry := h.findJob(id)
		if dry == nil || !dry.DryRun {
			refuse(http.StatusConflict, "Run a dry run first: a replay moves what a dry run has counted.", f)
			return
		}
		v := dry.view(h.latest(dry))
		if !v.CanReplay || dry.Form.Encode() != f.Encode() {
			refuse(http.StatusConflict, "This replay does not follow a finished dry run with the same filters: run the dry run again.", f)
			return
		}
		if r.FormValue("confirm") != "1" {
			refuse(http.StatusUnprocessableEntity, "Tick the box that confirms the move.", f)
			return
		}
		fromDry = id
	}
	cfg, err := h.replayConfig(f, dryRun)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error(), f)
		return
	}
	counted := 0
	if !dryRun {
		// Not more than the dry run counted: messages that arrived since
		// were not shown.
		counted = int(h.findJob(fromDry).view(false).Summary.Moved)
		if cfg.Max == 0 || counted < cfg.Max {
			cfg.Max = max(counted, 1)
		}
	}
	j := &job{DryRun: dryRun, Form: f, From: cfg.From, To: cfg.To, Actor: actor(r), Started: time.Now(), FromDryRun: fromDry, Counted: min(counted, cfg.Max)}
	cfg.Observe = j.observe
	rp, err := replay.New(cfg, h.cfg.SQS, h.cfg.Ledger)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error(), f)
		return
	}
	j.replayer = rp
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	j.Backlog = readDepth(ctx, h.cfg.SQS, h.cfg.DLQURL, time.Now()).Visible
	cancel()

	h.jobsMu.Lock()
	switch {
	case h.closed:
		h.jobsMu.Unlock()
		refuse(http.StatusServiceUnavailable, "The console is shutting down.", f)
		return
	case h.running != nil:
		running := h.running.ID
		h.jobsMu.Unlock()
		refuse(http.StatusConflict, fmt.Sprintf("Replay #%d is still running: one at a time.", running), f)
		return
	}
	h.nextJob++
	j.ID = h.nextJob
	h.jobs = append(h.jobs, j)
	if len(h.jobs) > maxJobs {
		h.jobs = h.jobs[len(h.jobs)-maxJobs:]
	}
	h.running = j
	h.jobWG.Add(1)
	h.jobsMu.Unlock()

	what := "replay"
	if dryRun {
		what = "replay dry run"
	}
	j.act = h.changes.add(logEntry{At: h.cfg.now(), Actor: j.Actor, What: what, Filter: f.Text(), Count: -1,
		Link: h.link("/replay/job?id=" + strconv.Itoa(j.ID))})
	h.log.Info("console: replay started", "actor", j.Actor, "job", j.ID, "dry_run", dryRun, "from", cfg.From, "to", cfg.To,
		"filters", f.Encode(), "max", cfg.Max)
	go func() {
		defer h.jobWG.Done()
		// Not the request's context: the replay outlives the request.
		sum, err := rp.Run(context.Background())
		j.mu.Lock()
		j.done, j.summary, j.err, j.ended = true, sum, err, time.Now()
		j.mu.Unlock()
		h.jobsMu.Lock()
		h.running = nil
		h.jobsMu.Unlock()
		h.cache.forget()
		outcome := "done"
		if err != nil {
			outcome = "failed"
		}
		h.count(action, outcome)
		line := sum.Line(cfg.From, cfg.To)
		if err != nil {
			line += "; " + err.Error()
		}
		h.changes.end(j.act, int(sum.Moved), line)
		h.log.Info("console: replay ended", "actor", j.Actor, "job", j.ID, "summary", sum.Line(cfg.From, cfg.To), "error", err)
	}()
	http.Redirect(w, r, h.link("/replay/job?id="+strconv.Itoa(j.ID)), http.StatusSeeOther)
}

func (h *Handler) findJob(id int) *job {
	h.jobsMu.Lock()
	defer h.jobsMu.Unlock()
	for _, j := range h.jobs {
		if j.ID == id {
			return j
		}
	}
	return nil
}

// latestDryRun reports whether j is the newest job: only that one may be
// followed, so that a replay never acts on an old count.
func (h *Handler) latest(j *job) bool {
	h.jobsMu.Lock()
	defer h.jobsMu.Unlock()
	return len(h.jobs) > 0 && h.jobs[len(h.jobs)-1] == j
}

func (h *Handler) replayJob(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(r.URL.Query().Get("id"))
	j := h.findJob(id)
	if j == nil {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("No replay #%s here: the console keeps the last %d.", r.URL.Query().Get("id"), maxJobs))
		return
	}
	v := j.view(h.latest(j))
	h.render(w, r, http.StatusOK, "job", fmt.Sprintf("Replay #%d", j.ID), v)
}

func (h *Handler) replayStop(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(r.FormValue("id"))
	j := h.findJob(id)
	if j == nil {
		h.count("replay_stop", "refused")
		h.fail(w, r, http.StatusNotFound, "No such replay.")
		return
	}
	j.replayer.Stop()
	h.count("replay_stop", "done")
	h.log.Info("console: replay stopped", "actor", actor(r), "job", j.ID)
	http.Redirect(w, r, h.link("/replay/job?id="+strconv.Itoa(j.ID)), http.StatusSeeOther)
}
