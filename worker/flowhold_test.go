package worker_test

// Messages held by flow control: deferred before SQS would lose them,
// held when a pause comes while they wait for a handler, and deferred
// without a release the ledger refuses.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// A message held in hand during an automatic pause is deferred before
// the queue's retention ends (SQS deletes a message then, in flight or
// not: no message is left to expire while the worker holds it): here the
// queue keeps messages 60 s, and 62 s after they were sent none is held
// any more, each deferred, its copy's retention starting again; nothing is
// given back at the stop. (The local server does not expire messages, so
// the test looks at what the worker did, not at the queue.)
func TestFlowHold_DeferredBeforeRetentionEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{maxReceive: 10})
	if _, err := b.client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &b.queue.URL,
		Attributes: map[string]string{"MessageRetentionPeriod": "60"}}); err != nil {
		t.Fatal(err)
	}
	b.sendMany(10, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	sent := time.Now() // every message was sent before this
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.Flow.Rate, cfg.Flow.Burst = 1, 1 // one start a second: the rest wait in hand, held by flow control
	cfg.Flow.Trip = worker.Trip{Failures: 3, Keys: 2}
	cfg.Flow.ProbeMax = 5 * time.Minute // no probe (which would use up a held message) within the test
	w, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(context.Context, *worker.Message) error {
		return worker.Unavailable(2*time.Minute, errors.New("connection refused"))
	}))
	waitUntil(t, "the intake to pause with messages held", 30*time.Second, func() bool { h := w.Health(); return h.Paused && h.InFlight > 0 })
	time.Sleep(time.Until(sent.Add(62 * time.Second)))
	held, s := w.Health().InFlight, w.Stats()
	t.Logf("after %v: %d held in hand, stats %+v", time.Since(sent).Round(time.Second), held, s)
	if held > 0 && s.Deferred == 0 {
		t.Errorf("%d messages still held in hand %v after they were sent, past the queue's 60s MessageRetentionPeriod, none deferred: SQS has deleted them",
			held, time.Since(sent).Round(time.Second))
	}
	s = stop()
	if s.GivenBack > 0 {
		t.Errorf("at the stop %d messages were given back whose retention had ended: lost on SQS", s.GivenBack)
	}
}

// Messages that passed flow control's admit and wait for a free handler
// are held when a pause comes meanwhile: start asks flow control again.
// One handler, ten messages in hand, a pause after three failures (each
// ends, and trips, before the handler frees): three calls reach the
// downstream, not ten, and the seven others stay held in hand rather than
// run against what is down and go back to SQS, their receive count rising.
func TestFlowHold_PauseHoldsThoseWaitingForAHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 10})
	b.sendMany(10, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	var calls atomic.Int64
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.Concurrency = 1 // the other nine wait for the handler
	cfg.Flow.Trip = worker.Trip{Failures: 3, Keys: 2}
	cfg.Flow.ProbeMax = 5 * time.Minute
	w, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(context.Context, *worker.Message) error {
		calls.Add(1)
		return worker.Unavailable(2*time.Minute, errors.New("connection refused")) // first probe in 2 min
	}))
	waitUntil(t, "the intake to pause", 30*time.Second, func() bool { return w.Health().Paused })
	time.Sleep(3 * time.Second)
	s := stop()
	t.Logf("stats %+v", s)
	if n := calls.Load(); n > 3 {
		t.Errorf("%d calls to the downstream; the pause tripped at the third, and its first probe is 2 min away: want 3", n)
	}
}

// releaseWatch counts the releases the ledger refused as "not in
// progress".
type releaseWatch struct {
	*ledger.DB
	refused atomic.Int64
}

func (l *releaseWatch) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	errs := l.DB.ReleaseBatch(ctx, refs)
	for _, err := range errs {
		if errors.Is(err, ledger.ErrState) {
			l.refused.Add(1)
		}
	}
	return errs
}

// A failure of the outage near the redrive's receive count is deferred:
// the copy sent, the failure recorded (which ends the claim), the
// original deleted; no release follows, which the ledger would refuse
// (the record is no longer in progress) at the cost of a commit and a
// warning each.
func TestFlowHold_OutageDeferralReleasesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 2}) // each message's first receive is one short of the redrive
	l := &releaseWatch{DB: b.db}
	b.sendMany(6, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.Concurrency = 1
	cfg.Flow.Trip = worker.Trip{Failures: 2, Keys: 2}
	w, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(context.Context, *worker.Message) error {
		return worker.Unavailable(0, errors.New("connection refused"))
	}))
	waitUntil(t, "a deferral", 30*time.Second, func() bool { return w.Stats().Deferred > 0 })
	s := stop()
	t.Logf("stats %+v", s)
	if n := l.refused.Load(); n > 0 {
		t.Errorf("%d releases refused by the ledger (record not in progress) after %d deferrals: a claim whose failure was just recorded was released", n, s.Deferred)
	}
}
