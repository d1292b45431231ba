package dynamodb

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// write is one conditional write of a transition: an UpdateItem with
// update set, or a DeleteItem when update is empty.
type write struct {
	e    *expr
	u    update
	cond string
}

func (l *Ledger) do(ctx context.Context, key string, w *write) error {
	return l.call(ctx, func(ctx context.Context) error {
		if len(w.u.set) == 0 && len(w.u.remove) == 0 {
			_, err := l.client.DeleteItem(ctx, &ddb.DeleteItemInput{
				TableName:                 l.table,
				Key:                       keyAttrs(key),
				ConditionExpression:       aws.String(w.cond),
				ExpressionAttributeNames:  w.e.nameMap(),
				ExpressionAttributeValues: w.e.vals(),
			})
			return err
		}
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       keyAttrs(key),
			UpdateExpression:          aws.String(w.u.String()),
			ConditionExpression:       aws.String(w.cond),
			ExpressionAttributeNames:  w.e.nameMap(),
			ExpressionAttributeValues: w.e.vals(),
		})
		return err
	})
}

// ownedCond is the condition of a transition by owner: the item is live,
// held by owner and in progress.
func ownedCond(e *expr, owner string, now time.Time) string {
	return e.n(attrExpires) + " > " + e.v("now", timeAV(now)) +
		" AND " + e.n(attrOwner) + " = " + e.v("owner", strAV(owner)) +
		" AND " + e.n(attrState) + " = " + e.v("inprog", strAV(stateInProgress))
}

// judge is what a transition makes of the record it read after its
// conditional write failed: nil to write again (the item changed between
// the write and the read), errDone when the record shows that the
// transition has taken effect, or the caller's answer.
type judge func(cur *ledger.Record, own bool) error

// errDone stops a transition loop with success.
var errDone = fmt.Errorf("done")

// guard runs fn as a call in flight (see Close), or fails when the ledger
// is closed.
func (l *Ledger) guard(op, key string, fn func() error) error {
	if err := l.enter(); err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	defer l.calls.Done()
	return fn()
}

// batch runs fn for each of n items as one call in flight, the items of one
// key in order, and returns one error per item.
func (l *Ledger) batch(op string, n int, key func(int) string, fn func(i int) error) []error {
	errs := make([]error, n)
	if err := l.enter(); err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("%s %q: %w", op, key(i), err)
		}
		return errs
	}
	defer l.calls.Done()
	l.perKey(n, key, func(i int) { errs[i] = fn(i) })
	return errs
}

// transition runs a conditional write built by build for the time of each
// try, reads the item when its condition fails and asks judge what that
// means. own tells judge that the item's last write was this call's (its
// answer was lost and the SDK's retry found the write done).
func (l *Ledger) transition(ctx context.Context, op, key string, build func(now time.Time, writeID string) *write, j judge) error {
	if err := ledger.ValidateKey(key); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	writeID := newWriteID()
	for try := 0; try < maxTries; try++ {
		err := l.do(ctx, key, build(l.now(), writeID))
		if err == nil {
			return nil
		}
		if !isConditionFailed(err) {
			return fmt.Errorf("%s %q: %w", op, key, err)
		}
		now := l.now()
		item, err := l.getItem(ctx, pkOf(key))
		if err != nil {
			return fmt.Errorf("%s %q: %w", op, key, err)
		}
		var cur *ledger.Record
		if item != nil {
			rec, err := recordOf(item)
			if err != nil {
				return fmt.Errorf("%s %q: %w", op, key, err)
			}
			storyOf(item, &rec)
			if rec.Expires.After(now) {
				cur = &rec
			}
		}
		own := false
		if w, ok := item[attrWriteID].(*types.AttributeValueMemberS); ok {
			own = w.Value == writeID
		}
		switch err := j(cur, own); err {
		case nil:
			continue
		case errDone:
			return nil
		default:
			return err
		}
	}
	return errContended(op, key)
}

// ownerAnswer is the answer of a transition by owner on cur, the live
// record (nil: none), for the checks every such transition shares: the
// record must exist and be held by owner.
func ownerAnswer(op, key, owner string, cur *ledger.Record) error {
	if cur == nil {
		return fmt.Errorf("%s %q: %w", op, key, ledger.ErrNotFound)
	}
	if cur.Owner != owner {
		return fmt.Errorf("%s %q: claim %q was taken over by %q: %w", op, key, owner, cur.Owner, ledger.ErrNotOwner)
	}
	return nil
}

