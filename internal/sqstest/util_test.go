package sqstest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// testTimeout bounds every test's SQS calls.
const testTimeout = 20 * time.Second

// testContext returns a context that ends with the test or after testTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// send sends body to queueURL; edit, if non-nil, adjusts the input first.
func send(t *testing.T, c *sqs.Client, queueURL, body string, edit func(*sqs.SendMessageInput)) *sqs.SendMessageOutput {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)}
	if edit != nil {
		edit(in)
	}
	out, err := c.SendMessage(testContext(t), in)
	if err != nil {
		t.Fatalf("SendMessage %q: %v", body, err)
	}
	return out
}

// sendFIFO sends body to a FIFO queue in group with deduplication id dedup.
func sendFIFO(t *testing.T, c *sqs.Client, queueURL, body, group, dedup string) *sqs.SendMessageOutput {
	t.Helper()
	return send(t, c, queueURL, body, func(in *sqs.SendMessageInput) {
		in.MessageGroupId = aws.String(group)
		if dedup != "" {
			in.MessageDeduplicationId = aws.String(dedup)
		}
	})
}

// receive receives up to n messages, waiting at most waitSeconds, with all
// system and message attributes.
func receive(t *testing.T, c *sqs.Client, queueURL string, n, waitSeconds int32) []types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(testContext(t), &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(queueURL),
		MaxNumberOfMessages:         n,
		WaitTimeSeconds:             waitSeconds,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

// receiveOne receives exactly one message or fails.
func receiveOne(t *testing.T, c *sqs.Client, queueURL string, waitSeconds int32) types.Message {
	t.Helper()
	msgs := receive(t, c, queueURL, 1, waitSeconds)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

// del deletes a message by receipt handle.
func del(t *testing.T, c *sqs.Client, queueURL string, m types.Message) {
	t.Helper()
	_, err := c.DeleteMessage(testContext(t), &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle})
	if err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
}

// wantCount fails unless the queue's counters are as given.
func wantCount(t *testing.T, c *sqs.Client, queueURL string, visible, inflight int) {
	t.Helper()
	v, i := sqstest.Count(t, c, queueURL)
	if v != visible || i != inflight {
		t.Fatalf("queue counts: visible=%d inflight=%d, want visible=%d inflight=%d", v, i, visible, inflight)
	}
}

func bodies(msgs []types.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = aws.ToString(m.Body)
	}
	return out
}

// withField makes a call's JSON request carry the member name with value,
// for a zero the SDK leaves out as "not set", such as ReceiveMessage's
// VisibilityTimeout 0.
func withField(name string, value any) func(*sqs.Options) {
	return func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Build.Add(middleware.BuildMiddlewareFunc("sqstestWithField", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("withField: request is a %T", in.Request)
				}
				body, err := io.ReadAll(req.GetStream())
				if err != nil {
					return middleware.BuildOutput{}, middleware.Metadata{}, err
				}
				fields := map[string]any{}
				if err := json.Unmarshal(body, &fields); err != nil {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("withField: request body %q: %w", body, err)
				}
				fields[name] = value
				if body, err = json.Marshal(fields); err != nil {
					return middleware.BuildOutput{}, middleware.Metadata{}, err
				}
				if in.Request, err = req.SetStream(bytes.NewReader(body)); err != nil {
					return middleware.BuildOutput{}, middleware.Metadata{}, err
				}
				return next.HandleBuild(ctx, in)
			}), middleware.Before)
		})
	}
}
