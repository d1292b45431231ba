package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/sqsonce/sqsonce/ledger"
)

// Get returns the live record of key, or ErrNotFound, with a strongly
// consistent read. An expired item that TTL deletion or Sweep has not
// removed yet is not live.
func (l *Ledger) Get(ctx context.Context, key string) (ledger.Record, error) {
	if err := ledger.ValidateKey(key); err != nil {
		return ledger.Record{}, fmt.Errorf("get: %w", err)
	}
	if err := l.enter(); err != nil {
		return ledger.Record{}, fmt.Errorf("get %q: %w", key, err)
	}
	defer l.calls.Done()
	rec, err := l.live(ctx, key, l.now())
	if err != nil {
		return ledger.Record{}, fmt.Errorf("get %q: %w", key, err)
	}
	if rec == nil {
		return ledger.Record{}, fmt.Errorf("get %q: %w", key, ledger.ErrNotFound)
	}
	ledger.DeriveHistory(rec)
	return *rec, nil
}

// forEachPage bounds how many items one Scan request of ForEach reads.
const forEachPage = 256

// ForEach calls fn for each live record that matches f, in no particular
// order: a Scan returns items in the order of their partition keys' hashes,
// and putting them in key order would need them all in hand (or an index
// that every write pays for). It stops at the first error fn returns and
// returns it, or when ctx ends.
//
// The walk is one paginated Scan with strongly consistent reads, a page of
// at most 256 items per request; between pages it holds nothing but the
// position, however slowly fn runs. Each live record that exists for the
// whole walk is seen exactly once; a record written or removed during the
// walk may or may not be seen. Liveness is judged at the time the walk
// starts. The filter is applied by DynamoDB, but a Scan reads (and is
// billed for) every item of the table, whatever the filter: about one read
// capacity unit per 4 KiB of table per walk.
//
// An item that cannot be read does not stop the walk: the others are all
// passed to fn, and ForEach then returns an error wrapping ErrCorrupt that
// counts the unreadable items and names the first.
func (l *Ledger) ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	now := l.now()
	e := newExpr()
	nowV := e.v("now", timeAV(now))
	live := e.n(attrExpires) + " > " + nowV
	if f.State != 0 {
		live += " AND " + e.n(attrState) + " = " + e.v("state", strAV(f.State.String()))
	}
	// Items that may not decode come back too, so that they are counted.
	filter := "begins_with(" + e.n(attrPK) + ", " + e.v("prefix", strAV(opPrefix+f.Prefix)) + ") AND ((" + live + ")" +
		" OR attribute_not_exists(" + e.n(attrExpires) + ") OR attribute_not_exists(" + e.n(attrState) + ")" +
		" OR attribute_not_exists(" + e.n(attrVersion) + ") OR " + e.n(attrVersion) + " <> " + e.v("v", intAV(itemVersion)) + ")"
	var start map[string]types.AttributeValue
	unreadable, firstUnreadable := 0, ""
	var firstErr error
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := l.scanPage(ctx, &ddb.ScanInput{
			TableName:                 l.table,
			ConsistentRead:            aws.Bool(true),
			Limit:                     aws.Int32(forEachPage),
			ExclusiveStartKey:         start,
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		if err != nil {
			return fmt.Errorf("for each: %w", err)
		}
		for _, item := range out.Items {
			rec, err := recordOf(item)
			if err != nil {
				var u *unreadableError
				if errors.As(err, &u) && unreadable == 0 {
					firstUnreadable, firstErr = u.key, err
				}
				unreadable++
				continue
			}
			if !rec.Expires.After(now) || !f.Match(rec) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	if unreadable > 0 {
		return fmt.Errorf("%d record(s) could not be read and were left out, the first %q (%v); `forget` removes one: %w",
			unreadable, firstUnreadable, firstErr, ledger.ErrCorrupt)
	}
	return nil
}

// scanPage runs one Scan request.
func (l *Ledger) scanPage(ctx context.Context, in *ddb.ScanInput) (*ddb.ScanOutput, error) {
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.calls.Done()
	var out *ddb.ScanOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.Scan(ctx, in)
		return err
	})
	return out, err
}

// scanPages scans the whole table in l.concurrency parallel segments, a
// page of at most limit items per request, and calls page with each page's
// items from the segment's goroutine. It stops at the first error.
func (l *Ledger) scanPages(ctx context.Context, limit int32, in ddb.ScanInput, page func(ctx context.Context, items []map[string]types.AttributeValue) error) error {
	g, ctx := errgroup.WithContext(ctx)
	total := int32(l.concurrency)
	for seg := range total {
		g.Go(func() error {
			in := in
			in.TableName = l.table
			if limit > 0 {
				in.Limit = aws.Int32(limit)
			}
			in.Segment = aws.Int32(seg)
			in.TotalSegments = aws.Int32(total)
			for {
				out, err := l.scanPage(ctx, &in)
				if err != nil {
					return err
				}
				if err := page(ctx, out.Items); err != nil {
					return err
				}
				if len(out.LastEvaluatedKey) == 0 {
					return nil
				}
				in.ExclusiveStartKey = out.LastEvaluatedKey
			}
		})
	}
	return g.Wait()
}

