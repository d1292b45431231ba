package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// fifoReport is what the FIFO campaign found, or its part on a shared
// ledger.
type fifoReport struct {
	// Shared: the part on a shared ledger, Workers workers at once; PG and
	// Phases hold what it found of the database's outages.
	Shared  bool
	Workers int
	PG      *sharedFindings
	Phases  []phaseResult

	Elapsed time.Duration
	Ops     map[fifoClass]int
	Groups  int
	Bursts  int // runs of messages of one group sent together, slow ones among them
	// OutageOps: operations sent after the database's outages (among Ops).
	OutageOps int
	// CrossCopies: bursts sent with a copy of one of their operations in
	// another group.
	CrossCopies int

	// Every message the campaign sent is in exactly one of these.
	Sent    int // sends SQS answered
	Dropped int // answered with an earlier message's id: deduplicated at the send, never enqueued
	Done    int // its payload applied downstream and its key complete in the ledger
	InDLQ   int // not done, in the dead-letter queue
	InQueue int // not done, still in the queue
	Lost    int
	// LostBy counts the lost messages by class and payload.
	LostBy map[string]int

	DLQMessages, QueueMessages int
	Undrained                  int // messages a drain could not get within its time
	Rounds                     []replayRound

	// Outcome of the operations by class: final ledger state.
	Outcomes map[fifoClass]map[string]int

	Runs, Kills, Pauses, DoubleTerm int
	AimedPauses                     int // pauses that found messages waiting behind a running one
	Ends                            map[string]int
	Faults                          map[string]int
	Stats                           worker.Stats

	Executions, Effects int
	AckNotDone          int // complete in the ledger, no effect downstream
	// AfterLoss counts the handler calls made after their attempt's claim
	// was lost (claimHistory.afterLoss).
	AfterLoss int
	// DLQShouldComplete counts the messages that sqsonce dead-lettered
	// (with a reason) although their payload should have completed;
	// DLQRedriven those of them that SQS moved there after
	// fifoMaxReceiveCount receives, its redrive (no reason: not lost,
	// not sqsonce's verdict).
	DLQShouldComplete, DLQRedriven int
	// Forgets counts the records of waiting operations the campaign forgot
	// (sqsonce ledger forget); Unknowing the handler calls made after such
	// a forget, before the worker was told (claimHistory.unknowing).
	Forgets, Unknowing int
	// TakenUnstarted counts the claims taken over from a worker still
	// alive before it started their work (claimHistory.takenUnstarted).
	TakenUnstarted int
	// NotOwnerCompletes counts the completions the ledger refused because
	// another claim owned the operation by then, or it was gone.
	NotOwnerCompletes int
	EffectsTwice      int
	ConflictRan       int // executions of a payload other than the one its key was first claimed with
	OrderViolations   int // a group's effects applied out of the order their deliveries entered the queue
	// OrderFrozen: effects applied after later ones of their group, by a
	// run stopped (SIGSTOP) past the visibility timeout while its attempt
	// was in flight: SQS gave the group to others meanwhile. No consumer
	// can keep the order when it is frozen in the middle of a handler.
	OrderFrozen  int
	OrderChecked int // effects whose order was checked
	Extra        map[string]int
	ExtraSamples map[string][]string

	Quiet   bool
	Notes   []string
	Details []string
}

