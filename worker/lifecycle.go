package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// state is where a received message stands in this worker (see the
// package doc's diagram). Only the transition methods of its batch change
// it, each checking the state it leaves, under the batch's lock.
type state uint8

const (
	// received: in hand, its key and claim being worked out; an unclaimed
	// message of a FIFO group also waits for its turn here. The poller
	// moves a message in; dispatch and the message's own goroutine move
	// it on.
	received state = iota
	// claimed: the ledger holds this worker's claim of its operation.
	claimed
	// waiting: claimed, and waiting to start: for its turn in its FIFO
	// group, a free handler, or a ledger that records again.
	waiting
	// starting: it holds a handler, and its gate, lease and (FIFO) receipt
	// are checked; a ledger that cannot record sends it back to waiting.
	starting
	// running: its handler runs; the attempt is counted.
	running
	// completing: the handler succeeded; the completion is being recorded.
	// It keeps its handler until the completion is durable.
	completing
	// failed: the handler failed; the failure is being recorded.
	failed

	// The ends: the message is out of this worker's hands.

	// settled: its completion is durable and its delete queued, or it was
	// a duplicate of a complete operation, deleted.
	settled
	// retrying: received again after a back-off: its attempt failed, or
	// its outcome could not be recorded.
	retrying
	// givenBack: it never started; its claim is released and it is
	// visible again, at once or after a wait.
	givenBack
	// deadLettered: moved to the dead-letter queue (or left for SQS's
	// redrive when it cannot be).
	deadLettered
	// lost: its claim (or, on a FIFO queue, its receipt handle) is no
	// longer this worker's: another claim took the operation over, its
	// record is gone, or SQS took the message back.
	lost
	// deferred: held for a limit or an outage longer than it could be
	// kept, it was sent again with a delay under its key, and deleted
	// once SQS took the copy; its claim is released. A received copy of
	// an operation in progress (under another claim near the redrive, or
	// at work in this process at its last receive) is deferred the same
	// way, unclaimed.
	deferred
)

var stateNames = [...]string{"received", "claimed", "waiting", "starting", "running", "completing", "failed",
	"settled", "retrying", "given back", "dead-lettered", "lost", "deferred"}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

func (s state) ended() bool { return s >= settled }

// holdsClaim reports whether a message in s holds a claim of its
// operation, whose lease the beats extend.
func (s state) holdsClaim() bool { return s >= claimed && s <= failed }

// transitions are the moves the package doc draws, and the only ones.
var transitions = map[state][]state{
	received:   {claimed, settled, givenBack, deadLettered, deferred},
	claimed:    {waiting, givenBack, lost},
	waiting:    {starting, givenBack, lost, deferred},
	starting:   {running, waiting, givenBack, lost},
	running:    {completing, failed, lost},
	completing: {settled, retrying, lost},
	failed:     {retrying, deadLettered, deferred, waiting},
}

// batch keeps the messages of one receive until each has ended: it holds
// their states under one lock, and its beats keep them out of sight and
// their claims' leases alive, whether they run, wait for a handler, wait
// behind a message of their FIFO group, or wait for their outcome to be
// recorded. Each beat changes the visibility of all of them in one call
// (ten per call) and extends their leases in one ledger call, side by
// side, each bounded by the beat interval, so that a ledger call that
// hangs cannot hold back the visibility.
//
// The first beat is timed from the receive: reading payloads, claiming
// and waiting for a handler all count against the visibility timeout that
// the receive started. For each message the batch knows until when its
// lease and its visibility hold for sure (timed from the start of the call
// that set them, on this host's monotonic clock, so that neither the
// ledger's clock nor a wall clock step can stretch them).
type batch struct {
	w        *Worker
	every    time.Duration
	received time.Time // when the receive was sent: SQS's 12 hours run from about then

	mu     sync.Mutex
	jobs   []*job        // not ended
	kick   chan struct{} // closed, and replaced, when a message is ended by another party
	t      *time.Timer
	due    time.Time
	beat   *beatRun // the beat in flight, if any
	active int      // messages starting or running
}

