package main

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// history is everything that happened to a campaign, read once its runs
// are over: what was sent (the sender's records), what every worker run
// did (its event log, its counters and how it ended: claimed, run,
// completed, failed, released, lost, deleted, dead-lettered), what the
// downstream executed (or, with transactional handlers, the effect rows
// the database kept), what the faults did (crashes and kills, pauses,
// outages, forgets, replays: in the env), and where everything is at the
// end (the ledger's records, the dead-letter queue and the queue). The
// audit and every campaign's checks read it.
type history struct {
	e       *env
	ops     []*op
	msgs    []*msg                       // every message SQS answered the sender for
	byTag   map[string]*msg              // by event.AttrSend
	execs   map[string][]event.Execution // by key, in the order recorded
	applied map[string]string            // key -> the hash of the payload its effect applied
	all     []runEvent                   // every run's events
	byKey   map[string][]runEvent        // the same by key, each list in time order
	runs    map[int]*runInfo
	crashes map[string]string // run and key -> the window the run crashed in
	records map[string]ledger.Record
	// The messages found at the end in the dead-letter queue and the
	// queue, and their tags.
	dlq, queued    []queuedMsg
	inDLQ, inQueue map[string]bool
	stats          worker.Stats              // summed over runs (killed runs' counters may lag up to 250 ms)
	faults         map[string]map[string]int // the runs' SQS faults, by operation, then kind
	unavailable    int64                     // ledger calls that found a shared ledger unavailable
	undrained      int                       // messages the drains could not get
	windows        []time.Duration           // handler success to durable completion
	claims         *claimHistory
	quiet          bool
}

// runEvent is an event of a worker run.
type runEvent struct {
	run int
	event.WorkerEvent
}

// runInfo is how a run ended, when, and its last counters.
type runInfo struct {
	end                string
	stoppedAt, endedAt time.Time // stoppedAt: when the campaign signalled it (endedAt if it did not)
	counts             event.Counts
}

// queuedMsg is a message found in a queue at the end: its id, tag, body
// and, when sqsonce dead-lettered it, the reason it gave (worker.AttrReason).
type queuedMsg struct{ id, tag, body, reason string }