func (c *campaign) auditFIFO(ctx context.Context, wl *fifoWorkload, snd *fifoSender, rounds []replayRound, elapsed time.Duration, quiet bool) (*fifoReport, error) {
	r := &fifoReport{
		Shared:       c.pg != nil,
		Workers:      c.cfg.Shared.Workers,
		Elapsed:      elapsed,
		Ops:          map[fifoClass]int{},
		Groups:       c.cfg.FIFO.Groups,
		LostBy:       map[string]int{},
		Rounds:       rounds,
		Outcomes:     map[fifoClass]map[string]int{},
		Extra:        map[string]int{},
		ExtraSamples: map[string][]string{},
		Quiet:        quiet,
	}
	r.Bursts, r.CrossCopies = wl.bursts, wl.crossCopies
	if r.Shared {
		r.Groups = c.cfg.Shared.Groups
	}
	c.mu.Lock()
	ops := append(append([]*fifoOp(nil), wl.ops...), c.fifoExtra...)
	r.OutageOps = len(c.fifoExtra)
	c.mu.Unlock()
	for _, o := range ops {
		r.Ops[o.class]++
	}
	c.mu.Lock()
	r.Pauses, r.AimedPauses, r.DoubleTerm = c.pauses, c.aimedPauses, c.doubleTerms
	c.mu.Unlock()
	rl, err := c.readRuns()
	if err != nil {
		return nil, err
	}
	r.Runs, r.Kills, r.Ends, r.Faults, r.Stats = rl.runs, rl.kills, rl.endCounts, rl.faults, rl.stats
	if c.pg != nil {
		rl.hist.outages = c.sharedWindows()
		f, err := c.sharedFindings(rl)
		if err != nil {
			return nil, err
		}
		r.PG = f
		r.Phases = f.phases(c.cfg.Shared)
	}
	r.AfterLoss, r.TakenUnstarted, r.Unknowing = len(rl.afterLoss), rl.takenUnstarted, rl.unknowing
	c.mu.Lock()
	r.Forgets = len(c.forgets)
	c.mu.Unlock()
	r.Details = append(r.Details, rl.afterLoss...)
	for _, ev := range rl.hist.events {
		for _, cs := range ev.complete {
			for _, e := range cs {
				if strings.Contains(e.Err, ledger.ErrNotOwner.Error()) || strings.Contains(e.Err, ledger.ErrNotFound.Error()) {
					r.NotOwnerCompletes++
				}
			}
		}
	}

	// Executions at the downstream, by key.
	execs := map[string][]event.Execution{}
	if err := event.ReadLines(filepath.Join(c.dir, "executions.log"), func(e event.Execution) {
		r.Executions++
		if e.Effect {
			r.Effects++
		}
		execs[e.Key] = append(execs[e.Key], e)
	}); err != nil {
		return nil, err
	}

	// Both queues, emptied. The worker is stopped: what is in flight comes
	// back within its visibility timeout.
	dlq, left, err := c.drainQueue(ctx, c.dlq, drainWait)
	if err != nil {
		return nil, err
	}
	r.Undrained += left
	queued, left, err := c.drainQueue(ctx, c.queue, drainWait)
	if err != nil {
		return nil, err
	}
	r.Undrained += left
	r.DLQMessages, r.QueueMessages = len(dlq), len(queued)
	for name, msgs := range map[string][]queuedMsg{"dlq.jsonl": dlq, "queue.jsonl": queued} {
		if err := c.saveQueue(name, msgs); err != nil {
			return nil, err
		}
	}
	inDLQ, inQueue := map[string]int{}, map[string]int{}
	for _, m := range dlq {
		inDLQ[m.tag]++
	}
	byTag := map[string]*fifoSend{}
	for _, s := range snd.sent {
		byTag[s.tag] = s
	}
	for _, m := range queued {
		inQueue[m.tag]++
	}
	if r.Undrained > 0 {
		c.note("%d messages could not be drained from the queues for the audit", r.Undrained)
	}

	db, err := c.openRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the FIFO ledger for the audit: %w", err)
	}
	defer db.Close()
	states := map[string]string{}
	completed := map[string][]int64{} // key -> when workers recorded it complete
	for _, ev := range rl.hist.events {
		for key, es := range ev.complete {
			for _, e := range es {
				if e.Err == "" {
					completed[key] = append(completed[key], e.T)
				}
			}
		}
	}
	for _, o := range ops {
		if o.class == fifoKeyless {
			continue
		}
		state := "absent"
		rec, gerr := db.Get(ctx, o.id)
		switch {
		case gerr == nil:
			state = rec.State.String()
			if rec.State == ledger.StateFailed && rec.Permanent {
				state = "failed permanently"
			}
		case !errors.Is(gerr, ledger.ErrNotFound):
			return nil, gerr
		case c.completedThenForgotten(o.id, completed):
			state = stateForgottenDone
		}
		states[o.id] = state
		if r.Outcomes[o.class] == nil {
			r.Outcomes[o.class] = map[string]int{}
		}
		r.Outcomes[o.class][state]++
	}

	// The payload each key applied, and the checks on its executions.
	applied := map[string]string{} // key -> body hash of its effect
	for key, es := range execs {
		if key == "" {
			continue
		}
		effects := 0
		for _, e := range es {
			if e.Effect {
				effects++
				applied[key] = e.BodyHash
			}
		}
		if effects > 1 {
			r.EffectsTwice += effects - 1
			r.Details = append(r.Details, fmt.Sprintf("%s: effect applied %d times", key, effects))
		}
		for _, e := range es {
			if e.BodyHash != es[0].BodyHash {
				r.ConflictRan++
				r.Details = append(r.Details, fmt.Sprintf("%s: execution %d ran payload %s, the key was first run with %s", key, e.Seq, e.BodyHash, es[0].BodyHash))
			}
		}
		// Executions beyond the first successful one, explained as in the
		// standard campaign. Repeats of a permanent failure are not
		// counted: a replay runs the operation again on purpose.
		var ok []event.Execution
		for _, e := range es {
			if e.Status == http200 {
				ok = append(ok, e)
			}
		}
		for i := 1; i < len(ok); i++ {
			cause := explain(ok[i-1], ok[i], false, rl.hist)
			r.Extra[cause]++
			if len(r.ExtraSamples[cause]) < 5 {
				r.ExtraSamples[cause] = append(r.ExtraSamples[cause], fmt.Sprintf("%s: execution %d (run %d) after %d (run %d)", key, ok[i].Seq, ok[i].Run, ok[i-1].Seq, ok[i-1].Run))
			}
		}
	}
	for key, state := range states {
		if state == "complete" && applied[key] == "" {
			r.AckNotDone++
			r.Details = append(r.Details, fmt.Sprintf("%s: complete in the ledger but no effect downstream", key))
		}
	}

	// The dead letters whose payload should have completed.
	for _, m := range dlq {
		s := byTag[m.tag]
		if s == nil || !s.shouldComplete() {
			continue
		}
		switch {
		case m.reason == "":
			r.DLQRedriven++
		case strings.HasPrefix(m.reason, "conflict") && applied[s.op.id] != "" && applied[s.op.id] != hash8(s.body()):
			// Another payload of its key went first (this one came back
			// from the dead-letter queue after it): the conflict is right.
		default:
			r.DLQShouldComplete++
			r.Details = append(r.Details, fmt.Sprintf("%s (%s, payload %c): dead-lettered by sqsonce although it should have completed: %s",
				m.tag, s.op.id, 'a'+s.variant, m.reason))
		}
	}

	// Every message sent, accounted for.
	var lost []*fifoSend
	for _, s := range snd.sent {
		r.Sent++
		switch account(s, states[s.op.id], applied[s.op.id], inQueue[s.tag] > 0, inDLQ[s.tag] > 0) {
		case whereDropped:
			r.Dropped++
		case whereDone:
			r.Done++
		case whereQueue:
			r.InQueue++
		case whereDLQ:
			r.InDLQ++
		default:
			r.Lost++
			r.LostBy[fmt.Sprintf("%s, payload %c", s.op.class, 'a'+s.variant)]++
			lost = append(lost, s)
		}
	}
	if len(lost) > 0 {
		c.lostHistories(lost, snd, execs, states, inDLQ, r)
	}

	// Group order.
	var effects []event.Execution
	for _, es := range execs {
		for _, e := range es {
			if e.Effect && e.Group != "" {
				effects = append(effects, e)
			}
		}
	}
	unplaced := 0
	var order []string
	var frozen []string
	r.OrderChecked, order, frozen = orderViolations(effects, func(e event.Execution) (fifoPlace, bool) {
		p, ok := placeOf(e, byTag, rounds)
		if !ok {
			unplaced++
		}
		return p, ok
	}, func(e event.Execution) bool {
		// Its attempt in flight (claimed at most a handler's time before
		// the effect) while its run was stopped.
		at := time.Unix(0, e.T)
		return rl.hist.pausedDuring(e.Run, at.Add(-pauseFor-workerVisibility), at)
	})
	r.OrderFrozen = len(frozen)
	for _, f := range frozen {
		r.Details = append(r.Details, "order broken by a frozen run (explained): "+f)
	}
	if unplaced > 0 {
		c.note("%d effects whose delivery the order check cannot place (no send attribute, or a replayed copy without the time it entered the queue)", unplaced)
	}
	r.OrderViolations = len(order)
	r.Details = append(r.Details, order...)

	c.mu.Lock()
	r.Notes = append(r.Notes, c.notes...)
	c.mu.Unlock()
	for _, d := range r.Details {
		fmt.Fprintf(c.log, "%s: detail: %s\n", c.name, d)
	}
	for cause, samples := range r.ExtraSamples {
		for _, s := range samples {
			fmt.Fprintf(c.log, "%s: extra execution (%s): %s\n", c.name, cause, s)
		}
	}
	return r, nil
}

