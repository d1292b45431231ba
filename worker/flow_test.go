package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

// downstream is an http endpoint that answers 503 while down, 200 (once
// per operation key, counted) otherwise, and records every call.
type downstream struct {
	down  atomic.Bool
	once  atomic.Bool // while down, answer the next call 200
	mu    sync.Mutex
	calls []call
	done  map[string]int
}

type call struct {
	at   time.Time
	key  string
	down bool
}

func newDownstream(t *testing.T) (*downstream, string) {
	d := &downstream{done: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		down := d.down.Load() && !d.once.CompareAndSwap(true, false)
		d.mu.Lock()
		d.calls = append(d.calls, call{time.Now(), key, down})
		if !down {
			d.done[key]++
		}
		d.mu.Unlock()
		if down {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return d, srv.URL
}

// callsWhileDown counts the calls answered 503.
func (d *downstream) callsWhileDown() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if c.down {
			n++
		}
	}
	return n
}

func (d *downstream) doneCount() (keys, most int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.done {
		most = max(most, n)
	}
	return len(d.done), most
}

// sendMany sends n messages {"id": prefix-i, "tenant": tenant(i)} in batches of ten.
func (b *bundle) sendMany(n int, body func(i int) string) {
	b.t.Helper()
	for start := 0; start < n; start += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i := start; i < min(start+10, n); i++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body(i))})
		}
		out, err := b.client.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &b.queue.URL, Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			b.t.Fatalf("send: %v %+v", err, out)
		}
	}
}

// receiveOnce receives each of the n messages in the queue once, as
// another consumer would, and then makes the i-th (in the order received)
// visible again after visible(i) seconds. Each is kept out of sight until
// all are received, so that none is received twice meanwhile.
func (b *bundle) receiveOnce(n int, visible func(i int) int32) {
	b.t.Helper()
	ctx := context.Background()
	var handles []*string
	deadline := time.Now().Add(30 * time.Second)
	for len(handles) < n {
		if time.Now().After(deadline) {
			b.t.Fatalf("received %d of %d messages", len(handles), n)
		}
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &b.queue.URL,
			MaxNumberOfMessages: int32(min(n-len(handles), 10)), WaitTimeSeconds: 1, VisibilityTimeout: 60})
		if err != nil {
			b.t.Fatal(err)
		}
		for _, m := range out.Messages {
			handles = append(handles, m.ReceiptHandle)
		}
	}
	for i, h := range handles {
		if _, err := b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &b.queue.URL,
			ReceiptHandle: h, VisibilityTimeout: visible(i)}); err != nil {
			b.t.Fatal(err)
		}
	}
}

// A pause holds the messages in hand; those whose receive count is one
// short of the redrive's are sent again at once (standard queue), their
// copies' counts starting again: a worker killed during the outage, which
// cannot defer at its stop, leaves none of them at its last receive.
func TestWorker_PauseDefersNearRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{maxReceive: 3})
	b.sendMany(10, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	// Each message received once elsewhere and given back: the worker's
	// receive is its second, one short of the redrive.
	b.receiveOnce(10, func(int) int32 { return 0 })
	var st starts
	cfg := b.config()
	cfg.VisibilityTimeout = 30 * time.Second
	cfg.Flow.Scope = "near-redrive"
	cfg.Flow.Rate, cfg.Flow.Burst = 1, 1 // one start a second: the rest are held in hand
	w, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		st.add(m.Key)
		return nil
	}))
	started := func() int { st.mu.Lock(); defer st.mu.Unlock(); return len(st.at) }
	waitUntil(t, "the first operation to start", 15*time.Second, func() bool { return started() >= 1 })
	if _, err := worker.PauseByHand(ctx, b.db, cfg.Flow.Scope, time.Now().Add(time.Minute), "maintenance", "test", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the held messages to be deferred", 15*time.Second, func() bool { return w.Stats().Deferred >= 5 })
	if _, _, _, err := worker.Resume(ctx, b.db, cfg.Flow.Scope); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every operation to start", time.Minute, func() bool { return started() == 10 })
	b.waitEmpty(30 * time.Second)
	s := stop()
	t.Logf("stats %+v", s)
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages in the dead-letter queue", n)
	}
	for key, at := range st.at {
		if len(at) != 1 {
			t.Errorf("%s started %d times", key, len(at))
		}
	}
}

// A downstream that answers one probe and is down again pauses the intake
// again: the ramp that followed the probe does not go on calling it.
func TestWorker_DownAgainWhileRamping(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 4})
	d, url := newDownstream(t)
	d.down.Store(true)
	b.sendMany(60, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.MinBackoff, cfg.MaxBackoff = time.Second, 8*time.Second
	cfg.Flow.Rate = 20 // every message in hand, held for the rate
	w, stop := b.startOn(cfg, b.client, b.db, h)
	waitUntil(t, "the intake to pause", 30*time.Second, func() bool { return w.Stats().FlowPauses == 1 })
	d.once.Store(true) // the next probe succeeds
	waitUntil(t, "the probe to succeed", 30*time.Second, func() bool { return !d.once.Load() })
	before := d.callsWhileDown()
	time.Sleep(20 * time.Second)
	after := d.callsWhileDown() - before
	d.down.Store(false)
	waitUntil(t, "every operation to complete", 120*time.Second, func() bool { n, _ := d.doneCount(); return n == 60 })
	s := stop()
	t.Logf("%d calls in the 20 s after the probe, the downstream down; stats %+v", after, s)
	if s.FlowPauses < 2 {
		t.Errorf("paused %d times: the ramp after the probe did not pause again", s.FlowPauses)
	}
	// The trip's ten failures, the handlers running when it tripped, and
	// probes at most 10 s apart.
	if after > 10+cfg.Concurrency+4 {
		t.Errorf("%d calls to the endpoint in the 20 s after the probe, down again", after)
	}
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages in the dead-letter queue", n)
	}
}

