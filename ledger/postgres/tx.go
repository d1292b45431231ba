package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/ledger"
)

// Begin starts a transaction on a connection of the ledger's pool, on the
// database that holds the ledger's table: the transaction that a handler's
// writes and its operation's completion (CompleteTx) commit in together.
// The caller commits or rolls it back; either gives the connection back.
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

// CompleteTx records c complete inside tx, a transaction on the ledger's
// database (see Begin), without committing it: the completion becomes
// durable when tx commits, together with the rest of tx's writes, or not at
// all. The record must be in progress under c.Owner; the record is locked
// until tx ends, so that no claim can take the operation over meanwhile.
// It fails with ledger.ErrNotOwner when another claim took the operation
// over, ledger.ErrState when the record is not in progress, and
// ledger.ErrNotFound when there is no live record: the caller must then
// roll tx back, since its writes belong to an attempt that no longer owns
// the operation. A record already complete under c.Owner is a success, as
// for Complete. An error of the connection leaves tx unusable: roll it
// back.
func (l *Ledger) CompleteTx(ctx context.Context, tx pgx.Tx, c ledger.Completion) error {
	it := item{key: c.Key, owner: c.Owner}
	if !it.valid("complete") {
		return it.err
	}
	result := c.Result
	if len(result) > ledger.MaxResultLen {
		result = result[:ledger.MaxResultLen]
	}
	keys := [][]byte{[]byte(c.Key)}
	b := &pgx.Batch{}
	b.Queue(l.q.complete, l.clock(), micros(l.cfg.retention), keys, [][]byte{[]byte(c.Owner)}, [][]byte{nonEmpty(result)})
	b.Queue(l.q.explain, l.clock(), keys)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	ct, err := br.Exec()
	if err != nil {
		return fmt.Errorf("complete %q: %w", c.Key, classify(ctx, err))
	}
	f, err := readFound(br.QueryRow())
	if err != nil {
		return fmt.Errorf("complete %q: %w", c.Key, classify(ctx, err))
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("complete %q: %w", c.Key, classify(ctx, err))
	}
	if ct.RowsAffected() == 1 {
		return nil
	}
	return l.explainOne("complete", c.Key, c.Owner, f, func(f *found) error {
		if f.state == stateComplete {
			return nil // already done by this owner
		}
		return fmt.Errorf("complete %q: record is %s: %w", c.Key, ledger.State(f.state), ledger.ErrState)
	})
}
