package worker_test

import (
	"context"
	"errors"
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
	faults.Set("ChangeMessageVisibilityBatch", sqstest.Rates{Timeout: 1})
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
	if faults.Count("ChangeMessageVisibilityBatch", sqstest.Timeout) == 0 {
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

// noExtend is the real ledger whose lease extensions fail, as on a disk
// that refuses writes for a while.
type noExtend struct{ *ledger.DB }

func (noExtend) ExtendBatch(_ context.Context, refs []ledger.ClaimRef, _ time.Duration) []error {
	errs := make([]error, len(refs))
	for i := range errs {
		errs[i] = errors.New("ledger write refused")
	}
	return errs
}

// A duplicate of an operation this process is running must not be claimed
// here even when the ledger's lease has lapsed meanwhile (the extensions
// failed): the ledger would hand it over as a takeover and the work would
// run twice at once.
func TestWorker_NoTakeoverOfOwnRunningWork(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 10})
	var running, maxRunning atomic.Int32
	w, err := worker.New(b.config(), b.client, noExtend{b.db}, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		if n > maxRunning.Load() {
			maxRunning.Store(n)
		}
		b.runs.add(m.Key)
		select {
		case <-time.After(5 * time.Second): // past the 2s lease, never extended
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.send(`{"id":"long"}`)
	waitUntil(t, "the work to start", 10*time.Second, func() bool { return running.Load() == 1 })
	time.Sleep(2500 * time.Millisecond) // the lease has lapsed
	b.send(`{"id":"long"}`)
	b.waitEmpty(30 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := b.runs.count("long"); n != 1 || maxRunning.Load() != 1 {
		t.Fatalf("ran %d times, at most %d at once", n, maxRunning.Load())
	}
	if s := w.Stats(); s.Takeovers != 0 || s.Completed != 1 {
		t.Fatalf("stats %+v", s)
	}
}
