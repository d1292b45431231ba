package pgtx

import (
	"context"
	"errors"
	"fmt"
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
func setup(t *testing.T, url string) *postgres.Ledger {
	t.Helper()
	opts := postgres.Options{URL: url, Timeout: 5 * time.Second}
	if err := postgres.Init(ctx, opts); err != nil {
		t.Fatal(err)
	}
	l, err := postgres.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
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

func state(t *testing.T, l *postgres.Ledger, key string) ledger.Record {
	t.Helper()
	rec, err := l.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
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
			url, _ := pgtest.Schema(t)
			p := pgtest.NewProxy(t, pgtest.Addr(t, url))
			l := setup(t, pgtest.ReplaceAddr(t, url, p.Addr()))
			m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
			h := New(l, insert)
			h.beforeCommit = func() {
				if lose == "reply" {
					p.DropNextReply(1)
				} else {
					p.DropNextRequest(1)
				}
			}
			err := h.Handle(ctx, m)
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
}
