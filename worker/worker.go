package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sqsonce/sqsonce/ledger"
)

// Worker consumes one queue. Create it with New and call Run once.
type Worker struct {
	cfg     Config
	sqs     SQSClient
	ledger  Ledger
	handler Handler
	keyer   *keyer
	log     *slog.Logger

	tracer    trace.Tracer // nil: no spans
	queueName string       // the queue's name, for spans
	spanName  string

	// cutPoll is when SQS stops answering the receives that a stop cut
	// off (Unix nanoseconds; 0: none): SQS still hands messages to a long
	// poll whose caller has gone, until its wait ends, and they stay out
	// of sight for the visibility timeout with a receive counted. What
	// the stop gives back is made visible after that.
	cutPoll atomic.Int64

	queue   queueInfo // read from SQS when Run starts
	ownerID string    // this process, for owner tokens
	claimN  atomic.Uint64
	started time.Time
	flow    *flowCtl

	// slots bound the messages in hand: one token per message that may
	// be received, Concurrency + Prefetch in all, held from the receive
	// until the message ends. handlers bound the messages at work: a
	// message takes one (a send) when it is starting and gives it back (a
	// receive) once it has ended, its completion durable: back-pressure is
	// the handler count. inHand counts the messages in hand.
	slots     chan struct{}
	handlers  chan struct{}
	inHand    atomic.Int64
	completes chan completion
	// completeLinger bounds how long a completion waits for its
	// batch's other messages (see complete.go).
	completeLinger time.Duration
	deletes        chan deletion
	beats          sync.WaitGroup // the keepers' beats in flight
	hurry          chan struct{}  // closed by StopNow
	hurryOne       sync.Once
	stats          counters
	gate           gate
	metrics        *metrics
	now            func() time.Time

	// active holds the keys this process is claiming or working on, and
	// the job that holds each until it ends. A delivery of one of them
	// from another receive is not claimed here, even when the ledger would
	// let it (its lease lapsed while the process was paused, or could not
	// be extended): the work is running, here. And a record in progress
	// under one of this process's owner tokens whose key is not active is
	// a claim this process holds without working on it (its failure or
	// release could not be recorded): it is taken over at once.
	activeMu sync.Mutex
	active   map[string]*job

	healthMu    sync.Mutex
	running     bool
	draining    bool
	lastReceive time.Time
	pollers     []pollerState
}

// New returns a Worker for cfg. The client, ledger and handler are required.
// Defaults are filled into cfg as documented on Config.
func New(cfg Config, client SQSClient, l Ledger, h Handler) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case client == nil:
		return nil, fmt.Errorf("nil SQS client: %w", ErrInvalidConfig)
	case l == nil:
		return nil, fmt.Errorf("nil ledger: %w", ErrInvalidConfig)
	case h == nil:
		return nil, fmt.Errorf("nil handler: %w", ErrInvalidConfig)
	}
	k, err := newKeyer(cfg.Key)
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	w := &Worker{
		cfg:            cfg,
		sqs:            instrumented{SQSClient: client, m: m},
		metrics:        m,
		active:         map[string]*job{},
		pollers:        make([]pollerState, cfg.Pollers),
		ledger:         instrumentLedger(l, m),
		handler:        h,
		keyer:          k,
		log:            cfg.Logger.With("queue", cfg.QueueURL),
		ownerID:        ownerID(),
		slots:          make(chan struct{}, cfg.Concurrency+cfg.Prefetch),
		handlers:       make(chan struct{}, cfg.Concurrency),
		deletes:        make(chan deletion, 4*MaxMessagesPerReceive),
		completes:      make(chan completion, 4*MaxMessagesPerReceive),
		completeLinger: completeLinger,
		hurry:          make(chan struct{}),
		now:            time.Now,
		queueName:      QueueName(cfg.QueueURL),
	}
	w.spanName = spanNameOf(w.queueName)
	w.flow = newFlowCtl(w, l)
	if cfg.TracerProvider != nil {
		w.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	for range cap(w.slots) {
		w.slots <- struct{}{}
	}
	if cfg.Registerer != nil {
		if err := w.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return w, nil
}

// ownerID names this process in owner tokens: host, pid and a random part,
// so that two processes never share tokens.
func ownerID() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// StopNow cuts the shutdown grace short: running work is cancelled at once.
// It is what a second SIGTERM or SIGINT does. Safe to call at any time and
// more than once.
func (w *Worker) StopNow() {
	w.hurryOne.Do(func() { close(w.hurry) })
}

// Run consumes the queue until ctx ends, then shuts down in two phases: it
// stops receiving at once (the long poll is cancelled), lets running work
// finish for up to Config.Grace (or until StopNow), gives back what never
// started, flushes pending deletes, and returns. It returns nil after a
// clean shutdown (also one that came before it started) and an error when
// it could not start (the queue cannot be read, for example) or when the
// ledger cannot be used at all (its table is missing or newer than this
// code: ledger.ErrNoSchema, ledger.ErrSchema);
// then it shuts down the same way first. While the ledger merely fails to
// record claims, Run receives nothing and waits for it (Health.Ready is
// false meanwhile). Run joins every goroutine it started before returning.
func (w *Worker) Run(ctx context.Context) error {
	info, err := inspectQueue(ctx, w.sqs, w.cfg.QueueURL)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped before it started: nothing was received, and a stop
			// is not a failure.
			w.log.Info("worker stopped before it started")
			return nil
		}
		return err
	}
	w.queue = info
	w.warnRetention()
	defer w.watchQueue(ctx)()
	defer w.watchLedger(ctx)()
	w.healthMu.Lock()
	w.running, w.started = true, w.now()
	for i := range w.pollers {
		w.pollers[i] = pollerState{turned: w.now()}
	}
	w.healthMu.Unlock()
	defer func() {
		w.healthMu.Lock()
		w.running = false
		w.healthMu.Unlock()
	}()
	w.log.Info("worker started", "fifo", info.fifo, "dead_letter_queue", info.dlqURL,
		"max_receive_count", info.maxReceiveCount, "concurrency", w.cfg.Concurrency, "pollers", w.cfg.Pollers)

	// Work outlives ctx by the grace period.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	// The receive loops live and die together: a fatal error in one (the
	// ledger's table is gone) stops them all and is Run's error, after the
	// usual drain. Deleting and sweeping cannot fail for good.
	var deleters, completers, jobs, sweeper sync.WaitGroup
	deleters.Go(w.deleteLoop)
	completers.Go(w.completeLoop)
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	if w.cfg.SweepInterval > 0 {
		sweeper.Go(func() { w.sweepLoop(sweepCtx) })
	}
	if !w.flow.off() {
		w.flow.start(ctx)
		sweeper.Go(func() { w.flow.loop(sweepCtx) })
	}
	pollers, pollCtx := errgroup.WithContext(ctx)
	for i := range w.cfg.Pollers {
		pollers.Go(func() error { return w.pollLoop(pollCtx, workCtx, i, &jobs) })
	}

	fatal := pollers.Wait() // returns once ctx has ended, or a loop failed for good
	if fatal != nil {
		w.log.Error("stopping: the ledger cannot be used", "error", fatal)
	}
	w.healthMu.Lock()
	w.draining = true
	w.healthMu.Unlock()
	w.log.Info("stopping: receiving stopped, draining running work", "grace", w.cfg.Grace, "in_flight", w.inFlight())
	drained := make(chan struct{})
	go func() { jobs.Wait(); close(drained) }()
	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		w.log.Warn("shutdown grace ran out: cancelling running work")
	case <-w.hurry:
		w.log.Warn("second stop signal: cancelling running work")
	}
	cancelWork()
	<-drained
	// Every message has left its keeper: no beat starts any more, and
	// those in flight end within a beat interval.
	w.beats.Wait()
	close(w.completes)
	completers.Wait()
	close(w.deletes)
	deleters.Wait()
	stopSweep()
	sweeper.Wait()
	s := w.Stats()
	w.log.Info("worker stopped", s.logAttrs()...)
	return fatal
}

