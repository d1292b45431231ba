package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/awsfault"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// seamLedger is the real ledger with faults the test switches on: failed
// or hanging calls of the kinds a shared store produces when it is slow or
// away. It counts the calls that keep and give back claims.
type seamLedger struct {
	*ledger.DB
	failFails     atomic.Int32 // the next Fail calls fail as unavailable
	failCompletes atomic.Bool  // completions fail as unavailable
	failExtends   atomic.Bool  // lease extensions fail as unavailable
	hangExtends   atomic.Bool  // lease extensions hang until their context ends
	extendCalls   atomic.Int64 // calls that extend leases, and the leases they extend
	extendLeases  atomic.Int64
	releaseCalls  atomic.Int64 // calls that release claims, and the claims they release
	releaseClaims atomic.Int64
}

var errAway = fmt.Errorf("store away for the test: %w", ledger.ErrUnavailable)

func (l *seamLedger) Fail(ctx context.Context, f ledger.Failure) error {
	if l.failFails.Add(-1) >= 0 {
		return errAway
	}
	return l.DB.Fail(ctx, f)
}

func (l *seamLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	if l.failCompletes.Load() {
		errs := make([]error, len(cs))
		for i := range errs {
			errs[i] = errAway
		}
		return errs
	}
	return l.DB.CompleteBatch(ctx, cs)
}

func (l *seamLedger) extendFault(ctx context.Context) error {
	if l.hangExtends.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if l.failExtends.Load() {
		return errAway
	}
	return nil
}

func (l *seamLedger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	l.extendCalls.Add(1)
	l.extendLeases.Add(int64(len(refs)))
	if err := l.extendFault(ctx); err != nil {
		errs := make([]error, len(refs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return l.DB.ExtendBatch(ctx, refs, lease)
}

// Extend and Release are counted too, as calls of one claim each.
func (l *seamLedger) Extend(ctx context.Context, key, owner string, lease time.Duration) (time.Time, error) {
	if errs := l.ExtendBatch(ctx, []ledger.ClaimRef{{Key: key, Owner: owner}}, lease); errs[0] != nil {
		return time.Time{}, errs[0]
	}
	return time.Now().Add(lease), nil
}

func (l *seamLedger) Release(ctx context.Context, key, owner string) error {
	return l.ReleaseBatch(ctx, []ledger.ClaimRef{{Key: key, Owner: owner}})[0]
}

func (l *seamLedger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	l.releaseCalls.Add(1)
	l.releaseClaims.Add(int64(len(refs)))
	return l.DB.ReleaseBatch(ctx, refs)
}

// start runs a worker on l until the test ends or stop is called.
func (b *bundle) startOn(cfg worker.Config, client *sqs.Client, l worker.Ledger, h worker.Handler) (*worker.Worker, func() worker.Stats) {
	b.t.Helper()
	w, err := worker.New(cfg, client, l, h)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() worker.Stats {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					b.t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				b.t.Fatal("Run did not return 30s after its context ended")
			}
		})
		return w.Stats()
	}
	b.t.Cleanup(func() { stop() })
	return w, stop
}

// sendGroup sends bodies to a FIFO queue, in order, in group g.
func (b *bundle) sendGroup(g string, bodies ...string) {
	b.t.Helper()
	for _, body := range bodies {
		b.send(body, func(in *sqs.SendMessageInput) {
			in.MessageGroupId = aws.String(g)
			in.MessageDeduplicationId = aws.String(body)
		})
	}
}

// watch receives from the queue, as another consumer would, until stop
// is closed, and returns the bodies it received: messages that became
// visible while the worker still had them.
func (b *bundle) watch(stop <-chan struct{}) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var seen []string
		for {
			select {
			case <-stop:
				out <- seen
				return
			default:
			}
			got, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: &b.queue.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 0, VisibilityTimeout: 1,
			})
			if err != nil {
				b.t.Error(err)
				out <- seen
				return
			}
			for _, m := range got.Messages {
				seen = append(seen, aws.ToString(m.Body))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return out
}

