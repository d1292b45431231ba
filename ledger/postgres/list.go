package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	if f.Newest {
		return l.listNewest(ctx, f, after, limit)
	}
	query := l.q.list
	if open(f) {
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
			rows, err := l.pool.Query(ctx, query, l.clock(), from, lo, hi, chunk, int16(f.State), since, until, wantsReason(f))
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

// open reports whether f selects only records that are not complete: in
// progress, failed, with a reason, permanent or marked dead-lettered.
func open(f ledger.Filter) bool {
	return f.State == ledger.StateInProgress || f.State == ledger.StateFailed || wantsReason(f) ||
		f.Permanent == ledger.FlagSet || f.DeadLettered == ledger.FlagSet
}

// wantsReason reports whether f selects by a reason, which only records
// with an error text have.
func wantsReason(f ledger.Filter) bool { return f.Reason != "" || f.ReasonGroup != "" }

// listNewest is List with f.Newest: the records in the order of their
// expiry, the latest first, which is the order of their last writes (the
// expiry is the last write plus the retention of the host that wrote it),
// through the expiry index. A cursor is the last expiry looked at in Unix
// microseconds, a slash and the last key.
func (l *Ledger) listNewest(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error) {
	lo := []byte(f.Prefix)
	hi := prefixEnd(lo)
	curExp := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	var curKey []byte
	if after != "" {
		us, key, ok := strings.Cut(after, "/")
		n, err := strconv.ParseInt(us, 10, 64)
		if !ok || err != nil {
			return ledger.Page{}, fmt.Errorf("list: cursor %q is not one that List gave: %w", after, ledger.ErrInvalidArgument)
		}
		curExp, curKey = pgtype.Timestamptz{Time: time.UnixMicro(n), Valid: true}, []byte(key)
	}
	var since, until any
	floor := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	if !f.Since.IsZero() {
		since = f.Since
		floor = pgtype.Timestamptz{Time: f.Since.Add(l.cfg.retention), Valid: true}
	}
	if !f.Until.IsZero() {
		until = f.Until
		if after == "" {
			curExp = pgtype.Timestamptz{Time: f.Until.Add(l.cfg.retention), Valid: true}
		}
	}
	query := l.q.listNewest
	if open(f) {
		query = l.q.listNewestOpen
	}
	page := ledger.Page{Newest: true}
	chunk := max(2*limit, 64)
	for {
		if err := ctx.Err(); err != nil {
			return ledger.Page{}, err
		}
		var (
			found   []ledger.Record
			lastExp pgtype.Timestamptz
			lastKey []byte
			scanned int64
		)
		err := l.do(ctx, func(ctx context.Context, _ bool) error {
			found, scanned = found[:0], 0
			rows, err := l.pool.Query(ctx, query, l.clock(), curExp, curKey, wantsReason(f), chunk, int16(f.State), since, until, lo, hi, floor)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				rw, ok, err := scanRecord(rows, &lastExp, &lastKey, &scanned)
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
				page.Next = fmt.Sprintf("%d/%s", r.Expires.UnixMicro(), r.Key)
				return page, nil
			}
		}
		if scanned < int64(chunk) {
			return page, nil // the walk is done
		}
		curExp, curKey = lastExp, lastKey
		if page.Scanned >= listScan {
			page.Next = fmt.Sprintf("%d/%s", lastExp.Time.UnixMicro(), lastKey)
			return page, nil
		}
		chunk = min(2*chunk, listChunk)
	}
}

// overviewTexts bounds how many distinct failure texts and owners an
// Overview reads; beyond them it is partial.
const overviewTexts = 10_000

// Overview reads the counts (as Stats does), the claims in progress
// (oldest first) and their processes, and the failures through the
// partial index of the records that are not complete, the dead letters
// through the partial index of the marked records, and the activity from
// the _minutes table (after adding this process's counts to it). Each part
// is one query; they are not one snapshot.
func (l *Ledger) Overview(ctx context.Context, since time.Time) (ledger.Overview, error) {
	st, err := l.Stats(ctx)
	if err != nil {
		return ledger.Overview{}, fmt.Errorf("overview: %w", err)
	}
	l.flushMinutes(ctx)
	var o ledger.Overview
	err = l.do(ctx, func(ctx context.Context, _ bool) error {
		var now time.Time
		if err := l.pool.QueryRow(ctx, `SELECT `+nowExpr, l.clock()).Scan(&now); err != nil {
			return err
		}
		b := ledger.NewOverviewBuilder(now, since)
		rows, err := l.pool.Query(ctx, l.q.overviewInProgress, l.clock(), ledger.OverviewInProgress)
		if err != nil {
			return err
		}
		var claims []ledger.Record
		for rows.Next() {
			rw, _, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return err
			}
			claims = append(claims, rw.rec)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = l.pool.Query(ctx, l.q.overviewOwners, l.clock(), overviewTexts)
		if err != nil {
			return err
		}
		owners := map[string]*ledger.OwnerClaims{}
		partial := false
		n := 0
		for rows.Next() {
			var owner []byte
			var count, lapsed int64
			if err := rows.Scan(&owner, &count, &lapsed); err != nil {
				rows.Close()
				return err
			}
			n++
			p := ledger.ProcessOf(string(owner))
			if owners[p] == nil {
				owners[p] = &ledger.OwnerClaims{Owner: p}
			}
			owners[p].Claims += int(count)
			owners[p].Lapsed += int(lapsed)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		partial = partial || n == overviewTexts
		rows, err = l.pool.Query(ctx, l.q.overviewFailures, l.clock(), overviewTexts)
		if err != nil {
			return err
		}
		groups := map[string]*ledger.FailureGroup{}
		n = 0
		for rows.Next() {
			var reason, example []byte
			var count, permanent, dead int64
			var last pgtype.Timestamptz
			if err := rows.Scan(&reason, &count, &permanent, &dead, &example, &last); err != nil {
				rows.Close()
				return err
			}
			n++
			name := ledger.ReasonGroup(string(reason))
			g := groups[name]
			if g == nil {
				g = &ledger.FailureGroup{Group: name}
				groups[name] = g
			}
			g.Count += int(count)
			g.Permanent += int(permanent)
			g.DeadLettered += int(dead)
			if t := timeOf(last); !t.Before(g.Last) {
				g.Last, g.Example, g.Reason = t, string(example), string(reason)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		partial = partial || n == overviewTexts
		rows, err = l.pool.Query(ctx, l.flow.q.deadGroups, l.clock())
		if err != nil {
			return err
		}
		var dead []ledger.DeadLetterGroup
		for rows.Next() {
			var group, example, reason []byte
			var count int64
			var last pgtype.Timestamptz
			if err := rows.Scan(&group, &count, &example, &reason, &last); err != nil {
				rows.Close()
				return err
			}
			dead = append(dead, ledger.DeadLetterGroup{Group: string(group), Count: int(count), Example: string(example),
				Reason: string(reason), Last: timeOf(last)})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = l.pool.Query(ctx, l.flow.q.minutesRead, since.Unix()/60)
		if err != nil {
			return err
		}
		activity, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Minute, error) {
			var m, completed, failed int64
			err := r.Scan(&m, &completed, &failed)
			return ledger.Minute{Start: time.Unix(m*60, 0), Completed: int(completed), Failed: int(failed)}, err
		})
		if err != nil {
			return err
		}
		o = b.Overview(st, activity)
		o.OldestClaims = claims
		o.Owners = o.Owners[:0]
		for _, v := range owners {
			o.Owners = append(o.Owners, *v)
		}
		ledger.SortOwners(o.Owners)
		o.Owners = o.Owners[:min(len(o.Owners), ledger.OverviewOwners)]
		var failures []ledger.FailureGroup
		for _, g := range groups {
			failures = append(failures, *g)
			o.FailedDeadLettered += g.DeadLettered
		}
		o.Failures, o.FailureGroups = ledger.TopFailures(failures)
		for _, g := range dead {
			o.DeadLettered += g.Count
		}
		o.DeadLetters, o.DeadLetterGroups = ledger.TopDeadLetters(dead)
		if partial {
			o.Partial = true
			o.Estimate = fmt.Sprintf("more than %d owners or failure texts: the groups cover the first %d", overviewTexts, overviewTexts)
		}
		return nil
	})
	if err != nil {
		return ledger.Overview{}, fmt.Errorf("overview: %w", err)
	}
	return o, nil
}
