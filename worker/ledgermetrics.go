package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// ledgerCall is the call label of the ledger metrics.
type ledgerCall int

const (
	callClaimBatch ledgerCall = iota
	callCompleteBatch
	callFail
	callReleaseBatch
	callExtendBatch
	callSweep
	callPing
	numLedgerCalls
)

var ledgerCallLabels = [numLedgerCalls]string{"claim_batch", "complete_batch", "fail", "release_batch", "extend_batch", "sweep", "ping"}

// instrumentLedger returns l with its calls timed and their failures counted
// in m. The result is a Pinger when l is one.
func instrumentLedger(l Ledger, m *metrics) Ledger {
	il := instrumentedLedger{Ledger: l, m: m}
	if p, ok := l.(Pinger); ok {
		return pingingLedger{instrumentedLedger: il, p: p}
	}
	return il
}

// instrumentedLedger times the calls of a Ledger and counts those that
// failed.
type instrumentedLedger struct {
	Ledger
	m *metrics
}

// observe records one call of c that started at start and returned *err.
// A method defers it with a pointer to its result.
func (l instrumentedLedger) observe(c ledgerCall, start time.Time, err *error) {
	l.record(c, start, ledgerFailure(*err))
}

// observeBatch is observe of a batch call: one failure when any of *errs
// is one.
func (l instrumentedLedger) observeBatch(c ledgerCall, start time.Time, errs *[]error) {
	l.record(c, start, slices.ContainsFunc(*errs, ledgerFailure))
}

func (l instrumentedLedger) record(c ledgerCall, start time.Time, failed bool) {
	l.m.ledgerSeries[c].Observe(time.Since(start).Seconds())
	if failed {
		l.m.ledgerFailed[c].Inc()
	}
}

// ledgerFailure reports whether err, from a ledger call, says the ledger
// failed: nil is no failure, and neither is an answer about the record
// (another claim owns it, it is in another state, it is gone) or a call
// cancelled by the worker. A call that ran out of time is a failure.
func ledgerFailure(err error) bool {
	return err != nil && !errors.Is(err, ledger.ErrNotOwner) && !errors.Is(err, ledger.ErrState) &&
		!errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, context.Canceled)
}

func (l instrumentedLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) (_ []ledger.Claim, err error) {
	defer l.observe(callClaimBatch, time.Now(), &err)
	return l.Ledger.ClaimBatch(ctx, reqs)
}

// CompleteBatch counts one failure when any of the completions failed.
func (l instrumentedLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) (errs []error) {
	defer l.observeBatch(callCompleteBatch, time.Now(), &errs)
	return l.Ledger.CompleteBatch(ctx, cs)
}

func (l instrumentedLedger) Fail(ctx context.Context, f ledger.Failure) (err error) {
	defer l.observe(callFail, time.Now(), &err)
	return l.Ledger.Fail(ctx, f)
}

// ReleaseBatch counts one failure when any of the releases failed.
func (l instrumentedLedger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) (errs []error) {
	defer l.observeBatch(callReleaseBatch, time.Now(), &errs)
	return l.Ledger.ReleaseBatch(ctx, refs)
}

// ExtendBatch counts one failure when any of the extensions failed.
func (l instrumentedLedger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) (errs []error) {
	defer l.observeBatch(callExtendBatch, time.Now(), &errs)
	return l.Ledger.ExtendBatch(ctx, refs, lease)
}

func (l instrumentedLedger) Sweep(ctx context.Context) (_ int, err error) {
	defer l.observe(callSweep, time.Now(), &err)
	return l.Ledger.Sweep(ctx)
}

// pingingLedger is an instrumentedLedger over a Ledger that is a Pinger.
type pingingLedger struct {
	instrumentedLedger
	p Pinger
}

func (l pingingLedger) Ping(ctx context.Context) (err error) {
	defer l.observe(callPing, time.Now(), &err)
	return l.p.Ping(ctx)
}
