// Package pgtx runs a worker's handler inside a PostgreSQL transaction on
// the database of the shared ledger, and records the operation complete in
// that same transaction: the handler's writes and the completion commit
// together, or neither does. An operation whose effect is those writes then
// takes effect once, with no crash window: a worker that dies before the
// commit leaves neither the effect nor the completion, and its redelivery
// runs the operation again from scratch; a worker that dies after it leaves
// both, and the redelivery is answered as a duplicate.
//
// Even a takeover cannot apply the effect twice. The completion is written
// only under the attempt's own claim (worker.Message.Owner), and it locks
// the operation's record until the transaction ends: when another worker
// has taken the operation over (this one's lease lapsed), the completion
// fails and the whole transaction, the handler's writes included, is rolled
// back; a takeover that reaches the record while the completion holds it
// waits for the commit, and finds the operation complete.
//
// Each message costs two round trips of its own to the server beside the
// handler's statements: BEGIN, and the completion sent together with the
// COMMIT. Work whose writes need no answer from the database before they
// are made can cost one in all: a Writes handler (NewWrites) queues its
// statements on a pgx.Batch, which goes to the server with the BEGIN, the
// completion and the COMMIT in a single round trip. The claim before and
// the worker's completion after are shared by a receive's batch, as for
// any handler.
//
// Use it with a worker whose ledger is that same *postgres.Ledger:
//
//	l, _ := postgres.Open(ctx, postgres.Options{URL: url})
//	h := pgtx.New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO orders (id, body) VALUES ($1, $2)`, m.Key, m.Body)
//		return err
//	})
//	w, _ := worker.New(cfg, sqsClient, l, h)
//
// The transaction stays open while the handler runs, holding its locks and
// a connection of the ledger's pool: bound it with the worker's handler
// timeout (Config.HandlerTimeout), which cancels the handler's context and
// so rolls the transaction back, and give the pool connections for the
// handlers as well as for the worker's claims and heartbeats
// (pool_max_conns in the ledger's URL). The heartbeat keeps the lease
// while the transaction is open; it uses other connections of the pool.
//
// The transaction runs at READ COMMITTED, whatever the server's
// default_transaction_isolation (see postgres.Ledger.BeginOp): the
// heartbeat renews the lease by updating the operation's record while the
// transaction is open, and at REPEATABLE READ or SERIALIZABLE the
// completion's update of that record would fail with a serialization
// failure in every attempt longer than a heartbeat. A Func must not change
// the level: such a transaction is not committed, and the attempt fails
// permanently (postgres.ErrIsolation). Row locks (SELECT … FOR UPDATE),
// advisory locks and constraints give stronger guarantees on the Func's
// own rows at READ COMMITTED.
//
// The connection goes back to the pool as the ledger needs it, whatever
// the handler changed in its session: settings made with SET (without
// LOCAL) or set_config, which a commit keeps, and advisory locks of the
// session, which even a rollback keeps, are undone (RESET ALL,
// pg_advisory_unlock_all()) in the round trip of the COMMIT or of the
// rollback. Settings return to their values for the session (the
// connection string's, the role's, the database's, the server's). Other
// session state (temporary tables, prepared statements, LISTEN) is not
// reset: a handler must not leave any.
//
// When the server rolls the transaction back because of a concurrent one
// (a deadlock, a serialization failure: SQLSTATE 40P01, 40001), in the
// Func's statements or at the completion, the attempt is a retryable
// failure whose error wraps ledger.ErrContention and says that it must be
// retried, unless the Func made its error permanent.
//
// However the Func leaves, the transaction ends and its connection goes
// back to the pool: an error, a cancelled context, a panic and
// runtime.Goexit all roll it back. A panic is not recovered: once the
// transaction is rolled back it goes on, unchanged, to the caller (the
// worker turns it into a retryable failure, as for any handler). A
// connection that cannot be rolled back (a panic while a result was still
// being read, say) is closed instead of given back, and the server ends its
// transaction.
package pgtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

// Func is a handler's work inside the transaction tx. It returns nil when
// the work is done; an error rolls tx back and is the attempt's outcome, as
// for worker.Handler (worker.Permanent and worker.RetryAfter steer it). It
// must not commit or roll back tx itself, nor change its isolation level.
type Func func(ctx context.Context, tx pgx.Tx, m *worker.Message) error

// Writes is a handler's work as statements queued on b, for work whose
// writes need no answer from the database before they are made (inserts,
// upserts, updates whose conditions are in their SQL). The statements run
// in their order in one transaction with the operation's completion, all
// sent in a single round trip: BEGIN, the statements, the completion,
// COMMIT. When one of them fails, the server skips the rest, the COMMIT
// included, and nothing is committed. Their results are dropped: a
// callback on a queued statement (QueuedQuery.Exec, Query or QueryRow)
// would run after the commit, and is refused. The transaction is the
// Handler's to begin and end: a statement that controls it (BEGIN, START
// TRANSACTION, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE, PREPARE
// TRANSACTION, COMMIT PREPARED, SET TRANSACTION, SET SESSION
// CHARACTERISTICS), which could commit the writes without the completion,
// is refused too, wherever it stands in a statement's SQL (after a comment,
// in any case, behind another statement). Either refusal sends nothing and
// fails the attempt permanently, naming the statement (see
// postgres.Ledger.CommitOp). An error returned by Writes is the attempt's
// outcome and sends nothing, as a Func's error does.
type Writes func(ctx context.Context, m *worker.Message, b *pgx.Batch) error

// Handler is a worker.Handler that runs a Func, or sends Writes, in a
// transaction with the operation's completion. It is safe for concurrent
// use.
type Handler struct {
	l      *postgres.Ledger
	fn     Func
	writes Writes

	beforeCommit func() // for tests: runs after the handler's writes, before the commit
}

