package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// AttrReplays is the numeric message attribute that counts how many times a
// message was replayed from a dead-letter queue.
const AttrReplays = "SqsonceReplays"

// Limits of SQS that replay works within.
const (
	replayBatch         = 10 // messages per receive, send batch, delete batch
	replayMaxAttributes = 10 // message attributes per message
	replayMaxVisibility = 12 * time.Hour
	replayWaitSeconds   = 1 // each receive waits this long for messages
	replayEmptyReceives = 2 // a mover stops after this many empty receives in a row
	replayMaxErrors     = 3 // a mover gives up after this many failed receives in a row
	replayCallTimeout   = 30 * time.Second
)

const replaySynopsis = `Usage: sqsonce replay [--config FILE] [flags]

Move messages from the dead-letter queue back to the queue, so that the
worker runs their operations again. Each message is received, sent to the
target, and deleted from the source only after the send succeeded. Its body
and message attributes are kept, and the numeric attribute SqsonceReplays
counts its replays (SQS allows 10 message attributes: to make room for it,
SqsonceReason is dropped first, then SqsonceSourceMessageId).

The ledger decides what moves; while a worker runs, replay reaches the
ledger through the worker's socket (otherwise it opens the file, and a
worker that starts meanwhile cannot until replay ends):
  complete     left in the source: the work was done (--drop-complete deletes it)
  failed       reset, permanent or not, so that the worker takes it again; moved
  in_progress  moved: the worker waits for the running claim's lease
  absent       moved
Messages without an operation key are left unless --include-keyless.

Messages that are not moved stay in the source. They are held invisible
while replay runs (--hold), so that none is received twice, and made
visible again at the end. On a FIFO source such a message holds back the
rest of its message group until then.

On a FIFO target, MessageGroupId is kept and MessageDeduplicationId is the
operation key. SQS drops a send whose deduplication id was used on that
queue in the last 5 minutes: a message dead-lettered less than 5 minutes
after it was sent cannot be replayed yet. Replay notices when SQS answers
with the original message's id, leaves the message in place and counts it
as failed; run replay again later.

The first SIGINT or SIGTERM stops receiving, finishes the moves in hand,
makes every other message visible again, prints the summary and exits 1. A
second signal stops at once; messages in hand come back after --hold.
Delivery stays at least once: if replay dies between a send and its delete,
the message is in both queues, and the ledger answers the second copy as a
duplicate.

The summary ("rate" is measured up to the last move) goes to standard
output; a progress line is drawn on standard error when it is a terminal.
Exit status: 0 when every message was moved or deliberately left, 1 when
some could not be moved, on an error or an interruption, 2 on bad usage.`

// replayOptions are the flags of sqsonce replay.
type replayOptions struct {
	from, to       string
	max            int
	maxReplays     int
	rate           float64
	keyGlob        string
	since, until   replayTime
	dropComplete   bool
	includeKeyless bool
	dryRun         bool
	hold           time.Duration
	concurrency    int
	json           bool
}

// replayTime is a --since or --until flag: an RFC 3339 time, or a duration
// meaning that long before now.
type replayTime struct{ t time.Time }

func (v *replayTime) String() string {
	if v == nil || v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339)
}

func (v *replayTime) Set(s string) error {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		v.t = t
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration ago such as 36h")
	}
	v.t = time.Now().Add(-d)
	return nil
}

