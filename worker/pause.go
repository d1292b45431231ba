package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// PauseStore is what pausing and resuming by hand needs of a ledger: its
// flow documents, written with a compare-and-set (see FlowLedger).
type PauseStore interface {
	GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error)
	PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error)
	DeleteFlow(ctx context.Context, scope string, ifVersion int64) error
}

// ErrPauseTooLong is wrapped by PauseByHand when the pause, from its start,
// would not end below the queue's message retention: messages would expire
// in SQS while paused.
var ErrPauseTooLong = errors.New("messages would expire in SQS while paused")

// casTries bounds the compare-and-sets of a pause or resume by hand while
// workers write the same document.
const casTries = 5

// Paused is what PauseByHand did: the pause's document as written, and
// what the scope's document said before.
type Paused struct {
	Doc     PauseDoc
	Written ledger.FlowRead
	Before  ledger.FlowRead
	Was     PauseDoc // zero when the scope was not paused
}

// PauseByHand pauses scope's intake on every worker sharing the ledger,
// until until (this host's clock), for reason, by whom: no receives, no
// probes. It replaces an automatic pause, keeping its start; the whole
// pause, from that start, must end below retention (ErrPauseTooLong). It
// ends at until, or when Resume lifts it.
func PauseByHand(ctx context.Context, l PauseStore, scope string, until time.Time, reason, by string, retention time.Duration) (Paused, error) {
	for range casTries {
		r, err := l.GetFlow(ctx, scope)
		if err != nil {
			return Paused{}, err
		}
		was, _ := DecodePause(r)
		since := r.Now
		if was.State == PausePaused && was.Since.Before(since) {
			since = was.Since
		}
		ttl := time.Until(until)
		switch span := r.Now.Sub(since) + ttl; {
		case ttl <= 0:
			return Paused{}, fmt.Errorf("pause until %s: that time has passed: %w", until.UTC().Format(time.RFC3339), ledger.ErrInvalidArgument)
		case retention > 0 && span >= retention:
			return Paused{}, fmt.Errorf("a pause until %s would last %v, from %s, not below the queue's message retention (%v): %w",
				until.UTC().Format(time.RFC3339), span.Round(time.Second), since.UTC().Format(time.RFC3339), retention, ErrPauseTooLong)
		}
		doc := PauseDoc{State: PausePaused, Manual: true, Since: since, Reason: reason, By: by}
		data, err := json.Marshal(doc)
		if err != nil {
			return Paused{}, err
		}
		w, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: scope, Data: data, TTL: ttl}, r.Doc.Version)
		if errors.Is(err, ledger.ErrConflict) {
			continue
		}
		if err != nil {
			return Paused{}, err
		}
		return Paused{Doc: doc, Written: w, Before: r, Was: was}, nil
	}
	return Paused{}, fmt.Errorf("pause %q: the pause document kept changing under %d tries (workers writing it): try again: %w", scope, casTries, ledger.ErrConflict)
}

// Resume lifts scope's pause, whatever made it: the intake opens on every
// worker within its next read of the document (a second). It returns what
// the pause was, and false when there was none.
func Resume(ctx context.Context, l PauseStore, scope string) (was PauseDoc, before ledger.FlowRead, found bool, err error) {
	for range casTries {
		r, err := l.GetFlow(ctx, scope)
		if err != nil {
			return PauseDoc{}, r, false, err
		}
		if !r.Found {
			return PauseDoc{}, r, false, nil
		}
		was, _ := DecodePause(r)
		err = l.DeleteFlow(ctx, scope, r.Doc.Version)
		if errors.Is(err, ledger.ErrConflict) || errors.Is(err, ledger.ErrNotFound) {
			continue // changed or ended meanwhile: read it again
		}
		return was, r, err == nil, err
	}
	return PauseDoc{}, ledger.FlowRead{}, false, fmt.Errorf("resume %q: the pause document kept changing under %d tries (workers writing it): try again: %w", scope, casTries, ledger.ErrConflict)
}

// DecodePause reads the pause document of r; false when r has none or it
// is not one.
func DecodePause(r ledger.FlowRead) (PauseDoc, bool) {
	var d PauseDoc
	if !r.Found || json.Unmarshal(r.Doc.Data, &d) != nil || d.State == "" {
		return PauseDoc{}, false
	}
	return d, true
}
