package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// maxQuoted bounds how much of a statement's SQL an error quotes.
const maxQuoted = 120

// Begin starts a plain transaction on a connection of the ledger's pool,
// on the database that holds the ledger's table, for writes that belong to
// no operation (a schema of the caller's, say); the writes of an operation
// commit with its completion in an OpTx. It runs at the server's default
// isolation level (default_transaction_isolation). The caller commits or
// rolls it back; either gives the connection back.
func (l *Ledger) Begin(ctx context.Context) (pgx.Tx, error) {
	if l.closed.Load() {
		return nil, ledger.ErrClosed
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(ctx, err))
	}
	return tx, nil
}

// ErrIsolation is wrapped by CommitComplete's error when the transaction
// no longer runs at READ COMMITTED (the caller's statements changed it with
// SET TRANSACTION): nothing is committed. See BeginOp.
var ErrIsolation = errors.New("the completion needs a transaction at read committed")

// opTxOptions start the transaction of an OpTx: READ COMMITTED, in the
// BEGIN statement itself (no round trip of its own).
var opTxOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// OpTx is a transaction on the ledger's database that ends by recording
// one operation complete: the writes made through Tx and the completion
// commit together, in one round trip (CommitComplete), or neither does
// (Rollback). It holds a connection of the ledger's pool until it ends. An
// OpTx is used by one goroutine at a time.
type OpTx struct {
	l         *Ledger
	conn      *pgxpool.Conn
	tx        pgx.Tx
	committed bool // the server answered the COMMIT
	done      bool // ended: the connection is given back
}

// BeginOp starts an OpTx on a connection of the ledger's pool.
//
// The transaction runs at READ COMMITTED, whatever the server's
// default_transaction_isolation, and must stay there. The heartbeat
// renews the operation's lease by updating its record, on another
// connection, while the transaction is open; the completion then updates
// that record once more, and checks that it is still in progress under the
// attempt's own claim. At READ COMMITTED that update waits for any other
// writer of the record and then reads its latest version, which is what
// the check must see. At REPEATABLE READ or SERIALIZABLE PostgreSQL refuses
// to update a row that another transaction changed after the snapshot was
// taken (a serialization failure): every attempt longer than a heartbeat
// would fail at its completion. A transaction whose isolation the caller
// changed (SET TRANSACTION) is therefore not committed: CommitComplete
// fails with ErrIsolation.
func (l *Ledger) BeginOp(ctx context.Context) (op *OpTx, err error) {
	if l.closed.Load() {
		return nil, ledger.ErrClosed
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(ctx, err))
	}
	defer func() {
		if op == nil {
			// The pool takes back only a connection that is idle and
			// out of every transaction; it closes any other.
			conn.Release()
		}
	}()
	if err := l.prepareOp(ctx, conn); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	tx, err := conn.BeginTx(ctx, opTxOptions)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(ctx, err))
	}
	return &OpTx{l: l, conn: conn, tx: tx}, nil
}

// beginOpSQL begins the transaction of CommitOp, as opTxOptions does that
// of an OpTx.
const beginOpSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// resetSession undoes what the caller's statements may have changed in the
// session and what outlives their transaction, before the connection goes
// back to the pool to serve the ledger's own statements: settings made
// with SET (without LOCAL) or set_config, which a committed transaction
// keeps (a search_path that hides the ledger's table, a
// default_transaction_read_only, a statement_timeout), and advisory locks
// of the session, which even a rolled back one keeps. Settings return to
// their values for the session: those of the connection string, the
// role, the database and the server's configuration. (DISCARD ALL would
// also drop the prepared statements that pgx relies on, and cannot run
// where these run: behind the COMMIT, in the same round trip.)
var resetSession = []string{"RESET ALL", "SELECT pg_advisory_unlock_all()"}

// rollbackSQL ends a transaction that did not commit and resets the
// session, in one round trip of the simple protocol.
var rollbackSQL = "ROLLBACK; " + strings.Join(resetSession, "; ")

