package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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

// newS3Client makes an S3 client for the payload section, in the queue's
// region. With payload.endpoint set it addresses that endpoint path-style,
// as S3-compatible servers want. Credentials come from the AWS SDK's
// default chain.
func newS3Client(ctx context.Context, cfg Config) (*s3.Client, error) {
	// A payload may be large: the worker bounds each read by a context
	// of its own; this only bounds an exchange that nothing else ends.
	httpClient := awshttp.NewBuildableClient().WithTimeout(5 * time.Minute)
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Queue.Region), awsconfig.WithHTTPClient(httpClient))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Payload.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Payload.Endpoint)
			o.UsePathStyle = true
		}
		o.HTTPClient = sqsclient.InMemory(o.HTTPClient)
		// An object without a checksum (one put without, or by a server
		// that keeps none) is read all the same; the SDK would log that
		// on its own, past our logger, for every read.
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}