// replayCommand is `sqsonce replay`: dead letters back to the queue.
func (m *Main) replayCommand(ctx context.Context, args []string) error {
	var c commonFlags
	var o replayOptions
	fs := m.flagSet("replay", replaySynopsis, &c)
	fs.StringVar(&o.from, "from", "", "source queue `URL` (default: the dead-letter queue named by the redrive policy of queue.url)")
	fs.StringVar(&o.to, "to", "", "target queue `URL` (default: queue.url)")
	fs.IntVar(&o.max, "max", 0, "move at most `N` messages (0: no limit)")
	fs.IntVar(&o.maxReplays, "max-replays", 3, "leave a message already replayed `N` times (its SqsonceReplays attribute)")
	fs.Float64Var(&o.rate, "rate", 0, "move at most `N` messages a second (0: no limit)")
	fs.StringVar(&o.keyGlob, "key", "", "move only messages whose operation key matches `GLOB` (path.Match: * and ? do not match /); keyless messages never match")
	fs.Var(&o.since, "since", "move only messages sent at or after `TIME`: RFC 3339, or a duration ago such as 24h (SentTimestamp: when the message entered the queue it is in)")
	fs.Var(&o.until, "until", "move only messages sent before `TIME`: RFC 3339, or a duration ago")
	fs.BoolVar(&o.dropComplete, "drop-complete", false, "delete messages whose operation is complete instead of leaving them")
	fs.BoolVar(&o.includeKeyless, "include-keyless", false, "move messages without an operation key as they are (the worker dead-letters them again unless its key configuration changed)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "report what would move; send, delete and reset nothing")
	fs.DurationVar(&o.hold, "hold", 5*time.Minute, "how long received messages stay invisible while replay runs: longer than the run (1s to 12h)")
	fs.IntVar(&o.concurrency, "concurrency", 8, "movers working at once, each receiving, sending and deleting 10 messages at a time (1 to 64)")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object")
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if err := o.validate(fs.Args()); err != nil {
		return err
	}
	keyOf, err := worker.MessageKeyFunc(keyConfig(cfg.Key))
	if err != nil {
		return fmt.Errorf("key: %v: %w", err, ErrInvalidConfig)
	}
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	if o.from == "" {
		q, err := worker.InspectQueue(ctx, client, cfg.Queue.URL)
		if err != nil {
			return err
		}
		if q.DLQURL == "" {
			return fmt.Errorf("queue %s has no redrive policy, so no dead-letter queue to replay from: give --from", cfg.Queue.URL)
		}
		o.from = q.DLQURL
	}
	if o.to == "" {
		o.to = cfg.Queue.URL
	}
	if o.from == o.to {
		return fmt.Errorf("--from and --to are the same queue %s: %w", o.from, errUsage)
	}
	source, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       &o.from,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return fmt.Errorf("source queue %s: %w", o.from, err)
	}
	backlog, _ := strconv.Atoi(source.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	target, err := worker.InspectQueue(ctx, client, o.to)
	if err != nil {
		return fmt.Errorf("target queue: %w", err)
	}
	led, err := openLedgerAccess(ctx, cfg.Ledger)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer led.Close()

	r := newReplayer(o, client, target.FIFO, keyOf, led, log)
	log.Info("replay starting", "from", o.from, "to", o.to, "messages", backlog, "ledger", led.Via(), "dry_run", o.dryRun)
	sum, err := r.run(ctx, m.Signals, m.Stderr, backlog)
	if perr := m.printReplaySummary(sum, o); perr != nil && err == nil {
		err = perr
	}
	return err
}

func (o *replayOptions) validate(rest []string) error {
	var problems []string
	if len(rest) > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %q", rest))
	}
	if o.max < 0 {
		problems = append(problems, fmt.Sprintf("--max %d: want 0 (no limit) or more", o.max))
	}
	if o.maxReplays < 1 {
		problems = append(problems, fmt.Sprintf("--max-replays %d: want 1 or more", o.maxReplays))
	}
	if o.rate < 0 || o.rate != o.rate {
		problems = append(problems, fmt.Sprintf("--rate %v: want 0 (no limit) or more", o.rate))
	}
	if o.keyGlob != "" {
		if _, err := path.Match(o.keyGlob, ""); err != nil {
			problems = append(problems, fmt.Sprintf("--key %q: %v", o.keyGlob, err))
		}
	}
	if !o.since.t.IsZero() && !o.until.t.IsZero() && !o.since.t.Before(o.until.t) {
		problems = append(problems, fmt.Sprintf("--since %s is not before --until %s", o.since.String(), o.until.String()))
	}
	if o.hold < time.Second || o.hold > replayMaxVisibility {
		problems = append(problems, fmt.Sprintf("--hold %v: want 1s to 12h", o.hold))
	}
	if o.concurrency < 1 || o.concurrency > 64 {
		problems = append(problems, fmt.Sprintf("--concurrency %d: want 1 to 64", o.concurrency))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(problems, "; "), errUsage)
	}
	return nil
}

