package sqstest_test

// These tests pin down the behaviour of the local SQS-compatible servers
// (fauxqs, see scripts/sqs, and moto, see scripts/moto) that sqsonce relies
// on. Where a server differs from Amazon SQS, or where SQS documents no
// single outcome and the servers differ from each other, the test asks
// sqstest.Server which one it talks to, asserts what that one does and says
// so in a "Differs from SQS" comment (with what SQS does), so that a server
// upgrade that changes it is noticed. sqsonce's own tests must hold on
// every one of them.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

func TestSendReceiveDelete(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})

	sent := send(t, c, q.URL, "hello", nil)
	if aws.ToString(sent.MessageId) == "" || aws.ToString(sent.MD5OfMessageBody) == "" {
		t.Fatalf("SendMessage returned MessageId=%q MD5OfMessageBody=%q", aws.ToString(sent.MessageId), aws.ToString(sent.MD5OfMessageBody))
	}
	wantCount(t, c, q.URL, 1, 0)

	m := receiveOne(t, c, q.URL, 1)
	if got, want := aws.ToString(m.MessageId), aws.ToString(sent.MessageId); got != want {
		t.Errorf("MessageId = %q, want %q", got, want)
	}
	if got := aws.ToString(m.Body); got != "hello" {
		t.Errorf("Body = %q, want %q", got, "hello")
	}
	if got, want := aws.ToString(m.MD5OfBody), aws.ToString(sent.MD5OfMessageBody); got != want {
		t.Errorf("MD5OfBody = %q, want %q", got, want)
	}
	if aws.ToString(m.ReceiptHandle) == "" {
		t.Error("empty ReceiptHandle")
	}
	wantCount(t, c, q.URL, 0, 1)
	if msgs := receive(t, c, q.URL, 10, 0); len(msgs) != 0 {
		t.Fatalf("an in-flight message was delivered again: %q", bodies(msgs))
	}

	del(t, c, q.URL, m)
	wantCount(t, c, q.URL, 0, 0)
	if msgs := receive(t, c, q.URL, 10, 0); len(msgs) != 0 {
		t.Fatalf("a deleted message was delivered again: %q", bodies(msgs))
	}
}

func TestSendMessageBatchAndDeleteMessageBatch(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	var entries []types.SendMessageBatchRequestEntry
	var want []string
	for i := range 10 {
		body := fmt.Sprintf("m%d", i)
		want = append(want, body)
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(body), MessageBody: aws.String(body)})
	}
	sent, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
	if err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	if len(sent.Successful) != 10 || len(sent.Failed) != 0 {
		t.Fatalf("SendMessageBatch: %d successful, %d failed, want 10 and 0", len(sent.Successful), len(sent.Failed))
	}
	for _, s := range sent.Successful {
		if aws.ToString(s.MessageId) == "" {
			t.Errorf("entry %s: empty MessageId", aws.ToString(s.Id))
		}
	}
	wantCount(t, c, q.URL, 10, 0)

	msgs := sqstest.Drain(t, c, q.URL, 10, 2*time.Second)
	got := bodies(msgs)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("received %q, want %q", got, want)
	}

	var dels []types.DeleteMessageBatchRequestEntry
	for i, m := range msgs {
		dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	deleted, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: dels})
	if err != nil {
		t.Fatalf("DeleteMessageBatch: %v", err)
	}
	if len(deleted.Successful) != 10 || len(deleted.Failed) != 0 {
		t.Fatalf("DeleteMessageBatch: %d successful, %d failed, want 10 and 0", len(deleted.Successful), len(deleted.Failed))
	}
	wantCount(t, c, q.URL, 0, 0)
}

func TestDeleteMessageBatchInvalidHandle(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})

	out, err := c.DeleteMessageBatch(testContext(t), &sqs.DeleteMessageBatchInput{
		QueueUrl: aws.String(q.URL),
		Entries:  []types.DeleteMessageBatchRequestEntry{{Id: aws.String("bogus"), ReceiptHandle: aws.String("not-a-receipt-handle")}},
	})
	if err != nil {
		t.Fatalf("DeleteMessageBatch: %v", err)
	}
	switch sqstest.Server(t) {
	case sqstest.Fauxqs:
		// Differs from SQS: SQS reports the entry in Failed with code
		// ReceiptHandleIsInvalid; fauxqs reports every entry as successful.
		if len(out.Successful) != 1 || len(out.Failed) != 0 {
			t.Fatalf("DeleteMessageBatch with a bogus handle: %d successful, %d failed; fauxqs 1.9.2 gives 1 and 0", len(out.Successful), len(out.Failed))
		}
	case sqstest.Moto:
		// As SQS: the entry fails with ReceiptHandleIsInvalid.
		if len(out.Successful) != 0 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" {
			t.Fatalf("DeleteMessageBatch with a bogus handle: %d successful, failed %+v; want one ReceiptHandleIsInvalid", len(out.Successful), out.Failed)
		}
	}
}

func TestChangeMessageVisibilityZeroRedelivers(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	send(t, c, q.URL, "again", nil)
	m1 := receiveOne(t, c, q.URL, 1)
	if msgs := receive(t, c, q.URL, 10, 0); len(msgs) != 0 {
		t.Fatalf("in-flight message delivered again: %q", bodies(msgs))
	}
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.URL), ReceiptHandle: m1.ReceiptHandle, VisibilityTimeout: 0,
	}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	wantCount(t, c, q.URL, 1, 0)

	m2 := receiveOne(t, c, q.URL, 0)
	if aws.ToString(m2.MessageId) != aws.ToString(m1.MessageId) {
		t.Fatalf("got message %s, want %s", aws.ToString(m2.MessageId), aws.ToString(m1.MessageId))
	}
	if aws.ToString(m2.ReceiptHandle) == aws.ToString(m1.ReceiptHandle) {
		t.Error("a second receive returned the same receipt handle")
	}
	if got := m2.Attributes["ApproximateReceiveCount"]; got != "2" {
		t.Errorf("ApproximateReceiveCount = %q, want 2", got)
	}
}

func TestChangeMessageVisibilityExtends(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{VisibilityTimeout: time.Second})

	send(t, c, q.URL, "slow", nil)
	m := receiveOne(t, c, q.URL, 1)
	if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 3,
	}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // past the queue's 1 s, within the new 3 s
	if msgs := receive(t, c, q.URL, 10, 0); len(msgs) != 0 {
		t.Fatalf("message delivered again while its extended visibility timeout runs: %q", bodies(msgs))
	}
	wantCount(t, c, q.URL, 0, 1)
	del(t, c, q.URL, m) // the receipt handle is still valid
	wantCount(t, c, q.URL, 0, 0)
}

