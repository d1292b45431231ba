package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sqsonce/sqsonce/pgtx"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// The checks that campaigns add to the one audit.

// GroupOrder checks the order of every FIFO group: it counts every effect
// applied after one whose delivery belongs after it. A delivery belongs
// where the campaign sent the message it copies, or, when sqsonce replay
// moved it, after everything sent before that replay round and before
// everything sent after. An effect applied so by a run stopped (SIGSTOP)
// with the attempt in flight is counted apart: SQS gave the group to
// others meanwhile, and no consumer can keep the order when it is frozen
// in the middle of a handler.
func GroupOrder(e *env, h *history, s *section) {
	var effects []event.Execution
	for _, xs := range h.execs {
		for _, x := range xs {
			if x.Effect && x.Group != "" {
				effects = append(effects, x)
			}
		}
	}
	// The deliveries the worker sent to the dead-letter queue, and when.
	dead := map[string]time.Time{}
	for _, ev := range h.all {
		if ev.Ev == event.EvSent && ev.Queue == e.dlq {
			if t, ok := dead[ev.MessageID]; !ok || time.Unix(0, ev.T).Before(t) {
				dead[ev.MessageID] = time.Unix(0, ev.T)
			}
		}
	}
	unplaced := 0
	checked, out, frozen := orderViolations(effects, func(x event.Execution) (from, to place, ok bool) {
		from, to, ok = placeOf(x, h.byTag, e.rounds, dead)
		if !ok {
			unplaced++
		}
		return from, to, ok
	}, func(x event.Execution) bool {
		at := time.Unix(0, x.T)
		return during(e.paused[x.Run], at.Add(-pauseFor-workerVisibility), at)
	})
	for _, f := range frozen {
		s.detail("order broken by a frozen run (explained): %s", f)
	}
	for _, o := range out {
		s.detail("%s", o)
	}
	if unplaced > 0 {
		e.note("%d effects whose delivery the order check cannot place (no send attribute, or a replayed copy without the time it entered the queue)", unplaced)
	}
	s.row("group order", fmt.Sprintf("%d effects checked; %d applied after later ones of their group by a run stopped (SIGSTOP) with the attempt in flight", checked, len(frozen)))
	s.zero("group order violations", len(out))
}

// place is where a delivery belongs in its group: the messages the
// campaign sent, in the order it sent them, and between them, after every
// message sent before replay round k, the copies round k sent, in no order
// among themselves (replay moves messages in batches).
type place struct {
	epoch int  // replay rounds begun before the message was sent
	sent  bool // a message the campaign sent (else a copy replay sent)
	n     int  // sent: its place among its group's sends
}

// before reports whether a delivery at p must be applied before one at q.
func (p place) before(q place) bool {
	switch {
	case p.epoch != q.epoch:
		return p.epoch < q.epoch
	case p.sent != q.sent:
		return !p.sent // the round's copies come before what is sent after it
	}
	return p.sent && p.n < q.n
}

// placeOf places the delivery that made execution x: it belongs anywhere
// from the first place to the second (the same place but in one case). A
// delivery that replay never moved belongs where the message it copies was
// sent (a copy that the worker made of it, by mistake, keeps that place);
// one that replay moved belongs to the last round begun before it entered
// the queue. A delivery that the worker had sent to the dead-letter queue
// (dead: when, by message id) but could not delete came back; it can run
// again only once a replay round reset its operation. It then belongs
// anywhere from where it was sent to that round's copies: a FIFO queue
// gives it back at the head of its group, before what was sent after it,
// unless the worker had gone on with the group's next messages of the
// same receive, when it runs after them, as the copy the round sent of it
// would.
func placeOf(x event.Execution, byTag map[string]*msg, rounds []replayRound, dead map[string]time.Time) (from, to place, ok bool) {
	m, ok := byTag[x.Send]
	if !ok || x.Replays > 0 && x.SentAt == 0 {
		return place{}, place{}, false
	}
	p := place{sent: x.Replays == 0, n: m.n}
	for _, r := range rounds {
		if x.Replays == 0 && r.start.Before(m.sentAt) || x.Replays > 0 && r.start.UnixMilli() <= x.SentAt {
			p.epoch++
		}
	}
	if t, ok := dead[x.MessageID]; ok && slices.ContainsFunc(rounds, func(r replayRound) bool { return r.start.After(t) && r.start.Before(time.Unix(0, x.T)) }) {
		q := place{}
		for _, r := range rounds {
			if r.start.Before(time.Unix(0, x.T)) {
				q.epoch++
			}
		}
		return p, q, true
	}
	return p, p, true
}