// An outage of the handlers' downstream pauses the intake instead of
// burning the backlog's receives: 300 operations waiting, an http endpoint
// that answers 503 for 45 s, the redrive after 4 receives, back-off 1–8 s.
// Nothing reaches the dead-letter queue, the endpoint sees few calls while
// it is down (the first failures, then one probe at a time), and the
// backlog drains soon after it is back.
func TestWorker_OutagePausesIntake(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 4})
	d, url := newDownstream(t)
	d.down.Store(true)
	b.sendMany(300, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.MinBackoff, cfg.MaxBackoff = time.Second, 8*time.Second
	_, stop := b.startOn(cfg, b.client, b.db, h)
	time.Sleep(45 * time.Second)
	d.down.Store(false)
	back := time.Now()
	whileDown := d.callsWhileDown()
	waitUntil(t, "every operation to complete", 120*time.Second, func() bool { n, _ := d.doneCount(); return n == 300 })
	drained := time.Since(back)
	b.waitEmpty(60 * time.Second)
	s := stop()
	keys, most := d.doneCount()
	t.Logf("calls while down %d; drained %v after the endpoint came back; stats %+v", whileDown, drained.Round(100*time.Millisecond), s)
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages in the dead-letter queue after a 45 s outage", n)
	}
	if keys != 300 || most != 1 {
		t.Errorf("%d operations done, one of them %d times", keys, most)
	}
	if whileDown > 60 {
		t.Errorf("%d calls to the endpoint while it was down, want at most 60", whileDown)
	}
	if drained > 30*time.Second {
		t.Errorf("the backlog drained %v after the endpoint came back, want within 30s", drained)
	}
	if s.FlowPauses < 1 || s.Probes < 1 {
		t.Errorf("no pause or no probe: %+v", s)
	}
}

// A key that fails while others succeed is its own message's problem: it
// pauses nothing and follows its back-off to the dead-letter queue.
func TestWorker_PoisonKeyPausesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 3})
	var mu sync.Mutex
	ok := 0
	cfg := b.config()
	cfg.MinBackoff, cfg.MaxBackoff = 500*time.Millisecond, time.Second
	var poisoned atomic.Int64
	_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		if m.Key == "poison" {
			poisoned.Add(1)
			return worker.Unavailable(0, fmt.Errorf("503 for this one"))
		}
		mu.Lock()
		ok++
		mu.Unlock()
		return nil
	}))
	b.send(`{"id":"poison"}`)
	b.sendMany(30, func(i int) string { return fmt.Sprintf(`{"id":"ok-%d"}`, i) })
	// On its last receive it is held, to learn whether an outage has
	// begun; others that succeed meanwhile say it has not, well within
	// the trip's window (30 s).
	waitUntil(t, "the poison message's last receive", 20*time.Second, func() bool { return poisoned.Load() >= 3 })
	b.sendMany(30, func(i int) string { return fmt.Sprintf(`{"id":"ok-%d"}`, 30+i) })
	waitUntil(t, "the poison message in the dead-letter queue", 15*time.Second, func() bool { return b.dlqCount() == 1 })
	b.waitEmpty(30 * time.Second)
	s := stop()
	if s.FlowPauses != 0 || ok != 60 {
		t.Fatalf("%d others done; stats %+v", ok, s)
	}
}

// starts records when each operation started, by key.
type starts struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *starts) add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string][]time.Time{}
	}
	s.at[key] = append(s.at[key], time.Now())
}

// mostInASecond is the most starts of the given keys in any whole second
// (a window of one second starting at any start).
func (s *starts) mostInASecond(keep func(key string) bool) (most int, first, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []time.Time
	for k, ts := range s.at {
		if keep(k) {
			all = append(all, ts...)
		}
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	for i := range all {
		n := 0
		for j := i; j < len(all) && all[j].Sub(all[i]) < time.Second; j++ {
			n++
		}
		most = max(most, n)
	}
	if len(all) > 0 {
		first, last = all[0], all[len(all)-1]
	}
	return most, first, last
}

// timedReserves is a ledger whose reservations are timed: longest is the
// longest call, and overdue the longest a taken token had been due, by the
// worker's reading of the grant (see the worker's reserve), when its answer
// came: how late its message could start on it.
type timedReserves struct {
	worker.Ledger
	worker.FlowLedger
	longest, overdue *atomic.Int64
	// slow, when positive, holds each answer back after the ledger took
	// the tokens, for from 3/4 to 5/4 of slow at random: a store (or a
	// network) slow to answer, and unevenly so.
	slow time.Duration
}

func (l timedReserves) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error) {
	start := time.Now()
	g, err := l.FlowLedger.Reserve(ctx, r)
	if l.slow > 0 {
		time.Sleep(l.slow*3/4 + rand.N(l.slow/2))
	}
	took := time.Since(start)
	raise(l.longest, took)
	if err == nil {
		at := start.Add(min(max(g.Now.Sub(start), 0), took))
		for k, s := range g.Starts {
			if g.Taken[k] {
				raise(l.overdue, time.Since(at.Add(s)))
			}
		}
	}
	return g, err
}