func TestChangeMessageVisibilityBatch(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	for i := range 3 {
		send(t, c, q.URL, fmt.Sprintf("b%d", i), nil)
	}
	first := sqstest.Drain(t, c, q.URL, 3, 2*time.Second)
	if len(first) != 3 {
		t.Fatalf("received %d messages, want 3", len(first))
	}
	var entries []types.ChangeMessageVisibilityBatchRequestEntry
	for i, m := range first {
		entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		})
	}
	out, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
	if err != nil {
		t.Fatalf("ChangeMessageVisibilityBatch: %v", err)
	}
	if len(out.Successful) != 3 || len(out.Failed) != 0 {
		t.Fatalf("ChangeMessageVisibilityBatch: %d successful, %d failed, want 3 and 0", len(out.Successful), len(out.Failed))
	}
	wantCount(t, c, q.URL, 3, 0)

	second := sqstest.Drain(t, c, q.URL, 3, 2*time.Second)
	if len(second) != 3 {
		t.Fatalf("received %d messages after visibility 0, want 3", len(second))
	}
	for _, m := range second {
		if got := m.Attributes["ApproximateReceiveCount"]; got != "2" {
			t.Errorf("%s: ApproximateReceiveCount = %q, want 2", aws.ToString(m.Body), got)
		}
	}

	// The receipt handles of the first receive are stale now. The batch
	// answers them per entry, never by failing the call.
	out, err = c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.URL), Entries: entries[:1]})
	if err != nil {
		t.Fatalf("ChangeMessageVisibilityBatch with a stale handle: %v", err)
	}
	// Differs from SQS, or not: SQS documents no outcome for the handle of
	// an earlier receive here (for DeleteMessage it says the call succeeds
	// and the message "might not" be deleted). Code must work with both.
	switch sqstest.Server(t) {
	case sqstest.Fauxqs:
		// fauxqs fails the entry.
		if len(out.Successful) != 0 || len(out.Failed) != 1 {
			t.Fatalf("stale handle: %d successful, %d failed, want 0 and 1", len(out.Successful), len(out.Failed))
		}
		if f := out.Failed[0]; aws.ToString(f.Code) != "ReceiptHandleIsInvalid" || !f.SenderFault {
			t.Errorf("stale handle: Failed entry code %q sender fault %v, want ReceiptHandleIsInvalid, true", aws.ToString(f.Code), f.SenderFault)
		}
	case sqstest.Moto:
		// moto accepts every handle the message was ever received with,
		// and changes the visibility of the message as it is now.
		if len(out.Successful) != 1 || len(out.Failed) != 0 {
			t.Fatalf("stale handle: %d successful, %d failed; moto 5 gives 1 and 0", len(out.Successful), len(out.Failed))
		}
	}
}

func TestChangeMessageVisibilityNotInFlight(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})

	send(t, c, q.URL, "gone", nil)
	m := receiveOne(t, c, q.URL, 1)
	del(t, c, q.URL, m)
	_, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 10,
	})
	// SQS documents both MessageNotInflight and ReceiptHandleIsInvalid for
	// ChangeMessageVisibility, and not which one a deleted message's handle
	// gets; the servers differ. Code must treat both as "not ours to
	// change".
	switch sqstest.Server(t) {
	case sqstest.Fauxqs:
		var notInFlight *types.MessageNotInflight
		if !errors.As(err, &notInFlight) {
			t.Fatalf("ChangeMessageVisibility on a deleted message: got %v, want *types.MessageNotInflight", err)
		}
		// As with SQS, the code is the legacy query code from
		// X-Amzn-Query-Error.
		if got := notInFlight.ErrorCode(); got != "AWS.SimpleQueueService.MessageNotInflight" {
			t.Errorf("ErrorCode() = %q", got)
		}
	case sqstest.Moto:
		var invalid *types.ReceiptHandleIsInvalid
		if !errors.As(err, &invalid) {
			t.Fatalf("ChangeMessageVisibility on a deleted message: got %v; moto 5 answers *types.ReceiptHandleIsInvalid", err)
		}
	}
}

func TestVisibilityTimeoutExpiryRedelivers(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{VisibilityTimeout: time.Second})

	send(t, c, q.URL, "retry me", nil)
	m1 := receiveOne(t, c, q.URL, 0)
	start := time.Now()
	m2 := receiveOne(t, c, q.URL, 2) // long poll across the expiry
	if elapsed := time.Since(start); elapsed < 800*time.Millisecond {
		t.Errorf("message came back after %v, before its 1 s visibility timeout", elapsed)
	}
	if aws.ToString(m2.MessageId) != aws.ToString(m1.MessageId) {
		t.Fatalf("got message %s, want %s", aws.ToString(m2.MessageId), aws.ToString(m1.MessageId))
	}
	if got := m2.Attributes["ApproximateReceiveCount"]; got != "2" {
		t.Errorf("ApproximateReceiveCount = %q, want 2", got)
	}
}

func TestCountIsStaleAfterVisibilityExpiry(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{VisibilityTimeout: time.Second})

	send(t, c, q.URL, "m", nil)
	receiveOne(t, c, q.URL, 0)
	time.Sleep(1300 * time.Millisecond)
	switch sqstest.Server(t) {
	case sqstest.Fauxqs:
		// Differs from SQS: fauxqs returns expired in-flight messages to
		// the queue only when a ReceiveMessage (or a pending long poll)
		// looks at it, so GetQueueAttributes still counts the message as
		// in flight after its visibility timeout. SQS would report it
		// visible (1, 0).
		wantCount(t, c, q.URL, 0, 1)
	case sqstest.Moto:
		// As SQS: visible again once its visibility timeout is over.
		wantCount(t, c, q.URL, 1, 0)
	}
	receive(t, c, q.URL, 1, 0)
	// The receive made the message visible and took it again.
	wantCount(t, c, q.URL, 0, 1)
}

func TestLongPollReturnsWhenMessageArrives(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	sendErr := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("late")})
		sendErr <- err
	}()
	start := time.Now()
	msgs := receive(t, c, q.URL, 10, 2)
	elapsed := time.Since(start)
	if err := <-sendErr; err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if len(msgs) != 1 || aws.ToString(msgs[0].Body) != "late" {
		t.Fatalf("long poll returned %q, want [late]", bodies(msgs))
	}
	if elapsed >= 1500*time.Millisecond {
		t.Errorf("long poll took %v; it should return soon after the message arrives (~300ms)", elapsed)
	}
}

func TestLongPollWaitsOnEmptyQueue(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})

	start := time.Now()
	msgs := receive(t, c, q.URL, 10, 1)
	elapsed := time.Since(start)
	if len(msgs) != 0 {
		t.Fatalf("received %q from an empty queue", bodies(msgs))
	}
	if elapsed < 900*time.Millisecond || elapsed > 1900*time.Millisecond {
		t.Errorf("empty 1 s long poll took %v", elapsed)
	}
}

func TestRedriveToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: time.Second})

	sent := send(t, c, q.URL, "poison", func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			"kind": {DataType: aws.String("String"), StringValue: aws.String("poison")},
		}
	})
	r1 := receiveOne(t, c, q.URL, 0)
	r2 := receiveOne(t, c, q.URL, 2) // after the 1 s visibility timeout
	for i, m := range []types.Message{r1, r2} {
		if got, want := m.Attributes["ApproximateReceiveCount"], strconv.Itoa(i+1); got != want {
			t.Errorf("receive %d: ApproximateReceiveCount = %q, want %s", i+1, got, want)
		}
	}
	// The receive after the second visibility timeout would be the third
	// (> maxReceiveCount): the message moves to the DLQ instead of being
	// delivered.
	if msgs := receive(t, c, q.URL, 10, 2); len(msgs) != 0 {
		t.Fatalf("message delivered a third time: %q", bodies(msgs))
	}
	wantCount(t, c, q.URL, 0, 0)

	dl := sqstest.Drain(t, c, q.DLQURL, 1, 2*time.Second)
	if len(dl) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dl))
	}
	m := dl[0]
	if aws.ToString(m.MessageId) != aws.ToString(sent.MessageId) || aws.ToString(m.Body) != "poison" {
		t.Errorf("DLQ message %s %q, want %s %q", aws.ToString(m.MessageId), aws.ToString(m.Body), aws.ToString(sent.MessageId), "poison")
	}
	if got := aws.ToString(m.MessageAttributes["kind"].StringValue); got != "poison" {
		t.Errorf("DLQ message attribute kind = %q, want poison", got)
	}
	if m.Attributes["SentTimestamp"] != r1.Attributes["SentTimestamp"] {
		t.Errorf("SentTimestamp changed on the move: %s, was %s", m.Attributes["SentTimestamp"], r1.Attributes["SentTimestamp"])
	}
	// The receive count carries over from the source queue. SQS documents
	// no exact figure; the servers differ.
	switch sqstest.Server(t) {
	case sqstest.Fauxqs:
		// 2 deliveries, 1 counted by the receive that moved it, 1 for
		// this receive.
		if got := m.Attributes["ApproximateReceiveCount"]; got != "4" {
			t.Errorf("DLQ ApproximateReceiveCount = %q; fauxqs 1.9.2 gives 4", got)
		}
	case sqstest.Moto:
		// 2 deliveries and this receive.
		if got := m.Attributes["ApproximateReceiveCount"]; got != "3" {
			t.Errorf("DLQ ApproximateReceiveCount = %q; moto 5 gives 3", got)
		}
	}
	// Differs from SQS: SQS adds the DeadLetterQueueSourceArn system
	// attribute to moved messages; neither fauxqs nor moto does.
	if v, ok := m.Attributes["DeadLetterQueueSourceArn"]; ok {
		t.Errorf("DeadLetterQueueSourceArn = %q; fauxqs 1.9.2 and moto 5 do not set it", v)
	}
}

func TestRedriveFIFOToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, MaxReceiveCount: 1})
	if path.Ext(q.DLQURL) != ".fifo" {
		t.Fatalf("DLQ of a FIFO queue is %s, want a FIFO queue", q.DLQURL)
	}

	sendFIFO(t, c, q.URL, "bad", "g", "d1")
	sendFIFO(t, c, q.URL, "good", "g", "d2")
	m := receiveOne(t, c, q.URL, 0)
	if aws.ToString(m.Body) != "bad" {
		t.Fatalf("first message %q, want bad", aws.ToString(m.Body))
	}
	if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
	}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	// The next receive moves "bad" to the DLQ and unblocks its group.
	if got := bodies(receive(t, c, q.URL, 10, 0)); !slices.Equal(got, []string{"good"}) {
		t.Fatalf("after the move received %q, want [good]", got)
	}
	dl := sqstest.Drain(t, c, q.DLQURL, 1, 2*time.Second)
	if len(dl) != 1 || aws.ToString(dl[0].Body) != "bad" {
		t.Fatalf("DLQ holds %q, want [bad]", bodies(dl))
	}
	if got := dl[0].Attributes["MessageGroupId"]; got != "g" {
		t.Errorf("DLQ MessageGroupId = %q, want g", got)
	}
}

// A receive that moves a FIFO group's visible head to the dead-letter
// queue (its receives past maxReceiveCount) still holds the group at its
// first message in flight: the messages behind that one stay, as they do
// for every other receive (AWS delivers a group's visible messages up to
// its first in flight, see TestFIFOGroupUpToFirstInFlight; a redrive is
// no exception). Here "bad" (given back) and "held" (in flight) were
// received together; the next receive moves "bad" and must not return
// "after". (fauxqs took the next message of the group once it had moved
// the head, past the one in flight.)
func TestFIFORedriveKeepsTheGroupHeld(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, MaxReceiveCount: 1, VisibilityTimeout: time.Minute})
	for _, b := range []string{"bad", "held", "after"} {
		sendFIFO(t, c, q.URL, b, "g", b)
	}
	first := receive(t, c, q.URL, 2, 0)
	if got := bodies(first); !slices.Equal(got, []string{"bad", "held"}) {
		t.Fatalf("received %q, want [bad held]", got)
	}
	if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.URL), ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 0,
	}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	if got := bodies(receive(t, c, q.URL, 10, 0)); len(got) != 0 {
		t.Fatalf("with bad moved to the dead-letter queue and held in flight received %q, want nothing", got)
	}
	if dl := sqstest.Drain(t, c, q.DLQURL, 1, 2*time.Second); len(dl) != 1 || aws.ToString(dl[0].Body) != "bad" {
		t.Fatalf("DLQ holds %q, want [bad]", bodies(dl))
	}
	if _, err := c.DeleteMessage(testContext(t), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: first[1].ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	if got := bodies(receive(t, c, q.URL, 10, 0)); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("with held deleted received %q, want [after]", got)
	}
}

func TestQueueAttributes(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 5 * time.Second})

	out, err := c.GetQueueAttributes(testContext(t), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameRedrivePolicy,
			types.QueueAttributeNameMessageRetentionPeriod,
			types.QueueAttributeNameQueueArn,
			types.QueueAttributeNameVisibilityTimeout,
		},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	a := out.Attributes
	if len(a) != 4 {
		t.Errorf("got %d attributes, want the 4 requested: %v", len(a), a)
	}
	// The account is the server's own (000000000000 on fauxqs,
	// 123456789012 on moto): twelve digits.
	wantARN := regexp.MustCompile(`^arn:aws:sqs:` + sqstest.Region + `:[0-9]{12}:` + regexp.QuoteMeta(path.Base(q.URL)) + `$`)
	if a["QueueArn"] != q.ARN || !wantARN.MatchString(q.ARN) {
		t.Errorf("QueueArn = %q, Queue.ARN = %q, want them equal and matching %s", a["QueueArn"], q.ARN, wantARN)
	}
	if a["VisibilityTimeout"] != "5" {
		t.Errorf("VisibilityTimeout = %q, want 5", a["VisibilityTimeout"])
	}
	if a["MessageRetentionPeriod"] != "345600" {
		t.Errorf("MessageRetentionPeriod = %q, want the default 345600 (4 days)", a["MessageRetentionPeriod"])
	}
	var policy struct {
		DeadLetterTargetArn string      `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.Number `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(a["RedrivePolicy"]), &policy); err != nil {
		t.Fatalf("RedrivePolicy %q: %v", a["RedrivePolicy"], err)
	}
	if policy.DeadLetterTargetArn != q.DLQARN || policy.MaxReceiveCount.String() != "3" {
		t.Errorf("RedrivePolicy = %s, want target %s and maxReceiveCount 3", a["RedrivePolicy"], q.DLQARN)
	}

	fifo := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, ContentBasedDedup: true})
	out, err = c.GetQueueAttributes(testContext(t), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(fifo.URL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes(All): %v", err)
	}
	for name, want := range map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30", "QueueArn": fifo.ARN} {
		if got := out.Attributes[name]; got != want {
			t.Errorf("FIFO queue %s = %q, want %q", name, got, want)
		}
	}
	if _, ok := out.Attributes["RedrivePolicy"]; ok {
		t.Error("queue without DLQ has a RedrivePolicy")
	}
}

func TestGetQueueURL(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(path.Base(q.URL))})
	if err != nil {
		t.Fatalf("GetQueueUrl: %v", err)
	}
	if aws.ToString(out.QueueUrl) != q.URL {
		t.Errorf("GetQueueUrl = %q, want %q", aws.ToString(out.QueueUrl), q.URL)
	}

	_, err = c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(path.Base(q.URL) + "-missing")})
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) {
		t.Fatalf("GetQueueUrl of a missing queue: got %v, want *types.QueueDoesNotExist", err)
	}
	if got := missing.ErrorCode(); got != "AWS.SimpleQueueService.NonExistentQueue" {
		t.Errorf("ErrorCode() = %q, want the legacy query code AWS.SimpleQueueService.NonExistentQueue", got)
	}
}

func TestFIFOGroupOrdering(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	const perGroup = 5
	for i := range perGroup {
		for _, g := range []string{"A", "B"} {
			body := fmt.Sprintf("%s%d", g, i)
			sendFIFO(t, c, q.URL, body, g, body)
		}
	}
	got := map[string][]string{}
	for range 4 * perGroup {
		if len(got["A"])+len(got["B"]) == 2*perGroup {
			break
		}
		for _, m := range receive(t, c, q.URL, 10, 0) {
			g := m.Attributes["MessageGroupId"]
			got[g] = append(got[g], aws.ToString(m.Body))
			del(t, c, q.URL, m)
		}
	}
	for _, g := range []string{"A", "B"} {
		var want []string
		for i := range perGroup {
			want = append(want, fmt.Sprintf("%s%d", g, i))
		}
		if !slices.Equal(got[g], want) {
			t.Errorf("group %s delivered %q, want %q", g, got[g], want)
		}
	}
}