// history reads the campaign's history.
func (e *env) history(ctx context.Context) (*history, error) {
	h := &history{e: e, ops: e.wl.allOps(), msgs: e.snd.sentMsgs(), byTag: map[string]*msg{}, execs: map[string][]event.Execution{},
		applied: map[string]string{}, byKey: map[string][]runEvent{}, runs: map[int]*runInfo{}, crashes: map[string]string{},
		records: map[string]ledger.Record{}, inDLQ: map[string]bool{}, inQueue: map[string]bool{}, faults: map[string]map[string]int{}, quiet: e.quiet}
	for _, m := range h.msgs {
		h.byTag[m.tag] = m
	}
	e.mu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		r := &runInfo{end: e.endOf(p), counts: e.counts(p.id)}
		p.mu.Lock()
		r.endedAt, r.stoppedAt = p.ended, cmp.Or(p.signaled, p.ended)
		p.mu.Unlock()
		h.runs[p.id] = r
		for op, byKind := range r.counts.Faults {
			if h.faults[op] == nil {
				h.faults[op] = map[string]int{}
			}
			for k, n := range byKind {
				h.faults[op][string(k)] += n
			}
		}
		addStats(&h.stats, r.counts.Stats)
		h.unavailable += r.counts.LedgerErrors
		okAt := map[string]int64{} // key -> when its handler last succeeded
		err := event.ReadLines(filepath.Join(e.runsDir, fmt.Sprintf("run-%d.events", p.id)), func(ev event.WorkerEvent) {
			h.all = append(h.all, runEvent{p.id, ev})
			switch {
			case ev.Ev == event.EvHandled && ev.Err == "":
				okAt[ev.Key] = ev.T
			case ev.Ev == event.EvComplete && ev.Err == "":
				if t, ok := okAt[ev.Key]; ok {
					h.windows = append(h.windows, time.Duration(ev.T-t))
					delete(okAt, ev.Key)
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(h.all, func(i, j int) bool { return h.all[i].T < h.all[j].T })
	for _, ev := range h.all {
		h.byKey[ev.Key] = append(h.byKey[ev.Key], ev)
	}
	if err := event.ReadLines(e.crashLog, func(cr event.Crash) { h.crashes[fmt.Sprint(cr.Run, " ", cr.Key)] = cr.Window }); err != nil {
		return nil, err
	}
	h.claims = newClaimHistory(h.all, e.forgets)

	// What took effect: the downstream's executions, or the effect rows.
	execs := e.world.executions()
	if e.c.System.Tx != nil {
		var err error
		if execs, err = readEffects(ctx, pgURL(e.pg.addr())); err != nil {
			return nil, fmt.Errorf("read the effects table: %w", err)
		}
	}
	for _, x := range execs {
		h.execs[x.Key] = append(h.execs[x.Key], x)
		if x.Effect {
			h.applied[x.Key] = x.BodyHash
		}
	}

	// Where everything is at the end. The workers are stopped: what is in
	// flight comes back within its visibility timeout.
	for _, q := range []struct {
		url  string
		into *[]queuedMsg
		tags map[string]bool
	}{{e.dlq, &h.dlq, h.inDLQ}, {e.queue, &h.queued, h.inQueue}} {
		msgs, left, err := e.drainQueue(ctx, q.url)
		if err != nil {
			return nil, err
		}
		*q.into, h.undrained = msgs, h.undrained+left
		for _, m := range msgs {
			q.tags[m.tag] = true
		}
	}
	var records interface {
		ForEach(context.Context, ledger.Filter, func(ledger.Record) error) error
		Close() error
	}
	var err error
	if e.pg != nil {
		records, err = postgres.Open(ctx, postgres.Options{URL: pgURL(e.pg.addr()), Table: sharedTable})
	} else {
		records, err = ledger.Open(e.ledger, ledger.Options{})
	}
	if err != nil {
		return nil, fmt.Errorf("open the ledger for the audit: %w", err)
	}
	defer records.Close()
	return h, records.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error { h.records[r.Key] = r; return nil })
}

// kind returns every event of kind ev, in time order.
func (h *history) kind(ev string) []runEvent {
	var out []runEvent
	for _, x := range h.all {
		if x.Ev == ev {
			out = append(out, x)
		}
	}
	return out
}

// stateForgottenDone is the final state of a key whose record the campaign
// forgot after a worker had recorded it complete: the operation was
// chosen while it waited, and ran and completed before the command
// removed its record. Its message was then deleted, and nothing runs it
// again: the record stays absent, with the work done.
const stateForgottenDone = "complete, then forgotten by the campaign"

// state is key's state in the ledger at the end.
func (h *history) state(key string) string {
	if r, ok := h.records[key]; ok {
		if r.State == ledger.StateFailed && r.Permanent {
			return "failed permanently"
		}
		return r.State.String()
	}
	for _, f := range h.e.forgets {
		for _, ev := range h.byKey[key] {
			if f.key == key && ev.Ev == event.EvComplete && ev.Err == "" && ev.T <= f.to.UnixNano() {
				return stateForgottenDone
			}
		}
	}
	return "absent"
}

// forgotAfter reports whether the campaign forgot key's record after t
// (Unix ns; the record gone when the command ended): what ran before then
// may differ from the record the next delivery made.
func (h *history) forgotAfter(key string, t int64) bool {
	return slices.ContainsFunc(h.e.forgets, func(f forgetRec) bool { return f.key == key && f.to.UnixNano() > t })
}

// ranAfterForget reports whether m's payload ran to success after the
// campaign began to forget its key's record: once a record is forgotten,
// the next delivery of its key runs, whatever its payload (a conflicting
// payload b after payload a completed and was forgotten).
func (h *history) ranAfterForget(m *msg) bool {
	hash := event.Hash([]byte(m.body()))
	return slices.ContainsFunc(h.execs[m.op.id], func(x event.Execution) bool {
		return x.BodyHash == hash && x.Status == 200 && slices.ContainsFunc(h.e.forgets, func(f forgetRec) bool {
			return f.key == m.op.id && f.from.UnixNano() < x.T
		})
	})
}

// complete reports whether key's operation is recorded complete.
func (h *history) complete(key string) bool {
	st := h.state(key)
	return st == "complete" || st == stateForgottenDone
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
// queue reads empty, waiting up to drainWait for messages in flight to
// come back. It returns the messages and how many it could not get.
func (e *env) drainQueue(ctx context.Context, url string) ([]queuedMsg, int, error) {
	var out []queuedMsg
	seen := map[string]bool{}
	for deadline := time.Now().Add(drainWait); ctx.Err() == nil; {
		res, err := e.admin.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			VisibilityTimeout: int32(drainVisibility / time.Second), MessageAttributeNames: []string{"All"}})
		if err != nil {
			return nil, 0, fmt.Errorf("drain %s: %w", url, err)
		}
		if len(res.Messages) == 0 {
			v, f, err := e.queueCounts(ctx, url)
			if err != nil || v+f == 0 || time.Now().After(deadline) {
				return out, v + f, err
			}
			continue
		}
		var del []types.DeleteMessageBatchRequestEntry
		for i, m := range res.Messages {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				out = append(out, queuedMsg{id, attr(event.AttrSend), aws.ToString(m.Body), attr(worker.AttrReason)})
			}
		}
		if _, err := e.admin.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
			return nil, 0, fmt.Errorf("drain %s: delete: %w", url, err)
		}
	}
	return nil, 0, ctx.Err()
}

// txEffectsTable is the transactional handlers' effects table: one row per
// attempt that inserted one and committed. No constraint keeps a key from
// having two: what must keep it is the transaction.
const txEffectsTable = "chaos_effects"

// createEffects creates the effects table, straight on the database.
func createEffects(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CREATE TABLE `+txEffectsTable+` (key text NOT NULL, body_hash text NOT NULL, body text NOT NULL,
		run int NOT NULL, owner text NOT NULL, attempt int NOT NULL, seq bigint NOT NULL, client text NOT NULL,
		inserted_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	if err != nil {
		return fmt.Errorf("create the effects table: %w", err)
	}
	return nil
}

// readEffects reads every row of the effects table, each as an execution
// that applied its operation's effect (Seq: the row's in its run, Client
// in MessageID).
func readEffects(ctx context.Context, url string) ([]event.Execution, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT key, body_hash, owner, client, run, attempt, seq, inserted_at FROM `+txEffectsTable+` ORDER BY inserted_at`)
	if err != nil {
		return nil, err
	}
	out, x := []event.Execution(nil), event.Execution{}
	attempt, at := 0, time.Time{}
	_, err = pgx.ForEachRow(rows, []any{&x.Key, &x.BodyHash, &x.Owner, &x.MessageID, &x.Run, &attempt, &x.Seq, &at}, func() error {
		x.BodyID, x.Attempt, x.T, x.Status, x.Effect = x.Key, strconv.Itoa(attempt), at.UnixNano(), 200, true
		out = append(out, x)
		return nil
	})
	return out, err
}

// addStats adds every counter of s to dst.
func addStats(dst *worker.Stats, s worker.Stats) {
	d, v := reflect.ValueOf(dst).Elem(), reflect.ValueOf(s)
	for i := range d.NumField() {
		d.Field(i).SetInt(d.Field(i).Int() + v.Field(i).Int())
	}
}
