package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// Complete records the claim's work as done, which ends its attempt: it is
// counted in Record.Attempts. It returns after the commit; only then may
// the message be acknowledged. The record must be in progress
// under c.Owner: Complete fails with ledger.ErrNotOwner when another claim
// took the operation over, ledger.ErrState when the record is failed, and
// ledger.ErrNotFound when there is no live record. Once complete, it
// succeeds again for the same owner and changes nothing.
func (l *Ledger) Complete(ctx context.Context, c ledger.Completion) error {
	return l.CompleteBatch(ctx, []ledger.Completion{c})[0]
}

// CompleteBatch completes many claims in one statement, one transaction and
// one round trip, and returns one error per completion, nil for those that
// are committed.
func (l *Ledger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	items := make([]item, len(cs))
	var a completeArgs
	for i, c := range cs {
		items[i] = item{key: c.Key, owner: c.Owner}
		if items[i].valid("complete") {
			a.add(&c)
		}
	}
	errs := l.transitionBatch(ctx, "complete", items, func(b *pgx.Batch) {
		b.Queue(l.q.complete, a.args(l)...)
	}, func(it *item, f *found, again bool) error {
		if f.state == stateComplete {
			return nil // already done by this owner: idempotent
		}
		return fmt.Errorf("complete %q: record is %s: %w", it.key, ledger.State(f.state), ledger.ErrState)
	})
	l.tallyMinutes(ctx, errs, false)
	return errs
}

// completeArgs are the arrays of the complete statement: per completion
// its key, owner, result, start and payload.
type completeArgs struct {
	keys, owners, results, payloads [][]byte
	started                         []pgtype.Timestamptz
}

func (a *completeArgs) add(c *ledger.Completion) {
	result := c.Result
	if len(result) > ledger.MaxResultLen {
		result = result[:ledger.MaxResultLen]
	}
	a.keys, a.owners, a.results = append(a.keys, []byte(c.Key)), append(a.owners, []byte(c.Owner)), append(a.results, nonEmpty(result))
	a.started = append(a.started, pgtype.Timestamptz{Time: c.Started, Valid: !c.Started.IsZero()})
	a.payloads = append(a.payloads, payloadBytes(c.Payload))
}

func (a *completeArgs) args(l *Ledger) []any {
	return []any{l.clock(), micros(l.cfg.retention), a.keys, a.owners, a.results, a.started, a.payloads}
}

// payloadBytes is p as the payload column keeps it: NULL for none.
func payloadBytes(p *ledger.Payload) []byte {
	if p == nil {
		return nil
	}
	return ledger.EncodePayload(p.Bounded())
}

// Fail records that the claim's work failed, which ends its attempt: it is
// counted in Record.Attempts. A retryable failure lets the next Claim take
// the operation again; a permanent one makes it answer FailedPermanently. It fails with ledger.ErrNotOwner after a takeover and
// ledger.ErrState when the record is not in progress.
func (l *Ledger) Fail(ctx context.Context, f ledger.Failure) error {
	return l.FailBatch(ctx, []ledger.Failure{f})[0]
}

// FailBatch fails many claims in one statement and one round trip, one
// error per failure.
func (l *Ledger) FailBatch(ctx context.Context, fs []ledger.Failure) []error {
	items := make([]item, len(fs))
	var keys, owners, errs, herrs, payloads [][]byte
	var permanent, outage []bool
	var started []pgtype.Timestamptz
	texts := make([]string, len(fs))
	for i, f := range fs {
		items[i] = item{key: f.Key, owner: f.Owner}
		texts[i] = textcut.Cut(f.Err, ledger.MaxErrorLen)
		if items[i].valid("fail") {
			keys, owners = append(keys, []byte(f.Key)), append(owners, []byte(f.Owner))
			errs, permanent = append(errs, bytesOrNil(texts[i])), append(permanent, f.Permanent)
			outage = append(outage, f.Outage)
			started = append(started, pgtype.Timestamptz{Time: f.Started, Valid: !f.Started.IsZero()})
			herrs = append(herrs, bytesOrNil(textcut.Cut(f.Err, ledger.MaxAttemptError)))
			payloads = append(payloads, payloadBytes(f.Payload))
		}
	}
	out := l.transitionBatch(ctx, "fail", items, func(b *pgx.Batch) {
		b.Queue(l.q.fail, l.clock(), micros(l.cfg.retention), keys, owners, errs, permanent, outage, started, herrs, payloads)
	}, func(it *item, f *found, again bool) error {
		i := it.index
		if again && f.state == stateFailed && f.permanent == fs[i].Permanent && f.lastError == texts[i] {
			return nil // the earlier attempt's failure
		}
		return fmt.Errorf("fail %q: record is %s: %w", it.key, ledger.State(f.state), ledger.ErrState)
	})
	l.tallyMinutes(ctx, out, true)
	return out
}

