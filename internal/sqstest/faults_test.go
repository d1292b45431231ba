package sqstest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// noRetries makes a client give up after the first attempt.
func noRetries(o *sqs.Options) { o.RetryMaxAttempts = 1 }

// faultyClient returns a Faults seeded with seed, a client using it, and a
// fresh standard queue (created before any rate is set).
func faultyClient(t *testing.T, seed uint64, optFns ...func(*sqs.Options)) (*sqstest.Faults, *sqs.Client, sqstest.Queue) {
	t.Helper()
	f := sqstest.NewFaults(seed, nil)
	c := sqstest.NewClient(t, f, optFns...)
	return f, c, sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
}

func sendErr(t *testing.T, c *sqs.Client, queueURL, body string) error {
	_, err := c.SendMessage(testContext(t), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)})
	return err
}

// sdkClassifies reports how the SDK's standard retryer sees err.
func sdkClassifies(err error) (retryable, throttle bool) {
	return retry.NewStandard().IsErrorRetryable(err),
		retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func TestFaultsThrottle(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 1, noRetries)
	f.Set("SendMessage", sqstest.Rates{Throttle: 1})

	err := sendErr(t, c, q.URL, "m")
	var throttled *types.RequestThrottled
	if !errors.As(err, &throttled) {
		t.Fatalf("got %v, want *types.RequestThrottled", err)
	}
	if throttled.ErrorCode() != "RequestThrottled" || throttled.ErrorFault() != smithy.FaultClient {
		t.Errorf("ErrorCode %q fault %v, want RequestThrottled, client", throttled.ErrorCode(), throttled.ErrorFault())
	}
	if s := httpStatus(err); s != 400 {
		t.Errorf("HTTP status %d, want 400", s)
	}
	if retryable, throttle := sdkClassifies(err); !retryable || !throttle {
		t.Errorf("SDK classifies the error as retryable=%v throttle=%v, want both", retryable, throttle)
	}
	if n := f.Count("SendMessage", sqstest.Throttle); n != 1 {
		t.Errorf("Count(SendMessage, Throttle) = %d, want 1", n)
	}
	wantCount(t, c, q.URL, 0, 0) // never reached the server
}

func TestFaultsThrottleRetriedByDefault(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 2)
	f.Set("SendMessage", sqstest.Rates{Throttle: 1})

	// The default retryer makes 3 attempts, backing off up to 1 s and 2 s
	// after throttling.
	err := sendErr(t, c, q.URL, "m")
	var throttled *types.RequestThrottled
	if !errors.As(err, &throttled) {
		t.Fatalf("got %v, want *types.RequestThrottled", err)
	}
	if n := f.Count("SendMessage", sqstest.Throttle); n != 3 {
		t.Errorf("Count(SendMessage, Throttle) = %d, want 3 attempts", n)
	}
}

func TestFaultsServerError(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 3)
	f.Set("SendMessage", sqstest.Rates{ServerError: 1})

	_, err := c.SendMessage(testContext(t), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("m")}, noRetries)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InternalFailure" || apiErr.ErrorFault() != smithy.FaultServer {
		t.Fatalf("got %v, want API error InternalFailure with server fault", err)
	}
	if s := httpStatus(err); s != 500 {
		t.Errorf("HTTP status %d, want 500", s)
	}
	if retryable, throttle := sdkClassifies(err); !retryable || throttle {
		t.Errorf("SDK classifies the error as retryable=%v throttle=%v, want true, false", retryable, throttle)
	}
	wantCount(t, c, q.URL, 0, 0)

	// With default retries all 3 attempts fail.
	if err := sendErr(t, c, q.URL, "m"); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InternalFailure" {
		t.Fatalf("with retries: got %v, want InternalFailure", err)
	}
	if n := f.Count("SendMessage", sqstest.ServerError); n != 1+3 {
		t.Errorf("Count(SendMessage, ServerError) = %d, want 4", n)
	}
}

