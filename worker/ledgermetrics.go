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

// observe records one call that started at start.
func (l instrumentedLedger) observe(c ledgerCall, start time.Time, failed bool) {
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

func (l instrumentedLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	start := time.Now()
	claims, err := l.Ledger.ClaimBatch(ctx, reqs)
	l.observe(callClaimBatch, start, ledgerFailure(err))
	return claims, err
}

// CompleteBatch counts one failure when any of the completions failed.
func (l instrumentedLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	start := time.Now()
	errs := l.Ledger.CompleteBatch(ctx, cs)
	l.observe(callCompleteBatch, start, slices.ContainsFunc(errs, ledgerFailure))
	return errs
}

func (l instrumentedLedger) Fail(ctx context.Context, f ledger.Failure) error {
	start := time.Now()
	err := l.Ledger.Fail(ctx, f)
	l.observe(callFail, start, ledgerFailure(err))
	return err
}

// ReleaseBatch counts one failure when any of the releases failed.
func (l instrumentedLedger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	start := time.Now()
	errs := l.Ledger.ReleaseBatch(ctx, refs)
	l.observe(callReleaseBatch, start, slices.ContainsFunc(errs, ledgerFailure))
	return errs
}

// ExtendBatch counts one failure when any of the extensions failed.
func (l instrumentedLedger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	start := time.Now()
	errs := l.Ledger.ExtendBatch(ctx, refs, lease)
	l.observe(callExtendBatch, start, slices.ContainsFunc(errs, ledgerFailure))
	return errs
}

func (l instrumentedLedger) Sweep(ctx context.Context) (int, error) {
	start := time.Now()
	n, err := l.Ledger.Sweep(ctx)
	l.observe(callSweep, start, ledgerFailure(err))
	return n, err
}

// pingingLedger is an instrumentedLedger over a Ledger that is a Pinger.
type pingingLedger struct {
	instrumentedLedger
	p Pinger
}

func (l pingingLedger) Ping(ctx context.Context) error {
	start := time.Now()
	err := l.p.Ping(ctx)
	l.observe(callPing, start, ledgerFailure(err))
	return err
}