// item is one transition of a batch.
type item struct {
	key, owner string
	index      int
	err        error // set when the item is invalid
}

func (it *item) valid(op string) bool {
	if err := ledger.ValidateKey(it.key); err != nil {
		it.err = fmt.Errorf("%s: %w", op, err)
		return false
	}
	return true
}

// found is what the explaining read found of a record.
type found struct {
	state     int16
	permanent bool
	owner     string
	lastError string
}

// transitionBatch sends the statement that queue adds, which updates the
// records of the valid items it can and returns (key, owner) of each, then
// reads the live records of the valid items in the same round trip. Each
// item the statement did not update gets its answer: ErrNotFound, ErrNotOwner,
// or what other says for a record of its owner in a state the statement
// did not take.
func (l *Ledger) transitionBatch(ctx context.Context, op string, items []item, queue func(*pgx.Batch),
	other func(it *item, f *found, again bool) error) []error {
	errs := make([]error, len(items))
	var keys [][]byte
	for i := range items {
		items[i].index = i
		if items[i].err == nil {
			keys = append(keys, []byte(items[i].key))
		}
	}
	if len(keys) == 0 {
		for i := range items {
			errs[i] = items[i].err
		}
		return errs
	}
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		b := &pgx.Batch{}
		queue(b)
		b.Queue(l.q.explain, l.clock(), keys)
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		done := map[[2]string]bool{}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var key, owner []byte
			if err := rows.Scan(&key, &owner); err != nil {
				rows.Close()
				return err
			}
			done[[2]string{string(key), string(owner)}] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		live, err := readLive(br)
		if err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		for i := range items {
			it := &items[i]
			switch f := live[it.key]; {
			case it.err != nil:
				errs[i] = it.err
			case done[[2]string{it.key, it.owner}]:
				errs[i] = nil
			case f == nil:
				errs[i] = fmt.Errorf("%s %q: %w", op, it.key, ledger.ErrNotFound)
			case f.owner != it.owner:
				errs[i] = fmt.Errorf("%s %q: claim %q was taken over by %q: %w", op, it.key, it.owner, f.owner, ledger.ErrNotOwner)
			default:
				errs[i] = other(it, f, again)
			}
		}
		return nil
	})
	if err != nil {
		for i := range items {
			if items[i].err != nil {
				errs[i] = items[i].err
			} else {
				errs[i] = fmt.Errorf("%s %q: %w", op, items[i].key, err)
			}
		}
	}
	return errs
}

// explainOne is the answer for key of a transition by owner that changed
// nothing, from the live record found; other answers for a record of the
// owner.
func (l *Ledger) explainOne(op, key, owner string, f *found, other func(*found) error) error {
	switch {
	case f == nil:
		return fmt.Errorf("%s %q: %w", op, key, ledger.ErrNotFound)
	case f.owner != owner:
		return fmt.Errorf("%s %q: claim %q was taken over by %q: %w", op, key, owner, f.owner, ledger.ErrNotOwner)
	}
	return other(f)
}

// readLive reads the rows of the explain statement: the live records of
// its keys.
func readLive(br pgx.BatchResults) (map[string]*found, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	live := map[string]*found{}
	for rows.Next() {
		var key, owner, lastErr []byte
		f := &found{}
		if err := rows.Scan(&key, &f.state, &f.permanent, &owner, &lastErr); err != nil {
			return nil, err
		}
		f.owner, f.lastError = string(owner), string(lastErr)
		live[string(key)] = f
	}
	return live, rows.Err()
}