// Complete records the claim's work as done, with one conditional write,
// which ends its attempt: it is counted in Record.Attempts (see
// storedAttempts). It returns only after DynamoDB has acknowledged the
// write; only then may
// the message be acknowledged. The record must be in progress under
// c.Owner: Complete fails with ErrNotOwner when another claim took the
// operation over and with ErrState when the record is failed. Once
// complete, it succeeds again for the same owner and changes nothing, so
// a completion whose answer was lost can be retried.
func (l *Ledger) Complete(ctx context.Context, c ledger.Completion) error {
	err := l.guard("complete", c.Key, func() error { return l.complete(ctx, &c) })
	l.tallyMinutes(ctx, []error{err}, false)
	return err
}

// CompleteBatch completes many claims, up to Options.Concurrency at once,
// and returns one error per completion, nil for those that are recorded.
func (l *Ledger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	errs := l.batch("complete", len(cs), func(i int) string { return cs[i].Key }, func(i int) error {
		return l.complete(ctx, &cs[i])
	})
	l.tallyMinutes(ctx, errs, false)
	return errs
}

func (l *Ledger) complete(ctx context.Context, c *ledger.Completion) error {
	result := c.Result
	if len(result) > ledger.MaxResultLen {
		result = result[:ledger.MaxResultLen]
	}
	h := &history{started: c.Started, outcome: ledger.AttemptComplete, payload: c.Payload, owner: c.Owner}
	h.claimTime(ctx, l, c.Key)
	return l.transition(ctx, "complete", c.Key, func(now time.Time, writeID string) *write {
		e := newExpr()
		w := &write{e: e, cond: ownedCond(e, c.Owner, now)}
		h.set(w, now)
		w.u.set = append(w.u.set,
			e.n(attrState)+" = "+e.v("complete", strAV(stateComplete)),
			e.n(attrCompleted)+" = :now",
		)
		w.u.remove = append(w.u.remove, e.n(attrLease), e.n(attrLastError))
		if len(result) > 0 {
			w.u.set = append(w.u.set, e.n(attrResult)+" = "+e.v("result", binAV(result)))
		} else {
			w.u.remove = append(w.u.remove, e.n(attrResult))
		}
		l.stampSet(e, &w.u, now, writeID)
		return w
	}, func(cur *ledger.Record, own bool) error {
		if err := ownerAnswer("complete", c.Key, c.Owner, cur); err != nil {
			return err
		}
		if !own && h.fullIn(cur) {
			return nil // write again, the history whole
		}
		switch cur.State {
		case ledger.StateComplete:
			return errDone // already done by this owner: idempotent
		case ledger.StateInProgress:
			return nil
		}
		return fmt.Errorf("complete %q: record is %s: %w", c.Key, cur.State, ledger.ErrState)
	})
}

// Fail records that the claim's work failed, with one conditional write,
// which ends its attempt: it is counted in Record.Attempts. A
// retryable failure lets the next Claim take the operation again; a
// permanent one makes it answer FailedPermanently. It fails with
// ErrNotOwner after a takeover and with ErrState when the record is not in
// progress. A failure whose answer was lost and that is retried finds its
// own write and succeeds.
func (l *Ledger) Fail(ctx context.Context, f ledger.Failure) error {
	err := l.guard("fail", f.Key, func() error { return l.fail(ctx, &f) })
	l.tallyMinutes(ctx, []error{err}, true)
	return err
}

// FailBatch fails many claims, up to Options.Concurrency at once, one error
// per failure.
func (l *Ledger) FailBatch(ctx context.Context, fs []ledger.Failure) []error {
	errs := l.batch("fail", len(fs), func(i int) string { return fs[i].Key }, func(i int) error {
		return l.fail(ctx, &fs[i])
	})
	l.tallyMinutes(ctx, errs, true)
	return errs
}

