package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// Outcome is the answer of a claim: what the caller should do with the
// delivery in hand.
type Outcome uint8

// The outcomes of Claim.
const (
	// Claimed: the caller owns the operation and should run the work. This
	// is a new key, a retry after a retryable failure, a takeover of an
	// in-progress claim whose lease lapsed (Claim.Takeover), or of one of
	// the caller's own that the request supersedes (Claim.Reclaimed).
	Claimed Outcome = iota + 1
	// AlreadyComplete: the work was done; Claim.Record holds the stored
	// result. The delivery is a duplicate.
	AlreadyComplete
	// InProgress: another claim holds a live lease, until
	// Claim.Record.LeaseExpiry. Do not run the work now.
	InProgress
	// Conflict: the key exists with a different payload fingerprint. The
	// caller decides by policy; the record is unchanged.
	Conflict
	// FailedPermanently: the work failed with a permanent error. It stays
	// so until an operator calls Reset.
	FailedPermanently
)

// String returns the outcome's name for logs.
func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case AlreadyComplete:
		return "already_complete"
	case InProgress:
		return "in_progress"
	case Conflict:
		return "conflict"
	case FailedPermanently:
		return "failed_permanently"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// ClaimRequest asks to take an operation.
type ClaimRequest struct {
	Key string
	// Fingerprint identifies the payload (a hash of it). When both the
	// stored and the requested fingerprint are non-empty and differ, the
	// claim answers Conflict. At most MaxFingerprintLen bytes.
	Fingerprint []byte
	// Owner is a token unique to this claim (not just to the process), so
	// that a later transition can tell this claim from a takeover.
	Owner string
	// Lease is how long the claim holds before another claim may take the
	// operation over. Extend renews it. It must be positive and no longer
	// than the ledger's retention (ErrInvalidArgument otherwise).
	Lease time.Duration
	// MessageID is recorded for support.
	MessageID string
	// Supersede, when not empty, names the caller's own earlier claims:
	// the owner tokens Supersede + "/" + anything. A record in progress
	// under such a token is taken over even while its lease is live (the
	// caller knows that no work of its own runs under it), and the claim
	// answers Claimed with Claim.Reclaimed set. A token that merely starts
	// with the same characters ("host-10/3" for Supersede "host-1") is
	// another's, and its live lease holds. Owner must be one of these
	// tokens itself (ErrInvalidArgument otherwise). Supersede changes no
	// other outcome: a record of another fingerprint is still a Conflict,
	// a complete one AlreadyComplete.
	Supersede string
}

// supersedes reports whether owner is one of the tokens that r.Supersede
// names.
func (r *ClaimRequest) supersedes(owner string) bool {
	return r.Supersede != "" && len(owner) > len(r.Supersede) && owner[len(r.Supersede)] == '/' && owner[:len(r.Supersede)] == r.Supersede
}

// Claim is the result of a claim.
type Claim struct {
	Outcome  Outcome
	Record   Record // after the claim when Claimed; as found otherwise
	Takeover bool   // Claimed over an in-progress claim whose lease lapsed
	// Reclaimed: Claimed over an in-progress claim under one of the
	// tokens that ClaimRequest.Supersede names, whose lease was live or
	// (Takeover then set too) had lapsed.
	Reclaimed bool
	// LeaseLeft is how long the lease of the claim that holds the
	// operation runs on, measured by the ledger's own clock (the database
	// server's, for a shared ledger): for InProgress, how long until the
	// operation may be taken over; for Claimed, the new lease. It is what
	// a caller should wait, rather than Record.LeaseExpiry less its own
	// clock, which may differ from the ledger's. Zero for the other
	// outcomes.
	LeaseLeft time.Duration
	// Err is non-nil, wrapping ErrCorrupt, when this request's stored
	// record could not be read. Outcome is then 0 and nothing was written
	// for this request; the other requests of the batch are decided and
	// written as usual. The record stays as it is until it is forgotten.
	Err error
}

