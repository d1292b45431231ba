package dynamodb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// validate checks a claim request as every ledger does, and its lease
// against the retention.
func (l *Ledger) validate(r *ledger.ClaimRequest) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return l.checkLease("claim", r.Key, r.Lease)
}

// Claim takes the operation named by req.Key if it is free, with one
// conditional write (see the package documentation). See ledger.Outcome for
// the answers. When Claim returns Claimed, the claim is durable. A stored
// item that cannot be read is its error, wrapping ledger.ErrCorrupt.
func (l *Ledger) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, error) {
	cs, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{req})
	if err != nil {
		return ledger.Claim{}, err
	}
	if cs[0].Err != nil {
		return ledger.Claim{}, cs[0].Err
	}
	return cs[0], nil
}

// ClaimBatch claims many operations, up to Options.Concurrency at once. The
// requests of one key are applied in their order, so a key that appears
// twice is Claimed once and then InProgress. An invalid request fails the
// whole batch before anything is written. A request whose stored item
// cannot be read gets that as its Claim.Err and does not hold up the others.
//
// The batch is not one transaction. When a request fails (DynamoDB
// unavailable, say), no further request starts, the batch returns that
// error, and the claims it had made are given back with Release, so that
// their operations can be claimed again at once; a claim whose release
// fails too stays until its lease lapses.
func (l *Ledger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	for i := range reqs {
		if err := l.validate(&reqs[i]); err != nil {
			return nil, err
		}
	}
	if err := l.enter(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer l.calls.Done()
	out := make([]ledger.Claim, len(reqs))
	var failed atomic.Bool
	errs := make([]error, len(reqs))
	l.perKey(len(reqs), func(i int) string { return reqs[i].Key }, func(i int) {
		if failed.Load() {
			return
		}
		c, err := l.claim(ctx, &reqs[i])
		if err != nil {
			failed.Store(true)
			errs[i] = err
			return
		}
		out[i] = c
	})
	if err := errors.Join(errs...); err != nil {
		l.giveBack(ctx, reqs, out)
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// giveBack releases the claims a failed batch made.
func (l *Ledger) giveBack(ctx context.Context, reqs []ledger.ClaimRequest, out []ledger.Claim) {
	ctx = context.WithoutCancel(ctx)
	l.perKey(len(reqs), func(i int) string { return reqs[i].Key }, func(i int) {
		if out[i].Outcome == ledger.Claimed {
			_ = l.release(ctx, reqs[i].Key, reqs[i].Owner)
		}
	})
}

// perKey calls fn for each of n items, the items of one key in their order
// one after the other, different keys in parallel, at most l.concurrency at
// once. It returns when every call has returned.
func (l *Ledger) perKey(n int, key func(int) string, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var order []string
	groups := map[string][]int{}
	for i := range n {
		k := key(i)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	sem := make(chan struct{}, l.concurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range groups[k] {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// claim decides one request. Its error is the store's (the batch fails);
// an unreadable item is the claim's Err.
func (l *Ledger) claim(ctx context.Context, req *ledger.ClaimRequest) (ledger.Claim, error) {
	writeID := newWriteID()
	replace := false // the last read found an expired item: write a new one over it
	for try := 0; try < maxTries; try++ {
		now := l.now()
		var c ledger.Claim
		var err error
		if replace {
			c, err = l.claimExpired(ctx, req, now, writeID)
		} else {
			c, err = l.claimWrite(ctx, req, now, writeID)
		}
		if err == nil {
			return c, nil
		}
		if !isConditionFailed(err) {
			return ledger.Claim{}, fmt.Errorf("claim %q: %w", req.Key, err)
		}
		// The condition failed: read the item to answer. DynamoDB could
		// return it with the failure, but not every implementation of
		// its API does.
		now = l.now()
		cur, err := l.read(ctx, req.Key)
		if isUnreadable(err) {
			return ledger.Claim{Err: fmt.Errorf("claim %q: %w", req.Key, err)}, nil
		}
		if err != nil {
			return ledger.Claim{}, fmt.Errorf("claim %q: %w", req.Key, err)
		}
		switch {
		case cur == nil:
			replace = false // removed since the write: claim it as new
			continue
		case !cur.Expires.After(now):
			replace = true
			continue
		case cur.State == ledger.StateInProgress && cur.Owner == req.Owner && cur.LeaseExpiry.After(now) &&
			(len(cur.Fingerprint) == 0 || len(req.Fingerprint) == 0 || bytes.Equal(cur.Fingerprint, req.Fingerprint)):
			// In progress under this request's own owner token: this
			// claim's own write, whose answer was lost and whose retry
			// found it.
			return ledger.Claim{Outcome: ledger.Claimed, Record: *cur, LeaseLeft: cur.LeaseExpiry.Sub(now)}, nil
		}
		c, rec := ledger.DecideClaim(cur, req, now)
		if rec == nil {
			return c, nil
		}
		// The item changed between the write and the read (a failure
		// recorded, a release, a lease that lapsed meanwhile): it is
		// claimable now. Write again.
		replace = false
	}
	return ledger.Claim{}, errContended("claim", req.Key)
}

// claimWrite is the claim's conditional write: it takes the item if there
// is none, or if it is live, claimable (failed retryably, or in progress
// with a lapsed lease or under a token that the request supersedes) and
// has no other fingerprint. The old item comes
// back, and the claim's record is derived from it as decide does.
func (l *Ledger) claimWrite(ctx context.Context, req *ledger.ClaimRequest, now time.Time, writeID string) (ledger.Claim, error) {
	e := newExpr()
	u := &update{}
	nowV := e.v("now", timeAV(now))
	u.set = append(u.set,
		e.n(attrVersion)+" = "+e.v("v", intAV(itemVersion)),
		e.n(attrState)+" = "+e.v("inprog", strAV(stateInProgress)),
		e.n(attrPermanent)+" = "+e.v("false", boolAV(false)),
		e.n(attrAttempts)+" = if_not_exists("+e.n(attrAttempts)+", "+e.v("zero", intAV(0))+") + "+e.v("one", intAV(1)),
		e.n(attrOwner)+" = "+e.v("owner", strAV(req.Owner)),
		e.n(attrLease)+" = "+e.v("lease", timeAV(now.Add(req.Lease))),
		e.n(attrClaimed)+" = "+nowV,
		e.n(attrFirstSeen)+" = if_not_exists("+e.n(attrFirstSeen)+", "+nowV+")",
	)
	if len(req.Fingerprint) > 0 {
		u.set = append(u.set, e.n(attrFingerprint)+" = if_not_exists("+e.n(attrFingerprint)+", "+e.v("fp", binAV(req.Fingerprint))+")")
	}
	if req.MessageID != "" {
		u.set = append(u.set, e.n(attrMessageID)+" = "+e.v("mid", strAV(textcut.Cut(req.MessageID, ledger.MaxMessageIDLen))))
	}
	// A claim clears the dead-letter mark (ledger.ClearDeadLetter).
	u.remove = append(u.remove, e.n(attrDeadLettered), e.n(attrDeadLetterReason), e.n(attrDeadLetterCopyID))
	l.stampSet(e, u, now, writeID)
	inProgress := e.n(attrLease) + " <= " + nowV
	if req.Supersede != "" {
		// A claim of the caller's own that the request supersedes.
		inProgress = "(" + inProgress + " OR begins_with(" + e.n(attrOwner) + ", " + e.v("sup", strAV(req.Supersede+"/")) + "))"
	}
	cond := "attribute_not_exists(" + e.n(attrPK) + ") OR (" + e.n(attrExpires) + " > " + nowV +
		" AND ((" + e.n(attrState) + " = " + e.v("failed", strAV(stateFailed)) + " AND " + e.n(attrPermanent) + " = :false)" +
		" OR (" + e.n(attrState) + " = :inprog AND " + inProgress + "))"
	if len(req.Fingerprint) > 0 {
		cond += " AND (attribute_not_exists(" + e.n(attrFingerprint) + ") OR " + e.n(attrFingerprint) + " = :fp)"
	}
	cond += ")"

	var out *ddb.UpdateItemOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       keyAttrs(req.Key),
			UpdateExpression:          aws.String(u.String()),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
			ReturnValues:              types.ReturnValueAllOld,
		})
		return err
	})
	if err != nil {
		return ledger.Claim{}, err
	}
	var old *ledger.Record
	if len(out.Attributes) > 0 {
		r, err := recordOf(out.Attributes)
		if err != nil {
			// The condition held, so the item was readable enough;
			// what the claim wrote is in the table: answer with that.
			return l.claimedAsStored(ctx, req)
		}
		storyOf(out.Attributes, &r)
		old = &r
	}
	c, rec := ledger.DecideClaim(old, req, now)
	if rec == nil {
		return l.claimedAsStored(ctx, req)
	}
	if old != nil && old.State == ledger.StateInProgress && old.Expires.After(now) {
		l.endTakenOver(ctx, req.Key, req.Owner, old, now)
	}
	l.stamp(rec, now)
	c.Record = *rec
	return c, nil
}

// claimedAsStored answers a claim whose write took effect with the record
// as stored, for the rare case that the old item could not be decided on.
func (l *Ledger) claimedAsStored(ctx context.Context, req *ledger.ClaimRequest) (ledger.Claim, error) {
	cur, err := l.read(ctx, req.Key)
	if isUnreadable(err) {
		return ledger.Claim{Err: fmt.Errorf("claim %q: %w", req.Key, err)}, nil
	}
	if err != nil {
		return ledger.Claim{}, err
	}
	if cur == nil || cur.Owner != req.Owner || cur.State != ledger.StateInProgress {
		return ledger.Claim{}, fmt.Errorf("claim %q: the claim was written but the item is %+v", req.Key, cur)
	}
	return ledger.Claim{Outcome: ledger.Claimed, Record: *cur, LeaseLeft: req.Lease}, nil
}

// claimExpired writes a new record over an expired item (or where the item
// has gone meanwhile): an expired record is treated as absent.
func (l *Ledger) claimExpired(ctx context.Context, req *ledger.ClaimRequest, now time.Time, writeID string) (ledger.Claim, error) {
	c, rec := ledger.DecideClaim(nil, req, now)
	l.stamp(rec, now)
	c.Record = *rec
	e := newExpr()
	cond := "attribute_not_exists(" + e.n(attrPK) + ") OR " + e.n(attrExpires) + " <= " + e.v("now", timeAV(now))
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.PutItem(ctx, &ddb.PutItemInput{
			TableName:                 l.table,
			Item:                      itemOf(rec, writeID),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
	if err != nil {
		return ledger.Claim{}, err
	}
	return c, nil
}
