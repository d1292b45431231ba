package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// Causes of an execution beyond the first successful one, found from what
// happened to the run that made the earlier one.
const (
	causeWindowA        = "crash in window a (handler done, completion not durable)"
	causeInHandler      = "kill while the downstream served the request (in-handler)"
	causeKilled         = "kill after the downstream answered, before the completion was durable"
	causeKilledInFlight = "kill while the request was in flight"
	causeCompleteFail   = "completion could not be recorded (ledger commit failed)"
	causeFailFail       = "failure could not be recorded (ledger commit failed)"
	// The shared ledger's named windows: the database was out of the
	// workers' reach (stopped, refused, cut).
	causeCompleteDown = "completion could not be recorded: the database was out of reach"
	causeFailDown     = "failure could not be recorded: the database was out of reach"
	causeLeaseDown    = "lease lapsed while the database was out of reach, another claim ran it too"
	// causeLeasePaused: a worker stopped (SIGSTOP) for longer than its
	// leases is, to the others, a worker that died: another claim takes
	// its operations over, as the lease is for.
	causeLeasePaused = "lease lapsed while its worker was stopped (SIGSTOP), another claim ran it too"
	// causeForgotten: the campaign forgot the operation's record (sqsonce
	// ledger forget) while an attempt ran: its next delivery runs it
	// again, as forget says.
	causeForgotten   = "its record forgotten (sqsonce ledger forget) while it ran, its next delivery ran it again"
	causeHandlerErr  = "the worker saw the attempt fail after the downstream did it"
	causeUnexplained = "UNEXPLAINED"
	// causeTakenOver is not the documented window: the claim's lease lapsed
	// while the work ran and another claim ran it too.
	causeTakenOver = "UNEXPLAINED: lease lapsed while the work ran, another claim ran it too"
)

// Report is what a campaign found.
type Report struct {
	Standard bool        // the standard campaign ran: the fields below are its findings
	FIFO     *fifoReport // the FIFO campaign's findings, nil when it did not run
	// FIFOShared is the findings of the FIFO campaign's part on a shared
	// ledger, nil when it did not run.
	FIFOShared *fifoReport
	// Shared is the shared-ledger campaign's report, nil when it did not
	// run; in it, PG holds what that campaign found beyond the standard
	// audit.
	Shared *Report
	PG     *sharedFindings
	// Tx is the transactional campaign's findings, nil when it did not
	// run.
	Tx *txReport

	Elapsed time.Duration

	Planned, Sent, Accepted int64
	SenderLostAcks          int
	SenderRetries           int64
	SenderFaults            map[string]int
	Ops                     map[opClass]int
	Keyless                 int
	LateResends             int
	PhaseOps                int // operations the ledger phases sent of their own (among Ops)

	Faults     map[string]int            // by kind, all worker runs
	FaultsByOp map[string]map[string]int // by operation, then kind
	Runs       int
	Ends       map[string]int // runs by how they ended
	Kills      int
	Pauses     int
	DoubleTerm int

	ExpectComplete, Completed int
	ExpectDLQ, FoundDLQ       int
	DLQMessages               int
	DLQCopiesOfCompleted      int // extra copies of completed operations (redrive of a duplicate)
	DLQBeforeComplete         int // expected to complete, dead-lettered by SQS's redrive instead
	DLQBeforeByClass          map[opClass]int
	DLQWrongReason            int // expected to complete, dead-lettered by sqsonce with a reason
	AfterLoss                 int // handler calls after their attempt's claim was lost (claimHistory.afterLoss)
	Lost, AckNotDone          int
	Executions, Effects       int
	Extra                     map[string]int // executions beyond one, by cause
	ExtraSamples              map[string][]string
	EffectsTwice              int
	ConflictRan, KeylessRan   int
	LateRanAgain              int
	InHandlerKills            int
	Window                    [3]time.Duration // handler success to durable completion: p50, p99, max
	Stats                     worker.Stats     // summed over runs (killed runs' counters may lag up to 250 ms)
	Phases                    []phaseResult
	Notes                     []string
	Quiet                     bool
	Details                   []string // per-operation problems, for the log
}

// OK reports whether every must-be-zero figure is zero and every check
// passed.
func (r *Report) OK() bool { return len(r.failed()) == 0 }

// queuedMsg is a message found in a queue at the end.
type queuedMsg struct {
	id      string
	body    string
	tag     string // event.AttrSend
	reason  string // worker.AttrReason: set when sqsonce dead-lettered it
	replays string // the replay count attribute, "" when never replayed
}

// How the audit empties a queue: each receive hides its messages for
// drainVisibility only, so that a receive whose answer is lost on the way
// (its messages hidden all the same) costs a short wait, not a message;
// the drain waits up to drainWait for such messages, and for those a
// stopped worker had in flight, to come back.
const (
	drainVisibility = 10 * time.Second
	drainWait       = workerVisibility + 3*drainVisibility
)