// orderViolations checks that within each group, effects were applied in
// the order their deliveries belong in (at: from the first place to the
// second). It returns how many effects it checked and one line for every
// effect applied after one whose delivery belongs after it: in frozen when
// frozen (nil: never) says that its run was stopped while the attempt was
// in flight, else in out.
func orderViolations(effects []event.Execution, at func(event.Execution) (from, to place, ok bool), frozen func(event.Execution) bool) (checked int, out, excused []string) {
	effects = append([]event.Execution(nil), effects...)
	sort.Slice(effects, func(i, j int) bool { return effects[i].Seq < effects[j].Seq })
	type placed struct {
		x event.Execution
		p place
	}
	last := map[string]placed{}
	for _, x := range effects {
		from, to, ok := at(x)
		if !ok {
			continue
		}
		checked++
		prev, seen := last[x.Group]
		switch {
		case !seen || !from.before(prev.p):
			last[x.Group] = placed{x, from}
			continue
		case !to.before(prev.p):
			continue // in its span, at the place of the one before it
		}
		last[x.Group] = placed{x, to}
		line := fmt.Sprintf("group %s: %s (execution %d, send %s, replayed %d times) applied after %s (execution %d, send %s, replayed %d times), which belongs after it",
			x.Group, x.Key, x.Seq, x.Send, x.Replays, prev.x.Key, prev.x.Seq, prev.x.Send, prev.x.Replays)
		if frozen != nil && frozen(x) {
			excused = append(excused, line)
		} else {
			out = append(out, line)
		}
	}
	return checked, out, excused
}

// Causes of a transactional attempt's row that did not commit.
const (
	rbTransient = "transient failures"
	rbPermanent = "permanent failures"
	rbInTx      = "killed inside the transaction"
	rbPanicked  = "handlers that panicked after the insert"
	rbKilled    = "runs killed otherwise before the commit"
	rbRequest   = "commits lost on their way"
	rbCommit    = "commits whose connection failed"
	rbRefused   = "completions refused (the claim taken over, the record changed)"
	rbStopped   = "handlers stopped by the worker (timeout, grace, lease lost)"
	rbOther     = "other errors (the database out of reach)"
	rbEnded     = "runs that ended before the handler returned"
)