// Validate checks a claim request as every ledger does before it claims:
// the key, an owner of 1 to MaxOwnerLen bytes, a positive lease, a
// fingerprint of at most MaxFingerprintLen bytes, and an owner that is one
// of Supersede's tokens when Supersede is set. Errors wrap ErrInvalidKey
// or ErrInvalidArgument. A ledger also refuses a lease longer than its
// retention.
func (r *ClaimRequest) Validate() error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	switch {
	case r.Owner == "" || len(r.Owner) > MaxOwnerLen:
		return fmt.Errorf("claim %q: owner must be 1 to %d bytes: %w", r.Key, MaxOwnerLen, ErrInvalidArgument)
	case r.Lease <= 0:
		return fmt.Errorf("claim %q: lease must be positive, got %v: %w", r.Key, r.Lease, ErrInvalidArgument)
	case len(r.Fingerprint) > MaxFingerprintLen:
		return fmt.Errorf("claim %q: fingerprint of %d bytes, over %d: %w", r.Key, len(r.Fingerprint), MaxFingerprintLen, ErrInvalidArgument)
	case r.Supersede != "" && !r.supersedes(r.Owner):
		return fmt.Errorf("claim %q: owner %q is not one of the tokens %q + \"/\" + … that Supersede names: %w", r.Key, r.Owner, r.Supersede, ErrInvalidArgument)
	}
	return nil
}

// checkLease refuses a lease longer than the retention: the in-progress
// record would expire (and the next delivery would take the operation as
// new) while its owner still holds the lease and runs the work.
func (db *DB) checkLease(op, key string, lease time.Duration) error {
	if lease > db.retention {
		return fmt.Errorf("%s %q: lease %v is longer than the ledger's retention %v: the record would expire while the work runs: %w",
			op, key, lease, db.retention, ErrInvalidArgument)
	}
	return nil
}

// Claim takes the operation named by req.Key if it is free, in one atomic
// conditional write. See Outcome for the answers. When Claim returns
// Claimed, the claim is durable. A stored record that cannot be read is
// its error (Claim.Err), wrapping ErrCorrupt.
func (db *DB) Claim(ctx context.Context, req ClaimRequest) (Claim, error) {
	cs, err := db.ClaimBatch(ctx, []ClaimRequest{req})
	if err != nil {
		return Claim{}, err
	}
	if cs[0].Err != nil {
		return Claim{}, cs[0].Err
	}
	return cs[0], nil
}

