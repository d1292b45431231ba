package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

const flowUsage = `Usage: sqsonce flow <command> [--config FILE] [flags]

Pause and resume the intake by hand, and see what flow control does, on
every worker that shares the ledger (ledger.backend).

Commands:
  status                          the pauses in the ledger (scope, state, since, reason, who, next
                                  probe, probes failed, ramp cap, expiry) and the workers of its
                                  registry (host, pid, version, started, last beat, in hand, paused),
                                  saying which look down; --json for JSON
  pause --until T --reason TEXT   pause the intake of the scope until T, an RFC 3339 time or a
                                  duration such as 30m, which must be below the queue's message
                                  retention: no worker receives, messages in hand are held, no
                                  probe runs; it replaces an automatic pause
  resume [--reason TEXT]          end the scope's pause, by hand or automatic: the intake opens

--scope S names the scope; by default flow.scope, or the queue's name and
the handler's target ("orders https://partner.example/api"). A partition
value's scope is shown by status. Who acts is user@host (the user behind
sudo, when run with it); each pause and resume is logged with who and why.

With bbolt these work while a worker runs: they reach its ledger through
the socket it serves beside the file (ledger.path + ".sock"). A shared
ledger they reach directly.
`

// downAfter is the age of a process's last beat after which status says it
// looks down: three beats of the worker's registration (every 5 s).
const downAfter = 3 * 5 * time.Second

// flowCommand is `sqsonce flow`.
func (m *Main) flowCommand(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(m.Stdout, flowUsage)
		if len(args) == 0 {
			return usageErrorf("missing flow command")
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	if sub != "status" && sub != "pause" && sub != "resume" {
		return usageErrorf("unknown flow command %q (want status, pause or resume)", sub)
	}
	var c commonFlags
	fs := m.flagSet("flow "+sub, flowUsage, &c)
	scope := fs.String("scope", "", "the scope (default: flow.scope, or the queue's name and the handler's target)")
	until := fs.String("until", "", "pause: until when (RFC 3339, or a duration such as 30m); required")
	reason := fs.String("reason", "", "pause (required), resume: why, recorded with who")
	asJSON := fs.Bool("json", false, "status: print JSON")
	cfg, log, err := m.parse(fs, &c, rest)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("flow %s takes no arguments, got %q", sub, fs.Args())
	}
	if err := flagsOf(fs, sub); err != nil {
		return err
	}
	if *scope == "" {
		*scope = flowScope(cfg)
	}
	if err := ledger.ValidateScope(*scope); err != nil {
		return usageErrorf("--scope: %v", err)
	}
	if err := checkScopeText(*scope); err != nil {
		return usageErrorf("--scope: %v", err)
	}
	if sub == "resume" {
		if *reason, err = pauseReason(*reason); err != nil {
			return err
		}
	}
	var pause pauseRequest
	if sub == "pause" {
		if pause, err = parsePause(*until, *reason, time.Now()); err != nil {
			return err
		}
	}
	if cfg.Ledger.Backend == BackendBbolt {
		if _, err := os.Stat(cfg.Ledger.Path); err != nil {
			return fmt.Errorf("ledger %s: %w", cfg.Ledger.Path, err)
		}
	}
	by := actor(m.LookupEnv)
	switch sub {
	case "pause":
		retention, err := queueRetention(ctx, cfg)
		if err != nil {
			return err
		}
		err = withFlowLedger(ctx, cfg, by, func(ctx context.Context, l flowLedger) error {
			return m.flowPause(ctx, l, log, *scope, pause, by, retention)
		})
		if err == nil && cfg.Flow.Mode != string(worker.FlowOn) {
			fmt.Fprintf(m.Stdout, "note: flow.mode is %q in this configuration: workers that run with it do not hold their intake for a pause\n", cfg.Flow.Mode)
		}
		if own := flowScope(cfg); err == nil && *scope != own && !strings.HasPrefix(*scope, own+" | ") {
			fmt.Fprintf(m.Stdout, "note: %q is not this configuration's scope (%q) nor one of its partition values': only workers that run under that scope hold their intake for it (flow status lists the scopes paused)\n", *scope, own)
		}
		return err
	case "resume":
		return withFlowLedger(ctx, cfg, by, func(ctx context.Context, l flowLedger) error {
			return m.flowResume(ctx, l, log, *scope, *reason, by)
		})
	}
	return withFlowLedger(ctx, cfg, by, func(ctx context.Context, l flowLedger) error {
		st, err := readFlowStatus(ctx, l, *scope)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(m.Stdout).Encode(st.json())
		}
		st.print(m.Stdout, l.Via())
		return nil
	})
}

// flowLedger is a ledger reached for its flow state.
type flowLedger interface {
	flowAccess
	Via() string
}

