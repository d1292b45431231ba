package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// series returns the gathered series of name whose labels include want,
// and whether there is one.
func series(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (*dto.Metric, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			return m, true
		}
	}
	return nil, false
}

// sampleCount returns the observations of a histogram's series whose one
// label has labelValue.
func sampleCount(t *testing.T, reg *prometheus.Registry, name, labelValue string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == labelValue {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	t.Fatalf("no series %s{%q}", name, labelValue)
	return 0
}

// gauge returns the value of the gauge series of name with labels, and
// whether there is one.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	m, ok := series(t, reg, name, labels)
	if !ok {
		return 0, false
	}
	return m.GetGauge().GetValue(), true
}

// The depth of the queue and of its dead-letter queue, as SQS counts them,
// is read into gauges labelled with the queues' names; while it cannot be
// read the gauges are absent, and they come back when it can.
func TestWorker_QueueMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	faults := sqstest.NewFaults(1, nil)
	faults.SetEnabled(false)
	faults.Set("GetQueueAttributes", sqstest.Rates{ServerError: 1})
	b.client = sqstest.NewClient(t, faults)
	reg := prometheus.NewPedanticRegistry()
	cfg := b.config()
	cfg.Registerer = reg
	cfg.QueueStatsInterval = time.Second
	cfg.Concurrency = 1
	cfg.Prefetch = worker.NoPrefetch
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		select {
		case running <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	for _, body := range []string{`{"id":"dead-1"}`, `{"id":"dead-2"}`} {
		if _, err := b.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &b.queue.DLQURL, MessageBody: &body}); err != nil {
			t.Fatal(err)
		}
	}
	b.send(`{"id":"held"}`)
	<-running
	// One message runs, one handler: the other two wait, visible.
	b.send(`{"id":"waits-1"}`)
	b.send(`{"id":"waits-2"}`)

	queue, dlq := worker.QueueName(b.queue.URL), worker.QueueName(b.queue.DLQURL)
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"sqsonce_queue_messages", map[string]string{"queue": queue, "state": "visible"}, 2},
		{"sqsonce_queue_messages", map[string]string{"queue": queue, "state": "in_flight"}, 1},
		{"sqsonce_queue_messages", map[string]string{"queue": queue, "state": "delayed"}, 0},
		{"sqsonce_dead_letter_queue_messages", map[string]string{"queue": queue, "dead_letter_queue": dlq, "state": "visible"}, 2},
		{"sqsonce_dead_letter_queue_messages", map[string]string{"queue": queue, "dead_letter_queue": dlq, "state": "in_flight"}, 0},
		{"sqsonce_queue_info", map[string]string{"queue": queue, "dead_letter_queue": dlq, "fifo": "false"}, 1},
		{"sqsonce_handlers_running", nil, 1},
		{"sqsonce_handler_concurrency", nil, 1},
		{"sqsonce_work_capacity", nil, 1},
	}
	matches := func() error {
		for _, w := range want {
			got, ok := gauge(t, reg, w.name, w.labels)
			if !ok || got != w.value {
				return fmt.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, got, ok, w.value)
			}
		}
		return nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for err := matches(); err != nil; err = matches() {
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	faults.SetEnabled(true)
	waitUntil(t, "the gauges to go while the attributes cannot be read", 20*time.Second, func() bool {
		_, q := series(t, reg, "sqsonce_queue_messages", nil)
		_, d := series(t, reg, "sqsonce_dead_letter_queue_messages", nil)
		return !q && !d
	})
	faults.SetEnabled(false)
	waitUntil(t, "the gauges to come back", 20*time.Second, func() bool { return matches() == nil })

	close(release)
	b.waitEmpty(20 * time.Second)
	stop()
	if n := faults.Count("GetQueueAttributes", sqstest.ServerError); n == 0 {
		t.Fatal("no read of the attributes failed: the test proved nothing")
	}
}

// countingClient counts the GetQueueAttributes calls made through it.
type countingClient struct {
	*sqs.Client
	attributeReads atomic.Int64
}

func (c *countingClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	c.attributeReads.Add(1)
	return c.Client.GetQueueAttributes(ctx, in, opts...)
}