func (b *bundle) dlqCount() int {
	b.t.Helper()
	v, f := sqstest.Count(b.t, b.client, b.queue.DLQURL)
	return v + f
}

// A retryable failure whose Fail the ledger did not record leaves the
// record in progress under this process's own claim. Its redelivery must
// not be told "in progress" again and again until SQS dead-letters it: the
// worker releases its own stale claim and runs the operation.
func TestWorker_OwnStaleClaimReclaimed(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 4})
	l := &seamLedger{DB: b.db}
	l.failFails.Store(1)
	cfg := b.config()
	cfg.VisibilityTimeout = 30 * time.Second // the stale lease: long
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		if b.runs.add(m.Key) == 1 {
			return worker.RetryAfter(200*time.Millisecond, errors.New("downstream busy"))
		}
		return nil
	}))
	b.send(`{"id":"stale"}`)
	waitUntil(t, "the operation to complete", 20*time.Second, func() bool {
		rec, err := b.db.Get(context.Background(), "stale")
		return err == nil && rec.State == ledger.StateComplete
	})
	b.waitEmpty(10 * time.Second)
	s := stop()
	if n := b.runs.count("stale"); n != 2 || s.StaleReclaimed != 1 || s.Completed != 1 {
		t.Fatalf("ran %d times (want 2: the failure, then the retry); stats %+v", n, s)
	}
	if n := b.dlqCount(); n != 0 {
		t.Fatalf("%d messages in the dead-letter queue", n)
	}
}

// The back-off of a delivery whose operation is in progress elsewhere is
// the time left of that claim's lease by the ledger's clock. A host clock
// ahead of the ledger's must not turn it negative: the message would come
// back at once, again and again, into the dead-letter queue.
func TestWorker_LedgerClockBehindHost(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	behind := func() time.Time { return time.Now().Add(-2 * time.Minute) }
	db, err := ledger.Open(filepath.Join(t.TempDir(), "skew.db"), ledger.Options{Now: behind})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A crashed worker's claim, 40 s from lapsing by the ledger's clock.
	if _, err := db.Claim(context.Background(), ledger.ClaimRequest{Key: "op", Owner: "crashed", Lease: 40 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_, stop := b.startOn(b.config(), b.client, db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	b.send(`{"id":"op"}`)
	waitUntil(t, "the delivery to be received", 10*time.Second, func() bool {
		_, inflight := sqstest.Count(t, b.client, b.queue.URL)
		return inflight == 1
	})
	time.Sleep(4 * time.Second) // a redelivery at once would come within this
	s := stop()
	if s.Received != 1 || s.InProgressElsewhere != 1 || b.runs.count("op") != 0 {
		t.Fatalf("the in-progress operation's delivery was received %d times in 4s (want once, back after the lease), ran %d times; stats %+v",
			s.Received, b.runs.count("op"), s)
	}
	if n := b.dlqCount(); n != 0 {
		t.Fatalf("%d messages in the dead-letter queue", n)
	}
}

// Messages waiting behind a running one of their FIFO group stay out of
// sight even while the ledger's lease extensions hang: the visibility
// change does not wait for them.
func TestWorker_FIFOWaitingKeptWhileLedgerHangs(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 5})
	l := &seamLedger{DB: b.db}
	cfg := b.config()
	cfg.Concurrency = 1
	var order []string
	var mu sync.Mutex
	// Sent before the worker starts, so that one receive brings the group.
	b.sendGroup("g", `{"id":"long"}`, `{"id":"next-1"}`, `{"id":"next-2"}`)
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		mu.Lock()
		order = append(order, m.Key)
		mu.Unlock()
		if m.Key == "long" {
			l.hangExtends.Store(true)
			defer l.hangExtends.Store(false)
			time.Sleep(3 * cfg.VisibilityTimeout) // the others' visibility would lapse twice over
		}
		return nil
	}))
	waitUntil(t, "the long message to start", 10*time.Second, func() bool { return l.hangExtends.Load() })
	done := make(chan struct{})
	seen := b.watch(done)
	waitUntil(t, "the long message to end", 20*time.Second, func() bool { return !l.hangExtends.Load() })
	close(done)
	if got := <-seen; len(got) > 0 {
		t.Errorf("received by another consumer while they waited their turn: %q", got)
	}
	b.waitEmpty(20 * time.Second)
	s := stop()
	mu.Lock()
	defer mu.Unlock()
	// The worker's own poller competes with the other consumer for a
	// message that shows again.
	if s.Received != 3 {
		t.Errorf("received %d times, want 3 (each once); stats %+v", s.Received, s)
	}
	if fmt.Sprint(order) != "[long next-1 next-2]" || s.GroupWaited < 2 || s.GroupWaitBeats == 0 {
		t.Errorf("ran %v; stats %+v", order, s)
	}
}