// raise raises v to d if d is greater.
func raise(v *atomic.Int64, d time.Duration) {
	for {
		if old := v.Load(); int64(d) <= old || v.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// sharedLedgers opens n ledgers on one store of the backend named: the
// same bbolt file (one process), or n clients of one PostgreSQL table or
// one DynamoDB table, as n hosts have.
func sharedLedgers(t *testing.T, b *bundle, backend string, n int, skews ...time.Duration) []worker.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make([]worker.Ledger, n)
	switch backend {
	case "bbolt":
		for i := range out {
			out[i] = b.db
		}
	case "postgres":
		raw, _ := pgtest.Schema(t)
		opts := postgres.Options{URL: raw, Table: "ops"}
		if err := postgres.Init(ctx, opts); err != nil {
			t.Fatal(err)
		}
		for i := range out {
			l, err := postgres.Open(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			out[i] = l
		}
	case "dynamodb":
		client := dynamotest.NewClient(t, nil)
		opts := dynamodb.Options{Table: dynamotest.Table(t, client)}
		if _, err := dynamodb.Init(ctx, client, opts); err != nil {
			t.Fatal(err)
		}
		for i := range out {
			o := opts
			if i < len(skews) {
				skew := skews[i]
				o.Now = func() time.Time { return time.Now().Add(skew) }
			}
			l, err := dynamodb.Open(ctx, dynamotest.NewClient(t, nil), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			out[i] = l
		}
	}
	return out
}

// Three workers on one ledger with a rate of 40 per second start at most
// 44 operations in any whole second, and finish 600 in about 15 s: on the
// embedded ledger (three workers of one process), on PostgreSQL (the
// server's clock), and on DynamoDB, whose hosts' clocks decide: in
// "dynamodb" the three workers read one clock; in "dynamodb/skewed" their
// ledgers read clocks 250 ms apart (one behind, one ahead), and the starts
// of a second may exceed the rate by the documented rate × s (s = 500 ms,
// the widest difference: 20) and no more. In "postgres/slow" each
// reservation's answer comes a random 300 to 500 ms after the server took
// its tokens, as from a store slow to answer and unevenly so (a loaded
// DynamoDB table), and the starts of a second stay within 44 and the
// rate's share of the answers' variation beyond the slack (50).
func TestWorker_RateHeldAcrossWorkers(t *testing.T) {
	t.Parallel()
	skews := []time.Duration{0, 250 * time.Millisecond, -250 * time.Millisecond}
	for _, backend := range []string{"bbolt", "postgres", "dynamodb", "dynamodb/skewed", "postgres/slow"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{maxReceive: 5})
			var st starts
			b.sendMany(600, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
			cfg := b.config()
			cfg.VisibilityTimeout = 30 * time.Second
			cfg.Flow.Rate, cfg.Flow.Burst = 40, 1
			var stops []func() worker.Stats
			var longest, overdue atomic.Int64
			var spread time.Duration // the widest difference between the ledgers' clocks
			var ls []worker.Ledger
			if backend == "dynamodb/skewed" {
				spread, ls = slices.Max(skews)-slices.Min(skews), sharedLedgers(t, b, "dynamodb", 3, skews...)
			} else {
				ls = sharedLedgers(t, b, strings.TrimSuffix(backend, "/slow"), 3)
			}
			var slow time.Duration
			if backend == "postgres/slow" {
				slow = 400 * time.Millisecond
			}
			for _, l := range ls {
				l = timedReserves{Ledger: l, FlowLedger: l.(worker.FlowLedger), longest: &longest, overdue: &overdue, slow: slow}
				_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
					st.add(m.Key)
					return nil
				}))
				stops = append(stops, stop)
			}
			// 15 s at the rate; a slow store (moto's DynamoDB answers
			// a reservation in seconds under load) takes longer, and is
			// held to the same bound in every second.
			waitUntil(t, "every operation to start", 3*time.Minute, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.at) == 600 })
			b.waitEmpty(time.Minute)
			var deferred int64
			for _, stop := range stops {
				deferred += stop().Deferred
			}
			most, first, last := st.mostInASecond(func(string) bool { return true })
			// Tokens are asked for no sooner than the answer is
			// expected, those that come due by more than an interval or
			// 50 ms anyway are asked for once more, and a start later
			// than that on its token takes another: the starts of a
			// second are the tokens of a second and that slack, and the
			// burst, 43, and the rate's share of the clocks' difference
			// (a second answer slower than the first can add its
			// lateness; rare enough that the bound holds it). A store
			// whose answers vary brings tokens due before their answer by
			// up to that variation (the lead is as long as answers lately
			// took), and once the budget for asking again is spent they
			// are kept and start that late beside the next ones on time:
			// the slow store's answers vary by half of slow, of which
			// 50 ms is the slack already counted (on a CI run with moto
			// beside it, 45 in a second once, for 44).
			bound := 44 + int(math.Ceil(40*spread.Seconds())) + int(math.Ceil(40*max(slow/2-50*time.Millisecond, 0).Seconds()))
			t.Logf("%s: 600 operations in %v, at most %d in a second (bound %d: longest reservation %v, answers up to %v after a token's time, clocks %v apart); %d deferred",
				backend, last.Sub(first).Round(100*time.Millisecond), most, bound, time.Duration(longest.Load()).Round(time.Millisecond),
				time.Duration(overdue.Load()).Round(time.Millisecond), spread, deferred)
			if most > bound {
				t.Errorf("%d operations started within one second, above the rate of 40 (burst 1) and its slack: at most %d", most, bound)
			}
			// Faster than the rate allows is a failure whatever the
			// store; slower is one when the store answered within a
			// second (a store slower than that, such as a local DynamoDB
			// server starved of CPU, cannot carry the rate, and the run
			// only says so).
			// Clocks apart can bunch starts, not add to the rate that a
			// backlog sustains: the bucket's time moves on by an interval
			// per token whichever host takes it.
			switch d, least := last.Sub(first), time.Duration(float64(14*time.Second)/(1+spread.Seconds())); {
			case d < least:
				t.Errorf("600 operations at 40 per second took %v, less than the %v the rate allows", d, least)
			case d > 18*time.Second && time.Duration(longest.Load()) < time.Second:
				t.Errorf("600 operations at 40 per second took %v, want at most 18s with reservations answered within %v", d, time.Duration(longest.Load()))
			case d > 18*time.Second:
				t.Logf("%s: the rate was not sustained (%v for 600), with reservations taking up to %v", backend, d, time.Duration(longest.Load()))
			}
		})
	}
}

