package main

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// shapesHandler records, for each message, its key, its body, the
// EventType attribute and the trace context as the command sees them.
const shapesHandler = `body=$(cat)
echo "$SQSONCE_KEY|$body|${SQSONCE_ATTR_EVENTTYPE:-}|${TRACEPARENT:-}" >>"$STATE/seen"
`

// shapesTrace is the producer's trace context of the plain message.
const shapesTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Each shape of message that production sends goes through the binary
// with an exec handler, which sees the payload and the attributes.
func TestMain_MessageShapes(t *testing.T) {
	t.Parallel()
	attrs := map[string]types.MessageAttributeValue{
		"EventType":   {DataType: aws.String("String"), StringValue: aws.String("plain")},
		"traceparent": {DataType: aws.String("String"), StringValue: aws.String(shapesTrace)},
	}
	publish := func(t *testing.T, c *sns.Client, topic, message, eventType string) {
		t.Helper()
		if _, err := c.Publish(context.Background(), &sns.PublishInput{
			TopicArn: &topic, Message: &message,
			MessageAttributes: map[string]snstypes.MessageAttributeValue{"EventType": {DataType: aws.String("String"), StringValue: aws.String(eventType)}},
		}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	drain := func(t *testing.T, e *procEnv, want int, extra ...string) []string {
		t.Helper()
		cmd, out := e.start("run", extra...)
		e.waitFor("every message handled", 20*time.Second, func() bool { return len(e.lines("seen")) >= want && e.queueEmpty() })
		cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, cmd, 15*time.Second); code != 0 {
			t.Fatalf("run exited %d:\n%s", code, out)
		}
		seen := e.lines("seen")
		sort.Strings(seen)
		return seen
	}

	t.Run("PlainAndRawSNS", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, shapesHandler)
		if _, err := e.client.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: &e.queue.URL, MessageBody: aws.String(`{"id":"plain-1"}`), MessageAttributes: attrs,
		}); err != nil {
			t.Fatal(err)
		}
		snsc := sqstest.NewSNSClient(t)
		topic := sqstest.Subscribe(t, snsc, e.queue, true)
		publish(t, snsc, topic, `{"id":"raw-1"}`, "raw")
		publish(t, snsc, topic, `{"id":"raw-1"}`, "raw") // a second delivery of one operation
		got := drain(t, e, 2)
		want := []string{`plain-1|{"id":"plain-1"}|plain|` + shapesTrace, `raw-1|{"id":"raw-1"}|raw|`}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("the handler saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	// A payload that an Extended Client put in S3, the message a pointer
	// to it; and a pointer to a bucket that payload.buckets does not list,
	// which is dead-lettered unread.
	t.Run("S3Pointer", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, shapesHandler)
		s3c := sqstest.NewS3Client(t, nil)
		bucket, other := sqstest.CreateBucket(t, s3c), sqstest.CreateBucket(t, s3c)
		payload := `{"id":"big-1","blob":"` + strings.Repeat("x", 300<<10) + `"}`
		sqstest.PutObject(t, s3c, bucket, "payloads/big-1", []byte(payload))
		sqstest.PutObject(t, s3c, other, "payloads/other-1", []byte(`{"id":"other-1"}`))
		for _, pointer := range []worker.S3Pointer{{Bucket: bucket, Key: "payloads/big-1"}, {Bucket: other, Key: "payloads/other-1"}} {
			if _, err := e.client.SendMessage(context.Background(), &sqs.SendMessageInput{
				QueueUrl: &e.queue.URL, MessageBody: aws.String(pointer.Body()),
				MessageAttributes: map[string]types.MessageAttributeValue{
					worker.AttrExtendedPayloadSize: {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(len(payload)))},
					"EventType":                    {DataType: aws.String("String"), StringValue: aws.String("offloaded")},
				},
			}); err != nil {
				t.Fatal(err)
			}
		}
		got := drain(t, e, 1, "SQSONCE_PAYLOAD_ENDPOINT="+sqstest.Endpoint(t), "SQSONCE_PAYLOAD_BUCKETS="+bucket, "SQSONCE_PAYLOAD_DELETE_OBJECTS=true")
		if want := `big-1|` + payload + `|offloaded|`; len(got) != 1 || got[0] != want {
			t.Errorf("the handler saw %d lines (the first %.80q), want once the object's payload", len(got), strings.Join(got, ""))
		}
		dl := sqstest.Drain(t, e.client, e.queue.DLQURL, 1, 5*time.Second)
		if len(dl) != 1 || !strings.Contains(aws.ToString(dl[0].MessageAttributes[worker.AttrReason].StringValue), `the bucket "`+other+`" is not one that payloads are read from`) {
			t.Errorf("dead letters %v, want the pointer to %s with a reason naming it", dl, other)
		}
		if _, ok := sqstest.GetObject(t, s3c, other, "payloads/other-1"); !ok {
			t.Error("the object in the bucket not allowed is gone")
		}
	})

	t.Run("SNSEnvelope", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, shapesHandler)
		snsc := sqstest.NewSNSClient(t)
		topic := sqstest.Subscribe(t, snsc, e.queue, false)
		publish(t, snsc, topic, `{"id":"env-1"}`, "enveloped")
		publish(t, snsc, topic, `{"id":"env-1"}`, "enveloped")
		got := drain(t, e, 1, "SQSONCE_KEY_SNS=true")
		if want := `env-1|{"id":"env-1"}|enveloped|`; len(got) != 1 || got[0] != want {
			t.Errorf("the handler saw %q, want once %q", got, want)
		}
	})
}