// withFlowLedger opens the configured ledger as the ledger commands do (a
// running worker's socket for a bbolt file it holds) and calls fn with it
// and a context that names who acts in the calls through a socket.
func withFlowLedger(ctx context.Context, cfg Config, by string, fn func(ctx context.Context, l flowLedger) error) error {
	ctx = withActor(ctx, by)
	l, err := openLedgerAccess(ctx, cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	return fn(ctx, l)
}

// pauseRequest is a pause by hand, as asked.
type pauseRequest struct {
	until  time.Time
	reason string
}

// maxPauseReason bounds the reason of a pause by hand, in bytes.
const maxPauseReason = 512

// flowFlags are the flags each flow command takes, beside the common ones.
var flowFlags = map[string][]string{
	"status": {"scope", "json"},
	"pause":  {"scope", "until", "reason"},
	"resume": {"scope", "reason"},
}

// flagsOf refuses a flag given to the flow command sub that it does not
// take (resume --until would otherwise resume at once, its flag unread).
func flagsOf(fs *flag.FlagSet, sub string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "config", "log-format", "log-level":
			return
		}
		if err == nil && !slices.Contains(flowFlags[sub], f.Name) {
			err = usageErrorf("flow %s does not take --%s (it takes %s)", sub, f.Name, "--"+strings.Join(flowFlags[sub], ", --"))
		}
	})
	return err
}

// pauseReason reads --reason: its white space collapsed, printable UTF-8
// (it is shown on operators' terminals and in the logs), at most
// maxPauseReason bytes.
func pauseReason(reason string) (string, error) {
	reason = strings.Join(strings.Fields(reason), " ")
	switch {
	case !utf8.ValidString(reason) || strings.ContainsFunc(reason, notPrint):
		return "", usageErrorf("--reason %q: want printable text (no control or format characters)", reason)
	case len(reason) > maxPauseReason:
		return "", usageErrorf("--reason of %d bytes, over %d", len(reason), maxPauseReason)
	}
	return reason, nil
}

// parsePause reads --until (RFC 3339, or a duration from now) and
// --reason.
func parsePause(until, reason string, now time.Time) (pauseRequest, error) {
	if until == "" {
		return pauseRequest{}, usageErrorf("--until is required: when the pause ends by itself (RFC 3339, or a duration such as 30m)")
	}
	reason, err := pauseReason(reason)
	if err != nil {
		return pauseRequest{}, err
	}
	p := pauseRequest{reason: reason}
	if t, err := time.Parse(time.RFC3339, until); err == nil {
		p.until = t
	} else if d, err := time.ParseDuration(until); err == nil {
		p.until = now.Add(d)
	} else {
		return pauseRequest{}, usageErrorf("--until %q: want an RFC 3339 time (2030-01-02T15:04:05Z) or a duration (30m, 2h)", until)
	}
	switch {
	case !p.until.After(now):
		return pauseRequest{}, usageErrorf("--until %s is not in the future", until)
	case p.reason == "":
		return pauseRequest{}, usageErrorf("--reason is required: why the intake is paused, for whoever finds it paused")
	}
	return p, nil
}

// queueRetention is the message retention of the configured queue, which
// bounds a pause by hand.
func queueRetention(ctx context.Context, cfg Config) (time.Duration, error) {
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return 0, err
	}
	q, err := worker.InspectQueue(ctx, client, cfg.Queue.URL)
	if err != nil {
		return 0, fmt.Errorf("cannot read the queue's message retention, which bounds a pause: %w", err)
	}
	return q.Retention, nil
}

