package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsonce/sqsonce/ledger"
)

// InitReport says what Init did and found.
type InitReport struct {
	// Created is true when this call created the table, false when it
	// existed (made by an earlier Init, or by another host's at the same
	// time).
	Created bool
	// TTL is true when DynamoDB deletes expired items by itself (TTL
	// deletion on the ttl attribute, on or being turned on).
	TTL bool
	// TTLNote says, when TTL is false, why: the service does not have TTL
	// (dynalite), the credentials may not change it, or TTL is on for
	// another attribute. Expired items then stay until Sweep removes them.
	TTLNote string
}

// initWait bounds how long Init waits for a new table to become active.
const initWait = 5 * time.Minute

// Init creates the ledger's table if it does not exist (a partition key
// "pk" of type S, on-demand billing), waits until it is active, turns on
// TTL deletion on its ttl attribute where the service has it, and records
// the schema version in the table. It is idempotent, and safe when several
// hosts run it at once: one creates the table, the others wait for it.
//
// A service without TTL (dynalite) is not a failure: the report says so,
// and Sweep keeps the table bounded. Init fails with an error wrapping
// ledger.ErrSchema when the table records a newer schema, ledger.ErrCorrupt
// when a table of that name has another key schema, and
// ledger.ErrUnavailable when DynamoDB does not answer.
func Init(ctx context.Context, client Client, opts Options) (InitReport, error) {
	var report InitReport
	if client == nil {
		return report, fmt.Errorf("init dynamodb ledger: nil client: %w", ledger.ErrInvalidArgument)
	}
	opts, err := opts.resolve()
	if err != nil {
		return report, err
	}
	l := &Ledger{client: client, table: aws.String(opts.Table), timeout: opts.Timeout, now: opts.Now, retention: opts.Retention}
	fail := func(err error) (InitReport, error) {
		return report, fmt.Errorf("init dynamodb ledger %s: %w", opts.Table, err)
	}
	report.Created, err = l.createTable(ctx)
	if err != nil {
		return fail(err)
	}
	t, err := l.waitActive(ctx)
	if err != nil {
		return fail(err)
	}
	if err := checkTable(t, opts.Table); err != nil {
		return fail(err)
	}
	report.TTL, report.TTLNote, err = l.enableTTL(ctx)
	if err != nil {
		return fail(err)
	}
	if err := l.writeSchema(ctx); err != nil {
		return fail(err)
	}
	if err := l.writeFlowSchema(ctx); err != nil {
		return fail(err)
	}
	return report, nil
}

// createTable creates the table unless it exists, and reports whether this
// call created it.
func (l *Ledger) createTable(ctx context.Context) (bool, error) {
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: l.table})
		return err
	})
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, ledger.ErrNoSchema) {
		return false, err
	}
	err = l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.CreateTable(ctx, &ddb.CreateTableInput{
			TableName: l.table,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			},
			BillingMode: types.BillingModePayPerRequest,
		})
		return err
	})
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return false, nil // another host is creating it
	}
	if err != nil {
		return false, fmt.Errorf("create table: %w", err)
	}
	return true, nil
}

// waitActive polls the table until it is active, for at most initWait.
func (l *Ledger) waitActive(ctx context.Context) (*types.TableDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, initWait)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		var out *ddb.DescribeTableOutput
		err := l.call(ctx, func(ctx context.Context) (err error) {
			out, err = l.client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: l.table})
			return err
		})
		// Right after CreateTable, DynamoDB may not know the table yet.
		if err != nil && !errors.Is(err, ledger.ErrNoSchema) {
			return nil, err
		}
		if err == nil && out.Table != nil && out.Table.TableStatus != types.TableStatusCreating {
			return out.Table, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the table to become active: %w", ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// enableTTL turns on TTL deletion on the ttl attribute. A service or a
// table where that cannot be done is reported in the note, not failed.
func (l *Ledger) enableTTL(ctx context.Context) (bool, string, error) {
	on, note, err := l.describeTTL(ctx)
	if err != nil || on || note != "" {
		return on, note, err
	}
	err = l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.UpdateTimeToLive(ctx, &ddb.UpdateTimeToLiveInput{
			TableName: l.table,
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(attrTTL),
				Enabled:       aws.Bool(true),
			},
		})
		return err
	})
	if err == nil {
		return true, "", nil
	}
	if errors.Is(err, ledger.ErrUnavailable) || ctx.Err() != nil {
		return false, "", fmt.Errorf("enable TTL: %w", err)
	}
	// Another host may have turned it on just now ("already enabled").
	if on, _, derr := l.describeTTL(ctx); derr == nil && on {
		return true, "", nil
	}
	return false, ttlNote(err), nil
}

// describeTTL reports whether TTL deletion is on (or being turned on) for
// the ttl attribute; a note when it cannot be (TTL on another attribute,
// or not known to the service) and an empty one when Init may turn it on.
func (l *Ledger) describeTTL(ctx context.Context) (bool, string, error) {
	var out *ddb.DescribeTimeToLiveOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.DescribeTimeToLive(ctx, &ddb.DescribeTimeToLiveInput{TableName: l.table})
		return err
	})
	if err != nil {
		if errors.Is(err, ledger.ErrUnavailable) || ctx.Err() != nil {
			return false, "", fmt.Errorf("describe TTL: %w", err)
		}
		return false, ttlNote(err), nil
	}
	d := out.TimeToLiveDescription
	if d == nil {
		return false, "", nil
	}
	switch d.TimeToLiveStatus {
	case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
		if a := aws.ToString(d.AttributeName); a != "" && a != attrTTL {
			return false, fmt.Sprintf("TTL deletion is on for attribute %q, not %q: expired records stay until Sweep removes them", a, attrTTL), nil
		}
		return true, "", nil
	case types.TimeToLiveStatusDisabling:
		return false, "TTL deletion is being turned off on this table and cannot be turned on for a while: run init again later; until then Sweep removes expired records", nil
	}
	return false, "", nil
}

func ttlNote(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "UnknownOperationException" {
		return "the service does not have TTL deletion (a DynamoDB-compatible server such as dynalite): expired records stay until Sweep removes them"
	}
	return fmt.Sprintf("TTL deletion could not be turned on (%v): expired records stay until Sweep removes them", err)
}

// writeSchema records SchemaVersion in the table unless a schema item
// exists, and checks the one that does.
func (l *Ledger) writeSchema(ctx context.Context) error {
	e := newExpr()
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.PutItem(ctx, &ddb.PutItemInput{
			TableName: l.table,
			Item: map[string]types.AttributeValue{
				attrPK:            strAV(schemaKey),
				attrSchemaVersion: intAV(SchemaVersion),
				attrSchemaWritten: timeAV(l.now()),
			},
			ConditionExpression:      aws.String("attribute_not_exists(" + e.n(attrPK) + ")"),
			ExpressionAttributeNames: e.nameMap(),
		})
		return err
	})
	if err == nil {
		return nil
	}
	if !isConditionFailed(err) {
		return fmt.Errorf("write schema item: %w", err)
	}
	item, err := l.getItem(ctx, schemaKey)
	if err != nil {
		return fmt.Errorf("read schema item: %w", err)
	}
	if item == nil {
		return fmt.Errorf("schema item removed while init ran: run it again: %w", ledger.ErrUnavailable)
	}
	return checkSchema(item, *l.table)
}