func TestFaultsTimeout(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 4)
	f.Set("ReceiveMessage", sqstest.Rates{Timeout: 1})
	send(t, c, q.URL, "m", nil)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL)})
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if elapsed < 250*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("timed-out call took %v, want about 300ms", elapsed)
	}
	// The SDK does not retry once the caller's context has ended.
	if n := f.Count("ReceiveMessage", sqstest.Timeout); n != 1 {
		t.Errorf("Count(ReceiveMessage, Timeout) = %d, want 1", n)
	}
	wantCount(t, c, q.URL, 1, 0) // the receive never reached the server
}

func TestFaultsReset(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 5)
	f.Set("SendMessage", sqstest.Rates{Reset: 1})

	_, err := c.SendMessage(testContext(t), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("m")}, noRetries)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want an error wrapping ECONNRESET", err)
	}
	if retryable, throttle := sdkClassifies(err); !retryable || throttle {
		t.Errorf("SDK classifies the error as retryable=%v throttle=%v, want true, false", retryable, throttle)
	}
	wantCount(t, c, q.URL, 0, 0)

	if err := sendErr(t, c, q.URL, "m"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("with retries: got %v, want ECONNRESET", err)
	}
	if n := f.Count("SendMessage", sqstest.Reset); n != 1+3 {
		t.Errorf("Count(SendMessage, Reset) = %d, want 4", n)
	}
	wantCount(t, c, q.URL, 0, 0)
}

func TestFaultsLostAck(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 6, noRetries)
	ctx := testContext(t)

	t.Run("SendMessage", func(t *testing.T) {
		f.Set("SendMessage", sqstest.Rates{LostAck: 1})
		defer f.Set("SendMessage", sqstest.Rates{})
		err := sendErr(t, c, q.URL, "sent anyway")
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("got %v, want an error wrapping ECONNRESET", err)
		}
		if retryable, _ := sdkClassifies(err); !retryable {
			t.Error("SDK does not classify a lost acknowledgement as retryable")
		}
		// The "failed" send took effect.
		wantCount(t, c, q.URL, 1, 0)
	})

	t.Run("ReceiveMessage", func(t *testing.T) {
		f.Set("ReceiveMessage", sqstest.Rates{LostAck: 1})
		defer f.Set("ReceiveMessage", sqstest.Rates{})
		_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL)})
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("got %v, want an error wrapping ECONNRESET", err)
		}
		// The message was received, so it is in flight, unseen by anyone.
		wantCount(t, c, q.URL, 0, 1)
	})

	t.Run("DeleteMessage", func(t *testing.T) {
		send(t, c, q.URL, "to delete", nil)
		m := receiveOne(t, c, q.URL, 0)
		f.Set("DeleteMessage", sqstest.Rates{LostAck: 1})
		defer f.Set("DeleteMessage", sqstest.Rates{})
		_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle})
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("got %v, want an error wrapping ECONNRESET", err)
		}
		// Only the message lost in the ReceiveMessage subtest is left.
		wantCount(t, c, q.URL, 0, 1)
	})

	counts := f.Counts()
	for _, op := range []string{"SendMessage", "ReceiveMessage", "DeleteMessage"} {
		if n := counts[op][sqstest.LostAck]; n != 1 {
			t.Errorf("Counts()[%s][LostAck] = %d, want 1", op, n)
		}
	}
}

func TestFaultsLostAckRetriedSendDuplicates(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 7)
	f.Set("SendMessage", sqstest.Rates{LostAck: 1})

	// Each of the default 3 attempts reaches the server; the client only
	// sees the last connection reset.
	if err := sendErr(t, c, q.URL, "dup"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want ECONNRESET", err)
	}
	wantCount(t, c, q.URL, 3, 0)
	if got := bodies(sqstest.Drain(t, c, q.URL, 3, 2*time.Second)); len(got) != 3 {
		t.Errorf("queue holds %q, want 3 copies", got)
	}
}