// rollback ends the transaction on conn, which did not commit, and resets
// its session (see resetSession), in one round trip within
// Options.Timeout. A connection on which that fails (a result still being
// read, the connection broken, the server not answering in time) is
// closed, and the server then ends the transaction; the pool takes back
// only a connection that is idle and out of every transaction, and closes
// any other.
func (l *Ledger) rollback(ctx context.Context, conn *pgx.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.timeout)
	defer cancel()
	if _, err := conn.Exec(rctx, rollbackSQL); err != nil {
		conn.Close(rctx)
	}
}

// prepareOp prepares on conn the statements that end an operation's
// transaction and reset its session, once per connection (under their
// text as name, which a batch finds them by), so that they then go with
// the commit in a single round trip.
func (l *Ledger) prepareOp(ctx context.Context, conn *pgxpool.Conn) error {
	for _, sql := range append([]string{beginOpSQL, l.q.checkIsolation, l.q.completeOrAbort, "COMMIT"}, resetSession...) {
		if _, err := conn.Conn().Prepare(ctx, sql, sql); err != nil {
			return fmt.Errorf("prepare the completion: %w", classify(ctx, err))
		}
	}
	return nil
}

// Tx is the transaction for the caller's writes. The caller must not
// commit or roll it back, nor change its isolation level, nor use it once
// the OpTx has ended.
func (t *OpTx) Tx() pgx.Tx { return t.tx }

// CommitComplete records c complete (which counts its attempt, as Complete
// does) and commits the transaction, in one round trip, and ends the OpTx,
// whatever happens (a panic included). The
// record must be in progress under c.Owner. When it is not (another claim
// took the operation over, the record is gone or in another state),
// nothing is committed: the transaction is rolled back, and the error
// wraps ledger.ErrNotOwner, ledger.ErrNotFound or ledger.ErrState (a record
// already complete included, since these writes did not commit with it).
// When the transaction no longer runs at READ COMMITTED, nothing is
// committed and the error wraps ErrIsolation. When the server rolled the
// transaction back because of a concurrent one (a deadlock, a
// serialization failure), nothing is committed and the error wraps
// ledger.ErrContention: the attempt may be made again. Any other error
// (the connection lost, the commit refused) leaves it unknown whether the
// commit took effect: read the record to tell.
func (t *OpTx) CommitComplete(ctx context.Context, c ledger.Completion) error {
	if t.done {
		return fmt.Errorf("complete %q: %w", c.Key, pgx.ErrTxClosed)
	}
	defer t.end(ctx)
	it := item{key: c.Key, owner: c.Owner}
	if !it.valid("complete") {
		return it.err
	}
	committed, err := t.l.sendCommit(ctx, t.conn, nil, c)
	if committed {
		t.committed = true
		// Counted only: this connection is still held, and the pool
		// may have no other to write the counts with.
		t.l.minutes.Add(t.l.localNow(), 1, 0)
		return nil
	}
	// The transaction did not commit, or it is not known whether it did:
	// it ends now, before the record is read on another connection.
	t.end(ctx)
	return t.l.commitError(ctx, c, err)
}