// drainQueue receives every message of url and deletes it (a FIFO queue
// hands out the rest of a group only once its head is gone) until the
// queue reads empty, waiting up to wait for messages in flight to come
// back. It returns the messages and how many it could not get.
func (c *campaign) drainQueue(ctx context.Context, url string, wait time.Duration) ([]queuedMsg, int, error) {
	var out []queuedMsg
	seen := map[string]bool{}
	deadline := time.Now().Add(wait)
	for ctx.Err() == nil {
		res, err := c.admin.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:              aws.String(url),
			MaxNumberOfMessages:   10,
			WaitTimeSeconds:       1,
			VisibilityTimeout:     int32(drainVisibility / time.Second),
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return nil, 0, fmt.Errorf("drain %s: %w", url, err)
		}
		if len(res.Messages) == 0 {
			v, f, err := c.queueCounts(ctx, url)
			if err != nil {
				return nil, 0, err
			}
			if v+f == 0 {
				return out, 0, nil
			}
			if time.Now().After(deadline) {
				return out, v + f, nil
			}
			continue
		}
		var del []types.DeleteMessageBatchRequestEntry
		for i, m := range res.Messages {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id] = true
			q := queuedMsg{id: id, body: aws.ToString(m.Body)}
			attr := func(name string) string {
				if a, ok := m.MessageAttributes[name]; ok {
					return aws.ToString(a.StringValue)
				}
				return ""
			}
			// SqsonceReplays: the attribute in which sqsonce replay counts a
			// message's replays.
			q.tag, q.reason, q.replays = attr(event.AttrSend), attr(worker.AttrReason), attr("SqsonceReplays")
			out = append(out, q)
		}
		if _, err := c.admin.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
			return nil, 0, fmt.Errorf("drain %s: delete: %w", url, err)
		}
	}
	return nil, 0, ctx.Err()
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// runEvents is what one worker run logged, by key.
type runEvents struct {
	handled  map[string][]event.WorkerEvent
	complete map[string][]event.WorkerEvent
	fail     map[string][]event.WorkerEvent
}

// runLogs is what a campaign's worker runs left behind.
type runLogs struct {
	runs, kills int
	endCounts   map[string]int            // runs by how they ended
	faults      map[string]int            // by kind
	faultsByOp  map[string]map[string]int // by SQS operation, then kind
	stats       worker.Stats              // summed over runs
	windows     []time.Duration           // handler success to durable completion
	sent        []event.WorkerEvent       // copies SQS accepted from the worker (EvSent)
	hist        *history
	// afterLoss: handler calls of an attempt whose claim was no longer its
	// own (see claimHistory.afterLoss), one line each.
	afterLoss []string
	// takenUnstarted: claims taken over from a run still alive before it
	// called their handler (claimHistory.takenUnstarted).
	takenUnstarted int
	// unknowing: handler calls made after their record was forgotten, the
	// worker not told yet (claimHistory.unknowing).
	unknowing int
}

// readRuns reads how every worker run of c ended, its counters, its event
// log and the crash log.
func (c *campaign) readRuns() (*runLogs, error) {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	inHand := c.inHand
	paused := c.paused
	forgets := append([]forgetRec(nil), c.forgets...)
	c.mu.Unlock()
	rl := &runLogs{endCounts: map[string]int{}, faults: map[string]int{}, faultsByOp: map[string]map[string]int{}}
	hist := &history{inHand: inHand, ends: map[int]string{}, endedAt: map[int]time.Time{}, events: map[int]*runEvents{},
		shared: c.pg != nil, paused: paused}
	claims := newClaimHistory()
	for _, f := range forgets {
		claims.forgotten[f.Key] = append(claims.forgotten[f.Key], f.T.UnixNano())
	}
	for _, p := range procs {
		end := c.endOf(p)
		hist.ends[p.id] = end
		p.mu.Lock()
		hist.endedAt[p.id] = p.ended
		p.mu.Unlock()
		rl.runs++
		rl.endCounts[end]++
		switch end {
		case endWindowA, endWindowB, endKill, endInHandler, endInTx:
			rl.kills++
		}
		cnt := c.counts(p.id)
		for op, byKind := range cnt.Faults {
			if rl.faultsByOp[op] == nil {
				rl.faultsByOp[op] = map[string]int{}
			}
			for k, n := range byKind {
				rl.faults[k] += n
				rl.faultsByOp[op][k] += n
			}
		}
		addStats(&rl.stats, cnt.Stats)
		ev := &runEvents{handled: map[string][]event.WorkerEvent{}, complete: map[string][]event.WorkerEvent{}, fail: map[string][]event.WorkerEvent{}}
		okAt := map[string]int64{} // key -> when its handler last succeeded
		err := event.ReadLines(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.events", p.id)), func(e event.WorkerEvent) {
			claims.add(p.id, e)
			switch e.Ev {
			case event.EvHandled:
				ev.handled[e.Key] = append(ev.handled[e.Key], e)
				if e.Err == "" {
					okAt[e.Key] = e.T
				}
			case event.EvComplete:
				if t, ok := okAt[e.Key]; ok && e.Err == "" {
					rl.windows = append(rl.windows, time.Duration(e.T-t))
					delete(okAt, e.Key)
				}
				ev.complete[e.Key] = append(ev.complete[e.Key], e)
			case event.EvFail:
				ev.fail[e.Key] = append(ev.fail[e.Key], e)
			case event.EvSent:
				rl.sent = append(rl.sent, e)
			}
		})
		if err != nil {
			return nil, err
		}
		hist.events[p.id] = ev
	}
	hist.crashes = map[string]map[int]string{} // key -> run -> window
	if err := event.ReadLines(c.crashLog, func(cr event.Crash) {
		if hist.crashes[cr.Key] == nil {
			hist.crashes[cr.Key] = map[int]string{}
		}
		hist.crashes[cr.Key][cr.Run] = cr.Window
	}); err != nil {
		return nil, err
	}
	rl.hist = hist
	rl.afterLoss = claims.afterLoss()
	rl.unknowing = claims.unknowing
	rl.takenUnstarted = claims.takenUnstarted(hist.endedAt)
	hist.forgotten = claims.forgotten
	return rl, nil
}

