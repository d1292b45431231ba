package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	bolt "go.etcd.io/bbolt"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// watchedLedger is the real ledger with its calls counted, and a claim that
// can be held back: faults around a real part, not a fake of it.
type watchedLedger struct {
	*ledger.DB
	completes atomic.Int64 // completions asked for
	// claimGate, when set, is received from before a claim batch is
	// passed on; claimWaiting is closed once the first claim waits on it.
	claimGate    chan struct{}
	claimWaiting chan struct{}
	waitingOnce  atomic.Bool
}

func (l *watchedLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	l.completes.Add(int64(len(cs)))
	return l.DB.CompleteBatch(ctx, cs)
}

func (l *watchedLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	if l.claimGate != nil {
		if l.waitingOnce.CompareAndSwap(false, true) {
			close(l.claimWaiting)
		}
		<-l.claimGate
	}
	return l.DB.ClaimBatch(ctx, reqs)
}

// An answer about the record cannot change by asking again: the worker
// asks once, leaves the message and says so.
func TestWorker_CompleteAnswerNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &watchedLedger{DB: b.db}
	var forgot atomic.Bool
	w, err := worker.New(b.config(), b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		if forgot.CompareAndSwap(false, true) {
			// An operator forgets the record while the work runs: the
			// completion finds no record to complete.
			if err := b.db.Forget(ctx, m.Key); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.send(`{"id":"gone"}`)
	waitUntil(t, "the completion failed", 10*time.Second, func() bool { return w.Stats().CompleteFailed == 1 })
	// The message was left: it comes back and runs again, now recorded.
	b.waitEmpty(20 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := w.Stats()
	if got := l.completes.Load(); got != 2 {
		t.Errorf("Complete called %d times, want 2: once for the forgotten record (ErrNotFound, not retried) and once for the redelivery", got)
	}
	if b.runs.count("gone") != 2 || s.Completed != 1 || s.CompleteFailed != 1 {
		t.Errorf("runs %d, stats %+v", b.runs.count("gone"), s)
	}
	if rec := b.record("gone"); rec.State != ledger.StateComplete {
		t.Errorf("record %+v", rec)
	}
}

// stopDuringClaim runs w on l until its first claim waits on l's gate,
// calls before (which may be nil), stops w, opens the gate and waits for
// Run to return.
func stopDuringClaim(t *testing.T, w *worker.Worker, l *watchedLedger, before func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-l.claimWaiting:
	case <-time.After(20 * time.Second):
		t.Fatal("no claim within 20s")
	}
	if before != nil {
		before()
	}
	cancel()
	// Run has stopped receiving and waits for the batch in hand.
	time.Sleep(100 * time.Millisecond)
	close(l.claimGate)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30s after its context ended")
	}
}

// A stop that comes while a batch's claims are being written: none of its
// handlers starts, every message goes back at once, and the claims are
// released (a first claim leaves no record).
func TestWorker_StopDuringClaimGivesBatchBack(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &watchedLedger{DB: b.db, claimGate: make(chan struct{}), claimWaiting: make(chan struct{})}
	cfg := b.config()
	cfg.VisibilityTimeout = 30 * time.Second // a message not given back stays hidden past the test
	// Room for the 3 messages and no more, so that no second receive is
	// in flight at the stop: a long poll cut off by the stop may still be
	// answered by the server with the messages given back meanwhile, which
	// then stay hidden for the visibility timeout (lost to no one, but not
	// back at once).
	cfg.Concurrency, cfg.Prefetch = 3, worker.NoPrefetch
	w, err := worker.New(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.send(fmt.Sprintf(`{"id":"stop-%d"}`, i))
	}
	stopDuringClaim(t, w, l, nil)
	s := w.Stats()
	if n := len(b.runs.counts()); n != 0 {
		t.Errorf("%d handlers started after the stop", n)
	}
	if s.Received == 0 || s.GivenBack != s.Received {
		t.Errorf("received %d, given back %d", s.Received, s.GivenBack)
	}
	for i := range 3 {
		if _, err := b.db.Get(context.Background(), fmt.Sprintf("stop-%d", i)); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("stop-%d: %v, want its claim released and its record gone", i, err)
		}
	}
	if visible, inflight := sqstest.Count(t, b.client, b.queue.URL); visible != 3 || inflight != 0 {
		t.Errorf("queue: %d visible, %d in flight; want all 3 back at once", visible, inflight)
	}
}

