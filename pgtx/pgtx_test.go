package pgtx

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

var ctx = context.Background()

// setup opens a ledger in a schema of the test's own, with an effects
// table beside it: one row per effect applied, no constraint that would
// hide a second.
func setup(t testing.TB, url string) *postgres.Ledger {
	t.Helper()
	opts := postgres.Options{URL: url, Timeout: 5 * time.Second}
	if err := postgres.Init(ctx, opts); err != nil {
		t.Fatal(err)
	}
	l, err := postgres.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeLedger(t, l) })
	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE effects (key text NOT NULL, owner text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// closeLedger closes l, and fails the test when Close does not return:
// Close waits for every connection of the pool to be given back, and a
// transaction that nothing ends keeps its connection forever.
func closeLedger(t testing.TB, l *postgres.Ledger) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Close()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("the ledger's Close did not return: a connection of its pool is still held")
	}
}

// idleInTx counts the sessions of application_name app that are inside a
// transaction and not running a statement.
func idleInTx(t *testing.T, app string) int {
	t.Helper()
	conn := pgtest.Connect(t, "")
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state LIKE 'idle in transaction%'`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// noSessionInTx waits until no session of application_name app is inside
// a transaction: a connection closed by the client ends its session as
// soon as the server reads the end of the stream, a moment later.
func noSessionInTx(t *testing.T, app string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := idleInTx(t, app)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of the pool stay idle in transaction: transactions that nothing will end", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// effects counts the rows of key in the effects table.
func effects(t *testing.T, l *postgres.Ledger, key string) int {
	t.Helper()
	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM effects WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insert is the handlers' work: one effect row.
func insert(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (key, owner) VALUES ($1, $2)`, m.Key, m.Owner)
	return err
}

func claim(t *testing.T, l *postgres.Ledger, key, owner string, lease time.Duration, want ledger.Outcome) *worker.Message {
	t.Helper()
	c, err := l.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: lease, Fingerprint: []byte("fp")})
	if err != nil {
		t.Fatal(err)
	}
	if c.Outcome != want {
		t.Fatalf("claim %s by %s: %s, want %s", key, owner, c.Outcome, want)
	}
	return &worker.Message{Key: key, Owner: owner, Body: []byte(`{}`)}
}

