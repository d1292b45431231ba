package pgtx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

// queueInsert is the Writes handlers' work: one effect row.
func queueInsert(_ context.Context, m *worker.Message, b *pgx.Batch) error {
	b.Queue(`INSERT INTO effects (key, owner) VALUES ($1, $2)`, m.Key, m.Owner)
	return nil
}

func TestWrites(t *testing.T) {
	t.Parallel()

	// The statements and the completion commit together; a duplicate
	// finds the operation complete.
	t.Run("CommitWithTheCompletion", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		m.Result = []byte("done")
		h := NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			queueInsert(ctx, m, b)
			b.Queue(`INSERT INTO effects (key, owner) VALUES ($1, 'second')`, m.Key)
			return nil
		})
		if err := h.Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateComplete || rec.Owner != "a" || string(rec.Result) != "done" || effects(t, l, "k") != 2 {
			t.Fatalf("record %+v, %d effects; want complete by a, both rows", rec, effects(t, l, "k"))
		}
		if err := l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}); err != nil {
			t.Fatalf("the worker's completion: %v", err)
		}
		claim(t, l, "k", "b", time.Minute, ledger.AlreadyComplete)
	})

	// No statement at all: the completion alone commits.
	t.Run("NoStatements", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		err := NewWrites(l, func(context.Context, *worker.Message, *pgx.Batch) error { return nil }).Handle(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateComplete {
			t.Fatalf("record %+v", rec)
		}
	})

	// A statement the server refuses stops the rest, the COMMIT included:
	// the statements before it are rolled back, and the operation stays
	// the attempt's, for the worker to record the failure. No session is
	// left in a transaction.
	t.Run("RefusedStatementRollsBackTheOthers", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		app := "writes-refused"
		l := setup(t, pgtest.WithParam(t, url, "application_name", app))
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		err := NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			queueInsert(ctx, m, b)
			b.Queue(`INSERT INTO effects (key, owner) VALUES ($1, NULL)`, m.Key) // owner is NOT NULL
			return nil
		}).Handle(ctx, m)
		var we *postgres.WriteError
		if !errors.As(err, &we) || !strings.Contains(err.Error(), "not-null") {
			t.Fatalf("Handle: %v; want a WriteError naming the refused constraint", err)
		}
		untouched(t, l, "k")
		noSessionInTx(t, app)
		// The retry commits.
		if err := NewWrites(l, queueInsert).Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
		if effects(t, l, "k") != 1 {
			t.Fatalf("%d effects after the retry", effects(t, l, "k"))
		}
	})

	// The attempt's lease lapses before it sends its writes, and a second
	// claim takes the operation over and completes it: the first
	// attempt's completion finds no claim of its own, and its writes,
	// sent in the same round trip, are not committed.
	t.Run("TakeoverRollsBackTheLoser", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		first := claim(t, l, "k", "a", time.Second, ledger.Claimed)
		var second error
		err := NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			time.Sleep(1500 * time.Millisecond) // the lease lapses
			other := claim(t, l, "k", "b", time.Minute, ledger.Claimed)
			second = NewWrites(l, queueInsert).Handle(ctx, other)
			return queueInsert(ctx, m, b)
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

	// The round trip's answer is lost, or the round trip never reaches
	// the server: Handle reads the record and says what happened.
	for _, lose := range []string{"reply", "request"} {
		t.Run("LostCommit/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _, err := loseCommit(t, lose, func(l *postgres.Ledger) *Handler { return NewWrites(l, queueInsert) })
			rec := state(t, l, "k")
			switch lose {
			case "reply":
				if err != nil || rec.State != ledger.StateComplete || effects(t, l, "k") != 1 {
					t.Fatalf("a commit whose answer was lost: %v, record %+v, %d effects; want success, complete, one effect", err, rec, effects(t, l, "k"))
				}
			case "request":
				if !errors.Is(err, ErrNotCommitted) || rec.State != ledger.StateInProgress || effects(t, l, "k") != 0 {
					t.Fatalf("a round trip that never arrived: %v, record %+v, %d effects; want ErrNotCommitted, in progress, no effect", err, rec, effects(t, l, "k"))
				}
			}
			if p.Drops() == 0 {
				t.Error("the proxy lost nothing")
			}
		})
	}

	// One round trip per message, beside the claim and the worker's
	// completion: the BEGIN, the writes, the completion and the COMMIT
	// go together.
	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		l, n := roundTrips(t, func(l *postgres.Ledger) *Handler { return NewWrites(l, queueInsert) })
		if n != 1 {
			t.Fatalf("%d round trips for writes of one statement, want 1", n)
		}
		if effects(t, l, "k") != 1 || state(t, l, "k").State != ledger.StateComplete {
			t.Fatalf("%d effects, record %s", effects(t, l, "k"), state(t, l, "k").State)
		}
	})

	// A callback on a queued statement would run after the commit: the
	// writes are refused, permanently, before anything is sent.
	t.Run("CallbackRefused", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		err := NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			queueInsert(ctx, m, b)
			b.Queue(`UPDATE effects SET owner = 'x' WHERE key = $1`, m.Key).Exec(func(pgconn.CommandTag) error {
				return errors.New("no row")
			})
			return nil
		}).Handle(ctx, m)
		var perm *worker.PermanentError
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), "callback") {
			t.Fatalf("Handle: %v; want a permanent failure naming the callback", err)
		}
		untouched(t, l, "k")
		// The ledger refuses it too, for callers without pgtx.
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`).Exec(func(pgconn.CommandTag) error { return nil })
		if err := l.CommitOp(ctx, b, ledger.Completion{Key: "k", Owner: "a"}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("CommitOp with a callback: %v, want ErrInvalidArgument", err)
		}
		if rec := state(t, l, "k"); rec.State != ledger.StateInProgress {
			t.Fatalf("record %+v", rec)
		}
	})

	// A statement that controls the transaction would end it before the
	// completion (a COMMIT commits the writes without it; a ROLLBACK drops
	// those before it, and the rest commit with the completion) or change
	// it: such writes are refused, permanently, before anything is sent,
	// however the statement is written.
	t.Run("TransactionControlRefused", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		// The simple protocol sends a statement's SQL as it is, several
		// statements in one string included.
		simple, err := postgres.Open(ctx, postgres.Options{URL: pgtest.WithParam(t, url, "default_query_exec_mode", "simple_protocol"), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeLedger(t, simple) })
		for i, tc := range []struct {
			l    *postgres.Ledger
			sql  string
			want string
		}{
			{l, "COMMIT", "COMMIT"},
			{l, "  /* the order is in */ commit", "COMMIT"},
			{l, "-- done\nEND", "END"},
			{l, "ROLLBACK", "ROLLBACK"},
			{l, "(abort)", "ABORT"},
			{l, "SAVEPOINT s", "SAVEPOINT"},
			{l, "ROLLBACK TO SAVEPOINT s", "ROLLBACK TO"},
			{l, "BEGIN", "BEGIN"},
			{l, "START TRANSACTION", "START TRANSACTION"},
			{l, "PREPARE TRANSACTION 'p'", "PREPARE TRANSACTION"},
			{l, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET TRANSACTION"},
			{l, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "SET SESSION CHARACTERISTICS"},
			{l, "set local transaction_isolation = 'serializable'", "SET TRANSACTION_ISOLATION"},
			{simple, "INSERT INTO effects (key, owner) VALUES ('k', 'x'); Commit", "COMMIT"},
			{simple, "SELECT 'a;b'; /* then */ ROLLBACK", "ROLLBACK"},
		} {
			key := fmt.Sprintf("k%d", i)
			m := claim(t, tc.l, key, "a", time.Minute, ledger.Claimed)
			err := NewWrites(tc.l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
				queueInsert(ctx, m, b)
				b.Queue(tc.sql)
				return queueInsert(ctx, m, b)
			}).Handle(ctx, m)
			var perm *worker.PermanentError
			if !errors.As(err, &perm) || !errors.Is(err, ledger.ErrInvalidArgument) ||
				!strings.Contains(err.Error(), "statement 2") || !strings.Contains(err.Error(), "("+tc.want+")") {
				t.Errorf("writes with %q: %v; want a permanent failure naming statement 2, %s", tc.sql, err, tc.want)
			}
			untouched(t, tc.l, key)
		}
		// Writes without them commit, in either protocol.
		for i, l := range []*postgres.Ledger{l, simple} {
			key := fmt.Sprintf("fine-%d", i)
			m := claim(t, l, key, "a", time.Minute, ledger.Claimed)
			if err := NewWrites(l, queueInsert).Handle(ctx, m); err != nil {
				t.Fatalf("writes by ledger %d: %v", i, err)
			}
			if rec := state(t, l, key); rec.State != ledger.StateComplete || effects(t, l, key) != 1 {
				t.Fatalf("ledger %d: record %s, %d effects; want complete, one", i, rec.State, effects(t, l, key))
			}
		}
		// The ledger refuses them too, for callers without pgtx.
		b := &pgx.Batch{}
		b.Queue(`commit`)
		if err := l.CommitOp(ctx, b, ledger.Completion{Key: "k0", Owner: "a"}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("CommitOp with a COMMIT: %v, want ErrInvalidArgument", err)
		}
		untouched(t, l, "k0")
	})

	// The Writes' own error sends nothing.
	t.Run("ErrorSendsNothing", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		l := setup(t, url)
		m := claim(t, l, "k", "a", time.Minute, ledger.Claimed)
		boom := errors.New("the body has no amount")
		err := NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			queueInsert(ctx, m, b)
			return boom
		}).Handle(ctx, m)
		if !errors.Is(err, boom) {
			t.Fatalf("Handle: %v", err)
		}
		untouched(t, l, "k")
	})
}