func TestFIFOGroupBlockedWhileInFlight(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	sendFIFO(t, c, q.URL, "A1", "A", "A1")
	sendFIFO(t, c, q.URL, "A2", "A", "A2")
	sendFIFO(t, c, q.URL, "B1", "B", "B1")

	a1 := receiveOne(t, c, q.URL, 0)
	if aws.ToString(a1.Body) != "A1" {
		t.Fatalf("first message %q, want A1", aws.ToString(a1.Body))
	}
	if got := bodies(receive(t, c, q.URL, 10, 0)); !slices.Equal(got, []string{"B1"}) {
		t.Fatalf("with A1 in flight received %q, want [B1] (A2 must wait)", got)
	}
	if got := bodies(receive(t, c, q.URL, 10, 0)); len(got) != 0 {
		t.Fatalf("with A1 and B1 in flight received %q, want nothing", got)
	}
	del(t, c, q.URL, a1)
	if got := bodies(receive(t, c, q.URL, 10, 0)); !slices.Equal(got, []string{"A2"}) {
		t.Fatalf("after deleting A1 received %q, want [A2]", got)
	}
}

// As SQS, one receive returns several messages of one group, in order
// (scripts/sqs/server.mjs makes fauxqs do so), and the group's later
// messages wait while they are in flight.
func TestFIFOSeveralMessagesOfAGroupPerReceive(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	for _, b := range []string{"G1", "G2", "G3", "H1"} {
		g := b[:1]
		sendFIFO(t, c, q.URL, b, g, b)
	}
	got := receive(t, c, q.URL, 10, 0)
	var ofG []string
	for _, m := range got {
		if m.Attributes["MessageGroupId"] == "G" {
			ofG = append(ofG, aws.ToString(m.Body))
		}
	}
	if len(got) != 4 || !slices.Equal(ofG, []string{"G1", "G2", "G3"}) {
		t.Fatalf("received %q, want G1, G2, G3 in order and H1", bodies(got))
	}
	del(t, c, q.URL, got[0])
	if more := bodies(receive(t, c, q.URL, 10, 0)); len(more) != 0 {
		t.Fatalf("with messages of each group in flight received %q, want nothing", more)
	}
	sendFIFO(t, c, q.URL, "G4", "G", "G4")
	if more := bodies(receive(t, c, q.URL, 10, 0)); len(more) != 0 {
		t.Fatalf("with G2 and G3 in flight received %q, want nothing (G4 waits)", more)
	}
}

// A FIFO group's visible messages are returned up to the first of its
// messages still in flight, as AWS does; a message in flight holds only
// those behind it. Recorded by localstack's AWS-validated
// test_fifo_group_visibility_extends_with_change_message_visibility
// (tests/aws/services/sqs/test_sqs.py and its snapshot): foo, bar and baz
// of one group received together, one of them extended from the queue's
// 1 s to 4 s, and 2.5 s later "The extended message and all messages
// within the same group that come after it are invisible": foo extended →
// [], bar → [foo], baz → [foo, bar]. And by
// test_fifo_message_group_visibility_after_terminate_visibility_timeout:
// g1-m1 and g1-m2 received, g1-m1 given back (visibility 0) while g1-m2
// is in flight → a receive of 3 returns g2-m1 and g1-m1 ("terminating the
// visibility timeout of a message in a group does not affect the
// visibility of other messages in the group"). (Both servers held the
// whole group while any of its messages was in flight; scripts/sqs/
// server.mjs and scripts/moto/server.py model AWS.)
func TestFIFOGroupUpToFirstInFlight(t *testing.T) {
	t.Parallel()
	for extended, want := range [][]string{{}, {"foo"}, {"foo", "bar"}} {
		t.Run(fmt.Sprintf("Extended%d", extended), func(t *testing.T) {
			t.Parallel()
			c := sqstest.NewClient(t, nil)
			q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, VisibilityTimeout: time.Second})
			for _, b := range []string{"foo", "bar", "baz"} {
				sendFIFO(t, c, q.URL, b, "1", b)
			}
			all := receive(t, c, q.URL, 5, 0)
			if got := bodies(all); !slices.Equal(got, []string{"foo", "bar", "baz"}) {
				t.Fatalf("received %q, want [foo bar baz]", got)
			}
			if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(q.URL), ReceiptHandle: all[extended].ReceiptHandle, VisibilityTimeout: 4,
			}); err != nil {
				t.Fatalf("ChangeMessageVisibility: %v", err)
			}
			time.Sleep(2500 * time.Millisecond) // past 1 s, within 4 s
			if got := bodies(receive(t, c, q.URL, 5, 0)); !slices.Equal(got, want) {
				t.Fatalf("with %s extended received %q, want %q", aws.ToString(all[extended].Body), got, want)
			}
		})
	}
	t.Run("HeadGivenBack", func(t *testing.T) {
		t.Parallel()
		c := sqstest.NewClient(t, nil)
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})
		for _, b := range []string{"g1-m1", "g1-m2", "g2-m1"} {
			sendFIFO(t, c, q.URL, b, b[:2], b)
		}
		first := receive(t, c, q.URL, 2, 0)
		if got := bodies(first); !slices.Equal(got, []string{"g1-m1", "g1-m2"}) {
			t.Fatalf("received %q, want [g1-m1 g1-m2]", got)
		}
		if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(q.URL), ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 0,
		}); err != nil {
			t.Fatalf("ChangeMessageVisibility: %v", err)
		}
		got := bodies(receive(t, c, q.URL, 3, 2))
		slices.Sort(got)
		if !slices.Equal(got, []string{"g1-m1", "g2-m1"}) {
			t.Fatalf("with g1-m1 given back and g1-m2 in flight received %q, want g1-m1 and g2-m1", got)
		}
	})
}

// A FIFO queue's receipt handle expires when the message's visibility
// timeout lapses, whether or not the message was received again: deleting
// with it or changing the message's visibility with it is refused, and the
// message stays. Recorded by localstack's AWS-validated
// test_fifo_delete_after_visibility_timeout: a FIFO message received with a
// 1 s visibility timeout, "time.sleep(timeout)", DeleteMessage fails with
// Code InvalidParameterValue, "Value <receipt-handle:1> for parameter
// ReceiptHandle is invalid. Reason: The receipt handle has expired."
// ChangeMessageVisibility likewise: "any attempt to change the visibility
// timeout or to delete that message 10 seconds after you initially change
// the visibility timeout (a total of 25 seconds) might result in an error"
// (API Reference, ChangeMessageVisibility); a handle given back with
// visibility 0 has lapsed too ("FIFO queues will reject DeleteMessage
// requests when the receipt handle is expired, which means that handles
// with a VisibilityTimeout of 0 cannot be deleted", aws/aws-sdk-js#1750).
// The batch forms fail the entry, not the call. A standard queue takes a
// lapsed handle of a message not received since: recorded,
// test_change_message_visibility_after_visibility_timeout_expiration
// answers 200, and test_remove_message_with_old_receipt_handle deletes the
// message. (fauxqs took a lapsed FIFO handle until a receive put the
// message back; moto took every handle a message ever had.)
func TestFIFOReceiptHandleExpires(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// lapse makes the handle of m lapse and returns the message as it
		// is now in flight, if it is.
		lapse func(t *testing.T, c *sqs.Client, q sqstest.Queue, m types.Message) *types.Message
	}{
		{"TimedOut", func(t *testing.T, c *sqs.Client, q sqstest.Queue, m types.Message) *types.Message {
			time.Sleep(1500 * time.Millisecond) // past the queue's 1 s
			return nil
		}},
		{"GivenBack", func(t *testing.T, c *sqs.Client, q sqstest.Queue, m types.Message) *types.Message {
			if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			}); err != nil {
				t.Fatalf("ChangeMessageVisibility to 0: %v", err)
			}
			return nil
		}},
		{"ReceivedAgain", func(t *testing.T, c *sqs.Client, q sqstest.Queue, m types.Message) *types.Message {
			again := receiveOne(t, c, q.URL, 2) // after the queue's 1 s
			return &again
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := sqstest.NewClient(t, nil)
			q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, VisibilityTimeout: time.Second})
			ctx := testContext(t)
			sendFIFO(t, c, q.URL, "m", "g", "m")
			m := receiveOne(t, c, q.URL, 0)
			holder := tc.lapse(t, c, q, m)

			_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle})
			wantExpired(t, "DeleteMessage", err)
			_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 10})
			wantExpired(t, "ChangeMessageVisibility", err)
			deleted, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL),
				Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("old"), ReceiptHandle: m.ReceiptHandle}}})
			if err != nil {
				t.Fatalf("DeleteMessageBatch with an expired handle: %v, want the entry failed", err)
			}
			wantExpiredEntry(t, "DeleteMessageBatch", len(deleted.Successful), deleted.Failed)
			changed, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.URL),
				Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("old"), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 10}}})
			if err != nil {
				t.Fatalf("ChangeMessageVisibilityBatch with an expired handle: %v, want the entry failed", err)
			}
			wantExpiredEntry(t, "ChangeMessageVisibilityBatch", len(changed.Successful), changed.Failed)

			// The message stays: in flight with its newer handle, or
			// visible to the next receive; the newest handle deletes it.
			if holder == nil {
				again := receiveOne(t, c, q.URL, 0)
				holder = &again
			} else if more := receive(t, c, q.URL, 10, 0); len(more) != 0 {
				t.Fatalf("received %q while the message is in flight", bodies(more))
			}
			if aws.ToString(holder.MessageId) != aws.ToString(m.MessageId) {
				t.Fatalf("received %s, want %s again", aws.ToString(holder.MessageId), aws.ToString(m.MessageId))
			}
			del(t, c, q.URL, *holder)
			wantCount(t, c, q.URL, 0, 0)
		})
	}
	t.Run("StandardQueueTakesALapsedHandle", func(t *testing.T) {
		t.Parallel()
		c := sqstest.NewClient(t, nil)
		q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{VisibilityTimeout: time.Second})
		send(t, c, q.URL, "m", nil)
		m := receiveOne(t, c, q.URL, 0)
		time.Sleep(1500 * time.Millisecond)
		if _, err := c.ChangeMessageVisibility(testContext(t), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 10,
		}); err != nil {
			t.Fatalf("ChangeMessageVisibility with a lapsed handle on a standard queue: %v", err)
		}
		del(t, c, q.URL, m)
		wantCount(t, c, q.URL, 0, 0)
	})
}

