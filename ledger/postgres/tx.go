package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsonce/sqsonce/ledger"
)

// Begin starts a plain transaction on a connection of the ledger's pool,
// on the database that holds the ledger's table, for writes that belong to
// no operation (a schema of the caller's, say); the writes of an operation
// commit with its completion in an OpTx. The caller commits or rolls it
// back; either gives the connection back.
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

// OpTx is a transaction on the ledger's database that ends by recording
// one operation complete: the writes made through Tx and the completion
// commit together, in one round trip (CommitComplete), or neither does
// (Rollback). It holds a connection of the ledger's pool until it ends. An
// OpTx is used by one goroutine at a time.
type OpTx struct {
	l    *Ledger
	conn *pgxpool.Conn
	tx   pgx.Tx
	done bool
}

// BeginOp starts an OpTx on a connection of the ledger's pool.
func (l *Ledger) BeginOp(ctx context.Context) (*OpTx, error) {
	if l.closed.Load() {
		return nil, ledger.ErrClosed
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(ctx, err))
	}
	// The statements of CommitComplete are prepared once per connection
	// (under their text as name, which a batch finds them by), so that
	// the completion and the commit then go in a single round trip.
	for _, sql := range []string{l.q.completeOrAbort, "COMMIT"} {
		if _, err := conn.Conn().Prepare(ctx, sql, sql); err != nil {
			conn.Release()
			return nil, fmt.Errorf("begin: prepare the completion: %w", classify(ctx, err))
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("begin: %w", classify(ctx, err))
	}
	return &OpTx{l: l, conn: conn, tx: tx}, nil
}

// Tx is the transaction for the caller's writes. The caller must not
// commit or roll it back, nor use it once the OpTx has ended.
func (t *OpTx) Tx() pgx.Tx { return t.tx }

// CommitComplete records c complete and commits the transaction, in one
// round trip, and ends the OpTx. The record must be in progress under
// c.Owner. When it is not (another claim took the operation over, the
// record is gone or in another state), nothing is committed: the
// transaction is rolled back, and the error wraps ledger.ErrNotOwner,
// ledger.ErrNotFound or ledger.ErrState (a record already complete
// included, since these writes did not commit with it). Any other error
// (the connection lost, the commit refused) leaves it unknown whether the
// commit took effect: read the record to tell.
func (t *OpTx) CommitComplete(ctx context.Context, c ledger.Completion) error {
	if t.done {
		return fmt.Errorf("complete %q: %w", c.Key, pgx.ErrTxClosed)
	}
	t.done = true
	it := item{key: c.Key, owner: c.Owner}
	if !it.valid("complete") {
		t.tx.Rollback(context.WithoutCancel(ctx))
		t.conn.Release()
		return it.err
	}
	result := c.Result
	if len(result) > ledger.MaxResultLen {
		result = result[:ledger.MaxResultLen]
	}
	l := t.l
	b := &pgx.Batch{}
	b.Queue(l.q.completeOrAbort, l.clock(), micros(l.cfg.retention), [][]byte{[]byte(c.Key)}, [][]byte{[]byte(c.Owner)}, [][]byte{nonEmpty(result)})
	b.Queue("COMMIT")
	br := t.conn.SendBatch(ctx, b)
	_, completeErr := br.Exec()
	commit, commitErr := br.Exec()
	cerr := cmp.Or(completeErr, commitErr, br.Close()) // the completion's own first: it tells a refusal
	if cerr == nil && commit.String() != "COMMIT" {
		cerr = fmt.Errorf("the server answered %q to the commit", commit.String())
	}
	if cerr == nil {
		t.conn.Release()
		return nil
	}
	// The transaction did not commit, or it is not known whether it did.
	// A connection that cannot roll back is closed, and the server ends
	// the transaction. The pool takes back only a connection that is out
	// of every transaction.
	t.tx.Rollback(context.WithoutCancel(ctx))
	t.conn.Release()
	var pgErr *pgconn.PgError
	if !errors.As(cerr, &pgErr) || pgErr.Code != "22P02" || !strings.Contains(pgErr.Message, notCompletedMark) {
		return fmt.Errorf("complete %q and commit: %w", c.Key, classify(ctx, cerr))
	}
	// Not committed: say why, from the record as it is now.
	var f *found
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		var err error
		f, err = readFound(l.pool.QueryRow(ctx, l.q.explain, l.clock(), [][]byte{[]byte(c.Key)}))
		return err
	})
	if err != nil {
		return fmt.Errorf("complete %q: not in progress under %q, rolled back (the record cannot be read: %v): %w", c.Key, c.Owner, err, ledger.ErrState)
	}
	return l.explainOne("complete", c.Key, c.Owner, f, func(f *found) error {
		return fmt.Errorf("complete %q: record is %s, rolled back: %w", c.Key, ledger.State(f.state), ledger.ErrState)
	})
}

// Rollback rolls the transaction back and ends the OpTx. It does nothing
// once the OpTx has ended.
func (t *OpTx) Rollback(ctx context.Context) {
	if t.done {
		return
	}
	t.done = true
	t.tx.Rollback(context.WithoutCancel(ctx))
	t.conn.Release()
}