func TestFaultsSetEnabledAndCounts(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 8, noRetries)
	f.Set("SendMessage", sqstest.Rates{Throttle: 1})
	if !f.Enabled() {
		t.Fatal("a new Faults is disabled")
	}

	f.SetEnabled(false)
	if err := sendErr(t, c, q.URL, "through"); err != nil {
		t.Fatalf("faults disabled: SendMessage: %v", err)
	}
	if n := len(f.Counts()); n != 0 {
		t.Errorf("faults disabled: %d operations counted", n)
	}

	f.SetEnabled(true)
	if err := sendErr(t, c, q.URL, "blocked"); err == nil {
		t.Fatal("faults enabled: SendMessage succeeded")
	}
	// Operations without rates are untouched.
	if _, err := c.GetQueueAttributes(testContext(t), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL)}); err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}

	snap := f.Counts()
	if len(snap) != 1 || len(snap["SendMessage"]) != 1 || snap["SendMessage"][sqstest.Throttle] != 1 {
		t.Fatalf("Counts() = %v, want map[SendMessage:map[Throttle:1]]", snap)
	}
	snap["SendMessage"][sqstest.Throttle] = 99 // a snapshot, not a view
	if n := f.Count("SendMessage", sqstest.Throttle); n != 1 {
		t.Errorf("Count after editing the snapshot = %d, want 1", n)
	}
	wantCount(t, c, q.URL, 1, 0)
}

