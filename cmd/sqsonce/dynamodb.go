package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
)

// newDynamoDBClient is the DynamoDB client of ledger.region (the queue's
// region when empty) and ledger.endpoint, with credentials from the SDK's
// default chain.
func newDynamoDBClient(ctx context.Context, cfg Config) (*ddb.Client, error) {
	region := cfg.Ledger.Region
	if region == "" {
		region, _ = cfg.Queue.region()
	}
	httpClient := awshttp.NewBuildableClient().WithTimeout(30 * time.Second)
	awsCfg, err := loadAWSConfig(ctx, region, awsconfig.WithHTTPClient(httpClient))
	if err != nil {
		return nil, err
	}
	return ddb.NewFromConfig(awsCfg, func(o *ddb.Options) {
		if cfg.Ledger.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Ledger.Endpoint)
		}
		o.HTTPClient = sqsclient.InMemory(o.HTTPClient)
	}), nil
}

func dynamoDBOptions(l LedgerConfig) dynamodb.Options {
	return dynamodb.Options{Table: l.Table, Retention: l.Retention.Duration}
}

// openDynamoDB opens the DynamoDB ledger.
func openDynamoDB(ctx context.Context, cfg Config) (store, error) {
	client, err := newDynamoDBClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	return dynamodb.Open(ctx, client, dynamoDBOptions(cfg.Ledger))
}

// initDynamoDB creates the DynamoDB ledger's table and says what it did.
func initDynamoDB(ctx context.Context, cfg Config) (string, error) {
	client, err := newDynamoDBClient(ctx, cfg)
	if err != nil {
		return "", err
	}
	rep, err := dynamodb.Init(ctx, client, dynamoDBOptions(cfg.Ledger))
	if err != nil {
		return "", err
	}
	what := "exists"
	if rep.Created {
		what = "was created"
	}
	ttl := "DynamoDB deletes expired records (TTL)"
	if !rep.TTL {
		ttl = "no TTL deletion (" + rep.TTLNote + "): the workers' sweep removes expired records"
	}
	return fmt.Sprintf("DynamoDB table %s %s; %s", cfg.Ledger.Table, what, ttl), nil
}

// checkDynamoDBTTL says whether DynamoDB deletes the table's expired
// records by itself.
func checkDynamoDBTTL(ctx context.Context, c *checker, cfg Config) {
	client, err := newDynamoDBClient(ctx, cfg)
	if err != nil {
		c.line("fail", "ledger ttl", "%v", err)
		return
	}
	out, err := client.DescribeTimeToLive(ctx, &ddb.DescribeTimeToLiveInput{TableName: aws.String(cfg.Ledger.Table)})
	switch {
	case err != nil:
		c.line("warn", "ledger ttl", "cannot read the table's TTL setting (%v): without TTL deletion, expired records stay until the workers' sweep removes them", err)
	case out.TimeToLiveDescription == nil || out.TimeToLiveDescription.TimeToLiveStatus != "ENABLED":
		status := "off"
		if out.TimeToLiveDescription != nil {
			status = string(out.TimeToLiveDescription.TimeToLiveStatus)
		}
		c.line("warn", "ledger ttl", "TTL deletion is %s: expired records stay until the workers' sweep removes them (`sqsonce ledger init` turns it on)", status)
	default:
		c.line("ok", "ledger ttl", "DynamoDB deletes expired records (TTL on %s)", aws.ToString(out.TimeToLiveDescription.AttributeName))
	}
}
