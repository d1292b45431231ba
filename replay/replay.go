package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"golang.org/x/sync/errgroup"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// How movers receive and call.
const (
	waitSeconds   = 1 // each receive waits this long for messages
	emptyReceives = 2 // a mover stops after this many empty receives in a row
	maxErrors     = 3 // a mover gives up after this many failed receives in a row
	callTimeout   = 30 * time.Second
)

// Errors of Run, besides those of the SQS calls.
var (
	// ErrInterrupted: Stop was called or the context ended before the
	// source ran dry; the messages not moved are in the source.
	ErrInterrupted = errors.New("interrupted")
	// ErrNotMoved: some messages could not be moved (Summary.Failed and
	// Summary.NoRoom) and are still in the source.
	ErrNotMoved = errors.New("messages could not be moved")
	// ErrNotDeleted: some messages were moved but could not be deleted
	// from the source (Summary.DeleteFailed): they are in both queues.
	ErrNotDeleted = errors.New("messages could not be deleted")
)

// Replayer moves messages from one queue to another. Create it with New
// and call Run once; Stop and Progress may be called from any goroutine.
type Replayer struct {
	cfg    Config
	sqs    SQSClient
	ledger Ledger
	log    *slog.Logger
	limit  *bucket // nil without Rate, and in a dry run
	hold   int32   // visibility timeout of receives, whole seconds

	ran         atomic.Bool
	halt        chan struct{} // closed to stop receiving
	haltOnce    sync.Once
	interrupted atomic.Bool

	mu          sync.Mutex
	seen        map[string]*tracked
	budget      int // moves left to reserve under Max
	outstanding int // moves reserved by movers and not settled yet

	start    atomic.Pointer[time.Time] // when Run started
	end      atomic.Pointer[time.Time] // when Run ended
	lastMove atomic.Int64              // nanoseconds after start
	n        counters
}

