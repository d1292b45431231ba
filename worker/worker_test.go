package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

var _ worker.Ledger = (*ledger.DB)(nil)

// bundle is one test's queue, ledger and worker.
type bundle struct {
	t      *testing.T
	client *sqs.Client
	queue  sqstest.Queue
	db     *ledger.DB
	runs   *runLog
}

type options struct {
	fifo       bool
	maxReceive int // 0 = no dead-letter queue
}

func setup(t *testing.T, o options) *bundle {
	t.Helper()
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{FIFO: o.fifo, MaxReceiveCount: o.maxReceive, VisibilityTimeout: 5 * time.Second})
	return &bundle{t: t, client: client, queue: q, db: openLedger(t), runs: newRunLog()}
}

// openLedger opens a ledger on a new file, closed when the test ends.
func openLedger(t testing.TB) *ledger.DB {
	t.Helper()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// config is a worker configuration tuned for tests: short polls, leases and
// back-offs so that redeliveries happen within seconds.
func (b *bundle) config() worker.Config {
	return worker.Config{
		QueueURL:          b.queue.URL,
		WaitTime:          time.Second,
		VisibilityTimeout: 2 * time.Second,
		Key:               worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		Concurrency:       8,
		HandlerTimeout:    10 * time.Second,
		MinBackoff:        500 * time.Millisecond,
		MaxBackoff:        2 * time.Second,
		Grace:             10 * time.Second,
		Logger:            testLogger(b.t),
	}
}

// start runs a worker until the returned stop is called; stop returns Run's
// error and the worker's stats.
func (b *bundle) start(cfg worker.Config, h worker.Handler) (stop func() worker.Stats) {
	b.t.Helper()
	w, err := worker.New(cfg, b.client, b.db, h)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var stats worker.Stats
	stop = func() worker.Stats {
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
			stats = w.Stats()
		})
		return stats
	}
	b.t.Cleanup(func() { stop() })
	return stop
}

func (b *bundle) send(body string, edit ...func(*sqs.SendMessageInput)) {
	b.t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: &b.queue.URL, MessageBody: &body}
	for _, e := range edit {
		e(in)
	}
	if _, err := b.client.SendMessage(context.Background(), in); err != nil {
		b.t.Fatal(err)
	}
}

// waitEmpty waits until the queue has no messages, visible or in flight.
func (b *bundle) waitEmpty(timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		visible, inflight := sqstest.Count(b.t, b.client, b.queue.URL)
		if visible == 0 && inflight == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("queue not empty after %v: %d visible, %d in flight; runs %v", timeout, visible, inflight, b.runs.counts())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *bundle) record(key string) ledger.Record {
	b.t.Helper()
	rec, err := b.db.Get(context.Background(), key)
	if err != nil {
		b.t.Fatalf("ledger record %q: %v", key, err)
	}
	return rec
}

// runLog counts handler executions per key.
type runLog struct {
	mu   sync.Mutex
	runs map[string]int
}

func newRunLog() *runLog { return &runLog{runs: map[string]int{}} }

func (r *runLog) add(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key]++
	return r.runs[key]
}

func (r *runLog) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