// A hot partition is held to its own rate while quiet ones flow: a tenant
// of 150 operations at 5 per second takes about 30 s, and 20 tenants of 4
// operations each are done within 15 s; nothing is dead-lettered although
// the redrive comes after 3 receives and the visibility timeout is 5 s.
func TestWorker_PartitionRate(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 3})
	var st starts
	var bodies []string
	for i := range 150 {
		bodies = append(bodies, fmt.Sprintf(`{"id":"hot-%d","tenant":"hot"}`, i))
	}
	for q := range 20 {
		for i := range 4 {
			bodies = append(bodies, fmt.Sprintf(`{"id":"quiet-%d-%d","tenant":"q%d"}`, q, i, q))
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	b.sendMany(len(bodies), func(i int) string { return bodies[i] })
	cfg := b.config()
	cfg.VisibilityTimeout = 5 * time.Second
	cfg.Flow.Partitions = []worker.FlowPartition{{Pointer: "/tenant", Rate: 5, Burst: 1}}
	start := time.Now()
	_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		st.add(m.Key)
		return nil
	}))
	waitUntil(t, "every operation to start", 90*time.Second, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.at) == 230 })
	s := stop()
	hot := func(k string) bool { return strings.HasPrefix(k, "hot-") }
	most, _, hotLast := st.mostInASecond(hot)
	_, _, quietLast := st.mostInASecond(func(k string) bool { return !hot(k) })
	t.Logf("hot: at most %d in a second, done after %v; quiet done after %v; stats %+v", most, hotLast.Sub(start).Round(100*time.Millisecond), quietLast.Sub(start).Round(100*time.Millisecond), s)
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages dead-lettered", n)
	}
	if n := len(st.at); n != 230 {
		t.Errorf("%d operations started, want 230", n)
	}
	if most > 6 {
		t.Errorf("the hot tenant started %d operations within one second, above its rate of 5", most)
	}
	if d := quietLast.Sub(start); d > 15*time.Second {
		t.Errorf("the quiet tenants were done after %v, want within 15s", d)
	}
	// The hot tenant's excess is deferred into a queue, each copy coming
	// back as the bucket can take it: deferred all for the bucket's next
	// token, all but a few would be deferred again, over and over.
	if s.Deferred > 150*3/2 {
		t.Errorf("%d deferred copies for 150 hot operations, want at most 1.5 per operation", s.Deferred)
	}
}

// A worker that stops during a pause defers the messages it holds whose
// receive count nears the redrive's, rather than giving them back: a
// rolling restart during an outage sends nothing to the dead-letter queue.
func TestWorker_StopDuringPauseDefers(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 2})
	d, url := newDownstream(t)
	d.down.Store(true)
	b.sendMany(40, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.Flow.Trip = worker.Trip{Failures: 3, Keys: 2}
	for round := range 3 {
		w, stop := b.startOn(cfg, b.client, b.db, h)
		waitUntil(t, "the intake to pause", 20*time.Second, func() bool { return w.Health().Paused && w.Health().InFlight > 0 })
		s := stop()
		t.Logf("round %d: stats %+v", round, s)
	}
	if n := b.dlqCount(); n != 0 {
		t.Fatalf("%d messages in the dead-letter queue after three stops during an outage", n)
	}
	d.down.Store(false)
	_, stop := b.startOn(cfg, b.client, b.db, h)
	waitUntil(t, "every operation to complete", 60*time.Second, func() bool { n, _ := d.doneCount(); return n == 40 })
	stop()
	if n := b.dlqCount(); n != 0 {
		t.Fatalf("%d messages in the dead-letter queue", n)
	}
}

