package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// Keeping messages: every received batch has one keeper, which keeps the
// batch's messages out of sight and their claims' leases alive until each
// is settled, whether it runs, waits for a free handler, waits behind a
// running message of its FIFO group, or waits for its completion to be
// recorded. Each beat changes the visibility of all of them in one call
// (ten per call) and extends their leases in one ledger call, the two
// side by side, each bounded by the beat interval: a ledger call that hangs
// cannot hold back the visibility, nor one message's another's.
//
// The first beat is timed from the receive, not from when a message is
// handed to a handler: reading payloads from S3, claiming and waiting for
// a handler all count against the visibility timeout that the receive
// started.
//
// The keeper also knows, for each claimed message, until when its lease
// holds for sure (timed from the start of the call that set it, on this
// host's monotonic clock, so that neither the ledger's clock nor a wall
// clock step can stretch it) and whether the ledger said that another
// claim owns the operation. A message whose claim was lost never starts,
// and one whose lease may lapse before the next beat is confirmed first
// (see startable).
//
// On a FIFO queue it knows, too, until when each message stays out of
// sight for sure, and whether SQS refused a change of its visibility for
// the caller's fault: then the receipt handle no longer holds the message
// (its visibility lapsed, and it was received again or moved to the
// dead-letter queue by SQS's redrive), its turn in its group has passed to
// whoever holds it now, and, if it has not started, it never does.
type keeper struct {
	w     *Worker
	every time.Duration

	mu      sync.Mutex
	jobs    []*job // kept: not settled yet
	stopped bool   // no job left: no more beats
	t       *time.Timer
	due     time.Time
	beat    *beatRun // the beat in flight, if any
}

// beatRun is one beat in flight: the jobs it covers, and closed when done.
type beatRun struct {
	jobs map[*job]bool
	done chan struct{}
}

// kept is the part of a job that its keeper guards with its mutex.
type kept struct {
	member     bool      // kept by the keeper: not settled yet
	leased     bool      // claimed here: its lease is extended
	leaseUntil time.Time // the lease holds until then at least (monotonic)
	lost       bool      // the ledger said another claim owns the operation, or it is gone
	// visibleUntil: the message stays out of sight until then at least
	// (monotonic, timed from the start of the call that set it).
	visibleUntil time.Time
	// receiptGone: SQS refused a change of its visibility for the
	// caller's fault (see keeper).
	receiptGone bool
	waiting     bool // not started, and would be given back at a stop
	behind      bool // waiting behind a message of its FIFO group
	givenBack   bool
	cancel      context.CancelCauseFunc // cuts the running attempt off when the claim is lost
}

// keepBatch starts keeping js, received at received.
func (w *Worker) keepBatch(received time.Time, js []*job) *keeper {
	k := &keeper{w: w, every: w.beatEvery(), jobs: slices.Clone(js)}
	for _, j := range js {
		j.keep = k
		j.kept.member = true
		j.kept.visibleUntil = received.Add(w.cfg.VisibilityTimeout)
	}
	k.mu.Lock()
	k.due = received.Add(k.every)
	k.t = time.AfterFunc(time.Until(k.due), k.fire)
	k.mu.Unlock()
	return k
}

// beatEvery is the interval of the beats: a third of the visibility
// timeout, so that two beats in a row may fail before a message shows.
func (w *Worker) beatEvery() time.Duration {
	return max(w.cfg.VisibilityTimeout/3, 200*time.Millisecond)
}

// claimed records that j's claim was written, by a call that started at
// start: its lease holds until start + the lease at least. j waits to
// start from then on.
func (k *keeper) claimed(j *job, start time.Time) {
	k.mu.Lock()
	j.kept.leased = true
	j.kept.lost = false
	j.kept.waiting = true
	j.kept.leaseUntil = start.Add(k.w.cfg.VisibilityTimeout)
	k.mu.Unlock()
}

// setBehind marks j as waiting behind a message of its FIFO group (on is
// true), or not any more.
func (k *keeper) setBehind(j *job, on bool) {
	k.mu.Lock()
	j.kept.behind = on
	if on {
		j.kept.waiting = true
	}
	k.mu.Unlock()
}

// starting marks j, which holds a handler, as started, unless it was
// given back meanwhile (a stop gave its batch back): then it must not
// start, and starting reports false.
func (k *keeper) starting(j *job) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if j.kept.givenBack {
		return false
	}
	j.kept.waiting = false
	return true
}