// stateForgottenDone is the final state of a key whose record the campaign
// forgot after a worker had recorded it complete (completedThenForgotten).
const stateForgottenDone = "complete, then forgotten by the campaign"

// Where a message the FIFO campaign sent is at the end.
const (
	whereDropped = "dropped at the send" // SQS deduplicated the send: nothing was enqueued
	whereDone    = "done"                // its payload applied downstream, its key complete
	whereQueue   = "in the queue"
	whereDLQ     = "in the dead-letter queue"
	whereLost    = "lost"
)

// account says where message s is at the end, from its key's final ledger
// state, the hash of the payload its key applied downstream ("" when none)
// and whether a copy of it (a message carrying its event.AttrSend) is in
// the queue or the dead-letter queue. A message is done only when its own
// payload was applied: a conflicting payload of a completed key must be
// found in a queue.
func account(s *fifoSend, state, applied string, inQueue, inDLQ bool) string {
	switch {
	case s.dropped:
		return whereDropped
	case s.op.class != fifoKeyless && (state == "complete" || state == stateForgottenDone) && applied == hash8(s.body()):
		return whereDone
	case inQueue:
		return whereQueue
	case inDLQ:
		return whereDLQ
	}
	return whereLost
}

// fifoPlace is where a delivery belongs in its group: the messages the
// campaign sent, in the order it sent them, and between them, after every
// message sent before replay round k, the copies round k sent, in no order
// among themselves (replay moves messages in batches).
type fifoPlace struct {
	epoch int  // replay rounds begun before the message was sent
	sent  bool // a message the campaign sent (else a copy replay sent)
	n     int  // sent: its place among its group's sends
}

