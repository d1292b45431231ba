package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsonce/sqsonce/ledger"
)

// Get returns the live record of key, or ledger.ErrNotFound. An expired
// record that has not been swept yet is not live.
func (l *Ledger) Get(ctx context.Context, key string) (ledger.Record, error) {
	if err := ledger.ValidateKey(key); err != nil {
		return ledger.Record{}, fmt.Errorf("get: %w", err)
	}
	var rec ledger.Record
	var missing bool
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		var hist, payload []byte
		rw, _, err := scanRecord(l.pool.QueryRow(ctx, l.q.get, l.clock(), []byte(key)), &hist, &payload)
		missing = errors.Is(err, pgx.ErrNoRows)
		if missing {
			return nil
		}
		rec = rw.rec
		rec.History = decodeHistory(hist)
		if payload != nil {
			rec.Payload = ledger.DecodePayload(payload)
		}
		ledger.DeriveHistory(&rec)
		return err
	})
	switch {
	case err != nil:
		return ledger.Record{}, fmt.Errorf("get %q: %w", key, err)
	case missing:
		return ledger.Record{}, fmt.Errorf("get %q: %w", key, ledger.ErrNotFound)
	}
	return rec, nil
}

// forEachPage bounds how many records one query of ForEach looks at (and so
// how many it copies out).
const forEachPage = 256

// ForEach calls fn for each live record that matches f, in key order (the
// bytewise order of the keys). It stops at the first error fn returns and
// returns it, or when ctx ends.
//
// The walk is not one snapshot: it reads the records a page at a time, each
// page one query that has ended before fn is called (keyset pagination by
// key: the next page starts after the last key looked at), so however
// slowly fn runs it holds no transaction, cursor or lock. Each live record
// that exists for the whole walk is seen exactly once; a record written or
// removed during the walk may or may not be seen, and never twice.
// Liveness is judged at the time the walk starts, on the server's clock.
func (l *Ledger) ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	var start time.Time
	if l.cfg.now != nil {
		start = l.cfg.now()
	} else {
		err := l.do(ctx, func(ctx context.Context, _ bool) error {
			return l.pool.QueryRow(ctx, `SELECT now()`).Scan(&start)
		})
		if err != nil {
			return fmt.Errorf("for each: %w", err)
		}
	}
	lo := []byte(f.Prefix)
	hi := prefixEnd(lo)
	after := []byte{} // before every key: keys are not empty
	page := make([]ledger.Record, 0, forEachPage)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var last []byte
		var scanned int64
		err := l.do(ctx, func(ctx context.Context, _ bool) error {
			page, last, scanned = page[:0], nil, 0
			rows, err := l.pool.Query(ctx, l.q.page, start, after, lo, hi, forEachPage, int16(f.State))
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				rw, ok, err := scanRecord(rows, &last, &scanned)
				if err != nil {
					return err
				}
				if ok && f.Match(rw.rec) {
					page = append(page, rw.rec)
				}
			}
			return rows.Err()
		})
		if err != nil {
			return fmt.Errorf("for each: %w", err)
		}
		for _, r := range page {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if scanned < forEachPage {
			return nil
		}
		after = last
	}
}

// prefixEnd returns the smallest byte string after every string that starts
// with p, or nil when there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Stats returns counts by state and the oldest in-progress claim, in one
// snapshot. Expired records not yet swept are still counted. FileSize and
// Commits are zero: the server keeps the data, and commits are its own.
//
// Cost: the records that are not complete are counted in their partial
// index, which holds only them (few: those in flight and failed); the
// complete ones are every record less those, and counting every record
// reads the whole table or its expiry index, as the planner prefers: about
// 0.1 s per million records on a small machine (BenchmarkStats). Callers
// that poll it (a metrics scrape) on a large table should poll it slowly.
func (l *Ledger) Stats(ctx context.Context) (ledger.Stats, error) {
	var st ledger.Stats
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		var all, inProgress, failed, permanent int64
		var oldest pgtype.Timestamptz
		if err := l.pool.QueryRow(ctx, l.q.stats).Scan(&all, &inProgress, &failed, &permanent, &oldest); err != nil {
			return err
		}
		st = ledger.Stats{
			InProgress:        int(inProgress),
			Complete:          int(all - inProgress - failed - permanent),
			Failed:            int(failed),
			FailedPermanently: int(permanent),
			OldestInProgress:  timeOf(oldest),
		}
		return nil
	})
	if err != nil {
		return ledger.Stats{}, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// Sweep deletes the records that expired before now (the server's clock),
// at most Options.SweepChunk per statement, oldest first, and returns how
// many this call deleted; on error, those deleted so far stay deleted. It is
// safe when every host sweeps at once: a chunk skips the records another
// transaction holds (FOR UPDATE SKIP LOCKED), so the hosts share the work,
// no record is counted by two of them, and a claim taking an expired record
// over is neither waited for nor undone. Sweep ends when a chunk finds fewer
// records than it may delete: the rest, if any, are held by others.
//
// A chunk whose answer was lost with its connection is tried again, and the
// records it deleted are not counted. Sweep then removes the flow state
// that has no more use (see sweepFlow), which it does not count.
func (l *Ledger) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := l.do(ctx, func(ctx context.Context, _ bool) error {
			tag, err := l.pool.Exec(ctx, l.q.sweep, l.clock(), l.cfg.chunk)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total += int(n)
		if n < int64(l.cfg.chunk) {
			if err := l.sweepFlow(ctx); err != nil {
				return total, fmt.Errorf("sweep flow state: %w", err)
			}
			return total, nil
		}
	}
}