func state(t testing.TB, l *postgres.Ledger, key string) ledger.Record {
	t.Helper()
	rec, err := l.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// loseCommit has the handler that mk makes handle an operation "k"
// claimed by "a" through a proxy that loses the reply or the request
// (lose) of its commit, once the statements are prepared on the pool's
// connection (by an operation "warm"), and returns what Handle said.
func loseCommit(t *testing.T, lose string, mk func(*postgres.Ledger) *Handler) (*postgres.Ledger, *pgtest.Proxy, *Handler, error) {
	t.Helper()
	url, _ := pgtest.Schema(t)
	p := pgtest.NewProxy(t, pgtest.Addr(t, url))
	l := setup(t, pgtest.ReplaceAddr(t, url, p.Addr()))
	if err := mk(l).Handle(ctx, claim(t, l, "warm", "a", time.Minute, ledger.Claimed)); err != nil {
		t.Fatal(err)
	}
	m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
	h := mk(l)
	h.beforeCommit = func() {
		if lose == "reply" {
			p.DropNextReply(1)
		} else {
			p.DropNextRequest(1)
		}
	}
	return l, p, h, h.Handle(ctx, m)
}

// roundTrips counts the round trips to the server of the handler that mk
// makes, for an operation "k" on a connection where an operation "warm"
// prepared the statements first.
func roundTrips(t *testing.T, mk func(*postgres.Ledger) *Handler) (*postgres.Ledger, int64) {
	t.Helper()
	url, _ := pgtest.Schema(t)
	p := pgtest.NewProxy(t, pgtest.Addr(t, url))
	l := setup(t, pgtest.WithParam(t, pgtest.ReplaceAddr(t, url, p.Addr()), "pool_max_conns", "1"))
	h := mk(l)
	var n int64
	for _, key := range []string{"warm", "k"} {
		m := claim(t, l, key, "a", time.Minute, ledger.Claimed)
		before := p.RoundTrips()
		if err := h.Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
		n = p.RoundTrips() - before
	}
	return l, n
}

// untouched fails the test unless key's record is still in progress
// with no effect row: nothing of the attempt committed.
func untouched(t *testing.T, l *postgres.Ledger, key string) {
	t.Helper()
	if rec := state(t, l, key); rec.State != ledger.StateInProgress || effects(t, l, key) != 0 {
		t.Fatalf("record %+v, %d effects; want in progress, none", rec, effects(t, l, key))
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()

	// The writes and the completion commit together; a duplicate finds
	// the operation complete.
	t.Run("CommitsWithTheCompletion", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		m.Result = []byte("done")
		if err := New(l, insert).Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateComplete || rec.Owner != "a" || string(rec.Result) != "done" || effects(t, l, "k") != 1 {
			t.Fatalf("record %+v, %d effects", rec, effects(t, l, "k"))
		}
		// The worker's own completion afterwards finds it done.
		if err := l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}); err != nil {
			t.Fatalf("the worker's completion: %v", err)
		}
		claim(t, l, "k", "b", time.Minute, ledger.AlreadyComplete)
	})

	// A handler's error rolls its writes back; the operation stays the
	// attempt's, for the worker to record the failure.
	t.Run("ErrorRollsBack", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		boom := errors.New("downstream said no")
		err := New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			return boom
		}).Handle(ctx, m)
		if !errors.Is(err, boom) {
			t.Fatalf("Handle: %v", err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateInProgress || effects(t, l, "k") != 0 {
			t.Fatalf("record %+v, %d effects", rec, effects(t, l, "k"))
		}
	})

	// The first attempt's lease lapses while its transaction runs, and a
	// second claim takes the operation over and completes it: the first
	// attempt's completion fails, and its writes are rolled back with it.
	t.Run("TakeoverRollsBackTheLoser", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		first := claim(t, l, "k", "a", time.Second, ledger.Claimed)
		var second error
		err := New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			time.Sleep(1500 * time.Millisecond) // the lease lapses
			b := claim(t, l, "k", "b", time.Minute, ledger.Claimed)
			second = New(l, insert).Handle(ctx, b)
			return nil
		}).Handle(ctx, first)
		if second != nil {
			t.Fatalf("the second attempt: %v", second)
		}
		if !errors.Is(err, ErrNotCommitted) || !errors.Is(err, ledger.ErrNotOwner) {
			t.Fatalf("the first attempt: %v, want ErrNotCommitted and ErrNotOwner", err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateComplete || rec.Owner != "b" || effects(t, l, "k") != 1 {
			t.Fatalf("record %+v, %d effects, want complete by b with one effect", rec, effects(t, l, "k"))
		}
	})

	// A takeover that reaches the record while the completion holds it
	// waits for the commit, and finds the operation complete. Another
	// transaction holds the record's row first, so that the completion
	// (with its commit) is sure to be waiting ahead of the takeover.
	t.Run("TakeoverWaitsForTheCommit", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		first := claim(t, l, "k", "a", time.Second, ledger.Claimed)
		h := New(l, insert)
		answered := make(chan ledger.Claim, 1)
		h.beforeCommit = func() {
			time.Sleep(1500 * time.Millisecond) // the lease lapses
			blocker, err := l.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := blocker.Exec(ctx, `SELECT 1 FROM sqsonce_operations WHERE key = convert_to('k', 'UTF8') FOR UPDATE`); err != nil {
				t.Error(err)
			}
			go func() {
				time.Sleep(300 * time.Millisecond) // the completion waits for the blocker by now
				go func() {
					c, err := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "b", Lease: time.Minute, Fingerprint: []byte("fp")})
					if err != nil {
						t.Error(err)
					}
					answered <- c
				}()
				time.Sleep(300 * time.Millisecond) // and the takeover behind it
				select {
				case c := <-answered:
					t.Errorf("the takeover did not wait: %s", c.Outcome)
				default:
				}
				blocker.Rollback(ctx)
			}()
		}
		if err := h.Handle(ctx, first); err != nil {
			t.Fatal(err)
		}
		if c := <-answered; c.Outcome != ledger.AlreadyComplete {
			t.Fatalf("the takeover after the commit: %s", c.Outcome)
		}
		if effects(t, l, "k") != 1 {
			t.Fatalf("%d effects", effects(t, l, "k"))
		}
	})

	// The commit's answer is lost (the connection cut after the server
	// committed, or before it saw the commit): Handle reads the record and
	// says what happened; the effect is applied at most once either way.
	for _, lose := range []string{"reply", "request"} {
		t.Run("LostCommit/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, h, err := loseCommit(t, lose, func(l *postgres.Ledger) *Handler { return New(l, insert) })
			rec := state(t, l, "k")
			switch lose {
			case "reply":
				if err != nil || rec.State != ledger.StateComplete || effects(t, l, "k") != 1 {
					t.Fatalf("a commit whose answer was lost: %v, record %+v, %d effects; want success, complete, one effect", err, rec, effects(t, l, "k"))
				}
			case "request":
				if !errors.Is(err, ErrNotCommitted) || rec.State != ledger.StateInProgress || effects(t, l, "k") != 0 {
					t.Fatalf("a commit that never arrived: %v, record %+v, %d effects; want ErrNotCommitted, in progress, no effect", err, rec, effects(t, l, "k"))
				}
				// The server ends the abandoned transaction; then the
				// operation is free for its retry, which applies it once.
				deadline := time.Now().Add(10 * time.Second)
				for {
					c, cerr := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "a2", Lease: time.Minute, Fingerprint: []byte("fp")})
					if cerr == nil && c.Outcome == ledger.Claimed || time.Now().After(deadline) {
						break
					}
					_ = l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: fmt.Sprint(err)})
					time.Sleep(100 * time.Millisecond)
				}
				h.beforeCommit = nil
				if err := h.Handle(ctx, &worker.Message{Key: "k", Owner: "a2"}); err != nil {
					t.Fatal(err)
				}
				if effects(t, l, "k") != 1 {
					t.Fatalf("%d effects after the retry", effects(t, l, "k"))
				}
			}
			if p.Drops() == 0 {
				t.Error("the proxy lost nothing")
			}
		})
	}

	// A message costs two round trips of its own beside the handler's
	// statements, READ COMMITTED and the isolation check included: BEGIN,
	// and the completion with the COMMIT.
	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		if _, n := roundTrips(t, func(l *postgres.Ledger) *Handler { return New(l, insert) }); n != 3 {
			t.Fatalf("%d round trips for a handler of one statement, want 3: BEGIN, the insert, the completion with the COMMIT", n)
		}
	})

	// A handler that changes its transaction's isolation level is refused
	// at its completion, permanently: at REPEATABLE READ or SERIALIZABLE
	// the completion would fail whenever a heartbeat came after the
	// handler's first statement, and no retry would change that.
	t.Run("HandlerChangesIsolation", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		err := New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE`); err != nil {
				return err
			}
			return insert(ctx, tx, m)
		}).Handle(ctx, m)
		var perm *worker.PermanentError
		if !errors.As(err, &perm) || !errors.Is(err, postgres.ErrIsolation) || !errors.Is(err, ErrNotCommitted) || !strings.Contains(err.Error(), "serializable") {
			t.Fatalf("Handle: %v; want a permanent failure wrapping ErrIsolation and ErrNotCommitted, naming the level", err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateInProgress || effects(t, l, "k") != 0 {
			t.Fatalf("record %s, %d effects; want in progress, none", rec.State, effects(t, l, "k"))
		}
	})

	// Two handlers take two rows in opposite orders and deadlock: the
	// server rolls one transaction back, and its Handle says that it must
	// be retried (ledger.ErrContention, a failure that is not permanent),
	// not that the store is unavailable; the other commits.
	t.Run("Deadlock", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		tx, err := l.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE rows (id int PRIMARY KEY, n int NOT NULL); INSERT INTO rows VALUES (1, 0), (2, 0)`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var arrived sync.WaitGroup
		arrived.Add(2)
		h := New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			first, second := 1, 2
			if m.Key == "b" {
				first, second = 2, 1
			}
			if _, err := tx.Exec(ctx, `UPDATE rows SET n = n + 1 WHERE id = $1`, first); err != nil {
				return fmt.Errorf("update row %d: %w", first, err)
			}
			arrived.Done()
			arrived.Wait()
			if _, err := tx.Exec(ctx, `UPDATE rows SET n = n + 1 WHERE id = $1`, second); err != nil {
				return fmt.Errorf("update row %d: %w", second, err)
			}
			return nil
		})
		errs := map[string]error{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, key := range []string{"a", "b"} {
			m := claim(t, l, key, "o-"+key, time.Minute, ledger.Claimed)
			wg.Go(func() {
				err := h.Handle(ctx, m)
				mu.Lock()
				errs[key] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		var failed, done []string
		for key, err := range errs {
			if err == nil {
				done = append(done, key)
				continue
			}
			failed = append(failed, key)
			var perm *worker.PermanentError
			if !errors.Is(err, ledger.ErrContention) || errors.Is(err, ledger.ErrUnavailable) || errors.As(err, &perm) ||
				!strings.Contains(err.Error(), "must be retried") || !strings.Contains(err.Error(), "40P01") {
				t.Errorf("%s: %q; want a retryable failure wrapping ErrContention, saying it must be retried", key, err)
			}
			if rec := state(t, l, key); rec.State != ledger.StateInProgress || effects(t, l, key) != 0 {
				t.Errorf("%s, rolled back: record %s, %d effects", key, rec.State, effects(t, l, key))
			}
		}
		if len(failed) != 1 || len(done) != 1 {
			t.Fatalf("failed %v, done %v: want one of each", failed, done)
		}
		if rec := state(t, l, done[0]); rec.State != ledger.StateComplete || effects(t, l, done[0]) != 1 {
			t.Errorf("%s, committed: record %s, %d effects", done[0], rec.State, effects(t, l, done[0]))
		}
	})

	// Every way out of the handler ends the transaction and gives its
	// connection back, on a pool of two connections: a panic (which goes
	// on to the caller, as to the worker, which turns it into a retryable
	// failure), a panic with a result still being read (the connection
	// is then closed: its state is unknown), runtime.Goexit, a panic in
	// the last moment before the commit, and a handler that ignores its
	// cancelled context. Each is done more times than the pool has
	// connections; afterwards the ledger still claims and completes, and
	// Close returns.
	t.Run("EveryWayOutEndsTheTransaction", func(t *testing.T) {
		t.Parallel()
		url, schema := pgtest.Schema(t)
		app := "pgtx_" + schema
		url = pgtest.WithParam(t, url, "application_name", app)
		url = pgtest.WithParam(t, url, "pool_max_conns", "2")
		l := setup(t, url)
		type panicValue struct{ way string }
		ways := []struct {
			name  string
			fn    Func
			hook  func(way string)
			panic bool
		}{
			{name: "Panic", panic: true, fn: func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
				if err := insert(ctx, tx, m); err != nil {
					return err
				}
				panic(panicValue{"Panic"})
			}},
			{name: "PanicWhileReading", panic: true, fn: func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
				if err := insert(ctx, tx, m); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, `SELECT generate_series(1, 100000)`)
				if err != nil {
					return err
				}
				rows.Next()
				panic(panicValue{"PanicWhileReading"})
			}},
			{name: "Goexit", fn: func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
				if err := insert(ctx, tx, m); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			}},
			{name: "PanicBeforeCommit", panic: true, fn: insert, hook: func(way string) { panic(panicValue{way}) }},
			{name: "Cancelled", fn: func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
				if err := insert(ctx, tx, m); err != nil {
					return err
				}
				cancel := ctx.Value(cancelKey{}).(context.CancelFunc)
				cancel()
				return nil // as if it had not noticed
			}},
		}
		for _, way := range ways {
			for i := range 3 {
				key := fmt.Sprintf("%s-%d", way.name, i)
				m := claim(t, l, key, "a", time.Minute, ledger.Claimed)
				h := New(l, way.fn)
				if way.hook != nil {
					h.beforeCommit = func() { way.hook(way.name) }
				}
				var (
					err       error
					recovered any
					returned  bool
				)
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { recovered = recover() }()
					hctx, cancel := context.WithCancel(ctx)
					defer cancel()
					hctx = context.WithValue(hctx, cancelKey{}, cancel)
					err = h.Handle(hctx, m)
					returned = true
				}()
				<-done
				switch {
				case way.panic && recovered != (panicValue{way.name}):
					t.Fatalf("%s: the caller recovered %v, want the handler's panic", key, recovered)
				case !way.panic && recovered != nil:
					t.Fatalf("%s: panicked with %v", key, recovered)
				case way.name == "Goexit" && returned:
					t.Fatalf("%s: Handle returned %v after runtime.Goexit", key, err)
				case way.name == "Cancelled" && !errors.Is(err, ErrNotCommitted):
					t.Fatalf("%s: Handle returned %v, want ErrNotCommitted", key, err)
				}
				noSessionInTx(t, app)
				if rec := state(t, l, key); rec.State != ledger.StateInProgress || effects(t, l, key) != 0 {
					t.Fatalf("%s: record %s, %d effects; want in progress, none", key, rec.State, effects(t, l, key))
				}
			}
		}
		m := claim(t, l, "after", "a", time.Minute, ledger.Claimed)
		if err := New(l, insert).Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
		if rec := state(t, l, "after"); rec.State != ledger.StateComplete || effects(t, l, "after") != 1 {
			t.Fatalf("record %s, %d effects; want complete, one", rec.State, effects(t, l, "after"))
		}
		closeLedger(t, l)
	})
}