// claimHistory is who held each operation's claim when, from the worker
// runs' event logs: every claim written (EvClaim, logged once the ledger
// call returned, so after the claim took effect), every claim released
// (EvRelease, likewise), every answer that a claim was lost (EvLost) and
// every handler call (EvStart, logged as the handler is called), each with
// its attempt's owner token, which no two attempts share; and from the
// campaign, the records it forgot (sqsonce ledger forget).
type claimHistory struct {
	claims    map[string][]runEvent // key -> claims written, by time
	claimed   map[string]int64      // owner -> when its claim was written
	released  map[string]int64      // owner -> when its claim was released
	told      map[string]int64      // owner -> when the ledger first said its claim was lost
	started   map[string]int64      // owner -> when its handler was called
	starts    []runEvent            // handler calls
	forgotten map[string][]int64    // key -> when the campaign forgot its record
	// unknowing counts the handler calls made after the record was
	// forgotten but before the ledger told the worker so (its next beat
	// would): the worker could not know.
	unknowing int
}

// runEvent is an event of a worker run.
type runEvent struct {
	run int
	event.WorkerEvent
}

func newClaimHistory() *claimHistory {
	return &claimHistory{claims: map[string][]runEvent{}, claimed: map[string]int64{}, released: map[string]int64{}, told: map[string]int64{},
		started: map[string]int64{}, forgotten: map[string][]int64{}}
}

func (h *claimHistory) add(run int, e event.WorkerEvent) {
	switch e.Ev {
	case event.EvClaim:
		h.claims[e.Key] = append(h.claims[e.Key], runEvent{run, e})
		h.claimed[e.Owner] = e.T
	case event.EvRelease:
		h.released[e.Owner] = e.T
	case event.EvLost:
		if _, ok := h.told[e.Owner]; !ok {
			h.told[e.Owner] = e.T
		}
	case event.EvStart:
		h.starts = append(h.starts, runEvent{run, e})
		h.started[e.Owner] = e.T
	}
}

// takenUnstarted counts the claims that another claim took over while the
// run that held them was alive (stopped, or cut off from its ledger) and
// had not called their handler: messages waiting in its hands, whose work
// it must then never start. endedAt says when each run ended.
func (h *claimHistory) takenUnstarted(endedAt map[int]time.Time) int {
	n := 0
	for _, cs := range h.claims {
		sort.Slice(cs, func(i, j int) bool { return cs[i].T < cs[j].T })
		for i := 1; i < len(cs); i++ {
			c, prev := cs[i], cs[i-1]
			if !c.Takeover || prev.Owner == c.Owner || prev.run == c.run {
				continue
			}
			if start, ok := h.started[prev.Owner]; ok && start < c.T {
				continue
			}
			if ended := endedAt[prev.run]; ended.IsZero() || ended.UnixNano() > c.T {
				n++
			}
		}
	}
	return n
}

// afterLoss returns, one line each, the handler calls made after their
// attempt's claim was lost: after another claim of the operation was
// written (a takeover: the ledger gave the operation to another attempt),
// after the attempt's own claim was released, after its record was
// forgotten and the ledger had said so to the worker, or with no claim of
// theirs written at all. A worker checks its claim before it calls the
// handler (a claim whose lease may have lapsed is extended first, and one
// that the ledger said is lost never starts), so none is expected: the
// only way past that check is a process stopped between the check and the
// call for longer than the lease. A record forgotten by an operator, on
// the other hand, is news to the worker until its next beat: a call made
// before it is counted in h.unknowing, not here.
func (h *claimHistory) afterLoss() []string {
	for _, cs := range h.claims {
		sort.Slice(cs, func(i, j int) bool { return cs[i].T < cs[j].T })
	}
	var out []string
	for _, s := range h.starts {
		own, ok := h.claimed[s.Owner]
		why := ""
		switch rel, released := h.released[s.Owner]; {
		case !ok || own > s.T:
			why = "no claim of its owner was written before"
		case released && rel < s.T:
			why = fmt.Sprintf("its claim had been released %.3fs before", float64(s.T-rel)/1e9)
		default:
			for _, c := range h.claims[s.Key] {
				if c.T > own && c.T < s.T && c.Owner != s.Owner {
					why = fmt.Sprintf("claim %s took the operation over %.3fs before", c.Owner, float64(s.T-c.T)/1e9)
					break
				}
			}
			for _, f := range h.forgotten[s.Key] {
				if why != "" || f < own || f > s.T {
					continue
				}
				if told, ok := h.told[s.Owner]; ok && told < s.T {
					why = fmt.Sprintf("its record had been forgotten %.3fs before, and the ledger had told the worker %.3fs before", float64(s.T-f)/1e9, float64(s.T-told)/1e9)
				} else {
					h.unknowing++
				}
			}
		}
		if why != "" {
			out = append(out, fmt.Sprintf("%s: run %d called the handler for attempt %d under claim %s at %s, but %s",
				s.Key, s.run, s.Attempt, s.Owner, time.Unix(0, s.T).UTC().Format("15:04:05.000"), why))
		}
	}
	sort.Strings(out)
	return out
}