func (r *runLog) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.runs {
		out[k] = v
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestWorker_Run(t *testing.T) {
	t.Parallel()

	t.Run("HappyPath", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			if m.Attempt != 1 || m.ReceiveCount < 1 || m.MessageID == "" || m.SentAt.IsZero() || m.QueueURL != b.queue.URL {
				return worker.Permanent(fmt.Errorf("bad metadata: %+v", m))
			}
			m.Result = []byte("done:" + m.Key)
			return nil
		}))
		for i := range 25 {
			b.send(fmt.Sprintf(`{"id":"op-%d","amount":%d}`, i, i))
		}
		b.waitEmpty(20 * time.Second)
		s := stop()
		for i := range 25 {
			key := fmt.Sprintf("op-%d", i)
			if n := b.runs.count(key); n != 1 {
				t.Errorf("%s ran %d times", key, n)
			}
			rec := b.record(key)
			if rec.State != ledger.StateComplete || string(rec.Result) != "done:"+key || rec.Attempts != 1 {
				t.Errorf("%s record: %+v", key, rec)
			}
		}
		if s.Completed != 25 || s.Deleted != 25 || s.Received != 25 {
			t.Errorf("stats %+v", s)
		}
		if dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 10, time.Second); len(dlq) != 0 {
			t.Errorf("%d messages in the DLQ", len(dlq))
		}
	})

	t.Run("DuplicatesRunOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		cfg := b.config()
		cfg.Pollers = 2
		var inFlight, maxInFlight atomic.Int32
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if n > maxInFlight.Load() {
				maxInFlight.Store(n)
			}
			b.runs.add(m.Key)
			time.Sleep(50 * time.Millisecond) // keep duplicates concurrent
			return nil
		}))
		const ops, copies = 5, 12
		var wg sync.WaitGroup
		for i := range ops {
			for range copies {
				wg.Go(func() { b.send(fmt.Sprintf(`{"id":"dup-%d"}`, i)) })
			}
		}
		wg.Wait()
		b.waitEmpty(30 * time.Second)
		s := stop()
		for i := range ops {
			if n := b.runs.count(fmt.Sprintf("dup-%d", i)); n != 1 {
				t.Errorf("dup-%d ran %d times, want 1", i, n)
			}
		}
		if s.Completed != ops || s.Duplicates < ops*(copies-1)-int64(s.InProgressElsewhere) {
			t.Errorf("stats %+v", s)
		}
		if s.Duplicates+s.Completed != ops*copies {
			t.Errorf("%d duplicates + %d completed, want %d deliveries settled", s.Duplicates, s.Completed, ops*copies)
		}
	})

	t.Run("RetryThenSuccess", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if b.runs.add(m.Key) < 3 {
				return errors.New("downstream unavailable")
			}
			return nil
		}))
		b.send(`{"id":"flaky"}`)
		b.waitEmpty(20 * time.Second)
		s := stop()
		rec := b.record("flaky")
		if b.runs.count("flaky") != 3 || rec.State != ledger.StateComplete || rec.Attempts != 3 {
			t.Fatalf("runs %d, record %+v", b.runs.count("flaky"), rec)
		}
		if s.Retried != 2 || s.Completed != 1 {
			t.Fatalf("stats %+v", s)
		}
	})

	t.Run("RetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		var first time.Time
		var gap atomic.Int64
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if b.runs.add(m.Key) == 1 {
				first = time.Now()
				return worker.RetryAfter(3*time.Second, errors.New("rate limited"))
			}
			gap.Store(int64(time.Since(first)))
			return nil
		}))
		b.send(`{"id":"later"}`)
		b.waitEmpty(20 * time.Second)
		stop()
		if g := time.Duration(gap.Load()); g < 2500*time.Millisecond {
			t.Fatalf("retried after %v, asked for 3s", g)
		}
	})

	t.Run("PermanentFailureDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return worker.Permanent(errors.New("card declined"))
		}))
		b.send(`{"id":"bad"}`, withAttr("Tenant", "acme"))
		b.waitEmpty(20 * time.Second)
		// A redelivery of the same operation goes the same way unrun.
		b.send(`{"id":"bad"}`)
		b.waitEmpty(20 * time.Second)
		s := stop()
		if n := b.runs.count("bad"); n != 1 {
			t.Fatalf("ran %d times, want 1", n)
		}
		rec := b.record("bad")
		if rec.State != ledger.StateFailed || !rec.Permanent || !strings.Contains(rec.LastError, "card declined") {
			t.Fatalf("record %+v", rec)
		}
		dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 10, 2*time.Second)
		if len(dlq) != 2 {
			t.Fatalf("%d messages in the DLQ, want 2", len(dlq))
		}
		m := dlq[0]
		if aws.ToString(m.Body) != `{"id":"bad"}` || !strings.Contains(attr(m, worker.AttrReason), "card declined") || attr(m, worker.AttrSourceMessageID) == "" {
			t.Fatalf("dead-lettered message: body %q attributes %v", aws.ToString(m.Body), m.MessageAttributes)
		}
		if attr(m, "Tenant") != "acme" && attr(dlq[1], "Tenant") != "acme" {
			t.Fatalf("original attributes lost: %v / %v", m.MessageAttributes, dlq[1].MessageAttributes)
		}
		if s.FailedPermanently != 1 || s.DeadLettered != 2 {
			t.Fatalf("stats %+v", s)
		}
	})

	t.Run("KeylessRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.send(`not json`)
		b.send(`{"no_id":true}`)
		b.send(`{"id":"fine"}`)
		b.waitEmpty(20 * time.Second)
		s := stop()
		if got := b.runs.counts(); len(got) != 1 || got["fine"] != 1 {
			t.Fatalf("runs %v", got)
		}
		dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 10, 2*time.Second)
		if len(dlq) != 2 || s.Keyless != 2 {
			t.Fatalf("%d in the DLQ, stats %+v", len(dlq), s)
		}
		for _, m := range dlq {
			if r := attr(m, worker.AttrReason); !strings.HasPrefix(r, "no operation key: ") || strings.Count(r, "no operation key") != 1 {
				t.Fatalf("reason %q", r)
			}
		}
	})

	t.Run("KeylessWithoutDLQLeftForRetention", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		cfg := b.config()
		cfg.MaxBackoff = 30 * time.Second
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error { return nil }))
		b.send(`garbage`)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, inflight := sqstest.Count(t, b.client, b.queue.URL); inflight == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the keyless message was not received")
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(3 * time.Second) // past the receive's visibility: the back-off holds it
		s := stop()
		visible, inflight := sqstest.Count(t, b.client, b.queue.URL)
		if visible+inflight != 1 || s.Keyless != 1 || s.Deleted != 0 {
			t.Fatalf("visible %d, in flight %d, stats %+v", visible, inflight, s)
		}
	})

	t.Run("ConflictRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.send(`{"id":"pay-1","amount":10}`)
		b.waitEmpty(20 * time.Second)
		b.send(`{"id":"pay-1","amount":99}`)
		b.waitEmpty(20 * time.Second)
		s := stop()
		if b.runs.count("pay-1") != 1 || s.Conflicts != 1 {
			t.Fatalf("runs %d, stats %+v", b.runs.count("pay-1"), s)
		}
		dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 10, 2*time.Second)
		if len(dlq) != 1 || !strings.Contains(attr(dlq[0], worker.AttrReason), "conflict") || !strings.Contains(aws.ToString(dlq[0].Body), "99") {
			t.Fatalf("DLQ %v", dlq)
		}
	})

	// On a FIFO queue SQS drops, for five minutes, a send whose
	// deduplication id it has seen. Two conflicting deliveries of one
	// completed operation are two dead letters, not one.
	t.Run("FIFOConflictsAllReachTheDLQ", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{fifo: true, maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		fifo := func(dedup string) func(*sqs.SendMessageInput) {
			return func(in *sqs.SendMessageInput) {
				in.MessageGroupId = aws.String("g")
				in.MessageDeduplicationId = aws.String(dedup)
			}
		}
		b.send(`{"id":"pay-1","amount":10}`, fifo("a"))
		b.waitEmpty(20 * time.Second)
		b.send(`{"id":"pay-1","amount":99}`, fifo("b"))
		b.send(`{"id":"pay-1","amount":98}`, fifo("c"))
		b.waitEmpty(20 * time.Second)
		s := stop()
		if b.runs.count("pay-1") != 1 || s.Conflicts != 2 || s.DeadLettered != 2 {
			t.Fatalf("runs %d, stats %+v", b.runs.count("pay-1"), s)
		}
		if visible, _ := sqstest.Count(t, b.client, b.queue.DLQURL); visible != 2 {
			t.Fatalf("DLQ holds %d messages, want both conflicting payloads", visible)
		}
		var bodies []string
		for range 2 {
			// A FIFO group gives its next message once the one before is gone.
			m := sqstest.Drain(t, b.client, b.queue.DLQURL, 1, 2*time.Second)
			if len(m) != 1 {
				t.Fatalf("DLQ after %q: nothing more", bodies)
			}
			bodies = append(bodies, aws.ToString(m[0].Body))
			if _, err := b.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &b.queue.DLQURL, ReceiptHandle: m[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
		if !strings.Contains(bodies[0], "99") || !strings.Contains(bodies[1], "98") {
			t.Fatalf("DLQ holds %q, want both conflicting payloads in order", bodies)
		}
	})

	t.Run("FIFOOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{fifo: true, maxReceive: 10})
		var mu sync.Mutex
		done := map[string][]int{}   // group -> sequence numbers completed, in order
		running := map[string]bool{} // group -> a message of it is running
		var violations []string
		failedOnce := false
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			var seq int
			fmt.Sscanf(m.Key[strings.LastIndex(m.Key, "-")+1:], "%d", &seq)
			mu.Lock()
			if running[m.GroupID] {
				violations = append(violations, "two messages of group "+m.GroupID+" at once")
			}
			running[m.GroupID] = true
			fail := m.GroupID == "A" && seq == 3 && !failedOnce
			if fail {
				failedOnce = true
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			running[m.GroupID] = false
			if fail {
				return errors.New("transient")
			}
			done[m.GroupID] = append(done[m.GroupID], seq)
			return nil
		}))
		for seq := range 8 {
			for _, g := range []string{"A", "B", "C"} {
				key := fmt.Sprintf("%s-%d", g, seq)
				b.send(fmt.Sprintf(`{"id":%q}`, key), func(in *sqs.SendMessageInput) {
					in.MessageGroupId = aws.String(g)
					in.MessageDeduplicationId = aws.String(key)
				})
			}
		}
		b.waitEmpty(30 * time.Second)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(violations) > 0 {
			t.Fatal(violations)
		}
		for _, g := range []string{"A", "B", "C"} {
			if fmt.Sprint(done[g]) != "[0 1 2 3 4 5 6 7]" {
				t.Errorf("group %s completed in order %v", g, done[g])
			}
		}
		if !failedOnce {
			t.Fatal("the injected failure did not happen")
		}
	})

	t.Run("LeaseTakeover", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		// A worker that died mid-operation left a claim with a lease.
		ctx := context.Background()
		if _, err := b.db.Claim(ctx, ledger.ClaimRequest{Key: "orphan", Owner: "dead-worker", Lease: 3 * time.Second}); err != nil {
			t.Fatal(err)
		}
		claimedAt := time.Now()
		var ranAt atomic.Int64
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			ranAt.Store(int64(time.Since(claimedAt)))
			if m.Attempt != 2 {
				return fmt.Errorf("attempt %d, want 2", m.Attempt)
			}
			return nil
		}))
		b.send(`{"id":"orphan"}`)
		// The run first: while the message waits out the lease, given
		// back for seconds, a server's approximate counts may show the
		// queue empty (moto's did).
		waitUntil(t, "the orphan to run", 20*time.Second, func() bool { return b.runs.count("orphan") > 0 })
		b.waitEmpty(20 * time.Second)
		s := stop()
		if b.runs.count("orphan") != 1 || s.Takeovers != 1 || s.InProgressElsewhere < 1 {
			t.Fatalf("runs %d, stats %+v", b.runs.count("orphan"), s)
		}
		if at := time.Duration(ranAt.Load()); at < 3*time.Second {
			t.Fatalf("ran %v after the claim, before its 3s lease lapsed", at)
		}
		if rec := b.record("orphan"); rec.State != ledger.StateComplete || rec.Attempts != 2 {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("HeartbeatKeepsLongWorkInvisible", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			select {
			case <-time.After(5 * time.Second): // 2.5 visibility timeouts
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		b.send(`{"id":"slow"}`)
		b.waitEmpty(20 * time.Second)
		s := stop()
		if b.runs.count("slow") != 1 || s.Received != 1 || s.Heartbeats < 2 {
			t.Fatalf("runs %d, stats %+v", b.runs.count("slow"), s)
		}
	})

	t.Run("Backpressure", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		cfg := b.config()
		cfg.Concurrency = 2
		cfg.Prefetch = worker.NoPrefetch
		release := make(chan struct{})
		var started atomic.Int32
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			started.Add(1)
			<-release
			return nil
		}))
		for i := range 10 {
			b.send(fmt.Sprintf(`{"id":"bp-%d"}`, i))
		}
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(1500 * time.Millisecond) // give the poller time to over-receive, if it would
		visible, inflight := sqstest.Count(t, b.client, b.queue.URL)
		n := started.Load() // before the handlers are let go
		close(release)
		if n != 2 || inflight != 2 || visible != 8 {
			t.Fatalf("with 2 slots: %d started, %d in flight, %d visible", n, inflight, visible)
		}
		b.waitEmpty(20 * time.Second)
		if s := stop(); s.Completed != 10 {
			t.Fatalf("stats %+v", s)
		}
	})

	// Messages received ahead of free handlers wait claimed, kept out of
	// sight by the heartbeat, and start as handlers come free; no more of
	// them are received than the prefetch allows.
	t.Run("Prefetch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		cfg := b.config()
		cfg.Concurrency = 2
		cfg.Prefetch = 3
		release := make(chan struct{})
		var started, running, most atomic.Int32
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			started.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			for {
				old := most.Load()
				if n <= old || most.CompareAndSwap(old, n) {
					break
				}
			}
			b.runs.add(m.Key)
			<-release
			return nil
		}))
		for i := range 10 {
			b.send(fmt.Sprintf(`{"id":"pf-%d"}`, i))
		}
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		// Past the 2 s visibility timeout: the waiting ones must stay in
		// flight (the heartbeat) without being received again.
		time.Sleep(3 * time.Second)
		visible, inflight := sqstest.Count(t, b.client, b.queue.URL)
		var claimedAhead int
		for i := range 10 {
			rec, err := b.db.Get(context.Background(), fmt.Sprintf("pf-%d", i))
			if err == nil && rec.State == ledger.StateInProgress {
				claimedAhead++
			}
		}
		// What had started, read before the handlers are let go.
		n := started.Load()
		close(release)
		if n != 2 || inflight != 5 || visible != 5 || claimedAhead != 5 {
			t.Fatalf("2 handlers and a prefetch of 3: %d started, %d in flight, %d visible, %d claimed", n, inflight, visible, claimedAhead)
		}
		b.waitEmpty(20 * time.Second)
		s := stop()
		if s.Completed != 10 || s.Received != 10 || most.Load() != 2 {
			t.Fatalf("stats %+v, at most %d handlers at once", s, most.Load())
		}
		for k, n := range b.runs.counts() {
			if n != 1 {
				t.Errorf("%s ran %d times", k, n)
			}
		}
	})

	// A stop gives back what was received ahead and never started: its
	// claims are released and it is visible again at once.
	t.Run("ShutdownGivesBackPrefetched", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		cfg := b.config()
		cfg.Concurrency = 1
		cfg.Prefetch = 2
		var started atomic.Int32
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			started.Add(1)
			b.runs.add(m.Key)
			time.Sleep(time.Second)
			return nil
		}))
		for i := range 3 {
			b.send(fmt.Sprintf(`{"id":"gb-%d"}`, i))
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, inflight := sqstest.Count(t, b.client, b.queue.URL); started.Load() == 1 && inflight == 3 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		s := stop()
		if s.Completed != 1 || s.GivenBack != 2 || s.Claimed != 1 || started.Load() != 1 {
			t.Fatalf("after a stop with 1 running and 2 waiting: stats %+v, %d started", s, started.Load())
		}
		if visible, inflight := sqstest.Count(t, b.client, b.queue.URL); visible != 2 || inflight != 0 {
			t.Fatalf("after the stop: %d visible, %d in flight; want the 2 given back visible", visible, inflight)
		}
		var released int
		for i := range 3 {
			rec, err := b.db.Get(context.Background(), fmt.Sprintf("gb-%d", i))
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				released++
			case err != nil:
				t.Fatal(err)
			case rec.State != ledger.StateComplete:
				t.Errorf("record %+v", rec)
			}
		}
		if released != 2 {
			t.Fatalf("%d claims released, want 2", released)
		}
	})

	t.Run("ShutdownDrainsRunningWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		var started atomic.Int32
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			started.Add(1)
			time.Sleep(time.Second)
			b.runs.add(m.Key)
			return nil
		}))
		for i := range 4 {
			b.send(fmt.Sprintf(`{"id":"drain-%d"}`, i))
		}
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < 4 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		s := stop() // within the 10s grace
		if s.Completed != 4 || len(b.runs.counts()) != 4 {
			t.Fatalf("after a graceful stop: stats %+v, runs %v", s, b.runs.counts())
		}
		b.waitEmpty(5 * time.Second)
	})

	t.Run("ShutdownGraceCutsWorkWithoutAcknowledging", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 10})
		cfg := b.config()
		cfg.Grace = 500 * time.Millisecond
		var started atomic.Int32
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			started.Add(1)
			<-ctx.Done()
			return ctx.Err()
		}))
		b.send(`{"id":"cut"}`)
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		s := stop()
		if s.Completed != 0 || s.Deleted != 0 || s.Retried != 1 {
			t.Fatalf("stats %+v", s)
		}
		// The message is back at once for the next worker, and the ledger
		// lets it claim the operation.
		rec := b.record("cut")
		if rec.State != ledger.StateFailed || rec.Permanent {
			t.Fatalf("record %+v", rec)
		}
		stop2 := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error { return nil }))
		b.waitEmpty(10 * time.Second)
		if s := stop2(); s.Completed != 1 {
			t.Fatalf("second worker: %+v", s)
		}
	})
}

