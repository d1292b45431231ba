package dynamotest_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
)

func createTable(t *testing.T, c *ddb.Client) string {
	t.Helper()
	name := dynamotest.Table(t, c)
	ctx := context.Background()
	_, err := c.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := ddb.NewTableExistsWaiter(c, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay = 20 * time.Millisecond
		o.MaxDelay = 200 * time.Millisecond
	})
	if err := w.Wait(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return name
}

// A lost answer is a request that took effect: the item is there although
// the client got a connection reset. Other faults never reach the server.
func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := dynamotest.NewFaults(nil)
	c := dynamotest.NewClient(t, f, func(o *ddb.Options) { o.RetryMaxAttempts = 1 })
	table := createTable(t, c)
	put := func(pk string) error {
		_, err := c.PutItem(ctx, &ddb.PutItemInput{
			TableName: aws.String(table),
			Item:      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		})
		return err
	}
	exists := func(pk string) bool {
		out, err := c.GetItem(ctx, &ddb.GetItemInput{
			TableName:      aws.String(table),
			Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Item) > 0
	}

	f.Next("PutItem", dynamotest.LostAck, dynamotest.Reset, dynamotest.Throttle, dynamotest.ServerError)
	if err := put("lost"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("lost answer: err %v, want a connection reset", err)
	}
	if !exists("lost") {
		t.Fatal("the request whose answer was lost did not take effect")
	}
	if err := put("reset"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reset: err %v, want a connection reset", err)
	}
	var throttled *types.ThrottlingException
	if err := put("throttled"); !errors.As(err, &throttled) {
		t.Fatalf("throttle: err %v, want ThrottlingException", err)
	}
	var internal *types.InternalServerError
	if err := put("failed"); !errors.As(err, &internal) {
		t.Fatalf("server error: err %v, want InternalServerError", err)
	}
	for _, pk := range []string{"reset", "throttled", "failed"} {
		if exists(pk) {
			t.Errorf("%s reached the server", pk)
		}
	}
	if err := put("fine"); err != nil || !exists("fine") {
		t.Fatalf("after the scripted faults: %v", err)
	}
	if got := f.Requests("PutItem"); got != 5 {
		t.Errorf("%d PutItem requests counted, want 5", got)
	}
	if got := f.Count("PutItem", dynamotest.LostAck); got != 1 {
		t.Errorf("%d lost answers counted, want 1", got)
	}

	f.Always("GetItem", dynamotest.Timeout)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.GetItem(tctx, &ddb.GetItemInput{
		TableName: aws.String(table),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "fine"}},
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: err %v, want the context's deadline", err)
	}
	f.Always("GetItem", "")
}