func TestFaultsConcurrentSends(t *testing.T) {
	t.Parallel()
	f, c, q := faultyClient(t, 9, noRetries)
	f.Set("SendMessage", sqstest.Rates{Throttle: 0.15, ServerError: 0.15, Reset: 0.15, LostAck: 0.15})

	const workers, each = 8, 12
	var (
		mu sync.Mutex
		ok int
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				err := sendErr(t, c, q.URL, fmt.Sprintf("w%d-%d", w, i))
				if err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()

	counts := f.Counts()["SendMessage"]
	faults := 0
	for _, n := range counts {
		faults += n
	}
	if ok+faults != workers*each {
		t.Errorf("%d sends succeeded and %d faults were injected (%v), want %d in all", ok, faults, counts, workers*each)
	}
	if faults == 0 || ok == 0 {
		t.Errorf("%d successes, %d faults: the mix should give both", ok, faults)
	}
	// Successful sends and lost acknowledgements are exactly the messages
	// that reached the queue.
	wantCount(t, c, q.URL, ok+counts[sqstest.LostAck], 0)
}

// EntryFailure fails entries of a batch call on SQS's side: the call
// succeeds, the failed entries are in Failed with SenderFault false, and
// the server never saw them; the others took effect.
func TestFaultsEntryFailure(t *testing.T) {
	t.Parallel()

	// wantFailedOnSQSSide fails unless each failed entry is SQS's own
	// failure, and returns their ids.
	wantFailedOnSQSSide := func(t *testing.T, failed []types.BatchResultErrorEntry) map[string]bool {
		t.Helper()
		ids := map[string]bool{}
		for _, e := range failed {
			if e.SenderFault || aws.ToString(e.Code) != "InternalError" || aws.ToString(e.Message) == "" {
				t.Errorf("failed entry %s: sender fault %v, code %q, message %q; want SQS's fault, InternalError",
					aws.ToString(e.Id), e.SenderFault, aws.ToString(e.Code), aws.ToString(e.Message))
			}
			ids[aws.ToString(e.Id)] = true
		}
		return ids
	}

	t.Run("SendMessageBatch", func(t *testing.T) {
		t.Parallel()
		f, c, q := faultyClient(t, 10, noRetries)
		f.Set("SendMessageBatch", sqstest.Rates{EntryFailure: 0.5})
		var entries []types.SendMessageBatchRequestEntry
		for i := range 10 {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprint("m", i))})
		}
		out, err := c.SendMessageBatch(testContext(t), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil {
			t.Fatalf("SendMessageBatch: %v", err)
		}
		failed := wantFailedOnSQSSide(t, out.Failed)
		if len(out.Successful)+len(failed) != 10 || len(failed) == 0 || len(out.Successful) == 0 {
			t.Fatalf("%d successful, %d failed; want 10 in all, some of each", len(out.Successful), len(failed))
		}
		if n := f.Count("SendMessageBatch", sqstest.EntryFailure); n != len(failed) {
			t.Errorf("Count(SendMessageBatch, EntryFailure) = %d, want %d", n, len(failed))
		}
		var want []string
		for _, s := range out.Successful {
			if failed[aws.ToString(s.Id)] || aws.ToString(s.MessageId) == "" {
				t.Errorf("successful entry %s: message id %q", aws.ToString(s.Id), aws.ToString(s.MessageId))
			}
			want = append(want, "m"+aws.ToString(s.Id))
		}
		got := bodies(sqstest.Drain(t, c, q.URL, 0, 0))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("the queue holds %q, want the successful entries only, %q", got, want)
		}
	})

	t.Run("DeleteMessageBatch", func(t *testing.T) {
		t.Parallel()
		f, c, q := faultyClient(t, 11, noRetries)
		for i := range 3 {
			send(t, c, q.URL, fmt.Sprint("m", i), nil)
		}
		msgs := sqstest.Drain(t, c, q.URL, 3, 2*time.Second)
		var entries []types.DeleteMessageBatchRequestEntry
		for i, m := range msgs {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		}
		f.Set("DeleteMessageBatch", sqstest.Rates{EntryFailure: 1})
		out, err := c.DeleteMessageBatch(testContext(t), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil {
			t.Fatalf("DeleteMessageBatch: %v", err)
		}
		if failed := wantFailedOnSQSSide(t, out.Failed); len(out.Successful) != 0 || len(failed) != 3 {
			t.Fatalf("%d successful, %d failed; want every entry failed", len(out.Successful), len(failed))
		}
		wantCount(t, c, q.URL, 0, 3) // none reached the server

		// Disabled, the same entries go through.
		f.SetEnabled(false)
		out, err = c.DeleteMessageBatch(testContext(t), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil || len(out.Successful) != 3 || len(out.Failed) != 0 {
			t.Fatalf("faults disabled: DeleteMessageBatch: %v, %+v; want every entry successful", err, out)
		}
		wantCount(t, c, q.URL, 0, 0)
		if n := f.Count("DeleteMessageBatch", sqstest.EntryFailure); n != 3 {
			t.Errorf("Count(DeleteMessageBatch, EntryFailure) = %d, want 3", n)
		}
	})

	t.Run("ChangeMessageVisibilityBatch", func(t *testing.T) {
		t.Parallel()
		f, c, q := faultyClient(t, 12, noRetries)
		for i := range 10 {
			send(t, c, q.URL, fmt.Sprint("m", i), nil)
		}
		msgs := sqstest.Drain(t, c, q.URL, 10, 2*time.Second)
		var entries []types.ChangeMessageVisibilityBatchRequestEntry
		for i, m := range msgs {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		}
		f.Set("ChangeMessageVisibilityBatch", sqstest.Rates{EntryFailure: 0.5})
		out, err := c.ChangeMessageVisibilityBatch(testContext(t), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil {
			t.Fatalf("ChangeMessageVisibilityBatch: %v", err)
		}
		failed := wantFailedOnSQSSide(t, out.Failed)
		if len(out.Successful)+len(failed) != 10 || len(failed) == 0 || len(out.Successful) == 0 {
			t.Fatalf("%d successful, %d failed; want 10 in all, some of each", len(out.Successful), len(failed))
		}
		// The changed messages are visible again; the others are in flight.
		got := sqstest.Drain(t, c, q.URL, 0, 0)
		if len(got) != len(out.Successful) {
			t.Fatalf("%d messages visible again, want the %d changed", len(got), len(out.Successful))
		}
		for _, m := range got {
			for i, sent := range msgs {
				if aws.ToString(sent.MessageId) == aws.ToString(m.MessageId) && failed[fmt.Sprint(i)] {
					t.Errorf("message %s is visible again, but its change failed", aws.ToString(m.Body))
				}
			}
		}
	})

	t.Run("OnlyBatches", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Error("Set(SendMessage, EntryFailure) did not panic")
			}
		}()
		sqstest.NewFaults(1, nil).Set("SendMessage", sqstest.Rates{EntryFailure: 0.5})
	})
}
