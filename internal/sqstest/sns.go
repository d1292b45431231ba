package sqstest

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
)

// NewSNSClient returns an SNS client for the local server at [Endpoint],
// which serves SNS on the same endpoint as SQS, configured as [NewClient]
// configures its SQS client.
func NewSNSClient(t testing.TB) *sns.Client {
	t.Helper()
	endpoint, hc := clientParts(t, nil)
	return sns.New(sns.Options{
		Region:       Region,
		Credentials:  testCredentials,
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
	})
}

// Subscribe creates a topic named after the test and subscribes the queue
// q to it, with raw message delivery on or off, and returns the topic's
// ARN. The topic is deleted when the test ends. Any failure is fatal.
func Subscribe(t testing.TB, c *sns.Client, q Queue, raw bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	topic, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(queueName(t.Name()))})
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	arn := aws.ToString(topic.TopicArn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		c.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: &arn})
	})
	if _, err := c.Subscribe(ctx, &sns.SubscribeInput{
		TopicArn:   &arn,
		Protocol:   aws.String("sqs"),
		Endpoint:   aws.String(q.ARN),
		Attributes: map[string]string{"RawMessageDelivery": strconv.FormatBool(raw)},
	}); err != nil {
		t.Fatalf("subscribe %s to %s: %v", q.ARN, arn, err)
	}
	return arn
}