// replaySummary is what a replay did, printed at its end.
type replaySummary struct {
	Moved             int64   `json:"moved"`
	DroppedComplete   int64   `json:"dropped_complete"`
	SkippedComplete   int64   `json:"skipped_complete"`
	SkippedKeyless    int64   `json:"skipped_keyless"`
	SkippedMaxReplays int64   `json:"skipped_max_replays"`
	SkippedFiltered   int64   `json:"skipped_filtered"`
	Reset             int64   `json:"reset"`
	Failed            int64   `json:"failed"`
	DeleteFailed      int64   `json:"delete_failed"` // sent, but still in the source too
	Seconds           float64 `json:"seconds"`
	Rate              float64 `json:"rate"` // moved per second, up to the last move
	DryRun            bool    `json:"dry_run"`
	Interrupted       bool    `json:"interrupted"`
}

func (s replaySummary) skipped() int64 {
	return s.SkippedComplete + s.SkippedKeyless + s.SkippedMaxReplays + s.SkippedFiltered
}

func (m *Main) printReplaySummary(s replaySummary, o replayOptions) error {
	if o.json {
		return json.NewEncoder(m.Stdout).Encode(s)
	}
	verb, dropVerb, resetVerb := "moved", "dropped", "reset"
	if s.DryRun {
		verb, dropVerb, resetVerb = "dry run: would move", "would drop", "would reset"
	}
	line := fmt.Sprintf("%s %d messages from %s to %s in %.1fs (%.0f/s); left %d (complete %d, keyless %d, max replays %d, filtered %d); %s %d complete; %s %d; failed %d",
		verb, s.Moved, o.from, o.to, s.Seconds, s.Rate, s.skipped(), s.SkippedComplete, s.SkippedKeyless, s.SkippedMaxReplays,
		s.SkippedFiltered, dropVerb, s.DroppedComplete, resetVerb, s.Reset, s.Failed)
	if s.DeleteFailed > 0 {
		line += fmt.Sprintf("; %d sent but not deleted", s.DeleteFailed)
	}
	if s.Interrupted {
		line += "; interrupted"
	}
	_, err := fmt.Fprintln(m.Stdout, line)
	return err
}

// replayState is where a received message stands in this run.
type replayState uint8

const (
	replayInHand replayState = iota // a mover is deciding or moving it
	replayHeld                      // left in the source: made visible again at the end
	replayGone                      // deleted from the source (moved or dropped), or being deleted
)

// replayTracked is a message received in this run, by MessageId.
type replayTracked struct {
	state   replayState
	receipt string // the newest receipt handle: only it is sure to work
}

// replayer moves messages with several movers at once.
type replayer struct {
	opt    replayOptions
	sqs    *sqs.Client
	toFIFO bool
	keyOf  func(types.Message) (string, error)
	led    ledgerAccess
	log    *slog.Logger
	limit  *replayBucket // nil without --rate
	hold   int32         // visibility timeout of receives, seconds

	ctx         context.Context // ends on a second signal: abandon calls in flight
	stop        chan struct{}   // closed to stop receiving
	stopOnce    sync.Once
	interrupted atomic.Bool

	mu          sync.Mutex
	seen        map[string]*replayTracked
	budget      int // moves left to reserve under --max
	outstanding int // moves reserved by movers and not settled yet
	err         error

	start    time.Time
	lastMove atomic.Int64 // nanoseconds after start
	n        struct {
		moved, droppedComplete, skippedComplete, skippedKeyless, skippedMaxReplays,
		skippedFiltered, reset, failed, deleteFailed atomic.Int64
	}
}

func newReplayer(o replayOptions, c *sqs.Client, toFIFO bool, keyOf func(types.Message) (string, error), led ledgerAccess, log *slog.Logger) *replayer {
	r := &replayer{
		opt: o, sqs: c, toFIFO: toFIFO, keyOf: keyOf, led: led, log: log,
		hold:   int32((o.hold + time.Second - 1) / time.Second),
		stop:   make(chan struct{}),
		seen:   make(map[string]*replayTracked),
		budget: o.max,
	}
	if o.rate > 0 && !o.dryRun {
		r.limit = newReplayBucket(o.rate)
	}
	return r
}