// cancelKey holds, in a handler's context, the function that cancels it.
type cancelKey struct{}

// session is what a test reads of the session of the ledger's pool's one
// connection: its backend, and the settings a handler changes in
// changeSession.
type session struct {
	pid                  int
	searchPath, readOnly string
}

// sessionOf reads the session of l's connection, through the ledger's own
// Begin: on a pool of one connection, the one its handlers used.
func sessionOf(t *testing.T, l *postgres.Ledger) session {
	t.Helper()
	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var s session
	err = tx.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('search_path'), current_setting('default_transaction_read_only')`).
		Scan(&s.pid, &s.searchPath, &s.readOnly)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sessionLock is the advisory lock that TestHandler_SessionReset's handlers
// take, each subtest its own (advisory locks are the database's, shared by
// the subtests that run in parallel).
func sessionLock(t *testing.T) int64 {
	return int64(crc32.ChecksumIEEE([]byte(t.Name())))
}

// lockHeld reports whether the backend pid holds an advisory lock, read
// from pg_locks on a connection of the test's own: another session's
// locks (another test's) do not count.
func lockHeld(t *testing.T, pid int) bool {
	t.Helper()
	conn := pgtest.Connect(t, "")
	var held bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $1)`, pid).Scan(&held)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// changedSession fails the test unless l's one connection, after a handler