// A message waiting behind another of its FIFO group whose claim is lost
// while it waits (another worker took it over and completed it, or an
// operator forgot it) does not start in that turn: its completion could not
// stand, and another attempt may hold the operation.
func TestWorker_FIFOWaitingClaimLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		lose    func(db *ledger.DB) error
		runs    int // of the waiting message's operation, in the end
		dupDone bool
	}{
		{"TakenOverAndCompleted", func(db *ledger.DB) error {
			ctx := context.Background()
			if err := db.Forget(ctx, "waiting"); err != nil {
				return err
			}
			if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "waiting", Owner: "other-worker", Lease: time.Minute}); err != nil {
				return err
			}
			return db.Complete(ctx, ledger.Completion{Key: "waiting", Owner: "other-worker"})
		}, 0, true},
		{"Forgotten", func(db *ledger.DB) error { return db.Forget(context.Background(), "waiting") }, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{fifo: true, maxReceive: 5})
			cfg := b.config()
			cfg.Concurrency = 1
			var lost atomic.Bool
			b.sendGroup("g", `{"id":"long"}`, `{"id":"waiting"}`) // one receive brings both
			_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				b.runs.add(m.Key)
				if m.Key == "long" {
					time.Sleep(cfg.VisibilityTimeout / 2)
					if err := tc.lose(b.db); err != nil {
						t.Error(err)
					}
					lost.Store(true)
					time.Sleep(cfg.VisibilityTimeout) // a beat or more sees it
				}
				return nil
			}))
			waitUntil(t, "the claim to be lost", 10*time.Second, lost.Load)
			b.waitEmpty(20 * time.Second)
			s := stop()
			if n := b.runs.count("waiting"); n != tc.runs || s.LeaseLost != 1 || s.CompleteFailed != 0 {
				t.Fatalf("the waiting operation ran %d times, want %d; stats %+v", n, tc.runs, s)
			}
			if rec := b.record("waiting"); rec.State != ledger.StateComplete {
				t.Fatalf("record %+v", rec)
			}
			if tc.dupDone && s.Duplicates != 1 {
				t.Fatalf("its redelivery was not deleted as a duplicate: %+v", s)
			}
		})
	}
}

// slowTransport delays each request by the delay it holds.
type slowTransport struct {
	base  http.RoundTripper
	delay atomic.Int64
}

func (t *slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(time.Duration(t.delay.Load()))
	return t.base.RoundTrip(req)
}

// slowClaims is the real ledger whose claims take a while.
type slowClaims struct {
	*ledger.DB
	delay time.Duration
}

func (l *slowClaims) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	time.Sleep(l.delay)
	return l.DB.ClaimBatch(ctx, reqs)
}