// pollLoop receives batches while there is free handler capacity, until ctx
// ends. Each message it dispatches holds one slot until it is dealt with.
//
// While the ledger cannot record claims it receives nothing (see gate), and
// when the ledger will not come back (its table is gone) it returns that
// error, which ends Run.
func (w *Worker) pollLoop(ctx, workCtx context.Context, i int, jobs *sync.WaitGroup) error {
	failures := 0
	for ctx.Err() == nil {
		most := w.flow.intake(w.cfg.MaxMessages)
		if most == 0 {
			// Paused, or ramping at its cap: nothing to receive until
			// that changes (the pause's own loop reads it every second).
			w.turn(i, true)
			select {
			case <-w.flow.changedCh():
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			continue
		}
		if down, fatal := w.ledgerState(); fatal != nil {
			return fatal
		} else if down {
			probe, err := w.awaitLedger(ctx, i)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if probe {
				most = 1
			}
		}
		w.turn(i, true)
		n := w.acquire(ctx, most)
		if n == 0 {
			return nil
		}
		w.turn(i, false)
		sent := time.Now() // the visibility timeout runs from about then
		msgs, err := w.receive(ctx, n)
		w.turn(i, false)
		if n > len(msgs) {
			w.freeSlots(n - len(msgs))
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait := backoff(failures, 100*time.Millisecond, 10*time.Second)
			w.log.Error("receive failed", "error", err, "retry_in", wait)
			sleep(ctx, wait)
			continue
		}
		failures = 0
		w.received()
		if len(msgs) == 0 {
			continue
		}
		w.stats.received.Add(int64(len(msgs)))
		w.inHand.Add(int64(len(msgs)))
		if ctx.Err() != nil {
			// Received as the stop came: give them back untouched.
			w.makeVisible(msgs, sent, 0)
			w.settled(len(msgs))
			return nil
		}
		// Claim and start the batch while this loop receives the next:
		// the claim's commit (an fsync) need not hold back the poll.
		jobs.Go(func() { w.dispatch(ctx, workCtx, sent, msgs, jobs) })
	}
	return nil
}

// acquire takes between 1 and max free slots, waiting for the first. It
// returns 0 when ctx ends first. Having one, it waits up to acquireLinger
// for more to come free, so that a busy worker receives full batches rather
// than one message per call (fewer requests, less CPU, the same latency
// within a couple of milliseconds).
func (w *Worker) acquire(ctx context.Context, max int) int {
	select {
	case <-w.slots:
	case <-ctx.Done():
		return 0
	}
	n := 1
	var linger <-chan time.Time
	for n < max {
		select {
		case <-w.slots:
			n++
			continue
		default:
		}
		if linger == nil {
			t := time.NewTimer(acquireLinger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case <-w.slots:
			n++
		case <-linger:
			return n
		case <-ctx.Done():
			return n
		}
	}
	return n
}

// acquireLinger is how long a poller holding some free slots waits for more
// before it receives.
const acquireLinger = 2 * time.Millisecond

// freeSlots gives n slots back to the pool.
func (w *Worker) freeSlots(n int) {
	for range n {
		w.slots <- struct{}{}
	}
}

// settled says that n messages ended: out of hand, their slots free.
func (w *Worker) settled(n int) {
	w.inHand.Add(-int64(n))
	w.freeSlots(n)
}

// systemAttributes are the system attributes the worker reads.
var systemAttributes = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameSentTimestamp,
	types.MessageSystemAttributeNameMessageGroupId,
	types.MessageSystemAttributeNameMessageDeduplicationId,
	types.MessageSystemAttributeNameAWSTraceHeader,
}

func (w *Worker) receive(ctx context.Context, n int) ([]types.Message, error) {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    &w.cfg.QueueURL,
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(w.cfg.WaitTime / time.Second),
		VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: systemAttributes,
		MessageAttributeNames:       []string{"All"},
	}
	if w.queue.fifo {
		// Lets SQS answer a retried receive with the same messages instead
		// of hiding them for a visibility timeout.
		var b [16]byte
		rand.Read(b[:])
		in.ReceiveRequestAttemptId = aws.String(hex.EncodeToString(b[:]))
	}
	start := time.Now()
	out, err := w.sqs.ReceiveMessage(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			end := start.Add(w.cfg.WaitTime + time.Second).UnixNano()
			for old := w.cutPoll.Load(); old < end && !w.cutPoll.CompareAndSwap(old, end); old = w.cutPoll.Load() {
			}
		}
		return nil, fmt.Errorf("receive from %s: %w", w.cfg.QueueURL, err)
	}
	return out.Messages, nil
}

// job is one received message on its way through the worker.
type job struct {
	msg    types.Message
	body   []byte // the body as received
	opened opened // what the key and the handler read of it
	// pointer is the S3 object that holds the payload, when the body
	// points there; payloadErr says why that payload could not be read.
	pointer    *S3Pointer
	payloadErr *payloadError
	key        derived
	keyErr     error
	claim      ledger.Claim
	owner      string
	here       bool   // its key is at work in this process, for another receive: not claimed
	b          *batch // its received batch, which keeps it
	// receives is SQS's approximate count of its receives, and sent when
	// SQS accepted it, read once from its attributes (zero when missing).
	receives int
	sent     time.Time

	// Flow control's, set before it waits: its pause scopes (the handler's
	// and its partition values'), when its rate tokens are due, how long a
	// message held beyond what can be kept must be deferred for, and the
	// concurrency slots it holds while it runs.
	scopes    []string
	notBefore time.Time
	interval  time.Duration // of the tightest of its rate buckets; 0 with no rate
	tokens    bool          // it holds its rate tokens, due at notBefore
	slack     time.Duration // how late its rate tokens may start (see flowCtl.late)
	deferFor  time.Duration
	slots     []ledger.Slot
	slotsAt   time.Time // when it took its slots
	slotWait  time.Time // it found no slot free: it asks again then
	throttled bool      // counted as held for a limit since it last started
	inScopes  bool      // its attempt started and has not ended; guarded by the flow control's lock
	// deferAfter: SQS refused its copy while a pause held it; it is not
	// deferred for the pause again before then.
	deferAfter time.Time
	// verdictBy: failing as an unavailable downstream does on its last
	// receive (first at heldSince), it is held until then for a pause to
	// find an outage.
	heldSince, verdictBy time.Time
	// started is when its attempt started, for the ledger's history.
	started time.Time
	// expiryTold: held on a FIFO queue near the end of what SQS keeps
	// for it, it was logged.
	expiryTold bool

	// Guarded by b.mu; st is written only by the batch's transitions.
	st           state
	why          error     // why it was lost
	leaseUntil   time.Time // its lease holds until then at least (monotonic)
	visibleUntil time.Time // it stays out of sight until then at least (monotonic)
	cancel       context.CancelCauseFunc
}

