package pgtx

import (
	"context"
	"errors"
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
	t      testing.TB
	client *sqs.Client
	q      sqstest.Queue
}

func newQueue(t testing.TB) *queue {
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

type testWriter struct{ t testing.TB }

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

	// Writes in a worker, each operation sent twice: the statements of
	// half the operations are refused on their first attempt (a retryable
	// failure, nothing committed) and commit on the next; every operation
	// completes with one effect, and its duplicate finds it complete.
	t.Run("Writes", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		q := newQueue(t)
		cfg := q.config()
		cfg.Concurrency = 4
		const n = 6
		_, stop := q.start(cfg, l, NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			queueInsert(ctx, m, b)
			if m.Attempt == 1 && strings.ContainsAny(m.Key, "024") {
				b.Queue(`INSERT INTO effects (key, owner) VALUES ($1, NULL)`, m.Key) // refused: owner is NOT NULL
			}
			return nil
		}))
		for i := range n {
			for range 2 {
				q.send(fmt.Sprintf(`{"id":"w%d"}`, i))
			}
		}
		q.waitEmpty(60 * time.Second)
		stats := stop()
		for i := range n {
			key := fmt.Sprintf("w%d", i)
			if rec := state(t, l, key); rec.State != ledger.StateComplete || effects(t, l, key) != 1 {
				t.Errorf("%s: record %s, %d effects; want complete, one effect", key, rec.State, effects(t, l, key))
			}
		}
		if stats.Completed != n || stats.Retried != n/2 || stats.Duplicates != n {
			t.Errorf("stats %+v: want %d completed, %d retried, %d duplicates", stats, n, n/2, n)
		}
	})

	// On a server whose default isolation level is stricter than READ
	// COMMITTED, a handler that runs for longer than a heartbeat commits
	// on its first attempt: the heartbeat updates the operation's record
	// after the transaction's first statement, and the completion still
	// finds it (the transaction runs at READ COMMITTED, whatever the
	// default). Two handlers that then take two rows in opposite orders
	// deadlock: the server rolls one back, whose failure says that it
	// must be retried (not that the store is unavailable); the worker
	// retries it, and it commits on its redelivery.
	for _, level := range []string{"serializable", "repeatable read"} {
		t.Run("DefaultIsolation/"+strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			t.Parallel()
			url, _ := pgtest.Schema(t)
			url = pgtest.WithParam(t, url, "default_transaction_isolation", level)
			l := setup(t, url)
			func() {
				tx, err := l.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				var got string
				if err := tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&got); err != nil || got != level {
					t.Fatalf("the server's default isolation: %q, %v; want %q", got, err, level)
				}
				if _, err := tx.Exec(ctx, `CREATE TABLE rows (id int PRIMARY KEY, n int NOT NULL); INSERT INTO rows VALUES (1, 0), (2, 0)`); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}()
			q := newQueue(t)
			cfg := q.config()
			cfg.Concurrency = 2
			var (
				mu      sync.Mutex
				errs    = map[string][]error{} // what each operation's attempts returned
				arrived = map[string]bool{}    // the deadlocking pair: which holds its first row
				both    = make(chan struct{})
			)
			h := New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
				if err := insert(ctx, tx, m); err != nil {
					return err
				}
				if strings.HasPrefix(m.Key, "long") {
					// Wait, with the transaction open, until a heartbeat
					// has renewed the lease: it updated the record since
					// the insert.
					lease := func() time.Time {
						rec, _ := l.Get(ctx, m.Key)
						return rec.LeaseExpiry
					}
					before := lease()
					deadline := time.Now().Add(15 * time.Second)
					for !lease().After(before) {
						if time.Now().After(deadline) {
							return fmt.Errorf("no heartbeat renewed the lease within 15s")
						}
						time.Sleep(50 * time.Millisecond)
					}
					return nil
				}
				first, second := 1, 2
				if m.Key == "pair-b" {
					first, second = 2, 1
				}
				if _, err := tx.Exec(ctx, `UPDATE rows SET n = n + 1 WHERE id = $1`, first); err != nil {
					return fmt.Errorf("update row %d: %w", first, err)
				}
				if m.Attempt == 1 {
					mu.Lock()
					arrived[m.Key] = true
					if len(arrived) == 2 {
						close(both)
					}
					mu.Unlock()
					select {
					case <-both:
					case <-time.After(15 * time.Second):
						return fmt.Errorf("the other handler of the pair did not come within 15s")
					}
				}
				if _, err := tx.Exec(ctx, `UPDATE rows SET n = n + 1 WHERE id = $1`, second); err != nil {
					return fmt.Errorf("update row %d: %w", second, err)
				}
				return nil
			})
			_, stop := q.start(cfg, l, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				err := h.Handle(ctx, m)
				mu.Lock()
				errs[m.Key] = append(errs[m.Key], err)
				mu.Unlock()
				return err
			}))
			q.send(`{"id":"long"}`)
			// Its first attempt commits, or the test fails at its second.
			deadline := time.Now().Add(30 * time.Second)
			for {
				rec, err := l.Get(ctx, "long")
				if err != nil && !errors.Is(err, ledger.ErrNotFound) {
					t.Fatal(err)
				}
				if rec.State == ledger.StateComplete && rec.Attempts == 1 {
					break
				}
				if rec.Attempts > 1 || time.Now().After(deadline) {
					mu.Lock()
					got := append([]error(nil), errs["long"]...)
					mu.Unlock()
					t.Fatalf("the long handler: record %s after %d attempts, which returned %v; want complete after one", rec.State, rec.Attempts, got)
				}
				time.Sleep(50 * time.Millisecond)
			}
			q.send(`{"id":"pair-a"}`)
			q.send(`{"id":"pair-b"}`)
			q.waitEmpty(60 * time.Second)
			stats := stop()

			for _, key := range []string{"long", "pair-a", "pair-b"} {
				if rec := state(t, l, key); rec.State != ledger.StateComplete || effects(t, l, key) != 1 {
					t.Errorf("%s: record %s, %d effects; want complete, one effect", key, rec.State, effects(t, l, key))
				}
			}
			var rows [2]int
			func() {
				tx, err := l.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				if err := tx.QueryRow(ctx, `SELECT (SELECT n FROM rows WHERE id = 1), (SELECT n FROM rows WHERE id = 2)`).Scan(&rows[0], &rows[1]); err != nil {
					t.Fatal(err)
				}
			}()
			if rows != [2]int{2, 2} {
				t.Errorf("rows %v: want each updated once by each of the pair", rows)
			}
			mu.Lock()
			defer mu.Unlock()
			var failed []error
			for _, key := range []string{"pair-a", "pair-b"} {
				for _, err := range errs[key] {
					if err != nil {
						failed = append(failed, err)
					}
				}
			}
			if len(failed) != 1 {
				t.Fatalf("the pair's failed attempts: %v; want one, rolled back by the deadlock", failed)
			}
			err := failed[0]
			var perm *worker.PermanentError
			if !errors.Is(err, ledger.ErrContention) || errors.Is(err, ledger.ErrUnavailable) || errors.As(err, &perm) ||
				!strings.Contains(err.Error(), "must be retried") || !strings.Contains(err.Error(), "40P01") {
				t.Errorf("the deadlocked attempt returned %q: want a retryable failure wrapping ErrContention, saying it must be retried", err)
			}
			if stats.Retried != 1 || stats.Completed != 3 || stats.ClaimFailures != 0 || stats.Heartbeats == 0 {
				t.Errorf("stats %+v: want 1 retried, 3 completed, no claim failure, heartbeats", stats)
			}
		})
	}
}