// The visibility timeout runs from the receive: a slow read of the payload
// from S3 and a slow claim count against it, so the first beat is timed
// from the receive, not from when the handler is scheduled.
func TestWorker_FirstBeatFromReceive(t *testing.T) {
	t.Parallel()
	b := setupS3(t, options{maxReceive: 5})
	slow := &slowTransport{base: loopback.Transport()}
	cfg := b.config()
	cfg.VisibilityTimeout = 3 * time.Second
	cfg.S3 = sqstest.NewS3Client(t, slow)
	slow.delay.Store(int64(1300 * time.Millisecond)) // under half the visibility timeout
	l := &slowClaims{DB: b.db, delay: 1400 * time.Millisecond}
	var started atomic.Bool
	w, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		started.Store(true)
		time.Sleep(2 * time.Second)
		return nil
	}))
	b.sendPointer("slow", `{"id":"slow"}`, worker.AttrExtendedPayloadSize)
	waitUntil(t, "the worker to receive it", 10*time.Second, func() bool { return w.Stats().Received == 1 })
	done := make(chan struct{})
	seen := b.watch(done)
	waitUntil(t, "the handler to start", 20*time.Second, started.Load)
	b.waitEmpty(20 * time.Second)
	close(done)
	s := stop()
	if got := <-seen; len(got) > 0 || b.runs.count("slow") != 1 || s.Received != 1 {
		t.Fatalf("received by another consumer while the worker had it: %q; ran %d times; stats %+v (want it received once)", got, b.runs.count("slow"), s)
	}
}

// Claims that succeed while completions fail must not let the messages in
// hand grow: no new work starts while completions fail, and the slot of a
// message whose completion is being tried again is taken back. The bound is
// the handlers and the prefetch, and the completions in flight when the
// ledger stopped taking them (at most as many again).
func TestWorker_InHandBoundWhileCompletionsFail(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 50})
	l := &seamLedger{DB: b.db}
	l.failCompletes.Store(true)
	cfg := b.config()
	cfg.Concurrency = 2
	cfg.Prefetch = 2
	cfg.VisibilityTimeout = 10 * time.Second
	w, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	var msgs []types.SendMessageBatchRequestEntry
	for i := range 30 {
		msgs = append(msgs, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprintf(`{"id":"op-%d"}`, i))})
		if len(msgs) == 10 {
			if _, err := b.client.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &b.queue.URL, Entries: msgs}); err != nil {
				t.Fatal(err)
			}
			msgs = nil
		}
	}
	waitUntil(t, "handlers to run", 10*time.Second, func() bool { return len(b.runs.counts()) >= cfg.Concurrency })
	most, mostInHand := 0, 0
	for range 30 {
		st, err := b.db.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, int(st.InProgress))
		mostInHand = max(mostInHand, w.Health().InFlight)
		time.Sleep(100 * time.Millisecond)
	}
	if limit := 2 * (cfg.Concurrency + cfg.Prefetch); most > limit || mostInHand > limit {
		t.Fatalf("up to %d records in progress and %d messages in hand while completions failed, want at most %d (handlers + prefetch, and as many completions in flight); ran %d operations",
			most, mostInHand, limit, len(b.runs.counts()))
	}
	l.failCompletes.Store(false)
	b.waitEmpty(60 * time.Second)
	if s := stop(); s.Completed != 30 {
		t.Fatalf("stats %+v", s)
	}
}

