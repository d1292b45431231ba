package sqstest_test

import (
	"errors"
	"fmt"
	"path"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// fatalTB records the message of the first Fatal/Fatalf and stops the
// calling goroutine, like testing.T does, without failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalMessage runs fn with a fatalTB and returns what it passed to Fatal,
// or "" if it returned normally.
func fatalMessage(t *testing.T, fn func(testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

// Not parallel: it changes the environment.
func TestEndpoint(t *testing.T) {
	cases := []struct {
		env       string
		want      string // returned endpoint, if no fatal
		wantFatal []string
	}{
		{env: "", wantFatal: []string{sqstest.EndpointEnv, "make test", "scripts/with-sqs.sh go test ./..."}},
		{env: "   ", wantFatal: []string{"make test"}},
		{env: "http://example.com:4566", wantFatal: []string{"loopback"}},
		{env: "https://127.0.0.1:4566", wantFatal: []string{"http URL"}},
		{env: "127.0.0.1:4566", wantFatal: []string{"http URL"}},
		{env: "http://127.0.0.1:4566/", want: "http://127.0.0.1:4566"},
		{env: "http://localhost:4566", want: "http://localhost:4566"},
		{env: "http://[::1]:4566", want: "http://[::1]:4566"},
	}
	for _, tc := range cases {
		t.Setenv(sqstest.EndpointEnv, tc.env)
		var got string
		msg := fatalMessage(t, func(tb testing.TB) { got = sqstest.Endpoint(tb) })
		if len(tc.wantFatal) == 0 {
			if msg != "" || got != tc.want {
				t.Errorf("env %q: Endpoint = %q, fatal %q; want %q", tc.env, got, msg, tc.want)
			}
			continue
		}
		if msg == "" {
			t.Errorf("env %q: Endpoint returned %q, want t.Fatal", tc.env, got)
			continue
		}
		for _, w := range tc.wantFatal {
			if !strings.Contains(msg, w) {
				t.Errorf("env %q: fatal message %q does not mention %q", tc.env, msg, w)
			}
		}
	}
}

func TestCreateQueueNamesAndOptions(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)

	long := strings.Repeat("very long name with spaces/and.dots ", 4)
	t.Run(long, func(t *testing.T) {
		t.Parallel()
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{
			FIFO: true, MaxReceiveCount: 4, VisibilityTimeout: 1500 * time.Millisecond,
		})
		name, dlq := path.Base(q.URL), path.Base(q.DLQURL)
		for _, n := range []string{name, dlq} {
			if len(n) > 80 {
				t.Errorf("queue name %q has %d characters, SQS allows 80", n, len(n))
			}
			if !strings.HasSuffix(n, ".fifo") {
				t.Errorf("FIFO queue name %q lacks .fifo", n)
			}
			if strings.ContainsAny(n[:len(n)-len(".fifo")], " ./") {
				t.Errorf("queue name %q keeps characters SQS does not allow", n)
			}
		}
		if want := strings.TrimSuffix(name, ".fifo") + "-dlq.fifo"; dlq != want {
			t.Errorf("DLQ name %q, want %q", dlq, want)
		}
		for _, u := range []string{q.URL, q.DLQURL} {
			out, err := c.GetQueueAttributes(testContext(t), &sqs.GetQueueAttributesInput{
				QueueUrl:       aws.String(u),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
			})
			if err != nil {
				t.Fatalf("GetQueueAttributes %s: %v", u, err)
			}
			if got := out.Attributes["VisibilityTimeout"]; got != "2" {
				t.Errorf("%s: VisibilityTimeout = %q, want 1.5 s rounded up to 2", path.Base(u), got)
			}
			if got := out.Attributes["FifoQueue"]; got != "true" {
				t.Errorf("%s: FifoQueue = %q, want true", path.Base(u), got)
			}
		}
	})

	t.Run("unique", func(t *testing.T) {
		t.Parallel()
		a := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
		b := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
		if a.URL == b.URL || a.ARN == b.ARN {
			t.Errorf("two queues share a name: %s, %s", a.URL, b.URL)
		}
		if a.DLQURL != "" || a.DLQARN != "" {
			t.Errorf("queue without MaxReceiveCount has DLQ %q %q", a.DLQURL, a.DLQARN)
		}
		if strings.HasSuffix(a.URL, ".fifo") {
			t.Errorf("standard queue %s named like a FIFO queue", a.URL)
		}
	})
}

func TestCreateQueueDeletesOnCleanup(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)

	var q sqstest.Queue
	t.Run("create", func(t *testing.T) {
		q = sqstest.CreateQueue(t, c, sqstest.QueueOptions{MaxReceiveCount: 1})
	})
	for _, u := range []string{q.URL, q.DLQURL} {
		_, err := c.GetQueueUrl(testContext(t), &sqs.GetQueueUrlInput{QueueName: aws.String(path.Base(u))})
		var missing *types.QueueDoesNotExist
		if !errors.As(err, &missing) {
			t.Errorf("queue %s after its test ended: GetQueueUrl error %v, want QueueDoesNotExist", u, err)
		}
	}
}

