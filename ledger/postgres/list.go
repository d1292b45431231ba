package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsonce/sqsonce/ledger"
)

// listScan bounds how many records one List looks at; listChunk how many
// one of its queries looks at.
const (
	listScan  = 50_000
	listChunk = 4096
)

// List returns a page of at most limit live records that match f, in key
// order (the bytewise order of the keys), starting after the key after (""
// from the start). Next continues the listing. limit 0 means
// ledger.DefaultListLimit; more than ledger.MaxListLimit is refused.
//
// Each query looks at a bounded run of keys (keyset pagination on the
// primary key, or on the index of the records that are not complete when
// the filter wants records in progress, failed, or with a reason) and List
// looks at no more than about 50,000 records per call, so that a sparse
// filter costs a bounded time per page. The state and the time window are
// applied by the server, the reason here (the server sends only records
// that have an error text). Liveness is judged on the server's clock.
func (l *Ledger) List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return ledger.Page{}, err
	}
	if err := f.Validate(); err != nil {
		return ledger.Page{}, err
	}
	lo := []byte(f.Prefix)
	hi := prefixEnd(lo)
	from := []byte(after) // keys are not empty: "" is before every key
	var since, until any
	if !f.Since.IsZero() {
		since = f.Since
	}
	if !f.Until.IsZero() {
		until = f.Until
	}
	// A record with an error text is not complete (a completion clears
	// it), and complete records are most of a table in use: a filter that
	// selects records in progress or failed, or by their reason, walks
	// only the records that are not complete, through their index in key
	// order, so that it finds the few it wants without looking at every
	// complete one in between.
	query := l.q.list
	if f.State == ledger.StateInProgress || f.State == ledger.StateFailed || f.Reason != "" {
		query = l.q.listOpen
	}
	var page ledger.Page
	// The first chunk is about the page; the next ones grow, for filters
	// that match few records.
	chunk := max(2*limit, 64)
	for {
		if err := ctx.Err(); err != nil {
			return ledger.Page{}, err
		}
		var (
			found   []ledger.Record
			last    []byte
			scanned int64
		)
		err := l.do(ctx, func(ctx context.Context, _ bool) error {
			found, last, scanned = found[:0], nil, 0
			rows, err := l.pool.Query(ctx, query, l.clock(), from, lo, hi, chunk, int16(f.State), since, until, f.Reason != "")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				rw, ok, err := scanRecord(rows, &last, &scanned)
				if err != nil {
					return err
				}
				if ok {
					found = append(found, rw.rec)
				}
			}
			return rows.Err()
		})
		if err != nil {
			return ledger.Page{}, fmt.Errorf("list: %w", err)
		}
		page.Scanned += int(scanned)
		for _, r := range found {
			if !f.Match(r) {
				continue
			}
			page.Records = append(page.Records, r)
			if len(page.Records) == limit {
				// The rest of the chunk is looked at again by the next
				// page.
				page.Next = r.Key
				return page, nil
			}
		}
		if scanned < int64(chunk) {
			return page, nil // the range is done
		}
		from = last
		if page.Scanned >= listScan {
			page.Next = string(last)
			return page, nil
		}
		chunk = min(2*chunk, listChunk)
	}
}

// Overview reads the counts (as Stats does), the claims in progress
// (oldest first) and their owners, and the failures by reason through the
// partial index of the records that are not complete, and the activity
// since since from the records written since then (a walk of the table).
// Each part is one query; they are not one snapshot.
func (l *Ledger) Overview(ctx context.Context, since time.Time) (ledger.Overview, error) {
	st, err := l.Stats(ctx)
	if err != nil {
		return ledger.Overview{}, fmt.Errorf("overview: %w", err)
	}
	o := ledger.Overview{Stats: st}
	err = l.do(ctx, func(ctx context.Context, _ bool) error {
		o.OldestClaims, o.Owners, o.Failures, o.Activity = nil, nil, nil, nil
		if err := l.pool.QueryRow(ctx, `SELECT `+nowExpr, l.clock()).Scan(&o.Now); err != nil {
			return err
		}
		rows, err := l.pool.Query(ctx, l.q.overviewInProgress, l.clock(), ledger.OverviewInProgress)
		if err != nil {
			return err
		}
		for rows.Next() {
			rw, _, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return err
			}
			o.OldestClaims = append(o.OldestClaims, rw.rec)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = l.pool.Query(ctx, l.q.overviewOwners, l.clock(), ledger.OverviewOwners)
		if err != nil {
			return err
		}
		o.Owners, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.OwnerClaims, error) {
			var owner []byte
			var claims, lapsed int64
			err := r.Scan(&owner, &claims, &lapsed)
			return ledger.OwnerClaims{Owner: string(owner), Claims: int(claims), Lapsed: int(lapsed)}, err
		})
		if err != nil {
			return err
		}
		rows, err = l.pool.Query(ctx, l.q.overviewFailures, l.clock(), ledger.OverviewFailureGroups)
		if err != nil {
			return err
		}
		o.Failures, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.FailureGroup, error) {
			var reason, example []byte
			var count, permanent int64
			var last pgtype.Timestamptz
			err := r.Scan(&reason, &count, &permanent, &example, &last)
			return ledger.FailureGroup{Reason: string(reason), Count: int(count), Permanent: int(permanent),
				Example: string(example), Last: timeOf(last)}, err
		})
		if err != nil {
			return err
		}
		rows, err = l.pool.Query(ctx, l.q.overviewActivity, l.clock(), since)
		if err != nil {
			return err
		}
		o.Activity, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Minute, error) {
			var m, completed, failed int64
			err := r.Scan(&m, &completed, &failed)
			return ledger.Minute{Start: time.Unix(m*60, 0), Completed: int(completed), Failed: int(failed)}, err
		})
		return err
	})
	if err != nil {
		return ledger.Overview{}, fmt.Errorf("overview: %w", err)
	}
	ledger.SortFailures(o.Failures)
	return o, nil
}
