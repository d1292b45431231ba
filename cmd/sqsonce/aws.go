package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
)

// regionName matches the name of an AWS region in a host name: us-east-1,
// eu-west-2, us-gov-west-1, cn-north-1, us-isob-east-1, eusc-de-east-1.
var regionName = regexp.MustCompile(`^[a-z]{2,4}(-[a-z]+)+-[0-9]+$`)

// hostRegion is the region an SQS URL's host names, or "" when it names
// none: sqs.<region>.amazonaws.com and its other forms (.amazonaws.com.cn,
// sqs-fips.<region>, the dual-stack sqs.<region>.api.aws, an interface VPC
// endpoint vpce-<id>.sqs.<region>.vpce.amazonaws.com, and any host with a
// label "sqs" or "sqs-fips" before a region, as local emulators name
// theirs), and the legacy <region>.queue.amazonaws.com and
// queue.amazonaws.com (us-east-1).
func hostRegion(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	if host == "queue.amazonaws.com" {
		return "us-east-1"
	}
	labels := strings.Split(host, ".")
	for i := 0; i+1 < len(labels); i++ {
		if (labels[i] == "sqs" || labels[i] == "sqs-fips") && regionName.MatchString(labels[i+1]) {
			return labels[i+1]
		}
	}
	if len(labels) == 4 && labels[1] == "queue" && labels[2] == "amazonaws" && labels[3] == "com" && regionName.MatchString(labels[0]) {
		return labels[0]
	}
	return ""
}

// Where the queue's region was found, as check reports it.
const (
	regionFromConfig   = "queue.region"
	regionFromURL      = "queue.url"
	regionFromEndpoint = "queue.endpoint"
	regionFromSDK      = "the AWS SDK's chain: AWS_REGION, AWS_DEFAULT_REGION or the profile"
)

// region is the queue's region as the configuration says it: queue.region
// when set, else the region queue.url names, else the one queue.endpoint
// names; "" when none does, and the AWS SDK's chain decides (see
// loadAWSConfig). from says which.
func (q QueueConfig) region() (region, from string) {
	switch {
	case q.Region != "":
		return q.Region, regionFromConfig
	case hostRegion(q.URL) != "":
		return hostRegion(q.URL), regionFromURL
	case q.Endpoint != "" && hostRegion(q.Endpoint) != "":
		return hostRegion(q.Endpoint), regionFromEndpoint
	}
	return "", regionFromSDK
}

// loadAWSConfig loads the AWS SDK's configuration, credentials from its
// default chain, in region; an empty region is the SDK's own (AWS_REGION,
// AWS_DEFAULT_REGION, the profile's). With no region found at all it
// fails, naming what to set, rather than guess one: requests signed for
// another region than the queue's are refused. When the chain found no
// credentials but the EC2 instance role, the last it tries, and that fails
// too, the error wraps errNoCredentials, which names what to set.
func loadAWSConfig(ctx context.Context, region string, opts ...func(*awsconfig.LoadOptions) error) (aws.Config, error) {
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("queue.region: no region: queue.url names none, and neither AWS_REGION, AWS_DEFAULT_REGION nor the AWS profile sets one: set queue.region: %w", ErrInvalidConfig)
	}
	if aws.IsCredentialsProvider(cfg.Credentials, (*ec2rolecreds.Provider)(nil)) {
		cfg.Credentials = instanceRole{cfg.Credentials}
	}
	return cfg, nil
}

// errNoCredentials is the error of a host where the AWS SDK's chain found
// no credentials at all.
var errNoCredentials = errors.New("no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for a local SQS-compatible server any values do), no AWS profile (AWS_PROFILE, ~/.aws/credentials, ~/.aws/config) and no role of an EC2 instance, ECS task or EKS pod")

// instanceRole is the AWS SDK's last resort, the role of the EC2 instance
// (its metadata service), on a host where the SDK found no other
// credentials: when that fails too, the error wraps errNoCredentials
// before what the metadata service answered.
type instanceRole struct{ aws.CredentialsProvider }

func (p instanceRole) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := p.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return c, fmt.Errorf("%w (the instance metadata service: %w)", errNoCredentials, err)
	}
	return c, nil
}

// IsCredentialsProvider lets aws.IsCredentialsProvider see the provider
// inside.
func (p instanceRole) IsCredentialsProvider(target aws.CredentialsProvider) bool {
	return aws.IsCredentialsProvider(p.CredentialsProvider, target)
}

// newSQSClient makes an SQS client for the queue section, in the queue's
// region (QueueConfig.region, else the SDK's), with opts for the AWS SDK's
// configuration. Credentials come from the AWS SDK's default chain, never
// from the configuration file.
func newSQSClient(ctx context.Context, q QueueConfig, opts ...func(*awsconfig.LoadOptions) error) (*sqs.Client, error) {
	// Bound every HTTP exchange, long polls included, so that a network
	// that swallows a request cannot stall a receive loop for ever.
	httpClient := awshttp.NewBuildableClient().WithTimeout(q.WaitTime.Duration + 30*time.Second)
	region, _ := q.region()
	awsCfg, err := loadAWSConfig(ctx, region, append(opts, awsconfig.WithHTTPClient(httpClient))...)
	if err != nil {
		return nil, err
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
	region, _ := cfg.Queue.region()
	awsCfg, err := loadAWSConfig(ctx, region, awsconfig.WithHTTPClient(httpClient))
	if err != nil {
		return nil, err
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
