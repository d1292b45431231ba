package dynamodb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// Bounds of a List and of an Overview: Scan requests of at most scanPage
// items, at most listRequests of them per List, overviewRequests per
// Overview.
const (
	scanPage         = 256
	listRequests     = 4
	overviewRequests = 8
)

// List returns a page of at most limit live records that match f, in no
// particular order (a Scan's), starting after the cursor after ("" from the
// start), which only a Page's Next gives. limit 0 means
// ledger.DefaultListLimit; more than ledger.MaxListLimit is refused.
//
// A List is at most four strongly consistent Scan requests of 256 items,
// wherever the matches are: a page view never reads the whole table, and a
// filter that matches few records may give a page with fewer records than
// asked, or none, and a Next. DynamoDB applies the key prefix, the state
// and the time window; the reason is applied here.
func (l *Ledger) List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return ledger.Page{}, err
	}
	if err := f.Validate(); err != nil {
		return ledger.Page{}, err
	}
	if after != "" && !strings.HasPrefix(after, opPrefix) && after != schemaKey {
		return ledger.Page{}, fmt.Errorf("list: cursor %q is not one that List gave: %w", after, ledger.ErrInvalidArgument)
	}
	now := l.now()
	e := newExpr()
	filter := "begins_with(" + e.n(attrPK) + ", " + e.v("prefix", strAV(opPrefix+f.Prefix)) + ") AND " +
		e.n(attrExpires) + " > " + e.v("now", timeAV(now))
	if f.State != 0 {
		filter += " AND " + e.n(attrState) + " = " + e.v("state", strAV(f.State.String()))
	}
	if !f.Since.IsZero() {
		filter += " AND " + e.n(attrUpdated) + " >= " + e.v("since", timeAV(f.Since))
	}
	if !f.Until.IsZero() {
		filter += " AND " + e.n(attrUpdated) + " < " + e.v("until", timeAV(f.Until))
	}
	var start map[string]types.AttributeValue
	if after != "" {
		start = map[string]types.AttributeValue{attrPK: strAV(after)}
	}
	var page ledger.Page
	for range listRequests {
		if err := ctx.Err(); err != nil {
			return ledger.Page{}, err
		}
		out, err := l.scanPage(ctx, &ddb.ScanInput{
			TableName:                 l.table,
			ConsistentRead:            aws.Bool(true),
			Limit:                     aws.Int32(scanPage),
			ExclusiveStartKey:         start,
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		if err != nil {
			return ledger.Page{}, fmt.Errorf("list: %w", err)
		}
		page.Scanned += int(out.ScannedCount)
		for _, item := range out.Items {
			rec, err := recordOf(item)
			if err != nil {
				page.Unreadable++
				continue
			}
			if !rec.Expires.After(now) || !f.Match(rec) {
				continue
			}
			page.Records = append(page.Records, rec)
			if len(page.Records) == limit {
				// The next page resumes after this item, in the scan's
				// order: a Scan may start after any key.
				page.Next = pkOf(rec.Key)
				return page, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return page, nil
		}
		start = out.LastEvaluatedKey
	}
	if pk, ok := start[attrPK].(*types.AttributeValueMemberS); ok {
		page.Next = pk.Value
	}
	return page, nil
}

// Overview reads a sample of the table: at most eight eventually
// consistent Scan requests of 256 items, from the start of the scan's
// order, which follows the hash of the keys and so mixes the records
// without regard to their keys or times. When the sample is the whole
// table the overview is exact; otherwise every part of it is partial, and
// the counts are the sample's shares of the table's item count as
// DynamoDB reports it (DescribeTable's ItemCount, which DynamoDB updates
// about every six hours), with Overview.Estimate saying so. No Overview
// reads the whole table.
func (l *Ledger) Overview(ctx context.Context, since time.Time) (ledger.Overview, error) {
	now := l.now()
	b := ledger.NewOverviewBuilder(now, since)
	e := newExpr()
	in := &ddb.ScanInput{
		TableName:                 l.table,
		Limit:                     aws.Int32(scanPage),
		FilterExpression:          aws.String("begins_with(" + e.n(attrPK) + ", " + e.v("op", strAV(opPrefix)) + ")"),
		ExpressionAttributeNames:  e.nameMap(),
		ExpressionAttributeValues: e.vals(),
	}
	var st ledger.Stats
	scanned, whole := 0, false
	for range overviewRequests {
		if err := ctx.Err(); err != nil {
			return ledger.Overview{}, err
		}
		out, err := l.scanPage(ctx, in)
		if err != nil {
			return ledger.Overview{}, fmt.Errorf("overview: %w", err)
		}
		scanned += int(out.ScannedCount)
		for _, item := range out.Items {
			rec, err := recordOf(item)
			if err != nil || !rec.Expires.After(now) {
				continue
			}
			b.Add(rec)
			switch {
			case rec.State == ledger.StateInProgress:
				st.InProgress++
				if st.OldestInProgress.IsZero() || rec.Claimed.Before(st.OldestInProgress) {
					st.OldestInProgress = rec.Claimed
				}
			case rec.State == ledger.StateComplete:
				st.Complete++
			case rec.Permanent:
				st.FailedPermanently++
			default:
				st.Failed++
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			whole = true
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	l.flushMinutes(ctx)
	activity, err := l.activity(ctx, since)
	if err != nil {
		return ledger.Overview{}, fmt.Errorf("overview: %w", err)
	}
	o := b.Overview(st, activity)
	o.Scanned = scanned
	if whole {
		return o, nil
	}
	o.Partial = true
	items, err := l.itemCount(ctx)
	if err != nil {
		return ledger.Overview{}, fmt.Errorf("overview: %w", err)
	}
	scale := float64(max(items, int64(scanned))) / float64(max(scanned, 1))
	est := func(n int) int { return int(float64(n)*scale + 0.5) }
	o.Stats.InProgress = est(st.InProgress)
	o.Stats.Complete = est(st.Complete)
	o.Stats.Failed = est(st.Failed)
	o.Stats.FailedPermanently = est(st.FailedPermanently)
	o.FailedDeadLettered = est(o.FailedDeadLettered)
	o.DeadLettered = est(o.DeadLettered)
	o.Estimate = fmt.Sprintf("estimated from a sample of %d items and the table's item count of about %d, which DynamoDB updates about every six hours; the groups of failures and dead letters count the sample", scanned, items)
	return o, nil
}

// itemCount is DescribeTable's ItemCount of the table.
func (l *Ledger) itemCount(ctx context.Context) (int64, error) {
	if err := l.enter(); err != nil {
		return 0, err
	}
	defer l.calls.Done()
	var out *ddb.DescribeTableOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: l.table})
		return err
	})
	if err != nil {
		return 0, err
	}
	if out.Table == nil {
		return 0, nil
	}
	return aws.ToInt64(out.Table.ItemCount), nil
}