// Without a Registerer, or with a negative QueueStatsInterval, the worker
// reads no attributes beyond those it reads at start (the queue's and its
// dead-letter queue's).
func TestWorker_QueueMetricsOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		registered bool
		interval   time.Duration
		reads      bool
	}{
		{"NoRegisterer", false, time.Second, false},
		{"Negative", true, -1, false},
		{"On", true, time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{maxReceive: 5})
			client := &countingClient{Client: b.client}
			cfg := b.config()
			cfg.QueueStatsInterval = c.interval
			if c.registered {
				cfg.Registerer = prometheus.NewPedanticRegistry()
			}
			w, err := worker.New(cfg, client, b.db, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			time.Sleep(3500 * time.Millisecond) // three intervals and a half
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			const atStart = 2
			if n := client.attributeReads.Load(); c.reads != (n > atStart) {
				t.Errorf("%d GetQueueAttributes calls (%d at start)", n, atStart)
			}
		})
	}
}

// The worker's ledger calls are timed and counted on any ledger; a claim
// the ledger could not record counts as an error of claim_batch, and the
// pings of a ledger that can be pinged are timed too.
func TestWorker_LedgerMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	l := &outageLedger{DB: b.db}
	l.down.Store(true)
	reg := prometheus.NewPedanticRegistry()
	cfg := b.config()
	cfg.Registerer = reg
	w, err := worker.New(cfg, b.client, l, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.send(`{"id":"lm-1"}`)
	waitUntil(t, "a ping", 10*time.Second, func() bool { return l.pings.Load() >= 1 })
	if up, _ := gauge(t, reg, "sqsonce_ledger_up", nil); up != 0 {
		t.Errorf("sqsonce_ledger_up = %v while claims fail", up)
	}
	l.down.Store(false)
	b.waitEmpty(20 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	counter := func(name, call string) float64 {
		m, ok := series(t, reg, name, map[string]string{"call": call})
		if !ok {
			t.Fatalf("no series %s{call=%q}", name, call)
		}
		return m.GetCounter().GetValue()
	}
	if n := counter("sqsonce_ledger_call_errors_total", "claim_batch"); n < 1 {
		t.Errorf("claim_batch errors: %v, want at least 1", n)
	}
	if n := counter("sqsonce_ledger_call_errors_total", "complete_batch"); n != 0 {
		t.Errorf("complete_batch errors: %v, want 0", n)
	}
	for call, least := range map[string]uint64{"claim_batch": 2, "complete_batch": 1, "ping": 1, "fail": 0, "release_batch": 0, "extend_batch": 0, "sweep": 0} {
		if n := sampleCount(t, reg, "sqsonce_ledger_call_duration_seconds", call); n < least {
			t.Errorf("%s calls timed: %d, want at least %d", call, n, least)
		}
	}
	if up, _ := gauge(t, reg, "sqsonce_ledger_up", nil); up != 1 {
		t.Errorf("sqsonce_ledger_up = %v after the ledger came back", up)
	}
}

// Each received message's age is observed, and the time of the last
// receive is exported.
func TestWorker_ReceiveMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	reg := prometheus.NewPedanticRegistry()
	cfg := b.config()
	cfg.Registerer = reg
	before := time.Now()
	for i := range 3 {
		b.send(fmt.Sprintf(`{"id":"age-%d"}`, i))
	}
	time.Sleep(time.Second) // they wait at least this long
	stop := b.start(cfg, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	b.waitEmpty(20 * time.Second)
	stop()
	m, ok := series(t, reg, "sqsonce_received_message_age_seconds", nil)
	if !ok {
		t.Fatal("no sqsonce_received_message_age_seconds")
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 3 {
		t.Errorf("ages observed: %d, want 3", h.GetSampleCount())
	}
	if mean := h.GetSampleSum() / float64(h.GetSampleCount()); mean < 0.9 || mean > time.Since(before).Seconds() {
		t.Errorf("mean age %.3fs: not between the wait (1s) and the test's run", mean)
	}
	last, _ := gauge(t, reg, "sqsonce_last_receive_timestamp_seconds", nil)
	if at := time.Unix(0, int64(last*1e9)); at.Before(before) || at.After(time.Now()) {
		t.Errorf("last receive at %v, not during the test", at)
	}
}