// A stop that comes while a received batch's claims are being written,
// during a pause, defers what the pause holds near the redrive's receive
// count rather than give it back for its last receive.
func TestWorker_StopDuringClaimsDefers(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 2})
	b.sendMany(3, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	l := &watchedLedger{DB: b.db, claimGate: make(chan struct{}), claimWaiting: make(chan struct{})}
	cfg := b.config()
	cfg.Flow.Scope = "stop-during-claims"
	cfg.Concurrency, cfg.Prefetch = 3, worker.NoPrefetch // no second receive in flight at the stop
	w, err := worker.New(cfg, b.client, l, worker.HandlerFunc(func(context.Context, *worker.Message) error {
		t.Error("a handler ran during the pause")
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	stopDuringClaim(t, w, l, func() {
		if _, err := worker.PauseByHand(context.Background(), b.db, cfg.Flow.Scope, time.Now().Add(time.Minute), "maintenance", "test", 0); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the worker to see the pause", 15*time.Second, func() bool { return w.Health().Paused })
	})
	s := w.Stats()
	t.Logf("stats %+v", s)
	if s.GivenBack != 0 || s.Deferred != s.Received {
		t.Fatalf("%d of %d received given back for their last receive, %d deferred", s.GivenBack, s.Received, s.Deferred)
	}
	if n := b.dlqCount(); n != 0 {
		t.Fatalf("%d messages in the dead-letter queue", n)
	}
}

// refuseSends answers every SendMessage as SQS does a caller without
// sqs:SendMessage on the queue, and passes everything else on.
type refuseSends struct {
	base    http.RoundTripper
	refused atomic.Int64
}

func (r *refuseSends) RoundTrip(req *http.Request) (*http.Response, error) {
	if sqstest.Operation(req) != "SendMessage" {
		return r.base.RoundTrip(req)
	}
	r.refused.Add(1)
	body := `{"__type":"com.amazonaws.sqs#AccessDenied","message":"User is not authorized to perform: sqs:SendMessage"}`
	return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Query-Error": {"AccessDenied;Sender"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: req, ContentLength: int64(len(body))}, nil
}

// On a FIFO queue a failure of the downstream's kind with no outage known
// yet is held for the verdict from the receive before the last: a worker
// stopped while it holds the message gives back a receive that is not its
// last, which runs once the downstream is back.
func TestWorker_FIFOHeldBeforeLastReceive(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 3})
	b.sendGroup("g", `{"id":"only"}`)
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	var counts []int
	h := worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, m.ReceiveCount)
		if down.Load() {
			return worker.Unavailable(0, errors.New("connection refused"))
		}
		return nil
	})
	attempts := func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(counts) }
	cfg := b.config()
	cfg.MinBackoff, cfg.MaxBackoff = 200*time.Millisecond, 400*time.Millisecond
	cfg.Flow.Trip = worker.Trip{Failures: 1000} // no pause: the verdict never comes
	_, stop := b.startOn(cfg, b.client, b.db, h)
	waitUntil(t, "five attempts", 20*time.Second, func() bool { return len(attempts()) >= 5 })
	stop()
	if got := attempts(); slices.Max(got) != 2 {
		t.Fatalf("receive counts of the attempts %v: want the message held from receive 2 of 3", got)
	}
	down.Store(false)
	_, stop = b.startOn(cfg, b.client, b.db, h)
	waitUntil(t, "the operation to complete", 20*time.Second, func() bool { return b.record("only").State == ledger.StateComplete })
	stop()
	if c := b.dlqCount(); c != 0 {
		t.Fatalf("%d messages in the dead-letter queue; attempts at receives %v", c, attempts())
	}
}

// A deferral whose copy SQS refuses (no sqs:SendMessage on the queue)
// leaves the message held: never deleted, never dead-lettered, and run
// once the downstream is back.
func TestWorker_DeferRefusedKeepsTheMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 2})
	d, url := newDownstream(t)
	d.down.Store(true)
	const n = 10
	b.sendMany(n, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	refuse := &refuseSends{base: loopback.Transport()}
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.Flow.Trip = worker.Trip{Failures: 3, Keys: 2}
	w, stop := b.startOn(cfg, sqstest.NewClient(t, refuse), b.db, h)
	// Every message's receive count (1) is maxReceiveCount − 1: once its
	// failure is the outage's, the worker tries to defer it.
	waitUntil(t, "the worker to try a deferral", 30*time.Second, func() bool { return refuse.refused.Load() > 0 && w.Health().Paused })
	time.Sleep(3 * time.Second) // a few beats and probes more
	if visible, inFlight := sqstest.Count(t, b.client, b.queue.URL); visible+inFlight != n {
		t.Fatalf("%d messages left in the queue (%d visible, %d in flight) after refused copies, want all %d", visible+inFlight, visible, inFlight, n)
	}
	if c := b.dlqCount(); c != 0 {
		t.Fatalf("%d messages dead-lettered after refused copies", c)
	}
	d.down.Store(false)
	waitUntil(t, "every operation to complete", 60*time.Second, func() bool { done, _ := d.doneCount(); return done == n })
	s := stop()
	if c := b.dlqCount(); c != 0 {
		t.Fatalf("%d messages in the dead-letter queue", c)
	}
	t.Logf("%d copies refused; stats %+v", refuse.refused.Load(), s)
}

