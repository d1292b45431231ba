package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// newSQSClient makes an SQS client for the queue section. Credentials come
// from the AWS SDK's default chain, never from the configuration file.
func newSQSClient(ctx context.Context, q QueueConfig) (*sqs.Client, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(q.Region))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	return sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if q.Endpoint != "" {
			o.BaseEndpoint = aws.String(q.Endpoint)
		}
	}), nil
}
