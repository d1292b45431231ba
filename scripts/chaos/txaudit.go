package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/pgtx"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// txReport is what the transactional campaign found. Its audit reads the
// database itself: the effects table and the ledger's records; the
// worker runs' event logs say what each attempt inserted and what its
// handler was told; the proxy says which commits it lost.
type txReport struct {
	Workers int
	Elapsed time.Duration

	Planned, Sent, Accepted int64
	SenderLostAcks          int
	Ops                     map[opClass]int
	Keyless, LateResends    int

	Runs       int
	Ends       map[string]int
	Kills      int
	DoubleTerm int
	Faults     map[string]int
	Stats      worker.Stats
	PG         *sharedFindings

	Restarts, Refusals, CutOutages, ConnsCut int

	// Every message sent (its tag): done (its operation complete with a
	// row of its payload), in the dead-letter queue, still on the queue,
	// or none of these.
	Messages, MsgDone, MsgDLQ, MsgQueued, MsgLost int

	EffectRows, OpsComplete   int
	ExpectComplete, Completed int
	DLQBeforeComplete         int
	ExpectDLQ, FoundDLQ       int
	DLQMessages               int

	// Attempts that inserted their row, and what became of the rows.
	Attempts, Committed, RolledBack int
	// Batched are the attempts made in the Writes form (their insert
	// sent with the completion and the commit in one round trip), and
	// BatchedCommitted those of them whose row committed.
	Batched, BatchedCommitted int
	RolledBackBy              map[string]int
	CommittedToldFailed       int // committed, the handler told the worker it was not (safe: the record decides)
	InTxHolds, InTxKills      int
	InTxMissed                int // kills meant for a held transaction that came after it went on
	Panics                    int // attempts that panicked after their insert, on purpose
	// The sessions of those attempts' transactions once their handler
	// had returned: read, and still inside a transaction.
	PanicSessionsRead, PanicTxLeft int

	// Drained runs that counted, once their worker had stopped, the
	// sessions of their ledger's pool still inside a transaction, and
	// how many they found.
	LeakChecks, LeakedSessions int

	// Commits the proxy lost, and what the worker's handler made of them.
	LostRequests, LostAnswers int
	ResolvedCommitted         int // answer lost: told committed
	ResolvedNotCommitted      int // request lost: told not committed
	AnsweredToldFailed        int // answer lost: told not committed (safe: the redelivery finds it complete)
	LostUnresolved            int // the run was killed before its handler returned

	// Must be 0.
	Lost                      int
	AckNotDone                int
	EffectsTwice              int
	RowWithoutCompletion      int
	RowOfAnotherAttempt       int
	ToldCommittedNotCommitted int
	InTxCommitted             int
	PanicCommitted            int
	LostRequestCommitted      int
	LostAnswerMissing         int
	ConflictRan, KeylessRan   int
	DLQWrongReason            int
	AfterLoss                 int // handler calls after their attempt's claim was lost

	Phases  []phaseResult
	Notes   []string
	Quiet   bool
	Details []string
}

// txRow is a row of the effects table.
type txRow struct {
	key, hash, owner, client string
	run, attempt             int
	seq                      int64
}

// txInsert is an attempt's insert, as its run logged it.
type txInsert struct {
	run int
	ev  event.WorkerEvent
}

// Causes of a rolled-back row.
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

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// batchClient is the client that an attempt in the Writes form logs
// with its insert (it does not see its connection); the chaos worker's
// constant of the same name.
const batchClient = "batch"

