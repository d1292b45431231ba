package dynamodb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// pingKey is the item a ping asks to update: the condition it sets never
// holds, so nothing is ever written.
const pingKey = "meta#ping"

// Ping reports whether DynamoDB answers and would let this host write the
// ledger's table, without writing: it sends a conditional update whose
// condition never holds, which DynamoDB refuses as a failed condition only
// after it checked the table and the write permission. It fails with an
// error wrapping ledger.ErrUnavailable when DynamoDB does not answer,
// ledger.ErrNoSchema when the table is gone, and DynamoDB's error when the
// permission is missing.
func (l *Ledger) Ping(ctx context.Context) error {
	if err := l.enter(); err != nil {
		return err
	}
	defer l.calls.Done()
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                l.table,
			Key:                      map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: pingKey}},
			UpdateExpression:         aws.String("SET #w = :w"),
			ConditionExpression:      aws.String("attribute_exists(#pk) AND attribute_not_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#w": attrWriteID, "#pk": attrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":w": &types.AttributeValueMemberS{Value: "ping"},
			},
		})
		return err
	})
	if err == nil || isConditionFailed(err) {
		return nil
	}
	return fmt.Errorf("ping ledger table %s: %w", *l.table, err)
}
