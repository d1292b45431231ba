package dynamodb_test

import (
	"context"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// newTable makes a table of the test's own with Init and returns its
// options, with the suite's retention and clock.
func newTable(t testing.TB, c *ddb.Client, clock *ledgertest.Clock) dynamodb.Options {
	t.Helper()
	opts := dynamodb.Options{Table: dynamotest.Table(t, c), Retention: ledgertest.Retention}
	if clock != nil {
		opts.Now = clock.Now
	}
	if _, err := dynamodb.Init(context.Background(), c, opts); err != nil {
		t.Fatal(err)
	}
	return opts
}

// open opens a ledger on opts' table, closed when the test ends.
func open(t testing.TB, c dynamodb.Client, opts dynamodb.Options) *dynamodb.Ledger {
	t.Helper()
	l, err := dynamodb.Open(context.Background(), c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLedger_Suite(t *testing.T) {
	t.Parallel()
	c := dynamotest.NewClient(t, nil)
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.Ledger {
		return open(t, c, newTable(t, c, clock))
	})
}

// Each handle has a client, and so connections, of its own, as a host
// would.
func TestLedger_Shared(t *testing.T) {
	t.Parallel()
	ledgertest.RunShared(t, func(t *testing.T, clock *ledgertest.Clock, n int) []ledgertest.Ledger {
		opts := newTable(t, dynamotest.NewClient(t, nil), clock)
		ls := make([]ledgertest.Ledger, n)
		for i := range ls {
			ls[i] = open(t, dynamotest.NewClient(t, nil), opts)
		}
		return ls
	})
}
