package postgres_test

import (
	"context"
	"testing"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// setup creates the ledger's table in a schema of the test's own and returns
// the options that open it.
func setup(t testing.TB, clock *ledgertest.Clock) postgres.Options {
	t.Helper()
	url, _ := pgtest.Schema(t)
	opts := postgres.Options{URL: url, Retention: ledgertest.Retention}
	if clock != nil {
		opts.Now = clock.Now
	}
	if err := postgres.Init(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	return opts
}

func open(t testing.TB, opts postgres.Options) *postgres.Ledger {
	t.Helper()
	l, err := postgres.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLedger_Suite(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.Ledger {
		return open(t, setup(t, clock))
	})
}

func TestLedger_SuiteShared(t *testing.T) {
	t.Parallel()
	ledgertest.RunShared(t, func(t *testing.T, clock *ledgertest.Clock, n int) []ledgertest.Ledger {
		opts := setup(t, clock)
		ls := make([]ledgertest.Ledger, n)
		for i := range ls {
			ls[i] = open(t, opts)
		}
		return ls
	})
}