// New returns a Replayer for cfg, which it validates (see
// Config.Validate). The client and the ledger are required.
func New(cfg Config, client SQSClient, l Ledger) (*Replayer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case client == nil:
		return nil, fmt.Errorf("nil SQS client: %w", ErrInvalidConfig)
	case l == nil:
		return nil, fmt.Errorf("nil ledger: %w", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replayer{
		cfg: cfg, sqs: client, ledger: l, log: cfg.Logger,
		hold:   int32((cfg.Hold + time.Second - 1) / time.Second),
		halt:   make(chan struct{}),
		seen:   make(map[string]*tracked),
		budget: cfg.Max,
	}
	if cfg.Rate > 0 && !cfg.DryRun {
		r.limit = newBucket(cfg.Rate)
	}
	return r, nil
}

// Stop stops the run gracefully: no more receives, the moves in hand
// finish, and every other message received is made visible again before
// Run returns. The summary says Interrupted. Stop does not wait for Run;
// it is safe to call at any time and more than once, also before Run.
func (r *Replayer) Stop() {
	r.interrupted.Store(true)
	r.stopReceiving()
}

func (r *Replayer) stopReceiving() { r.haltOnce.Do(func() { close(r.halt) }) }

// Progress returns what the run has done so far, with Seconds and Rate as
// of now; once Run has returned, its summary. Before Run starts every count
// is zero.
func (r *Replayer) Progress() Summary {
	s := r.n.summary()
	s.DryRun, s.Interrupted = r.cfg.DryRun, r.interrupted.Load()
	if start := r.start.Load(); start != nil {
		now := time.Now()
		if end := r.end.Load(); end != nil {
			now = *end
		}
		s.Seconds = seconds(now.Sub(*start))
	}
	if active := time.Duration(r.lastMove.Load()).Seconds(); active > 0 {
		s.Rate = round3(float64(s.Moved) / active)
	}
	return s
}

// Run moves messages until the source runs dry, Max messages moved, Stop
// is called or ctx ends; then it makes every message it left in the source
// visible again (also after ctx ended: that is quick and spares them the
// wait for Hold) and returns the summary. It joins every goroutine it
// started before it returns.
//
// The error is nil when every message received was moved or deliberately
// left. Otherwise it is the first failure that ended the run (a receive
// that kept failing), or wraps ErrInterrupted, ErrNotMoved or ErrNotDeleted,
// in that order of precedence. The summary is valid either way.
func (r *Replayer) Run(ctx context.Context) (Summary, error) {
	if !r.ran.CompareAndSwap(false, true) {
		return Summary{}, errors.New("replay: Run called twice")
	}
	start := time.Now()
	r.start.Store(&start)

	var movers errgroup.Group
	for range r.cfg.Concurrency {
		movers.Go(func() error { return r.mover(ctx) })
	}
	err := movers.Wait()
	unhidden := r.unhide(ctx)

	if ctx.Err() != nil {
		r.interrupted.Store(true)
	}
	end := time.Now()
	r.end.Store(&end)
	s := r.Progress()
	if unhidden > 0 {
		r.log.Info("made the messages left in the source visible again", "messages", unhidden)
	}
	if r.cfg.DryRun {
		r.log.Info("dry run: nothing was sent, deleted or reset")
	}
	switch {
	case err != nil:
	case s.Interrupted:
		err = fmt.Errorf("%w: %d messages moved; the others are still in %s", ErrInterrupted, s.Moved, r.cfg.From)
	case s.Failed+s.NoRoom > 0:
		err = fmt.Errorf("%d %w and are still in %s (see the log)", s.Failed+s.NoRoom, ErrNotMoved, r.cfg.From)
	case s.DeleteFailed > 0:
		err = fmt.Errorf("%d %w from %s after they were sent to %s: they are in both (the ledger answers the second copy as a duplicate)",
			s.DeleteFailed, ErrNotDeleted, r.cfg.From, r.cfg.To)
	}
	return s, err
}

// state is where a received message stands in this run.
type state uint8

const (
	inHand state = iota // a mover is deciding or moving it
	held                // left in the source: made visible again at the end
	gone                // deleted from the source (moved or dropped), or being deleted
)

// tracked is a message received in this run, by MessageId.
type tracked struct {
	state   state
	receipt string // the newest receipt handle: only it is sure to work
	// filtered: left by the filters (see item.filtered); received
	// again, it is made visible again again.
	filtered bool
}

// stopped reports whether movers should stop receiving.
func (r *Replayer) stopped(ctx context.Context) bool {
	select {
	case <-r.halt:
		return true
	default:
		return ctx.Err() != nil
	}
}

// reserve takes up to one batch of moves from the Max budget. It returns
// 0 and done when the budget is spent, and 0 alone while other movers hold
// the rest.
func (r *Replayer) reserve() (n int, done bool) {
	if r.cfg.Max == 0 {
		return batchSize, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.budget == 0 {
		return 0, r.outstanding == 0
	}
	n = min(batchSize, r.budget)
	r.budget -= n
	r.outstanding += n
	return n, false
}

// settle gives back the part of a reservation of n that did not move.
func (r *Replayer) settle(n, moved int) {
	if r.cfg.Max == 0 {
		return
	}
	r.mu.Lock()
	r.outstanding -= n
	r.budget += n - moved
	r.mu.Unlock()
}

// mover receives, decides, sends and deletes, one batch at a time, until
// the source runs dry, the budget is spent or the run stops. A receive that
// keeps failing stops every mover's receiving and is returned.
func (r *Replayer) mover(ctx context.Context) error {
	empty, errs := 0, 0
	for !r.stopped(ctx) {
		n, done := r.reserve()
		if done {
			return nil
		}
		if n == 0 {
			r.pause(ctx, 20*time.Millisecond)
			continue
		}
		out, err := r.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    &r.cfg.From,
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             waitSeconds,
			VisibilityTimeout:           r.hold,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			r.settle(n, 0)
			if ctx.Err() != nil {
				return nil
			}
			if errs++; errs >= maxErrors {
				r.stopReceiving()
				return fmt.Errorf("receive from %s: %w", r.cfg.From, err)
			}
			r.log.Warn("receive failed; trying again", "error", err)
			r.pause(ctx, time.Duration(errs)*time.Second)
			continue
		}
		errs = 0
		fresh, moved := r.handle(ctx, out.Messages)
		r.settle(n, moved)
		if fresh > 0 {
			empty = 0
		} else if empty++; empty >= emptyReceives {
			return nil
		}
	}
	return nil
}

// pause sleeps for d or until the run stops.
func (r *Replayer) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.halt:
	case <-ctx.Done():
	}
}