func (c *campaign) audit(ctx context.Context, wl *workload, snd *sender, elapsed time.Duration, quiet bool) (*Report, error) {
	r := &Report{
		Standard:         true,
		Elapsed:          elapsed,
		Planned:          int64(wl.planned()),
		Sent:             snd.sent.Load(),
		Accepted:         snd.accepted.Load(),
		SenderRetries:    snd.failures.Load(),
		Ops:              map[opClass]int{},
		DLQBeforeByClass: map[opClass]int{},
		Keyless:          len(wl.keyless),
		Extra:            map[string]int{},
		ExtraSamples:     map[string][]string{},
		Quiet:            quiet,
	}
	r.SenderFaults = map[string]int{}
	for _, byKind := range snd.faults.Counts() {
		r.SenderLostAcks += byKind["LostAck"]
		for k, n := range byKind {
			r.SenderFaults[string(k)] += n
		}
	}
	ops := c.allOps(wl)
	r.PhaseOps = len(ops) - len(wl.ops)
	for _, o := range ops {
		r.Ops[o.class]++
		if o.late {
			r.LateResends++
		}
	}

	// Runs: how they ended, their faults and stats.
	c.mu.Lock()
	r.Phases = append(r.Phases, c.phases...)
	r.Pauses, r.DoubleTerm = c.pauses, c.doubleTerms
	c.mu.Unlock()
	rl, err := c.readRuns()
	if err != nil {
		return nil, err
	}
	r.Runs, r.Kills, r.Ends, r.Faults, r.FaultsByOp, r.Stats = rl.runs, rl.kills, rl.endCounts, rl.faults, rl.faultsByOp, rl.stats
	r.AfterLoss = len(rl.afterLoss)
	r.Details = append(r.Details, rl.afterLoss...)
	r.InHandlerKills = len(rl.hist.inHand)
	if windows := rl.windows; len(windows) > 0 {
		sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
		q := func(f float64) time.Duration { return windows[min(len(windows)-1, int(f*float64(len(windows))))] }
		r.Window = [3]time.Duration{q(0.5), q(0.99), windows[len(windows)-1]}
	}
	hist := rl.hist
	if c.pg != nil {
		hist.outages = c.sharedWindows()
		f, err := c.sharedFindings(rl)
		if err != nil {
			return nil, err
		}
		r.PG = f
		r.Phases = append(r.Phases, f.phases(c.cfg.Shared)...)
	}

	// Executions at the downstream.
	execs := map[string][]event.Execution{} // by key
	effectsByID := map[string]int{}
	if err := event.ReadLines(filepath.Join(c.dir, "executions.log"), func(e event.Execution) {
		r.Executions++
		if e.Key == "" {
			r.KeylessRan++
		}
		if e.Effect {
			r.Effects++
			effectsByID[e.BodyID]++
		}
		execs[e.Key] = append(execs[e.Key], e)
	}); err != nil {
		return nil, err
	}
	for id, n := range effectsByID {
		if n > 1 {
			r.EffectsTwice += n - 1
			r.Details = append(r.Details, fmt.Sprintf("%s: effect applied %d times", id, n))
		}
	}

	// The dead-letter queue.
	dv, df, err := c.queueCounts(ctx, c.dlq)
	if err != nil {
		return nil, err
	}
	dlq, left, err := c.drainQueue(ctx, c.dlq, drainWait)
	if err != nil {
		return nil, err
	}
	if left > 0 {
		c.note("%d messages of the dead-letter queue could not be drained for the audit within %v", left, drainWait)
	}
	r.DLQMessages = len(dlq)
	c.logf("dead-letter queue: %d messages received for the audit; before, it read %d visible, %d in flight", len(dlq), dv, df)
	if err := c.saveQueue("dlq.jsonl", dlq); err != nil {
		return nil, err
	}
	c.missingCopies(rl.sent, c.dlq, func(id string) bool {
		for _, d := range dlq {
			if d.id == id {
				return true
			}
		}
		return false
	})
	dlqByID := map[string][]queuedMsg{}
	dlqByBody := map[string][]queuedMsg{}
	for _, d := range dlq {
		dlqByBody[d.body] = append(dlqByBody[d.body], d)
		if id := idOf(d.body); id != "" {
			dlqByID[id] = append(dlqByID[id], d)
		}
	}

	// The ledger, now that no worker holds it.
	db, err := c.openRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the ledger for the audit: %w", err)
	}
	defer db.Close()

	hasReason := func(ms []queuedMsg, prefix string) bool {
		for _, m := range ms {
			if strings.HasPrefix(m.reason, prefix) {
				return true
			}
		}
		return false
	}
	for _, k := range wl.keyless {
		r.ExpectDLQ++
		switch ms := dlqByBody[k.body]; {
		case hasReason(ms, "no operation key"):
			r.FoundDLQ++
		case len(ms) > 0:
			r.FoundDLQ++ // moved by SQS's redrive after failed attempts to dead-letter it
		default:
			r.Lost++
			r.Details = append(r.Details, fmt.Sprintf("keyless message (%s) %q: not in the dead-letter queue", k.why, k.body))
		}
	}

	for _, o := range ops {
		rec, gerr := db.Get(ctx, o.id)
		state := "absent"
		if gerr == nil {
			state = rec.State.String()
			if rec.State == ledger.StateFailed && rec.Permanent {
				state = "failed permanently"
			}
		} else if !errors.Is(gerr, ledger.ErrNotFound) {
			return nil, gerr
		}
		complete := state == "complete"
		oe := execs[o.id]
		effect := false
		winner := o.body
		for _, e := range oe {
			if e.Effect {
				effect = true
				if e.BodyHash == hash8(o.bodyB) {
					winner = o.bodyB
				}
			}
		}
		inDLQ := dlqByID[o.id]

		// Outcome against expectation.
		switch o.class {
		case classNormal, classTransient, classConflict, classSlow:
			r.ExpectComplete++
			if complete && effect {
				r.Completed++
			}
			if complete && !effect {
				r.AckNotDone++
				r.Details = append(r.Details, fmt.Sprintf("%s: complete in the ledger but no effect downstream", o.id))
			}
			ownCopies := 0
			for _, d := range inDLQ {
				if d.body == winner {
					ownCopies++
					if d.reason != "" {
						r.DLQWrongReason++
						r.Details = append(r.Details, fmt.Sprintf("%s: expected to complete, dead-lettered by sqsonce: %s", o.id, d.reason))
					}
				}
			}
			switch {
			case complete:
				r.DLQCopiesOfCompleted += ownCopies
			case ownCopies > 0:
				r.DLQBeforeComplete++
				r.DLQBeforeByClass[o.class]++
				r.Details = append(r.Details, fmt.Sprintf("%s (%s): dead-lettered by SQS's redrive before completing (info): ledger %s, effect %v", o.id, o.class, state, effect))
			default:
				r.Lost++
				r.Details = append(r.Details, fmt.Sprintf("%s: lost: ledger %s, effect %v, not in the dead-letter queue", o.id, state, effect))
			}
			if o.class == classConflict {
				loser := o.bodyB
				if winner == o.bodyB {
					loser = o.body
				}
				r.ExpectDLQ++
				if len(dlqByBody[loser]) > 0 {
					r.FoundDLQ++
					if !hasReason(dlqByBody[loser], "conflict") {
						r.Details = append(r.Details, fmt.Sprintf("%s: the conflicting payload reached the dead-letter queue without the conflict reason", o.id))
					}
				} else {
					r.Lost++
					r.Details = append(r.Details, fmt.Sprintf("%s: the conflicting payload is not in the dead-letter queue", o.id))
				}
				for _, e := range oe {
					if e.BodyHash == hash8(loser) {
						r.ConflictRan++
						r.Details = append(r.Details, fmt.Sprintf("%s: the conflicting payload ran (execution %d)", o.id, e.Seq))
					}
				}
			}
		case classPermanent:
			r.ExpectDLQ++
			if complete {
				r.AckNotDone++
				r.Details = append(r.Details, fmt.Sprintf("%s: permanent failure recorded complete", o.id))
			}
			if len(inDLQ) > 0 {
				r.FoundDLQ++
			} else {
				r.Lost++
				r.Details = append(r.Details, fmt.Sprintf("%s: permanent failure not in the dead-letter queue (ledger %s)", o.id, state))
			}
		}

		// Executions beyond one: every settled answer after the first.
		settled := http200
		if o.class == classPermanent {
			settled = http422
		}
		var s []event.Execution
		for _, e := range oe {
			if e.Status == settled {
				s = append(s, e)
			}
		}
		for i := 1; i < len(s); i++ {
			cause := explain(s[i-1], s[i], o.class == classPermanent, hist)
			r.Extra[cause]++
			if len(r.ExtraSamples[cause]) < 5 {
				r.ExtraSamples[cause] = append(r.ExtraSamples[cause], fmt.Sprintf("%s: execution %d (run %d) after %d (run %d)", o.id, s[i].Seq, s[i].Run, s[i-1].Seq, s[i-1].Run))
			}
		}
		if o.late && len(s) > 1 {
			r.LateRanAgain++
		}
	}
	if c.name == "" {
		c.mu.Lock()
		holds, races := c.holds, c.races
		c.mu.Unlock()
		if c.cfg.Holds > 0 {
			r.Phases = append(r.Phases, holdPhase(holds))
		}
		if c.cfg.Races > 0 {
			r.Phases = append(r.Phases, racePhase(races, func(key string) string {
				rec, err := db.Get(ctx, key)
				if err != nil {
					return err.Error()
				}
				return rec.State.String()
			}, execs))
		}
	}
	c.mu.Lock()
	r.Notes = append(r.Notes, c.notes...)
	c.mu.Unlock()
	for _, d := range r.Details {
		fmt.Fprintln(c.log, "detail:", d)
	}
	for cause, samples := range r.ExtraSamples {
		for _, s := range samples {
			fmt.Fprintf(c.log, "extra execution (%s): %s\n", cause, s)
		}
	}
	return r, nil
}