// TxRows checks the transactional handlers from the database itself: every
// operation complete in the ledger has exactly one effect row (the core
// audit counts the others), of the attempt that completed it; every other
// operation none, with no window excepted; every attempt whose handler
// said it committed did, every row of an attempt killed inside its
// transaction or that panicked was rolled back, and no transaction of a
// handler that panicked was left open; every commit the proxy lost was
// resolved by the operation's record as the database decided it; and no
// drained worker left a session of its pool inside a transaction.
func TxRows(e *env, h *history, s *section) {
	rowOf := map[string]event.Execution{} // by owner
	notComplete, another := 0, 0
	for key, rows := range h.execs {
		rec, complete := h.records[key], h.complete(key)
		mine := false
		for _, r := range rows {
			if _, dup := rowOf[r.Owner]; dup {
				s.detail("%s: two rows of one attempt (%s)", key, r.Owner)
			}
			rowOf[r.Owner], mine = r, mine || r.Owner == rec.Owner
		}
		if !complete {
			notComplete++
			s.detail("%s: effect rows (run %d, %s) but the ledger says %s", key, rows[0].Run, rows[0].Owner, h.state(key))
		} else if !mine {
			another++
			s.detail("%s: complete under %s, its row is of %s (run %d)", key, rec.Owner, rows[0].Owner, rows[0].Run)
		}
	}
	s.zero("effect rows of operations not complete", notComplete)
	s.zero("effect rows of another attempt than the completion's", another)

	handled, wentOn, panicked := map[string]runEvent{}, map[string]bool{}, map[string]bool{}
	var holds, panics, sessionsRead, txLeft, leakChecks, leaked int
	for _, ev := range h.kind(event.EvInTx) {
		if ev.Err == "" {
			holds++
		} else {
			wentOn[ev.Owner] = true
		}
	}
	for _, ev := range h.kind(event.EvPanic) {
		panics++
		panicked[ev.Owner] = true
	}
	for _, ev := range h.kind(event.EvHandled) {
		handled[ev.Owner] = ev
		if ev.Session != "" && !strings.HasPrefix(ev.Session, event.SessionUnknown) {
			sessionsRead++
			if strings.HasPrefix(ev.Session, "idle in transaction") {
				txLeft++
				s.detail("%s: run %d's handler panicked, and its transaction's session was still %s after the handler returned (%s)", ev.Key, ev.run, ev.Session, ev.Owner)
			}
		}
	}
	for id, r := range h.runs {
		if r.counts.LeakChecked {
			leakChecks, leaked = leakChecks+1, leaked+int(r.counts.LeakedSessions)
			if r.counts.LeakedSessions > 0 {
				s.detail("run %d: %d sessions of its ledger's pool still inside a transaction after its worker stopped", id, r.counts.LeakedSessions)
			}
		}
	}
	inTx := map[string]inTxKill{}
	for _, k := range e.inTx {
		inTx[k.owner] = k
	}
	lost := e.proxy.lostCommits()
	lostRequest := map[string]bool{}
	for _, lc := range lost {
		if lc.Owner == "" {
			e.note("the proxy lost a commit of %s at %s, and read no completion's owner before it", lc.Client, lc.T.Format("15:04:05.000"))
		}
		lostRequest[lc.Owner] = lc.Owner != "" && !lc.Answered
	}

	// Every attempt that inserted its row: committed, or rolled back, and
	// why; the handler told the worker it committed only if it did; it ran
	// only the payload its operation was claimed with.
	var attempts, committed, batched, batchedCommitted, toldOtherwise, toldCommitted, panicRows, otherPayload int
	rolledBack := map[string]int{}
	for _, in := range h.kind(event.EvInsert) {
		attempts++
		if in.Client == event.BatchClient {
			batched++
		}
		hd, told := handled[in.Owner]
		if rec, ok := h.records[in.Key]; ok && !strings.HasPrefix(fmt.Sprintf("%x", rec.Fingerprint), in.Hash) || e.wl.opByID(in.Key) == nil {
			otherPayload++
			s.detail("%s: run %d ran a payload (%s) other than the one the operation was claimed with, or of no operation", in.Key, in.run, in.Hash)
		}
		if _, ok := rowOf[in.Owner]; ok {
			committed++
			if in.Client == event.BatchClient {
				batchedCommitted++
			}
			if panicked[in.Owner] {
				panicRows++
				s.detail("%s: run %d's handler panicked after its insert, and its row committed (%s)", in.Key, in.run, in.Owner)
			}
			if told && hd.Err != "" {
				toldOtherwise++
			}
			continue
		}
		if told && hd.Err == "" {
			toldCommitted++
			s.detail("%s: run %d's handler returned success (%s), its row did not commit", in.Key, in.run, in.Owner)
		}
		rolledBack[rollbackCause(in.Owner, hd, told, inTx, lostRequest, h.runs[in.run].end)]++
	}
	killedIn, missed, inTxRows := 0, 0, 0
	for _, k := range e.inTx {
		if wentOn[k.owner] {
			missed++ // it stopped waiting for the answer: the kill came after it left the hold
			continue
		}
		killedIn++
		if r, ok := rowOf[k.owner]; ok {
			inTxRows++
			s.detail("%s: run %d was killed inside its transaction, and its row committed (row %d)", k.key, k.run, r.Seq)
		}
		if _, ok := handled[k.owner]; ok {
			e.note("run %d was killed inside the transaction of %s, yet its handler returned", k.run, k.key)
		}
	}
	requestRows, answerMissing, resolved := 0, 0, map[string]int{}
	for _, lc := range lost {
		if lc.Owner == "" {
			continue
		}
		_, row := rowOf[lc.Owner]
		hd, told := handled[lc.Owner]
		what := "request lost"
		switch {
		case lc.Answered && !row:
			answerMissing++
			s.detail("the server answered the commit of %s (connection %s), and its row is not in the table", lc.Owner, lc.Client)
		case !lc.Answered && row:
			requestRows++
			s.detail("the commit of %s (connection %s) never reached the server, and its row is in the table", lc.Owner, lc.Client)
		}
		if lc.Answered {
			what = "answer dropped"
		}
		switch {
		case !told:
			what += ", the run killed before its handler returned"
		case hd.Err == "":
			what += ", told committed"
		default:
			what += ", told not committed"
		}
		resolved[what]++
	}
	s.row("attempts that inserted their row", fmt.Sprintf("%d: %d committed, %d rolled back (%v); %d committed though the handler was told otherwise (the record decided); %d of them in the Writes form, the insert sent with the completion and the commit in one round trip (%d committed)",
		attempts, committed, attempts-committed, rolledBack, toldOtherwise, batched, batchedCommitted))
	s.row("transactions held open after the insert", fmt.Sprintf("%d, %d of them killed there (SIGKILL; %d more kills came after one went on without the campaign's answer)", holds, killedIn, missed))
	s.row("handlers that panicked after the insert", fmt.Sprintf("%d (each a retryable failure); the session of %d of their transactions read once the handler had returned", panics, sessionsRead))
	s.row("lost commits", fmt.Sprintf("%d lost by the proxy, each cutting its connection (the redelivery finds what the record says): %v", len(lost), resolved))
	s.zero("handlers told committed whose row did not commit", toldCommitted)
	s.zero("rows of attempts killed inside their transaction", inTxRows)
	s.zero("rows of attempts that panicked", panicRows)
	s.zero("transactions of panicked handlers left open", txLeft)
	s.must("sessions of panicked handlers read", panics == 0 || sessionsRead > 0, fmt.Sprintf("%d of %d", sessionsRead, panics))
	s.zero("sessions left inside a transaction after a drain", leaked)
	s.must("drained runs that counted their sessions", leakChecks > 0, fmt.Sprint(leakChecks))
	s.zero("lost commit requests that took effect", requestRows)
	s.zero("answered commits whose row is missing", answerMissing)
	s.zero("attempts that ran another payload than their operation was claimed with", otherPayload)
}