// before reports whether a delivery at p must be applied before one at q.
func (p fifoPlace) before(q fifoPlace) bool {
	switch {
	case p.epoch != q.epoch:
		return p.epoch < q.epoch
	case p.sent != q.sent:
		return !p.sent // the round's copies come before what is sent after it
	}
	return p.sent && p.n < q.n
}

// placeOf places the delivery that made execution e. A delivery that
// replay never moved belongs where the message it copies was sent (a copy
// that the worker made of it, by mistake, keeps that place); one that
// replay moved belongs to the last round begun before it entered the
// queue.
func placeOf(e event.Execution, byTag map[string]*fifoSend, rounds []replayRound) (fifoPlace, bool) {
	s, ok := byTag[e.Send]
	if !ok {
		return fifoPlace{}, false
	}
	if e.Replays == 0 {
		p := fifoPlace{sent: true, n: s.n}
		for _, r := range rounds {
			if !r.Start.IsZero() && r.Start.Before(s.sentAt) {
				p.epoch++
			}
		}
		return p, true
	}
	if e.SentAt == 0 {
		return fifoPlace{}, false
	}
	var p fifoPlace
	for _, r := range rounds {
		if !r.Start.IsZero() && r.Start.UnixMilli() <= e.SentAt {
			p.epoch++
		}
	}
	return p, true
}

// orderViolations checks that within each group, effects (executions that
// applied an operation) were applied in the order their deliveries belong
// in (place). It returns how many effects it checked and one line for
// every effect applied after one whose delivery belongs after it: in
// frozen when frozen (nil: never) says that its run was stopped while the
// attempt was in flight, else in out.
func orderViolations(effects []event.Execution, place func(event.Execution) (fifoPlace, bool), frozen func(event.Execution) bool) (checked int, out, excused []string) {
	effects = append([]event.Execution(nil), effects...)
	sort.Slice(effects, func(i, j int) bool { return effects[i].Seq < effects[j].Seq })
	type placed struct {
		e event.Execution
		p fifoPlace
	}
	last := map[string]placed{}
	for _, e := range effects {
		p, ok := place(e)
		if !ok {
			continue
		}
		prev, seen := last[e.Group]
		last[e.Group] = placed{e, p}
		if seen && p.before(prev.p) {
			line := fmt.Sprintf("group %s: %s (execution %d, send %s, replayed %d times) applied after %s (execution %d, send %s, replayed %d times), which belongs after it",
				e.Group, e.Key, e.Seq, e.Send, e.Replays, prev.e.Key, prev.e.Seq, prev.e.Send, prev.e.Replays)
			if frozen != nil && frozen(e) {
				excused = append(excused, line)
			} else {
				out = append(out, line)
			}
		}
	}
	return len(effects), out, excused
}