// item is a message in hand with what was decided for it.
type item struct {
	msg     types.Message
	id      string
	key     string
	fp      []byte // the payload's fingerprint
	keyErr  error
	replays int
	attrs   map[string]types.MessageAttributeValue // of the copy
	why     string                                 // why it is left, when it is
	// filtered: left by the filters, it is made visible again within
	// FilteredHold rather than at the end of the run.
	filtered bool
}

// handle takes one receive's messages: it recognises those seen before in
// this run, decides the fate of the others, and moves those to be moved.
// It returns how many messages were new and how many were moved.
func (r *Replayer) handle(ctx context.Context, msgs []types.Message) (fresh, moved int) {
	var mine []*item
	var again []types.Message // deleted earlier in this run, yet received again
	var filtered []*item      // left by the filters: visible again soon
	defer func() { r.showAgain(ctx, filtered) }()
	r.mu.Lock()
	for _, m := range msgs {
		id := aws.ToString(m.MessageId)
		t, ok := r.seen[id]
		if !ok {
			r.seen[id] = &tracked{state: inHand, receipt: aws.ToString(m.ReceiptHandle)}
			mine = append(mine, &item{msg: m, id: id})
			continue
		}
		// Its visibility ran out and it came back: not counted again.
		// Whoever holds it uses the newest receipt handle from now on.
		r.log.Debug("received again after its hold ran out: not counted again", "message_id", id)
		t.receipt = aws.ToString(m.ReceiptHandle)
		if t.state == gone {
			again = append(again, m)
		}
		if t.filtered {
			filtered = append(filtered, &item{msg: m, id: id})
		}
	}
	r.mu.Unlock()
	if len(again) > 0 {
		// The earlier delete used a receipt handle that had gone stale;
		// the message is already in the target (or was dropped).
		r.log.Debug("deleting messages again that came back after they were moved", "messages", len(again))
		r.deleteBatch(ctx, again)
	}
	if len(mine) == 0 {
		return 0, 0
	}
	if r.stopped(ctx) {
		r.leave(mine)
		return len(mine), 0
	}

	var send, drop []*item
	for _, it := range mine {
		decision := r.decide(ctx, it)
		d := Decision{MessageID: it.id, Key: it.key, Action: ActionLeave}
		switch decision {
		case sendIt:
			send = append(send, it)
			d.Action = ActionMove
		case dropIt:
			drop = append(drop, it)
			d.Action = ActionDrop
		default:
			r.leave([]*item{it})
			d.Why = it.why
			if it.filtered {
				filtered = append(filtered, it)
				r.mu.Lock()
				r.seen[it.id].filtered = true
				r.mu.Unlock()
			}
		}
		if r.cfg.Observe != nil {
			if it.keyErr != nil {
				d.Key = ""
			}
			r.cfg.Observe(d)
		}
	}
	if r.cfg.DryRun {
		for _, it := range send {
			r.log.Info("would move", "message_id", it.id, "key", it.key, "replays", it.replays)
		}
		for _, it := range drop {
			r.log.Info("would drop: operation complete", "message_id", it.id, "key", it.key)
		}
		r.n.moved.Add(int64(len(send)))
		r.n.droppedComplete.Add(int64(len(drop)))
		if len(send) > 0 {
			r.moveTime()
		}
		r.leave(send)
		r.leave(drop)
		return len(mine), len(send)
	}
	if len(send) > 0 && r.limit != nil && !r.limit.wait(len(send), r.halt, ctx.Done()) {
		r.leave(send)
		r.leave(drop)
		return len(mine), 0
	}
	sent := r.send(ctx, send)
	r.deleteItems(ctx, sent, drop)
	return len(mine), len(sent)
}

// moveTime records the time of the latest move, for the rate.
func (r *Replayer) moveTime() {
	if start := r.start.Load(); start != nil {
		r.lastMove.Store(int64(time.Since(*start)))
	}
}

// decision is what becomes of a message.
type decision uint8

const (
	sendIt decision = iota
	dropIt
	leaveIt
)