// ClaimBatch claims many operations in one commit. Requests are applied in
// order, so a key that appears twice is Claimed once and then InProgress.
// An invalid request fails the whole batch before anything is written. A
// request whose stored record cannot be read gets that as its Claim.Err and
// does not hold up the others.
func (db *DB) ClaimBatch(ctx context.Context, reqs []ClaimRequest) ([]Claim, error) {
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, err
		}
		if err := db.checkLease("claim", reqs[i].Key, reqs[i].Lease); err != nil {
			return nil, err
		}
	}
	out := make([]Claim, len(reqs))
	err := db.write(ctx, func(s *store) error {
		for i := range reqs {
			c, err := s.claim(&reqs[i])
			if err != nil {
				return err
			}
			out[i] = c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

func (s *store) claim(req *ClaimRequest) (Claim, error) {
	cur, old, err := s.live(req.Key)
	if isUnreadable(err) {
		return Claim{Err: fmt.Errorf("claim %q: %w", req.Key, err)}, nil
	}
	if err != nil {
		return Claim{}, err
	}
	takeover := cur != nil && cur.State == StateInProgress && (!cur.LeaseExpiry.After(s.now) || req.supersedes(cur.Owner))
	if takeover {
		s.loadHistory(cur) // a takeover ends the attempt of the claim it takes over
	}
	c, rec := DecideClaim(cur, req, s.now)
	if rec != nil {
		if err := s.put(old, rec); err != nil {
			return Claim{}, err
		}
		if takeover {
			if err := s.putStory(rec, nil); err != nil {
				return Claim{}, err
			}
		}
		c.Record = *rec
	}
	return c, nil
}

// DecideClaim decides req against cur, the key's live record (nil when
// there is none), at now: the claim's answer and, when the claim takes the
// operation, the record to write (without Updated and Expires, which the
// write stamps). It is the decision every ledger makes; a shared one makes
// it with a conditional write that holds only while cur is what it read.
func DecideClaim(cur *Record, req *ClaimRequest, now time.Time) (Claim, *Record) {
	if cur == nil {
		rec := &Record{
			Key:         req.Key,
			State:       StateInProgress,
			Fingerprint: req.Fingerprint,
			Owner:       req.Owner,
			LeaseExpiry: now.Add(req.Lease),
			FirstSeen:   now,
			Claimed:     now,
			MessageID:   textcut.Cut(req.MessageID, MaxMessageIDLen),
		}
		return Claim{Outcome: Claimed, Record: *rec, LeaseLeft: req.Lease}, rec
	}
	if len(cur.Fingerprint) > 0 && len(req.Fingerprint) > 0 && !bytes.Equal(cur.Fingerprint, req.Fingerprint) {
		return Claim{Outcome: Conflict, Record: *cur}, nil
	}
	takeover, reclaimed := false, false
	switch cur.State {
	case StateComplete:
		return Claim{Outcome: AlreadyComplete, Record: *cur}, nil
	case StateFailed:
		if cur.Permanent {
			return Claim{Outcome: FailedPermanently, Record: *cur}, nil
		}
	case StateInProgress:
		reclaimed = req.supersedes(cur.Owner)
		takeover = !cur.LeaseExpiry.After(now)
		if !takeover && !reclaimed {
			return Claim{Outcome: InProgress, Record: *cur, LeaseLeft: cur.LeaseExpiry.Sub(now)}, nil
		}
	}
	rec := *cur
	if cur.State == StateInProgress {
		// The claim taken over may have started its attempt: it
		// cannot be told, so it is counted, and it ends here.
		rec.Attempts++
		outcome := AttemptLapsed
		if !takeover {
			outcome = AttemptSuperseded
		}
		rec.History = appendAttempt(cur.History, Attempt{Start: cur.Claimed, End: now, Owner: cur.Owner, Outcome: outcome})
	}
	rec.State = StateInProgress
	rec.Permanent = false
	rec.Owner = req.Owner
	rec.LeaseExpiry = now.Add(req.Lease)
	rec.Claimed = now
	if len(rec.Fingerprint) == 0 {
		rec.Fingerprint = req.Fingerprint
	}
	if req.MessageID != "" {
		rec.MessageID = textcut.Cut(req.MessageID, MaxMessageIDLen)
	}
	ClearDeadLetter(&rec)
	return Claim{Outcome: Claimed, Record: rec, Takeover: takeover, Reclaimed: reclaimed, LeaseLeft: req.Lease}, &rec
}

// Completion reports the work of a claim as done.
type Completion struct {
	Key    string
	Owner  string
	Result []byte // stored for duplicates to see; cut to MaxResultLen bytes
	// Started is when the attempt started, by the caller's clock; zero:
	// the claim's time. It dates the attempt in Record.History.
	Started time.Time
	// Payload, when not nil, is kept on the record (Record.Payload), cut
	// to MaxPayload; nil leaves what the record keeps.
	Payload *Payload
}

// Failure reports the work of a claim as failed.
type Failure struct {
	Key       string
	Owner     string
	Err       string // cut to MaxErrorLen bytes
	Permanent bool   // later claims answer FailedPermanently until Reset
	// Outage says the failure is an outage of what the work calls, not
	// the operation's own: it counts in Record.OutageFailures instead of
	// Record.OwnFailures.
	Outage bool
	// Started and Payload are as in Completion.
	Started time.Time
	Payload *Payload
}

// Complete records the claim's work as done, which ends its attempt: it is
// counted in Record.Attempts. It returns only after the commit is durable
// (fsynced); only then may the message be acknowledged.
// The record must be in progress under c.Owner: Complete fails with
// ErrNotOwner when another claim took the operation over and with ErrState
// when the record is failed (the owner reported a failure first). Once
// complete, it succeeds again for the same owner and changes nothing.
func (db *DB) Complete(ctx context.Context, c Completion) error {
	return db.CompleteBatch(ctx, []Completion{c})[0]
}

// CompleteBatch completes many claims in one commit and returns one error per
// completion, nil for those that are durable.
func (db *DB) CompleteBatch(ctx context.Context, cs []Completion) []error {
	return db.transitionBatch(ctx, "complete", len(cs), func(i int) string { return cs[i].Key }, func(s *store, i int) error {
		c := &cs[i]
		return s.transition(c.Key, c.Owner, "complete", func(rec *Record) (bool, error) {
			switch rec.State {
			case StateComplete:
				return false, nil // already done by this owner: idempotent
			case StateInProgress:
			default:
				return false, fmt.Errorf("complete %q: record is %s: %w", c.Key, rec.State, ErrState)
			}
			if rec.Attempts > 0 {
				s.loadHistory(rec) // the first attempt's completion is not stored
			}
			EndAttempt(rec, c.Started, s.now, AttemptComplete, "")
			rec.State = StateComplete
			rec.Attempts++ // the attempt ends
			rec.Completed = s.now
			rec.LeaseExpiry = time.Time{}
			rec.LastError = ""
			result := c.Result
			if len(result) > MaxResultLen {
				result = result[:MaxResultLen]
			}
			rec.Result = append([]byte(nil), result...)
			s.countMinute(false)
			s.story = c.Payload
			return true, nil
		})
	})
}

// Fail records that the claim's work failed, which ends its attempt: it is
// counted in Record.Attempts. A retryable failure lets the next Claim take
// the operation again; a permanent one makes it answer FailedPermanently.
// It fails with ErrNotOwner after a takeover.
func (db *DB) Fail(ctx context.Context, f Failure) error {
	return db.FailBatch(ctx, []Failure{f})[0]
}

// FailBatch fails many claims in one commit, one error per failure.
func (db *DB) FailBatch(ctx context.Context, fs []Failure) []error {
	return db.transitionBatch(ctx, "fail", len(fs), func(i int) string { return fs[i].Key }, func(s *store, i int) error {
		f := &fs[i]
		return s.transition(f.Key, f.Owner, "fail", func(rec *Record) (bool, error) {
			if rec.State != StateInProgress {
				return false, fmt.Errorf("fail %q: record is %s: %w", f.Key, rec.State, ErrState)
			}
			outcome := AttemptFailed
			if f.Permanent {
				outcome = AttemptFailedPermanently
			}
			s.loadHistory(rec)
			EndAttempt(rec, f.Started, s.now, outcome, f.Err)
			rec.State = StateFailed
			rec.Attempts++ // the attempt ends
			rec.Permanent = f.Permanent
			rec.LeaseExpiry = time.Time{}
			rec.LastError = textcut.Cut(f.Err, MaxErrorLen)
			CountFailure(rec, f)
			s.countMinute(true)
			s.story = f.Payload
			return true, nil
		})
	})
}

// ClaimRef names one claim: the operation's key and the claim's owner
// token.
type ClaimRef struct {
	Key   string
	Owner string
}

// Release gives back a claim whose work never started, without counting an
// attempt: the operation becomes claimable at once. A key that no attempt
// has started yet (Record.Attempts is 0) is forgotten again.
func (db *DB) Release(ctx context.Context, key, owner string) error {
	return db.ReleaseBatch(ctx, []ClaimRef{{Key: key, Owner: owner}})[0]
}

// ReleaseBatch releases many claims in one commit, one error per claim, as
// Release does each.
func (db *DB) ReleaseBatch(ctx context.Context, refs []ClaimRef) []error {
	return db.transitionBatch(ctx, "release", len(refs), func(i int) string { return refs[i].Key }, func(s *store, i int) error {
		key, owner := refs[i].Key, refs[i].Owner
		cur, old, err := s.owned(key, owner, "release")
		if err != nil {
			return err
		}
		if cur.State != StateInProgress {
			return fmt.Errorf("release %q: record is %s: %w", key, cur.State, ErrState)
		}
		if cur.Attempts == 0 {
			return s.remove(old) // no attempt ever started: forgotten
		}
		rec := *cur
		rec.State = StateFailed
		rec.Permanent = false
		rec.LeaseExpiry = time.Time{}
		return s.put(old, &rec)
	})
}

// Extend renews the claim's lease to now+lease (the heartbeat) and returns
// the new expiry, or the zero time with an error. A lease longer than the
// ledger's retention fails with ErrInvalidArgument. It fails with ErrNotOwner
// after a takeover: the caller has lost the operation and should stop its
// work. When ctx ends first it returns ctx's error, and the extension may
// still take effect.
func (db *DB) Extend(ctx context.Context, key, owner string, lease time.Duration) (time.Time, error) {
	if lease <= 0 {
		return time.Time{}, fmt.Errorf("extend %q: lease must be positive: %w", key, ErrInvalidArgument)
	}
	if err := db.checkLease("extend", key, lease); err != nil {
		return time.Time{}, err
	}
	var expiry time.Time
	errs := db.transitionBatch(ctx, "extend", 1, func(int) string { return key }, func(s *store, _ int) error {
		return s.transition(key, owner, "extend", func(rec *Record) (bool, error) {
			if rec.State != StateInProgress {
				return false, fmt.Errorf("extend %q: record is %s: %w", key, rec.State, ErrState)
			}
			rec.LeaseExpiry = s.now.Add(lease)
			expiry = rec.LeaseExpiry
			return true, nil
		})
	})
	if errs[0] != nil {
		// When ctx ended first, the committer may still be applying the
		// write: expiry is not ours to read.
		return time.Time{}, errs[0]
	}
	return expiry, nil
}

// ExtendBatch renews the leases of many claims to now+lease in one commit,
// one error per claim, as Extend does each.
func (db *DB) ExtendBatch(ctx context.Context, refs []ClaimRef, lease time.Duration) []error {
	errs := make([]error, len(refs))
	if lease <= 0 {
		for i := range errs {
			errs[i] = fmt.Errorf("extend %q: lease must be positive: %w", refs[i].Key, ErrInvalidArgument)
		}
		return errs
	}
	if len(refs) > 0 {
		if err := db.checkLease("extend", refs[0].Key, lease); err != nil {
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	}
	return db.transitionBatch(ctx, "extend", len(refs), func(i int) string { return refs[i].Key }, func(s *store, i int) error {
		key := refs[i].Key
		return s.transition(key, refs[i].Owner, "extend", func(rec *Record) (bool, error) {
			if rec.State != StateInProgress {
				return false, fmt.Errorf("extend %q: record is %s: %w", key, rec.State, ErrState)
			}
			rec.LeaseExpiry = s.now.Add(lease)
			return true, nil
		})
	})
}

// Reset makes a failed operation claimable again, permanent or not: what an
// operator does before replaying it from a dead-letter queue. Its history
// (attempts, last error) is kept. Other states fail with ErrState.
func (db *DB) Reset(ctx context.Context, key string) error {
	errs := db.transitionBatch(ctx, "reset", 1, func(int) string { return key }, func(s *store, _ int) error {
		cur, old, err := s.live(key)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("reset %q: %w", key, ErrNotFound)
		}
		if cur.State != StateFailed {
			return fmt.Errorf("reset %q: record is %s, only failed records can be reset: %w", key, cur.State, ErrState)
		}
		rec := *cur
		rec.Permanent = false
		return s.put(old, &rec)
	})
	return errs[0]
}

// Forget deletes the record of key whatever its state, so that the next
// delivery runs the operation again. Forgetting an absent key is not an
// error. A record that cannot be read (ErrCorrupt) is forgotten too: it is
// the way out for an operation whose record was damaged.
func (db *DB) Forget(ctx context.Context, key string) error {
	errs := db.transitionBatch(ctx, "forget", 1, func(int) string { return key }, func(s *store, _ int) error {
		old, err := s.get(key)
		if isUnreadable(err) {
			return s.removeUnreadable(key)
		}
		if err != nil || old == nil {
			return err
		}
		return s.remove(old)
	})
	return errs[0]
}

// transitionBatch validates n keys, runs fn for each in one commit and
// returns one error per item. fn's answers (see isAnswer) are its item's
// error, among them a stored record that cannot be read (wrapping
// ErrCorrupt); a failed commit is every item's error.
func (db *DB) transitionBatch(ctx context.Context, op string, n int, key func(int) string, fn func(s *store, i int) error) []error {
	errs := make([]error, n)
	valid := make([]bool, n)
	any := false
	for i := range n {
		if err := ValidateKey(key(i)); err != nil {
			errs[i] = fmt.Errorf("%s: %w", op, err)
			continue
		}
		valid[i], any = true, true
	}
	if !any {
		return errs
	}
	answers := make([]error, n)
	r := &request{done: make(chan error, 1), lazy: op == "complete" && ctx.Value(noDelay{}) == nil}
	r.apply = func(s *store) error {
		for i := range n {
			answers[i] = nil
			if !valid[i] {
				continue
			}
			if err := fn(s, i); err != nil {
				if isUnreadable(err) {
					err = fmt.Errorf("%s %q: %w", op, key(i), err)
				}
				if isAnswer(err) {
					answers[i] = err
					continue
				}
				return err
			}
		}
		return nil
	}
	err := db.writeRequest(ctx, r)
	for i := range n {
		if !valid[i] {
			continue
		}
		if err != nil {
			errs[i] = fmt.Errorf("%s %q: %w", op, key(i), err)
		} else {
			errs[i] = answers[i]
		}
	}
	return errs
}

// isAnswer reports whether err is an outcome for the caller (wrong owner,
// wrong state, no such record, a record that cannot be read) rather than a
// failure of the transaction.
func isAnswer(err error) bool {
	if isUnreadable(err) {
		return true
	}
	for _, target := range []error{ErrNotOwner, ErrState, ErrNotFound, ErrInvalidArgument} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// owned returns the live record of key if owner holds it.
func (s *store) owned(key, owner, op string) (cur, old *Record, err error) {
	cur, old, err = s.live(key)
	if err != nil {
		return nil, nil, err
	}
	if cur == nil {
		return nil, nil, fmt.Errorf("%s %q: %w", op, key, ErrNotFound)
	}
	if cur.Owner != owner {
		return nil, nil, fmt.Errorf("%s %q: claim %q was taken over by %q: %w", op, key, owner, cur.Owner, ErrNotOwner)
	}
	return cur, old, nil
}

// transition applies change to the live record of key held by owner and
// writes it when change reports a modification.
func (s *store) transition(key, owner, op string, change func(rec *Record) (bool, error)) error {
	cur, old, err := s.owned(key, owner, op)
	if err != nil {
		return err
	}
	rec := &s.next
	*rec = *cur
	s.story = nil
	modified, err := change(rec)
	if err != nil || !modified {
		return err
	}
	if err := s.put(old, rec); err != nil {
		return err
	}
	if len(rec.History) > 0 || s.story != nil {
		return s.putStory(rec, s.story)
	}
	return nil
}

// noDelay marks a context from WithoutDelay.
type noDelay struct{}

// WithoutDelay returns ctx marked so that completions written under it
// commit at once rather than wait up to Options.CompleteDelay for other
// writes: for a caller that holds room other work waits for until the
// completion is durable (a worker whose handlers are all taken), the wait
// would cost more than the fsync it may save.
func WithoutDelay(ctx context.Context) context.Context {
	return context.WithValue(ctx, noDelay{}, true)
}
