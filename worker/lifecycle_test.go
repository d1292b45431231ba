package worker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// sendBatch sends bodies in one call, so that one receive brings them.
func (b *bundle) sendBatch(bodies ...string) {
	b.t.Helper()
	var entries []types.SendMessageBatchRequestEntry
	for i, body := range bodies {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body)})
	}
	out, err := b.client.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &b.queue.URL, Entries: entries})
	if err != nil || len(out.Failed) > 0 {
		b.t.Fatalf("send: %v, %+v", err, out)
	}
}

// completionLedger fails completions while fail is set, and counts the
// calls.
type completionLedger struct {
	*ledger.DB
	fail  atomic.Bool
	calls atomic.Int64
}

func (l *completionLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	l.calls.Add(1)
	if l.fail.Load() {
		errs := make([]error, len(cs))
		for i := range errs {
			errs[i] = errAway
		}
		return errs
	}
	return l.DB.CompleteBatch(ctx, cs)
}

// No work starts while the ledger cannot record completions, also not the
// messages received ahead and claimed already: a handler's room is taken
// until its message is settled, and a message starts only while the ledger
// records.
func TestWorker_NoStartWhileCompletionsFail(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 50})
	l := &completionLedger{DB: b.db}
	l.fail.Store(true)
	var bodies []string
	for i := range 5 {
		bodies = append(bodies, fmt.Sprintf(`{"id":"op-%d"}`, i))
	}
	b.sendBatch(bodies...)
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.Prefetch = 4
	cfg.VisibilityTimeout = 10 * time.Second
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	waitUntil(t, "a handler to run and its completion to be tried four times", 20*time.Second, func() bool {
		return len(b.runs.counts()) >= 1 && l.calls.Load() >= 4
	})
	if n := len(b.runs.counts()); n != 1 {
		t.Fatalf("%d operations ran while the ledger could not record completions, want 1 (the first): %v", n, b.runs.counts())
	}
	l.fail.Store(false)
	b.waitEmpty(60 * time.Second)
	s := stop()
	for key, n := range b.runs.counts() {
		if n != 1 {
			t.Errorf("%s ran %d times", key, n)
		}
	}
	if s.Completed != 5 {
		t.Fatalf("stats %+v", s)
	}
}

// ownCompletion is a ledger through which a handler records its own
// operation complete, as a pgtx handler does inside its transaction, and
// which counts the lease extensions that follow.
type ownCompletion struct {
	*ledger.DB
	after atomic.Int64 // extensions of a record complete already
}

func (l *ownCompletion) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	errs := l.DB.ExtendBatch(ctx, refs, lease)
	for _, err := range errs {
		if errors.Is(err, ledger.ErrState) {
			l.after.Add(1)
		}
	}
	return errs
}

// A handler that records its own completion (pgtx) and is still running
// when a beat tries to extend the lease of the record, complete now, is
// neither cancelled nor reported as having lost its claim.
func TestWorker_BeatAfterOwnCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	l := &ownCompletion{DB: b.db}
	logs := &handlerLogs{}
	cfg := b.config()
	cfg.VisibilityTimeout = time.Second
	cfg.Logger = logs.logger()
	var cancelled atomic.Bool
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		if err := b.db.Complete(ctx, ledger.Completion{Key: m.Key, Owner: m.Owner}); err != nil {
			return err
		}
		deadline := time.Now().Add(10 * time.Second)
		for l.after.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the beat's answer applied
		cancelled.Store(ctx.Err() != nil)
		return nil
	}))
	b.send(`{"id":"self"}`)
	b.waitEmpty(20 * time.Second)
	s := stop()
	if l.after.Load() == 0 {
		t.Fatal("no beat came while the handler ran after its completion: the test proves nothing")
	}
	if cancelled.Load() {
		t.Error("the handler's context was cancelled after it recorded its own completion")
	}
	if n := len(logs.records(t, "heartbeat: the claim is no longer this worker's")); n > 0 {
		t.Errorf("%d warnings that the claim was lost, for a claim its own handler completed", n)
	}
	if s.Completed != 1 || s.LeaseLost != 0 || b.runs.count("self") != 1 {
		t.Fatalf("ran %d times, stats %+v", b.runs.count("self"), s)
	}
}