// run moves messages until the source runs dry, --max is reached, or a
// signal comes; then it makes every message left in the source visible
// again and returns the summary.
func (r *replayer) run(parent context.Context, signals <-chan os.Signal, stderr io.Writer, backlog int) (replaySummary, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	r.ctx = ctx
	r.start = time.Now()

	done := make(chan struct{})
	var background sync.WaitGroup
	background.Go(func() {
		select {
		case sig := <-signals:
			r.log.Warn("stop signal: finishing the moves in hand and giving the other messages back", "signal", sig.String())
			r.interrupted.Store(true)
			r.halt()
		case <-done:
			return
		}
		select {
		case sig := <-signals:
			r.log.Warn("second stop signal: stopping at once; messages in hand come back after --hold", "signal", sig.String())
			cancel()
		case <-done:
		}
	})
	if isTerminal(stderr) {
		background.Go(func() { r.progress(stderr, backlog, done) })
	}

	var movers sync.WaitGroup
	for range r.opt.concurrency {
		movers.Go(r.mover)
	}
	movers.Wait()
	released := r.release()
	close(done)
	background.Wait()

	s := r.summary()
	if released > 0 {
		r.log.Info("made the messages left in the source visible again", "messages", released)
	}
	if r.opt.dryRun {
		r.log.Info("dry run: nothing was sent, deleted or reset")
	}
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	switch {
	case err != nil:
	case s.Interrupted:
		err = fmt.Errorf("interrupted: %d messages moved; the others are still in %s", s.Moved, r.opt.from)
	case s.Failed > 0:
		err = fmt.Errorf("%d messages could not be moved and are still in %s (see the log)", s.Failed, r.opt.from)
	case s.DeleteFailed > 0:
		err = fmt.Errorf("%d messages were sent to %s but could not be deleted from %s: they are in both (the ledger answers the second copy as a duplicate)", s.DeleteFailed, r.opt.to, r.opt.from)
	}
	return s, err
}

func (r *replayer) summary() replaySummary {
	secs := time.Since(r.start).Seconds()
	s := replaySummary{
		Moved: r.n.moved.Load(), DroppedComplete: r.n.droppedComplete.Load(), SkippedComplete: r.n.skippedComplete.Load(),
		SkippedKeyless: r.n.skippedKeyless.Load(), SkippedMaxReplays: r.n.skippedMaxReplays.Load(),
		SkippedFiltered: r.n.skippedFiltered.Load(), Reset: r.n.reset.Load(), Failed: r.n.failed.Load(),
		DeleteFailed: r.n.deleteFailed.Load(), Seconds: replayRound(secs),
		DryRun: r.opt.dryRun, Interrupted: r.interrupted.Load(),
	}
	if active := time.Duration(r.lastMove.Load()).Seconds(); active > 0 {
		s.Rate = replayRound(float64(s.Moved) / active)
	}
	return s
}

func replayRound(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 3, 64), 64)
	return v
}

// halt stops receiving.
func (r *replayer) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *replayer) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return r.ctx.Err() != nil
	}
}

// fail records the first error that ends the run, and stops it.
func (r *replayer) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.halt()
}

// reserve takes up to one batch of moves from the --max budget. It returns
// 0 and done when the budget is spent, and 0 alone while other movers hold
// the rest.
func (r *replayer) reserve() (n int, done bool) {
	if r.opt.max == 0 {
		return replayBatch, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.budget == 0 {
		return 0, r.outstanding == 0
	}
	n = min(replayBatch, r.budget)
	r.budget -= n
	r.outstanding += n
	return n, false
}

// settle gives back the part of a reservation of n that did not move.
func (r *replayer) settle(n, moved int) {
	if r.opt.max == 0 {
		return
	}
	r.mu.Lock()
	r.outstanding -= n
	r.budget += n - moved
	r.mu.Unlock()
}

// mover receives, decides, sends and deletes, one batch at a time.
func (r *replayer) mover() {
	empty, errs := 0, 0
	for !r.stopped() {
		n, done := r.reserve()
		if done {
			return
		}
		if n == 0 {
			r.pause(20 * time.Millisecond)
			continue
		}
		out, err := r.sqs.ReceiveMessage(r.ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    &r.opt.from,
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             replayWaitSeconds,
			VisibilityTimeout:           r.hold,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			r.settle(n, 0)
			if r.ctx.Err() != nil {
				return
			}
			if errs++; errs >= replayMaxErrors {
				r.fail(fmt.Errorf("receive from %s: %w", r.opt.from, err))
				return
			}
			r.log.Warn("receive failed; trying again", "error", err)
			r.pause(time.Duration(errs) * time.Second)
			continue
		}
		errs = 0
		fresh, moved := r.handle(out.Messages)
		r.settle(n, moved)
		if fresh > 0 {
			empty = 0
		} else if empty++; empty >= replayEmptyReceives {
			return
		}
	}
}

// pause sleeps for d or until the run stops.
func (r *replayer) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.stop:
	case <-r.ctx.Done():
	}
}

