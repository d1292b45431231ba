package pgtx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

// queue is a queue of the local SQS server for one test.
type queue struct {
	t      *testing.T
	client *sqs.Client
	q      sqstest.Queue
}

func newQueue(t *testing.T) *queue {
	t.Helper()
	client := sqstest.NewClient(t, nil)
	return &queue{t: t, client: client, q: sqstest.CreateQueue(t, client, sqstest.QueueOptions{MaxReceiveCount: 10, VisibilityTimeout: 5 * time.Second})}
}

// config is a worker configuration for tests: short polls, a lease of 2s
// (a heartbeat every 2s/3) and short back-offs, so that a retry comes
// within a second.
func (q *queue) config() worker.Config {
	return worker.Config{
		QueueURL:          q.q.URL,
		WaitTime:          time.Second,
		VisibilityTimeout: 2 * time.Second,
		Key:               worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		Concurrency:       1,
		HandlerTimeout:    20 * time.Second,
		MinBackoff:        200 * time.Millisecond,
		MaxBackoff:        time.Second,
		Grace:             10 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(testWriter{q.t}, nil)),
	}
}

func (q *queue) send(body string) {
	q.t.Helper()
	if _, err := q.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.q.URL, MessageBody: &body}); err != nil {
		q.t.Fatal(err)
	}
}

// waitEmpty waits until the queue has no messages, visible or in flight.
func (q *queue) waitEmpty(timeout time.Duration) {
	q.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		visible, inflight := sqstest.Count(q.t, q.client, q.q.URL)
		if visible == 0 && inflight == 0 {
			return
		}
		if time.Now().After(deadline) {
			q.t.Fatalf("queue not empty after %v: %d visible, %d in flight", timeout, visible, inflight)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start runs a worker on the queue with the ledger l and the handler h
// until the returned stop is called; stop returns the worker's stats.
func (q *queue) start(cfg worker.Config, l *postgres.Ledger, h worker.Handler) (w *worker.Worker, stop func() worker.Stats) {
	q.t.Helper()
	w, err := worker.New(cfg, q.client, l, h)
	if err != nil {
		q.t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var once sync.Once
	stop = func() worker.Stats {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					q.t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				q.t.Error("Run did not return 60s after its context ended")
			}
		})
		return w.Stats()
	}
	q.t.Cleanup(func() { stop() })
	return w, stop
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The Handler in a real worker, on a queue of the local SQS server and the
// ledger's PostgreSQL database.
func TestHandler_InWorker(t *testing.T) {
	t.Parallel()

	// Handlers that panic after their insert, more of them than the pool
	// has connections (two): each panic is a retryable failure whose
	// transaction is rolled back and whose connection goes back to the
	// pool, so that the ledger goes on claiming, recording the failures
	// and completing; every operation completes with one effect, no
	// session of the pool is left in a transaction, and the worker and the
	// ledger close.
	t.Run("HandlersPanic", func(t *testing.T) {
		t.Parallel()
		url, schema := pgtest.Schema(t)
		app := "pgtx_" + schema
		url = pgtest.WithParam(t, url, "application_name", app)
		url = pgtest.WithParam(t, url, "pool_max_conns", "2")
		l := setup(t, url)
		q := newQueue(t)
		const n = 4
		_, stop := q.start(q.config(), l, New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			if m.Attempt == 1 {
				panic("a bug in the handler")
			}
			return nil
		}))
		for i := range n {
			q.send(fmt.Sprintf(`{"id":"p%d"}`, i))
		}
		q.waitEmpty(60 * time.Second)
		stats := stop()
		for i := range n {
			key := fmt.Sprintf("p%d", i)
			if rec := state(t, l, key); rec.State != ledger.StateComplete || rec.Attempts != 2 || effects(t, l, key) != 1 {
				t.Errorf("%s: record %s after %d attempts, %d effects; want complete after 2, one effect", key, rec.State, rec.Attempts, effects(t, l, key))
			}
		}
		if stats.Retried != n || stats.Completed != n || stats.ClaimFailures != 0 {
			t.Errorf("stats %+v: want %d retried, %d completed, no claim failure", stats, n, n)
		}
		if k := idleInTx(t, app); k != 0 {
			t.Errorf("%d sessions of the pool idle in transaction", k)
		}
		closeLedger(t, l)
	})
}