// An idle worker has nothing in hand: the slots a long poll holds are not
// messages.
func TestWorker_IdleHasNothingInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	w, _ := b.startOn(b.config(), b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error { return nil }))
	waitUntil(t, "the worker to receive", 10*time.Second, func() bool { return !w.Health().LastReceive.IsZero() })
	for range 10 {
		if n := w.Health().InFlight; n != 0 {
			t.Fatalf("an idle worker reports %d messages in flight", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// callCounter counts the SQS calls of a client by operation.
type callCounter struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *callCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[sqstest.Operation(req)]++
	c.mu.Unlock()
	return c.base.RoundTrip(req)
}

func (c *callCounter) count(ops ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, op := range ops {
		n += c.n[op]
	}
	return n
}

// The messages of a received batch that wait for a handler are kept, and
// given back at a stop, with one call per batch for the lease extensions
// and the visibility changes of a beat, and one for the give-back, not one
// per message.
func TestWorker_BatchedBeatsAndGiveBacks(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 50})
	calls := &callCounter{base: loopback.Transport(), n: map[string]int{}}
	client := sqstest.NewClient(t, calls)
	l := &seamLedger{DB: b.db}
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.Prefetch = 10
	var started atomic.Bool
	release := make(chan struct{})
	w, stop := b.startOn(cfg, client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		started.Store(true)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	var entries []types.SendMessageBatchRequestEntry
	for i := range 10 {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprintf(`{"id":"op-%d"}`, i))})
	}
	if _, err := b.client.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &b.queue.URL, Entries: entries}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first handler to start", 10*time.Second, started.Load)
	waitUntil(t, "all ten received", 10*time.Second, func() bool { return w.Stats().Received == 10 })
	time.Sleep(3 * cfg.VisibilityTimeout) // four beats or so
	extendCalls, extended := l.extendCalls.Load(), l.extendLeases.Load()
	visCalls := calls.count("ChangeMessageVisibility", "ChangeMessageVisibilityBatch")
	go func() { time.Sleep(time.Second); close(release) }()
	s := stop()
	t.Logf("%d lease extensions in %d calls, %d visibility calls while ten waited; stop: %d claims released in %d calls; stats %+v",
		extended, extendCalls, visCalls, l.releaseClaims.Load(), l.releaseCalls.Load(), s)
	if extended < 20 || extendCalls*5 > extended {
		t.Errorf("%d lease extensions in %d calls: want them batched, about ten per call", extended, extendCalls)
	}
	if visCalls*5 > int(s.Heartbeats) {
		t.Errorf("%d visibility changes of kept messages in %d calls: want them batched", s.Heartbeats, visCalls)
	}
	if s.GivenBack != 9 || l.releaseClaims.Load() != 9 || l.releaseCalls.Load() != 1 {
		t.Errorf("the stop gave back %d messages, releasing %d claims in %d calls: want 9 in one call", s.GivenBack, l.releaseClaims.Load(), l.releaseCalls.Load())
	}
	if s.Completed != 1 {
		t.Errorf("the running message did not complete: %+v", s)
	}
}

// A message received ahead of a free handler whose lease could not be
// extended (the ledger answers nothing but "unavailable") may have been
// taken over by the time a handler is free: it must not start then.
func TestWorker_PrefetchedLeaseLapsedNotStarted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 50})
	l := &seamLedger{DB: b.db}
	l.failExtends.Store(true)
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.Prefetch = 1
	var tookOver atomic.Bool
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		if m.Key != "first" {
			return nil
		}
		// Whichever runs first holds the only handler past the lease of
		// the other; meanwhile another worker takes the other over.
		time.Sleep(cfg.VisibilityTimeout + 500*time.Millisecond)
		c, err := b.db.Claim(context.Background(), ledger.ClaimRequest{Key: "second", Owner: "other-worker", Lease: 3 * time.Second})
		if err != nil || c.Outcome != ledger.Claimed {
			t.Errorf("the other worker's claim: %+v, %v", c, err)
		}
		tookOver.Store(true)
		return nil
	}))
	b.send(`{"id":"first"}`)
	waitUntil(t, "the first to run", 10*time.Second, func() bool { return b.runs.count("first") == 1 })
	b.send(`{"id":"second"}`)
	waitUntil(t, "the takeover", 20*time.Second, tookOver.Load)
	time.Sleep(2 * time.Second)
	if n := b.runs.count("second"); n != 0 {
		t.Fatalf("the prefetched message ran %d times beside the other worker's claim", n)
	}
	l.failExtends.Store(false)
	if err := b.db.Complete(context.Background(), ledger.Completion{Key: "second", Owner: "other-worker"}); err != nil {
		t.Fatal(err)
	}
	b.waitEmpty(20 * time.Second)
	if s := stop(); b.runs.count("second") != 0 || s.Completed != 1 {
		t.Fatalf("ran %v; stats %+v", b.runs.counts(), s)
	}
}