func (j *job) id() string { return aws.ToString(j.msg.MessageId) }

func (j *job) groupID() string {
	return j.msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
}

// dispatch derives keys, claims the keyed messages in one ledger commit and
// starts their handling. It does not wait for the work. The batch keeps the
// messages out of sight from the receive (sent is when it was sent) until
// each has ended.
func (w *Worker) dispatch(ctx, workCtx context.Context, sent time.Time, msgs []types.Message, jobs *sync.WaitGroup) {
	all := make([]*job, len(msgs))
	for i, m := range msgs {
		j := &job{msg: m, body: []byte(aws.ToString(m.Body))}
		j.receives, _ = strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
			j.sent = time.UnixMilli(ms)
		}
		all[i] = j
		j.opened = w.keyer.open(j.body, m.MessageAttributes)
	}
	b := w.keepBatch(sent, all)
	// The key needs the payload: a pointer's is read from S3 first, and a
	// message whose payload cannot be read is not claimed.
	w.readPayloads(ctx, all)
	var reqs []ledger.ClaimRequest
	var keyed []*job
	for _, j := range all {
		if j.payloadErr != nil {
			continue
		}
		j.key, j.keyErr = w.keyer.deriveOpened(j.opened, j.msg.Attributes)
		if j.keyErr != nil {
			continue
		}
		if !w.hold(j, all) {
			j.here = true
			continue
		}
		j.owner = w.newOwner()
		reqs = append(reqs, ledger.ClaimRequest{Key: j.key.key, Fingerprint: j.key.fingerprint, Owner: j.owner,
			Lease: w.cfg.VisibilityTimeout, MessageID: j.id()})
		keyed = append(keyed, j)
	}
	if err := w.claim(ctx, keyed, reqs); err != nil {
		// Nothing was claimed, or the outcome is unknown: every keyed
		// message comes back after a back-off, and the ledger may work
		// again by then. A claim that was written after all is this
		// process's, on no work: its redelivery takes it over. On a FIFO
		// queue the whole batch comes back, so that no message of a group
		// is dead-lettered before those ahead of it run.
		w.log.Error("ledger claim failed: leaving the batch for redelivery", "error", err, "messages", len(keyed))
		if w.queue.fifo {
			keyed = all
		}
		b.giveBack(keyed, false, w.cfg.MinBackoff)
		for _, j := range all {
			if st, _ := b.state(j); st == received {
				jobs.Add(1)
				go w.processAlone(ctx, workCtx, j, jobs)
			}
		}
		return
	}
	if ctx.Err() != nil {
		// The stop came while the claims were being written: none of
		// this batch has started, so all of it goes back, but for what a
		// pause holds near the redrive's receive count: given back, its
		// next receive would be its last.
		back := all[:0:0]
		for _, j := range all {
			if st, _ := b.state(j); st != waiting || !w.deferAtStop(j) || !w.deferMsg(j, w.cfg.Flow.ProbeMax, "held for flow control at a stop, near the redrive's receive count") {
				back = append(back, j)
			}
		}
		b.giveBack(back, false, 0)
		return
	}
	var claimed []*job
	for _, j := range keyed {
		if st, _ := b.state(j); st == waiting {
			claimed = append(claimed, j)
		}
	}
	excess := w.flow.reserve(ctx, claimed, true)
	if !w.queue.fifo {
		// Those deferred wait for their turns, taken after the others
		// started.
		for _, j := range all {
			if !slices.Contains(excess.deferred(), j) {
				jobs.Add(1)
				go w.processAlone(ctx, workCtx, j, jobs)
			}
		}
		w.flow.takeTurns(ctx, excess)
		for _, j := range excess.deferred() {
			jobs.Add(1)
			go w.processAlone(ctx, workCtx, j, jobs)
		}
		return
	}
	// FIFO: the messages of one group run in order, one at a time; those
	// behind the first wait, kept by the batch, and go back at a stop.
	var order []string
	groups := map[string][]*job{}
	for _, j := range all {
		g := j.groupID()
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], j)
	}
	for _, g := range order {
		group := groups[g]
		w.stats.groupWaited.Add(int64(len(group) - 1))
		jobs.Go(func() { w.processGroup(ctx, workCtx, group) })
	}
}

// claim claims the keyed jobs' operations (reqs) in one ledger call,
// bounded by claimTimeout, and records the outcomes in the jobs. Jobs that
// are not Claimed let go of their keys. On error no job is claimed, and
// none holds its key.
func (w *Worker) claim(ctx context.Context, keyed []*job, reqs []ledger.ClaimRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.claimTimeout())
	claims, err := w.ledger.ClaimBatch(cctx, reqs)
	cancel()
	if err != nil {
		w.claimFailed(err)
		for _, j := range keyed {
			w.letGo(j)
		}
		return err
	}
	w.claimsRecorded()
	for i, j := range keyed {
		w.claimed(j, claims[i], start)
	}
	return nil
}

// claimed records c, j's claim by a call that started at start.
func (w *Worker) claimed(j *job, c ledger.Claim, start time.Time) {
	j.claim = c
	if c.Outcome == ledger.Claimed {
		j.b.claimed(j, start)
	} else {
		w.letGo(j)
	}
}

// claimTimeout bounds a claim call (and a release): half the visibility
// timeout, at least five seconds. The batch keeps the messages out of
// sight meanwhile; a claim that takes longer is taken as failed, its
// outcome unknown (a claim written after all is taken over when its
// message comes back).
func (w *Worker) claimTimeout() time.Duration {
	return max(w.cfg.VisibilityTimeout/2, 5*time.Second)
}

// newOwner returns a new owner token of this process.
func (w *Worker) newOwner() string {
	return w.ownerID + "/" + strconv.FormatUint(w.claimN.Add(1), 10)
}

// ownedHere reports whether owner is a token of this process.
func (w *Worker) ownedHere(owner string) bool {
	return len(owner) > len(w.ownerID) && owner[len(w.ownerID)] == '/' && owner[:len(w.ownerID)] == w.ownerID
}