// beatRun is one beat in flight: the jobs it covers, and closed when done.
type beatRun struct {
	jobs map[*job]bool
	done chan struct{}
}

// keepBatch starts keeping js, received at received.
func (w *Worker) keepBatch(received time.Time, js []*job) *batch {
	b := &batch{w: w, every: w.beatEvery(), received: received, jobs: slices.Clone(js), kick: make(chan struct{})}
	for _, j := range js {
		j.b = b
		j.visibleUntil = received.Add(w.cfg.VisibilityTimeout)
	}
	b.mu.Lock()
	b.due = received.Add(b.every)
	b.t = time.AfterFunc(time.Until(b.due), b.fire)
	b.mu.Unlock()
	return b
}

// beatEvery is the interval of the beats: a third of the visibility
// timeout, so that two beats in a row may fail before a message shows.
func (w *Worker) beatEvery() time.Duration {
	return max(w.cfg.VisibilityTimeout/3, 200*time.Millisecond)
}

// move changes j's state to next if j is in one of from, and reports
// whether it did. A move the package doc does not draw is a bug.
func (b *batch) move(j *job, next state, from ...state) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.moveLocked(j, next, from...)
}

func (b *batch) moveLocked(j *job, next state, from ...state) bool {
	if !slices.Contains(from, j.st) {
		return false
	}
	if !slices.Contains(transitions[j.st], next) {
		panic(fmt.Sprintf("worker: no transition from %s to %s", j.st, next))
	}
	switch {
	case next == starting:
		b.active++
	case j.st == starting && next != running, j.st == running:
		b.active--
	}
	if next == completing {
		// Its room for a message in hand goes back at once: a receive
		// may bring the next ones while the completion commits. Its
		// handler's room is held until it ends, so nothing starts
		// while completions cannot be recorded.
		b.w.freeSlots(1)
	}
	old := j.st
	j.st = next
	if next.ended() {
		b.drop(j, old != completing)
	}
	return true
}

// drop stops keeping j, which has ended: no more beats for it, its key
// and, when room is true, its room in hand free for others.
func (b *batch) drop(j *job, room bool) {
	if i := slices.Index(b.jobs, j); i >= 0 {
		b.jobs = slices.Delete(b.jobs, i, i+1)
	}
	if len(b.jobs) == 0 {
		b.t.Stop()
	}
	b.w.letGo(j)
	b.w.flow.forget(j)
	b.w.inHand.Add(-1)
	if room {
		b.w.freeSlots(1)
	}
}

// end moves j into next, an end, from a state that may lead there, and
// reports whether it did: the message's own goroutine ends it.
func (b *batch) end(j *job, next state) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(transitions[j.st], next) && b.moveLocked(j, next, j.st)
}

// ended returns j's state, which another party ended.
func (b *batch) ended(j *job) state {
	st, _ := b.state(j)
	return st
}

// state returns j's state and the channel closed when another party
// (a beat, a stop) ends a message of the batch.
func (b *batch) state(j *job) (state, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return j.st, b.kick
}

// kicked wakes the goroutines that wait on the batch's messages; called
// with the lock held.
func (b *batch) kicked() {
	close(b.kick)
	b.kick = make(chan struct{})
}

// running reports whether messages of the batch are starting or running:
// their completions may come soon.
func (b *batch) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.active > 0
}

// claimed records that j's claim was written, by a call that started at
// start: its lease holds until start + the lease at least.
func (b *batch) claimed(j *job, start time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.moveLocked(j, claimed, received) {
		j.leaseUntil = start.Add(b.w.cfg.VisibilityTimeout)
		b.moveLocked(j, waiting, claimed)
	}
}