// rollbackCause says why an attempt's row did not commit, from what its
// handler returned (h, when told), the kills inside transactions, the
// commits the proxy lost and how its run ended.
func rollbackCause(owner string, h runEvent, told bool, inTx map[string]inTxKill, lostRequest map[string]bool, end string) string {
	_, killedIn := inTx[owner]
	switch {
	case lostRequest[owner]:
		return rbRequest
	case told && strings.HasPrefix(h.Err, event.HandlerPanicked):
		return rbPanicked
	case !told && killedIn:
		return rbInTx
	case !told && killed(end):
		return rbKilled
	case !told:
		return rbEnded
	case strings.Contains(h.Err, "transient failure"):
		return rbTransient
	case strings.Contains(h.Err, "permanent failure"):
		return rbPermanent
	case h.Cause != "":
		return rbStopped
	case strings.Contains(h.Err, pgtx.ErrNotCommitted.Error()) && strings.Contains(h.Err, ": commit: "):
		return rbCommit
	case strings.Contains(h.Err, pgtx.ErrNotCommitted.Error()):
		return rbRefused
	}
	return rbOther
}

// call is one handler call of a worker run, from its events: when it
// started and returned (its run's end when it never did), and its error.
type call struct {
	run        int
	key, err   string
	start, end int64
}

// calls returns every handler call, in the order they started.
func (h *history) calls() []*call {
	var out []*call
	byOwner := map[string]*call{}
	for _, ev := range h.all {
		if c := byOwner[ev.Owner]; ev.Ev == event.EvHandled && c != nil {
			c.end, c.err = ev.T, ev.Err
		} else if ev.Ev == event.EvStart {
			c = &call{run: ev.run, key: ev.Key, start: ev.T, end: math.MaxInt64}
			if r := h.runs[ev.run]; r != nil && !r.endedAt.IsZero() {
				c.end = r.endedAt.UnixNano()
			}
			byOwner[ev.Owner], out = c, append(out, c)
		}
	}
	return out
}