// attempt registers the cancel function of j's running attempt, which the
// keeper calls with errLeaseLost when the ledger says another claim owns
// the operation. It reports false, registering nothing, when that is
// already known.
func (k *keeper) attempt(j *job, cancel context.CancelCauseFunc) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if j.kept.lost {
		return false
	}
	j.kept.cancel = cancel
	return true
}

// leave stops keeping j, which is settled. When wait is true it returns
// only once no beat that covers j is in flight, so that the caller's own
// visibility change (a back-off) cannot be undone by a beat's.
func (k *keeper) leave(j *job, wait bool) {
	k.mu.Lock()
	if !j.kept.member {
		k.mu.Unlock()
		return
	}
	j.kept.member = false
	j.kept.cancel = nil
	for i, m := range k.jobs {
		if m == j {
			k.jobs = append(k.jobs[:i], k.jobs[i+1:]...)
			break
		}
	}
	var inFlight chan struct{}
	if b := k.beat; b != nil && b.jobs[j] {
		inFlight = b.done
	}
	if len(k.jobs) == 0 && !k.stopped {
		k.stopped = true
		k.t.Stop()
	}
	k.mu.Unlock()
	if wait && inFlight != nil {
		<-inFlight
	}
}

// giveBack gives back js, whose work never started, unless given back
// already: their claims are released and they become visible after wait.
// With all set, every job of the batch that is waiting to start goes
// with them, so that a stop gives a batch back in one call. Their slots
// are their own goroutines' to free.
func (k *keeper) giveBack(js []*job, all bool, wait time.Duration) {
	k.mu.Lock()
	var out []*job
	take := func(j *job) {
		if j.kept.givenBack || !j.kept.member {
			return
		}
		j.kept.givenBack = true
		out = append(out, j)
	}
	for _, j := range js {
		take(j)
	}
	if all {
		for _, j := range k.jobs {
			if j.kept.waiting && !j.kept.lost {
				take(j)
			}
		}
	}
	k.mu.Unlock()
	for _, j := range out {
		k.leave(j, true)
	}
	k.w.giveBack(out, wait)
}

// startable decides whether j, claimed here, may start its work now. It
// may not when the ledger said another claim owns the operation (lost). A
// lease that may lapse before the next beat could extend it (a beat or
// two failed: the ledger is slow or away) is extended first, and the work
// starts only when that succeeds: work that starts on a lapsed lease may
// run beside a takeover. A beat that covers j and is on its way is waited
// for first: its answer may be that the claim is lost (its record was
// forgotten, say), and no work starts after an answer the worker has not
// read.
func (k *keeper) startable(ctx context.Context, j *job) (ok bool, err error) {
	k.mu.Lock()
	var inFlight chan struct{}
	if b := k.beat; b != nil && b.jobs[j] {
		inFlight = b.done
	}
	k.mu.Unlock()
	if inFlight != nil {
		select {
		case <-inFlight:
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
	if k.w.queue.fifo {
		if ok, err := k.inSight(ctx, j); !ok {
			return false, err
		}
	}
	k.mu.Lock()
	lost, left := j.kept.lost, time.Until(j.kept.leaseUntil)
	k.mu.Unlock()
	if lost {
		return false, errLeaseLost
	}
	if left > k.every {
		return true, nil
	}
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, k.every)
	errs := k.w.ledger.ExtendBatch(ectx, []ledger.ClaimRef{{Key: j.key.key, Owner: j.owner}}, k.w.cfg.VisibilityTimeout)
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case errs[0] == nil:
		j.kept.leaseUntil = start.Add(k.w.cfg.VisibilityTimeout)
		return !j.kept.lost, nil
	case claimLost(errs[0]):
		j.kept.lost = true
		return false, errLeaseLost
	}
	return false, errs[0]
}

// errReceiptGone says that SQS refused to change a message's visibility
// for the caller's fault: the receipt handle no longer holds the message.
var errReceiptGone = errors.New("the message's receipt handle no longer holds it: its visibility lapsed, and it was received again or moved to the dead-letter queue")