// decide applies the filters, the ledger, MaxReplays and the room for
// SqsonceReplays to a message, counts and reports what it leaves, and
// resets a failed record of a message it sends.
func (r *Replayer) decide(ctx context.Context, it *item) decision {
	it.key, it.fp, it.keyErr = r.cfg.KeyOf(it.msg)
	it.replays = replayCount(it.msg)
	leave := func(counter *atomic.Int64, reason string, args ...any) decision {
		counter.Add(1)
		it.why = reason
		r.log.Info("left in the source queue: "+reason, append([]any{"message_id", it.id, "key", it.key}, args...)...)
		return leaveIt
	}
	filter := func(reason string) decision {
		it.filtered = true
		return leave(&r.n.skippedFiltered, reason)
	}
	if !r.inWindow(it.msg) {
		return filter("sent outside the time window")
	}
	if r.cfg.KeyGlob != "" {
		if ok, _ := path.Match(r.cfg.KeyGlob, it.key); !ok || it.keyErr != nil {
			return filter("key does not match the filter")
		}
	}
	if r.cfg.ReasonGroup != "" && reasonGroup(it.msg) != r.cfg.ReasonGroup {
		return filter("reason not of the group of the filter")
	}
	if r.cfg.State != 0 && it.keyErr != nil {
		return filter("no operation key, so no record in the state of the filter")
	}
	if it.keyErr != nil && !r.cfg.IncludeKeyless {
		return leave(&r.n.skippedKeyless, "no operation key", "error", it.keyErr.Error())
	}
	needsReset := false
	if it.keyErr == nil {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		rec, err := r.ledger.Get(cctx, it.key)
		cancel()
		switch {
		case r.cfg.State != 0 && (errors.Is(err, ledger.ErrNotFound) || err == nil && rec.State != r.cfg.State):
			return filter("its operation is not " + r.cfg.State.String())
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil && ctx.Err() != nil:
			return leaveIt // stopped at once
		case err != nil:
			r.n.failed.Add(1)
			it.why = "the ledger lookup failed: " + err.Error()
			r.log.Error("ledger lookup failed: message left in the source queue", "message_id", it.id, "key", it.key, "error", err)
			return leaveIt
		case len(rec.Fingerprint) > 0 && len(it.fp) > 0 && !bytes.Equal(rec.Fingerprint, it.fp):
			// Not the operation the record is about: dropped as complete
			// it would be lost, sent it would only be dead-lettered again.
			return leave(&r.n.skippedConflict, "a conflict: its payload differs from the one its key was claimed with; forget the key to run this payload instead",
				"state", rec.State.String())
		case rec.State == ledger.StateComplete && r.cfg.DropComplete:
			return dropIt
		case rec.State == ledger.StateComplete:
			return leave(&r.n.skippedComplete, "operation complete")
		case rec.State == ledger.StateFailed:
			needsReset = true
		}
	}
	if it.replays >= r.cfg.MaxReplays {
		return leave(&r.n.skippedMaxReplays, "replayed too often", "replays", it.replays, "max_replays", r.cfg.MaxReplays)
	}
	var room bool
	if it.attrs, room = copyAttributes(it.msg, it.replays, r.cfg.ToFIFO); !room {
		// Sent without its count, each copy that came back would look new.
		r.n.noRoom.Add(1)
		it.why = "too many message attributes of its own: no room for " + AttrReplays
		r.log.Error("left in the source queue: too many message attributes of its own: no room for "+AttrReplays+", which bounds replays"+
			" (and on a FIFO target "+worker.AttrDeduplicationID+"); move it by hand",
			"message_id", it.id, "key", it.key)
		return leaveIt
	}
	if needsReset {
		if r.cfg.DryRun {
			r.n.reset.Add(1)
			r.log.Info("would reset the failed operation", "message_id", it.id, "key", it.key)
			return sendIt
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := r.ledger.Reset(cctx, it.key)
		cancel()
		switch {
		case err == nil:
			r.n.reset.Add(1)
		case errors.Is(err, ledger.ErrState), errors.Is(err, ledger.ErrNotFound):
			// The worker took it again meanwhile, or it expired: the
			// message can go as it is.
		case ctx.Err() != nil:
			return leaveIt
		default:
			r.n.failed.Add(1)
			it.why = "could not reset the failed operation: " + err.Error()
			r.log.Error("could not reset the failed operation: message left in the source queue", "message_id", it.id, "key", it.key, "error", err)
			return leaveIt
		}
	}
	return sendIt
}

func (r *Replayer) inWindow(m types.Message) bool {
	if r.cfg.Since.IsZero() && r.cfg.Until.IsZero() {
		return true
	}
	ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
	if err != nil {
		return false
	}
	sent := time.UnixMilli(ms)
	return (r.cfg.Since.IsZero() || !sent.Before(r.cfg.Since)) && (r.cfg.Until.IsZero() || sent.Before(r.cfg.Until))
}

// reasonGroup is the group of a message's SqsonceReason (ledger.ReasonGroup),
// or NoReasonGroup without one.
func reasonGroup(m types.Message) string {
	v, ok := m.MessageAttributes[worker.AttrReason]
	if !ok || aws.ToString(v.StringValue) == "" {
		return NoReasonGroup
	}
	return ledger.ReasonGroup(aws.ToString(v.StringValue))
}

// ReasonGroupOf is the group of a dead letter's reason as Config.ReasonGroup
// selects it: ledger.ReasonGroup of its SqsonceReason, or NoReasonGroup.
func ReasonGroupOf(m types.Message) string { return reasonGroup(m) }

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

// copyAttributes returns the message attributes of m's copy: m's own,
// with SqsonceReplays set to replays+1 and, for a FIFO target, the
// deduplication id m stands for in worker.AttrDeduplicationID (the copy
// gets one of its own). SQS allows ten: to make room for these,
// SqsonceReason goes first, then SqsonceSourceMessageId. It returns false
// when there is no room for them.
func copyAttributes(m types.Message, replays int, toFIFO bool) (map[string]types.MessageAttributeValue, bool) {
	// The attributes as they came, without the list fields SQS reserves.
	attrs := make(map[string]types.MessageAttributeValue, len(m.MessageAttributes)+2)
	for name, v := range m.MessageAttributes {
		attrs[name] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	need := map[string]string{AttrReplays: strconv.Itoa(replays + 1)}
	if dedup := worker.OriginalDeduplicationID(m.Attributes, m.MessageAttributes); toFIFO && dedup != "" {
		need[worker.AttrDeduplicationID] = dedup
	}
	missing := 0
	for name := range need {
		if _, ok := attrs[name]; !ok {
			missing++
		}
	}
	for _, name := range []string{worker.AttrReason, worker.AttrSourceMessageID} {
		if len(attrs)+missing <= maxAttributes {
			break
		}
		delete(attrs, name)
	}
	if len(attrs)+missing > maxAttributes {
		return nil, false
	}
	attrs[AttrReplays] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(need[AttrReplays])}
	if v, ok := need[worker.AttrDeduplicationID]; ok {
		attrs[worker.AttrDeduplicationID] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return attrs, true
}

// entry makes the copy of a message that goes to the target.
func (r *Replayer) entry(i int, it *item) types.SendMessageBatchRequestEntry {
	e := types.SendMessageBatchRequestEntry{
		Id:                aws.String(strconv.Itoa(i)),
		MessageBody:       it.msg.Body,
		MessageAttributes: it.attrs,
	}
	if r.cfg.ToFIFO {
		// Named by the message copied, never by the operation: see the
		// package documentation.
		dedup := worker.CopyDeduplicationID(it.id)
		group := it.msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		switch {
		case group != "":
		case it.keyErr == nil:
			// From a standard queue: one operation's copies in order.
			group = worker.DeduplicationID(it.key)
		default:
			group = dedup
		}
		e.MessageGroupId, e.MessageDeduplicationId = aws.String(group), aws.String(dedup)
	}
	return e
}

// send sends the items to the target in one batch and returns those that
// SQS took. The others are left in the source.
func (r *Replayer) send(ctx context.Context, items []*item) []*item {
	if len(items) == 0 {
		return nil
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = r.entry(i, it)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	out, err := r.sqs.SendMessageBatch(cctx, &sqs.SendMessageBatchInput{QueueUrl: &r.cfg.To, Entries: entries})
	cancel()
	if err != nil {
		r.n.failed.Add(int64(len(items)))
		r.log.Error("send failed: messages left in the source queue", "messages", len(items), "error", err)
		r.leave(items)
		return nil
	}
	answered := make([]bool, len(items))
	var sent, refused []*item
	for _, s := range out.Successful {
		i, err := strconv.Atoi(aws.ToString(s.Id))
		if err != nil || i < 0 || i >= len(items) || answered[i] {
			continue
		}
		// On a FIFO target SQS may have dropped the copy as a duplicate;
		// then an earlier copy of this very message is in the target.
		answered[i] = true
		sent = append(sent, items[i])
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
	r.leave(refused)
	if len(sent) > 0 {
		r.n.moved.Add(int64(len(sent)))
		r.moveTime()
	}
	return sent
}

// deleteItems deletes moved and dropped messages from the source.
func (r *Replayer) deleteItems(ctx context.Context, sent, drop []*item) {
	msgs := make([]types.Message, 0, len(sent)+len(drop))
	r.mu.Lock()
	for _, it := range slices.Concat(sent, drop) {
		t := r.seen[it.id]
		t.state = gone
		m := it.msg
		m.ReceiptHandle = aws.String(t.receipt)
		msgs = append(msgs, m)
	}
	r.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	deleted := r.deleteBatch(ctx, msgs)
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
func (r *Replayer) deleteBatch(ctx context.Context, msgs []types.Message) map[string]bool {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	// Not bound to ctx: a send that succeeded is followed by its delete
	// whenever it can be.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	out, err := r.sqs.DeleteMessageBatch(cctx, &sqs.DeleteMessageBatchInput{QueueUrl: &r.cfg.From, Entries: entries})
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

// leave marks messages as left in the source, to be made visible again at
// the end of the run.
func (r *Replayer) leave(items []*item) {
	r.mu.Lock()
	for _, it := range items {
		r.seen[it.id].state = held
	}
	r.mu.Unlock()
}

// showAgain makes the messages that the filters left visible again within
// FilteredHold: they are not this run's, and others may read them. The
// run remembers them, and one received again is not counted again. A
// message whose visibility cannot be changed comes back when its hold runs
// out, or at the end of the run.
func (r *Replayer) showAgain(ctx context.Context, items []*item) {
	if len(items) == 0 {
		return
	}
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(items))
	r.mu.Lock()
	for i, it := range items {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)),
			ReceiptHandle: aws.String(r.seen[it.id].receipt), VisibilityTimeout: int32(FilteredHold / time.Second)}
	}
	r.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	if _, err := r.sqs.ChangeMessageVisibilityBatch(cctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &r.cfg.From, Entries: entries}); err != nil {
		r.log.Warn("could not make the messages outside the filters visible again: they come back when their hold runs out", "messages", len(entries), "error", err)
	}
}

// unhide makes every message left in the source, or still in hand, visible
// again at once and returns how many it made visible.
func (r *Replayer) unhide(ctx context.Context) int {
	var hidden []types.ChangeMessageVisibilityBatchRequestEntry
	r.mu.Lock()
	for _, t := range r.seen {
		if t.state == held || t.state == inHand {
			hidden = append(hidden, types.ChangeMessageVisibilityBatchRequestEntry{ReceiptHandle: aws.String(t.receipt)})
		}
	}
	r.mu.Unlock()
	// Also when ctx has ended: this is quick, and spares the messages the
	// wait for Hold.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	var unhidden atomic.Int64
	var g errgroup.Group
	g.SetLimit(r.cfg.Concurrency)
	for start := 0; start < len(hidden); start += batchSize {
		batch := hidden[start:min(start+batchSize, len(hidden))]
		for i := range batch {
			batch[i].Id = aws.String(strconv.Itoa(i))
		}
		g.Go(func() error {
			out, err := r.sqs.ChangeMessageVisibilityBatch(cctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &r.cfg.From, Entries: batch})
			if err != nil {
				r.log.Warn("could not make messages visible again: they come back when their hold runs out", "messages", len(batch), "error", err)
				return nil
			}
			unhidden.Add(int64(len(out.Successful)))
			for _, f := range out.Failed {
				r.log.Warn("could not make a message visible again: it comes back when its hold runs out", "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
			}
			return nil
		})
	}
	g.Wait()
	return int(unhidden.Load())
}