func TestDrainAndCount(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)

	t.Run("all visible", func(t *testing.T) {
		t.Parallel()
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
		for i := range 15 {
			send(t, c, q.URL, fmt.Sprintf("m%02d", i), func(in *sqs.SendMessageInput) {
				in.MessageAttributes = map[string]types.MessageAttributeValue{"i": {DataType: aws.String("Number"), StringValue: aws.String(fmt.Sprint(i))}}
			})
		}
		wantCount(t, c, q.URL, 15, 0)
		start := time.Now()
		msgs := sqstest.Drain(t, c, q.URL, 0, 0)
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Errorf("Drain with wait 0 took %v", elapsed)
		}
		if len(msgs) != 15 {
			t.Fatalf("Drain returned %d messages, want 15", len(msgs))
		}
		for _, m := range msgs {
			if m.Attributes["ApproximateReceiveCount"] != "1" || m.MessageAttributes["i"].StringValue == nil {
				t.Errorf("message %s: attributes %v, message attributes %v; want both", aws.ToString(m.Body), m.Attributes, m.MessageAttributes)
			}
		}
		// Drain does not delete: everything is in flight now.
		wantCount(t, c, q.URL, 0, 15)
		if again := sqstest.Drain(t, c, q.URL, 0, 0); len(again) != 0 {
			t.Errorf("second Drain returned %d in-flight messages", len(again))
		}
	})

	t.Run("max", func(t *testing.T) {
		t.Parallel()
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
		for i := range 5 {
			send(t, c, q.URL, fmt.Sprint(i), nil)
		}
		if msgs := sqstest.Drain(t, c, q.URL, 2, 2*time.Second); len(msgs) != 2 {
			t.Errorf("Drain(max 2) returned %d messages", len(msgs))
		}
		wantCount(t, c, q.URL, 3, 2)
	})

	t.Run("waits and deduplicates", func(t *testing.T) {
		t.Parallel()
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{VisibilityTimeout: time.Second})
		send(t, c, q.URL, "early", nil)
		ctx := testContext(t)
		sendErr := make(chan error, 1)
		go func() {
			time.Sleep(500 * time.Millisecond)
			_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("late")})
			sendErr <- err
		}()
		// Over 2.5 s "early" is received again after its 1 s visibility
		// timeout; Drain returns it once.
		start := time.Now()
		msgs := sqstest.Drain(t, c, q.URL, 0, 2500*time.Millisecond)
		elapsed := time.Since(start)
		if err := <-sendErr; err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
		if got := bodies(msgs); len(got) != 2 || got[0] != "early" || got[1] != "late" {
			t.Errorf("Drain returned %q, want [early late]", got)
		}
		if elapsed < 2500*time.Millisecond || elapsed > 3500*time.Millisecond {
			t.Errorf("Drain(wait 2.5s) took %v", elapsed)
		}
	})

	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
		start := time.Now()
		if msgs := sqstest.Drain(t, c, q.URL, 0, 0); len(msgs) != 0 {
			t.Errorf("Drain of an empty queue returned %q", bodies(msgs))
		}
		if elapsed := time.Since(start); elapsed > 500*time.Millisecond {
			t.Errorf("Drain(wait 0) of an empty queue took %v", elapsed)
		}
		start = time.Now()
		if msgs := sqstest.Drain(t, c, q.URL, 5, 1200*time.Millisecond); len(msgs) != 0 {
			t.Errorf("Drain of an empty queue returned %q", bodies(msgs))
		}
		if elapsed := time.Since(start); elapsed < 1200*time.Millisecond || elapsed > 2*time.Second {
			t.Errorf("Drain(max 5, wait 1.2s) of an empty queue took %v", elapsed)
		}
	})
}