// replayItem is a message in hand with what was decided for it.
type replayItem struct {
	msg     types.Message
	id      string
	key     string
	keyErr  error
	replays int
}

// handle takes one receive's messages: it recognises those seen before in
// this run, decides the fate of the others, and moves those to be moved.
// It returns how many messages were new and how many were moved.
func (r *replayer) handle(msgs []types.Message) (fresh, moved int) {
	var mine []*replayItem
	var again []types.Message // deleted earlier in this run, yet received again
	r.mu.Lock()
	for _, m := range msgs {
		id := aws.ToString(m.MessageId)
		t, ok := r.seen[id]
		if !ok {
			r.seen[id] = &replayTracked{state: replayInHand, receipt: aws.ToString(m.ReceiptHandle)}
			mine = append(mine, &replayItem{msg: m, id: id})
			continue
		}
		// Its visibility ran out and it came back: not counted again.
		// Whoever holds it uses the newest receipt handle from now on.
		r.log.Debug("received again after --hold ran out: not counted again", "message_id", id)
		t.receipt = aws.ToString(m.ReceiptHandle)
		if t.state == replayGone {
			again = append(again, m)
		}
	}
	r.mu.Unlock()
	if len(again) > 0 {
		// The earlier delete used a receipt handle that had gone stale;
		// the message is already in the target (or was dropped).
		r.log.Debug("deleting messages again that came back after they were moved", "messages", len(again))
		r.deleteBatch(again)
	}
	if len(mine) == 0 {
		return 0, 0
	}
	if r.stopped() {
		r.holdItems(mine)
		return len(mine), 0
	}

	var send, drop []*replayItem
	for _, it := range mine {
		switch r.decide(it) {
		case replaySend:
			send = append(send, it)
		case replayDrop:
			drop = append(drop, it)
		default:
			r.holdItems([]*replayItem{it})
		}
	}
	if r.opt.dryRun {
		for _, it := range send {
			r.log.Info("would move", "message_id", it.id, "key", it.key, "replays", it.replays)
		}
		for _, it := range drop {
			r.log.Info("would drop: operation complete", "message_id", it.id, "key", it.key)
		}
		r.n.moved.Add(int64(len(send)))
		r.n.droppedComplete.Add(int64(len(drop)))
		if len(send) > 0 {
			r.lastMove.Store(int64(time.Since(r.start)))
		}
		r.holdItems(send)
		r.holdItems(drop)
		return len(mine), len(send)
	}
	if len(send) > 0 && r.limit != nil && !r.limit.wait(len(send), r.stop, r.ctx.Done()) {
		r.holdItems(send)
		r.holdItems(drop)
		return len(mine), 0
	}
	sent := r.send(send)
	r.deleteItems(sent, drop)
	return len(mine), len(sent)
}

// replayDecision is what becomes of a message.
type replayDecision uint8

const (
	replaySend replayDecision = iota
	replayDrop
	replayLeave
)