// DownstreamOutages judges the outages of the downstream (Outages of the
// down kinds) against the workers' flow control: a handler call that
// started during one is one of the calls with which a run found the
// outage (its first Trip.Failures + Concurrency there: the failures that
// trip its detector, and the calls in flight then or starting as it trips)
// or a probe, and
// probes come one at a time fleet-wide, each a second or more (the first
// probe's wait, the least) after the one before ended, unless the run of
// the one before was stopped (SIGSTOP) meanwhile: its probe's lease lapses
// as a dead worker's would. It adds each outage's calls, its probes and how
// long after the downstream's return every operation sent before it was
// done.
func DownstreamOutages(e *env, h *history, s *section) {
	allow := cmp.Or(e.c.System.Flow.Trip.Failures, worker.DefaultTrip.Failures) + e.c.System.Concurrency
	calls, beyond, applied := h.calls(), 0, e.world.appliedOps()
	for _, o := range e.downs {
		from, to, n, pre, over := o.from.UnixNano(), o.to.UnixNano(), 0, 0, 0
		perRun := map[int]int{}
		var last *call
		for _, c := range calls {
			if c.start < from || c.start >= to {
				continue
			}
			if n, perRun[c.run] = n+1, perRun[c.run]+1; perRun[c.run] <= allow {
				pre++
				continue
			}
			if last != nil && c.start-last.end < int64(time.Second) && !during(e.paused[last.run], time.Unix(0, last.start), time.Unix(0, c.start)) {
				over++
				s.detail("downstream %s: run %d's call for %s at %s began less than a second after run %d's (%s, %s to %s) ended, or while it ran", o.kind, c.run, c.key, clock(c.start), last.run, last.key, clock(last.start), clock(last.end))
			}
			if last == nil || c.end > last.end {
				last = c
			}
		}
		drained := o.to
		for _, m := range h.msgs {
			if t, ok := applied[m.op.id]; ok && m.sentAt.Before(o.to) && t.After(drained) {
				drained = t
			}
		}
		beyond += over
		s.row(fmt.Sprintf("downstream %s at +%.0fs", o.kind, o.from.Sub(e.started).Seconds()), fmt.Sprintf("for %.1fs: %d handler calls began, %d of them within what the runs that found it may make (%d runs, %d each, probes among them), %d more, %d of them not one at a time a second apart; every operation sent before its return done %.1fs after it",
			o.to.Sub(o.from).Seconds(), n, pre, len(perRun), allow, n-pre, over, drained.Sub(o.to).Seconds()))
	}
	s.zero("handler calls during an outage of the downstream beyond the probes", beyond)
}