// A FIFO message that fails during an outage near the redrive's receive
// count is held with its group, never sent again: given back, its next
// receives burned its last before the pause tripped (here it never trips),
// and SQS's redrive moved it to the dead-letter queue.
func TestWorker_FIFOOutageNearRedriveHeld(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fifo: true, maxReceive: 2})
	d, url := newDownstream(t)
	d.down.Store(true)
	for g := range 3 {
		b.sendGroup(fmt.Sprintf("g-%d", g), fmt.Sprintf(`{"id":"g%d-a"}`, g), fmt.Sprintf(`{"id":"g%d-b"}`, g))
	}
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Flow.Trip = worker.Trip{Failures: 1000} // no pause: the outage is the messages' to bear
	_, stop := b.startOn(cfg, b.client, b.db, h)
	// Each first message fails once every back-off: a few visibility
	// timeouts' worth, receive counts held at 1.
	waitUntil(t, "the downstream to be called during the outage", 10*time.Second, func() bool { return d.callsWhileDown() >= 3 })
	time.Sleep(8 * time.Second)
	if c := b.dlqCount(); c != 0 {
		t.Fatalf("%d messages dead-lettered during the outage", c)
	}
	d.down.Store(false)
	waitUntil(t, "every operation to complete", 30*time.Second, func() bool { done, _ := d.doneCount(); return done == 6 })
	b.waitEmpty(10 * time.Second)
	s := stop()
	if _, most := d.doneCount(); most != 1 {
		t.Fatalf("an operation done %d times", most)
	}
	if c := b.dlqCount(); c != 0 {
		t.Fatalf("%d messages in the dead-letter queue", c)
	}
	whileDown := d.callsWhileDown()
	d.mu.Lock()
	defer d.mu.Unlock()
	var order []string
	for _, c := range d.calls {
		if !c.down {
			order = append(order, c.key)
		}
	}
	for g := range 3 {
		a, bb := slices.Index(order, fmt.Sprintf("g%d-a", g)), slices.Index(order, fmt.Sprintf("g%d-b", g))
		if a < 0 || bb < 0 || a > bb {
			t.Fatalf("group g-%d done out of order: %v", g, order)
		}
	}
	t.Logf("%d calls while down; stats %+v", whileDown, s)
}

// A message held again after a failed attempt (its back-off, here a
// Retry-After) gives back its concurrency slot while it waits, and takes
// a fresh one to run again: it neither blocks the pool while nothing runs
// nor runs on a slot whose lease lapsed and that another message took.
func TestWorker_HeldAgainTakesAFreshSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 1})
	cfg := b.config()
	cfg.VisibilityTimeout = 2 * time.Second // the slot's lease
	cfg.Flow.Concurrency = 1
	var running, most, aCalls atomic.Int32
	aFailed := make(chan struct{})
	_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		for old := most.Load(); n > old && !most.CompareAndSwap(old, n); old = most.Load() {
		}
		switch m.Key {
		case "a":
			if aCalls.Add(1) == 1 {
				defer close(aFailed)
				return worker.RetryAfter(5*time.Second, worker.Unavailable(0, errors.New("503")))
			}
			time.Sleep(500 * time.Millisecond)
		case "b":
			time.Sleep(6 * time.Second)
		}
		return nil
	}))
	b.send(`{"id":"a"}`)
	select {
	case <-aFailed:
	case <-time.After(20 * time.Second):
		t.Fatal("a never ran")
	}
	b.send(`{"id":"b"}`)
	waitUntil(t, "a to run again", 30*time.Second, func() bool { return aCalls.Load() >= 2 })
	s := stop()
	if most.Load() > 1 {
		t.Errorf("%d handlers ran at once under Flow.Concurrency = 1", most.Load())
	}
	if s.Completed != 2 {
		t.Errorf("completed %d operations, want 2; stats %+v", s.Completed, s)
	}
}

// A message waiting for a concurrency slot does not keep a rate token
// that fell due meanwhile: when a slot frees, the messages waiting start
// at the rate, not all at once on their old tokens.
func TestWorker_SlotWaitKeepsTheRate(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	b.sendMany(20, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	cfg := b.config()
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.Flow.Rate, cfg.Flow.Burst = 5, 1
	cfg.Flow.Concurrency = 1
	var st starts
	var first atomic.Bool
	_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		st.add(m.Key)
		if first.CompareAndSwap(false, true) {
			time.Sleep(3 * time.Second) // holds the one slot while tokens fall due
		}
		return nil
	}))
	waitUntil(t, "every operation to start", 60*time.Second, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.at) == 20 })
	s := stop()
	most, first0, last := st.mostInASecond(func(string) bool { return true })
	t.Logf("20 operations in %v, at most %d starts in a second (rate 5, burst 1); throttled %d", last.Sub(first0).Round(100*time.Millisecond), most, s.Throttled)
	if most > 7 {
		t.Errorf("%d operations started within one second, above the rate of 5 (burst 1) and its slack (7)", most)
	}
	// Throttled counts messages held, once each, not each look for a
	// free slot.
	if s.Throttled > 20 {
		t.Errorf("throttled %d for 20 messages: counted per look, not per message held", s.Throttled)
	}
}

