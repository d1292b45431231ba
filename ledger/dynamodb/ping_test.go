package dynamodb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
)

// Ping says whether the table takes writes, and writes nothing.
func TestLedger_Ping(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupFaulty(t, 2, nil)
	must(t, s.l.Ping(ctx))
	out, err := s.client.Scan(ctx, &ddb.ScanInput{TableName: aws.String(s.opts.Table)})
	must(t, err)
	if len(out.Items) != 1 { // the schema item alone
		t.Errorf("the table holds %d items after a ping, want the schema item alone", len(out.Items))
	}
	s.faults.Always("UpdateItem", dynamotest.ServerError)
	if err := s.l.Ping(ctx); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("ping while DynamoDB fails: %v, want ErrUnavailable", err)
	}
	if _, err := s.client.DeleteTable(ctx, &ddb.DeleteTableInput{TableName: aws.String(s.opts.Table)}); err != nil {
		t.Fatal(err)
	}
	if err := s.other.Ping(ctx); !errors.Is(err, ledger.ErrNoSchema) {
		t.Fatalf("ping of a deleted table: %v, want ErrNoSchema", err)
	}
}