// actor names who runs the command: user@host, the user being the one
// behind sudo when sudo runs it.
func actor(lookupEnv func(string) (string, bool)) string {
	name := ""
	if s, ok := lookupEnv("SUDO_USER"); ok && s != "" {
		name = s
	} else if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if s, ok := lookupEnv("USER"); ok && s != "" {
		name = s
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s", cmp.Or(name, "unknown"), cmp.Or(host, "unknown"))
}

// flowPause writes a pause by hand of scope until p.until (see
// worker.PauseByHand).
func (m *Main) flowPause(ctx context.Context, l flowLedger, log *slog.Logger, scope string, p pauseRequest, by string, retention time.Duration) error {
	if time.Until(p.until) <= 0 {
		return usageErrorf("--until %s has passed", p.until.UTC().Format(time.RFC3339))
	}
	got, err := worker.PauseByHand(ctx, l, scope, p.until, p.reason, by, retention)
	if errors.Is(err, worker.ErrPauseTooLong) {
		return usageErrorf("%w: pause for less, or raise the queue's MessageRetentionPeriod", err)
	}
	if err != nil {
		return err
	}
	log.Info("flow: intake paused by hand", "scope", scope, "by", by, "reason", p.reason, "until", got.Written.Doc.Expires, "replaced", describeState(got.Before, got.Was))
	fmt.Fprintf(m.Stdout, "paused the intake of %q until %s (in %v), on every worker sharing the ledger (via %s); it was %s\n",
		scope, got.Written.Doc.Expires.UTC().Format(time.RFC3339), got.Written.Doc.Expires.Sub(got.Written.Now).Round(time.Second), l.Via(), describeState(got.Before, got.Was))
	return nil
}

// flowResume deletes scope's pause document, whatever paused it (see
// worker.Resume).
func (m *Main) flowResume(ctx context.Context, l flowLedger, log *slog.Logger, scope, reason, by string) error {
	was, before, found, err := worker.Resume(ctx, l, scope)
	if err != nil {
		return err
	}
	if !found {
		fmt.Fprintf(m.Stdout, "the intake of %q is not paused: nothing to resume\n", scope)
		return nil
	}
	log.Info("flow: intake resumed by hand", "scope", scope, "by", by, "reason", reason, "was", describeState(before, was))
	fmt.Fprintf(m.Stdout, "resumed the intake of %q on every worker sharing the ledger (via %s); it was %s\n", scope, l.Via(), describeState(before, was))
	return nil
}

// decodePause reads the pause document of r (see worker.DecodePause).
func decodePause(r ledger.FlowRead) (worker.PauseDoc, bool) { return worker.DecodePause(r) }

// describeState says in a few words what a scope's document says: "not
// paused", "paused by hand by alice@ops since ... (why)", "paused
// automatically since ..." or "ramping up".
func describeState(r ledger.FlowRead, d worker.PauseDoc) string {
	switch {
	case !r.Found:
		return "not paused"
	case d.State == "":
		return "holding a document that is not a pause"
	case d.State == worker.PauseRamping:
		return fmt.Sprintf("ramping up after a pause since %s", d.Since.UTC().Format(time.RFC3339))
	case d.Manual:
		return fmt.Sprintf("paused by hand by %s since %s (%s)", oneLine(d.By, maxPauseReason), d.Since.UTC().Format(time.RFC3339), oneLine(d.Reason, maxPauseReason))
	}
	return fmt.Sprintf("paused automatically since %s (%s)", d.Since.UTC().Format(time.RFC3339), oneLine(d.Reason, maxPauseReason))
}

// flowStatus is what `sqsonce flow status` shows.
type flowStatus struct {
	now       time.Time // the ledger's clock
	scope     string    // the configuration's
	pauses    []scopePause
	processes []ledger.Process
}

// scopePause is one scope's flow document as status shows it.
type scopePause struct {
	doc   ledger.FlowDoc
	pause worker.PauseDoc
	ok    bool // the document is a pause
}

// readFlowStatus reads the ledger's pauses and processes; the pauses of
// scope and of its partition values first.
func readFlowStatus(ctx context.Context, l flowAccess, scope string) (flowStatus, error) {
	r, err := l.GetFlow(ctx, scope)
	if err != nil {
		return flowStatus{}, err
	}
	docs, err := l.ListFlows(ctx)
	if err != nil {
		return flowStatus{}, err
	}
	ps, err := l.Processes(ctx)
	if err != nil {
		return flowStatus{}, err
	}
	st := flowStatus{now: r.Now, scope: scope, processes: ps}
	for _, d := range docs {
		p, ok := decodePause(ledger.FlowRead{Doc: d, Found: true})
		st.pauses = append(st.pauses, scopePause{doc: d, pause: p, ok: ok})
	}
	mine := func(s string) bool { return s == scope || strings.HasPrefix(s, scope+" | ") }
	slices.SortStableFunc(st.pauses, func(a, b scopePause) int {
		switch ma, mb := mine(a.doc.Scope), mine(b.doc.Scope); {
		case ma && !mb:
			return -1
		case mb && !ma:
			return 1
		}
		return strings.Compare(a.doc.Scope, b.doc.Scope)
	})
	return st, nil
}

// stamp is t in UTC and how long ago or ahead of now it is.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d >= 0 {
		return fmt.Sprintf("%s (%v ago)", t.UTC().Format(time.RFC3339), d)
	}
	return fmt.Sprintf("%s (in %v)", t.UTC().Format(time.RFC3339), -d)
}