// A worker running two calls at once to a downstream that hangs past the
// handler's timeout ends two failures per timeout: fewer within the trip's
// window than its failures (here 10 in 3 s, 1 s timeout: at most 6). It
// pauses on as many as its calls could end within the window rather than
// never, and its calls to the hanging downstream stop.
func TestWorker_HangingDownstreamFewCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 20})
	var hang atomic.Bool
	hang.Store(true)
	var calls, whileHanging atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if hang.Load() {
			whileHanging.Add(1)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	b.sendMany(30, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Concurrency, cfg.Prefetch = 2, 2
	cfg.HandlerTimeout = time.Second
	cfg.VisibilityTimeout = 10 * time.Second
	cfg.MinBackoff, cfg.MaxBackoff = time.Second, 2*time.Second
	cfg.Flow.Trip = worker.Trip{Failures: 10, Window: 3 * time.Second, Keys: 3, Ratio: 0.9}
	w, stop := b.startOn(cfg, b.client, b.db, h)
	waitUntil(t, "the intake to pause", 20*time.Second, func() bool { return w.Stats().FlowPauses >= 1 })
	atPause := whileHanging.Load()
	time.Sleep(5 * time.Second)
	after := whileHanging.Load() - atPause
	hang.Store(false)
	waitUntil(t, "every operation to complete", 60*time.Second, func() bool { return w.Stats().Completed == 30 })
	s := stop()
	t.Logf("calls while hanging: %d before the pause, %d in the 5 s after it; stats %+v", atPause, after, s)
	if atPause > 10 {
		t.Errorf("%d calls to the hanging downstream before the pause, want at most 10 (two at a time, paused on the fifth failure)", atPause)
	}
	if after > 5 {
		t.Errorf("%d calls to the hanging downstream in the 5 s after the pause, want the probes only (at most 5)", after)
	}
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages in the dead-letter queue", n)
	}
}

// slotsUnreachable is the real embedded ledger whose concurrency slots
// cannot be extended while down is set, as when a shared ledger cannot be
// reached for longer than a slot's lease.
type slotsUnreachable struct {
	*ledger.DB
	down atomic.Bool
}

func (l *slotsUnreachable) ExtendSlots(ctx context.Context, ss []ledger.Slot, lease time.Duration) []error {
	if l.down.Load() {
		errs := make([]error, len(ss))
		for i := range errs {
			errs[i] = errors.New("ledger unreachable")
		}
		return errs
	}
	return l.DB.ExtendSlots(ctx, ss, lease)
}

// A running attempt whose concurrency slot could not be extended until
// its lease lapsed, and that another message then took, runs on above the
// limit (it cannot be undone): the beat that finds the slot gone says so,
// and the attempt still completes once.
func TestWorker_LapsedSlotIsLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &slotsUnreachable{DB: b.db}
	l.down.Store(true)
	var logs strings.Builder
	var logMu sync.Mutex
	cfg := b.config()
	cfg.VisibilityTimeout = time.Second // the slot's lease; a beat every 333 ms
	cfg.Flow.Concurrency = 1
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{w: &logs, mu: &logMu}, nil))
	var running, most atomic.Int32
	bStarted := make(chan struct{})
	_, stop := b.startOn(cfg, b.client, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		for old := most.Load(); n > old && !most.CompareAndSwap(old, n); old = most.Load() {
		}
		b.runs.add(m.Key)
		switch m.Key {
		case "a":
			b.send(`{"id":"b"}`)
			select {
			case <-bStarted: // b took a's slot once its lease lapsed
			case <-time.After(15 * time.Second):
			}
			l.down.Store(false)
			time.Sleep(time.Second) // beats run again
		case "b":
			close(bStarted)
		}
		return nil
	}))
	b.send(`{"id":"a"}`)
	waitUntil(t, "both operations to complete", 30*time.Second, func() bool { return b.runs.count("a") == 1 && b.runs.count("b") == 1 && running.Load() == 0 })
	s := stop()
	logMu.Lock()
	text := logs.String()
	logMu.Unlock()
	if most.Load() != 2 {
		t.Fatalf("%d handlers at most at once: the lapsed slot was not taken by the other message (the scene this test needs)", most.Load())
	}
	if !strings.Contains(text, "heartbeat: extending concurrency slots failed") {
		t.Errorf("the failed extensions are not logged:\n%s", text)
	}
	if !strings.Contains(text, "no longer this attempt's: the limit may be exceeded") {
		t.Errorf("the slot lost to another message is not logged:\n%s", text)
	}
	if s.Completed != 2 {
		t.Errorf("completed %d, want 2; stats %+v", s.Completed, s)
	}
}

// A copy of an operation held in progress by another worker (here a
// handler that runs long; in an outage, a message held for the pause)
// comes back each time the other claim's lease could have lapsed. Near the
// redrive's receive count it is deferred (a copy with a delay, its count
// starting again) rather than given back, so that SQS never dead-letters a
// copy of an operation that is alive; once the operation completes, the
// copy is a duplicate, deleted.
func TestWorker_CopyOfHeldOperationNotDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 3})
	release := make(chan struct{})
	var started atomic.Bool
	cfgA := b.config()
	cfgA.Concurrency, cfgA.Prefetch = 1, worker.NoPrefetch // holds the one message, receives no more
	wA, stopA := b.startOn(cfgA, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		started.Store(true)
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		return nil
	}))
	b.send(`{"id":"k"}`)
	waitUntil(t, "the operation to start", 20*time.Second, started.Load)
	cfgB := b.config()
	cfgB.VisibilityTimeout = time.Second // the copy comes back every second or two
	wB, stopB := b.startOn(cfgB, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	b.send(`{"id":"k"}`)
	time.Sleep(12 * time.Second) // six returns or more: twice what the redrive allows
	close(release)
	// Either worker may receive the copy once the operation is complete.
	waitUntil(t, "the copy to be deleted as a duplicate of the completed operation", 30*time.Second, func() bool {
		return wA.Stats().Duplicates+wB.Stats().Duplicates >= 1
	})
	b.waitEmpty(30 * time.Second)
	sB := stopB()
	stopA()
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages in the dead-letter queue: the copy of the operation held elsewhere was redriven", n)
	}
	if n := b.runs.count("k"); n != 1 {
		t.Errorf("the operation ran %d times, want 1", n)
	}
	if sB.Deferred == 0 {
		t.Errorf("the copy was never deferred; stats %+v", sB)
	}
}