// readFound reads the row of the explain statement for one key.
func readFound(r pgx.Row) (*found, error) {
	var key, owner, lastErr []byte
	f := &found{}
	err := r.Scan(&key, &f.state, &f.permanent, &owner, &lastErr)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f.owner, f.lastError = string(owner), string(lastErr)
	return f, nil
}

// Release gives back a claim whose work never started, without counting an
// attempt: the operation becomes claimable at once. A key that no attempt
// has started yet (Record.Attempts is 0) is forgotten again. It fails with
// ledger.ErrNotOwner after a takeover and ledger.ErrState when the record
// is not in progress.
func (l *Ledger) Release(ctx context.Context, key, owner string) error {
	return l.ReleaseBatch(ctx, []ledger.ClaimRef{{Key: key, Owner: owner}})[0]
}

// ReleaseBatch releases many claims in one transaction and one round trip,
// one error per claim, as Release does each.
func (l *Ledger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	return l.eachBatch(ctx, "release", refs, func(b *pgx.Batch, now any, r ledger.ClaimRef) {
		b.Queue(l.q.releaseLast, now, []byte(r.Key), []byte(r.Owner))
		b.Queue(l.q.release, now, micros(l.cfg.retention), []byte(r.Key), []byte(r.Owner))
	}, func(br pgx.BatchResults) (bool, error) {
		changed := false
		for range 2 {
			tag, err := br.Exec()
			if err != nil {
				return false, err
			}
			changed = changed || tag.RowsAffected() > 0
		}
		return changed, nil
	}, func(r ledger.ClaimRef, f *found, again bool) error {
		if again && (f == nil || f.owner == r.Owner && f.state == stateFailed) {
			return nil // the earlier attempt's release (of a first claim: forgotten)
		}
		return l.explainOne("release", r.Key, r.Owner, f, func(f *found) error {
			return fmt.Errorf("release %q: record is %s: %w", r.Key, ledger.State(f.state), ledger.ErrState)
		})
	})
}

// ExtendBatch renews the leases of many claims to now+lease, now being the
// server's clock, in one transaction and one round trip, one error per
// claim, as Extend does each.
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
	return l.eachBatch(ctx, "extend", refs, func(b *pgx.Batch, now any, r ledger.ClaimRef) {
		b.Queue(l.q.extend, now, micros(l.cfg.retention), []byte(r.Key), []byte(r.Owner), micros(lease))
	}, func(br pgx.BatchResults) (bool, error) {
		tag, err := br.Exec()
		return tag.RowsAffected() > 0, err
	}, func(r ledger.ClaimRef, f *found, again bool) error {
		return l.explainOne("extend", r.Key, r.Owner, f, func(f *found) error {
			return fmt.Errorf("extend %q: record is %s: %w", r.Key, ledger.State(f.state), ledger.ErrState)
		})
	})
}

// eachBatch sends the statements that queue adds for each claim, in key
// order (the order claims lock records in), and an explaining read of the
// live records, in one round trip. changed reads a claim's results and
// says whether its statements changed the record; the answer of a claim
// whose statements changed nothing is explain's, from the record found
// (nil when there is none). again is true when an earlier attempt of the
// call may have committed.
func (l *Ledger) eachBatch(ctx context.Context, op string, refs []ledger.ClaimRef,
	queue func(b *pgx.Batch, now any, r ledger.ClaimRef),
	changed func(br pgx.BatchResults) (bool, error),
	explain func(r ledger.ClaimRef, f *found, again bool) error) []error {
	errs := make([]error, len(refs))
	var order []int
	var keys [][]byte
	for i, r := range refs {
		if err := ledger.ValidateKey(r.Key); err != nil {
			errs[i] = fmt.Errorf("%s: %w", op, err)
			continue
		}
		order = append(order, i)
		keys = append(keys, []byte(r.Key))
	}
	if len(order) == 0 {
		return errs
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(refs[a].Key, refs[b].Key) })
	answers := make([]error, len(refs))
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		now := l.clock()
		b := &pgx.Batch{}
		for _, i := range order {
			queue(b, now, refs[i])
		}
		b.Queue(l.q.explain, now, keys)
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		took := make([]bool, len(refs))
		for _, i := range order {
			ok, err := changed(br)
			if err != nil {
				return err
			}
			took[i] = ok
		}
		live, err := readLive(br)
		if err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		for _, i := range order {
			answers[i] = nil
			if !took[i] {
				answers[i] = explain(refs[i], live[refs[i].Key], again)
			}
		}
		return nil
	})
	for _, i := range order {
		if err != nil {
			errs[i] = fmt.Errorf("%s %q: %w", op, refs[i].Key, err)
		} else {
			errs[i] = answers[i]
		}
	}
	return errs
}