func (l *Ledger) fail(ctx context.Context, f *ledger.Failure) error {
	text := textcut.Cut(f.Err, ledger.MaxErrorLen)
	h := &history{started: f.Started, outcome: ledger.AttemptFailed, errText: f.Err, payload: f.Payload, owner: f.Owner}
	if f.Permanent {
		h.outcome = ledger.AttemptFailedPermanently
	}
	h.claimTime(ctx, l, f.Key)
	return l.transition(ctx, "fail", f.Key, func(now time.Time, writeID string) *write {
		e := newExpr()
		w := &write{e: e, cond: ownedCond(e, f.Owner, now)}
		h.set(w, now)
		w.u.set = append(w.u.set,
			e.n(attrState)+" = "+e.v("failed", strAV(stateFailed)),
			e.n(attrPermanent)+" = "+e.v("perm", boolAV(f.Permanent)),
		)
		w.u.remove = append(w.u.remove, e.n(attrLease))
		if text != "" {
			w.u.set = append(w.u.set, e.n(attrLastError)+" = "+e.v("err", strAV(text)))
		} else {
			w.u.remove = append(w.u.remove, e.n(attrLastError))
		}
		w.u.set = append(w.u.set, countFailure(e, f))
		l.stampSet(e, &w.u, now, writeID)
		return w
	}, func(cur *ledger.Record, own bool) error {
		if err := ownerAnswer("fail", f.Key, f.Owner, cur); err != nil {
			return err
		}
		if !own && h.fullIn(cur) {
			return nil // write again, the history whole
		}
		switch {
		case own:
			return errDone
		case cur.State == ledger.StateInProgress:
			return nil
		}
		return fmt.Errorf("fail %q: record is %s: %w", f.Key, cur.State, ledger.ErrState)
	})
}

// Release gives back a claim whose work never started, without counting an
// attempt: the operation becomes claimable at once. A key that no attempt
// has started yet (Record.Attempts is 0) is forgotten again (its item
// deleted). A release whose answer
// was lost and that is retried succeeds when it finds its own write, but a
// retried release of a first claim finds no item and answers ErrNotFound:
// the item is gone, as asked.
func (l *Ledger) Release(ctx context.Context, key, owner string) error {
	return l.guard("release", key, func() error { return l.release(ctx, key, owner) })
}

// ReleaseBatch releases many claims, up to Options.Concurrency at once,
// one error per claim, as Release does each.
func (l *Ledger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	return l.batch("release", len(refs), func(i int) string { return refs[i].Key }, func(i int) error {
		return l.release(ctx, refs[i].Key, refs[i].Owner)
	})
}

func (l *Ledger) release(ctx context.Context, key, owner string) error {
	first := true // the last read saw a record that no attempt started (or none yet): delete it
	return l.transition(ctx, "release", key, func(now time.Time, writeID string) *write {
		e := newExpr()
		w := &write{e: e, cond: ownedCond(e, owner, now)}
		// The attribute counts this claim's attempt (see
		// storedAttempts): 1 when no attempt started before it.
		one := e.v("one", intAV(1))
		if first {
			w.cond += " AND " + e.n(attrAttempts) + " <= " + one
			return w
		}
		w.cond += " AND " + e.n(attrAttempts) + " > " + one
		w.u.set = append(w.u.set,
			e.n(attrState)+" = "+e.v("failed", strAV(stateFailed)),
			e.n(attrPermanent)+" = "+e.v("false", boolAV(false)),
			e.n(attrAttempts)+" = "+e.n(attrAttempts)+" - "+one,
		)
		w.u.remove = append(w.u.remove, e.n(attrLease))
		l.stampSet(e, &w.u, now, writeID)
		return w
	}, func(cur *ledger.Record, own bool) error {
		if err := ownerAnswer("release", key, owner, cur); err != nil {
			return err
		}
		switch {
		case own:
			return errDone
		case cur.State != ledger.StateInProgress:
			return fmt.Errorf("release %q: record is %s: %w", key, cur.State, ledger.ErrState)
		}
		first = cur.Attempts == 0
		return nil
	})
}