// decide applies the filters, the ledger and --max-replays to a message,
// counts and reports what it leaves, and resets a failed record of a message
// it sends.
func (r *replayer) decide(it *replayItem) replayDecision {
	it.key, it.keyErr = r.keyOf(it.msg)
	it.replays = replayCount(it.msg)
	leave := func(counter *atomic.Int64, reason string, args ...any) replayDecision {
		counter.Add(1)
		r.log.Info("left in the source queue: "+reason, append([]any{"message_id", it.id, "key", it.key}, args...)...)
		return replayLeave
	}
	if !r.inWindow(it.msg) {
		return leave(&r.n.skippedFiltered, "sent outside --since/--until")
	}
	if r.opt.keyGlob != "" {
		if ok, _ := path.Match(r.opt.keyGlob, it.key); !ok || it.keyErr != nil {
			return leave(&r.n.skippedFiltered, "key does not match --key")
		}
	}
	if it.keyErr != nil && !r.opt.includeKeyless {
		return leave(&r.n.skippedKeyless, "no operation key", "error", it.keyErr.Error())
	}
	needsReset := false
	if it.keyErr == nil {
		ctx, cancel := context.WithTimeout(r.ctx, replayCallTimeout)
		rec, err := r.led.Get(ctx, it.key)
		cancel()
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil && r.ctx.Err() != nil:
			return replayLeave // stopped at once by a second signal
		case err != nil:
			r.n.failed.Add(1)
			r.log.Error("ledger lookup failed: message left in the source queue", "message_id", it.id, "key", it.key, "error", err)
			return replayLeave
		case rec.State == ledger.StateComplete && r.opt.dropComplete:
			return replayDrop
		case rec.State == ledger.StateComplete:
			return leave(&r.n.skippedComplete, "operation complete (--drop-complete deletes it)")
		case rec.State == ledger.StateFailed:
			needsReset = true
		}
	}
	if it.replays >= r.opt.maxReplays {
		return leave(&r.n.skippedMaxReplays, "replayed too often (--max-replays)", "replays", it.replays)
	}
	if needsReset {
		if r.opt.dryRun {
			r.n.reset.Add(1)
			r.log.Info("would reset the failed operation", "message_id", it.id, "key", it.key)
			return replaySend
		}
		ctx, cancel := context.WithTimeout(r.ctx, replayCallTimeout)
		err := r.led.Reset(ctx, it.key)
		cancel()
		switch {
		case err == nil:
			r.n.reset.Add(1)
		case errors.Is(err, ledger.ErrState), errors.Is(err, ledger.ErrNotFound):
			// The worker took it again meanwhile, or it expired: the
			// message can go as it is.
		case r.ctx.Err() != nil:
			return replayLeave
		default:
			r.n.failed.Add(1)
			r.log.Error("could not reset the failed operation: message left in the source queue", "message_id", it.id, "key", it.key, "error", err)
			return replayLeave
		}
	}
	return replaySend
}

func (r *replayer) inWindow(m types.Message) bool {
	if r.opt.since.t.IsZero() && r.opt.until.t.IsZero() {
		return true
	}
	ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
	if err != nil {
		return false
	}
	sent := time.UnixMilli(ms)
	return (r.opt.since.t.IsZero() || !sent.Before(r.opt.since.t)) && (r.opt.until.t.IsZero() || sent.Before(r.opt.until.t))
}

// replayCount is a message's SqsonceReplays attribute, 0 when absent.
func replayCount(m types.Message) int {
	v, ok := m.MessageAttributes[AttrReplays]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(aws.ToString(v.StringValue)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// entry makes the copy of a message that goes to the target.
func (r *replayer) entry(i int, it *replayItem) types.SendMessageBatchRequestEntry {
	// The attributes as they came, without the list fields SQS reserves.
	attrs := make(map[string]types.MessageAttributeValue, len(it.msg.MessageAttributes)+1)
	for name, v := range it.msg.MessageAttributes {
		attrs[name] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	if _, ok := attrs[AttrReplays]; !ok {
		for _, name := range []string{worker.AttrReason, worker.AttrSourceMessageID} {
			if len(attrs) < replayMaxAttributes {
				break
			}
			delete(attrs, name)
		}
	}
	if _, ok := attrs[AttrReplays]; ok || len(attrs) < replayMaxAttributes {
		attrs[AttrReplays] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(it.replays + 1))}
	} else {
		r.log.Warn("no room for the SqsonceReplays attribute (the message has 10 of its own): sent without it, so --max-replays cannot count its replays", "message_id", it.id, "key", it.key)
	}
	e := types.SendMessageBatchRequestEntry{
		Id:                aws.String(strconv.Itoa(i)),
		MessageBody:       it.msg.Body,
		MessageAttributes: attrs,
	}
	if r.toFIFO {
		var dedup string
		switch {
		case it.keyErr == nil:
			dedup = worker.DeduplicationID(it.key)
		case it.msg.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)] != "":
			dedup = it.msg.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
		default:
			dedup = worker.DeduplicationID(it.id)
		}
		group := it.msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if group == "" {
			group = dedup
		}
		e.MessageGroupId, e.MessageDeduplicationId = aws.String(group), aws.String(dedup)
	}
	return e
}