// Stats returns the counts of live records by state and the oldest
// in-progress claim. FileSize and Commits are zero: a table has neither.
//
// DynamoDB keeps no counts that are exact at a moment, so Stats scans the
// whole table (in Options.Concurrency parallel segments, eventually
// consistent, only four small attributes of each item coming back): it
// costs about half a read capacity unit per 4 KiB of table, and its time
// grows with the table (a million records of ~300 bytes are ~40,000 read
// units and several seconds). Do not call it on every metrics scrape of a
// large table; cache it for minutes. Expired items not yet deleted are not
// counted.
func (l *Ledger) Stats(ctx context.Context) (ledger.Stats, error) {
	now := l.now()
	e := newExpr()
	filter := "begins_with(" + e.n(attrPK) + ", " + e.v("op", strAV(opPrefix)) + ") AND " + e.n(attrExpires) + " > " + e.v("now", timeAV(now))
	proj := e.n(attrState) + ", " + e.n(attrPermanent) + ", " + e.n(attrClaimed)
	var mu sync.Mutex
	var st ledger.Stats
	err := l.scanPages(ctx, 0, ddb.ScanInput{
		FilterExpression:          aws.String(filter),
		ProjectionExpression:      aws.String(proj),
		ExpressionAttributeNames:  e.nameMap(),
		ExpressionAttributeValues: e.vals(),
	}, func(_ context.Context, items []map[string]types.AttributeValue) error {
		mu.Lock()
		defer mu.Unlock()
		for _, item := range items {
			d := decoder{item: item}
			state := d.str(attrState, true, 32)
			permanent := d.bool(attrPermanent)
			claimed := d.time(attrClaimed, true)
			if d.err != "" {
				continue // unreadable: ForEach reports it
			}
			switch state {
			case stateInProgress:
				st.InProgress++
				if st.OldestInProgress.IsZero() || claimed.Before(st.OldestInProgress) {
					st.OldestInProgress = claimed
				}
			case stateComplete:
				st.Complete++
			case stateFailed:
				if permanent {
					st.FailedPermanently++
				} else {
					st.Failed++
				}
			}
		}
		return nil
	})
	if err != nil {
		return ledger.Stats{}, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// Sweep removes every item that expired before now and returns how many it
// removed; on error, those removed so far stay removed.
//
// It scans the whole table in Options.Concurrency parallel segments for
// items whose exact expiry has passed and deletes each with a conditional
// delete on that expiry, so that an item claimed anew meanwhile stays, and
// of several hosts sweeping at once only one removes (and counts) each
// item. The scan reads every item of the table: about half a read
// capacity unit per 4 KiB of table per sweep, plus a write unit per item
// removed.
//
// With TTL deletion on (Init turns it on where the service has it),
// DynamoDB deletes expired items itself, at no cost, within days of their
// expiry; until then they are treated as absent. Sweep is then not needed:
// run it rarely (daily at most) or not at all. Without TTL (dynalite, or a
// table where it could not be enabled) it is what keeps the table bounded:
// run it about once per tenth of the retention.
//
// The same scan finds the flow items that expired (idle rate buckets, free
// slots, tombstones of flow documents, lapsed registrations) and deletes
// them the same way; they are not counted.
func (l *Ledger) Sweep(ctx context.Context) (int, error) {
	now := l.now()
	e := newExpr()
	// Flow items (flowPrefix) expire too, and go in the same scan; they
	// are not counted.
	filter := "(begins_with(" + e.n(attrPK) + ", " + e.v("op", strAV(opPrefix)) + ") OR begins_with(" + e.n(attrPK) + ", " +
		e.v("flow", strAV(flowPrefix)) + ")) AND " + e.n(attrExpires) + " <= " + e.v("now", timeAV(now))
	var mu sync.Mutex
	removed := 0
	err := l.scanPages(ctx, sweepPage, ddb.ScanInput{
		FilterExpression:          aws.String(filter),
		ProjectionExpression:      aws.String(e.n(attrPK)),
		ExpressionAttributeNames:  e.nameMap(),
		ExpressionAttributeValues: e.vals(),
	}, func(ctx context.Context, items []map[string]types.AttributeValue) error {
		for _, item := range items {
			ok, err := l.sweepOne(ctx, item[attrPK], now)
			if err != nil {
				return err
			}
			if pk, _ := item[attrPK].(*types.AttributeValueMemberS); ok && pk != nil && strings.HasPrefix(pk.Value, opPrefix) {
				mu.Lock()
				removed++
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("sweep: %w", err)
	}
	return removed, nil
}

// sweepPage bounds how many items one Scan request of Sweep reads.
const sweepPage = 1000

// sweepOne deletes the item under pk if it expired before now, and reports
// whether this call removed it.
func (l *Ledger) sweepOne(ctx context.Context, pk types.AttributeValue, now time.Time) (bool, error) {
	if err := l.enter(); err != nil {
		return false, err
	}
	defer l.calls.Done()
	e := newExpr()
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.DeleteItem(ctx, &ddb.DeleteItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: pk},
			ConditionExpression:       aws.String(e.n(attrExpires) + " <= " + e.v("now", timeAV(now))),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
	if isConditionFailed(err) {
		return false, nil // claimed anew, or removed by another sweep
	}
	return err == nil, err
}