// New returns the Handler of fn on the ledger's database.
func New(l *postgres.Ledger, fn Func) *Handler {
	return &Handler{l: l, fn: fn}
}

// NewWrites returns the Handler that sends the statements queued by fn,
// and the operation's completion, in one transaction of a single round
// trip (see Writes).
func NewWrites(l *postgres.Ledger, fn Writes) *Handler {
	return &Handler{l: l, writes: fn}
}

// ErrNotCommitted is wrapped by Handle's error when the transaction did not
// commit, or may not have: the attempt counts as failed, and the operation's
// record decides what its redelivery does.
var ErrNotCommitted = errors.New("transaction not committed")

// recordReadTimeout bounds the read of the operation's record after a
// commit whose answer was lost.
const recordReadTimeout = 10 * time.Second

// Handle begins a transaction, runs the Func in it, then records the
// operation complete in it under m.Owner and commits, both in one round
// trip (postgres.OpTx). It returns nil only once the
// commit is known to have taken effect: when its answer was lost, the
// operation's record is read, and only a record complete under m.Owner
// counts as committed. The worker then records the completion, which finds
// it done, and deletes the message.
func (h *Handler) Handle(ctx context.Context, m *worker.Message) error {
	if m.Owner == "" {
		return worker.Permanent(errors.New("pgtx: the message has no claim owner: the worker must claim it in the ledger first"))
	}
	if h.writes != nil {
		return h.handleWrites(ctx, m)
	}
	op, err := h.l.BeginOp(ctx)
	if err != nil {
		return err
	}
	// Every way out ends the transaction and gives its connection back:
	// an error, a panic, runtime.Goexit. A panic is not recovered here:
	// it goes on to the caller unchanged once the transaction is rolled
	// back (the worker turns it into a retryable failure).
	defer op.Rollback(ctx)
	if err := h.fn(ctx, op.Tx(), m); err != nil {
		var perm *worker.PermanentError
		if isContention(err) && !errors.As(err, &perm) {
			return fmt.Errorf("pgtx %q: %w: %w", m.Key, ledger.ErrContention, err)
		}
		return err
	}
	if h.beforeCommit != nil {
		h.beforeCommit()
	}
	return h.outcome(ctx, m, op.CommitComplete(ctx, completion(m)))
}

func completion(m *worker.Message) ledger.Completion {
	return ledger.Completion{Key: m.Key, Owner: m.Owner, Result: m.Result}
}

// handleWrites runs the Writes and sends their statements with the
// completion (postgres.Ledger.CommitOp).
func (h *Handler) handleWrites(ctx context.Context, m *worker.Message) error {
	b := &pgx.Batch{}
	if err := h.writes(ctx, m, b); err != nil {
		return err
	}
	if h.beforeCommit != nil {
		h.beforeCommit()
	}
	err := h.l.CommitOp(ctx, b, completion(m))
	if errors.Is(err, ledger.ErrInvalidArgument) {
		// Refused before anything was sent (a statement with a
		// callback, or one that controls the transaction): no retry
		// would change that.
		return worker.Permanent(fmt.Errorf("pgtx %q: %w", m.Key, err))
	}
	var we *postgres.WriteError
	if errors.As(err, &we) {
		// The server refused a statement of the writes (or they were not
		// sent): nothing committed. It is the work's failure.
		if isContention(err) {
			return fmt.Errorf("pgtx %q: %w: %w", m.Key, ledger.ErrContention, err)
		}
		return fmt.Errorf("pgtx %q: %w", m.Key, err)
	}
	return h.outcome(ctx, m, err)
}

// outcome is the attempt's outcome once the completion and the commit were
// sent and cerr is what they answered: nil only once the commit is known
// to have taken effect.
func (h *Handler) outcome(ctx context.Context, m *worker.Message, cerr error) error {
	if cerr == nil {
		return nil
	}
	if errors.Is(cerr, postgres.ErrIsolation) {
		return worker.Permanent(fmt.Errorf("pgtx %q: %w: the handler must not change the transaction's isolation level: %w", m.Key, ErrNotCommitted, cerr))
	}
	if errors.Is(cerr, ledger.ErrContention) {
		// The server answered, and rolled the transaction back.
		return fmt.Errorf("pgtx %q: %w: %w", m.Key, ErrNotCommitted, cerr)
	}
	if errors.Is(cerr, ledger.ErrNotOwner) || errors.Is(cerr, ledger.ErrNotFound) || errors.Is(cerr, ledger.ErrState) || errors.Is(cerr, ledger.ErrInvalidKey) {
		// Another claim owns the operation now (or the record is gone):
		// this attempt's writes did not stand.
		return fmt.Errorf("pgtx %q: the completion cannot be recorded, the writes are rolled back: %w: %w", m.Key, ErrNotCommitted, cerr)
	}
	// The commit failed, or its answer was lost on the way: the record
	// tells. A transaction still open on the server holds the record's
	// lock, and the read sees the record as it was before it (in
	// progress): that is not counted as committed, and the claim of the
	// redelivery waits for the lock.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordReadTimeout)
	defer cancel()
	rec, err := h.l.Get(rctx, m.Key)
	if err == nil && rec.State == ledger.StateComplete && rec.Owner == m.Owner {
		return nil
	}
	state := "unreadable: " + errString(err)
	if err == nil {
		state = rec.State.String()
	}
	return fmt.Errorf("pgtx %q: commit: %w (the operation's record is %s): %w", m.Key, cerr, state, ErrNotCommitted)
}

// isContention reports whether err is PostgreSQL's answer that it rolled
// the transaction back because of a concurrent one: serialization_failure
// (40001) or deadlock_detected (40P01).
func isContention(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