// A give-back that SQS throttles is tried again: the message must not stay
// out of sight for the rest of its visibility timeout.
func TestWorker_ThrottledGiveBackRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 50})
	var throttle atomic.Int32
	tr := awsfault.New(loopback.Transport(), sqstest.SQSErrors, func(op string) awsfault.Kind {
		if op == "ChangeMessageVisibilityBatch" && throttle.Add(-1) >= 0 {
			return awsfault.Throttle
		}
		return ""
	})
	client := sqstest.NewClient(t, tr)
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.Prefetch = 1 // both in hand, and no receive in flight at the stop
	cfg.VisibilityTimeout = 30 * time.Second
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	_, stop := b.startOn(cfg, client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		once.Do(func() { close(started) })
		<-release
		return errors.New("not now")
	}))
	b.send(`{"id":"a"}`)
	b.send(`{"id":"b"}`)
	<-started
	waitUntil(t, "both in hand", 10*time.Second, func() bool {
		_, inflight := sqstest.Count(t, b.client, b.queue.URL)
		return inflight == 2
	})
	throttle.Store(3) // every attempt of the SDK's first call: the give-back of the waiting one
	go func() { time.Sleep(time.Second); close(release) }()
	stop()
	// Both are visible again within seconds (not after the 30 s of their
	// receive) when a receive of the test's own gets them.
	seen := map[string]bool{}
	waitUntil(t, "both visible again", 10*time.Second, func() bool {
		out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &b.queue.URL, MaxNumberOfMessages: 10, VisibilityTimeout: 30})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			seen[aws.ToString(m.Body)] = true
		}
		return len(seen) == 2
	})
	if n := tr.Count("ChangeMessageVisibilityBatch", awsfault.Throttle); n != 3 {
		t.Fatalf("%d throttled visibility changes, want 3", n)
	}
}

// A stop that comes before the worker started (while it reads its queue's
// attributes) is a stop, not a failure to start.
func TestWorker_StoppedBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	w, err := worker.New(b.config(), b.client, b.db, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run stopped before it started: %v, want nil", err)
	}
}

// A copy of an operation behind its original in one FIFO receive finds,
// at its turn, the original's claim settled: it is answered as it stands
// then (a duplicate), and that claim is not counted as a stale one.
func TestWorker_FIFOCopyBehindItsOriginal(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 5})
	b.send(`{"id":"x","n":1}`, func(in *sqs.SendMessageInput) {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("first")
	})
	b.send(`{"id":"x","n":1}`, func(in *sqs.SendMessageInput) {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("copy")
	})
	_, stop := b.startOn(b.config(), b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	b.waitEmpty(20 * time.Second)
	s := stop()
	if b.runs.count("x") != 1 || s.Duplicates != 1 || s.StaleReclaimed != 0 || s.Received != 2 {
		t.Fatalf("ran %d times; stats %+v: want the copy deleted as a duplicate, no stale claim", b.runs.count("x"), s)
	}
}