// failingClaims fails the next n ClaimBatch calls, as a store that is away.
type failingClaims struct {
	*ledger.DB
	n atomic.Int32
}

func (l *failingClaims) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	if l.n.Add(-1) >= 0 {
		return nil, errAway
	}
	return l.DB.ClaimBatch(ctx, reqs)
}

// When the claims of a FIFO batch cannot be recorded, the whole batch comes
// back after the back-off, the keyless message of a group with the keyed
// ones ahead of it: it is not dead-lettered before them.
func TestWorker_FIFOClaimFailureKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 10})
	l := &failingClaims{DB: b.db}
	l.n.Store(1)
	var ran time.Time
	var mu sync.Mutex
	send := func(body string) {
		b.send(body, func(in *sqs.SendMessageInput) {
			in.MessageGroupId = aws.String("g")
			in.MessageDeduplicationId = aws.String(body)
		})
	}
	send(`{"id":"first"}`)
	send(`{"no":"key"}`)
	send(`{"id":"third"}`)
	cfg := b.config()
	cfg.MinBackoff = time.Second
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		if b.runs.add(m.Key) == 1 && m.Key == "first" {
			mu.Lock()
			ran = time.Now()
			mu.Unlock()
		}
		return nil
	}))
	waitUntil(t, "the keyless message in the dead-letter queue", 20*time.Second, func() bool { return b.dlqCount() == 1 })
	out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: &b.queue.DLQURL, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp},
	})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive from the dead-letter queue: %v, %+v", err, out)
	}
	var ms int64
	fmt.Sscan(out.Messages[0].Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], &ms)
	mu.Lock()
	first := ran
	mu.Unlock()
	if first.IsZero() || time.UnixMilli(ms).Before(first.Truncate(time.Millisecond)) {
		t.Fatalf("the keyless message was dead-lettered at %v, before the message ahead of it in its group ran (%v)",
			time.UnixMilli(ms).Format(time.StampMilli), first.Format(time.StampMilli))
	}
	b.waitEmpty(20 * time.Second)
	stop()
	if b.runs.count("first") != 1 || b.runs.count("third") != 1 {
		t.Fatalf("runs %v", b.runs.counts())
	}
}

// A stop gives back the messages that wait for a handler, in one call per
// batch, while their own goroutines end: run under the race detector, the
// two must not touch a message's bookkeeping unsynchronised.
func TestWorker_StopGivesBackWaiting(t *testing.T) {
	t.Parallel()
	for round := range 8 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			var bodies []string
			for i := range 10 {
				bodies = append(bodies, fmt.Sprintf(`{"id":"op-%d"}`, i))
			}
			b.sendBatch(bodies...)
			cfg := b.config()
			cfg.Concurrency = 1
			cfg.Prefetch = 9
			cfg.VisibilityTimeout = 10 * time.Second
			started := make(chan struct{}, 10)
			_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				b.runs.add(m.Key)
				started <- struct{}{}
				return nil
			}))
			<-started
			s := stop()
			// Received again once a receive that the stop cut off can no
			// longer be answered: within the poll's wait and a second.
			if back := b.receiveBack(cfg.WaitTime + 3*time.Second); int(s.Completed)+back != 10 {
				t.Fatalf("after the stop: %d completed, %d received again (want the rest); stats %+v", s.Completed, back, s)
			}
			st, err := b.db.Stats(context.Background())
			if err != nil || st.InProgress != 0 {
				t.Fatalf("claims left in progress after the stop: %+v, %v", st, err)
			}
		})
	}
}