// FlowControl checks what flow control (System.Flow) promises, from the
// one history: no message dead-lettered because of an outage of the
// downstream or a limit (a dead letter of an operation that should
// complete, none of whose handler calls failed but during an outage: it
// failed only with the outage's failures, or was only ever held); no whole
// second in which the downstream saw more calls than a limit allows, by
// arrival (the rate times one second and the documented slack, the
// longest of its interval, of the run's reservations and 50 ms, plus the
// burst); nothing expired in SQS (a message sent, its operation never
// complete, in neither queue at the end); no deferred copy that ran its
// operation beside another message of its chain but in a window the audit
// names (the ledger's claim must stop it), and on a FIFO queue none at
// all; with a concurrency limit, no handler call begun with more running
// than it allows, but beside a run stopped meanwhile. It adds the pauses,
// probes,
// held, throttled and deferred messages and each limit's busiest second.
func FlowControl(e *env, h *history, s *section) {
	f, calls, downs := e.c.System.Flow, h.calls(), []window(nil)
	for _, o := range e.downs {
		downs = append(downs, window{o.from, o.to.Add(workerHandlerTimeout)})
	}
	dead, expired, stopped := 0, 0, 0
	for _, d := range h.dlq {
		if m := h.byTag[d.tag]; m != nil && m.shouldComplete() && !slices.ContainsFunc(calls, func(c *call) bool {
			return c.key == m.op.id && c.err != "" && !during(downs, time.Unix(0, c.start), time.Unix(0, c.end))
		}) {
			if run, end := h.endedHolding(d.tag); e.c.System.FIFO && run > 0 && during(downs, end.Add(-fifoStopSlack), end) {
				stopped++
				s.detail("%s (%s): dead-lettered (%s) after run %d (%s at the end) was stopped at %s holding it during an outage; received %d times, %d of them by runs stopped holding it",
					d.tag, m.op.id, cmp.Or(d.reason, "by SQS's redrive"), run, h.runs[run].end, clock(end.UnixNano()), h.receives(d.tag, false), h.receives(d.tag, true))
				continue
			}
			dead++
			s.detail("%s (%s): dead-lettered (%s), none of its attempts failed but during an outage", d.tag, m.op.id, cmp.Or(d.reason, "by SQS's redrive"))
		}
	}
	for _, m := range h.msgs {
		if !m.dropped && m.op.class != keyless && !h.complete(m.op.id) && !h.inQueue[m.tag] && !h.inDLQ[m.tag] {
			expired++
			s.detail("%s (%s): gone from the queue, its operation never complete (%s)", m.tag, m.op.id, h.state(m.op.id))
		}
	}
	slack := 50 * time.Millisecond
	for _, r := range h.runs {
		slack = max(slack, r.counts.ReserveMax)
	}
	perSec, above, busiest := map[string]map[int64]int{}, 0, map[string]int{}
	for key, xs := range h.execs {
		o := e.wl.opByID(key)
		for _, x := range xs {
			names := []string{"flow.rate"}
			for _, p := range f.Partitions {
				var b map[string]any
				if o != nil && json.Unmarshal([]byte(o.bodies[0]), &b) == nil && b[p.Pointer[1:]] != nil {
					names = append(names, fmt.Sprintf("partition %s = %v", p.Pointer, b[p.Pointer[1:]]))
				}
			}
			for _, n := range names {
				if perSec[n] == nil {
					perSec[n] = map[int64]int{}
				}
				perSec[n][x.At/1e9]++
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(perSec)) {
		rate, burst := f.Rate, max(f.Burst, 1)
		if n != "flow.rate" {
			rate, burst = f.Partitions[0].Rate, max(f.Partitions[0].Burst, 1)
		}
		if rate == 0 {
			continue
		}
		bound := int(rate*(1+max(1/rate, slack.Seconds())) + float64(burst))
		for sec, c := range perSec[n] {
			if busiest[n] = max(busiest[n], c); c > bound {
				above += c - bound
				s.detail("%s: %d calls in the second from %s, at most %d allowed", n, c, clock(sec*1e9), bound)
			}
		}
		s.row("busiest second: "+n, fmt.Sprintf("%d calls (at most %d: %g/s, burst %d, slack %v)", busiest[n], bound, rate, burst, slack.Round(time.Millisecond)))
	}
	if f.Concurrency > 0 {
		// A call that began with more running than the limit, none of
		// whose runs was stopped (SIGSTOP) meanwhile: a stopped run's
		// slots lapse, as a dead worker's would, while its call waits.
		most, over := 0, 0
		for i, c := range calls {
			n, stopped := 1, false
			for _, d := range calls[:i] {
				if d.end > c.start {
					n++
					stopped = stopped || during(e.paused[d.run], time.Unix(0, d.start), time.Unix(0, c.start))
				}
			}
			if stopped {
				continue
			}
			if most = max(most, n); n > f.Concurrency {
				over++
				s.detail("run %d's call for %s began at %s with %d calls running, above flow.concurrency (%d)", c.run, c.key, clock(c.start), n, f.Concurrency)
			}
		}
		s.row("flow.concurrency", fmt.Sprintf("at most %d handler calls running at once, those beside a run stopped meanwhile aside (the limit %d)", most, f.Concurrency))
		s.zero("handler calls begun above flow.concurrency", over)
	}
	keyOf, chains := map[string]string{}, map[string]map[string]bool{}
	for _, ev := range h.kind(event.EvReceive) {
		keyOf[ev.MessageID] = ev.Key
	}
	deferrals, twice := 0, 0
	for _, ev := range h.kind(event.EvSent) {
		if k := keyOf[ev.MessageID]; ev.Queue == e.queue {
			if deferrals++; chains[k] == nil {
				chains[k] = map[string]bool{}
			}
			chains[k][ev.MessageID], chains[k][ev.Copy] = true, true
		}
	}
	for k, ids := range chains {
		var prev *event.Execution
		for _, x := range h.execs[k] {
			if x.Status != 200 || !ids[x.MessageID] {
				continue
			}
			if prev != nil && prev.MessageID != x.MessageID {
				if cause := h.explain(*prev, x, false); strings.HasPrefix(cause, causeUnexplained) {
					twice++
					s.detail("%s: deferred, and run to success from message %s after %s: %s", k, x.MessageID, prev.MessageID, cause)
				}
			}
			prev = &x
		}
	}
	held, longest := 0, int64(0)
	for owner, t := range h.claims.started {
		if c, ok := h.claims.claimed[owner]; ok && t-c >= 1e9 {
			held, longest = held+1, max(longest, t-c)
		}
	}
	st := h.stats
	s.row("flow control", fmt.Sprintf("%d pauses, %d probes (%d failed), %d attempts held a second or more after their claim (the longest %.1fs), %d throttled, %d deferred (%d copies seen sent)",
		st.FlowPauses, st.Probes, st.ProbesFailed, held, float64(longest)/1e9, st.Throttled, st.Deferred, deferrals))
	s.zero("messages dead-lettered because of an outage or a limit", dead)
	if e.c.System.FIFO {
		s.row("FIFO messages dead-lettered after a worker was stopped holding them during an outage", fmt.Sprintf("%d (drained, killed, or SIGSTOPped past the visibility timeout: a FIFO message cannot be sent again, and its next receive after its last is the redrive's)", stopped))
	}
	s.zero("downstream calls above a limit in a whole second", above)
	s.zero("messages expired in SQS", expired)
	if e.c.System.FIFO {
		s.zero("FIFO messages sent again (deferred)", deferrals)
	} else {
		s.zero("deferred copies that ran twice", twice)
	}
}

// fifoStopSlack: a run that ended this long after an outage may still
// have been paused by it (the pause ends with a probe, at most
// flow.probe_max later, and the ramp after it).
const fifoStopSlack = 30 * time.Second

// endedHolding returns the run that received the message tagged tag last,
// and when it stopped holding it, if it was stopped with the message in
// hand (see stoppedHolding).
func (h *history) endedHolding(tag string) (int, time.Time) {
	var last *runEvent
	for i := range h.all {
		if ev := &h.all[i]; ev.Ev == event.EvReceive && ev.Send == tag {
			last = ev
		}
	}
	if last == nil {
		return 0, time.Time{}
	}
	at, ok := h.stoppedHolding(last)
	if !ok {
		return 0, time.Time{}
	}
	return last.run, at
}

// stoppedHolding reports whether the run of the receive r was stopped
// with its message in hand (neither deleted nor sent on by it, nor its
// claim released), and when: told to end (drained or killed), or stopped
// (SIGSTOP) for longer than the visibility timeout, which lapses the
// receipt as a kill does.
func (h *history) stoppedHolding(r *runEvent) (time.Time, bool) {
	var at time.Time
	if ri := h.runs[r.run]; ri != nil && !ri.endedAt.IsZero() {
		at = ri.stoppedAt
	}
	for _, w := range h.e.paused[r.run] {
		if w.from.UnixNano() > r.T && w.to.Sub(w.from) >= workerVisibility && (at.IsZero() || w.from.Before(at)) {
			at = w.from
		}
	}
	if at.IsZero() {
		return at, false
	}
	return at, !slices.ContainsFunc(h.byKey[r.Key], func(ev runEvent) bool {
		return ev.run == r.run && ev.T > r.T && ev.T < at.UnixNano() &&
			(ev.MessageID == r.MessageID && (ev.Ev == event.EvDelete || ev.Ev == event.EvSent) || ev.Ev == event.EvRelease)
	})
}

// receives counts the receives of the message tagged tag; with ended,
// only those whose run was stopped holding it.
func (h *history) receives(tag string, ended bool) int {
	n := 0
	for i := range h.all {
		if ev := &h.all[i]; ev.Ev == event.EvReceive && ev.Send == tag {
			if _, stopped := h.stoppedHolding(ev); !ended || stopped {
				n++
			}
		}
	}
	return n
}

// ClockOffset checks that the PostgreSQL server's clock stood as far from
// the hosts' as the campaign set it (System.ClockOffset), within a second,
// when it started and at the audit: the campaign's other lines were then
// kept with the ledger's clock that far from the workers'.
func ClockOffset(e *env, _ *history, s *section) {
	want := e.c.System.ClockOffset
	end, err := e.pg.clockOffset(context.Background())
	near := func(d time.Duration) bool { return (d - want).Abs() < time.Second }
	value := fmt.Sprintf("set %+v: %+.1fs when it started, %+.1fs at the audit", want, e.pgOffset.Seconds(), end.Seconds())
	if err != nil {
		value = fmt.Sprintf("set %+v: %+.1fs when it started; at the audit: %v", want, e.pgOffset.Seconds(), err)
	}
	s.must("PostgreSQL's clock against the hosts'", want != 0 && err == nil && near(e.pgOffset) && near(end), value)
}