// CommitOp runs the statements queued in writes and records c complete in
// one transaction, sent to the server in a single round trip: BEGIN (at
// READ COMMITTED), the writes in their order, the completion and COMMIT.
// The writes and the completion commit together, or neither does: the
// server skips every statement after one that fails, the COMMIT included,
// and CommitOp then rolls the transaction back. It is the cheapest way to
// make an operation's effect a set of writes that need no answer from the
// database before they are made; writes that do need one use an OpTx.
//
// writes may hold no statement (the completion alone is then written). Its
// statements' results are read by CommitOp and dropped: a callback set on
// one (QueuedQuery.Exec, Query or QueryRow) is refused, with
// ErrInvalidArgument, since it would run after the commit and could not
// stop it. So is a statement that controls the transaction (BEGIN, START
// TRANSACTION, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE, PREPARE
// TRANSACTION, COMMIT PREPARED, SET TRANSACTION, SET SESSION
// CHARACTERISTICS, SET transaction_isolation…), found in each statement's
// SQL past comments, whatever its case and wherever it stands in a string
// of several statements: a COMMIT among the writes would commit them
// without the completion. Both are refused before anything is sent. The
// errors are those of CommitComplete, and a *WriteError when a statement of
// writes failed.
func (l *Ledger) CommitOp(ctx context.Context, writes *pgx.Batch, c ledger.Completion) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	it := item{key: c.Key, owner: c.Owner}
	if !it.valid("complete") {
		return it.err
	}
	pre := []*pgx.QueuedQuery{{SQL: beginOpSQL}}
	if writes != nil {
		for i, q := range writes.QueuedQueries {
			if q.Fn != nil {
				return fmt.Errorf("complete %q: statement %d of the writes has a callback (QueuedQuery.Exec, Query or QueryRow), which would run after the commit and could not stop it: put the condition in the statement's SQL: %w", c.Key, i+1, ledger.ErrInvalidArgument)
			}
			if words, ok := transactionControl(q.SQL); ok {
				return fmt.Errorf("complete %q: statement %d of the writes (%q) is transaction control (%s): the transaction is CommitOp's to begin and end, with the completion: %w",
					c.Key, i+1, textcut.Mark(q.SQL, maxQuoted, "…"), words, ledger.ErrInvalidArgument)
			}
		}
		pre = append(pre, writes.QueuedQueries...)
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("complete %q: %w", c.Key, classify(ctx, err))
	}
	done := false
	end := func(committed bool) {
		if done {
			return
		}
		done = true
		defer conn.Release()
		if !committed {
			// A transaction that may be open ends before the connection
			// goes back, and the session is reset.
			l.rollback(ctx, conn.Conn())
		}
	}
	defer end(false) // a panic included
	if err := l.prepareOp(ctx, conn); err != nil {
		return fmt.Errorf("complete %q: %w", c.Key, err)
	}
	committed, err := l.sendCommit(ctx, conn, pre, c)
	// The transaction ends before the record is read on another
	// connection: while it is open it holds the record's lock.
	end(committed)
	if committed {
		l.minutes.Add(l.localNow(), 1, 0) // written with the next claims, when due
		return nil
	}
	return l.commitError(ctx, c, err)
}

// sendCommit sends, in one round trip on conn, the statements of pre
// (none, or a BEGIN and the caller's writes), then the isolation check,
// c's completion, COMMIT and the session's reset (see resetSession), and
// reads every answer. committed reports that the server answered the
// COMMIT; a connection whose reset then fails is closed, so that the pool
// does not take it back. Otherwise err is the first error met: a
// *WriteError when the server refused one of pre's statements or pgx
// refused to send them (nothing of the transaction commits then), an
// error that commitError explains when the completion or the commit was
// refused, and any other error (the connection lost, say) when it is not
// known whether the commit took effect. When it did not commit, the
// statements behind the failure did not run: the caller rolls back.
func (l *Ledger) sendCommit(ctx context.Context, conn *pgxpool.Conn, pre []*pgx.QueuedQuery, c ledger.Completion) (committed bool, err error) {
	var a completeArgs
	a.add(&c)
	b := &pgx.Batch{QueuedQueries: append(make([]*pgx.QueuedQuery, 0, len(pre)+3+len(resetSession)), pre...)}
	b.Queue(l.q.checkIsolation)
	b.Queue(l.q.completeOrAbort, a.args(l)...)
	b.Queue("COMMIT")
	through := len(b.QueuedQueries) // the statements up to the COMMIT
	for _, sql := range resetSession {
		b.Queue(sql)
	}
	br := conn.SendBatch(ctx, b)
	var commit pgconn.CommandTag
	for i := range through {
		tag, err := br.Exec()
		if err != nil && i < len(pre) && refused(err) {
			br.Close()
			return false, &WriteError{err: err}
		}
		// The first statement's error tells why the rest did not run.
		if err != nil {
			br.Close()
			return false, err
		}
		commit = tag
	}
	if commit.String() != "COMMIT" {
		br.Close()
		return false, fmt.Errorf("the server answered %q to the commit", commit.String())
	}
	var rerr error
	for range resetSession {
		if _, rerr = br.Exec(); rerr != nil {
			break
		}
	}
	if err := br.Close(); rerr == nil {
		rerr = err
	}
	if rerr != nil {
		// Committed, but the session may keep what the caller's
		// statements changed in it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.timeout)
		defer cancel()
		conn.Conn().Close(cctx)
	}
	return true, nil
}