// A message's visibility can be extended to at most 12 hours from the
// receive that took it: "The maximum visibility timeout is 12 hours from
// the time that Amazon SQS receives the ReceiveMessage request. Extending
// the visibility timeout does not reset the 12 hour maximum. ... if you
// receive a message and immediately set the 12 hour maximum by sending a
// ChangeMessageVisibility call with VisibilityTimeout equal to 43,200
// seconds, it will likely fail. However, using a value of 43,195 seconds
// will work" (SQS Developer Guide, "Processing messages in a timely
// manner"); "If you attempt to set the VisibilityTimeout to a value greater
// than the maximum time left, Amazon SQS returns an error" (API Reference,
// ChangeMessageVisibility). AWS answers "InvalidParameterValue: Value 43200
// for parameter VisibilityTimeout is invalid. Reason: Total
// VisibilityTimeout for the message is beyond the limit [43200 seconds]"
// (as reported from AWS in localstack/localstack#3956), and a batch fails
// the entry alone. (fauxqs took 43,200 s at any time; moto counted the 12
// hours from the send and failed the whole batch.)
func TestVisibilityAtMostTwelveHoursFromReceive(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "Standard", true: "FIFO"}[fifo], func(t *testing.T) {
			t.Parallel()
			c := sqstest.NewClient(t, nil)
			q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: fifo})
			ctx := testContext(t)
			for _, b := range []string{"a", "b"} {
				send(t, c, q.URL, b, func(in *sqs.SendMessageInput) {
					if fifo {
						in.MessageGroupId, in.MessageDeduplicationId = aws.String(b), aws.String(b)
					}
				})
			}
			// Counted from the send, the time left would be 4 s short of
			// 12 hours; counted from the receive, it is not.
			time.Sleep(4 * time.Second)
			msgs := sqstest.Drain(t, c, q.URL, 2, 2*time.Second)
			if len(msgs) != 2 {
				t.Fatalf("received %d messages, want 2", len(msgs))
			}
			change := func(m types.Message, seconds int32) error {
				_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: seconds})
				return err
			}
			if err := change(msgs[0], 43197); err != nil {
				t.Fatalf("ChangeMessageVisibility to 43,197 s right after the receive: %v", err)
			}
			time.Sleep(1100 * time.Millisecond)
			wantBeyondLimit(t, "ChangeMessageVisibility to 43,200 s a second after the receive", change(msgs[0], 43200))
			wantBeyondLimit(t, "ChangeMessageVisibility to 43,199 s a second after the receive, extended before", change(msgs[0], 43199))

			out, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.URL), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
				{Id: aws.String("beyond"), ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 43200},
				{Id: aws.String("within"), ReceiptHandle: msgs[1].ReceiptHandle, VisibilityTimeout: 43000},
			}})
			if err != nil {
				t.Fatalf("ChangeMessageVisibilityBatch with one entry beyond 12 hours: %v, want that entry failed", err)
			}
			if len(out.Successful) != 1 || aws.ToString(out.Successful[0].Id) != "within" || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "beyond" {
				t.Fatalf("ChangeMessageVisibilityBatch: successful %+v, failed %+v; want within successful, beyond failed", out.Successful, out.Failed)
			}
			if f := out.Failed[0]; aws.ToString(f.Code) != "InvalidParameterValue" || !f.SenderFault || !strings.Contains(aws.ToString(f.Message), "beyond the limit") {
				t.Errorf("failed entry %s %v %q; want InvalidParameterValue, sender's fault, beyond the limit", aws.ToString(f.Code), f.SenderFault, aws.ToString(f.Message))
			}
		})
	}
}

// wantBeyondLimit fails unless err is SQS's refusal of a visibility timeout
// beyond 12 hours from the receive.
func wantBeyondLimit(t *testing.T, call string, err error) {
	t.Helper()
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: got %v, want InvalidParameterValue: ... beyond the limit [43200 seconds]", call, err)
	}
	if apiErr.ErrorCode() != "InvalidParameterValue" || !strings.Contains(apiErr.ErrorMessage(), "Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]") {
		t.Errorf("%s: code %q, message %q; want InvalidParameterValue, ... beyond the limit [43200 seconds]", call, apiErr.ErrorCode(), apiErr.ErrorMessage())
	}
}

// wantExpired fails unless err is SQS's refusal of an expired receipt
// handle.
func wantExpired(t *testing.T, call string, err error) {
	t.Helper()
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s with an expired handle: got %v, want InvalidParameterValue: The receipt handle has expired", call, err)
	}
	if apiErr.ErrorCode() != "InvalidParameterValue" || !strings.Contains(apiErr.ErrorMessage(), "Reason: The receipt handle has expired.") {
		t.Errorf("%s with an expired handle: code %q, message %q; want InvalidParameterValue, ... Reason: The receipt handle has expired.", call, apiErr.ErrorCode(), apiErr.ErrorMessage())
	}
}

// wantExpiredEntry fails unless a batch's only entry failed for an
// expired receipt handle, on the caller's side.
func wantExpiredEntry(t *testing.T, call string, successful int, failed []types.BatchResultErrorEntry) {
	t.Helper()
	if successful != 0 || len(failed) != 1 {
		t.Fatalf("%s with an expired handle: %d successful, %d failed; want the entry failed", call, successful, len(failed))
	}
	f := failed[0]
	if aws.ToString(f.Code) != "InvalidParameterValue" || !f.SenderFault || !strings.Contains(aws.ToString(f.Message), "The receipt handle has expired") {
		t.Errorf("%s with an expired handle: failed entry %s %v %q; want InvalidParameterValue, sender's fault, The receipt handle has expired",
			call, aws.ToString(f.Code), f.SenderFault, aws.ToString(f.Message))
	}
}