// lostHistories adds to r's details, for every lost message, what became
// of its key: its sends, its executions, its final state, what is left of
// it in the dead-letter queue, and the lines of the worker and replay logs
// that name it.
func (c *campaign) lostHistories(lost []*fifoSend, snd *fifoSender, execs map[string][]event.Execution, states map[string]string, inDLQ map[string]int, r *fifoReport) {
	logs, _ := filepath.Glob(filepath.Join(c.runsDir, "run-*.log"))
	replays, _ := filepath.Glob(filepath.Join(c.dir, "replay-*.log"))
	logs = append(logs, replays...)
	done := map[string]bool{}
	for _, s := range lost {
		o := s.op
		r.Details = append(r.Details, fmt.Sprintf("lost: %s (%s, payload %c, %s, group %s, sent at +%.1fs as message %s)",
			s.tag, o.id, 'a'+s.variant, o.class, o.group, s.sentAt.Sub(c.started).Seconds(), s.msgID))
		if done[o.id] || o.class == fifoKeyless {
			continue
		}
		done[o.id] = true
		var sends []string
		for _, x := range snd.sent {
			if x.op == o {
				where := "gone"
				switch {
				case x.dropped:
					where = "dropped at the send"
				case inDLQ[x.tag] > 0:
					where = "in the dead-letter queue"
				}
				sends = append(sends, fmt.Sprintf("%s payload %c at +%.1fs message %s dedup %s (%s)", x.tag, 'a'+x.variant, x.sentAt.Sub(c.started).Seconds(), x.msgID, x.dedup, where))
			}
		}
		r.Details = append(r.Details, fmt.Sprintf("  %s sends: %s", o.id, strings.Join(sends, "; ")))
		var ex []string
		for _, e := range execs[o.id] {
			ex = append(ex, fmt.Sprintf("#%d run %d %s status %d send %s", e.Seq, e.Run, e.BodyHash[:6], e.Status, e.Send))
		}
		r.Details = append(r.Details, fmt.Sprintf("  %s executions: %s; ledger: %s", o.id, strings.Join(ex, ", "), states[o.id]))
		for _, l := range grepKey(logs, o.id, 16) {
			r.Details = append(r.Details, "  "+l)
		}
	}
}

// grepKey returns up to n lines of the files that name key as the key of
// a log record (key=K in text, "key":"K" in JSON), each prefixed with its
// file's name.
func grepKey(files []string, key string, n int) []string {
	re := regexp.MustCompile(`(key=|"key":")` + regexp.QuoteMeta(key) + `([" ]|$)`)
	var out []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() && len(out) < n {
			if re.MatchString(sc.Text()) {
				out = append(out, filepath.Base(f)+": "+sc.Text())
			}
		}
		fh.Close()
	}
	return out
}

// label names the campaign in the names of its checks.
func (r *fifoReport) label() string {
	if r.Shared {
		return "FIFO shared"
	}
	return "FIFO"
}

// checks lists the figures of the FIFO campaign that decide the verdict.
func (r *fifoReport) checks() []check {
	var cs []check
	zero := func(name string, n int) {
		cs = append(cs, check{Name: r.label() + ": " + name, Value: fmt.Sprint(n), OK: n == 0})
	}
	zero("messages lost", r.Lost)
	zero("acknowledged but not done", r.AckNotDone)
	zero("handler calls after their claim was lost", r.AfterLoss)
	zero("dead-lettered with a reason, expected to complete", r.DLQShouldComplete)
	zero("effects applied twice", r.EffectsTwice)
	zero("conflicting payloads run", r.ConflictRan)
	zero("group order violations", r.OrderViolations)
	zero(causeTakenOver, r.Extra[causeTakenOver])
	zero(causeUnexplained, r.Extra[causeUnexplained])
	for _, p := range r.Phases {
		v := "ok"
		if !p.ok {
			v = "failed: " + p.detail
		}
		cs = append(cs, check{Name: r.label() + ": phase: " + p.name, Value: v, OK: p.ok})
	}
	cs = append(cs, check{Name: r.label() + ": queue empty at the end", Value: fmt.Sprint(r.Quiet), OK: r.Quiet})
	zero("other findings", len(r.Notes))
	return cs
}