// A copy of an operation at work in this process waits for it here, out
// of sight; at its last receive it is deferred instead, so that a worker
// killed while it waits leaves no copy for the redrive to dead-letter.
func TestWorker_CopyWaitingHereAtLastReceiveIsDeferred(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 2})
	b.send(`{"id":"k"}`)
	b.send(`{"id":"k"}`)
	// Each received once elsewhere: the worker's receive is its last. The
	// copy shows two seconds after the original, which runs meanwhile.
	b.receiveOnce(2, func(i int) int32 { return int32(2 * i) })
	release := make(chan struct{})
	cfg := b.config()
	cfg.Concurrency = 2
	w, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		return nil
	}))
	waitUntil(t, "the copy to be deferred", 20*time.Second, func() bool { return w.Stats().Deferred >= 1 })
	if n := b.runs.count("k"); n != 1 {
		t.Fatalf("the operation ran %d times while the copy was received, want 1", n)
	}
	close(release)
	waitUntil(t, "the copy to be deleted as a duplicate of the completed operation", 30*time.Second, func() bool { return w.Stats().Duplicates >= 1 })
	b.waitEmpty(30 * time.Second)
	s := stop()
	t.Logf("stats %+v", s)
	if n := b.dlqCount(); n != 0 {
		t.Errorf("%d messages in the dead-letter queue", n)
	}
	if n := b.runs.count("k"); n != 1 {
		t.Errorf("the operation ran %d times, want 1", n)
	}
	if s.Deferred != 1 {
		t.Errorf("deferred %d times, want once (its copy's count starts again)", s.Deferred)
	}
}

// In observe mode the limits and the pause are decided and reported, not
// done: a rate of 5 a second holds nothing back, and failures that would
// trip a pause leave the intake running, each counted as what it would
// have done.
func TestWorker_FlowObserveActsOnNothing(t *testing.T) {
	t.Parallel()
	t.Run("limits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		var st starts
		b.sendMany(40, func(i int) string { return fmt.Sprintf(`{"id":"op-%d"}`, i) })
		cfg := b.config()
		cfg.Flow.Mode, cfg.Flow.Rate, cfg.Flow.Burst = worker.FlowObserve, 5, 1
		_, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			st.add(m.Key)
			return nil
		}))
		waitUntil(t, "every operation to start", 60*time.Second, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.at) == 40 })
		b.waitEmpty(30 * time.Second)
		s := stop()
		most, first, last := st.mostInASecond(func(string) bool { return true })
		t.Logf("40 operations in %v, at most %d in a second; stats %+v", last.Sub(first).Round(100*time.Millisecond), most, s)
		if most <= 6 {
			t.Errorf("at most %d starts in a second: held to the rate of 5 (burst 1) in observe mode", most)
		}
		if s.FlowWouldHold == 0 || s.Throttled != 0 || s.Deferred != 0 {
			t.Errorf("observe mode: %d would have been held (want some), %d throttled and %d deferred (want 0)", s.FlowWouldHold, s.Throttled, s.Deferred)
		}
	})
	t.Run("outage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 50})
		var calls atomic.Int64
		b.sendMany(20, func(i int) string { return fmt.Sprintf(`{"id":"down-%d"}`, i) })
		cfg := b.config()
		cfg.Flow.Mode = worker.FlowObserve
		cfg.MinBackoff, cfg.MaxBackoff = 200*time.Millisecond, time.Second
		w, stop := b.startOn(cfg, b.client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			calls.Add(1)
			return worker.Unavailable(0, errors.New("503 from the downstream"))
		}))
		waitUntil(t, "the outage to be found", 30*time.Second, func() bool { s := w.Stats(); return s.FlowWouldPause > 0 || s.FlowPauses > 0 })
		// Paused, the worker would call once at a time, a second and more
		// apart; observing, it goes on calling as its back-off allows.
		n := calls.Load()
		for deadline := time.Now().Add(20 * time.Second); calls.Load() < n+20 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		s := stop()
		t.Logf("%d calls, %d after the outage was found; stats %+v", calls.Load(), calls.Load()-n, s)
		if s.FlowPauses != 0 || s.Probes != 0 || s.FlowWouldPause == 0 {
			t.Errorf("observe mode: %d pauses and %d probes (want 0), %d pauses found and not made (want some)", s.FlowPauses, s.Probes, s.FlowWouldPause)
		}
		if after := calls.Load() - n; after < 20 {
			t.Errorf("%d calls in the 20 s after the outage was found, want 20 or more: the intake was held", after)
		}
	})
}