// Extend renews the claim's lease to now+lease (the heartbeat) and returns
// the new expiry, or the zero time with an error. A lease longer than the
// ledger's retention fails with ErrInvalidArgument. It fails with
// ErrNotOwner after a takeover: the caller has lost the operation and should
// stop its work. When ctx ends first it returns ctx's error, and the
// extension may still take effect.
func (l *Ledger) Extend(ctx context.Context, key, owner string, lease time.Duration) (time.Time, error) {
	if lease <= 0 {
		return time.Time{}, fmt.Errorf("extend %q: lease must be positive: %w", key, ledger.ErrInvalidArgument)
	}
	if err := l.checkLease("extend", key, lease); err != nil {
		return time.Time{}, err
	}
	var expiry time.Time
	err := l.guard("extend", key, func() error { return l.extend(ctx, key, owner, lease, &expiry) })
	if err != nil {
		return time.Time{}, err
	}
	return expiry, nil
}

// ExtendBatch renews the leases of many claims, up to Options.Concurrency
// at once, one error per claim, as Extend does each.
func (l *Ledger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	var bad error
	if lease <= 0 {
		bad = fmt.Errorf("extend: lease must be positive: %w", ledger.ErrInvalidArgument)
	} else if len(refs) > 0 {
		bad = l.checkLease("extend", refs[0].Key, lease)
	}
	if bad != nil {
		errs := make([]error, len(refs))
		for i := range errs {
			errs[i] = bad
		}
		return errs
	}
	return l.batch("extend", len(refs), func(i int) string { return refs[i].Key }, func(i int) error {
		var expiry time.Time
		return l.extend(ctx, refs[i].Key, refs[i].Owner, lease, &expiry)
	})
}

func (l *Ledger) extend(ctx context.Context, key, owner string, lease time.Duration, expiry *time.Time) error {
	return l.transition(ctx, "extend", key, func(now time.Time, writeID string) *write {
		*expiry = now.Add(lease)
		e := newExpr()
		w := &write{e: e, cond: ownedCond(e, owner, now)}
		w.u.set = append(w.u.set, e.n(attrLease)+" = "+e.v("lease", timeAV(*expiry)))
		l.stampSet(e, &w.u, now, writeID)
		return w
	}, func(cur *ledger.Record, own bool) error {
		if err := ownerAnswer("extend", key, owner, cur); err != nil {
			return err
		}
		if cur.State != ledger.StateInProgress {
			return fmt.Errorf("extend %q: record is %s: %w", key, cur.State, ledger.ErrState)
		}
		return nil
	})
}

// Reset makes a failed operation claimable again, permanent or not: what an
// operator does before replaying it from a dead-letter queue. Its history
// (attempts, last error) is kept. Other states fail with ErrState.
func (l *Ledger) Reset(ctx context.Context, key string) error {
	return l.guard("reset", key, func() error { return l.reset(ctx, key) })
}

func (l *Ledger) reset(ctx context.Context, key string) error {
	return l.transition(ctx, "reset", key, func(now time.Time, writeID string) *write {
		e := newExpr()
		w := &write{e: e, cond: e.n(attrExpires) + " > " + e.v("now", timeAV(now)) +
			" AND " + e.n(attrState) + " = " + e.v("failed", strAV(stateFailed))}
		w.u.set = append(w.u.set, e.n(attrPermanent)+" = "+e.v("false", boolAV(false)))
		l.stampSet(e, &w.u, now, writeID)
		return w
	}, func(cur *ledger.Record, own bool) error {
		switch {
		case cur == nil:
			return fmt.Errorf("reset %q: %w", key, ledger.ErrNotFound)
		case cur.State != ledger.StateFailed:
			return fmt.Errorf("reset %q: record is %s, only failed records can be reset: %w", key, cur.State, ledger.ErrState)
		}
		return nil
	})
}

// Forget deletes the record of key whatever its state, so that the next
// delivery runs the operation again. Forgetting an absent key is not an
// error. An item that cannot be read is deleted too: it is the way out for
// an operation whose item was damaged.
func (l *Ledger) Forget(ctx context.Context, key string) error {
	if err := ledger.ValidateKey(key); err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	if err := l.enter(); err != nil {
		return fmt.Errorf("forget %q: %w", key, err)
	}
	defer l.calls.Done()
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: l.table, Key: keyAttrs(key)})
		return err
	})
	if err != nil {
		return fmt.Errorf("forget %q: %w", key, err)
	}
	return nil
}