// processGroup handles one FIFO group's messages in order. At the first
// message that does not end settled or dead-lettered, or when the worker
// stops, the rest are given back unstarted so they cannot run out of
// order. The messages waiting behind the one running are kept by their
// batch, so that none comes back (raising its receive count towards the
// dead-letter queue) while it waits its turn; one whose claim is lost
// meanwhile never starts.
func (w *Worker) processGroup(ctx, workCtx context.Context, group []*job) {
	for i, j := range group {
		if ctx.Err() != nil {
			j.b.giveBack(group[i:], true, 0)
			return
		}
		if st := w.process(ctx, workCtx, j); st != settled && st != deadLettered {
			j.b.giveBack(group[i+1:], false, 0)
			return
		}
	}
}

// giveBack gives back messages that never started, whose claims are refs:
// the claims are released in the ledger, in one call, and the messages
// become visible after wait (at once, mostly).
func (w *Worker) giveBack(js []*job, refs []ledger.ClaimRef, wait time.Duration) {
	if len(refs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), w.claimTimeout())
		errs := w.ledger.ReleaseBatch(ctx, refs)
		cancel()
		for i, err := range errs {
			if err != nil {
				w.log.Warn("release claim failed", "key", refs[i].Key, "error", err)
			}
		}
	}
	if len(js) == 0 {
		return
	}
	msgs := make([]types.Message, len(js))
	for i, j := range js {
		msgs[i] = j.msg
	}
	w.stats.givenBack.Add(int64(len(js)))
	w.makeVisible(msgs, js[0].b.received, wait)
}

// processAlone processes a message of a standard queue, then marks jobs
// done. It is started with a go statement rather than jobs.Go, which would
// wrap it in another closure for every message.
func (w *Worker) processAlone(ctx, workCtx context.Context, j *job, jobs *sync.WaitGroup) {
	defer jobs.Done()
	w.process(ctx, workCtx, j)
}

// process takes one message to its end according to its key and claim,
// and returns that end.
func (w *Worker) process(ctx, workCtx context.Context, j *job) state {
	log := newJobLog(w.log, j.id())
	b := j.b
	// A copy of an operation at work in this process (for another receive,
	// or under another message's claim of this one) waits for it here, out
	// of sight, and is then claimed: given back, it would come back every
	// recheck while the operation runs or is held, its receive count
	// running up towards the redrive. At its last receive it is deferred
	// instead (standard queues): kept here, it would be left to the
	// redrive if this process were killed meanwhile.
	if j.here || j.claim.Err == nil && j.claim.Outcome == ledger.InProgress && w.ownedHere(j.claim.Record.Owner) {
		if w.isActive(j.key.key) && w.receivedLast(j) && w.deferMsg(j, w.recheck(), "a copy of an operation at work in this process, at its last receive") {
			return deferred
		}
		if w.awaitKey(ctx, j) && w.reclaim(ctx, j, &log) {
			j.here = false
			if st, _ := b.state(j); st == waiting {
				w.flow.reserve(ctx, []*job{j}, false)
			}
		}
	}
	if st, _ := b.state(j); st != received {
		if st == waiting {
			log = log.withKey(j.key.key, j.claim.Record.Attempts+1)
			if j.claim.Takeover {
				w.stats.takeovers.Add(1)
				log.Warn("took over an operation whose lease had lapsed: its previous attempt may have been cut off, or may still be running on a host that stopped answering")
			}
			return w.run(ctx, workCtx, j, &log)
		}
		return w.notStarted(j, &log) // ended by a beat or a stop meanwhile
	}
	back := func(wait time.Duration, msg string, args ...any) state {
		if !w.comeBack(j, givenBack, wait) {
			return b.ended(j)
		}
		w.stats.inProgressElsewhere.Add(1)
		log.Info(msg, append(args, "retry_in", wait)...)
		return givenBack
	}
	switch {
	case j.here:
		return back(w.recheck(), "operation already running in this process: look again later", "key", j.key.key)
	case j.payloadErr != nil:
		return w.payloadFailed(j, &log)
	case j.keyErr != nil:
		w.stats.keyless.Add(1)
		log.Warn("message has no usable operation key: rejected", "reason", j.keyErr)
		return w.deadLetter(j, j.keyErr.Error(), &log) // it begins "no operation key: "
	case j.claim.Err != nil:
		// The ledger cannot tell what became of the operation: running it
		// might run it twice, leaving it would bring it back until SQS's
		// redrive. It waits in the dead-letter queue for an operator.
		w.stats.unreadable.Add(1)
		log.Error("the operation's ledger record cannot be read: dead-lettering the message; `sqsonce ledger forget` the key, then replay it",
			"key", j.key.key, "error", j.claim.Err)
		return w.deadLetter(j, "ledger record unreadable: "+j.claim.Err.Error(), &log)
	}
	log = log.withKey(j.key.key, j.claim.Record.Attempts+1)
	switch j.claim.Outcome {
	case ledger.AlreadyComplete:
		if !b.end(j, settled) {
			return b.ended(j)
		}
		w.stats.duplicates.Add(1)
		log.Debug("duplicate of a completed operation: deleted without running")
		w.deleteThen(j.msg, w.afterDelete(j, &log))
		return settled
	case ledger.InProgress:
		wait := w.untilLapsed(j.claim.LeaseLeft)
		if w.ownedHere(j.claim.Record.Owner) {
			// Our own claim, running here (a copy in the same batch, say):
			// it will be settled soon, so look again well before its
			// lease lapses.
			wait = min(wait, w.recheck())
		}
		if w.nearRedrive(j) && w.deferMsg(j, wait, "a copy of an operation in progress under another claim, near the redrive's receive count") {
			return deferred
		}
		return back(wait, "operation in progress under another claim: retry when it is settled or its lease lapses")
	case ledger.Conflict:
		w.stats.conflicts.Add(1)
		log.Error("operation key seen before with a different payload: rejected", "state", j.claim.Record.State)
		return w.deadLetter(j, "conflict: key seen before with a different payload", &log)
	case ledger.FailedPermanently:
		w.stats.redeliveredFailed.Add(1)
		log.Info("operation failed permanently before: dead-lettering the redelivery", "last_error", j.claim.Record.LastError)
		return w.deadLetter(j, "failed permanently: "+j.claim.Record.LastError, &log)
	}
	log.Error("unknown claim outcome: leaving the message", "outcome", j.claim.Outcome)
	w.comeBack(j, givenBack, w.cfg.MaxBackoff)
	return givenBack
}

// nearRedrive reports whether j, on a standard queue with a dead-letter
// queue, was received at least maxReceiveCount - 1 times: given back, its
// next receive could be its last (SQS's count is approximate).
func (w *Worker) nearRedrive(j *job) bool {
	r := w.queue.maxReceiveCount // > 0 only with a dead-letter queue
	return !w.queue.fifo && r > 0 && j.receives >= r-1
}