// missingCopies notes every copy that SQS accepted from a worker for
// queue url (its dead-letter queue) and that the audit did not find there:
// the worker deleted the original, so such a copy is a lost message.
func (c *campaign) missingCopies(sent []event.WorkerEvent, url string, found func(id string) bool) {
	n := 0
	var samples []string
	for _, e := range sent {
		if e.Queue != url || e.Copy == "" || found(e.Copy) {
			continue
		}
		n++
		if len(samples) < 10 {
			samples = append(samples, fmt.Sprintf("copy %s of message %s, accepted at %s", e.Copy, e.MessageID, time.Unix(0, e.T).UTC().Format("15:04:05.000")))
		}
	}
	if n > 0 {
		c.note("%d copies that SQS accepted for the dead-letter queue are not in it: %s", n, strings.Join(samples, "; "))
	}
}

// saveQueue writes the messages found in a queue at the end into the work
// directory, one JSON line each.
func (c *campaign) saveQueue(name string, msgs []queuedMsg) error {
	lines := make([]any, len(msgs))
	for i, m := range msgs {
		lines[i] = struct {
			ID      string `json:"id"`
			Send    string `json:"send,omitempty"`
			Body    string `json:"body"`
			Reason  string `json:"reason,omitempty"`
			Replays string `json:"replays,omitempty"`
		}{m.id, m.tag, m.body, m.reason, m.replays}
	}
	return c.saveLines(name, lines)
}