// A stop cuts off the poller's next long poll, which SQS still answers
// until its wait ends: what the stop gives back is kept out of its reach,
// so that the next worker receives it with no receive counted in between.
func TestWorker_StopGivesBackOutOfCutPollsReach(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &watchedLedger{DB: b.db, claimGate: make(chan struct{}), claimWaiting: make(chan struct{})}
	cfg := b.config()
	cfg.WaitTime = 2 * time.Second
	w, err := worker.New(cfg, b.client, l, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.send(fmt.Sprintf(`{"id":"cut-%d"}`, i))
	}
	stopDuringClaim(t, w, l, func() { time.Sleep(300 * time.Millisecond) }) // the next receive is on its way
	counts := b.receiveCounts(3, 15*time.Second)
	for body, n := range counts {
		if n != "2" {
			t.Errorf("%s received again at receive %s, want 2: a receive that the stop cut off took it", body, n)
		}
	}
	if len(counts) != 3 {
		t.Errorf("%d of 3 messages received again within 15s of the stop", len(counts))
	}
}

// receiveCounts receives the queue's messages until n of them came, or
// within d: their receive counts, by body.
func (b *bundle) receiveCounts(n int, d time.Duration) map[string]string {
	b.t.Helper()
	counts := map[string]string{}
	for deadline := time.Now().Add(d); len(counts) < n && time.Now().Before(deadline); {
		out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &b.queue.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil {
			b.t.Fatal(err)
		}
		for _, m := range out.Messages {
			counts[aws.ToString(m.Body)] = m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]
		}
	}
	return counts
}

// receiveBack receives the queue's messages for d: how many came.
func (b *bundle) receiveBack(d time.Duration) int {
	return len(b.receiveCounts(math.MaxInt, d))
}

// A message whose operation's ledger record cannot be read is dead-lettered
// with the reason; the messages received with it run as usual.
func TestWorker_UnreadableRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	path := b.db.Path()
	if _, err := b.db.Claim(context.Background(), ledger.ClaimRequest{Key: "bad", Owner: "o", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	b.db.Close()
	raw, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("records")).Put([]byte("bad"), []byte{1, 9, 9}) }); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if b.db, err = ledger.Open(path, ledger.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.db.Close() })

	stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	in := &sqs.SendMessageBatchInput{QueueUrl: &b.queue.URL}
	for i, key := range []string{"ok-1", "bad", "ok-2"} {
		in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprintf(`{"id":%q}`, key))})
	}
	if _, err := b.client.SendMessageBatch(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	b.waitEmpty(20 * time.Second)
	s := stop()
	if b.runs.count("ok-1") != 1 || b.runs.count("ok-2") != 1 || b.runs.count("bad") != 0 || s.Unreadable != 1 || s.DeadLettered != 1 {
		t.Fatalf("runs %v, stats %+v", b.runs.counts(), s)
	}
	dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 1, 5*time.Second)
	if len(dlq) != 1 || !strings.Contains(attr(dlq[0], worker.AttrReason), "ledger record unreadable") {
		t.Fatalf("DLQ %v", dlq)
	}
}

// outageLedger is the real ledger behind a switch that makes it fail as a
// shared store does when it cannot be reached, for claims and pings alike.
type outageLedger struct {
	*ledger.DB
	down  atomic.Bool
	pings atomic.Int64
	err   error // what a claim fails with while down; ErrUnavailable when nil
}

func (l *outageLedger) fail() error {
	if l.err != nil {
		return l.err
	}
	return fmt.Errorf("connection refused: %w", ledger.ErrUnavailable)
}

func (l *outageLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	if l.down.Load() {
		return nil, l.fail()
	}
	return l.DB.ClaimBatch(ctx, reqs)
}

func (l *outageLedger) Ping(ctx context.Context) error {
	l.pings.Add(1)
	if l.down.Load() {
		return l.fail()
	}
	return nil
}

// While the ledger cannot record claims, the worker receives nothing,
// reports itself not ready, pings the ledger, and resumes by itself once
// it answers: no message climbs towards the dead-letter queue meanwhile.
func TestWorker_LedgerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 3})
	l := &outageLedger{DB: b.db}
	l.down.Store(true)
	w, err := worker.New(b.config(), b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for i := range 5 {
		b.send(fmt.Sprintf(`{"id":"out-%d"}`, i))
	}
	waitUntil(t, "the ledger reported down", 10*time.Second, func() bool { return w.Health().LedgerDown })
	if h := w.Health(); h.Ready || !h.Alive {
		t.Errorf("health while the ledger is down: %+v, want alive and not ready", h)
	}
	// A receive already on its way when the first claims failed may bring
	// a batch more; once the worker pings, it receives nothing.
	waitUntil(t, "a ping", 10*time.Second, func() bool { return l.pings.Load() >= 1 })
	received := w.Stats().Received
	waitUntil(t, "pings", 20*time.Second, func() bool { return l.pings.Load() >= 4 })
	if got := w.Stats().Received; got != received {
		t.Errorf("received %d more messages while the ledger was down", got-received)
	}
	l.down.Store(false)
	b.waitEmpty(20 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if n := b.runs.count(fmt.Sprintf("out-%d", i)); n != 1 {
			t.Errorf("out-%d ran %d times", i, n)
		}
	}
	if visible, inflight := sqstest.Count(t, b.client, b.queue.DLQURL); visible+inflight != 0 {
		t.Errorf("%d messages in the dead-letter queue after the outage", visible+inflight)
	}
	if s := w.Stats(); s.ClaimFailures == 0 {
		t.Errorf("stats %+v: no claim failed", s)
	}
}

