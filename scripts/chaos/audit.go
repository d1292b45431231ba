package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// The audit: one checker over the history that counts every operation and
// every message, whatever the campaign, and names the window that explains
// every execution beyond the first; then the campaign's own checks and
// those of its faults.

// Causes of an execution beyond the first successful one, found from what
// happened to the run that made the earlier one: the windows named in
// docs/guarantees.md ("When an operation can run twice"), and the campaign's own
// doings (a record it forgot, a replay).
const (
	causeWindowA        = "crash in window a (handler done, completion not durable)"
	causeInHandler      = "kill while the downstream served the request (in-handler)"
	causeKilled         = "kill after the downstream answered, before the completion was durable"
	causeKilledInFlight = "kill while the request was in flight"
	causeCompleteFail   = "completion could not be recorded (ledger commit failed)"
	causeFailFail       = "failure could not be recorded (ledger commit failed)"
	causeCompleteDown   = "completion could not be recorded: the database was out of reach"
	causeFailDown       = "failure could not be recorded: the database was out of reach"
	causeLeaseDown      = "lease lapsed while the database was out of reach, another claim ran it too"
	// causeLeasePaused: a worker stopped (SIGSTOP) for longer than its
	// leases is, to the others, a worker that died: another claim takes
	// its operations over, as the lease is for.
	causeLeasePaused = "lease lapsed while its worker was stopped (SIGSTOP), another claim ran it too"
	causeForgotten   = "its record forgotten (sqsonce ledger forget) while it ran, its next delivery ran it again"
	causeReplayed    = "failed permanently, reset by sqsonce replay and run again"
	causeHandlerErr  = "the worker saw the attempt fail after the downstream did it"
	causeUnexplained = "UNEXPLAINED"
	// causeTakenOver is not a documented window: the claim's lease lapsed
	// while the work ran and another claim ran it too.
	causeTakenOver = "UNEXPLAINED: lease lapsed while the work ran, another claim ran it too"
)