// receivedLast reports whether j, on a standard queue with a dead-letter
// queue, was received maxReceiveCount times or more: unless it is settled
// by this receive, its next one is the redrive's.
func (w *Worker) receivedLast(j *job) bool {
	return w.nearRedrive(j) && j.receives >= w.queue.maxReceiveCount
}

// untilLapsed is the back-off of a delivery whose operation is in progress
// under a claim with left of its lease to run (by the ledger's clock): a
// second past it, bounded below by the recheck and above by SQS's limit, so
// that neither a lease about to lapse nor a clock that disagrees makes a
// delivery come back at once, again and again, towards the dead-letter
// queue.
func (w *Worker) untilLapsed(left time.Duration) time.Duration {
	return min(max(left+time.Second, w.recheck()), MaxVisibility)
}

// awaitKey waits while j's key is at work in this process for another
// message, j kept out of sight by its batch. It reports false when ctx
// ended or j ended meanwhile.
func (w *Worker) awaitKey(ctx context.Context, j *job) bool {
	if !w.isActive(j.key.key) {
		return true
	}
	t := time.NewTicker(keyPoll)
	defer t.Stop()
	for w.isActive(j.key.key) {
		if st, _ := j.b.state(j); st != received {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// keyPoll is how often a copy waiting for its operation at work in this
// process looks whether it has ended.
const keyPoll = 50 * time.Millisecond

// reclaim deals with a record in progress under one of this process's own
// claims that no job here works on, or with a copy of an operation that
// was at work here (j.here: not claimed yet). Either it is stale (a claim whose
// failure, release or outcome could not be recorded: the ledger failed at
// that moment), and nobody will settle it: its lease would send every
// redelivery back until it lapsed, each raising the receive count towards
// the dead-letter queue. Or it was the claim of another message of j's
// receive (a copy of j's operation), settled since j's claim was answered.
// reclaim claims the operation again for j in one conditional claim that
// supersedes this process's own claims (ledger.ClaimRequest.Supersede): it
// takes the stale claim over if it is still in progress, and otherwise
// answers as any claim. j then goes on with the new claim's outcome. When
// the ledger cannot do it now, j keeps its InProgress answer, to look
// again soon. It reports whether the ledger answered.
func (w *Worker) reclaim(ctx context.Context, j *job, log *jobLog) bool {
	prev := j.claim.Record.Owner
	if !w.hold(j, nil) {
		return false // another job here took the key meanwhile: it is running
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.claimTimeout())
	defer cancel()
	owner := w.newOwner()
	start := time.Now()
	cs, err := w.ledger.ClaimBatch(cctx, []ledger.ClaimRequest{{Key: j.key.key, Fingerprint: j.key.fingerprint, Owner: owner,
		Lease: w.cfg.VisibilityTimeout, MessageID: j.id(), Supersede: w.ownerID}})
	if err != nil {
		w.letGo(j)
		w.claimFailed(err)
		log.Warn("could not claim the operation again over this process's earlier claim of it: leaving the message",
			"key", j.key.key, "stale_owner", prev, "error", err)
		j.claim.LeaseLeft = 0
		return false
	}
	w.claimsRecorded()
	j.owner = owner
	w.claimed(j, cs[0], start)
	if cs[0].Reclaimed {
		w.stats.staleReclaimed.Add(1)
		log.Warn("took over this process's own stale claim of an operation it was not running (its failure or release could not be recorded)",
			"key", j.key.key, "stale_owner", prev)
	} else {
		log.Debug("the operation's work in this process ended since: claimed it again", "key", j.key.key, "outcome", cs[0].Outcome)
	}
	return true
}

// hold makes j the holder of its key in Worker.active and reports true,
// unless a job of another receive holds it. A job of batch (the same
// receive) that holds it already lets j go on to claim without holding:
// the ledger then answers j InProgress under that job's claim, or the same
// as that job (a duplicate, say).
func (w *Worker) hold(j *job, batch []*job) bool {
	w.activeMu.Lock()
	defer w.activeMu.Unlock()
	if h, ok := w.active[j.key.key]; ok {
		return h != j && slices.Contains(batch, h)
	}
	w.active[j.key.key] = j
	return true
}

// letGo gives up j's hold of its key, if it has one.
func (w *Worker) letGo(j *job) {
	w.activeMu.Lock()
	defer w.activeMu.Unlock()
	if w.active[j.key.key] == j {
		delete(w.active, j.key.key)
	}
}

func (w *Worker) isActive(key string) bool {
	w.activeMu.Lock()
	defer w.activeMu.Unlock()
	_, ok := w.active[key]
	return ok
}

// recheck is when a duplicate of work running in this process comes back
// to find it settled: the first back-off, at least a second, at most the
// lease.
func (w *Worker) recheck() time.Duration {
	return min(max(w.cfg.MinBackoff, time.Second), w.cfg.VisibilityTimeout)
}

// errHandlerTimeout is the cause of a handler's cancellation when it ran
// out of time.
var errHandlerTimeout = errors.New("handler timeout")

// run takes j, claimed and waiting, through its attempt: it waits until
// the ledger records and a handler is free, starts, runs the handler and
// records the outcome. It returns j's end.
func (w *Worker) run(ctx, workCtx context.Context, j *job, log *jobLog) state {
	// A beat that learns that the claim is lost cuts the attempt off.
	leaseCtx, cancelLease := context.WithCancelCause(workCtx)
	defer cancelLease(nil)
	defer w.flow.releaseSlots(j)
	if j.deferFor > 0 {
		return w.deferHeld(ctx, j, "the rate limit cannot start it within half the visibility timeout")
	}
	for {
		st, again := w.startAndRun(ctx, workCtx, j, log, leaseCtx, cancelLease)
		if !again {
			return st
		}
	}
}

// startAndRun waits until j can start, starts it and runs its attempt. It
// reports again when the attempt's failure left j waiting to run again
// (a deferral whose copy SQS refused), and j's end otherwise.
func (w *Worker) startAndRun(ctx, workCtx context.Context, j *job, log *jobLog, leaseCtx context.Context, cancelLease context.CancelCauseFunc) (_ state, again bool) {
	b := j.b
	for {
		if !w.await(ctx, j) {
			why := ""
			switch {
			case ctx.Err() != nil:
			case w.pausedNearRedrive(j):
				why = "held by a pause near the redrive's receive count, where a crash would leave it to the dead-letter queue"
			case w.heldTooLong(j):
				why = "held near the end of the queue's retention, or of the 12 hours SQS keeps it out of sight"
			}
			if why != "" {
				if w.deferMsg(j, w.cfg.Flow.ProbeMax, why) {
					return b.ended(j), false
				}
				j.deferAfter = time.Now().Add(pauseDeferRetry) // held meanwhile
				continue
			}
			if ctx.Err() != nil && w.deferAtStop(j) {
				j.deferFor = w.cfg.Flow.ProbeMax
				return w.deferHeld(ctx, j, "held for flow control at a stop, near the redrive's receive count"), false
			}
			if ctx.Err() != nil {
				b.giveBack([]*job{j}, true, 0)
			}
			return w.notStarted(j, log), false
		}
		err := b.start(leaseCtx, j, cancelLease)
		if err == nil {
			break
		}
		<-w.handlers
		if errors.Is(err, errGateDown) || errors.Is(err, errHeld) {
			continue
		}
		if errors.Is(err, errNoSlot) {
			w.flow.throttle(j) // held for the limit: no attempt counted
			j.slotWait = time.Now().Add(slotRetry)
			continue
		}
		if errors.Is(err, errTokenLate) {
			if w.flow.reserve(ctx, []*job{j}, false); time.Until(j.notBefore) > w.flow.slotsWhile() {
				w.flow.releaseSlots(j) // not held idle for long
			}
			continue
		}
		if st, _ := b.state(j); st == starting {
			log.Warn("could not confirm the claim's lease before starting the work: giving the message back for later", "error", err, "retry_in", w.cfg.MinBackoff)
			b.giveBack([]*job{j}, false, w.cfg.MinBackoff)
		}
		return w.notStarted(j, log), false
	}
	// The handler's room is held until the message has ended: its
	// completion durable, or its failure dealt with.
	defer func() { <-w.handlers }()
	body := j.opened.payload
	if w.cfg.Body == BodyAsReceived {
		body = j.body
	}
	m := &Message{
		Key:             j.key.key,
		Body:            body,
		MessageID:       j.id(),
		QueueURL:        w.cfg.QueueURL,
		Attempt:         j.claim.Record.Attempts + 1,
		GroupID:         j.groupID(),
		DeduplicationID: j.msg.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)],
		Attributes:      stringAttributes(j.opened.attrs),
		Owner:           j.owner,
	}
	m.ReceiveCount, m.SentAt = j.receives, j.sent
	producer := producerContext(m, j.msg.Attributes, log)
	w.stats.claimed.Add(1)
	w.flow.began(j)
	hctx, cancel := context.WithTimeoutCause(leaseCtx, w.cfg.HandlerTimeout, errHandlerTimeout)
	defer cancel()
	start := w.now()
	j.started = start
	hctx, span := w.traceAttempt(hctx, m, producer)
	err := w.handle(hctx, m)
	elapsed := w.now().Sub(start)
	w.metrics.handlerDuration(outcome(err, hctx)).Observe(elapsed.Seconds())
	next := completing
	if err != nil {
		next = failed
	}
	if !b.move(j, next, running) {
		w.flow.ended(ctx, j, true, errLeaseLost)
		w.stats.leaseLost.Add(1)
		log.Error("lost the operation's lease while running: another claim owns it now; leaving the message", "error", err)
		span.end(spanLeaseLost, err)
		return lost, false
	}
	done := log.withDuration(elapsed)
	outage := w.flow.ended(ctx, j, true, err)
	if err == nil {
		return w.complete(workCtx, j, m, &done, span), false
	}
	st := w.fail(ctx, workCtx, j, m, err, outage, &done, span)
	return st, st == waiting
}

// await waits, with j waiting, until the ledger records, flow control lets
// it start and a handler is free, takes the handler and moves j to
// starting. It reports false, holding no handler, when j ended meanwhile
// (a beat found its claim lost, a stop gave it back) or ctx ended.
func (w *Worker) await(ctx context.Context, j *job) bool {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		st, kick := j.b.state(j)
		if st != waiting || ctx.Err() != nil {
			return false
		}
		if open := w.gateOpen(); open != nil {
			select {
			case <-open:
			case <-kick:
			case <-ctx.Done():
			}
			continue
		}
		if ok, changed, due := w.flow.admit(j); !ok {
			if w.pausedNearRedrive(j) || w.heldTooLong(j) {
				return false
			}
			kept := w.keptUntil(j)
			if w.queue.fifo && !j.expiryTold && !time.Now().Before(kept) {
				// A FIFO message is never re-sent: it is held with its
				// group, and said so once.
				j.expiryTold = true
				w.log.Error("a FIFO message held by flow control nears the end of the queue's retention (or of the 12 hours SQS keeps it out of sight) and cannot be deferred: resume the intake, or it expires in SQS", "message_id", j.id(), "key", j.key.key, "group", j.groupID())
			}
			// Awake at its token's time, and in time to defer it.
			if !j.expiryTold && (due.IsZero() || kept.Before(due)) {
				due = kept
				if j.deferAfter.After(due) {
					due = j.deferAfter
				}
			}
			var timer <-chan time.Time
			if !due.IsZero() {
				if t == nil {
					t = time.NewTimer(time.Until(due))
				} else {
					t.Reset(time.Until(due))
				}
				timer = t.C
			}
			select {
			case <-changed:
			case <-timer:
			case <-kick:
			case <-ctx.Done():
			}
			continue
		}
		select {
		case w.handlers <- struct{}{}:
			if j.b.move(j, starting, waiting) {
				return true
			}
			<-w.handlers
		case <-kick:
		case <-ctx.Done():
		}
	}
}