func (st flowStatus) print(w io.Writer, via string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "  %s\t%s\n", k, fmt.Sprintf(format, args...)) }
	fmt.Fprintf(tw, "ledger read via %s at %s; this configuration's scope is %q\n", via, st.now.UTC().Format(time.RFC3339), st.scope)
	if len(st.pauses) == 0 {
		fmt.Fprintf(tw, "\nno scope is paused\n")
	}
	for _, sp := range st.pauses {
		d, p := sp.doc, sp.pause
		fmt.Fprintf(tw, "\nscope %q\n", d.Scope)
		if !sp.ok {
			row("state", "a flow document that is not a pause (version %d)", d.Version)
			continue
		}
		state := p.State
		switch {
		case p.State == worker.PausePaused && p.Manual:
			state = "paused by hand: no probes; it ends at its expiry or a resume"
		case p.State == worker.PausePaused:
			state = "paused: the handlers' downstream is down; one probe at a time"
		case p.State == worker.PauseRamping:
			state = "ramping up: the probe succeeded; each worker runs up to the cap at once, doubled as they succeed"
		}
		row("state", "%s", state)
		row("since", "%s", stamp(p.Since, st.now))
		row("reason", "%s", oneLine(p.Reason, 300))
		row("by", "%s", oneLine(p.By, 200))
		if p.State == worker.PausePaused && !p.Manual {
			next := stamp(p.Next, st.now)
			if p.Prober != "" && p.ProbeEnd.After(st.now) {
				next = "running on " + p.Prober + ", its lease until " + stamp(p.ProbeEnd, st.now)
			}
			row("next probe", "%s", next)
			row("probes failed", "%d", p.Probes)
		}
		if p.State == worker.PauseRamping {
			row("cap", "%d", p.Cap)
		}
		expires := "never"
		if !d.Expires.IsZero() {
			expires = stamp(d.Expires, st.now)
		}
		row("expires", "%s", expires)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n")
	if len(st.processes) == 0 {
		fmt.Fprintf(w, "no worker in the ledger's registry\n")
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tPID\tVERSION\tQUEUE\tSTARTED\tLAST BEAT\tIN HAND\tPAUSED")
	for _, p := range st.processes {
		beat := p.BeatAge.Round(time.Second).String() + " ago"
		if p.BeatAge > downAfter {
			beat += " (looks down)"
		}
		paused := "no"
		if p.Paused {
			paused = "yes: " + oneLine(p.PausedWhy, 80)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", p.Host, p.PID, p.Version, worker.QueueName(p.Queue),
			p.Started.UTC().Format(time.RFC3339), beat, p.InHand, paused)
	}
	tw.Flush()
	down := 0
	for _, p := range st.processes {
		if p.BeatAge > downAfter {
			down++
		}
	}
	if down > 0 {
		fmt.Fprintf(w, "%d worker(s) look down: no beat for over %v (a worker beats every 5 s; a stopped one removes itself)\n", down, downAfter)
	}
}

// flowStatusJSON is status as JSON.
type flowStatusJSON struct {
	Now       time.Time           `json:"now"`
	Scope     string              `json:"scope"`
	Pauses    []flowPauseJSON     `json:"pauses"`
	Processes []flowProcessStatus `json:"processes"`
}

type flowPauseJSON struct {
	Scope   string           `json:"scope"`
	Version int64            `json:"version"`
	Expires *time.Time       `json:"expires,omitempty"`
	Pause   *worker.PauseDoc `json:"pause,omitempty"` // absent: not a pause document
}

type flowProcessStatus struct {
	ID             string    `json:"id"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Version        string    `json:"version"`
	Queue          string    `json:"queue"`
	Started        time.Time `json:"started"`
	BeatAgeSeconds float64   `json:"beat_age_seconds"`
	InHand         int       `json:"in_hand"`
	Paused         bool      `json:"paused"`
	PausedWhy      string    `json:"paused_why,omitempty"`
	Down           bool      `json:"down"`
}

func (st flowStatus) json() flowStatusJSON {
	out := flowStatusJSON{Now: st.now, Scope: st.scope, Pauses: []flowPauseJSON{}, Processes: []flowProcessStatus{}}
	for _, sp := range st.pauses {
		j := flowPauseJSON{Scope: sp.doc.Scope, Version: sp.doc.Version}
		if !sp.doc.Expires.IsZero() {
			j.Expires = &sp.doc.Expires
		}
		if sp.ok {
			j.Pause = &sp.pause
		}
		out.Pauses = append(out.Pauses, j)
	}
	for _, p := range st.processes {
		out.Processes = append(out.Processes, flowProcessStatus{ID: p.ID, Host: p.Host, PID: p.PID, Version: p.Version, Queue: p.Queue,
			Started: p.Started, BeatAgeSeconds: p.BeatAge.Seconds(), InHand: p.InHand, Paused: p.Paused, PausedWhy: p.PausedWhy,
			Down: p.BeatAge > downAfter})
	}
	return out
}
