package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// validate checks req as every ledger does, the lease against the
// retention included.
func (l *Ledger) validate(req *ledger.ClaimRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	return l.checkLease("claim", req.Key, req.Lease)
}

// checkLease refuses a lease longer than the retention: the in-progress
// record would expire, and the next delivery take the operation as new,
// while its owner still runs the work.
func (l *Ledger) checkLease(op, key string, lease time.Duration) error {
	if lease > l.cfg.retention {
		return fmt.Errorf("%s %q: lease %v is longer than the ledger's retention %v: the record would expire while the work runs: %w",
			op, key, lease, l.cfg.retention, ledger.ErrInvalidArgument)
	}
	return nil
}

// Claim takes the operation named by req.Key if it is free, in one
// conditional write. See ledger.Outcome for the answers. When Claim returns
// Claimed, the claim is committed.
func (l *Ledger) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, error) {
	cs, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{req})
	if err != nil {
		return ledger.Claim{}, err
	}
	return cs[0], nil
}

// ClaimBatch claims many operations in one transaction and one round trip.
// Requests for the same key are decided in their order, so a key that
// appears twice is Claimed once and then InProgress. An invalid request
// fails the whole batch before anything is sent. The batch is all or
// nothing: on error no claim of it was made, unless the error wraps
// ledger.ErrUnavailable, when its outcome is unknown (see the package
// documentation). Claim.Err is always nil: a row of this table is always
// readable.
func (l *Ledger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	for i := range reqs {
		if err := l.validate(&reqs[i]); err != nil {
			return nil, err
		}
	}
	if len(reqs) == 0 {
		return []ledger.Claim{}, nil
	}
	// Key order, so that two batches lock their records in one order
	// and never wait for each other in a cycle; a stable sort keeps the
	// requests for one key in their order.
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(reqs[a].Key, reqs[b].Key) })
	keys := make([][]byte, 0, len(reqs))
	for p, i := range order {
		if p == 0 || reqs[order[p-1]].Key != reqs[i].Key {
			keys = append(keys, []byte(reqs[i].Key))
		}
	}

	out := make([]ledger.Claim, len(reqs))
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		now := l.clock()
		b := &pgx.Batch{}
		for p, i := range order {
			r := &reqs[i]
			args := []any{now, micros(l.cfg.retention), []byte(r.Key), nonEmpty(r.Fingerprint),
				[]byte(r.Owner), micros(r.Lease), bytesOrNil(textcut.Cut(r.MessageID, ledger.MaxMessageIDLen))}
			if r.Supersede == "" {
				b.Queue(l.q.claim, args...)
			} else {
				b.Queue(l.q.claimSupersede, append(args, []byte(r.Supersede+"/"))...)
			}
			if p+1 < len(order) && reqs[order[p+1]].Key == r.Key {
				// The next request writes the same record: read what
				// decided this one first.
				b.Queue(l.q.readOne, now, []byte(r.Key))
			}
		}
		b.Queue(l.q.readMany, now, keys)

		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		taken := make([]*row, len(reqs))
		found := make([]*row, len(reqs))
		for p, i := range order {
			var reclaimed bool
			rw, _, err := scanRecord(br.QueryRow(), &reclaimed)
			rw.reclaimed = reclaimed
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return err
			default:
				taken[i] = &rw
			}
			if p+1 < len(order) && reqs[order[p+1]].Key == reqs[i].Key {
				var at time.Time
				rw, _, err := scanRecord(br.QueryRow(), &at)
				if err != nil {
					return err
				}
				rw.at = at
				found[i] = &rw
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		last := map[string]*row{}
		for rows.Next() {
			var at time.Time
			rw, _, err := scanRecord(rows, &at)
			if err != nil {
				rows.Close()
				return err
			}
			rw.at = at
			last[rw.rec.Key] = &rw
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		for i := range reqs {
			if found[i] == nil {
				found[i] = last[reqs[i].Key]
			}
			c, err := decide(&reqs[i], taken[i], found[i], again)
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
	// The counts of completions committed with a transactional handler's
	// writes (see OpTx) are written here too, when due: those commits
	// only count, since some hold their connection while they do.
	l.flushMinutesIfDue(ctx)
	return out, nil
}

// decide turns what a claim's statement wrote (taken, nil when it wrote
// nothing) and the record it then found into the claim's answer. again is
// true when an earlier attempt of the call may have committed: a record in
// progress under the request's own owner token is then that attempt's
// claim.
func decide(req *ledger.ClaimRequest, taken, found *row, again bool) (ledger.Claim, error) {
	if taken != nil {
		return ledger.Claim{Outcome: ledger.Claimed, Record: taken.rec, Takeover: taken.takeover, Reclaimed: taken.reclaimed, LeaseLeft: req.Lease}, nil
	}
	if found == nil {
		return ledger.Claim{}, fmt.Errorf("claim %q: the statement neither took the record nor found it", req.Key)
	}
	cur := found.rec
	left := cur.LeaseExpiry.Sub(found.at)
	if again && cur.State == ledger.StateInProgress && cur.Owner == req.Owner {
		return ledger.Claim{Outcome: ledger.Claimed, Record: cur, Takeover: found.takeover, LeaseLeft: left}, nil
	}
	if len(cur.Fingerprint) > 0 && len(req.Fingerprint) > 0 && !bytes.Equal(cur.Fingerprint, req.Fingerprint) {
		return ledger.Claim{Outcome: ledger.Conflict, Record: cur}, nil
	}
	switch {
	case cur.State == ledger.StateComplete:
		return ledger.Claim{Outcome: ledger.AlreadyComplete, Record: cur}, nil
	case cur.State == ledger.StateFailed && cur.Permanent:
		return ledger.Claim{Outcome: ledger.FailedPermanently, Record: cur}, nil
	case cur.State == ledger.StateInProgress:
		return ledger.Claim{Outcome: ledger.InProgress, Record: cur, LeaseLeft: left}, nil
	}
	return ledger.Claim{}, fmt.Errorf("claim %q: the statement did not take a record that is %s", req.Key, cur.State)
}