// deferAtStop reports whether j, waiting when the worker stops, is
// deferred rather than given back: on a standard queue, when flow control
// holds it or the intake is paused, and its receive count nears the
// redrive's, so that a stop during an outage sends nothing to the
// dead-letter queue.
func (w *Worker) deferAtStop(j *job) bool {
	return w.nearRedrive(j) && w.flow.act && (w.flow.holds(j) || w.flow.pausedNow())
}

// pausedNearRedrive reports whether j, waiting, is held by a pause with
// its receive count near the redrive's, on a standard queue: it is then
// deferred at once, its copy's count starting again, so that a worker
// killed during the outage, which cannot defer at its stop, leaves
// nothing at its last receive for the redrive but the message kept for
// the next probe.
func (w *Worker) pausedNearRedrive(j *job) bool {
	if st, _ := j.b.state(j); st != waiting || time.Now().Before(j.deferAfter) {
		return false
	}
	return w.nearRedrive(j) && w.flow.pausing(j)
}

// heldTooLong reports whether j, waiting and held by flow control on a
// standard queue, nears the end of what SQS keeps for it (see
// keptUntil): it is then deferred, its copy's retention and visibility
// starting again, rather than left to expire (or show again) while held.
func (w *Worker) heldTooLong(j *job) bool {
	if w.queue.fifo || !w.flow.act || time.Now().Before(j.deferAfter) || time.Now().Before(w.keptUntil(j)) {
		return false
	}
	st, _ := j.b.state(j)
	return st == waiting && w.flow.holds(j)
}

