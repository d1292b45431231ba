package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Files the campaign writes into its work directory. The progress log is
// written as the campaign goes, so that it survives a campaign that dies;
// the report files are written at the end whenever the directory is kept.
const (
	progressFile   = "progress.log"
	reportFile     = "report.txt"
	reportJSONFile = "report.json"
)

// check is one figure that decides the verdict.
type check struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	OK    bool   `json:"ok"`
}

// checks lists every figure that decides the verdict, in the order of the
// table. OK is their conjunction.
func (r *Report) checks() []check {
	var cs []check
	if r.Standard {
		cs = r.standardChecks("")
	}
	if r.FIFO != nil {
		cs = append(cs, r.FIFO.checks()...)
	}
	if r.FIFOShared != nil {
		cs = append(cs, r.FIFOShared.checks()...)
	}
	if r.Shared != nil {
		cs = append(cs, r.Shared.standardChecks("shared: ")...)
	}
	if r.Tx != nil {
		cs = append(cs, r.Tx.checks()...)
	}
	return cs
}

// standardChecks lists the checks of the standard campaign's audit, also
// made of the shared-ledger campaign's (prefix names them).
func (r *Report) standardChecks(prefix string) []check {
	var cs []check
	zero := func(name string, n int) {
		cs = append(cs, check{Name: prefix + name, Value: strconv.Itoa(n), OK: n == 0})
	}
	zero("operations lost", r.Lost)
	zero("acknowledged but not done", r.AckNotDone)
	zero("dead-lettered with a reason, expected to complete", r.DLQWrongReason)
	zero("handler calls after their claim was lost", r.AfterLoss)
	cs = append(cs, check{Name: prefix + "in the dead-letter queue as expected", Value: fmt.Sprintf("%d of %d", r.FoundDLQ, r.ExpectDLQ), OK: r.FoundDLQ == r.ExpectDLQ})
	zero(causeTakenOver, r.Extra[causeTakenOver])
	zero(causeUnexplained, r.Extra[causeUnexplained])
	zero("effects applied twice", r.EffectsTwice)
	zero("conflicting payloads run", r.ConflictRan)
	zero("keyless messages run", r.KeylessRan)
	for _, p := range r.Phases {
		v := "ok"
		if !p.ok {
			v = "failed: " + p.detail
		}
		cs = append(cs, check{Name: prefix + "ledger phase: " + p.name, Value: v, OK: p.ok})
	}
	cs = append(cs, check{Name: prefix + "queue empty at the end", Value: strconv.FormatBool(r.Quiet), OK: r.Quiet})
	zero("other findings", len(r.Notes))
	return cs
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

// reportJSON is report.json: the verdict, the checks and the details, for
// a program to read.
type reportJSON struct {
	Verdict        string      `json:"verdict"` // PASS, FAIL or ERROR
	Error          string      `json:"error,omitempty"`
	ElapsedSeconds float64     `json:"elapsed_seconds"`
	Failed         []string    `json:"failed"`
	Checks         []check     `json:"checks"`
	Notes          []string    `json:"notes"`
	Details        []string    `json:"details"`
	Executions     int         `json:"executions"`
	Effects        int         `json:"effects"`
	Completed      int         `json:"completed"`
	ExpectComplete int         `json:"expect_complete"`
	DLQMessages    int         `json:"dlq_messages"`
	Runs           int         `json:"runs"`
	Kills          int         `json:"kills"`
	FIFO           *fifoJSON   `json:"fifo,omitempty"`
	FIFOShared     *fifoJSON   `json:"fifo_shared,omitempty"`
	Shared         *sharedJSON `json:"shared,omitempty"`
	Tx             *txJSON     `json:"tx,omitempty"`
}

// txJSON is the transactional campaign's part of report.json.
type txJSON struct {
	Workers                   int            `json:"workers"`
	Runs                      int            `json:"runs"`
	Kills                     int            `json:"kills"`
	InTxKills                 int            `json:"kills_in_transaction"`
	InTxHolds                 int            `json:"transactions_held"`
	Panics                    int            `json:"handler_panics"`
	PanicSessionsRead         int            `json:"panicked_sessions_read"`
	PanicTxLeft               int            `json:"panicked_transactions_left_open"`
	LeakChecks                int            `json:"runs_that_counted_sessions"`
	LeakedSessions            int            `json:"sessions_left_in_transaction"`
	PanicCommitted            int            `json:"panicked_rows_committed"`
	Restarts                  int            `json:"database_restarts"`
	ConnsCut                  int            `json:"connections_cut"`
	LostRequests              int            `json:"commit_requests_lost"`
	LostAnswers               int            `json:"commit_answers_lost"`
	ResolvedCommitted         int            `json:"lost_answers_told_committed"`
	AnsweredToldFailed        int            `json:"lost_answers_told_not_committed"`
	ResolvedNotCommitted      int            `json:"lost_requests_told_not_committed"`
	LostUnresolved            int            `json:"lost_commits_of_killed_runs"`
	EffectRows                int            `json:"effect_rows"`
	OpsComplete               int            `json:"operations_complete"`
	Completed                 int            `json:"completed"`
	ExpectComplete            int            `json:"expect_complete"`
	Attempts                  int            `json:"attempts_inserted"`
	Committed                 int            `json:"attempts_committed"`
	RolledBack                int            `json:"attempts_rolled_back"`
	RolledBackBy              map[string]int `json:"rolled_back_by"`
	Messages                  int            `json:"messages"`
	MsgDone                   int            `json:"messages_done"`
	MsgDLQ                    int            `json:"messages_in_dlq"`
	MsgQueued                 int            `json:"messages_queued"`
	MsgLost                   int            `json:"messages_not_accounted_for"`
	Lost                      int            `json:"lost"`
	AckNotDone                int            `json:"ack_not_done"`
	EffectsTwice              int            `json:"effects_twice"`
	RowWithoutCompletion      int            `json:"rows_without_completion"`
	RowOfAnotherAttempt       int            `json:"rows_of_another_attempt"`
	ToldCommittedNotCommitted int            `json:"told_committed_not_committed"`
	InTxCommitted             int            `json:"in_transaction_kills_committed"`
	LostRequestCommitted      int            `json:"lost_requests_committed"`
	LostAnswerMissing         int            `json:"lost_answers_missing"`
	ConflictRan               int            `json:"conflict_ran"`
	KeylessRan                int            `json:"keyless_ran"`
}

// sharedJSON is the shared-ledger campaign's part of report.json.
type sharedJSON struct {
	Workers        int            `json:"workers"`
	Lost           int            `json:"lost"`
	AckNotDone     int            `json:"ack_not_done"`
	EffectsTwice   int            `json:"effects_twice"`
	ConflictRan    int            `json:"conflict_ran"`
	Extra          map[string]int `json:"extra_executions"`
	Executions     int            `json:"executions"`
	Effects        int            `json:"effects"`
	Completed      int            `json:"completed"`
	ExpectComplete int            `json:"expect_complete"`
	Runs           int            `json:"runs"`
	Kills          int            `json:"kills"`
	Takeovers      int64          `json:"takeovers"`
	Unavailable    int64          `json:"ledger_calls_unavailable"`
	WaitSeconds    []float64      `json:"waits_seconds"`
	Outages        []outageJSON   `json:"outages"`
}

// outageJSON is one outage of the database.
type outageJSON struct {
	Kind           string             `json:"kind"`
	From           time.Time          `json:"from"`
	Seconds        float64            `json:"seconds"`
	Cut            int                `json:"connections_cut"`
	ResumedSeconds map[string]float64 `json:"resumed_seconds"` // by run
	Stuck          []int              `json:"not_resumed"`
}

// fifoJSON is the FIFO campaign's part of report.json.
type fifoJSON struct {
	Sent            int            `json:"sent"`
	Dropped         int            `json:"dropped_at_send"`
	Done            int            `json:"done"`
	InDLQ           int            `json:"in_dlq"`
	InQueue         int            `json:"in_queue"`
	Lost            int            `json:"lost"`
	LostBy          map[string]int `json:"lost_by"`
	OrderChecked    int            `json:"order_checked"`
	OrderViolations int            `json:"order_violations"`
	OrderFrozen     int            `json:"order_broken_by_frozen_runs"`
	Executions      int            `json:"executions"`
	Effects         int            `json:"effects"`
	Replays         []replayRound  `json:"replays"`
	// The messages that waited in a worker's hands behind a running one
	// of their group, and what became of claims.
	Bursts            int   `json:"bursts"`
	GroupWaited       int64 `json:"group_waited"`
	GroupWaitBeats    int64 `json:"group_wait_beats"`
	LeaseLost         int64 `json:"lease_lost"`
	StaleReclaimed    int64 `json:"stale_reclaimed"`
	ReceiptLost       int64 `json:"receipt_lost"`
	Takeovers         int64 `json:"takeovers"`
	AfterLoss         int   `json:"handler_calls_after_claim_lost"`
	TakenUnstarted    int   `json:"claims_taken_over_unstarted"`
	Forgets           int   `json:"waiting_records_forgotten"`
	DLQShouldComplete int   `json:"dead_lettered_expected_to_complete"`
	DLQRedriven       int   `json:"redriven_expected_to_complete"`
	NotOwnerCompletes int   `json:"completions_refused_not_owner"`
}

// fifoJSONOf is f's part of report.json.
func fifoJSONOf(f *fifoReport) *fifoJSON {
	return &fifoJSON{Sent: f.Sent, Dropped: f.Dropped, Done: f.Done, InDLQ: f.InDLQ, InQueue: f.InQueue, Lost: f.Lost, LostBy: f.LostBy,
		OrderChecked: f.OrderChecked, OrderViolations: f.OrderViolations, OrderFrozen: f.OrderFrozen, Executions: f.Executions, Effects: f.Effects, Replays: f.Rounds,
		Bursts: f.Bursts, GroupWaited: f.Stats.GroupWaited, GroupWaitBeats: f.Stats.GroupWaitBeats, LeaseLost: f.Stats.LeaseLost,
		StaleReclaimed: f.Stats.StaleReclaimed, ReceiptLost: f.Stats.ReceiptLost, Takeovers: f.Stats.Takeovers, AfterLoss: f.AfterLoss, TakenUnstarted: f.TakenUnstarted, Forgets: f.Forgets,
		DLQShouldComplete: f.DLQShouldComplete, DLQRedriven: f.DLQRedriven, NotOwnerCompletes: f.NotOwnerCompletes}
}

// writeReport writes report.txt and report.json into dir: the table (or
// the error that ended the campaign early, with the findings made until
// then), the checks that failed and the per-operation details.
func writeReport(dir string, rep *Report, runErr error, notes []string) error {
	var txt bytes.Buffer
	j := reportJSON{Verdict: "ERROR", Failed: []string{}, Checks: []check{}, Notes: []string{}, Details: []string{}}
	if runErr != nil {
		j.Error = runErr.Error()
		fmt.Fprintf(&txt, "sqsonce chaos campaign: ERROR: %v\n", runErr)
	}
	if rep == nil {
		j.Notes = append(j.Notes, notes...)
		for _, n := range notes {
			fmt.Fprintln(&txt, "finding:", n)
		}
	}
	if rep != nil {
		if runErr == nil {
			j.Verdict = "PASS"
			if !rep.OK() {
				j.Verdict = "FAIL"
			}
		}
		rep.print(&txt)
		j.ElapsedSeconds = rep.Elapsed.Seconds()
		j.Checks = rep.checks()
		j.Failed = append(j.Failed, rep.failed()...)
		j.Notes = append(j.Notes, rep.Notes...)
		j.Details = append(j.Details, rep.Details...)
		j.Executions, j.Effects, j.Completed, j.ExpectComplete = rep.Executions, rep.Effects, rep.Completed, rep.ExpectComplete
		j.DLQMessages, j.Runs, j.Kills = rep.DLQMessages, rep.Runs, rep.Kills
		if f := rep.FIFO; f != nil {
			j.FIFO = fifoJSONOf(f)
			j.Notes = append(j.Notes, f.Notes...)
			j.Details = append(j.Details, f.Details...)
		}
		if f := rep.FIFOShared; f != nil {
			j.FIFOShared = fifoJSONOf(f)
			for _, n := range f.Notes {
				j.Notes = append(j.Notes, "fifo-shared: "+n)
			}
			for _, d := range f.Details {
				j.Details = append(j.Details, "fifo-shared: "+d)
			}
		}
		if s := rep.Shared; s != nil {
			sj := &sharedJSON{Lost: s.Lost, AckNotDone: s.AckNotDone, EffectsTwice: s.EffectsTwice, ConflictRan: s.ConflictRan, Extra: s.Extra,
				Executions: s.Executions, Effects: s.Effects, Completed: s.Completed, ExpectComplete: s.ExpectComplete, Runs: s.Runs, Kills: s.Kills,
				WaitSeconds: []float64{}, Outages: []outageJSON{}}
			if pg := s.PG; pg != nil {
				sj.Workers, sj.Takeovers, sj.Unavailable = pg.Workers, pg.Takeovers, pg.Unavail
				sj.WaitSeconds, _ = pg.waitSeconds()
				for _, o := range pg.Outages {
					oj := outageJSON{Kind: o.kind, From: o.from, Seconds: o.to.Sub(o.from).Seconds(), Cut: o.cut, ResumedSeconds: map[string]float64{}, Stuck: o.stuck}
					for id, d := range o.resumed {
						oj.ResumedSeconds[strconv.Itoa(id)] = d.Seconds()
					}
					sj.Outages = append(sj.Outages, oj)
				}
			}
			j.Shared = sj
			for _, n := range s.Notes {
				j.Notes = append(j.Notes, "shared: "+n)
			}
			for _, d := range s.Details {
				j.Details = append(j.Details, "shared: "+d)
			}
		}
		if t := rep.Tx; t != nil {
			j.Tx = &txJSON{Workers: t.Workers, Runs: t.Runs, Kills: t.Kills, InTxKills: t.InTxKills, InTxHolds: t.InTxHolds,
				Panics: t.Panics, PanicSessionsRead: t.PanicSessionsRead, PanicTxLeft: t.PanicTxLeft, LeakChecks: t.LeakChecks, LeakedSessions: t.LeakedSessions, PanicCommitted: t.PanicCommitted,
				Restarts: t.Restarts, ConnsCut: t.ConnsCut, LostRequests: t.LostRequests, LostAnswers: t.LostAnswers,
				ResolvedCommitted: t.ResolvedCommitted, AnsweredToldFailed: t.AnsweredToldFailed, ResolvedNotCommitted: t.ResolvedNotCommitted,
				LostUnresolved: t.LostUnresolved, EffectRows: t.EffectRows, OpsComplete: t.OpsComplete, Completed: t.Completed,
				ExpectComplete: t.ExpectComplete, Attempts: t.Attempts, Committed: t.Committed, RolledBack: t.RolledBack,
				RolledBackBy: t.RolledBackBy, Messages: t.Messages, MsgDone: t.MsgDone, MsgDLQ: t.MsgDLQ, MsgQueued: t.MsgQueued,
				MsgLost: t.MsgLost, Lost: t.Lost, AckNotDone: t.AckNotDone, EffectsTwice: t.EffectsTwice,
				RowWithoutCompletion: t.RowWithoutCompletion, RowOfAnotherAttempt: t.RowOfAnotherAttempt,
				ToldCommittedNotCommitted: t.ToldCommittedNotCommitted, InTxCommitted: t.InTxCommitted,
				LostRequestCommitted: t.LostRequestCommitted, LostAnswerMissing: t.LostAnswerMissing,
				ConflictRan: t.ConflictRan, KeylessRan: t.KeylessRan}
			for _, n := range t.Notes {
				j.Notes = append(j.Notes, "tx: "+n)
			}
			for _, d := range t.Details {
				j.Details = append(j.Details, "tx: "+d)
			}
		}
		if len(j.Details) > 0 || len(j.Notes) > 0 {
			fmt.Fprintln(&txt, "\nfindings and details:")
			for _, n := range j.Notes {
				fmt.Fprintln(&txt, "finding:", n)
			}
			for _, d := range j.Details {
				fmt.Fprintln(&txt, "detail:", d)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, reportFile), txt.Bytes(), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, reportJSONFile), append(b, '\n'), 0o644)
}

// logWriter writes the campaign's progress both to its destination and to
// the progress log in the work directory, one whole write at a time.
type logWriter struct {
	mu   sync.Mutex
	dst  io.Writer
	file *os.File
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil {
		_, _ = w.file.Write(p)
	}
	_, _ = w.dst.Write(p)
	return len(p), nil
}

// keptLine is the last line of a campaign that keeps its work directory:
// the verdict, what failed, and where to look.
func keptLine(dir string, rep *Report, runErr error) string {
	var verdict string
	switch {
	case runErr != nil:
		verdict = "ERROR (" + runErr.Error() + ")"
	case rep == nil:
		verdict = "ERROR"
	case rep.OK():
		verdict = "PASS"
	default:
		verdict = "FAIL (" + strings.Join(rep.failed(), "; ") + ")"
	}
	return fmt.Sprintf("chaos: %s; work directory kept: %s: %s (the progress), %s and %s (the report), runs/ (each worker run's output, events and counters)",
		verdict, dir, progressFile, reportFile, reportJSONFile)
}