// print writes the FIFO campaign's rows of the report table.
func (r *fifoReport) print(row func(name, value string), must func(name string, n int)) {
	if r.Shared {
		row("FIFO campaign on a shared ledger", fmt.Sprintf("time taken %v; %d workers at once on a FIFO queue (maxReceiveCount %d) and a FIFO dead-letter queue, one PostgreSQL table through a TCP proxy; %d message groups (+ groups of their own for the conflicts whose key completes and for keyless messages); no replay rounds",
			r.Elapsed.Round(time.Second), r.Workers, fifoMaxReceiveCount, r.Groups))
	} else {
		row("FIFO campaign", fmt.Sprintf("time taken %v; a FIFO queue (maxReceiveCount %d) and a FIFO dead-letter queue, %d message groups (+ groups of their own for the conflicts whose key completes and for keyless messages)",
			r.Elapsed.Round(time.Second), fifoMaxReceiveCount, r.Groups))
	}
	var classes []string
	total := 0
	for cl := range fifoClasses {
		if n := r.Ops[cl]; n > 0 {
			classes = append(classes, fmt.Sprintf("%d %s", n, cl))
			total += n
		}
	}
	outageOps := ""
	if r.OutageOps > 0 {
		outageOps = fmt.Sprintf("; %d of the normal ones sent after the database's outages, each in a group of its own", r.OutageOps)
	}
	row("  operations", fmt.Sprintf("%d: %s%s; %d bursts of 4-8 operations of one group sent together, the first and one in the middle slow, %d of them with a copy of one of their operations in another group",
		total, strings.Join(classes, ", "), outageOps, r.Bursts, r.CrossCopies))
	row("  worker runs", fmt.Sprintf("%d: %d kills (%d window a, %d window b, %d random), %d SIGTERM drains (%d with a second SIGTERM), %d refused starts, %d failed; %d paused (SIGSTOP %v), %d of them while they kept messages waiting behind a running one",
		r.Runs, r.Kills, r.Ends[endWindowA], r.Ends[endWindowB], r.Ends[endKill], r.Ends[endTerm], r.DoubleTerm, r.Ends[endRefused], r.Ends[endFailed], r.Pauses, pauseFor, r.AimedPauses))
	if pg := r.PG; pg != nil {
		ws, total := pg.waitSeconds()
		row("  waits of the workers for the database", fmt.Sprintf("%d waits until it answered again (no new work while claims could not be recorded), %s s each, %.1f s in all, and %d until their run ended; %d ledger calls found it unavailable",
			len(pg.Waits), spread(ws), total, pg.CutShort, pg.Unavail))
	}
	row("  faults injected (worker SQS calls)", fmt.Sprintf("%s  (total %d)", kindList(r.Faults), sum(r.Faults)))
	row("  worker counters (summed)", fmt.Sprintf("received %d, claimed %d, completed %d, duplicates suppressed %d, conflicts %d, failed permanently again %d, dead-lettered %d, given back unstarted %d, takeovers %d",
		r.Stats.Received, r.Stats.Claimed, r.Stats.Completed, r.Stats.Duplicates, r.Stats.Conflicts, r.Stats.RedeliveredFailed, r.Stats.DeadLettered, r.Stats.GivenBack, r.Stats.Takeovers))
	row("  waiting behind a running message of their group", fmt.Sprintf("%d messages received behind another of their group (GroupWaited), kept out of sight and their claims alive by %d beats (GroupWaitBeats)",
		r.Stats.GroupWaited, r.Stats.GroupWaitBeats))
	row("  claims lost and reclaimed", fmt.Sprintf("%d claims taken over from a worker still alive before it started their work; %d records of operations waiting in a worker's hands forgotten (sqsonce ledger forget; %d started before the worker learnt it); %d attempts whose claim was lost, before their work started or while it ran (LeaseLost); %d stale claims of the worker's own released and claimed again (StaleReclaimed); %d waiting messages not started because SQS no longer took their receipt handle, their visibility lapsed (ReceiptLost); %d completions refused, the claim another's or gone",
		r.TakenUnstarted, r.Forgets, r.Unknowing, r.Stats.LeaseLost, r.Stats.StaleReclaimed, r.Stats.ReceiptLost, r.NotOwnerCompletes))
	for _, rr := range r.Rounds {
		fixed := ""
		if rr.Fixed {
			fixed = ", after the downstream's fix"
		}
		s := rr.Summary
		v := fmt.Sprintf("exit %d in %.1fs%s: moved %d (reset %d); left %d complete, %d keyless, %d replayed too often; could not move %d",
			rr.Exit, rr.Took.Seconds(), fixed, s.Moved, s.Reset, s.SkippedComplete, s.SkippedKeyless, s.SkippedMaxReplays, s.Failed)
		if rr.Err != "" {
			v = "ERROR: " + rr.Err
		}
		row(fmt.Sprintf("  replay round %d (sqsonce replay)", rr.Round), v)
	}
	for cl := range fifoClasses {
		if cl == fifoKeyless || len(r.Outcomes[cl]) == 0 {
			continue
		}
		var states []string
		for _, st := range []string{"complete", "failed permanently", "failed", "in_progress", "absent"} {
			if n := r.Outcomes[cl][st]; n > 0 {
				states = append(states, fmt.Sprintf("%d %s", n, st))
			}
		}
		row("  ledger at the end: "+cl.String(), strings.Join(states, ", "))
	}
	row("  messages sent", fmt.Sprintf("%d: %d dropped by SQS at the send (deduplicated by key within 5 minutes), %d enqueued", r.Sent, r.Dropped, r.Sent-r.Dropped))
	row("  messages accounted for", fmt.Sprintf("%d done (payload applied, key complete), %d in the dead-letter queue, %d in the queue (%d and %d messages found)",
		r.Done, r.InDLQ, r.InQueue, r.DLQMessages, r.QueueMessages))
	must(r.label()+": messages lost", r.Lost)
	var by []string
	for k, n := range r.LostBy {
		by = append(by, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(by)
	for _, b := range by {
		row("    lost", b)
	}
	must(r.label()+": acknowledged but not done", r.AckNotDone)
	must(r.label()+": handler calls after their claim was lost (taken over, released)", r.AfterLoss)
	row("  messages that should have completed, in the dead-letter queue", fmt.Sprintf("%d moved there by SQS after %d receives (not lost)", r.DLQRedriven, fifoMaxReceiveCount))
	must(r.label()+": dead-lettered by sqsonce (with a reason), expected to complete", r.DLQShouldComplete)
	row("  executions", fmt.Sprintf("%d POSTs, %d effects applied", r.Executions, r.Effects))
	extra := 0
	for _, n := range r.Extra {
		extra += n
	}
	row("  successful executions beyond one per operation", fmt.Sprint(extra))
	causes := make([]string, 0, len(r.Extra))
	for cause := range r.Extra {
		causes = append(causes, cause)
	}
	sort.Strings(causes)
	for _, cause := range causes {
		if cause != causeUnexplained && cause != causeTakenOver {
			row("    "+cause, fmt.Sprint(r.Extra[cause]))
		}
	}
	if r.Extra[causeTakenOver] > 0 {
		must(r.label()+":   "+causeTakenOver, r.Extra[causeTakenOver])
	}
	must(r.label()+":   "+causeUnexplained, r.Extra[causeUnexplained])
	must(r.label()+": effects applied twice", r.EffectsTwice)
	must(r.label()+": conflicting payloads run", r.ConflictRan)
	if r.OrderFrozen > 0 {
		row("  effects applied after later ones of their group by a run stopped (SIGSTOP) with the attempt in flight", fmt.Sprint(r.OrderFrozen))
	}
	must(fmt.Sprintf(r.label()+": group order violations (%d effects checked)", r.OrderChecked), r.OrderViolations)
	for _, p := range r.Phases {
		mark := "ok"
		if !p.ok {
			mark = "FAIL"
		}
		row("  phase: "+p.name, mark+": "+p.detail)
	}
	q := "yes"
	if !r.Quiet {
		q = "NO"
	}
	row(r.label()+": queue empty at the end", q)
	must(r.label()+": other findings", len(r.Notes))
	for _, n := range r.Notes {
		row("  finding", strings.SplitN(n, "\n", 2)[0])
	}
}