// A receive with VisibilityTimeout 0 returns each message once, and the
// messages are visible again at once for the next receive, as AWS does.
// Recorded by localstack's AWS-validated
// test_fifo_receive_message_with_zero_visibility_timeout
// (tests/aws/services/sqs/test_sqs.py): g1-m1, g2-m1, g2-m2, g3-m1, g1-m2
// sent; "receive_message(MaxNumberOfMessages=3, VisibilityTimeout=0)"
// returns g1-m1, g1-m2, g2-m1; the next receive of ten returns all five,
// g3-m1, g1-m1, g1-m2, g2-m1, g2-m2 ("receiving messages from a fifo queue
// with visibility timeout = 0 terminates the group's visibility
// correctly"). The order of groups is not SQS's promise; the order within
// each group is. (fauxqs, patched to take several messages of a group per
// receive, returned the first message ten times and kept its group from
// every later receive.)
func TestFIFOReceiveWithZeroVisibilityTimeout(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	for _, b := range []string{"g1-m1", "g2-m1", "g2-m2", "g3-m1", "g1-m2"} {
		sendFIFO(t, c, q.URL, b, b[:2], b)
	}
	receiveNow := func(queueURL string, n int32) []types.Message {
		out, err := c.ReceiveMessage(testContext(t), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queueURL), MaxNumberOfMessages: n,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
		}, withField("VisibilityTimeout", 0))
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		return out.Messages
	}
	byGroup := func(msgs []types.Message) map[string][]string {
		out := map[string][]string{}
		for _, m := range msgs {
			g := m.Attributes["MessageGroupId"]
			out[g] = append(out[g], aws.ToString(m.Body))
		}
		return out
	}

	first := receiveNow(q.URL, 3)
	if got := bodies(first); len(got) != 3 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 3 {
		t.Fatalf("a receive of 3 with VisibilityTimeout 0 returned %q, want three different messages", got)
	}
	for g, got := range byGroup(first) {
		if want := map[string][]string{"g1": {"g1-m1", "g1-m2"}, "g2": {"g2-m1", "g2-m2"}, "g3": {"g3-m1"}}[g]; len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Errorf("group %s: received %q, want the group's first messages in order, %q", g, got, want)
		}
	}
	want := map[string][]string{"g1": {"g1-m1", "g1-m2"}, "g2": {"g2-m1", "g2-m2"}, "g3": {"g3-m1"}}
	for i := range 2 {
		if got := byGroup(receiveNow(q.URL, 10)); !maps.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("receive %d of ten returned %q, want every message once, in order within each group: %q", i+2, got, want)
		}
	}

	// One group alone: its messages once each, not its first ten times.
	one := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})
	sendFIFO(t, c, one.URL, "a1", "a", "a1")
	sendFIFO(t, c, one.URL, "a2", "a", "a2")
	for i := range 2 {
		if got := bodies(receiveNow(one.URL, 10)); !slices.Equal(got, []string{"a1", "a2"}) {
			t.Fatalf("one group, receive %d of ten returned %q, want [a1 a2]", i+1, got)
		}
	}
}

// Messages of one group that were in flight together and come back
// together are delivered again in the order they were sent: a FIFO queue
// delivers a group's messages in order. They come back when a receiver
// dies with them in hand (their visibility timeouts end together) or when
// it gives them back (visibility 0) after the group's first message
// failed. (fauxqs, taking several messages of a group per receive, and
// moto 5 both delivered them out of order; scripts/sqs/server.mjs and
// scripts/moto/server.py correct that.)
func TestFIFOGroupInOrderWhenMessagesComeBack(t *testing.T) {
	t.Parallel()
	want := []string{"G1", "G2", "G3"}
	for _, tc := range []struct {
		name string
		// back makes the messages received in one receive visible again.
		back func(t *testing.T, c *sqs.Client, q sqstest.Queue, msgs []types.Message)
	}{
		{"VisibilityTimeoutEnds", func(t *testing.T, c *sqs.Client, q sqstest.Queue, msgs []types.Message) {
			time.Sleep(1500 * time.Millisecond) // past the queue's 1 s
		}},
		{"GivenBack", func(t *testing.T, c *sqs.Client, q sqstest.Queue, msgs []types.Message) {
			var entries []types.ChangeMessageVisibilityBatchRequestEntry
			for i, m := range msgs {
				entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
					Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
				})
			}
			out, err := c.ChangeMessageVisibilityBatch(testContext(t), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
			if err != nil || len(out.Failed) != 0 {
				t.Fatalf("ChangeMessageVisibilityBatch to 0: %v, failed %+v", err, out)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := sqstest.NewClient(t, nil)
			q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, VisibilityTimeout: time.Second})
			for _, b := range want {
				sendFIFO(t, c, q.URL, b, "G", b)
			}
			first := receive(t, c, q.URL, 10, 0)
			if got := bodies(first); !slices.Equal(got, want) {
				t.Fatalf("first delivery %q, want %q in one receive", got, want)
			}
			tc.back(t, c, q, first)
			var got []string
			for range 10 {
				if len(got) == len(want) {
					break
				}
				for _, m := range receive(t, c, q.URL, 10, 1) {
					got = append(got, aws.ToString(m.Body))
					del(t, c, q.URL, m)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("when they came back received %q, want %q", got, want)
			}
		})
	}
}

// A message in flight holds its group's later messages for every receive,
// also for a long poll that began before it was received: two long polls
// wait on an empty queue, the first message of a group goes to one of
// them, and the other must not take the group's second message while the
// first is in flight. (moto 5 decided which groups a long poll must skip
// once, when the poll began, so the other poll took it; scripts/moto/
// server.py corrects that. fauxqs may end the other poll early, empty,
// when the first message arrives.)
func TestFIFOGroupHeldAcrossLongPolls(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	answers := make(chan []types.Message, 2)
	poll := func() {
		out, err := c.ReceiveMessage(testContext(t), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 4,
		})
		if err != nil {
			t.Errorf("ReceiveMessage: %v", err)
			answers <- nil
			return
		}
		answers <- out.Messages
	}
	go poll()
	go poll()
	time.Sleep(500 * time.Millisecond) // both polls wait
	sendFIFO(t, c, q.URL, "G1", "G", "G1")
	var g1 []types.Message
	pending := 2
	for g1 == nil && pending > 0 {
		msgs := <-answers
		pending--
		switch b := bodies(msgs); {
		case slices.Equal(b, []string{"G1"}):
			g1 = msgs
		case len(b) != 0:
			t.Fatalf("a poll received %q, want [G1] or nothing", b)
		}
	}
	if g1 == nil {
		t.Fatal("neither poll received G1")
	}
	sendFIFO(t, c, q.URL, "G2", "G", "G2")
	for range pending {
		if b := bodies(<-answers); len(b) != 0 {
			t.Fatalf("with G1 in flight the other poll received %q, want nothing", b)
		}
	}
	if b := bodies(receive(t, c, q.URL, 10, 0)); len(b) != 0 {
		t.Fatalf("with G1 in flight received %q, want nothing", b)
	}
	del(t, c, q.URL, g1[0])
	if b := bodies(receive(t, c, q.URL, 10, 1)); !slices.Equal(b, []string{"G2"}) {
		t.Fatalf("after G1 was deleted received %q, want [G2]", b)
	}
}

