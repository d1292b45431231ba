package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// seen records what the handler was given, per key.
type seen struct {
	mu    sync.Mutex
	body  map[string]string
	attrs map[string]map[string]string
	runs  map[string]int
}

func newSeen() *seen {
	return &seen{body: map[string]string{}, attrs: map[string]map[string]string{}, runs: map[string]int{}}
}

func (s *seen) Handle(_ context.Context, m *worker.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body[m.Key] = string(m.Body)
	s.attrs[m.Key] = m.Attributes
	s.runs[m.Key]++
	return nil
}

func (s *seen) get(key string) (body string, attrs map[string]string, runs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.body[key], s.attrs[key], s.runs[key]
}

// publish sends one notification with two attributes, a String and a
// Number, to the topic.
func publish(t *testing.T, c *sns.Client, topic, message string) {
	t.Helper()
	_, err := c.Publish(context.Background(), &sns.PublishInput{
		TopicArn: &topic,
		Message:  &message,
		MessageAttributes: map[string]snstypes.MessageAttributeValue{
			"EventType": {DataType: aws.String("String"), StringValue: aws.String("payment.succeeded")},
			"Amount":    {DataType: aws.String("Number"), StringValue: aws.String("1250")},
		},
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// Messages that come through the emulator's own SNS → SQS subscription,
// with raw delivery off (an envelope on the queue) and on (the message
// itself, its attributes as the SQS message's).
func TestWorker_SNS(t *testing.T) {
	t.Parallel()
	const message = `{"id":"pay-1","amount":1250}`
	wantAttrs := func(t *testing.T, attrs map[string]string) {
		t.Helper()
		if attrs["EventType"] != "payment.succeeded" || attrs["Amount"] != "1250" {
			t.Errorf("handler attributes = %v, want EventType payment.succeeded and Amount 1250", attrs)
		}
	}
	run := func(t *testing.T, raw, unwrap bool, body worker.BodyMode, publishes int) *seen {
		t.Helper()
		b := setup(t, options{})
		topic := sqstest.Subscribe(t, sqstest.NewSNSClient(t), b.queue, raw)
		snsc := sqstest.NewSNSClient(t)
		for range publishes {
			publish(t, snsc, topic, message)
		}
		cfg := b.config()
		cfg.Key.SNS = unwrap
		cfg.Body = body
		h := newSeen()
		stop := b.start(cfg, h)
		b.waitEmpty(20 * time.Second)
		stop()
		return h
	}

	t.Run("EnvelopeUnwrapped", func(t *testing.T) {
		t.Parallel()
		h := run(t, false, true, "", 2)
		got, attrs, runs := h.get("pay-1")
		if runs != 1 {
			t.Errorf("the operation ran %d times for two notifications of it, want 1", runs)
		}
		if got != message {
			t.Errorf("handler body = %q, want the inner Message %q", got, message)
		}
		wantAttrs(t, attrs)
	})
	t.Run("EnvelopeAsReceived", func(t *testing.T) {
		t.Parallel()
		h := run(t, false, true, worker.BodyAsReceived, 1)
		got, attrs, runs := h.get("pay-1")
		if runs != 1 {
			t.Fatalf("the operation ran %d times, want 1", runs)
		}
		var env struct{ Type, Message, TopicArn string }
		if err := json.Unmarshal([]byte(got), &env); err != nil || env.Type != "Notification" || env.Message != message || env.TopicArn == "" {
			t.Errorf("handler body = %q, want the whole SNS envelope around %q", got, message)
		}
		wantAttrs(t, attrs)
	})
	t.Run("RawDelivery", func(t *testing.T) {
		t.Parallel()
		h := run(t, true, false, "", 2)
		got, attrs, runs := h.get("pay-1")
		if runs != 1 {
			t.Errorf("the operation ran %d times for two notifications of it, want 1", runs)
		}
		if got != message {
			t.Errorf("handler body = %q, want the message %q", got, message)
		}
		wantAttrs(t, attrs)
	})
}