// audit checks the history and returns the campaign's part of the report.
func (e *env) audit(h *history) *section {
	s := &section{Name: e.name, Title: e.c.Title}
	s.row("time taken", e.elapsed.Round(time.Second).String())
	e.figures(h, s)

	// Every message sent: done (its payload applied, its key complete),
	// in the dead-letter queue, in the queue, dropped by SQS at the send,
	// or lost.
	var done, dropped, inDLQ, inQueue, lost, expectDLQ, foundDLQ int
	lostBy := map[string]int{}
	late := map[string]bool{} // operations sent again after they were done
	for _, m := range h.msgs {
		late[m.op.id] = late[m.op.id] || m.late && m.variant == 0
		switch applied := h.applied[m.op.id]; {
		case m.dropped:
			dropped++
		case h.complete(m.op.id) && (applied == event.Hash([]byte(m.body())) || h.ranAfterForget(m)):
			done++
		case h.inQueue[m.tag]:
			inQueue++
		case h.inDLQ[m.tag]:
			inDLQ++
		default:
			lost++
			lostBy[fmt.Sprintf("%s payload %c", m.op.class, 'a'+m.variant)]++
			s.detail("lost: message %s (%s, payload %c, %s, group %q, sent at +%.1fs as %s): ledger %s, %d executions", m.tag, m.op.id, 'a'+m.variant,
				m.op.class, m.groupID(), m.sentAt.Sub(e.started).Seconds(), m.id, h.state(m.op.id), len(h.execs[m.op.id]))
		}
		// A message whose payload cannot complete (or another payload of
		// its key did) must be dead-lettered.
		o := m.op
		if !m.dropped && (o.class == keyless || o.class == permanent || o.class == poison ||
			len(o.bodies) > 1 && h.applied[o.id] != event.Hash([]byte(m.body())) && !h.ranAfterForget(m)) {
			expectDLQ++
			if h.inDLQ[m.tag] {
				foundDLQ++
			} else {
				s.detail("%s (%s, payload %c): not in the dead-letter queue", m.tag, o.id, 'a'+m.variant)
			}
		}
	}
	s.row("messages accounted for", fmt.Sprintf("%d sent: %d done (payload applied, key complete), %d in the dead-letter queue, %d still in the queue, %d dropped by SQS at the send (deduplicated within 5 minutes); %d and %d messages found in the two queues",
		len(h.msgs), done, inDLQ, inQueue, dropped, len(h.dlq), len(h.queued)))
	s.zero("messages lost", lost)
	for k, n := range lostBy {
		s.row("  lost", fmt.Sprintf("%d %s", n, k))
	}
	if h.undrained > 0 {
		e.note("%d messages could not be drained from the queues for the audit within %v", h.undrained, drainWait)
	}

	// Every operation.
	byOp := map[string][]*msg{}
	for _, m := range h.msgs {
		byOp[m.op.id] = append(byOp[m.op.id], m)
	}
	var opsLost, ackNotDone, expect, completed, redriven int
	for _, o := range h.ops {
		complete, effect := h.complete(o.id), h.applied[o.id] != ""
		if o.class == keyless {
			continue
		}
		if complete && !effect {
			ackNotDone++
			s.detail("%s: complete in the ledger but no effect", o.id)
		}
		somewhere := false
		for _, m := range byOp[o.id] {
			somewhere = somewhere || h.inDLQ[m.tag] || h.inQueue[m.tag]
		}
		if (!complete || !effect) && !somewhere {
			opsLost++
			s.detail("%s (%s): lost: ledger %s, effect %v, no message in a queue", o.id, o.class, h.state(o.id), effect)
		}
		if m := (&msg{op: o}); m.shouldComplete() {
			expect++
			if complete && effect {
				completed++
			} else if somewhere {
				redriven++
				s.detail("%s (%s): not complete at the end (info): ledger %s, in a queue", o.id, o.class, h.state(o.id))
			}
		}
	}
	s.row("operations completed", fmt.Sprintf("%d of %d expected to (the rest, %d, dead-lettered after their last receive or still queued, not lost)", completed, expect, redriven))
	s.zero("operations lost", opsLost)
	s.zero("acknowledged but not done", ackNotDone)

	// Every delete: only once the operation was recorded complete (or
	// the ledger answered a claim that it is), or after SQS accepted the
	// message's dead-letter copy.
	// A deferral's copy names its source by its tag only (event.AttrSend),
	// which another message may share (a copy the sender made): the
	// delete of a message of the tag after the run sent a copy of it is
	// the deferral's.
	sent, tagOf, copies := map[string]int64{}, map[string]string{}, map[string][]int64{}
	for _, ev := range h.all {
		if _, ok := sent[ev.MessageID]; !ok && ev.Ev == event.EvSent {
			sent[ev.MessageID] = ev.T
		}
		if ev.Ev == event.EvReceive {
			tagOf[ev.MessageID] = ev.Send
		} else if ev.Ev == event.EvSent && ev.Queue == e.queue && ev.Send != "" {
			copies[fmt.Sprint(ev.run, " ", ev.Send)] = append(copies[fmt.Sprint(ev.run, " ", ev.Send)], ev.T)
		}
	}
	recorded := map[string]int64{}
	for _, ev := range h.all {
		tx := e.c.System.Tx != nil && ev.Ev == event.EvHandled // a transactional handler's success commits the completion
		if _, ok := recorded[ev.Key]; !ok && ev.Err == "" && (ev.Ev == event.EvComplete || ev.Ev == event.EvDone || tx) {
			recorded[ev.Key] = ev.T
		}
	}
	early, unknown := 0, 0
	for _, ev := range h.kind(event.EvDelete) {
		t, okDone := recorded[ev.Key]
		c, okCopy := sent[ev.MessageID]
		switch {
		case ev.MessageID == "":
			unknown++
		case (ev.Key == "" || !okDone || t > ev.T) && (!okCopy || c > ev.T) && !slices.ContainsFunc(copies[fmt.Sprint(ev.run, " ", tagOf[ev.MessageID])], func(t int64) bool { return t <= ev.T }):
			early++
			s.detail("run %d deleted message %s (%s) at %s before its operation was recorded complete or its dead-letter copy accepted", ev.run, ev.MessageID, ev.Key, clock(ev.T))
		}
	}
	s.row("deletes of the workers", fmt.Sprintf("%d requested (%d of messages the audit cannot name)", len(h.kind(event.EvDelete)), unknown))
	s.zero("messages deleted before their operation was recorded complete or dead-lettered", early)

	// The dead letters whose payload should have completed, and the copies
	// that SQS accepted for the dead-letter queue but are not in it.
	wrongReason, lastReceive, inDLQByID := 0, 0, map[string]bool{}
	for _, d := range h.dlq {
		m, n, of := h.byTag[d.tag], 0, 0
		inDLQByID[d.id] = true
		if m == nil || d.reason == "" || !m.shouldComplete() {
			continue
		}
		// The worker moves a message that failed on its last receive, as
		// SQS's redrive would at the next.
		if _, err := fmt.Sscanf(d.reason, "failed on receive %d of %d:", &n, &of); err == nil && n >= of && of == e.c.System.MaxReceive {
			lastReceive++
			continue
		}
		if a := h.applied[m.op.id]; strings.HasPrefix(d.reason, "conflict") && len(m.op.bodies) > 1 && a != "" && a != event.Hash([]byte(m.body())) {
			continue // another payload of its key went first: the conflict is right
		}
		wrongReason++
		s.detail("%s (%s): dead-lettered by sqsonce although it should have completed: %s", d.tag, m.op.id, d.reason)
	}
	s.zero("dead-lettered by sqsonce (with a reason), expected to complete", wrongReason)
	s.must("in the dead-letter queue as expected", foundDLQ == expectDLQ, fmt.Sprintf("%d of %d (and %d the worker dead-lettered on their last receive)", foundDLQ, expectDLQ, lastReceive))
	// A FIFO queue takes a copy sent again within five minutes (its answer
	// lost, say) and drops it: another copy of its message is there.
	copied := map[string]bool{}
	for _, ev := range h.kind(event.EvSent) {
		copied[ev.MessageID] = copied[ev.MessageID] || e.c.System.FIFO && inDLQByID[ev.Copy]
	}
	for _, ev := range h.kind(event.EvSent) {
		// Replay moves the dead letters back to the queue.
		if len(e.rounds) == 0 && ev.Queue == e.dlq && ev.Copy != "" && !inDLQByID[ev.Copy] && !copied[ev.MessageID] {
			e.note("copy %s of message %s, accepted by SQS for the dead-letter queue at %s, is not in it", ev.Copy, ev.MessageID, clock(ev.T))
		}
	}

	// Executions: effects, payloads, keys, and every one beyond the first.
	effects, nExtra := map[string]int{}, 0
	var execs, conflictRan, keylessRan, effectsTwice, ranAgain int
	extra := map[string]int{}
	for key, xs := range h.execs {
		o := h.e.wl.opByID(key)
		want := ""
		if r, ok := h.records[key]; ok {
			want = fmt.Sprintf("%x", r.Fingerprint)
		} else if len(xs) > 0 {
			want = xs[0].BodyHash
		}
		var settled []event.Execution
		for _, x := range xs {
			execs++
			if x.Effect {
				effects[x.BodyID]++
			}
			if !strings.HasPrefix(want, x.BodyHash) && !h.forgotAfter(key, x.T) {
				conflictRan++
				s.detail("%s: execution %d ran payload %s, the operation was claimed with %s", key, x.Seq, x.BodyHash, want)
			}
			if key == "" || o == nil || o.class == keyless {
				keylessRan++
				s.detail("execution %d of key %q: no operation of the workload has it", x.Seq, key)
			}
			if x.Status == 200 || x.Status == 422 && o != nil && o.class == permanent {
				settled = append(settled, x)
			}
		}
		for i := 1; i < len(settled); i++ {
			cause := h.explain(settled[i-1], settled[i], settled[i].Status == 422)
			extra[cause], nExtra = extra[cause]+1, nExtra+1
			s.detail("execution beyond one (%s): %s: execution %d (run %d) after %d (run %d)", cause, key, settled[i].Seq, settled[i].Run, settled[i-1].Seq, settled[i-1].Run)
		}
		if len(settled) > 1 && late[key] {
			ranAgain++
		}
	}
	for id, n := range effects {
		if n > 1 {
			effectsTwice += n - 1
			s.detail("%s: effect applied %d times", id, n)
		}
	}
	s.row("executions", fmt.Sprintf("%d, %d of them applied an effect", execs, len(effects)))
	if ws := h.windows; len(ws) > 0 {
		sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
		q := func(f float64) time.Duration {
			return ws[min(len(ws)-1, int(f*float64(len(ws))))].Round(10 * time.Microsecond)
		}
		s.row("duplicate window (handler done to completion durable)", fmt.Sprintf("p50 %v, p99 %v, max %v", q(0.5), q(0.99), q(1)))
	}
	s.row("executions beyond one per operation", fmt.Sprintf("%d (%d operations sent again after they were done ran twice, of any cause below)", nExtra, ranAgain))
	for _, c := range slices.Sorted(maps.Keys(extra)) {
		if !strings.HasPrefix(c, causeUnexplained) {
			s.row("  "+c, fmt.Sprint(extra[c]))
		}
	}
	s.zero("executions beyond one: "+causeTakenOver, extra[causeTakenOver])
	s.zero("executions beyond one: "+causeUnexplained, extra[causeUnexplained])
	s.zero("effects applied twice", effectsTwice)
	s.zero("conflicting payloads run", conflictRan)
	s.zero("keyless messages run", keylessRan)

	// Claims: every handler call under its own claim.
	afterLoss := h.claims.afterLoss()
	for _, d := range afterLoss {
		s.detail("%s", d)
	}
	s.row("claims lost and reclaimed", fmt.Sprintf("%d claims taken over from a worker still alive before it started their work; %d records of operations waiting in a worker's hands forgotten (sqsonce ledger forget; %d started before the worker learnt it); %d completions refused, the claim another's or gone",
		h.claims.takenUnstarted(h.runs), len(e.forgets), h.claims.unknowing, h.notOwnerCompletes()))
	s.zero("handler calls after their claim was lost (taken over, released, never written)", len(afterLoss))

	for _, p := range e.phases {
		s.must("ledger phase: "+p.name, p.ok, p.detail)
	}
	for _, c := range append(append([]Check(nil), e.c.Checks...), e.judges...) {
		c(e, h, s)
	}
	s.must("queue empty at the end", h.quiet, fmt.Sprint(h.quiet))
	e.mu.Lock()
	s.Notes = append(s.Notes, e.notes...)
	e.mu.Unlock()
	s.zero("other findings", len(s.Notes))
	for _, n := range s.Notes {
		s.row("  finding", strings.SplitN(n, "\n", 2)[0])
	}
	for _, d := range s.Details {
		fmt.Fprintf(e.log, "%s: detail: %s\n", e.name, d)
	}
	return s
}

