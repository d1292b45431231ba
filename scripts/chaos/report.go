package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Files the harness writes into its work directory. The progress log is
// written as it goes, so that it survives a run that dies; the report
// files are written at the end whenever the directory is kept.
const (
	progressFile   = "progress.log"
	reportFile     = "report.txt"
	reportJSONFile = "report.json"
)

// Report is what the campaigns found: one section each.
type Report struct {
	Sections []*section
	Elapsed  time.Duration
}

// section is one campaign's part of the report: its figures and its
// checks, in the order of the table, and the findings and per-operation
// details behind them.
type section struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Lines   []line   `json:"lines"`
	Notes   []string `json:"notes"`
	Details []string `json:"details"`
}

// line is a row of the table: a figure, or a check.
type line struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
	Check *check `json:"check,omitempty"`
}

// check is one figure that decides the verdict: Zero ones must be 0.
type check struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	OK    bool   `json:"ok"`
	Zero  bool   `json:"must_be_zero,omitempty"`
}

func (s *section) row(name, value string) { s.Lines = append(s.Lines, line{Name: name, Value: value}) }

// zero adds a check that n is 0.
func (s *section) zero(name string, n int) {
	s.Lines = append(s.Lines, line{Name: name, Check: &check{Name: s.Name + ": " + name, Value: strconv.Itoa(n), OK: n == 0, Zero: true}})
}

// must adds a check that passed when ok.
func (s *section) must(name string, ok bool, value string) {
	s.Lines = append(s.Lines, line{Name: name, Check: &check{Name: s.Name + ": " + name, Value: value, OK: ok}})
}

func (s *section) detail(format string, args ...any) {
	s.Details = append(s.Details, fmt.Sprintf(format, args...))
}

// checks lists every check of the report, in the order of the table.
func (r *Report) checks() []check {
	var out []check
	for _, s := range r.Sections {
		for _, l := range s.Lines {
			if l.Check != nil {
				out = append(out, *l.Check)
			}
		}
	}
	return out
}

// failed returns the checks that did not pass, as "name: value".
func (r *Report) failed() []string {
	var out []string
	for _, c := range r.checks() {
		if !c.OK {
			out = append(out, c.Name+": "+c.Value)
		}
	}
	return out
}

// OK reports whether every must-be-zero figure is zero and every check
// passed.
func (r *Report) OK() bool { return len(r.Sections) > 0 && len(r.failed()) == 0 }