// send sends the items to the target in one batch and returns those that
// SQS took. The others are left in the source.
func (r *replayer) send(items []*replayItem) []*replayItem {
	if len(items) == 0 {
		return nil
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = r.entry(i, it)
	}
	ctx, cancel := context.WithTimeout(r.ctx, replayCallTimeout)
	out, err := r.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &r.opt.to, Entries: entries})
	cancel()
	if err != nil {
		r.n.failed.Add(int64(len(items)))
		r.log.Error("send failed: messages left in the source queue", "messages", len(items), "error", err)
		r.holdItems(items)
		return nil
	}
	answered := make([]bool, len(items))
	var sent, refused []*replayItem
	for _, s := range out.Successful {
		i, err := strconv.Atoi(aws.ToString(s.Id))
		if err != nil || i < 0 || i >= len(items) || answered[i] {
			continue
		}
		answered[i] = true
		it := items[i]
		if r.toFIFO && r.deduplicatedAsOriginal(it, aws.ToString(s.MessageId)) {
			r.n.failed.Add(1)
			r.log.Error("SQS dropped the copy as a duplicate of the original message (FIFO deduplication within 5 minutes of its send): left in the source queue; replay it later",
				"message_id", it.id, "key", it.key)
			refused = append(refused, it)
			continue
		}
		sent = append(sent, it)
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(items) || answered[i] {
			continue
		}
		answered[i] = true
		it := items[i]
		r.n.failed.Add(1)
		r.log.Error("send refused: message left in the source queue", "message_id", it.id, "key", it.key,
			"code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
		refused = append(refused, it)
	}
	for i, ok := range answered {
		if !ok {
			r.n.failed.Add(1)
			r.log.Error("send not answered: message left in the source queue", "message_id", items[i].id, "key", items[i].key)
			refused = append(refused, items[i])
		}
	}
	r.holdItems(refused)
	if len(sent) > 0 {
		r.n.moved.Add(int64(len(sent)))
		r.lastMove.Store(int64(time.Since(r.start)))
	}
	return sent
}

// deduplicatedAsOriginal reports whether a FIFO send was answered with the
// id of the message it copies (the original send, whose deduplication id
// SQS still remembers), so that nothing was enqueued.
func (r *replayer) deduplicatedAsOriginal(it *replayItem, sentID string) bool {
	if sentID == "" {
		return false
	}
	if sentID == it.id {
		return true
	}
	v, ok := it.msg.MessageAttributes[worker.AttrSourceMessageID]
	return ok && aws.ToString(v.StringValue) == sentID
}

// deleteItems deletes moved and dropped messages from the source.
func (r *replayer) deleteItems(sent, drop []*replayItem) {
	msgs := make([]types.Message, 0, len(sent)+len(drop))
	r.mu.Lock()
	for _, it := range slices.Concat(sent, drop) {
		t := r.seen[it.id]
		t.state = replayGone
		m := it.msg
		m.ReceiptHandle = aws.String(t.receipt)
		msgs = append(msgs, m)
	}
	r.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	deleted := r.deleteBatch(msgs)
	for _, it := range sent {
		if !deleted[it.id] {
			r.n.deleteFailed.Add(1)
		}
	}
	for _, it := range drop {
		if deleted[it.id] {
			r.n.droppedComplete.Add(1)
			r.log.Info("dropped: operation complete", "message_id", it.id, "key", it.key)
		} else {
			r.n.failed.Add(1)
		}
	}
}

// deleteBatch deletes up to ten messages from the source and returns the
// ids it deleted.
func (r *replayer) deleteBatch(msgs []types.Message) map[string]bool {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	// Not bound to a second signal: a send that succeeded is followed by
	// its delete whenever it can be.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), replayCallTimeout)
	out, err := r.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &r.opt.from, Entries: entries})
	cancel()
	deleted := make(map[string]bool, len(msgs))
	if err != nil {
		r.log.Error("delete from the source queue failed: these messages are in both queues", "messages", len(msgs), "error", err)
		return deleted
	}
	for _, s := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(msgs) {
			deleted[aws.ToString(msgs[i].MessageId)] = true
		}
	}
	for _, f := range out.Failed {
		r.log.Error("delete from the source queue refused: the message is in both queues", "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
	}
	return deleted
}