// notOwnerCompletes counts the completions the ledger refused because
// another claim owned the operation by then, or it was gone.
func (h *history) notOwnerCompletes() int {
	n := 0
	for _, ev := range h.kind(event.EvComplete) {
		if strings.Contains(ev.Err, ledger.ErrNotOwner.Error()) || strings.Contains(ev.Err, ledger.ErrNotFound.Error()) {
			n++
		}
	}
	return n
}

func clock(t int64) string { return time.Unix(0, t).UTC().Format("15:04:05.000") }

// Bounds on how long after the earlier execution a kill still explains the
// next one: the worker records the completion within milliseconds of the
// handler's return, and the handler returns within its timeout.
const (
	killAfterHandled  = 10 * time.Second
	killAfterInFlight = workerHandlerTimeout + 5*time.Second
)

// during reports whether one of ws overlaps from..to.
func during(ws []window, from, to time.Time) bool {
	for _, w := range ws {
		if w.from.Before(to) && w.to.After(from) {
			return true
		}
	}
	return false
}

// explain says why an operation ran again (execution next) after execution
// prev had settled it, from what happened to the run that made prev between
// the two.
func (h *history) explain(prev, next event.Execution, permanent bool) string {
	run, e := prev.Run, h.e
	for _, f := range e.forgets {
		if f.key == prev.Key && f.from.UnixNano() > prev.T-int64(killAfterInFlight) && f.from.UnixNano() < next.T {
			return causeForgotten
		}
	}
	for _, r := range e.rounds {
		if permanent && r.start.UnixNano() > prev.T && r.start.UnixNano() < next.T {
			return causeReplayed
		}
	}
	// The later execution may be the stale one: an attempt whose run was
	// stopped (SIGSTOP) while its request was in flight reaches the
	// downstream when the run goes on, after the lease lapsed and another
	// claim ran the operation.
	if next.Run != run && during(e.paused[next.Run], time.Unix(0, next.T).Add(-killAfterInFlight), time.Unix(0, next.T)) {
		return causeLeasePaused
	}
	if h.crashes[fmt.Sprint(run, " ", prev.Key)] == event.WindowA {
		return causeWindowA
	}
	if e.inHand[prev.Key] == run {
		return causeInHandler
	}
	ri := h.runs[run]
	if ri == nil {
		return causeUnexplained
	}
	wasKilled := killed(ri.end) && ri.end != endInTx
	// The attempt that made prev: its owner token when the downstream
	// recorded it, else the first of its number that returned after prev.
	var handled *runEvent
	for i, ev := range h.byKey[prev.Key] {
		if ev.run == run && ev.Ev == event.EvHandled && (prev.Owner != "" && ev.Owner == prev.Owner || prev.Owner == "" && ev.T >= prev.T && fmt.Sprint(ev.Attempt) == prev.Attempt) {
			handled = &h.byKey[prev.Key][i]
			break
		}
	}
	if handled == nil {
		if wasKilled && ri.endedAt.Sub(time.Unix(0, prev.T)) < killAfterInFlight {
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
		case during(e.paused[run], from, to):
			return causeLeasePaused
		case during(e.outOfReach(), from, to):
			return causeLeaseDown
		}
		return causeTakenOver
	}
	if handled.Err != "" && !permanent {
		if e.c.System.Postgres && strings.Contains(handled.Cause, "lease lost") {
			return leaseLapsed(handled.T)
		}
		return causeHandlerErr
	}
	kind, failCause, downCause := event.EvComplete, causeCompleteFail, causeCompleteDown
	if permanent {
		kind, failCause, downCause = event.EvFail, causeFailFail, causeFailDown
	}
	recorded, failed, down := false, false, false
	var takenOver int64 // when the worker found the operation taken over
	for _, ev := range h.byKey[prev.Key] {
		switch {
		case ev.run != run || ev.Ev != kind:
		case handled.Owner != "" && ev.Owner != handled.Owner:
			// Another attempt's.
		case handled.Owner == "" && (ev.T < handled.T || ev.T > next.T):
			// Another attempt's, most likely: a completion recorded after
			// the next execution started says nothing about this one.
		case ev.Err == "":
			recorded = true
		case strings.Contains(ev.Err, ledger.ErrNotOwner.Error()):
			takenOver = ev.T
		case strings.Contains(ev.Err, ledger.ErrUnavailable.Error()):
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
	case wasKilled && ri.endedAt.Sub(time.Unix(0, handled.T)) < killAfterHandled:
		return causeKilled
	}
	return causeUnexplained
}

// claimHistory is who held each operation's claim when, from the worker
// runs' event logs: every claim written (EvClaim, logged once the ledger
// call returned, so after the claim took effect, and after its call was
// sent: the ledger may order two calls in flight at once either way, and
// one answered late, its connection stalled, may have taken effect before
// one answered earlier), every claim released
// (EvRelease, likewise), every answer that a claim was lost (EvLost) and
// every handler call (EvStart, logged as the handler is called), each with
// its attempt's owner token, which no two attempts share; and from the
// campaign, the records it forgot (sqsonce ledger forget).
type claimHistory struct {
	claims    map[string][]runEvent // key -> claims written, in time order
	claimed   map[string]int64      // owner -> when its claim was written
	sent      map[string]int64      // owner -> when its claim's call was sent
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

// newClaimHistory reads the claims from events, in time order.
func newClaimHistory(events []runEvent, forgets []forgetRec) *claimHistory {
	h := &claimHistory{claims: map[string][]runEvent{}, claimed: map[string]int64{}, sent: map[string]int64{}, released: map[string]int64{}, told: map[string]int64{},
		started: map[string]int64{}, forgotten: map[string][]int64{}}
	for _, f := range forgets {
		h.forgotten[f.key] = append(h.forgotten[f.key], f.from.UnixNano())
	}
	for _, e := range events {
		switch e.Ev {
		case event.EvClaim:
			h.claims[e.Key] = append(h.claims[e.Key], e)
			h.claimed[e.Owner] = e.T
			h.sent[e.Owner] = sentAt(e)
		case event.EvRelease:
			h.released[e.Owner] = e.T
		case event.EvLost:
			if _, ok := h.told[e.Owner]; !ok {
				h.told[e.Owner] = e.T
			}
		case event.EvStart:
			h.starts = append(h.starts, e)
			h.started[e.Owner] = e.T
		}
	}
	return h
}

// takenUnstarted counts the claims that another claim took over while the
// run that held them was alive (stopped, or cut off from its ledger) and
// had not called their handler: messages waiting in its hands, whose work
// it must then never start.
func (h *claimHistory) takenUnstarted(runs map[int]*runInfo) int {
	n := 0
	for _, cs := range h.claims {
		for i := 1; i < len(cs); i++ {
			c, prev := cs[i], cs[i-1]
			if !c.Takeover || prev.Owner == c.Owner || prev.run == c.run {
				continue
			}
			if start, ok := h.started[prev.Owner]; ok && start < c.T {
				continue
			}
			if r := runs[prev.run]; r == nil || r.endedAt.IsZero() || r.endedAt.UnixNano() > c.T {
				n++
			}
		}
	}
	return n
}

// sentAt is when a claim's call was sent: its answer's time in an event
// that does not say.
func sentAt(e runEvent) int64 {
	if e.Since > 0 {
		return e.Since
	}
	return e.T
}

// tookOver reports whether claim c of an operation took effect after the
// claim of owner, and so took the operation from it. c did when its call
// was sent after owner's claim was answered. Sent before that answer (both
// calls in flight at once), c was ordered by the ledger either way: after
// owner's only where owner's lease could have lapsed by then, for a claim
// takes effect after its call is sent and holds its lease (the visibility
// timeout) from then, so only when c was answered a lease or more after
// owner's call was sent; otherwise c came first, and owner's claim took it
// over.
func (h *claimHistory) tookOver(c runEvent, owner string) bool {
	own := h.claimed[owner]
	switch {
	case c.T <= own:
		return false
	case sentAt(c) > own:
		return true
	}
	return c.T >= h.sent[owner]+int64(workerVisibility)
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
	var out []string
	h.unknowing = 0
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
				if c.T < s.T && c.Owner != s.Owner && h.tookOver(c, s.Owner) {
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
			out = append(out, fmt.Sprintf("%s: run %d called the handler for attempt %d under claim %s at %s, but %s", s.Key, s.run, s.Attempt, s.Owner, clock(s.T), why))
		}
	}
	sort.Strings(out)
	return out
}
