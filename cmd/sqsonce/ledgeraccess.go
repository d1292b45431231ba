package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// ledgerAccess is what the admin commands and replay need of a ledger,
// whether this process opened the file itself or reaches it through the
// socket of the worker that holds it (bbolt allows one writer per file, and
// a running worker keeps the file open).
type ledgerAccess interface {
	Get(ctx context.Context, key string) (ledger.Record, error)
	ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error
	List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error)
	Overview(ctx context.Context, since time.Time) (ledger.Overview, error)
	Stats(ctx context.Context) (ledger.Stats, error)
	Forget(ctx context.Context, key string) error
	Reset(ctx context.Context, key string) error
	flowAccess
	Close() error
	// Via says how the ledger is reached, for messages: "file", "worker
	// socket", "postgres" or "dynamodb".
	Via() string
}

// flowAccess is what `sqsonce flow` and check need of a ledger: its flow
// documents, written with a compare-and-set, and its registry of
// processes, on the ledger's clock.
type flowAccess interface {
	GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error)
	PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error)
	DeleteFlow(ctx context.Context, scope string, ifVersion int64) error
	ListFlows(ctx context.Context) ([]ledger.FlowDoc, error)
	Processes(ctx context.Context) ([]ledger.Process, error)
}

// localLedger is a ledger file opened by this process.
type localLedger struct{ *ledger.DB }

func (localLedger) Via() string { return "file" }

// openLedgerAccess opens the configured ledger. A shared store is opened
// directly. A bbolt ledger is opened from its file; when another process
// (a running worker) holds the file, it connects to that worker's socket
// instead (socketPath), which serves the same operations.
func openLedgerAccess(ctx context.Context, full Config) (ledgerAccess, error) {
	if full.Ledger.Backend != BackendBbolt {
		st, err := openStore(ctx, full, nil)
		if err != nil {
			return nil, err
		}
		return sharedLedger{store: st, via: full.Ledger.Backend}, nil
	}
	cfg := full.Ledger
	db, err := ledger.Open(cfg.Path, ledger.Options{Retention: cfg.Retention.Duration, LockTimeout: 300 * time.Millisecond})
	if err == nil {
		return localLedger{db}, nil
	}
	if !errors.Is(err, ledger.ErrLocked) {
		return nil, err
	}
	c, serr := dialLedgerSocket(ctx, socketPath(cfg.Path))
	if serr != nil {
		return nil, fmt.Errorf("%w; and its worker's socket %s: %v", err, socketPath(cfg.Path), serr)
	}
	return c, nil
}

// socketPath is where a running worker serves its ledger: beside the file.
func socketPath(ledgerPath string) string { return ledgerPath + ".sock" }