// holdItems marks messages as left in the source, to be made visible again
// at the end of the run.
func (r *replayer) holdItems(items []*replayItem) {
	r.mu.Lock()
	for _, it := range items {
		r.seen[it.id].state = replayHeld
	}
	r.mu.Unlock()
}

// release makes every message left in the source visible again at once and
// returns how many it released.
func (r *replayer) release() int {
	var held []types.ChangeMessageVisibilityBatchRequestEntry
	r.mu.Lock()
	for _, t := range r.seen {
		if t.state == replayHeld || t.state == replayInHand {
			held = append(held, types.ChangeMessageVisibilityBatchRequestEntry{ReceiptHandle: aws.String(t.receipt)})
		}
	}
	r.mu.Unlock()
	// Even after a second signal: this is quick, and saves the messages
	// waiting out --hold.
	ctx, cancel := context.WithTimeout(context.Background(), replayCallTimeout)
	defer cancel()
	var released atomic.Int64
	var wg sync.WaitGroup
	work := make(chan []types.ChangeMessageVisibilityBatchRequestEntry)
	for range min(r.opt.concurrency, (len(held)+replayBatch-1)/replayBatch) {
		wg.Go(func() {
			for batch := range work {
				for i := range batch {
					batch[i].Id = aws.String(strconv.Itoa(i))
				}
				out, err := r.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &r.opt.from, Entries: batch})
				if err != nil {
					r.log.Warn("could not make messages visible again: they come back after --hold", "messages", len(batch), "error", err)
					continue
				}
				released.Add(int64(len(out.Successful)))
				for _, f := range out.Failed {
					r.log.Warn("could not make a message visible again: it comes back after --hold", "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
				}
			}
		})
	}
	for start := 0; start < len(held); start += replayBatch {
		work <- held[start:min(start+replayBatch, len(held))]
	}
	close(work)
	wg.Wait()
	return int(released.Load())
}

// progress redraws one status line on a terminal a few times a second.
func (r *replayer) progress(w io.Writer, backlog int, done <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			fmt.Fprint(w, "\r\x1b[K")
			return
		case <-t.C:
		}
		s := r.summary()
		elapsed := time.Since(r.start).Seconds()
		handled := s.Moved + s.DroppedComplete + s.skipped() + s.Failed
		eta := "?"
		if left := int64(backlog) - handled; left <= 0 {
			eta = "0s"
		} else if per := float64(handled) / max(elapsed, 1e-9); per > 0 {
			eta = time.Duration(float64(left) / per * float64(time.Second)).Round(time.Second).String()
		}
		verb := "moved"
		if s.DryRun {
			verb = "would move"
		}
		fmt.Fprintf(w, "\rreplay: %s %d, left %d (complete %d, keyless %d, max replays %d, filtered %d), dropped %d, failed %d, %.0f/s, ETA %s\x1b[K",
			verb, s.Moved, s.skipped(), s.SkippedComplete, s.SkippedKeyless, s.SkippedMaxReplays, s.SkippedFiltered,
			s.DroppedComplete, s.Failed, s.Rate, eta)
	}
}

// replayBucket is a token bucket: a steady rate with bursts of at most ten
// messages (one batch).
type replayBucket struct {
	mu       sync.Mutex
	interval time.Duration // per message
	burst    time.Duration // interval × burst size
	next     time.Time     // when the tokens taken so far are paid for
}

func newReplayBucket(rate float64) *replayBucket {
	interval := max(time.Duration(float64(time.Second)/rate), time.Nanosecond)
	size := min(max(int(rate), 1), replayBatch)
	return &replayBucket{interval: interval, burst: time.Duration(size) * interval}
}

// wait takes n tokens and waits until they are paid for. It returns false
// if stop or done closes first.
func (b *replayBucket) wait(n int, stop <-chan struct{}, done <-chan struct{}) bool {
	now := time.Now()
	b.mu.Lock()
	if floor := now.Add(-b.burst); b.next.Before(floor) {
		b.next = floor
	}
	b.next = b.next.Add(time.Duration(n) * b.interval)
	d := b.next.Sub(now)
	b.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-done:
		return false
	}
}