// contendedLedger is the real ledger whose first claim batches the store
// rolls back because of a concurrent transaction, as a shared store does
// to break a deadlock.
type contendedLedger struct {
	*ledger.DB
	left  atomic.Int64 // claim batches still to roll back
	pings atomic.Int64
}

func (l *contendedLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	if l.left.Add(-1) >= 0 {
		return nil, fmt.Errorf("claim: %w: ERROR: deadlock detected (SQLSTATE 40P01)", ledger.ErrContention)
	}
	return l.DB.ClaimBatch(ctx, reqs)
}

func (l *contendedLedger) Ping(ctx context.Context) error {
	l.pings.Add(1)
	return nil
}

// A claim batch that the store rolled back because of a concurrent
// transaction is no outage: the store answered. The batch comes back for
// another claim, and the worker neither holds new work back nor logs it as
// unable to record claims (which it does when it holds work back). (It may
// ping the ledger: it does whenever a few seconds pass without a claim
// recorded.)
func TestWorker_ClaimContention(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &contendedLedger{DB: b.db}
	l.left.Store(2)
	var logs strings.Builder
	var logMu sync.Mutex
	cfg := b.config()
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{w: &logs, mu: &logMu}, nil))
	w, err := worker.New(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.send(`{"id":"contended"}`)
	b.waitEmpty(20 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := b.runs.count("contended"); n != 1 {
		t.Errorf("ran %d times", n)
	}
	s := w.Stats()
	logMu.Lock()
	defer logMu.Unlock()
	if s.ClaimFailures != 2 || strings.Contains(logs.String(), "cannot record claims") {
		t.Errorf("%d claim batches failed; the log:\n%s\nwant 2 failed, the ledger not reported down", s.ClaimFailures, logs.String())
	}
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A ledger whose table is gone will not come back by waiting: Run stops and
// says so, after giving back what it held.
func TestWorker_LedgerGone(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &outageLedger{DB: b.db, err: fmt.Errorf("table sqsonce_operations does not exist: run `sqsonce ledger init`: %w", ledger.ErrNoSchema)}
	l.down.Store(true)
	w, err := worker.New(b.config(), b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	b.send(`{"id":"gone-1"}`)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ledger.ErrNoSchema) {
			t.Fatalf("Run = %v, want ErrNoSchema", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on without its ledger's table")
	}
	if n := len(b.runs.counts()); n != 0 {
		t.Errorf("%d operations ran", n)
	}
}

// completeOutage is the real ledger whose completions fail, as a shared
// store's do while it is away, until the test lets them through.
type completeOutage struct {
	*ledger.DB
	down     atomic.Bool
	failures atomic.Int64
}

func (l *completeOutage) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	if l.down.Load() {
		l.failures.Add(1)
		errs := make([]error, len(cs))
		for i := range errs {
			errs[i] = fmt.Errorf("connection refused: %w", ledger.ErrUnavailable)
		}
		return errs
	}
	return l.DB.CompleteBatch(ctx, cs)
}

// Work is done while the ledger cannot record its completion: the worker
// keeps trying, keeps the message out of sight meanwhile, and records it
// once the ledger answers; the work does not run again.
func TestWorker_CompletionWaitsForTheLedger(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &completeOutage{DB: b.db}
	cfg := b.config() // visibility and lease 2s
	w, err := worker.New(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		if b.runs.add(m.Key) == 1 {
			l.down.Store(true)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.send(`{"id":"late-record"}`)
	// Three visibility timeouts go by while the completion cannot be
	// recorded.
	waitUntil(t, "failed completions", 10*time.Second, func() bool { return l.failures.Load() > 0 })
	time.Sleep(3 * cfg.VisibilityTimeout)
	if visible, _ := sqstest.Count(t, b.client, b.queue.URL); visible != 0 {
		t.Errorf("the message became visible while its completion waited")
	}
	l.down.Store(false)
	b.waitEmpty(20 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := w.Stats()
	if n := b.runs.count("late-record"); n != 1 || s.Completed != 1 || s.CompleteFailed != 0 {
		t.Fatalf("ran %d times; stats %+v", n, s)
	}
	if rec := b.record("late-record"); rec.State != ledger.StateComplete || rec.Attempts != 1 {
		t.Fatalf("record %+v", rec)
	}
}