// giveBack gives back those of js that never started: their claims are
// released and they become visible after wait, in one call each. With all
// set, every message of the batch that waits to start goes with them, so
// that a stop gives a batch back in one call.
func (b *batch) giveBack(js []*job, all bool, wait time.Duration) {
	b.mu.Lock()
	var out []*job
	var refs []ledger.ClaimRef
	take := func(j *job) {
		had := j.st.holdsClaim()
		if b.moveLocked(j, givenBack, received, claimed, waiting, starting) {
			out = append(out, j)
			if had {
				refs = append(refs, ledger.ClaimRef{Key: j.key.key, Owner: j.owner})
			}
		}
	}
	for _, j := range js {
		take(j)
	}
	if all {
		for _, j := range slices.Clone(b.jobs) {
			if !b.w.deferAtStop(j) {
				take(j)
			}
		}
	}
	var inFlight chan struct{}
	if r := b.beat; r != nil && slices.ContainsFunc(out, func(j *job) bool { return r.jobs[j] }) {
		inFlight = r.done // its visibility change could undo this one
	}
	if len(out) > 0 {
		b.kicked()
	}
	b.mu.Unlock()
	if inFlight != nil {
		<-inFlight
	}
	b.w.giveBack(out, refs, wait)
}

// awaitBeat waits for a beat that covers j and is on its way: its answer
// may be that j's claim is lost, and no work starts after an answer the
// worker has not read.
func (b *batch) awaitBeat(ctx context.Context, j *job) error {
	b.mu.Lock()
	var inFlight chan struct{}
	if r := b.beat; r != nil && r.jobs[j] {
		inFlight = r.done
	}
	b.mu.Unlock()
	if inFlight != nil {
		select {
		case <-inFlight:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// Why a message in starting does not start.
var (
	errLeaseLost   = errors.New("lease lost to another claim")
	errReceiptGone = errors.New("the message's receipt handle no longer holds it: its visibility lapsed, and it was received again or moved to the dead-letter queue")
	errGateDown    = errors.New("the ledger cannot record: waiting for it")
	errHeld        = errors.New("flow control holds it (a pause came while it waited for a handler): waiting")
	errNoSlot      = errors.New("no concurrency slot free: waiting for one")
	errTokenLate   = errors.New("its rate token lapsed before it could start: taking another")
)

// slotRetry is how soon a message that found no concurrency slot free
// asks again.
const slotRetry = 200 * time.Millisecond

// start decides whether j, in starting, may run now, and moves it to
// running when it may, registering cancel, which cuts the attempt off
// when a beat learns that the claim is lost. It is the one place that
// looks at the gate, a pause, the lease and the receipt before a handler
// runs:
// while the ledger cannot record, j goes back to waiting (errGateDown); a
// lease, or a FIFO message's visibility, that may lapse before the next
// beat could renew it is renewed first, and j starts only when that
// succeeds (errLeaseLost, errReceiptGone: j is lost; another error: j
// stays in starting, to be given back). A pause that came while j waited
// for a handler sends it back to waiting too (errHeld).
func (b *batch) start(ctx context.Context, j *job, cancel context.CancelCauseFunc) error {
	w := b.w
	if err := b.awaitBeat(ctx, j); err != nil {
		return err
	}
	if down, _ := w.ledgerState(); down {
		b.move(j, waiting, starting)
		return errGateDown
	}
	// A pause may have come while it waited for a handler: then it is
	// held with the others, not run against what is down.
	if w.flow.pauseHolds(j) {
		b.move(j, waiting, starting)
		return errHeld
	}
	// Slots first: a message waiting for one lets its rate token lapse
	// rather than start on it late, and takes a new one once it holds
	// its slots.
	if ok, err := w.flow.takeSlots(ctx, j); err != nil {
		return err
	} else if !ok {
		b.move(j, waiting, starting)
		return errNoSlot
	}
	if w.flow.late(j) {
		b.move(j, waiting, starting)
		return errTokenLate
	}
	b.mu.Lock()
	st, lease, visible := j.st, time.Until(j.leaseUntil), time.Until(j.visibleUntil)
	b.mu.Unlock()
	if st != starting {
		return errLeaseLost
	}
	if w.queue.fifo && visible <= b.every {
		began := time.Now()
		vctx, stop := context.WithTimeout(ctx, b.every)
		again, refused := w.changeVisibilityOf(vctx, []types.Message{j.msg}, b.received, w.cfg.VisibilityTimeout)
		stop()
		switch {
		case len(refused) > 0:
			return b.lose(j, errReceiptGone)
		case len(again) > 0:
			return errors.New("could not confirm that the message is still out of sight")
		}
		b.mu.Lock()
		j.visibleUntil = began.Add(w.cfg.VisibilityTimeout)
		b.mu.Unlock()
	}
	if lease <= b.every {
		began := time.Now()
		ectx, stop := context.WithTimeout(ctx, b.every)
		err := w.ledger.ExtendBatch(ectx, []ledger.ClaimRef{{Key: j.key.key, Owner: j.owner}}, w.cfg.VisibilityTimeout)[0]
		stop()
		if claimLost(err) {
			return b.lose(j, errLeaseLost)
		} else if err != nil {
			return err
		}
		b.mu.Lock()
		j.leaseUntil = began.Add(w.cfg.VisibilityTimeout)
		b.mu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.moveLocked(j, running, starting) {
		if j.why != nil {
			return j.why
		}
		return errLeaseLost
	}
	j.cancel = cancel
	return nil
}

// lose moves j, not yet running, to lost for why, and returns why. A FIFO
// message whose receipt SQS no longer takes has its claim released for
// whoever holds the message now: its turn in its group has passed to
// them (another receive, or the dead-letter queue), and run here it could
// follow messages of its group that ran there.
func (b *batch) lose(j *job, why error) error {
	b.mu.Lock()
	moved := b.loseLocked(j, why)
	b.mu.Unlock()
	if moved && why == errReceiptGone {
		b.w.giveBack(nil, []ledger.ClaimRef{{Key: j.key.key, Owner: j.owner}}, 0)
	}
	return why
}

func (b *batch) loseLocked(j *job, why error) bool {
	if !b.moveLocked(j, lost, claimed, waiting, starting) {
		return false
	}
	j.why = why
	b.kicked()
	return true
}

// claimLost reports whether a ledger error about a claim says that it is
// no longer this claim's: another owns the operation, or it is gone or
// settled.
func claimLost(err error) bool {
	return errors.Is(err, ledger.ErrNotOwner) || errors.Is(err, ledger.ErrState) || errors.Is(err, ledger.ErrNotFound)
}

func (b *batch) fire() {
	b.mu.Lock()
	if len(b.jobs) == 0 {
		b.mu.Unlock()
		return
	}
	run := &beatRun{jobs: make(map[*job]bool, len(b.jobs)), done: make(chan struct{})}
	msgs := make([]types.Message, 0, len(b.jobs))
	kept := slices.Clone(b.jobs) // the job of each of msgs
	var leased []*job
	var refs []ledger.ClaimRef
	var slots []ledger.Slot
	behind := false
	for _, j := range kept {
		run.jobs[j] = true
		behind = behind || j.st == waiting && j.b.w.queue.fifo
		msgs = append(msgs, j.msg)
		if j.st.holdsClaim() {
			leased = append(leased, j)
			refs = append(refs, ledger.ClaimRef{Key: j.key.key, Owner: j.owner})
		}
		if j.st == running || j.st == completing || j.st == failed {
			slots = append(slots, j.slots...)
		}
	}
	b.beat = run
	b.w.beats.Add(1) // Run waits for it
	b.mu.Unlock()
	defer b.w.beats.Done()

	w := b.w
	began := time.Now()
	bctx, cancel := context.WithTimeout(context.Background(), b.every)
	var errs, slotErrs []error
	var unchanged, refused []int
	var calls sync.WaitGroup
	calls.Go(func() { unchanged, refused = w.changeVisibilityOf(bctx, msgs, b.received, w.cfg.VisibilityTimeout) })
	if len(refs) > 0 {
		calls.Go(func() { errs = w.ledger.ExtendBatch(bctx, refs, w.cfg.VisibilityTimeout) })
	}
	if len(slots) > 0 {
		calls.Go(func() { slotErrs = w.flow.l.ExtendSlots(bctx, slots, w.cfg.VisibilityTimeout) })
	}
	calls.Wait()
	cancel()
	w.slotsExtended(slots, slotErrs)

	var cut []context.CancelCauseFunc
	var gone []ledger.ClaimRef
	recorded := false
	b.mu.Lock()
	b.beat = nil
	close(run.done)
	w.stats.heartbeats.Add(int64(len(msgs) - len(unchanged) - len(refused)))
	if len(unchanged) > 0 {
		w.log.Warn("heartbeat: extending the visibility of kept messages failed: the next beat tries again", "messages", len(unchanged))
	}
	for i, j := range kept {
		switch {
		case slices.Contains(refused, i):
			// On a FIFO queue its turn in its group has passed to whoever
			// holds it now; a message that runs already goes on.
			if w.queue.fifo && b.loseLocked(j, errReceiptGone) {
				gone = append(gone, ledger.ClaimRef{Key: j.key.key, Owner: j.owner})
			}
		case !slices.Contains(unchanged, i):
			j.visibleUntil = began.Add(w.cfg.VisibilityTimeout)
		}
	}
	if behind {
		w.stats.groupWaitBeats.Add(1)
	}
	for i, j := range leased {
		switch err := errs[i]; {
		case err == nil:
			recorded = true
			j.leaseUntil = began.Add(w.cfg.VisibilityTimeout)
		case !claimLost(err):
			w.log.Warn("heartbeat: extending the lease failed", "key", j.key.key, "message_id", j.id(), "error", err)
		case j.st == running && errors.Is(err, ledger.ErrState):
			// Its handler recorded the outcome itself (pgtx commits the
			// completion in its transaction): it is about to return.
		default:
			// A message whose outcome is being recorded learns its fate
			// from that; one that ended meanwhile says nothing.
			moved := false
			if j.st == running {
				cut = append(cut, j.cancel)
				moved = b.moveLocked(j, lost, running)
				j.why = errLeaseLost
			} else {
				moved = b.loseLocked(j, errLeaseLost)
			}
			if moved {
				w.log.Warn("heartbeat: the claim is no longer this worker's", "key", j.key.key, "message_id", j.id(), "error", err)
			}
		}
	}
	if len(b.jobs) > 0 {
		b.due = b.due.Add(b.every)
		if now := time.Now(); b.due.Before(now) {
			b.due = now
		}
		b.t.Reset(time.Until(b.due))
	}
	b.mu.Unlock()
	for _, c := range cut {
		c(errLeaseLost)
	}
	w.giveBack(nil, gone, 0)
	if recorded {
		w.claimsRecorded() // the ledger records: waiting messages may start
	}
}

// slotsExtended logs the concurrency slots a beat could not extend. A
// slot no longer held (its lease lapsed while the ledger could not be
// reached, and another process may hold it now) leaves its attempt
// running above the limit until it ends: the log says so. Another error
// is tried again by the next beat.
func (w *Worker) slotsExtended(slots []ledger.Slot, errs []error) {
	failed := 0
	for i, err := range errs[:min(len(errs), len(slots))] {
		switch {
		case err == nil:
		case errors.Is(err, ledger.ErrNotOwner):
			w.log.Warn("heartbeat: a concurrency slot's lease lapsed and the slot is no longer this attempt's: the limit may be exceeded until the attempt ends",
				"pool", slots[i].Pool, "slot", slots[i].Index, "error", err)
		default:
			failed++
			if failed == 1 {
				w.log.Warn("heartbeat: extending concurrency slots failed: the next beat tries again", "slots", len(slots), "error", err)
			}
		}
	}
}