// keptUntil is when a held message is deferred at the latest: a margin
// before SQS deletes it (its retention from when it was sent, in flight or
// not) or shows it again (12 hours from its receive, the longest it stays
// out of sight). The margin is a sixth of the retention, at most 10
// minutes.
func (w *Worker) keptUntil(j *job) time.Time {
	until := j.b.received.Add(MaxVisibility)
	if !j.sent.IsZero() && w.queue.retention > 0 {
		if end := j.sent.Add(w.queue.retention); end.Before(until) {
			until = end
		}
	}
	margin := 10 * time.Minute
	if w.queue.retention > 0 {
		margin = min(w.queue.retention/6, margin)
	}
	return until.Add(-margin)
}

// pauseDeferRetry is how long a message held by a pause stays held after
// SQS refused its copy before it is deferred again.
const pauseDeferRetry = 30 * time.Second

// deferHeld defers j, held, trying again while the worker runs when SQS
// does not take the copy (on AccessDenied, say: the message stays held,
// never deleted); at a stop it is given back.
func (w *Worker) deferHeld(ctx context.Context, j *job, why string) state {
	until := time.Now().Add(j.deferFor)
	for attempt := 1; ; attempt++ {
		if w.deferMsg(j, time.Until(until), why) {
			return j.b.ended(j)
		}
		if st, _ := j.b.state(j); st != waiting {
			return st // its claim lost, or given back, meanwhile: nothing left to defer
		}
		if sleep(ctx, backoff(attempt, time.Second, 30*time.Second)); ctx.Err() != nil {
			j.b.giveBack([]*job{j}, false, 0)
			return j.b.ended(j)
		}
	}
}

// notStarted returns the end of j, which did not start, saying why when
// its claim or receipt was lost.
func (w *Worker) notStarted(j *job, log *jobLog) state {
	j.b.mu.Lock()
	st, why := j.st, j.why
	j.b.mu.Unlock()
	switch {
	case st != lost:
	case errors.Is(why, errReceiptGone):
		w.stats.receiptLost.Add(1)
		log.Warn("the message's visibility lapsed while it waited and SQS no longer takes its receipt handle (it was received again, or moved to the dead-letter queue): not starting it here, and releasing its claim")
	default:
		w.stats.leaseLost.Add(1)
		log.Error("lost the operation's claim before its work started: another claim owns it now, or it is gone; leaving the message", "error", why)
	}
	return st
}

// outcome classes a handler result for the duration histogram.
func outcome(err error, hctx context.Context) handlerOutcome {
	if err == nil {
		return outcomeDone
	}
	var perm *PermanentError
	switch {
	case errors.Is(context.Cause(hctx), errLeaseLost):
		return outcomeLeaseLost
	case errors.As(err, &perm):
		return outcomePermanent
	}
	return outcomeRetry
}

// handle calls the handler, turning a panic into a retryable error.
func (w *Worker) handle(ctx context.Context, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return w.handler.Handle(ctx, m)
}

// complete records j's operation complete, durably, and only then queues
// the delete of its message. A completion that failed to commit (a shared
// store that is away, a full disk) is tried again while the worker runs,
// the message out of sight and its handler's room held (see
// recordOutcome). When it cannot be recorded the message is left, and its
// redelivery may run the work again.
func (w *Worker) complete(workCtx context.Context, j *job, m *Message, log *jobLog, span attemptSpan) state {
	c := ledger.Completion{Key: j.key.key, Owner: j.owner, Result: m.Result, Started: j.started, Payload: w.kept(m)}
	err := w.recordOutcome(workCtx, "completion", log, func() error { return w.recordComplete(j, c) })
	if err != nil {
		w.stats.completeFailed.Add(1)
		log.Error("work done but not recorded complete: leaving the message; its redelivery may run the work again", "error", err)
		span.end(spanCompleteFailed, err)
		if claimLost(err) {
			j.b.move(j, lost, completing)
			return lost
		}
		j.b.move(j, retrying, completing)
		return retrying
	}
	w.stats.completed.Add(1)
	log.Debug("operation complete")
	w.deleteThen(j.msg, w.afterDelete(j, log))
	j.b.move(j, settled, completing)
	span.end(spanComplete, nil)
	return settled
}

// kept is what the ledger keeps of m with its attempt's end: nil unless
// Config.KeepBody asks (the ledger bounds it).
func (w *Worker) kept(m *Message) *ledger.Payload {
	if !w.cfg.KeepBody {
		return nil
	}
	return &ledger.Payload{Body: m.Body, Attributes: m.Attributes}
}