// Extend renews the claim's lease to now+lease (the heartbeat), now being
// the server's clock, and returns the new expiry, or the zero time with an
// error. A lease longer than the retention fails with
// ledger.ErrInvalidArgument. It fails with ledger.ErrNotOwner after a
// takeover: the caller has lost the operation and should stop its work.
// When ctx ends first it returns ctx's error, and the extension may still
// take effect.
func (l *Ledger) Extend(ctx context.Context, key, owner string, lease time.Duration) (time.Time, error) {
	if err := ledger.ValidateKey(key); err != nil {
		return time.Time{}, fmt.Errorf("extend: %w", err)
	}
	if lease <= 0 {
		return time.Time{}, fmt.Errorf("extend %q: lease must be positive: %w", key, ledger.ErrInvalidArgument)
	}
	if err := l.checkLease("extend", key, lease); err != nil {
		return time.Time{}, err
	}
	var expiry time.Time
	var answer error
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		now := l.clock()
		b := &pgx.Batch{}
		b.Queue(l.q.extend, now, micros(l.cfg.retention), []byte(key), []byte(owner), micros(lease))
		b.Queue(l.q.explain, now, [][]byte{[]byte(key)})
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		var exp pgtype.Timestamptz
		err := br.QueryRow().Scan(&exp)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		f, ferr := readFound(br.QueryRow())
		if ferr != nil {
			return ferr
		}
		if err := br.Close(); err != nil {
			return err
		}
		expiry, answer = time.Time{}, nil
		if exp.Valid {
			expiry = exp.Time
			return nil
		}
		answer = l.explainOne("extend", key, owner, f, func(f *found) error {
			return fmt.Errorf("extend %q: record is %s: %w", key, ledger.State(f.state), ledger.ErrState)
		})
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend %q: %w", key, err)
	}
	return expiry, answer
}

// Reset makes a failed operation claimable again, permanent or not: what an
// operator does before replaying it from a dead-letter queue. Its history
// (attempts, last error) is kept. Other states fail with ledger.ErrState, an
// absent record with ledger.ErrNotFound.
func (l *Ledger) Reset(ctx context.Context, key string) error {
	if err := ledger.ValidateKey(key); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	var answer error
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		now := l.clock()
		b := &pgx.Batch{}
		b.Queue(l.q.reset, now, micros(l.cfg.retention), []byte(key))
		b.Queue(l.q.explain, now, [][]byte{[]byte(key)})
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		f, err := readFound(br.QueryRow())
		if err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		switch {
		case tag.RowsAffected() > 0:
			answer = nil
		case f == nil:
			answer = fmt.Errorf("reset %q: %w", key, ledger.ErrNotFound)
		default:
			answer = fmt.Errorf("reset %q: record is %s, only failed records can be reset: %w", key, ledger.State(f.state), ledger.ErrState)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reset %q: %w", key, err)
	}
	return answer
}

// Forget deletes the record of key whatever its state, expired or not, so
// that the next delivery runs the operation again. Forgetting an absent key
// is not an error.
func (l *Ledger) Forget(ctx context.Context, key string) error {
	if err := ledger.ValidateKey(key); err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		_, err := l.pool.Exec(ctx, l.q.forget, []byte(key))
		return err
	})
	if err != nil {
		return fmt.Errorf("forget %q: %w", key, err)
	}
	return nil
}