// A FIFO message that waits behind a running one of its group, and whose
// visibility lapses meanwhile (the beats' visibility changes fail), may be
// received again elsewhere, or moved to the dead-letter queue by SQS; the
// messages behind it may then run there, before it. Its turn has passed: once
// SQS no longer takes its receipt handle, it must not start here, and the
// rest of its group behind it neither; its claim is released.
func TestWorker_FIFOWaitingReceivedElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 10})
	// SQS out of the worker's reach for a while: its beats fail, and so
	// do its receives, while another consumer receives the group.
	var cutOff atomic.Bool
	tr := awsfault.New(loopback.Transport(), sqstest.SQSErrors, func(op string) awsfault.Kind {
		if (op == "ChangeMessageVisibilityBatch" || op == "ReceiveMessage") && cutOff.Load() {
			return awsfault.ServerError
		}
		return ""
	})
	client := sqstest.NewClient(t, tr)
	cfg := b.config()
	cfg.Concurrency = 1
	b.sendGroup("g", `{"id":"long"}`, `{"id":"w1"}`, `{"id":"w2"}`) // one receive brings all three
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let) // before the stop that startOn registered
	_, stop := b.startOn(cfg, client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		if m.Key == "long" {
			close(started)
			<-release
		}
		return nil
	}))
	<-started
	cutOff.Store(true)
	// Another consumer receives the group once its visibility lapsed, and
	// handles it (deletes each message): the worker's receipt handles no
	// longer hold the messages. (SQS may hand out one message of a group
	// per receive, the next once it is deleted.)
	var got []string
	waitUntil(t, "another consumer to receive the group", 20*time.Second, func() bool {
		out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &b.queue.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got = append(got, aws.ToString(m.Body))
			if _, err := b.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &b.queue.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
		return len(got) == 3
	})
	cutOff.Store(false)
	let()
	waitUntil(t, "the long one to complete", 10*time.Second, func() bool {
		rec, err := b.db.Get(context.Background(), "long")
		return err == nil && rec.State == ledger.StateComplete
	})
	time.Sleep(2 * cfg.VisibilityTimeout) // the waiting ones have had their turn
	s := stop()
	if n1, n2 := b.runs.count("w1"), b.runs.count("w2"); n1 != 0 || n2 != 0 || s.ReceiptLost != 1 {
		t.Fatalf("the messages behind, received elsewhere, ran here %d and %d times, want 0; stats %+v", n1, n2, s)
	}
	for _, key := range []string{"w1", "w2"} {
		if rec, err := b.db.Get(context.Background(), key); err == nil && rec.State == ledger.StateInProgress {
			t.Fatalf("%s: the claim was kept: %+v", key, rec)
		}
	}
}

// beatHook is the real ledger whose next lease extension that covers key,
// once armed, says so (inFlight), waits for release, then finds the
// record forgotten: the beat's answer is that the claim is lost.
type beatHook struct {
	*ledger.DB
	key      string
	armed    atomic.Bool
	inFlight chan struct{}
	release  chan struct{}
}

func (l *beatHook) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	for _, r := range refs {
		if r.Key == l.key && l.armed.CompareAndSwap(true, false) {
			close(l.inFlight)
			<-l.release
			time.Sleep(300 * time.Millisecond) // the waiting message tries to start meanwhile
			if err := l.DB.Forget(context.WithoutCancel(ctx), l.key); err != nil {
				panic(err)
			}
			break
		}
	}
	return l.DB.ExtendBatch(ctx, refs, lease)
}

// A FIFO message whose turn comes while a beat that covers it is on its
// way does not start before that beat's answer is read: here the answer
// is that its record is gone, and the work never starts under that claim.
// Its redelivery, claimed afresh, runs it once.
func TestWorker_FIFOStartWaitsForItsBeat(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 5})
	cfg := b.config()
	cfg.Concurrency = 1
	l := &beatHook{DB: b.db, key: "waiting", inFlight: make(chan struct{}), release: make(chan struct{})}
	l.armed.Store(true)
	b.sendGroup("g", `{"id":"long"}`, `{"id":"waiting"}`) // one receive brings both
	var attempts sync.Map                                 // owner of each run of "waiting"
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		switch m.Key {
		case "long":
			<-l.inFlight // a beat covering the waiting message is on its way
			close(l.release)
		case "waiting":
			attempts.Store(m.Owner, m.Attempt)
		}
		return nil
	}))
	b.waitEmpty(20 * time.Second)
	s := stop()
	if n := b.runs.count("waiting"); n != 1 || s.LeaseLost != 1 {
		t.Fatalf("the waiting operation ran %d times with %d claims lost before their work; want it held until the beat's answer (its claim lost), then run once after its redelivery; stats %+v", n, s.LeaseLost, s)
	}
	attempts.Range(func(owner, attempt any) bool {
		if attempt != 1 {
			t.Errorf("the waiting operation ran as attempt %v under %v: its first claim was forgotten, so its run is the first of a new record", attempt, owner)
		}
		return true
	})
	if rec := b.record("waiting"); rec.State != ledger.StateComplete {
		t.Fatalf("record %+v", rec)
	}
}