func TestNew_Invalid(t *testing.T) {
	t.Parallel()
	client := sqstest.NewClient(t, nil)
	db := openLedger(t)
	h := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
	good := worker.Config{QueueURL: "http://127.0.0.1:1/q", Key: worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"}}
	cases := map[string]func(*worker.Config){
		"NoQueue":        func(c *worker.Config) { c.QueueURL = "" },
		"MaxMessages11":  func(c *worker.Config) { c.MaxMessages = 11 },
		"WaitTime21s":    func(c *worker.Config) { c.WaitTime = 21 * time.Second },
		"Visibility1.5s": func(c *worker.Config) { c.VisibilityTimeout = 1500 * time.Millisecond },
		"BadPointer":     func(c *worker.Config) { c.Key.Pointer = "id" },
		"Backoffs":       func(c *worker.Config) { c.MinBackoff, c.MaxBackoff = time.Minute, time.Second },
	}
	for name, edit := range cases {
		cfg := good
		edit(&cfg)
		if _, err := worker.New(cfg, client, db, h); !errors.Is(err, worker.ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := worker.New(good, client, db, nil); !errors.Is(err, worker.ErrInvalidConfig) {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := worker.New(good, client, db, h); err != nil {
		t.Errorf("good config: %v", err)
	}
}

func TestWorker_MissingQueue(t *testing.T) {
	t.Parallel()
	client := sqstest.NewClient(t, nil)
	db := openLedger(t)
	url := sqstest.Endpoint(t) + "/000000000000/no-such-queue"
	w, err := worker.New(worker.Config{QueueURL: url, Key: worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"}},
		client, db, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run on a missing queue: %v", err)
	}
}

func withAttr(name, value string) func(*sqs.SendMessageInput) {
	return func(in *sqs.SendMessageInput) {
		if in.MessageAttributes == nil {
			in.MessageAttributes = map[string]types.MessageAttributeValue{}
		}
		in.MessageAttributes[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
	}
}

func attr(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

// A message dead-lettered a second time (after a replay) carries ten
// attributes already; its reason and source id must be the new ones.
func TestWorker_DeadLetterReplacesReasonAtTheAttributeLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		return worker.Permanent(errors.New("still broken"))
	}))
	edits := []func(*sqs.SendMessageInput){withAttr(worker.AttrReason, "old reason"), withAttr(worker.AttrSourceMessageID, "old-id")}
	for i := range 8 {
		edits = append(edits, withAttr(fmt.Sprintf("A%d", i), "v"))
	}
	b.send(`{"id":"again"}`, edits...)
	b.waitEmpty(20 * time.Second)
	stop()
	dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 1, 5*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("%d in the DLQ", len(dlq))
	}
	m := dlq[0]
	if got := attr(m, worker.AttrReason); !strings.Contains(got, "still broken") {
		t.Fatalf("reason %q", got)
	}
	if got := attr(m, worker.AttrSourceMessageID); got == "old-id" || got == "" {
		t.Fatalf("source id %q", got)
	}
	if len(m.MessageAttributes) != 10 {
		t.Fatalf("%d attributes", len(m.MessageAttributes))
	}
}

// The reason a message was dead-lettered is cut to 1 KiB without splitting
// a character: a reason cut inside one is not valid UTF-8.
func TestWorker_DeadLetterReasonCutWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		return worker.Permanent(errors.New("xy" + strings.Repeat("é", 600))) // an odd number of bytes before the é: a cut at 1024 falls inside one
	}))
	b.send(`{"id":"long-reason"}`)
	b.waitEmpty(20 * time.Second)
	stop()
	dlq := sqstest.Drain(t, b.client, b.queue.DLQURL, 1, 5*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ %v", dlq)
	}
	reason := attr(dlq[0], worker.AttrReason)
	if !utf8.ValidString(reason) || len(reason) > 1024 || len(reason) < 1000 || !strings.HasPrefix(reason, "failed permanently: permanent: xy") {
		t.Errorf("reason of %d bytes, valid UTF-8 %v: %q", len(reason), utf8.ValidString(reason), reason)
	}
}