// changed its session, serves the ledger as before: the same backend (so
// that the check means something), with the settings it had and without
// the handler's advisory lock, claiming and completing.
func changedSession(t *testing.T, l *postgres.Ledger, before session) {
	t.Helper()
	if after := sessionOf(t, l); after != before {
		t.Errorf("the session after the handler: %+v; want it as before, %+v", after, before)
	}
	if lockHeld(t, before.pid) {
		t.Errorf("the handler's advisory lock is still held by the ledger's connection")
	}
	if _, err := l.Claim(ctx, ledger.ClaimRequest{Key: "next", Owner: "a", Lease: time.Minute}); err != nil {
		t.Fatalf("the ledger's next claim: %v", err)
	}
	if err := l.Complete(ctx, ledger.Completion{Key: "next", Owner: "a"}); err != nil {
		t.Fatalf("the ledger's next completion: %v", err)
	}
}

// A handler's changes to its session (a SET without LOCAL, an advisory lock
// of the session) would stay on the connection when it goes back to the
// pool, and the ledger's own statements would then run under them: they
// are undone before it goes back, whether the transaction commits or not,
// in both forms of handler. The handlers set the session's search path to
// a schema that does not exist, while their transaction keeps the one it
// had (so that its completion finds the ledger's table), make the
// session's later transactions read-only, and take an advisory lock.
func TestHandler_SessionReset(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"Func", "Writes"} {
		for _, fails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fails=%v", form, fails), func(t *testing.T) {
				t.Parallel()
				url, _ := pgtest.Schema(t)
				l := setup(t, pgtest.WithParam(t, url, "pool_max_conns", "1"))
				before := sessionOf(t, l)
				m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
				boom := errors.New("the handler fails after changing its session")
				var h *Handler
				switch form {
				case "Func":
					h = New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
						for _, q := range []struct {
							sql  string
							args []any
						}{
							{`SET search_path = nowhere`, nil},
							{`SELECT set_config('search_path', $1, true)`, []any{before.searchPath}},
							{`SET default_transaction_read_only = on`, nil},
							{`SELECT pg_advisory_lock($1)`, []any{sessionLock(t)}},
						} {
							if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
								return err
							}
						}
						if fails {
							return boom
						}
						return insert(ctx, tx, m)
					})
				case "Writes":
					h = NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
						b.Queue(`SET search_path = nowhere`)
						b.Queue(`SELECT set_config('search_path', $1, true)`, before.searchPath)
						b.Queue(`SET default_transaction_read_only = on`)
						b.Queue(`SELECT pg_advisory_lock($1)`, sessionLock(t))
						if fails {
							b.Queue(`INSERT INTO effects (key, owner) VALUES ($1, NULL)`, m.Key) // refused: owner is NOT NULL
						}
						return queueInsert(ctx, m, b)
					})
				}
				err := h.Handle(ctx, m)
				switch {
				case !fails && err != nil:
					t.Fatalf("Handle: %v", err)
				case fails && err == nil:
					t.Fatal("Handle succeeded, want the handler's failure")
				case !fails && state(t, l, "k").State != ledger.StateComplete:
					t.Fatalf("record %s, want complete", state(t, l, "k").State)
				}
				changedSession(t, l, before)
			})
		}
	}
}