// print writes the report as one table.
func (r *Report) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(tw, "sqsonce chaos campaigns: %s in %v\n", verdict, r.Elapsed.Round(time.Second))
	for _, s := range r.Sections {
		fmt.Fprintf(tw, "  campaign %s\t%s\n", s.Name, s.Title)
		for _, l := range s.Lines {
			switch c := l.Check; {
			case c == nil:
				fmt.Fprintf(tw, "    %s\t%s\n", l.Name, l.Value)
			case c.Zero:
				fmt.Fprintf(tw, "  %s\t%s  (must be 0: %s)\n", c.Name, c.Value, mark(c.OK))
			default:
				fmt.Fprintf(tw, "  %s\t%s: %s\n", c.Name, mark(c.OK), c.Value)
			}
		}
	}
	if f := r.failed(); len(f) > 0 {
		fmt.Fprintf(tw, "  FAILED\t%s\n", strings.Join(f, "; "))
	}
	tw.Flush()
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// write writes report.txt and report.json into dir: the table (and the
// error that ended the run early), the checks that failed, the findings
// and the per-operation details. It returns the last line of a run that
// keeps its work directory: the verdict, what failed, and where to look.
func (r *Report) write(dir string, runErr error) (last string, err error) {
	var txt bytes.Buffer
	j := struct {
		Verdict        string     `json:"verdict"` // PASS, FAIL or ERROR
		Error          string     `json:"error,omitempty"`
		ElapsedSeconds float64    `json:"elapsed_seconds"`
		Failed         []string   `json:"failed"`
		Checks         []check    `json:"checks"`
		Sections       []*section `json:"sections"`
	}{Verdict: "FAIL", ElapsedSeconds: r.Elapsed.Seconds(), Failed: r.failed(), Checks: r.checks(), Sections: r.Sections}
	verdict := "FAIL (" + strings.Join(j.Failed, "; ") + ")"
	switch {
	case runErr != nil:
		j.Verdict, j.Error = "ERROR", runErr.Error()
		fmt.Fprintf(&txt, "sqsonce chaos campaigns: ERROR: %v\n", runErr)
		verdict = "ERROR (" + runErr.Error() + ")"
	case r.OK():
		j.Verdict, verdict = "PASS", "PASS"
	}
	r.print(&txt)
	for _, s := range r.Sections {
		for _, n := range s.Notes {
			fmt.Fprintf(&txt, "%s: finding: %s\n", s.Name, n)
		}
		for _, d := range s.Details {
			fmt.Fprintf(&txt, "%s: detail: %s\n", s.Name, d)
		}
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err == nil {
		err = errors.Join(os.WriteFile(filepath.Join(dir, reportFile), txt.Bytes(), 0o644), os.WriteFile(filepath.Join(dir, reportJSONFile), append(b, '\n'), 0o644))
	}
	return fmt.Sprintf("chaos: %s; work directory kept: %s: %s (the progress), %s and %s (the report), CAMPAIGN/runs/ (each worker run's output, events and counters)",
		verdict, dir, progressFile, reportFile, reportJSONFile), err
}

// figures adds the campaign's figures: what was sent, the operations, the
// faults, the runs and the workers' counters, and the ledger at the end.
func (e *env) figures(h *history, s *section) {
	senders := map[string]int{}
	for _, byKind := range e.snd.faults.Counts() {
		for k, n := range byKind {
			senders[string(k)] += n
		}
	}
	s.row("messages sent", fmt.Sprintf("%d answered by SQS (%d planned; each of the %d lost acknowledgements of a send made an extra copy)", len(h.msgs), e.planned, senders["LostAck"]))
	s.row("faults injected (sender's sends)", kinds(senders))
	byClass, states := map[class]int{}, map[class]map[string]int{}
	for _, o := range h.ops {
		if byClass[o.class]++; states[o.class] == nil {
			states[o.class] = map[string]int{}
		}
		states[o.class][h.state(o.id)]++
	}
	s.row("operations", fmt.Sprintf("%d: %v; %d of them sent by the faults", len(h.ops), byClass, len(h.ops)-e.loadOps))
	if e.c.System.FIFO {
		s.row("bursts", fmt.Sprintf("%d of 4-8 operations of one group sent together, the first and one in the middle slow; %d of them with a copy of one of their operations in another group", e.wl.bursts, e.wl.crossCopies))
	}
	all := map[string]int{}
	for _, byKind := range h.faults {
		for k, n := range byKind {
			all[k] += n
		}
	}
	s.row("faults injected (worker SQS calls)", kinds(all))
	for _, op := range []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "SendMessage"} {
		if len(h.faults[op]) > 0 {
			s.row("  "+op, kinds(h.faults[op]))
		}
	}
	ends := map[string]int{}
	for _, r := range h.runs {
		ends[r.end]++
	}
	s.row("worker runs", fmt.Sprintf("%d: %d in window a, %d in window b, %d in the handler, %d inside the transaction, %d at random (SIGKILL); %d SIGTERM drains (exit 0; %d with a second SIGTERM), %d refused starts, %d failed; %d paused (SIGSTOP %v), %d while they kept messages waiting behind a running one",
		len(h.runs), ends[endWindowA], ends[endWindowB], ends[endInHandler], ends[endInTx], ends[endKill], ends[endTerm], e.doubleTs, ends[endRefused], ends[endFailed], e.pauses, pauseFor, e.aimed))
	s.row("worker counters (summed)", fmt.Sprintf("%+v", h.stats))
	for c := range classes {
		if c != keyless && len(states[c]) > 0 {
			s.row("ledger at the end: "+c.String(), fmt.Sprint(states[c]))
		}
	}
}

func kinds(m map[string]int) string {
	var parts []string
	total := 0
	for _, k := range []string{"Throttle", "ServerError", "Timeout", "Reset", "LostAck", "EntryFailure"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		total += m[k]
	}
	return fmt.Sprintf("%s  (total %d)", strings.Join(parts, ", "), total)
}

// logWriter writes the progress both to its destination and to the
// progress log in the work directory, one whole write at a time.
type logWriter struct {
	mu   sync.Mutex
	dst  io.Writer
	file *os.File
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.file.Write(p)
	_, _ = w.dst.Write(p)
	return len(p), nil
}