// refused reports whether err says that the server refused a statement, or
// that pgx did not send the batch at all: either way nothing of it ran past
// that statement, and the COMMIT behind it was not carried out.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	var pre pgx.ErrPreprocessingBatch
	return errors.As(err, &pgErr) || errors.As(err, &pre)
}

// WriteError is CommitOp's error when a statement of the caller's writes
// failed (the server refused it, or pgx could not send the batch): nothing
// of the transaction committed. It wraps that statement's error.
type WriteError struct{ err error }

func (e *WriteError) Error() string {
	return "the transaction's writes failed, nothing is committed: " + e.err.Error()
}

func (e *WriteError) Unwrap() error { return e.err }

// commitError explains err, sendCommit's error for a transaction whose
// completion or commit did not go through: ErrIsolation, or, from the
// record as it is now, ErrNotOwner, ErrNotFound or ErrState; any other
// error leaves it unknown whether the commit took effect.
func (l *Ledger) commitError(ctx context.Context, c ledger.Completion, err error) error {
	var we *WriteError
	if errors.As(err, &we) {
		return fmt.Errorf("complete %q: %w", c.Key, err)
	}
	switch code, detail := refusal(err); code {
	case codeIsolation:
		return fmt.Errorf("complete %q: the transaction runs at %s, rolled back: %w", c.Key, detail, ErrIsolation)
	case codeNotCompleted:
	default:
		return fmt.Errorf("complete %q and commit: %w", c.Key, classify(ctx, err))
	}
	// Not committed: say why, from the record as it is now.
	var f *found
	rerr := l.do(ctx, func(ctx context.Context, _ bool) error {
		var err error
		f, err = readFound(l.pool.QueryRow(ctx, l.q.explain, l.clock(), [][]byte{[]byte(c.Key)}))
		return err
	})
	if rerr != nil {
		return fmt.Errorf("complete %q: not in progress under %q, rolled back (the record cannot be read: %v): %w", c.Key, c.Owner, rerr, ledger.ErrState)
	}
	return l.explainOne("complete", c.Key, c.Owner, f, func(f *found) error {
		return fmt.Errorf("complete %q: record is %s, rolled back: %w", c.Key, ledger.State(f.state), ledger.ErrState)
	})
}

// refusal returns the SQLSTATE and the DETAIL of err when it is the
// refusal of one of the statements that end an operation's transaction
// (codeNotCompleted, codeIsolation), and empty strings otherwise.
func refusal(err error) (code, detail string) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeNotCompleted && pgErr.Code != codeIsolation {
		return "", ""
	}
	return pgErr.Code, pgErr.Detail
}

// Rollback rolls the transaction back and ends the OpTx. It does nothing
// once the OpTx has ended, so that it may be deferred right after BeginOp.
func (t *OpTx) Rollback(ctx context.Context) {
	t.end(ctx)
}

// end ends the OpTx once: a transaction that did not commit is rolled
// back and its session reset (see rollback), and the connection is given
// back. (A committed one was reset with its COMMIT.)
func (t *OpTx) end(ctx context.Context) {
	if t.done {
		return
	}
	t.done = true
	defer t.conn.Release()
	if !t.committed {
		t.l.rollback(ctx, t.conn.Conn())
	}
}