// A permanent failure is dead-lettered only once the ledger recorded it:
// a message moved to the dead-letter queue while its record stayed in
// progress would run again on its next delivery or replay, once the lease
// lapsed, in no window the worker names. While the failure cannot be
// recorded the message stays out of sight and the recording is tried again.
func TestWorker_PermanentFailureRecordedBeforeDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 4})
	l := &seamLedger{DB: b.db}
	l.failFails.Store(3)
	cfg := b.config()
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return worker.Permanent(errors.New("card declined"))
	}))
	b.send(`{"id":"declined"}`)
	waitUntil(t, "the message to reach the dead-letter queue", 20*time.Second, func() bool { return b.dlqCount() == 1 })
	rec := b.record("declined")
	if rec.State != ledger.StateFailed || !rec.Permanent {
		t.Fatalf("dead-lettered while the record is %s (permanent %v): its next delivery would run it again", rec.State, rec.Permanent)
	}
	if s := stop(); b.runs.count("declined") != 1 || s.FailedPermanently != 1 {
		t.Fatalf("ran %d times, stats %+v", b.runs.count("declined"), s)
	}
}

// A permanent failure that cannot be recorded before the worker stops is
// left on the queue, not dead-lettered: its record is in progress, and the
// next delivery settles it.
func TestWorker_PermanentFailureNotRecordedNotDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 4})
	l := &seamLedger{DB: b.db}
	l.failFails.Store(1 << 30)
	cfg := b.config()
	started := make(chan struct{}, 1)
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		started <- struct{}{}
		return worker.Permanent(errors.New("card declined"))
	}))
	b.send(`{"id":"declined"}`)
	<-started
	waitUntil(t, "the failure to be tried", 10*time.Second, func() bool { return l.failFails.Load() < 1<<30 })
	stop()
	if n := b.dlqCount(); n != 0 {
		t.Fatalf("%d message(s) in the dead-letter queue while the failure was never recorded", n)
	}
	if v, f := sqstest.Count(t, b.client, b.queue.URL); v+f != 1 {
		t.Fatalf("the message left the queue: %d visible, %d in flight", v, f)
	}
}

// A wait asked for by the handler (worker.RetryAfter) or by an endpoint
// (Retry-After: 0, or a date already past on a clock that is behind) is
// bounded below by the back-off's floor: nothing outside the worker can
// make a message come back at once, again and again, to the dead-letter
// queue.
func TestWorker_RetryAfterBoundedBelow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after func(w http.ResponseWriter)
	}{
		{"Zero", func(w http.ResponseWriter) { w.Header().Set("Retry-After", "0") }},
		{"PastDate", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", time.Now().Add(-30*time.Second).UTC().Format(http.TimeFormat))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{maxReceive: 3})
			var mu sync.Mutex
			var calls []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
				tc.after(w)
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			cfg := b.config()
			cfg.MinBackoff = time.Second
			b.start(cfg, h)
			b.send(`{"id":"busy"}`)
			waitUntil(t, "three calls", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) >= 3 })
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < len(calls); i++ {
				if gap := calls[i].Sub(calls[i-1]); gap < 900*time.Millisecond {
					t.Fatalf("call %d came %v after the one before, below the back-off's floor of %v", i+1, gap, cfg.MinBackoff)
				}
			}
		})
	}
}
