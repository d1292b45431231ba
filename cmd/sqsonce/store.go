package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

// store is an open ledger of any backend: what `run` hands the worker, and
// what replay and the ledger commands read and change. *ledger.DB,
// *postgres.Ledger and *dynamodb.Ledger are stores.
type store interface {
	worker.Ledger
	Get(ctx context.Context, key string) (ledger.Record, error)
	ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error
	List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error)
	Overview(ctx context.Context, since time.Time) (ledger.Overview, error)
	Stats(ctx context.Context) (ledger.Stats, error)
	Forget(ctx context.Context, key string) error
	Reset(ctx context.Context, key string) error
	flowAccess
	BucketLimits(ctx context.Context, name string) (rate float64, burst int, found bool, err error)
	Close() error
}

// Every backend is a store; the shared ones can be pinged, so that a worker
// waits for them without receiving while they are away.
var (
	_ store         = (*ledger.DB)(nil)
	_ store         = (*postgres.Ledger)(nil)
	_ store         = (*dynamodb.Ledger)(nil)
	_ worker.Pinger = (*postgres.Ledger)(nil)
	_ worker.Pinger = (*dynamodb.Ledger)(nil)
)

// openTimeout bounds how long a command waits for a shared store at start:
// an unreachable database is an error within it, not a hang.
const openTimeout = 15 * time.Second

// openStore opens the configured backend for a worker. For bbolt, onCommit
// observes the committer; the shared stores have none.
func openStore(ctx context.Context, cfg Config, onCommit func(int, time.Duration, error)) (store, error) {
	switch cfg.Ledger.Backend {
	case BackendPostgres:
		ctx, cancel := context.WithTimeout(ctx, openTimeout)
		defer cancel()
		return postgres.Open(ctx, postgresOptions(cfg.Ledger))
	case BackendDynamoDB:
		return openDynamoDB(ctx, cfg)
	}
	delay := cfg.Ledger.CompleteDelay.Duration
	if delay == 0 {
		delay = -1 // the ledger's zero picks its default; 0s here means none
	}
	return ledger.Open(cfg.Ledger.Path, ledger.Options{Retention: cfg.Ledger.Retention.Duration, CompleteDelay: delay, OnCommit: onCommit})
}

// initStore creates the configured backend's table (or file) if it does not
// exist yet, and says what it did.
func initStore(ctx context.Context, cfg Config) (string, error) {
	switch cfg.Ledger.Backend {
	case BackendPostgres:
		ctx, cancel := context.WithTimeout(ctx, openTimeout)
		defer cancel()
		if err := postgres.Init(ctx, postgresOptions(cfg.Ledger)); err != nil {
			return "", err
		}
		return fmt.Sprintf("PostgreSQL table %s is ready", cfg.Ledger.Table), nil
	case BackendDynamoDB:
		return initDynamoDB(ctx, cfg)
	}
	db, err := ledger.Open(cfg.Ledger.Path, ledger.Options{Retention: cfg.Ledger.Retention.Duration, LockTimeout: 300 * time.Millisecond})
	if errors.Is(err, ledger.ErrLocked) {
		return fmt.Sprintf("ledger file %s is in use by a running worker: nothing to do", cfg.Ledger.Path), nil
	}
	if err != nil {
		return "", err
	}
	if err := db.Close(); err != nil {
		return "", err
	}
	return fmt.Sprintf("ledger file %s is ready", cfg.Ledger.Path), nil
}

func postgresOptions(l LedgerConfig) postgres.Options {
	return postgres.Options{URL: l.URL, Table: l.Table, Retention: l.Retention.Duration}
}

// sharedLedger is a shared store reached directly by an admin command.
type sharedLedger struct {
	store
	via string
}

func (s sharedLedger) Via() string { return s.via }