// txAudit audits the transactional campaign from the database itself:
// every operation complete in the ledger has exactly one effect row, of
// the attempt that completed it and of the payload it was claimed with;
// every operation not complete has none, whatever happened (no crash
// window excepted); every message sent is accounted for; every attempt
// whose handler told the worker it committed did; every commit the proxy
// lost was told right.
func (c *campaign) txAudit(ctx context.Context, wl *workload, snd *sender, elapsed time.Duration, quiet bool) (*txReport, error) {
	r := &txReport{
		Workers:      c.cfg.Tx.Workers,
		Elapsed:      elapsed,
		Planned:      int64(wl.planned()),
		Sent:         snd.sent.Load(),
		Accepted:     snd.accepted.Load(),
		Ops:          map[opClass]int{},
		Keyless:      len(wl.keyless),
		RolledBackBy: map[string]int{},
		Quiet:        quiet,
	}
	for _, byKind := range snd.faults.Counts() {
		r.SenderLostAcks += byKind["LostAck"]
	}
	for _, o := range wl.ops {
		r.Ops[o.class]++
		if o.late {
			r.LateResends++
		}
	}
	detail := func(format string, args ...any) { r.Details = append(r.Details, fmt.Sprintf(format, args...)) }

	// The runs, their ends and counters, and the outages.
	c.mu.Lock()
	r.DoubleTerm = c.doubleTerms
	procs := append([]*proc(nil), c.procs...)
	kills := append([]inTxKill(nil), c.inTx...)
	c.mu.Unlock()
	rl, err := c.readRuns()
	if err != nil {
		return nil, err
	}
	r.Runs, r.Kills, r.Ends, r.Faults, r.Stats = rl.runs, rl.kills, rl.endCounts, rl.faults, rl.stats
	for _, p := range procs {
		if cnt := c.counts(p.id); cnt.LeakChecked {
			r.LeakChecks++
			r.LeakedSessions += int(cnt.LeakedSessions)
			if cnt.LeakedSessions > 0 {
				detail("run %d: %d sessions of its ledger's pool still inside a transaction after its worker stopped", p.id, cnt.LeakedSessions)
			}
		}
	}
	r.AfterLoss = len(rl.afterLoss)
	r.Details = append(r.Details, rl.afterLoss...)
	f, err := c.sharedFindings(rl)
	if err != nil {
		return nil, err
	}
	r.PG = f
	r.Phases = append(r.Phases, f.phases(c.cfg.Shared)...)
	for _, o := range f.Outages {
		switch o.kind {
		case outageStop:
			r.Restarts++
		case outageRefuse:
			r.Refusals++
		case outageCut:
			r.CutOutages++
		}
		r.ConnsCut += o.cut
	}

	// What every attempt inserted, and what its handler returned.
	var inserts []txInsert
	handled := map[string]event.WorkerEvent{} // by owner: one handler call per claim
	wentOn := map[string]bool{}               // by owner: held, and went on without the campaign's answer
	panicked := map[string]bool{}             // by owner: panicked after the insert
	for _, p := range procs {
		err := event.ReadLines(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.events", p.id)), func(e event.WorkerEvent) {
			switch e.Ev {
			case event.EvInsert:
				inserts = append(inserts, txInsert{run: p.id, ev: e})
			case event.EvInTx:
				if e.Err == "" {
					r.InTxHolds++
				} else {
					wentOn[e.Owner] = true
				}
			case event.EvHandled:
				handled[e.Owner] = e
				if e.Session != "" {
					switch {
					case strings.HasPrefix(e.Session, event.SessionUnknown):
					case strings.HasPrefix(e.Session, "idle in transaction"):
						r.PanicSessionsRead++
						r.PanicTxLeft++
						detail("%s: run %d's handler panicked, and its transaction's session was still %s after the handler returned (%s)", e.Key, p.id, e.Session, e.Owner)
					default:
						r.PanicSessionsRead++
					}
				}
			case event.EvPanic:
				r.Panics++
				panicked[e.Owner] = true
			}
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(inserts, func(i, j int) bool { return inserts[i].ev.T < inserts[j].ev.T })

	// The database: the effects table and the ledger's records, straight,
	// not through the proxy.
	direct := pgURL(c.proxy.targetAddr())
	rows, err := c.readEffects(ctx, direct)
	if err != nil {
		return nil, fmt.Errorf("read the effects table: %w", err)
	}
	r.EffectRows = len(rows)
	rowsByKey := map[string][]txRow{}
	rowByOwner := map[string]txRow{}
	for _, row := range rows {
		rowsByKey[row.key] = append(rowsByKey[row.key], row)
		if _, dup := rowByOwner[row.owner]; dup {
			detail("%s: two rows of one attempt (%s)", row.key, row.owner)
		}
		rowByOwner[row.owner] = row
	}
	l, err := postgres.Open(ctx, postgres.Options{URL: direct, Table: sharedTable})
	if err != nil {
		return nil, fmt.Errorf("open the ledger for the audit: %w", err)
	}
	defer l.Close()
	records := map[string]ledger.Record{}
	if err := l.ForEach(ctx, ledger.Filter{}, func(rec ledger.Record) error {
		records[rec.Key] = rec
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}

	// The queues.
	dlq, left, err := c.drainQueue(ctx, c.dlq, drainWait)
	if err != nil {
		return nil, err
	}
	if left > 0 {
		c.note("%d messages of the dead-letter queue could not be drained for the audit within %v", left, drainWait)
	}
	r.DLQMessages = len(dlq)
	queued, left, err := c.drainQueue(ctx, c.queue, drainVisibility)
	if err != nil {
		return nil, err
	}
	if left > 0 {
		c.note("%d messages of the queue could not be drained for the audit within %v", left, drainVisibility)
	}
	c.logf("dead-letter queue: %d messages; queue: %d messages left", len(dlq), len(queued))
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
	dlqByBody := map[string][]queuedMsg{}
	dlqTags, queuedTags := map[string]bool{}, map[string]bool{}
	queuedByBody := map[string]bool{}
	for _, d := range dlq {
		dlqByBody[d.body] = append(dlqByBody[d.body], d)
		dlqTags[d.tag] = true
	}
	for _, q := range queued {
		queuedTags[q.tag] = true
		queuedByBody[q.body] = true
	}
	hasReason := func(ms []queuedMsg, prefix string) bool {
		for _, m := range ms {
			if strings.HasPrefix(m.reason, prefix) {
				return true
			}
		}
		return false
	}

	// Every operation: complete with exactly one row, of its completing
	// attempt and its payload, or not complete with none.
	for _, o := range wl.ops {
		rec, ok := records[o.id]
		complete := ok && rec.State == ledger.StateComplete
		state := "absent"
		if ok {
			state = rec.State.String()
		}
		if complete {
			r.OpsComplete++
		}
		rs := rowsByKey[o.id]
		switch {
		case len(rs) > 1:
			r.EffectsTwice += len(rs) - 1
			var who []string
			for _, row := range rs {
				who = append(who, fmt.Sprintf("run %d attempt %d (%s, row %d)", row.run, row.attempt, row.owner, row.seq))
			}
			detail("%s: %d effect rows, ledger %s (owner %s): %s", o.id, len(rs), state, rec.Owner, strings.Join(who, "; "))
		case complete && len(rs) == 0:
			r.AckNotDone++
			detail("%s: complete in the ledger (owner %s) without an effect row", o.id, rec.Owner)
		case !complete && len(rs) > 0:
			r.RowWithoutCompletion++
			detail("%s: an effect row (run %d, %s) but the ledger says %s", o.id, rs[0].run, rs[0].owner, state)
		}
		if complete && len(rs) > 0 {
			mine := false
			for _, row := range rs {
				if row.owner == rec.Owner {
					mine = true
				}
			}
			if !mine {
				r.RowOfAnotherAttempt++
				detail("%s: complete under %s, its row is of %s (run %d)", o.id, rec.Owner, rs[0].owner, rs[0].run)
			}
		}
		winner := o.body
		if ok && o.class == classConflict && hex.EncodeToString(rec.Fingerprint) == sha256Hex(o.bodyB) {
			winner = o.bodyB
		}
		switch o.class {
		case classNormal, classTransient, classConflict, classSlow:
			r.ExpectComplete++
			if complete && len(rs) == 1 {
				r.Completed++
			}
			own := dlqByBody[winner]
			for _, d := range own {
				if d.reason != "" {
					r.DLQWrongReason++
					detail("%s: expected to complete, dead-lettered by sqsonce: %s", o.id, d.reason)
					break
				}
			}
			if !complete {
				switch {
				case len(own) > 0:
					r.DLQBeforeComplete++
					detail("%s (%s): dead-lettered by SQS's redrive before completing (info): ledger %s", o.id, o.class, state)
				case queuedByBody[winner]:
					detail("%s: not complete, still on the queue (ledger %s)", o.id, state)
				default:
					r.Lost++
					detail("%s: lost: ledger %s, %d rows, not in the dead-letter queue nor on the queue", o.id, state, len(rs))
				}
			}
			if o.class == classConflict {
				loser := o.bodyB
				if winner == o.bodyB {
					loser = o.body
				}
				r.ExpectDLQ++
				switch {
				case len(dlqByBody[loser]) > 0:
					r.FoundDLQ++
					if !hasReason(dlqByBody[loser], "conflict") {
						detail("%s: the conflicting payload reached the dead-letter queue without the conflict reason", o.id)
					}
				case queuedByBody[loser]:
					detail("%s: the conflicting payload is still on the queue", o.id)
				default:
					r.Lost++
					detail("%s: the conflicting payload is not in the dead-letter queue", o.id)
				}
			}
		case classPermanent:
			r.ExpectDLQ++
			if complete {
				r.AckNotDone++
				detail("%s: a permanent failure recorded complete", o.id)
			}
			if len(dlqByBody[o.body]) > 0 {
				r.FoundDLQ++
			} else {
				r.Lost++
				detail("%s: permanent failure not in the dead-letter queue (ledger %s, %d rows)", o.id, state, len(rs))
			}
		}
	}
	for _, k := range wl.keyless {
		r.ExpectDLQ++
		if len(dlqByBody[k.body]) > 0 {
			r.FoundDLQ++
		} else {
			r.Lost++
			detail("keyless message (%s) %q: not in the dead-letter queue", k.why, k.body)
		}
	}
	for key, rs := range rowsByKey {
		if wl.byID[key] == nil {
			detail("%q: %d effect rows of a key the workload does not have", key, len(rs))
		}
	}

	// Every message sent: done, in a queue, or a finding.
	for tag, body := range snd.sentTags() {
		r.Messages++
		switch {
		case dlqTags[tag]:
			r.MsgDLQ++
		case queuedTags[tag]:
			r.MsgQueued++
		default:
			id := idOf(body)
			rec, ok := records[id]
			done := false
			for _, row := range rowsByKey[id] {
				done = done || (ok && rec.State == ledger.StateComplete && row.hash == sha256Hex(body))
			}
			if done {
				r.MsgDone++
				continue
			}
			r.MsgLost++
			r.AckNotDone++
			detail("message %s (%s): gone from the queues, but no effect row of its payload (ledger %v)", tag, body, func() string {
				if !ok {
					return "absent"
				}
				return rec.State.String()
			}())
		}
	}

	// Every attempt that inserted its row: committed, or rolled back, and
	// why; the handler told the worker it committed only if it did; it ran
	// only the payload its operation was claimed with.
	inTxByOwner := map[string]inTxKill{}
	for _, k := range kills {
		inTxByOwner[k.owner] = k
	}
	lost := c.proxy.lostCommits()
	lostRequest := map[string]bool{} // by owner
	lostOwner := make([]string, len(lost))
	for i, lc := range lost {
		// The attempt whose commit it was: the claim whose completion
		// went with it, as the proxy read it from the completion's Bind.
		lostOwner[i] = lc.Owner
		if lostOwner[i] == "" {
			c.note("the proxy lost a commit of %s at %s, and read no completion's owner before it", lc.Client, lc.T.Format("15:04:05.000"))
		} else if !lc.Answered {
			lostRequest[lostOwner[i]] = true
		}
	}
	for _, in := range inserts {
		r.Attempts++
		e := in.ev
		batched := e.Client == batchClient
		if batched {
			r.Batched++
		}
		h, told := handled[e.Owner]
		if rec, ok := records[e.Key]; ok && e.Hash != hex.EncodeToString(rec.Fingerprint) {
			r.ConflictRan++
			detail("%s: run %d ran a payload (%s) other than the one the operation was claimed with", e.Key, in.run, e.Hash[:16])
		}
		if wl.byID[e.Key] == nil {
			r.KeylessRan++
		}
		if _, ok := rowByOwner[e.Owner]; ok {
			r.Committed++
			if batched {
				r.BatchedCommitted++
			}
			if panicked[e.Owner] {
				r.PanicCommitted++
				detail("%s: run %d's handler panicked after its insert, and its row committed (%s)", e.Key, in.run, e.Owner)
			}
			if told && h.Err != "" {
				r.CommittedToldFailed++
			}
			continue
		}
		r.RolledBack++
		if told && h.Err == "" {
			r.ToldCommittedNotCommitted++
			detail("%s: run %d's handler returned success (%s), its row did not commit", e.Key, in.run, e.Owner)
		}
		r.RolledBackBy[rollbackCause(e.Owner, h, told, inTxByOwner, lostRequest, rl.hist.ends[in.run])]++
	}
	for _, k := range kills {
		if wentOn[k.owner] {
			// It stopped waiting for the answer (its context ended):
			// the kill came after it left the hold, not inside it.
			r.InTxMissed++
			continue
		}
		r.InTxKills++
		if row, ok := rowByOwner[k.owner]; ok {
			r.InTxCommitted++
			detail("%s: run %d was killed inside its transaction, and its row committed (row %d)", k.key, k.run, row.seq)
		}
		if _, ok := handled[k.owner]; ok {
			c.note("run %d was killed inside the transaction of %s, yet its handler returned", k.run, k.key)
		}
	}
	for i, lc := range lost {
		owner := lostOwner[i]
		if owner == "" {
			continue
		}
		_, committed := rowByOwner[owner]
		h, told := handled[owner]
		if lc.Answered {
			r.LostAnswers++
			if !committed {
				r.LostAnswerMissing++
				detail("the server answered the commit of %s (connection %s), and its row is not in the table", owner, lc.Client)
			}
			switch {
			case !told:
				r.LostUnresolved++
			case h.Err == "":
				r.ResolvedCommitted++
			default:
				r.AnsweredToldFailed++
			}
			continue
		}
		r.LostRequests++
		if committed {
			r.LostRequestCommitted++
			detail("the commit of %s (connection %s) never reached the server, and its row is in the table", owner, lc.Client)
		}
		switch {
		case !told:
			r.LostUnresolved++
		case h.Err != "":
			r.ResolvedNotCommitted++
		}
	}
	c.mu.Lock()
	r.Notes = append(r.Notes, c.notes...)
	c.mu.Unlock()
	for _, d := range r.Details {
		fmt.Fprintln(c.log, "detail: tx:", d)
	}
	return r, nil
}

// rollbackCause says why an attempt's row did not commit, from what its
// handler returned (h, when told), the kills inside transactions, the
// commits the proxy lost and how its run ended.
func rollbackCause(owner string, h event.WorkerEvent, told bool, inTx map[string]inTxKill, lostRequest map[string]bool, end string) string {
	switch {
	case lostRequest[owner]:
		return rbRequest
	case told && strings.HasPrefix(h.Err, event.HandlerPanicked):
		return rbPanicked
	case !told:
		if _, ok := inTx[owner]; ok {
			return rbInTx
		}
		switch end {
		case endKill, endWindowA, endWindowB, endInTx, endInHandler:
			return rbKilled
		}
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

// readEffects reads every row of the effects table.
func (c *campaign) readEffects(ctx context.Context, url string) ([]txRow, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT key, body_sha256, owner, client, run, attempt, seq FROM `+pgx.Identifier{c.effects}.Sanitize())
	if err != nil {
		return nil, err
	}
	var out []txRow
	var row txRow
	_, err = pgx.ForEachRow(rows, []any{&row.key, &row.hash, &row.owner, &row.client, &row.run, &row.attempt, &row.seq}, func() error {
		out = append(out, row)
		return nil
	})
	return out, err
}

// print writes the transactional campaign's rows of the report table.
func (r *txReport) print(row func(name, value string), must func(name string, n int)) {
	row("transactional campaign", fmt.Sprintf("%d workers at once, each with a pgtx handler whose effect is a row it inserts into %s in the transaction of the operation's completion; one standard queue (maxReceiveCount %d) and one PostgreSQL database, through a TCP proxy", r.Workers, txEffectsTable, maxReceiveCount))
	sub := func(name, value string) { row("  "+name, value) }
	zero := func(name string, n int) { must("tx: "+name, n) }
	sub("time taken", r.Elapsed.Round(time.Second).String())
	sub("deliveries sent", fmt.Sprintf("%d acknowledged to the sender (%d planned), %d accepted by the server: %d extra copies from %d lost send acknowledgements",
		r.Sent, r.Planned, r.Accepted, r.Accepted-r.Sent, r.SenderLostAcks))
	sub("operations", fmt.Sprintf("%d: %d normal, %d transient (fail 1-2 times after the insert), %d slow (5.5-6.5 s in the transaction), %d permanent (after the insert), %d conflicting; %d resent after done; + %d keyless messages",
		r.Ops[classNormal]+r.Ops[classTransient]+r.Ops[classSlow]+r.Ops[classPermanent]+r.Ops[classConflict],
		r.Ops[classNormal], r.Ops[classTransient], r.Ops[classSlow], r.Ops[classPermanent], r.Ops[classConflict], r.LateResends, r.Keyless))
	sub("faults injected (worker SQS calls)", fmt.Sprintf("%s  (total %d)", kindList(r.Faults), sum(r.Faults)))
	sub("worker runs", fmt.Sprintf("%d: %d kills (%d inside the transaction, between the insert and the commit; %d window a, after the commit, before the worker's own completion; %d window b; %d random), %d SIGTERM drains (exit 0; %d with a second SIGTERM), %d refused starts, %d failed",
		r.Runs, r.Kills, r.Ends[endInTx], r.Ends[endWindowA], r.Ends[endWindowB], r.Ends[endKill], r.Ends[endTerm], r.DoubleTerm, r.Ends[endRefused], r.Ends[endFailed]))
	sub("worker counters (summed)", fmt.Sprintf("received %d, claimed %d, completed %d, duplicates suppressed %d, in progress elsewhere %d, retried %d, takeovers %d, lost leases %d, completion not recorded %d, deleted %d",
		r.Stats.Received, r.Stats.Claimed, r.Stats.Completed, r.Stats.Duplicates, r.Stats.InProgressElsewhere, r.Stats.Retried, r.Stats.Takeovers, r.Stats.LeaseLost, r.Stats.CompleteFailed, r.Stats.Deleted))
	sub("database", fmt.Sprintf("stopped hard and restarted %d times, connections refused %d times and cut %d times (%d connections cut); %d commits lost by the proxy, each cutting its connection: %d never reached the server, %d committed and their answer dropped",
		r.Restarts, r.Refusals, r.CutOutages, r.ConnsCut, r.LostRequests+r.LostAnswers, r.LostRequests, r.LostAnswers))
	if pg := r.PG; pg != nil {
		ws, _ := pg.waitSeconds()
		sub("waits of the workers for the database", fmt.Sprintf("%d waits until it answered again, %s s each, and %d until their run ended; %d ledger calls found it unavailable",
			len(pg.Waits), spread(ws), pg.CutShort, pg.Unavail))
	}
	var causes []string
	for _, k := range []string{rbTransient, rbPermanent, rbPanicked, rbInTx, rbKilled, rbRequest, rbCommit, rbRefused, rbStopped, rbOther, rbEnded} {
		if n := r.RolledBackBy[k]; n > 0 {
			causes = append(causes, fmt.Sprintf("%d %s", n, k))
		}
	}
	sub("attempts that inserted their row", fmt.Sprintf("%d: %d committed, %d rolled back (%s); %d committed though the handler was told otherwise (the record decided); %d of them in the Writes form, the insert sent with the completion and the commit in one round trip (%d committed)",
		r.Attempts, r.Committed, r.RolledBack, strings.Join(causes, ", "), r.CommittedToldFailed, r.Batched, r.BatchedCommitted))
	missed := ""
	if r.InTxMissed > 0 {
		missed = fmt.Sprintf(" (and %d kills meant for one came after it went on without the campaign's answer)", r.InTxMissed)
	}
	sub("transactions held open after the insert", fmt.Sprintf("%d, %d of them killed there (SIGKILL)%s", r.InTxHolds, r.InTxKills, missed))
	sub("handlers that panicked after the insert", fmt.Sprintf("%d (each a retryable failure); the session of %d of their transactions read once the handler had returned: %d still inside the transaction", r.Panics, r.PanicSessionsRead, r.PanicTxLeft))
	sub("sessions left inside a transaction after a drain", fmt.Sprintf("%d, counted by %d drained runs once their worker had stopped", r.LeakedSessions, r.LeakChecks))
	sub("lost commits resolved by the record", fmt.Sprintf("answers dropped %d: told committed %d, told not committed %d (the redelivery found it complete); requests lost %d: told not committed %d; %d runs killed before their handler returned",
		r.LostAnswers, r.ResolvedCommitted, r.AnsweredToldFailed, r.LostRequests, r.ResolvedNotCommitted, r.LostUnresolved))
	sub("effect rows", fmt.Sprintf("%d, for %d operations complete in the ledger", r.EffectRows, r.OpsComplete))
	sub("operations completed", fmt.Sprintf("%d of %d expected, each with one row (the rest, %d, moved to the dead-letter queue by SQS after %d receives, not lost)", r.Completed, r.ExpectComplete, r.DLQBeforeComplete, maxReceiveCount))
	sub("in the dead-letter queue", fmt.Sprintf("%d expected, %d found (%d messages)", r.ExpectDLQ, r.FoundDLQ, r.DLQMessages))
	sub("messages sent (each tagged)", fmt.Sprintf("%d: %d done (their operation complete with a row of their payload), %d in the dead-letter queue, %d still on the queue, %d none of these", r.Messages, r.MsgDone, r.MsgDLQ, r.MsgQueued, r.MsgLost))
	zero("operations lost", r.Lost)
	zero("acknowledged but not done (complete or deleted with no effect row)", r.AckNotDone)
	zero("effects applied twice (no window excepted)", r.EffectsTwice)
	zero("effect rows of operations not complete", r.RowWithoutCompletion)
	zero("effect rows of another attempt than the completion's", r.RowOfAnotherAttempt)
	zero("handlers told committed whose row did not commit", r.ToldCommittedNotCommitted)
	zero("rows of attempts killed inside their transaction", r.InTxCommitted)
	zero("rows of attempts that panicked", r.PanicCommitted)
	zero("transactions of panicked handlers left open", r.PanicTxLeft)
	zero("sessions left inside a transaction after a drain", r.LeakedSessions)
	zero("lost commit requests that took effect", r.LostRequestCommitted)
	zero("answered commits whose row is missing", r.LostAnswerMissing)
	zero("conflicting payloads run", r.ConflictRan)
	zero("keyless messages run", r.KeylessRan)
	zero("dead-lettered with a reason, expected to complete", r.DLQWrongReason)
	zero("handler calls after their claim was lost (taken over, released)", r.AfterLoss)
	for _, p := range r.Phases {
		mark := "ok"
		if !p.ok {
			mark = "FAIL"
		}
		sub("phase: "+p.name, mark+": "+p.detail)
	}
	q := "yes"
	if !r.Quiet {
		q = "NO"
	}
	sub("queue empty at the end", q)
	zero("other findings", len(r.Notes))
	for _, n := range r.Notes {
		sub("  finding", strings.SplitN(n, "\n", 2)[0])
	}
}

// checks lists the figures of the transactional campaign that decide the
// verdict.
func (r *txReport) checks() []check {
	var cs []check
	zero := func(name string, n int) {
		cs = append(cs, check{Name: "tx: " + name, Value: fmt.Sprint(n), OK: n == 0})
	}
	zero("operations lost", r.Lost)
	zero("acknowledged but not done", r.AckNotDone)
	zero("messages not accounted for", r.MsgLost)
	zero("effects applied twice", r.EffectsTwice)
	zero("effect rows of operations not complete", r.RowWithoutCompletion)
	zero("effect rows of another attempt than the completion's", r.RowOfAnotherAttempt)
	zero("handlers told committed whose row did not commit", r.ToldCommittedNotCommitted)
	zero("rows of attempts killed inside their transaction", r.InTxCommitted)
	zero("rows of attempts that panicked", r.PanicCommitted)
	zero("transactions of panicked handlers left open", r.PanicTxLeft)
	cs = append(cs, check{Name: "tx: sessions of panicked handlers read", Value: fmt.Sprintf("%d of %d", r.PanicSessionsRead, r.Panics), OK: r.Panics == 0 || r.PanicSessionsRead > 0})
	zero("sessions left inside a transaction after a drain", r.LeakedSessions)
	cs = append(cs, check{Name: "tx: drained runs that counted their sessions", Value: fmt.Sprint(r.LeakChecks), OK: r.LeakChecks > 0})
	zero("lost commit requests that took effect", r.LostRequestCommitted)
	zero("answered commits whose row is missing", r.LostAnswerMissing)
	zero("conflicting payloads run", r.ConflictRan)
	zero("keyless messages run", r.KeylessRan)
	zero("dead-lettered with a reason, expected to complete", r.DLQWrongReason)
	zero("handler calls after their claim was lost", r.AfterLoss)
	cs = append(cs, check{Name: "tx: in the dead-letter queue as expected", Value: fmt.Sprintf("%d of %d", r.FoundDLQ, r.ExpectDLQ), OK: r.FoundDLQ == r.ExpectDLQ})
	for _, p := range r.Phases {
		v := "ok"
		if !p.ok {
			v = "failed: " + p.detail
		}
		cs = append(cs, check{Name: "tx: phase: " + p.name, Value: v, OK: p.ok})
	}
	cs = append(cs, check{Name: "tx: queue empty at the end", Value: fmt.Sprint(r.Quiet), OK: r.Quiet})
	zero("other findings", len(r.Notes))
	return cs
}