// saveLines writes lines into the file name of the work directory, one
// JSON line each.
func (c *campaign) saveLines(name string, lines []any) error {
	a, err := event.OpenAppender(filepath.Join(c.dir, name), false)
	if err != nil {
		return err
	}
	defer a.Close()
	for _, l := range lines {
		if err := a.Append(l); err != nil {
			return err
		}
	}
	return nil
}

// faultOps are the SQS operations the chaos worker injects faults into.
var faultOps = []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "SendMessage"}

const (
	http200 = 200
	http422 = 422
)

// history is what the audit knows about the worker runs.
type history struct {
	crashes map[string]map[int]string // key -> run -> window of the run's crash
	inHand  map[string]int            // key -> run killed while the downstream served it
	ends    map[int]string            // run -> how it ended
	endedAt map[int]time.Time         // run -> when it ended
	events  map[int]*runEvents
	// shared: the runs shared a ledger in a database; outages: when it
	// was out of the workers' reach.
	shared  bool
	outages []window
	paused  map[int][]window // run -> when it was stopped (SIGSTOP)
	// forgotten: key -> when the campaign forgot its record (Unix
	// nanoseconds).
	forgotten map[string][]int64
}

// pausedDuring reports whether run was stopped (SIGSTOP) at some time
// between from and to.
func (h *history) pausedDuring(run int, from, to time.Time) bool {
	for _, w := range h.paused[run] {
		if w.from.Before(to) && w.to.After(from) {
			return true
		}
	}
	return false
}

// outOfReach reports whether the database was out of the workers' reach
// at some time between from and to.
func (h *history) outOfReach(from, to time.Time) bool {
	for _, w := range h.outages {
		if w.from.Before(to) && w.to.After(from) {
			return true
		}
	}
	return false
}

// recordSource is a ledger opened for the audit.
type recordSource interface {
	Get(ctx context.Context, key string) (ledger.Record, error)
	Close() error
}

// openRecords opens the campaign's ledger for the audit: the file, or the
// shared table straight from the database, not through the proxy.
func (c *campaign) openRecords(ctx context.Context) (recordSource, error) {
	if c.pg != nil {
		return postgres.Open(ctx, postgres.Options{URL: pgURL(c.pg.addr()), Table: sharedTable})
	}
	return ledger.Open(c.ledger, ledger.Options{})
}

// Bounds on how long after the earlier execution a kill still explains the
// next one: the worker records the completion within milliseconds of the
// handler's return, and the handler returns within its timeout.
const (
	killAfterHandled  = 10 * time.Second
	killAfterInFlight = workerHandlerTimeout + 5*time.Second
)