func TestFIFOReceiveRequestAttemptIDIgnored(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})
	ctx := testContext(t)

	sendFIFO(t, c, q.URL, "only", "g", "d")
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                aws.String(q.URL),
		MaxNumberOfMessages:     10,
		ReceiveRequestAttemptId: aws.String("attempt-1"),
	}
	first, err := c.ReceiveMessage(ctx, in)
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	if len(first.Messages) != 1 {
		t.Fatalf("first attempt received %d messages, want 1", len(first.Messages))
	}
	retry, err := c.ReceiveMessage(ctx, in)
	if err != nil {
		t.Fatalf("ReceiveMessage retry: %v", err)
	}
	// Differs from SQS: SQS answers a retried ReceiveMessage with the same
	// ReceiveRequestAttemptId (within 5 minutes) with the same messages and
	// receipt handles; fauxqs and moto ignore the id, so a receive whose
	// response was lost leaves its messages in flight until their
	// visibility timeout ends.
	if len(retry.Messages) != 0 {
		t.Fatalf("retried attempt received %q; fauxqs 1.9.2 and moto 5 return nothing", bodies(retry.Messages))
	}
}

func TestFIFODeduplication(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	impl := sqstest.Server(t)
	first := sendFIFO(t, c, q.URL, "x", "g", "d1")
	if aws.ToString(first.SequenceNumber) == "" {
		t.Error("FIFO SendMessage returned no SequenceNumber")
	}
	// SQS accepts a duplicate "successfully" and does not deliver it; it
	// documents no MessageId for the answer, and the servers differ.
	dup := sendFIFO(t, c, q.URL, "x, resent", "g", "d1")
	switch impl {
	case sqstest.Fauxqs:
		// fauxqs answers with the original message's.
		if aws.ToString(dup.MessageId) != aws.ToString(first.MessageId) || aws.ToString(dup.SequenceNumber) != aws.ToString(first.SequenceNumber) {
			t.Errorf("duplicate send returned %s/%s; fauxqs 1.9.2 returns the original %s/%s",
				aws.ToString(dup.MessageId), aws.ToString(dup.SequenceNumber), aws.ToString(first.MessageId), aws.ToString(first.SequenceNumber))
		}
	case sqstest.Moto:
		// moto answers with a new MessageId that no message has.
		if aws.ToString(dup.MessageId) == aws.ToString(first.MessageId) {
			t.Errorf("duplicate send returned the original MessageId %s; moto 5 makes a new one", aws.ToString(dup.MessageId))
		}
	}
	wantCount(t, c, q.URL, 1, 0)
	other := sendFIFO(t, c, q.URL, "y", "g", "d2")
	if aws.ToString(other.MessageId) == aws.ToString(first.MessageId) {
		t.Error("a different deduplication id returned the same MessageId")
	}
	wantCount(t, c, q.URL, 2, 0)

	// Consume both; the deduplication window outlives the messages ("Amazon
	// SQS continues tracking the deduplication ID even after the message
	// has been received and deleted", SQS Developer Guide, FIFO queue key
	// terms).
	for range 2 {
		del(t, c, q.URL, receiveOne(t, c, q.URL, 0))
	}
	// (moto 5 compares with the messages the queue still holds, and would
	// enqueue the resend; scripts/moto/server.py corrects that.)
	again := sendFIFO(t, c, q.URL, "x", "g", "d1")
	if impl == sqstest.Fauxqs && aws.ToString(again.MessageId) != aws.ToString(first.MessageId) {
		t.Errorf("resend after delete returned %s; fauxqs 1.9.2 returns the original %s", aws.ToString(again.MessageId), aws.ToString(first.MessageId))
	}
	wantCount(t, c, q.URL, 0, 0)
}

func TestFIFOContentBasedDeduplication(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true, ContentBasedDedup: true})

	a := sendFIFO(t, c, q.URL, "same", "g", "")
	b := sendFIFO(t, c, q.URL, "same", "g", "")
	d := sendFIFO(t, c, q.URL, "different", "g", "")
	// The answer to the duplicate: see TestFIFODeduplication.
	if sqstest.Server(t) == sqstest.Fauxqs && aws.ToString(a.MessageId) != aws.ToString(b.MessageId) {
		t.Errorf("same body sent twice got ids %s and %s; fauxqs 1.9.2 returns the first", aws.ToString(a.MessageId), aws.ToString(b.MessageId))
	}
	if aws.ToString(d.MessageId) == aws.ToString(a.MessageId) {
		t.Error("a different body was deduplicated")
	}
	wantCount(t, c, q.URL, 2, 0)
	m := receiveOne(t, c, q.URL, 0)
	sum := sha256.Sum256([]byte("same"))
	if got, want := m.Attributes["MessageDeduplicationId"], hex.EncodeToString(sum[:]); got != want {
		t.Errorf("MessageDeduplicationId = %q, want SHA-256 of the body %q", got, want)
	}
}

func TestSystemAttributes(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	std := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	fifo := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})

	before := time.Now().Add(-time.Second).UnixMilli()
	send(t, c, std.URL, "s", nil)
	sent := sendFIFO(t, c, fifo.URL, "f", "grp", "dedup-1")
	after := time.Now().Add(time.Second).UnixMilli()

	m := receiveOne(t, c, std.URL, 0)
	ts, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	if err != nil || ts < before || ts > after {
		t.Errorf("SentTimestamp = %q, want epoch milliseconds in [%d, %d]", m.Attributes["SentTimestamp"], before, after)
	}
	if got := m.Attributes["ApproximateReceiveCount"]; got != "1" {
		t.Errorf("ApproximateReceiveCount = %q, want 1", got)
	}
	for _, name := range []string{"ApproximateFirstReceiveTimestamp", "SenderId"} {
		if m.Attributes[name] == "" {
			t.Errorf("standard queue: system attribute %s missing from %v", name, m.Attributes)
		}
	}

	f := receiveOne(t, c, fifo.URL, 0)
	for name, want := range map[string]string{
		"MessageGroupId":          "grp",
		"MessageDeduplicationId":  "dedup-1",
		"SequenceNumber":          aws.ToString(sent.SequenceNumber),
		"ApproximateReceiveCount": "1",
	} {
		if got := f.Attributes[name]; got != want {
			t.Errorf("FIFO queue: %s = %q, want %q", name, got, want)
		}
	}
	if f.Attributes["SentTimestamp"] == "" {
		t.Errorf("FIFO queue: SentTimestamp missing from %v", f.Attributes)
	}

	// Without MessageSystemAttributeNames no system attributes come back.
	send(t, c, std.URL, "plain", nil)
	out, err := c.ReceiveMessage(testContext(t), &sqs.ReceiveMessageInput{QueueUrl: aws.String(std.URL)})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("plain receive: %d messages, want 1", len(out.Messages))
	}
	if a := out.Messages[0].Attributes; len(a) != 0 {
		t.Errorf("plain receive: system attributes %v, want none", a)
	}
}

