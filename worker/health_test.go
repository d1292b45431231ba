package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

func TestWorker_Health(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	faults := sqstest.NewFaults(1, nil)
	faults.SetEnabled(false)
	faults.Set("ReceiveMessage", sqstest.Rates{Timeout: 1})
	b.client = sqstest.NewClient(t, faults)
	cfg := b.config()
	cfg.StallAfter = 1500 * time.Millisecond
	w, err := worker.New(cfg, b.client, b.db, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if h := w.Health(); h.Running || h.Alive || h.Ready {
		t.Fatalf("health before Run: %+v", h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitUntil(t, "ready", 10*time.Second, func() bool { return w.Health().Ready })

	// A receive that never answers stops the loop from turning.
	faults.SetEnabled(true)
	waitUntil(t, "not alive", 10*time.Second, func() bool { h := w.Health(); return !h.Alive && !h.Ready && h.Running })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return: the stuck receive was not cancelled")
	}
	if h := w.Health(); h.Running || h.Alive {
		t.Fatalf("health after Run: %+v", h)
	}
}

func TestWorker_Metrics(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	reg := prometheus.NewPedanticRegistry()
	cfg := b.config()
	cfg.Registerer = reg
	stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error { return nil }))
	for range 3 {
		b.send(`{"id":"m-1"}`)
	}
	b.send(`{"id":"m-2"}`)
	b.waitEmpty(20 * time.Second)
	stop()
	expect := `
# HELP sqsonce_operations_completed_total Operations recorded complete (durably) by this process.
# TYPE sqsonce_operations_completed_total counter
sqsonce_operations_completed_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expect), "sqsonce_operations_completed_total"); err != nil {
		t.Fatal(err)
	}
	// Deliveries in progress elsewhere come back later, so count at least.
	if got := value(t, reg, "sqsonce_messages_received_total", ""); got < 4 {
		t.Fatalf("received %v, want at least 4", got)
	}
	if got := value(t, reg, "sqsonce_duplicates_suppressed_total", "complete") +
		value(t, reg, "sqsonce_duplicates_suppressed_total", "in_progress"); got < 2 {
		t.Fatalf("duplicates suppressed %v, want at least 2", got)
	}
	if got := value(t, reg, "sqsonce_sqs_requests_total", "ReceiveMessage"); got < 1 {
		t.Fatalf("ReceiveMessage calls %v", got)
	}
	// Every outcome's series is there from the start; two attempts ran,
	// both done.
	n, err := testutil.GatherAndCount(reg, "sqsonce_handler_duration_seconds")
	if err != nil || n != 4 {
		t.Fatalf("handler duration series: %d, %v; want one per outcome", n, err)
	}
	for outcome, want := range map[string]uint64{"done": 2, "retry": 0, "permanent": 0, "lease_lost": 0} {
		if got := sampleCount(t, reg, "sqsonce_handler_duration_seconds", outcome); got != want {
			t.Errorf("handler durations observed with outcome %s: %d, want %d", outcome, got, want)
		}
	}
}

// value returns the counter of a gathered metric, the series whose one
// label has labelValue ("" for a metric without labels).
func value(t *testing.T, reg *prometheus.Registry, name, labelValue string) float64 {
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
			got := ""
			for _, lp := range m.GetLabel() {
				got = lp.GetValue()
			}
			if got == labelValue {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%q}", name, labelValue)
	return 0
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