// explain says why an operation ran again (execution next) after execution
// prev had settled it, from what happened to the run that made prev between
// the two.
func explain(prev, next event.Execution, permanent bool, h *history) string {
	run := prev.Run
	for _, f := range h.forgotten[prev.Key] {
		if f > prev.T-int64(killAfterInFlight) && f < next.T {
			return causeForgotten
		}
	}
	if h.crashes[prev.Key][run] == event.WindowA {
		return causeWindowA
	}
	if h.inHand[prev.Key] == run {
		return causeInHandler
	}
	ev := h.events[run]
	if ev == nil {
		return causeUnexplained
	}
	killed := false
	switch h.ends[run] {
	case endKill, endInHandler, endWindowA, endWindowB:
		killed = true
	}
	// The attempt that made prev: its owner token when the downstream
	// recorded it, else the first of its number that returned after prev.
	var handled *event.WorkerEvent
	for i, e := range ev.handled[prev.Key] {
		if (prev.Owner != "" && e.Owner == prev.Owner) || (prev.Owner == "" && e.T >= prev.T && fmt.Sprint(e.Attempt) == prev.Attempt) {
			handled = &ev.handled[prev.Key][i]
			break
		}
	}
	if handled == nil {
		if killed && h.endedAt[run].Sub(time.Unix(0, prev.T)) < killAfterInFlight {
			return causeKilledInFlight
		}
		return causeUnexplained
	}
	// On a shared ledger, an attempt that another claim took over is
	// explained only by its worker stopped (SIGSTOP), or the database out
	// of reach, while its lease had to be extended: from its claim (at
	// most a lease before the work reached the downstream) until the
	// worker found the operation taken over (until, Unix nanoseconds).
	leaseLapsed := func(until int64) string {
		from, to := time.Unix(0, prev.T).Add(-workerVisibility), time.Unix(0, until)
		switch {
		case h.pausedDuring(run, from, to):
			return causeLeasePaused
		case h.outOfReach(from, to):
			return causeLeaseDown
		}
		return causeTakenOver
	}
	if handled.Err != "" && !permanent {
		if h.shared && strings.Contains(handled.Cause, "lease lost") {
			return leaseLapsed(handled.T)
		}
		return causeHandlerErr
	}
	records := ev.complete[prev.Key]
	failCause, downCause := causeCompleteFail, causeCompleteDown
	if permanent {
		records = ev.fail[prev.Key]
		failCause, downCause = causeFailFail, causeFailDown
	}
	recorded, failed, down := false, false, false
	var takenOver int64 // when the worker found the operation taken over
	for _, e := range records {
		switch {
		case handled.Owner != "" && e.Owner != handled.Owner:
			// Another attempt's.
		case handled.Owner == "" && (e.T < handled.T || e.T > next.T):
			// Another attempt's, most likely: a completion recorded after
			// the next execution started says nothing about this one.
		case e.Err == "":
			recorded = true
		case strings.Contains(e.Err, ledger.ErrNotOwner.Error()):
			takenOver = e.T
		case strings.Contains(e.Err, ledger.ErrUnavailable.Error()):
			down = true
		default:
			failed = true
		}
	}
	switch {
	case recorded:
		return causeUnexplained
	case takenOver != 0:
		return leaseLapsed(takenOver)
	case down:
		return downCause
	case failed:
		return failCause
	case killed && h.endedAt[run].Sub(time.Unix(0, handled.T)) < killAfterHandled:
		return causeKilled
	}
	return causeUnexplained
}

// addStats adds every counter of s to dst.
func addStats(dst *worker.Stats, s worker.Stats) {
	d, v := reflect.ValueOf(dst).Elem(), reflect.ValueOf(s)
	for i := range d.NumField() {
		d.Field(i).SetInt(d.Field(i).Int() + v.Field(i).Int())
	}
}

// print writes the report as one table.
func (r *Report) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(name, value string) { fmt.Fprintf(tw, "  %s\t%s\n", name, value) }
	must := func(name string, n int) {
		mark := "ok"
		if n != 0 {
			mark = "FAIL"
		}
		row(name, fmt.Sprintf("%d  (must be 0: %s)", n, mark))
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(tw, "sqsonce chaos campaign: %s\n", verdict)
	if r.Standard {
		r.printStandard(row, must)
	}
	if r.FIFO != nil {
		r.FIFO.print(row, must)
	}
	if r.FIFOShared != nil {
		r.FIFOShared.print(row, must)
	}
	if s := r.Shared; s != nil {
		head := "on PostgreSQL"
		if s.PG != nil {
			head = fmt.Sprintf("%d workers at once on one standard queue (maxReceiveCount %d) and one PostgreSQL table, through a TCP proxy", s.PG.Workers, maxReceiveCount)
		}
		row("shared-ledger campaign", head)
		s.printStandard(func(name, value string) { row("  "+name, value) }, func(name string, n int) { must("shared: "+strings.TrimLeft(name, " "), n) })
	}
	if r.Tx != nil {
		r.Tx.print(row, must)
	}
	if f := r.failed(); len(f) > 0 {
		row("FAILED", strings.Join(f, "; "))
	}
	tw.Flush()
}