func TestMessageAttributesRoundTrip(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	attrs := map[string]types.MessageAttributeValue{
		"str":    {DataType: aws.String("String"), StringValue: aws.String("héllo, wörld")},
		"num":    {DataType: aws.String("Number"), StringValue: aws.String("-42.5")},
		"bin":    {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 0xfe, 0xff}},
		"custom": {DataType: aws.String("String.json"), StringValue: aws.String(`{"k":1}`)},
	}
	var sent *sqs.SendMessageOutput
	for range 3 {
		sent = send(t, c, q.URL, "with attributes", func(in *sqs.SendMessageInput) { in.MessageAttributes = attrs })
	}
	if aws.ToString(sent.MD5OfMessageAttributes) == "" {
		t.Error("SendMessage returned no MD5OfMessageAttributes")
	}

	// The client checks MD5OfMessageAttributes on receive; a mismatch would
	// fail the call.
	m := receiveOne(t, c, q.URL, 0)
	if got, want := aws.ToString(m.MD5OfMessageAttributes), aws.ToString(sent.MD5OfMessageAttributes); got != want {
		t.Errorf("MD5OfMessageAttributes = %q, want %q", got, want)
	}
	if len(m.MessageAttributes) != len(attrs) {
		t.Errorf("received %d message attributes, want %d", len(m.MessageAttributes), len(attrs))
	}
	for name, want := range attrs {
		got, ok := m.MessageAttributes[name]
		if !ok {
			t.Errorf("attribute %s missing", name)
			continue
		}
		if aws.ToString(got.DataType) != aws.ToString(want.DataType) ||
			aws.ToString(got.StringValue) != aws.ToString(want.StringValue) ||
			!slices.Equal(got.BinaryValue, want.BinaryValue) {
			t.Errorf("attribute %s = {%s %q %v}, want {%s %q %v}", name,
				aws.ToString(got.DataType), aws.ToString(got.StringValue), got.BinaryValue,
				aws.ToString(want.DataType), aws.ToString(want.StringValue), want.BinaryValue)
		}
	}

	// Asking for one name returns only that one.
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MessageAttributeNames: []string{"num"}})
	if err != nil {
		t.Fatalf("ReceiveMessage(num): %v", err)
	}
	if len(out.Messages) != 1 || len(out.Messages[0].MessageAttributes) != 1 || out.Messages[0].MessageAttributes["num"].StringValue == nil {
		t.Errorf("ReceiveMessage(num): got %+v, want one message with only attribute num", out.Messages)
	}

	out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL)})
	if err != nil {
		t.Fatalf("ReceiveMessage(no names): %v", err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("ReceiveMessage(no names): %d messages, want 1", len(out.Messages))
	}
	got := len(out.Messages[0].MessageAttributes)
	switch sqstest.Server(t) {
	case sqstest.Fauxqs:
		// Differs from SQS: SQS returns no message attributes unless they
		// are asked for with MessageAttributeNames; fauxqs returns all of
		// them.
		if got != len(attrs) {
			t.Errorf("ReceiveMessage without MessageAttributeNames: %d attributes; fauxqs 1.9.2 returns every one", got)
		}
	case sqstest.Moto:
		// As SQS: none.
		if got != 0 {
			t.Errorf("ReceiveMessage without MessageAttributeNames: %d attributes, want none", got)
		}
	}
}

func TestDeleteWithStaleReceiptHandle(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	ctx := testContext(t)

	send(t, c, q.URL, "m", nil)
	m1 := receiveOne(t, c, q.URL, 0)
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.URL), ReceiptHandle: m1.ReceiptHandle, VisibilityTimeout: 0,
	}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	m2 := receiveOne(t, c, q.URL, 0)

	// Deleting with the handle of the earlier receive succeeds and deletes
	// nothing: "If you use an old ReceiptHandle, the request will succeed,
	// but the message might not be deleted" (API Reference, DeleteMessage).
	// Both servers take the case a consumer must survive: the message
	// stays in flight under the newer handle. (moto deleted it;
	// scripts/moto/server.py makes it keep it.)
	del(t, c, q.URL, m1)
	wantCount(t, c, q.URL, 0, 1)
	out, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL),
		Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("old"), ReceiptHandle: m1.ReceiptHandle}}})
	if err != nil || len(out.Successful) != 1 || len(out.Failed) != 0 {
		t.Fatalf("DeleteMessageBatch with an old handle: %v, %+v; want the entry successful", err, out)
	}
	wantCount(t, c, q.URL, 0, 1)
	impl := sqstest.Server(t)

	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: aws.String("not-a-receipt-handle")})
	switch impl {
	case sqstest.Fauxqs:
		// Differs from SQS: SQS rejects a malformed handle with
		// ReceiptHandleIsInvalid; fauxqs accepts any string.
		if err != nil {
			t.Errorf("DeleteMessage with a bogus handle: %v; fauxqs 1.9.2 accepts it", err)
		}
	case sqstest.Moto:
		// As SQS.
		var invalid *types.ReceiptHandleIsInvalid
		if !errors.As(err, &invalid) {
			t.Errorf("DeleteMessage with a bogus handle: got %v, want *types.ReceiptHandleIsInvalid", err)
		}
	}

	// The newest handle deletes the message, or finds it gone.
	del(t, c, q.URL, m2)
	wantCount(t, c, q.URL, 0, 0)
}

// TestConcurrentSendsAndDeletesLoseNothing sends 1,000 messages from two
// senders while four receivers receive and delete: every message a send
// was answered for is received. moto lost a few (its delete put a new list
// of the queue's messages in place of the one a send had just appended
// to); scripts/moto/server.py makes its delete hold the queue's lock.
func TestConcurrentSendsAndDeletesLoseNothing(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{VisibilityTimeout: 2 * time.Minute})
	// moto takes 10 to 20 s for these calls, more than testContext allows.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const senders, batches, receivers = 2, 50, 4

	var (
		mu       sync.Mutex
		sent     = map[string]bool{}
		received = map[string]bool{}
		sending  sync.WaitGroup
		done     = make(chan struct{})
	)
	g, gctx := errgroup.WithContext(ctx)
	for s := range senders {
		sending.Add(1)
		g.Go(func() error {
			defer sending.Done()
			for b := range batches {
				entries := make([]types.SendMessageBatchRequestEntry, 10)
				for i := range entries {
					entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(fmt.Sprintf("%d-%d-%d", s, b, i))}
				}
				out, err := c.SendMessageBatch(gctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
				if err != nil {
					return fmt.Errorf("SendMessageBatch: %w", err)
				}
				if len(out.Failed) > 0 {
					return fmt.Errorf("SendMessageBatch: %d entries failed: %+v", len(out.Failed), out.Failed[0])
				}
				mu.Lock()
				for _, e := range out.Successful {
					sent[aws.ToString(e.MessageId)] = true
				}
				mu.Unlock()
			}
			return nil
		})
	}
	go func() { sending.Wait(); close(done) }()
	for range receivers {
		g.Go(func() error {
			for {
				// Read before the receive: an empty answer after every send
				// was answered means nothing is left to receive.
				finished := false
				select {
				case <-done:
					finished = true
				default:
				}
				out, err := c.ReceiveMessage(gctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					return fmt.Errorf("ReceiveMessage: %w", err)
				}
				if len(out.Messages) == 0 && finished {
					return nil
				}
				for _, m := range out.Messages {
					mu.Lock()
					received[aws.ToString(m.MessageId)] = true
					mu.Unlock()
					if _, err := c.DeleteMessage(gctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle}); err != nil {
						return fmt.Errorf("DeleteMessage: %w", err)
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(sent) != senders*batches*10 {
		t.Fatalf("%d sends answered, want %d", len(sent), senders*batches*10)
	}
	var lost []string
	for id := range sent {
		if !received[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d messages sent never received: %v", len(lost), len(sent), lost)
	}
	wantCount(t, c, q.URL, 0, 0)
}

func TestUnsupportedOperations(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{MaxReceiveCount: 1})
	ctx := testContext(t)

	// Differs from SQS: fauxqs implements none of these operations and
	// answers HTTP 400 InvalidAction; moto implements
	// ListDeadLetterSourceQueues, as SQS does, and answers the others with
	// HTTP 500 and a page of HTML.
	impl := sqstest.Server(t)
	calls := map[string]func() error{
		"StartMessageMoveTask": func() error {
			_, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(q.DLQARN)})
			return err
		},
		"ListMessageMoveTasks": func() error {
			_, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(q.DLQARN)})
			return err
		},
	}
	sources, err := c.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(q.DLQURL)})
	switch impl {
	case sqstest.Fauxqs:
		calls["ListDeadLetterSourceQueues"] = func() error { return err }
	case sqstest.Moto:
		if err != nil || !slices.Equal(sources.QueueUrls, []string{q.URL}) {
			t.Errorf("ListDeadLetterSourceQueues: %v, %v; want [%s]", sources, err, q.URL)
		}
	}
	for name, call := range calls {
		err := call()
		var apiErr smithy.APIError
		switch impl {
		case sqstest.Fauxqs:
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidAction" {
				t.Errorf("%s: got %v; fauxqs 1.9.2 answers InvalidAction", name, err)
			}
		case sqstest.Moto:
			var re interface{ HTTPStatusCode() int }
			if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusInternalServerError {
				t.Errorf("%s: got %v; moto 5 answers HTTP 500", name, err)
			}
		}
	}
}
