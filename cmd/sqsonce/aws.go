package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
)

// newSQSClient makes an SQS client for the queue section. Credentials come
// from the AWS SDK's default chain, never from the configuration file.
func newSQSClient(ctx context.Context, q QueueConfig) (*sqs.Client, error) {
	// Bound every HTTP exchange, long polls included, so that a network
	// that swallows a request cannot stall a receive loop for ever.
	httpClient := awshttp.NewBuildableClient().WithTimeout(q.WaitTime.Duration + 30*time.Second)
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(q.Region), awsconfig.WithHTTPClient(httpClient))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	return sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if q.Endpoint != "" {
			o.BaseEndpoint = aws.String(q.Endpoint)
		}
	}, sqsclient.InMemoryBodies), nil
}