// inSight decides whether FIFO message j still holds its turn in its
// group: SQS has not refused a change of its visibility, and it stays out
// of sight for at least another beat interval. A visibility that may lapse
// before the next beat could extend it (a beat or two failed) is extended
// first, and the work starts only when that succeeds; a message whose
// visibility lapsed may be received by another worker, or moved to the
// dead-letter queue, and the messages of its group behind it then run
// elsewhere, before it.
func (k *keeper) inSight(ctx context.Context, j *job) (bool, error) {
	k.mu.Lock()
	gone, left := j.kept.receiptGone, time.Until(j.kept.visibleUntil)
	k.mu.Unlock()
	if gone {
		return false, errReceiptGone
	}
	if left > k.every {
		return true, nil
	}
	start := time.Now()
	vctx, cancel := context.WithTimeout(ctx, k.every)
	again, refused := k.w.changeVisibilityOf(vctx, []types.Message{j.msg}, k.w.cfg.VisibilityTimeout)
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case len(refused) > 0:
		j.kept.receiptGone = true
		return false, errReceiptGone
	case len(again) > 0:
		return false, errors.New("could not confirm that the message is still out of sight")
	}
	if j.kept.receiptGone { // a beat learnt it meanwhile
		return false, errReceiptGone
	}
	j.kept.visibleUntil = start.Add(k.w.cfg.VisibilityTimeout)
	return true, nil
}

// receiptGone reports whether SQS refused a change of j's visibility for
// the caller's fault.
func (k *keeper) receiptGone(j *job) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return j.kept.receiptGone
}

// claimLost reports whether a ledger error about a claim says that it is
// no longer this claim's: another owns the operation, or it is gone or
// settled.
func claimLost(err error) bool {
	return errors.Is(err, ledger.ErrNotOwner) || errors.Is(err, ledger.ErrState) || errors.Is(err, ledger.ErrNotFound)
}

func (k *keeper) fire() {
	k.mu.Lock()
	if k.stopped || len(k.jobs) == 0 {
		k.mu.Unlock()
		return
	}
	run := &beatRun{jobs: make(map[*job]bool, len(k.jobs)), done: make(chan struct{})}
	msgs := make([]types.Message, 0, len(k.jobs))
	beatJobs := make([]*job, 0, len(k.jobs)) // the job of each of msgs
	var leased []*job
	var refs []ledger.ClaimRef
	behind := false
	for _, j := range k.jobs {
		run.jobs[j] = true
		behind = behind || j.kept.behind
		msgs = append(msgs, j.msg)
		beatJobs = append(beatJobs, j)
		if j.kept.leased && !j.kept.lost {
			leased = append(leased, j)
			refs = append(refs, ledger.ClaimRef{Key: j.key.key, Owner: j.owner})
		}
	}
	k.beat = run
	k.w.beats.Add(1) // Run waits for it
	k.mu.Unlock()
	defer k.w.beats.Done()

	w := k.w
	start := time.Now()
	bctx, cancel := context.WithTimeout(context.Background(), k.every)
	var errs []error
	var unchanged, refused []int
	var calls sync.WaitGroup
	calls.Go(func() { unchanged, refused = w.changeVisibilityOf(bctx, msgs, w.cfg.VisibilityTimeout) })
	if len(refs) > 0 {
		calls.Go(func() { errs = w.ledger.ExtendBatch(bctx, refs, w.cfg.VisibilityTimeout) })
	}
	calls.Wait()
	cancel()

	var lost []context.CancelCauseFunc
	k.mu.Lock()
	k.beat = nil
	close(run.done)
	w.stats.heartbeats.Add(int64(len(msgs) - len(unchanged) - len(refused)))
	if len(unchanged) > 0 {
		w.log.Warn("heartbeat: extending the visibility of kept messages failed: the next beat tries again", "messages", len(unchanged))
	}
	for _, i := range refused {
		beatJobs[i].kept.receiptGone = true
	}
	failed := make([]bool, len(msgs))
	for _, i := range slices.Concat(unchanged, refused) {
		failed[i] = true
	}
	for i, j := range beatJobs {
		if !failed[i] {
			j.kept.visibleUntil = start.Add(w.cfg.VisibilityTimeout)
		}
	}
	if behind {
		w.stats.groupWaitBeats.Add(1)
	}
	for i, j := range leased {
		if !j.kept.member {
			continue // settled meanwhile: its answer says nothing
		}
		switch err := errs[i]; {
		case err == nil:
			j.kept.leaseUntil = start.Add(w.cfg.VisibilityTimeout)
		case claimLost(err):
			j.kept.lost = true
			if j.kept.cancel != nil {
				lost = append(lost, j.kept.cancel)
			}
			w.log.Warn("heartbeat: the claim is no longer this worker's", "key", j.key.key, "message_id", j.id(), "error", err)
		default:
			w.log.Warn("heartbeat: extending the lease failed", "key", j.key.key, "message_id", j.id(), "error", err)
		}
	}
	if !k.stopped {
		k.due = k.due.Add(k.every)
		if now := time.Now(); k.due.Before(now) {
			k.due = now
		}
		k.t.Reset(time.Until(k.due))
	}
	k.mu.Unlock()
	for _, c := range lost {
		c(errLeaseLost)
	}
}