// printStandard writes the standard campaign's rows of the report table.
func (r *Report) printStandard(row func(name, value string), must func(name string, n int)) {
	row("time taken", r.Elapsed.Round(time.Second).String())
	row("deliveries sent", fmt.Sprintf("%d acknowledged to the sender (%d planned), %d accepted by the server: %d extra copies from %d lost send acknowledgements",
		r.Sent, r.Planned, r.Accepted, r.Accepted-r.Sent, r.SenderLostAcks))
	phaseOps := ""
	if r.PhaseOps > 0 {
		phaseOps = fmt.Sprintf(" (%d of them sent by the ledger phases)", r.PhaseOps)
	}
	row("operations", fmt.Sprintf("%d: %d normal%s, %d transient (fail 1-2 times), %d slow (5.5-6.5 s), %d permanent, %d conflicting; %d resent after done; + %d keyless messages",
		r.Ops[classNormal]+r.Ops[classTransient]+r.Ops[classSlow]+r.Ops[classPermanent]+r.Ops[classConflict],
		r.Ops[classNormal], phaseOps, r.Ops[classTransient], r.Ops[classSlow], r.Ops[classPermanent], r.Ops[classConflict], r.LateResends, r.Keyless))
	row("faults injected (sender's sends)", fmt.Sprintf("%s  (total %d)", kindList(r.SenderFaults), sum(r.SenderFaults)))
	row("faults injected (worker SQS calls)", fmt.Sprintf("%s  (total %d)", kindList(r.Faults), sum(r.Faults)))
	for _, op := range faultOps {
		if len(r.FaultsByOp[op]) > 0 {
			row("  "+op, kindList(r.FaultsByOp[op]))
		}
	}
	row("worker runs", fmt.Sprintf("%d: %d kills (%d window a, %d window b, %d in-handler, %d random), %d SIGTERM drains (exit 0; %d with a second SIGTERM), %d refused starts, %d failed; %d paused (SIGSTOP %v)",
		r.Runs, r.Kills, r.Ends[endWindowA], r.Ends[endWindowB], r.Ends[endInHandler], r.Ends[endKill], r.Ends[endTerm], r.DoubleTerm, r.Ends[endRefused], r.Ends[endFailed], r.Pauses, pauseFor))
	row("worker counters (summed)", fmt.Sprintf("received %d, claimed %d, completed %d, duplicates suppressed %d, in progress elsewhere %d, retried %d, takeovers %d, lost leases %d, completion not recorded %d, deleted %d, delete failed %d",
		r.Stats.Received, r.Stats.Claimed, r.Stats.Completed, r.Stats.Duplicates, r.Stats.InProgressElsewhere, r.Stats.Retried, r.Stats.Takeovers, r.Stats.LeaseLost, r.Stats.CompleteFailed, r.Stats.Deleted, r.Stats.DeleteFailed))
	if pg := r.PG; pg != nil {
		ws, total := pg.waitSeconds()
		row("waits of the workers for the database", fmt.Sprintf("%d waits until it answered again (no new work while claims could not be recorded), %s s each, %.1f s in all, and %d until their run ended; %d ledger calls found it unavailable; %d takeovers of lapsed leases",
			len(pg.Waits), spread(ws), total, pg.CutShort, pg.Unavail, pg.Takeovers))
	}
	var before []string
	for _, cl := range []opClass{classNormal, classTransient, classSlow, classConflict} {
		if n := r.DLQBeforeByClass[cl]; n > 0 {
			before = append(before, fmt.Sprintf("%d %s", n, cl))
		}
	}
	beforeText := ""
	if len(before) > 0 {
		beforeText = ": " + strings.Join(before, ", ")
	}
	row("operations completed", fmt.Sprintf("%d of %d expected (the rest, %d, moved to the dead-letter queue by SQS after %d receives, not lost%s)",
		r.Completed, r.ExpectComplete, r.DLQBeforeComplete, maxReceiveCount, beforeText))
	row("in the dead-letter queue", fmt.Sprintf("%d expected, %d found (%d messages; %d extra copies of completed operations)", r.ExpectDLQ, r.FoundDLQ, r.DLQMessages, r.DLQCopiesOfCompleted))
	must("operations lost", r.Lost)
	must("acknowledged but not done", r.AckNotDone)
	must("dead-lettered with a reason, expected to complete", r.DLQWrongReason)
	must("handler calls after their claim was lost (taken over, released)", r.AfterLoss)
	row("executions", fmt.Sprintf("%d POSTs, %d effects applied", r.Executions, r.Effects))
	row("duplicate window (handler done to completion durable)", fmt.Sprintf("p50 %v, p99 %v, max %v", r.Window[0].Round(10*time.Microsecond), r.Window[1].Round(10*time.Microsecond), r.Window[2].Round(10*time.Microsecond)))
	extra := 0
	for _, n := range r.Extra {
		extra += n
	}
	row("executions beyond one per operation", fmt.Sprintf("%d", extra))
	causes := make([]string, 0, len(r.Extra))
	for cause := range r.Extra {
		causes = append(causes, cause)
	}
	sort.Strings(causes)
	for _, cause := range causes {
		if cause != causeUnexplained && cause != causeTakenOver {
			row("  "+cause, fmt.Sprint(r.Extra[cause]))
		}
	}
	if r.Extra[causeTakenOver] > 0 {
		must("  "+causeTakenOver, r.Extra[causeTakenOver])
	}
	must("  "+causeUnexplained, r.Extra[causeUnexplained])
	row("  operations resent after done that ran twice", fmt.Sprintf("%d of %d (any cause above)", r.LateRanAgain, r.LateResends))
	must("effects applied twice", r.EffectsTwice)
	must("conflicting payloads run", r.ConflictRan)
	must("keyless messages run", r.KeylessRan)
	for _, p := range r.Phases {
		mark := "ok"
		if !p.ok {
			mark = "FAIL"
		}
		row("ledger phase: "+p.name, mark+": "+p.detail)
	}
	q := "yes"
	if !r.Quiet {
		q = "NO"
	}
	row("queue empty at the end", q)
	must("other findings", len(r.Notes))
	for _, n := range r.Notes {
		row("  finding", strings.SplitN(n, "\n", 2)[0])
	}
}

func kindList(m map[string]int) string {
	var parts []string
	for _, k := range []string{"Throttle", "ServerError", "Timeout", "Reset", "LostAck"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
