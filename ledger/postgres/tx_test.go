package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// CommitComplete commits the writes with the completion, and only when the
// record is in progress under the owner: otherwise the writes are rolled
// back and the error says why.
func TestOpTx_CommitComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := open(t, setup(t, nil))
	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE effects (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(key string) int {
		t.Helper()
		var n int
		op, err := l.BeginOp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer op.Rollback(ctx)
		if err := op.Tx().QueryRow(ctx, `SELECT count(*) FROM effects WHERE key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	claim := func(key, owner string) {
		t.Helper()
		c, err := l.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Minute, Fingerprint: []byte("fp")})
		if err != nil || c.Outcome != ledger.Claimed {
			t.Fatalf("claim %s by %s: %v, %v", key, owner, c.Outcome, err)
		}
	}
	attempt := func(key, owner string) error {
		t.Helper()
		op, err := l.BeginOp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.Tx().Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key); err != nil {
			t.Fatal(err)
		}
		return op.CommitComplete(ctx, ledger.Completion{Key: key, Owner: owner, Result: []byte("done")})
	}

	claim("ok", "a")
	if err := attempt("ok", "a"); err != nil {
		t.Fatalf("CommitComplete: %v", err)
	}
	if rec, _ := l.Get(ctx, "ok"); rec.State != ledger.StateComplete || string(rec.Result) != "done" || count("ok") != 1 {
		t.Fatalf("after the commit: record %s %q, %d effects; want complete, the result, one effect", rec.State, rec.Result, count("ok"))
	}

	for _, tc := range []struct {
		name, key, owner string
		want             error
	}{
		{"NotOwner", "taken", "a", ledger.ErrNotOwner},
		{"NotFound", "never-claimed", "a", ledger.ErrNotFound},
		{"AlreadyComplete", "ok", "a", ledger.ErrState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.key == "taken" {
				claim(tc.key, "b")
			}
			before := count(tc.key)
			err := attempt(tc.key, tc.owner)
			if !errors.Is(err, tc.want) {
				t.Fatalf("CommitComplete: %v, want %v", err, tc.want)
			}
			if got := count(tc.key); got != before {
				t.Fatalf("%d effects after a completion refused, want %d: the writes were committed", got, before)
			}
		})
	}

	// A statement that failed inside the transaction aborts it: nothing
	// is committed, completion included.
	t.Run("AbortedTransaction", func(t *testing.T) {
		claim("aborted", "a")
		op, err := l.BeginOp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		op.Tx().Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, "aborted")
		if _, err := op.Tx().Exec(ctx, `SELECT 1/0`); err == nil {
			t.Fatal("division by zero succeeded")
		}
		err = op.CommitComplete(ctx, ledger.Completion{Key: "aborted", Owner: "a"})
		if err == nil {
			t.Fatal("CommitComplete of an aborted transaction succeeded")
		}
		if rec, _ := l.Get(ctx, "aborted"); rec.State != ledger.StateInProgress || count("aborted") != 0 {
			t.Fatalf("record %s, %d effects; want in progress, none", rec.State, count("aborted"))
		}
	})
}

// The server rolls the transaction back at its completion, to break a
// deadlock with another transaction: nothing is committed, and the error
// says that the attempt must be made again (ledger.ErrContention), not that
// the store is unavailable.
func TestOpTx_Contention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := setup(t, nil)
	l := open(t, opts)
	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE effects (key text NOT NULL); CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "a", Lease: time.Minute, Fingerprint: []byte("fp")}); err != nil || c.Outcome != ledger.Claimed {
		t.Fatalf("claim: %v, %v", c.Outcome, err)
	}

	// The operation's transaction holds row 1.
	op, err := l.BeginOp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Rollback(ctx)
	if _, err := op.Tx().Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Tx().Exec(ctx, `SELECT 1 FROM rows WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// Another holds the operation's record and waits for row 1. It waits
	// long before it looks for a deadlock, so that the completion, which
	// looks after the default second, is the transaction rolled back.
	other := pgtest.Connect(t, opts.URL)
	if _, err := other.Exec(ctx, `SET deadlock_timeout = '60s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT 1 FROM sqsonce_operations WHERE key = convert_to('k', 'UTF8') FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, `SELECT 1 FROM rows WHERE id = 1 FOR UPDATE`)
		got <- err
	}()
	watch := pgtest.Connect(t, opts.URL)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := watch.QueryRow(ctx, `SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other transaction does not wait for row 1")
		}
		time.Sleep(20 * time.Millisecond)
	}

	err = op.CommitComplete(ctx, ledger.Completion{Key: "k", Owner: "a"})
	if !errors.Is(err, ledger.ErrContention) || errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "40P01") {
		t.Fatalf("CommitComplete: %v; want an error wrapping ErrContention (a deadlock), not ErrUnavailable", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the other transaction, once the completion's was rolled back: %v", err)
	}
	if _, err := other.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := watch.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if rec, err := l.Get(ctx, "k"); err != nil || rec.State != ledger.StateInProgress || n != 0 {
		t.Fatalf("record %s (%v), %d effects; want in progress, none", rec.State, err, n)
	}
}

// The transaction of an OpTx runs at READ COMMITTED whatever the server's
// default, and a transaction whose isolation the caller changed is not
// committed: at REPEATABLE READ or SERIALIZABLE the completion would fail
// whenever the record changed since the transaction's first statement.
func TestOpTx_Isolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, level := range []string{"serializable", "repeatable read"} {
		t.Run("Default/"+strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			t.Parallel()
			opts := setup(t, nil)
			opts.URL = pgtest.WithParam(t, opts.URL, "default_transaction_isolation", level)
			l := open(t, opts)
			op, err := l.BeginOp(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer op.Rollback(ctx)
			var got, def string
			if err := op.Tx().QueryRow(ctx, `SELECT current_setting('transaction_isolation'), current_setting('default_transaction_isolation')`).Scan(&got, &def); err != nil {
				t.Fatal(err)
			}
			if got != "read committed" || def != level {
				t.Fatalf("the OpTx runs at %q on a server whose default is %q; want read committed on %q", got, def, level)
			}
		})
		t.Run("Set/"+strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			t.Parallel()
			l := open(t, setup(t, nil))
			tx, err := l.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE effects (key text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if c, err := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "a", Lease: time.Minute, Fingerprint: []byte("fp")}); err != nil || c.Outcome != ledger.Claimed {
				t.Fatalf("claim: %v, %v", c.Outcome, err)
			}
			op, err := l.BeginOp(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := op.Tx().Exec(ctx, `SET TRANSACTION ISOLATION LEVEL `+level); err != nil {
				t.Fatal(err)
			}
			if _, err := op.Tx().Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`); err != nil {
				t.Fatal(err)
			}
			err = op.CommitComplete(ctx, ledger.Completion{Key: "k", Owner: "a"})
			if !errors.Is(err, postgres.ErrIsolation) || !strings.Contains(err.Error(), level) {
				t.Fatalf("CommitComplete: %v; want ErrIsolation naming %s", err, level)
			}
			var n int
			op, err = l.BeginOp(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer op.Rollback(ctx)
			if err := op.Tx().QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if rec, err := l.Get(ctx, "k"); err != nil || rec.State != ledger.StateInProgress || n != 0 {
				t.Fatalf("record %s (%v), %d effects; want in progress, none", rec.State, err, n)
			}
		})
	}
}
