package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// A heartbeat's visibility extension that hangs (a request SQS never
// answers) must not hold back the completion of work that is done: every
// moment between a successful handler and the durable completion is a
// moment in which a crash runs the work again. Found by the chaos campaign
// (scripts/chaos): the completion waited for the heartbeat's SQS call,
// retries included, up to three HTTP timeouts.
func TestWorker_HeartbeatDoesNotDelayCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	faults := sqstest.NewFaults(1, nil)
	faults.Set("ChangeMessageVisibility", sqstest.Rates{Timeout: 1})
	client := sqstest.NewClient(t, faults)
	cfg := b.config() // a heartbeat every 2s/3
	var returned atomic.Int64
	w, err := worker.New(cfg, client, b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		select {
		case <-time.After(1200 * time.Millisecond): // past the first heartbeat, which hangs
		case <-ctx.Done():
			return ctx.Err()
		}
		returned.Store(time.Now().UnixNano())
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.send(`{"id":"beat"}`)

	waitUntil(t, "the handler returned", 10*time.Second, func() bool { return returned.Load() != 0 })
	waitUntil(t, "the operation is recorded complete", 5*time.Second, func() bool {
		rec, err := b.db.Get(context.Background(), "beat")
		return err == nil && rec.State == ledger.StateComplete
	})
	rec := b.record("beat")
	if gap := rec.Completed.Sub(time.Unix(0, returned.Load())); gap > time.Second {
		t.Errorf("completion recorded %v after the handler returned", gap)
	}
	if faults.Count("ChangeMessageVisibility", sqstest.Timeout) == 0 {
		t.Fatal("no heartbeat ran into the hanging visibility call: the test did not test anything")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return: it waits for the hanging heartbeat call")
	}
	if n := b.runs.count("beat"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}