// fail records j's failed attempt (err; outage when it is the outage's
// of the downstream rather than the operation's own, see flowCtl.ended)
// and lets the message come back after its back-off, which counts its own
// failures only. It moves the message to the dead-letter queue when the
// failure is permanent, or when it is the operation's own on the message's
// last receive before SQS's redrive, once the ledger recorded the failure;
// and on a standard queue it defers the message instead when the failure
// is the outage's and its receive count nears the redrive's: nothing
// reaches the dead-letter queue because of an outage.
func (w *Worker) fail(ctx, workCtx context.Context, j *job, m *Message, err error, outage bool, log *jobLog, span attemptSpan) state {
	var perm *PermanentError
	permanent := errors.As(err, &perm)
	f := ledger.Failure{Key: j.key.key, Owner: j.owner, Err: err.Error(), Permanent: permanent, Outage: outage,
		Started: j.started, Payload: w.kept(m)}
	record := func() error { return w.ledger.Fail(context.WithoutCancel(ctx), f) }
	redrive := w.queue.maxReceiveCount
	if outage && redrive > 0 && m.ReceiveCount >= redrive-1 && w.flow.act {
		// Its next receive could be its last. On a standard queue a copy
		// is sent first. When SQS refuses it (no sqs:SendMessage, say),
		// and always on a FIFO queue (a copy would join the tail of its
		// group), the message is held instead, its claim kept and its
		// failure not recorded, and runs again after its back-off once
		// flow control lets it: given back, it would reach the
		// dead-letter queue because of the outage.
		if !w.queue.fifo {
			j.deferFor = w.cfg.Flow.ProbeMax
			cerr := (&sqsSendCopy{w: w, j: j, delay: j.deferFor}).send()
			if cerr == nil {
				w.stats.retried.Add(1)
				ferr := record()
				if ferr != nil {
					log.Error("could not record the failure in the ledger: its claim is released with the original's delete", "error", ferr)
				}
				span.end(spanRetry, err)
				w.endDeferred(j, j.deferFor, "failed during an outage near the redrive's receive count", ferr != nil)
				return deferred
			}
			j.deferFor = 0
			log.Warn("could not defer the message near the redrive's receive count (send its copy): it stays held, its failure not recorded, and runs again once the downstream answers",
				"error", err, "copy_error", cerr, "receive_count", m.ReceiveCount)
		} else {
			log.Warn("failed during an outage near the redrive's receive count: the FIFO message stays held with its group, its failure not recorded, and runs again once the downstream answers",
				"error", err, "receive_count", m.ReceiveCount)
		}
		return w.holdAgain(j, err, outage, span)
	}
	if !outage && !permanent && w.flow.countsAsDown(err) && redrive > 0 && m.ReceiveCount >= w.verdictFrom() && w.queue.dlqURL != "" {
		// The downstream's kind of failure on the last receive (on a FIFO
		// queue from the one before it), with no outage known yet: the
		// operation's own, or the first of an outage whose pause trips
		// soon. It waits for the verdict held, running again after its
		// back-off: a pause makes its failures the outage's; still
		// failing once others succeeded meanwhile, or once the trip's
		// window has passed without a pause, it is dead-lettered as its
		// own on its last receive (given back before it).
		now := time.Now()
		if j.verdictBy.IsZero() {
			j.heldSince, j.verdictBy = now, now.Add(w.cfg.Flow.Trip.Window)
		}
		if now.Before(j.verdictBy) && !w.flow.answeredSince(j, j.heldSince) {
			log.Warn("failed near the redrive's receive count as an unavailable downstream does, no outage known yet: it stays held and runs again; if no outage is found by then, it goes the way of its own failures",
				"error", err, "receive_count", m.ReceiveCount, "until", j.verdictBy.Format(time.RFC3339))
			return w.holdAgain(j, err, outage, span)
		}
	}
	var ferr error
	if permanent {
		// Its dead-lettering waits for the record: tried again while the
		// message stays out of sight. A retryable failure comes back
		// anyway, and its redelivery settles a claim left in progress.
		w.stats.failedPermanently.Add(1)
		ferr = w.recordOutcome(workCtx, "failure", log, record)
	} else {
		w.stats.retried.Add(1)
		ferr = record()
	}
	outcome := spanRetry
	if permanent {
		outcome = spanPermanent
	}
	span.end(outcome, err)
	if ferr != nil {
		log.Error("could not record the failure in the ledger: the claim stays until this process sees the message again and takes it over, or its lease lapses", "error", ferr)
	}
	switch {
	case ferr != nil:
		// A permanent failure not recorded comes back too: dead-lettered
		// now, it would leave a record in progress behind, which a later
		// delivery or replay would run again once its lease lapsed.
	case permanent:
		log.Error("work failed permanently", "error", err)
		return w.deadLetter(j, "failed permanently: "+err.Error(), log)
	case !outage && redrive > 0 && m.ReceiveCount >= redrive && w.queue.dlqURL != "":
		log.Warn("work failed on the message's last receive before the redrive: dead-lettering it", "error", err, "receive_count", m.ReceiveCount)
		return w.deadLetter(j, fmt.Sprintf("failed on receive %d of %d: %v", m.ReceiveCount, redrive, err), log)
	}
	wait := w.retryWait(j, err, outage)
	if workCtx.Err() != nil {
		wait = 0 // cut off by shutdown: let another worker take it now
	}
	log.Warn("work failed: will retry", "error", err, "retry_in", wait, "permanent", permanent, "outage", outage)
	w.comeBack(j, retrying, wait)
	return retrying
}

// verdictFrom is the receive from which a failure of the downstream's
// kind, with no outage known yet, is held for the verdict: the last
// before the redrive; on a FIFO queue the one before it, since a FIFO
// message cannot be deferred, and a worker stopped while it holds one on
// its last receive leaves it to the redrive.
func (w *Worker) verdictFrom() int {
	if w.queue.fifo {
		return max(w.queue.maxReceiveCount-1, 1)
	}
	return w.queue.maxReceiveCount
}

// holdAgain keeps j, whose attempt failed with err, in hand: back to
// waiting, its claim kept and its failure not recorded, to run again after
// its back-off (with new rate tokens) once flow control lets it.
func (w *Worker) holdAgain(j *job, err error, outage bool, span attemptSpan) state {
	span.end(spanRetry, err)
	j.notBefore, j.tokens = time.Now().Add(w.retryWait(j, err, outage)), false
	if j.b.move(j, waiting, failed) {
		w.flow.releaseSlots(j) // it takes fresh ones to run again
		return waiting
	}
	return j.b.ended(j)
}

// retryWait is the back-off of j after its attempt failed with err: by
// its own failures (an outage's do not count), or as a Retry-After asks.
func (w *Worker) retryWait(j *job, err error, outage bool) time.Duration {
	own := j.claim.Record.OwnFailures
	if !outage {
		own++
	}
	var re *RetryError
	if errors.As(err, &re) {
		// Bounded below as a recheck is: neither an endpoint's clock nor
		// a Retry-After of 0 makes the message come back at once.
		return min(max(re.After, w.recheck()), MaxVisibility)
	}
	return backoff(max(own, 1), w.cfg.MinBackoff, w.cfg.MaxBackoff)
}

// comeBack ends j in next (retrying, givenBack), then, once no beat that
// covers it is in flight (its change could undo this one), makes it
// visible after wait. It reports false, doing nothing, when j ended
// otherwise meanwhile.
func (w *Worker) comeBack(j *job, next state, wait time.Duration) bool {
	if !j.b.end(j, next) {
		return false
	}
	j.b.awaitBeat(context.Background(), j)
	w.makeVisible([]types.Message{j.msg}, j.b.received, wait)
	return true
}

// recordOutcome makes call, which records an attempt's outcome (what of
// outcome: "completion", "failure"), until the ledger takes it, the answer
// cannot change by asking again, or the worker stops (the end of the
// shutdown grace), and returns the last error. The message stays out of
// sight meanwhile, so that no redelivery runs the work again, and no new
// work starts while the ledger cannot record (see gate).
func (w *Worker) recordOutcome(workCtx context.Context, what string, log *jobLog, call func() error) error {
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil {
			if attempt > 1 {
				w.claimsRecorded()
			}
			return nil
		}
		if !mayChange(err) || workCtx.Err() != nil {
			return err
		}
		if attempt == 1 {
			w.outcomeFailed(what, err)
		}
		if attempt == 4 {
			log.Warn("work ended, its "+what+" not recorded yet: trying again while the message stays out of sight", "error", err)
		}
		sleep(workCtx, backoff(attempt, 100*time.Millisecond, 5*time.Second))
	}
}

// mayChange reports whether a ledger call that failed with err may succeed
// when made again: a commit that failed (a full disk, an I/O error) may, an
// answer about the record or the ledger itself may not.
func mayChange(err error) bool {
	for _, final := range []error{ledger.ErrNotOwner, ledger.ErrNotFound, ledger.ErrState, ledger.ErrInvalidKey,
		ledger.ErrInvalidArgument, ledger.ErrCorrupt, ledger.ErrClosed} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

// sweepLoop removes expired ledger records every SweepInterval.
func (w *Worker) sweepLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := w.ledger.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("sweeping expired ledger records failed", "error", err, "removed", n)
		} else if n > 0 {
			w.log.Info("swept expired ledger records", "removed", n)
		}
	}
}

// backoff is min * 2^(attempt-1), capped at max.
func backoff(attempt int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func stringAttributes(attrs map[string]types.MessageAttributeValue) map[string]string {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		if v.StringValue != nil {
			out[k] = *v.StringValue
		}
	}
	return out
}