// SQS keeps a message out of sight for at most 12 hours from its receive,
// extensions included: a wait asked for up to that limit from now is cut
// to what is left of it, rather than refused (the message would come back
// after the visibility timeout, again and again).
func TestWorker_VisibilityWithinTwelveHoursOfReceive(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 10})
	cfg := b.config()
	_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return worker.RetryAfter(12*time.Hour, errors.New("come back tomorrow"))
	}))
	b.send(`{"id":"later"}`)
	waitUntil(t, "the first attempt", 10*time.Second, func() bool { return b.runs.count("later") == 1 })
	time.Sleep(3 * cfg.VisibilityTimeout) // it would have come back twice
	if s := stop(); b.runs.count("later") != 1 {
		t.Fatalf("ran %d times within %v of a 12-hour back-off; stats %+v", b.runs.count("later"), 3*cfg.VisibilityTimeout, s)
	}
}

// A copy of an operation at work in this worker waits for it out of sight,
// its receive count unchanged, and is then settled by the ledger's answer:
// given back every recheck, it came back again and again while the
// operation ran, until SQS's redrive moved it to the dead-letter queue.
// Both copies of another receive and copies in the same receive.
func TestWorker_CopyWaitsForItsOperation(t *testing.T) {
	t.Parallel()
	for _, sameReceive := range []bool{false, true} {
		t.Run(fmt.Sprintf("sameReceive=%v", sameReceive), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{maxReceive: 2})
			var running atomic.Bool
			stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				b.runs.add(m.Key)
				running.Store(true)
				time.Sleep(6 * time.Second) // three visibility timeouts, six rechecks
				return nil
			}))
			if sameReceive {
				b.sendBatch(`{"id":"slow"}`, `{"id":"slow"}`)
			} else {
				b.send(`{"id":"slow"}`)
				waitUntil(t, "the operation to run", 10*time.Second, running.Load)
				b.send(`{"id":"slow"}`)
			}
			b.waitEmpty(30 * time.Second)
			s := stop()
			if n := b.runs.count("slow"); n != 1 || s.Completed != 1 || s.Duplicates != 1 || s.Received != 2 {
				t.Fatalf("ran %d times (want once), %d completed, %d duplicates deleted, %d receives (want 1, 1, 2); stats %+v", n, s.Completed, s.Duplicates, s.Received, s)
			}
			if n := b.dlqCount(); n != 0 {
				t.Fatalf("%d messages in the dead-letter queue", n)
			}
		})
	}
}

// quietLedger answers lease extensions, the process registry's beats and
// sweeps without writing, so that no write but the worker's claims and
// completions reaches the ledger (any other write would end a completion's
// wait for company).
type quietLedger struct{ *ledger.DB }

func (quietLedger) ExtendBatch(_ context.Context, refs []ledger.ClaimRef, _ time.Duration) []error {
	return make([]error, len(refs))
}

func (quietLedger) PutProcess(context.Context, ledger.Process) error { return nil }

func (quietLedger) Sweep(context.Context) (int, error) { return 0, nil }

// A completion holds its handler's room until it is durable, so with every
// handler taken it is committed at once, not held back for company by the
// embedded ledger's complete delay (an hour here: a completion that waited
// for it would hold the next message back that long).
func TestWorker_CompletionNotDelayedWhileHandlersTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 50})
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{CompleteDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b.db = db
	b.sendBatch(`{"id":"op-0"}`, `{"id":"op-1"}`, `{"id":"op-2"}`)
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.Prefetch = 4
	cfg.VisibilityTimeout = time.Minute
	_, stop := b.startOn(cfg, b.client, quietLedger{db}, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	b.waitEmpty(30 * time.Second)
	s := stop()
	if s.Completed != 3 {
		t.Fatalf("stats %+v", s)
	}
	for key, n := range b.runs.counts() {
		if n != 1 {
			t.Errorf("%s ran %d times", key, n)
		}
	}
	for _, key := range []string{"op-0", "op-1", "op-2"} {
		if r := b.record(key); r.State != ledger.StateComplete {
			t.Errorf("%s: %s, want complete", key, r.State)
		}
	}
}
