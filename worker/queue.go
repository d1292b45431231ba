package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// queueInfo is what the worker learns about its queue at start.
type queueInfo struct {
	fifo            bool
	retention       time.Duration // MessageRetentionPeriod
	dlqURL          string        // "" without a redrive policy
	dlqRetention    time.Duration
	maxReceiveCount int
}

// QueueInfo describes a queue and its dead-letter queue as SQS reports them.
type QueueInfo struct {
	URL             string
	FIFO            bool
	Retention       time.Duration
	DLQURL          string // "" when the queue has no redrive policy
	DLQRetention    time.Duration
	MaxReceiveCount int
}

// InspectQueue reads a queue's attributes and finds its dead-letter queue
// through the redrive policy.
func InspectQueue(ctx context.Context, c SQSClient, url string) (QueueInfo, error) {
	q, err := inspectQueue(ctx, c, url)
	if err != nil {
		return QueueInfo{}, err
	}
	return QueueInfo{URL: url, FIFO: q.fifo, Retention: q.retention, DLQURL: q.dlqURL,
		DLQRetention: q.dlqRetention, MaxReceiveCount: q.maxReceiveCount}, nil
}

func inspectQueue(ctx context.Context, c SQSClient, url string) (queueInfo, error) {
	attrs, err := queueAttributes(ctx, c, url)
	if err != nil {
		return queueInfo{}, err
	}
	q := queueInfo{
		fifo:      attrs["FifoQueue"] == "true" || strings.HasSuffix(url, ".fifo"),
		retention: seconds(attrs["MessageRetentionPeriod"]),
	}
	policy := attrs["RedrivePolicy"]
	if policy == "" {
		return q, nil
	}
	var rp struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.Number
	}
	if err := json.Unmarshal([]byte(policy), &rp); err != nil || rp.DeadLetterTargetArn == "" {
		return queueInfo{}, fmt.Errorf("queue %s: unreadable redrive policy %q", url, policy)
	}
	n, _ := rp.MaxReceiveCount.Int64()
	q.maxReceiveCount = int(n)
	// arn:aws:sqs:region:account:name
	parts := strings.Split(rp.DeadLetterTargetArn, ":")
	if len(parts) != 6 {
		return queueInfo{}, fmt.Errorf("queue %s: dead-letter target %q is not an SQS queue ARN", url, rp.DeadLetterTargetArn)
	}
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &parts[5], QueueOwnerAWSAccountId: &parts[4]})
	if err != nil {
		return queueInfo{}, fmt.Errorf("queue %s: find its dead-letter queue %s: %w", url, parts[5], err)
	}
	q.dlqURL = aws.ToString(out.QueueUrl)
	dattrs, err := queueAttributes(ctx, c, q.dlqURL)
	if err != nil {
		return queueInfo{}, err
	}
	q.dlqRetention = seconds(dattrs["MessageRetentionPeriod"])
	return q, nil
}

func queueAttributes(ctx context.Context, c SQSClient, url string) (map[string]string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		var missing *types.QueueDoesNotExist
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("queue %s does not exist: %w", url, err)
		}
		return nil, fmt.Errorf("read attributes of queue %s: %w", url, err)
	}
	return out.Attributes, nil
}

func seconds(s string) time.Duration {
	n, _ := strconv.Atoi(s)
	return time.Duration(n) * time.Second
}

// warnRetention warns when the ledger forgets operations before SQS can
// stop delivering them: a message still in the queue or its dead-letter
// queue after its record expired would run again.
func (w *Worker) warnRetention() {
	need := w.queue.retention + w.queue.dlqRetention
	if w.cfg.Retention <= 0 || need <= 0 || w.cfg.Retention >= need {
		return
	}
	w.log.Warn("ledger retention is shorter than the queue's message retention plus its dead-letter queue's: "+
		"a delivery or replay that comes after its operation's record expired would run the work again",
		"ledger_retention", w.cfg.Retention, "queue_retention", w.queue.retention, "dlq_retention", w.queue.dlqRetention)
}

// sqsCallTimeout bounds an SQS call made after the work (delete, visibility,
// dead-letter send), retries included, so that a call that never answers
// cannot hold a handler slot or a deleter for long; what it failed to do
// SQS's visibility timeout undoes.
const sqsCallTimeout = 20 * time.Second

// deletion is a message to delete once its operation is settled: its
// receipt handle, as received, and what to do once SQS said it deleted it
// (nil: nothing).
type deletion struct {
	receipt *string
	after   func()
}

func (w *Worker) delete(m types.Message) { w.deleteThen(m, nil) }

// deleteThen deletes m, then calls after (when not nil) if and only if SQS
// answered that it deleted m: on a deleter's goroutine, never for a delete
// that failed.
func (w *Worker) deleteThen(m types.Message, after func()) {
	receipt := m.ReceiptHandle
	if receipt == nil {
		receipt = aws.String("") // refused by SQS for this entry alone
	}
	w.deletes <- deletion{receipt: receipt, after: after}
}

// deleteBatch is up to ten deletions, the entries of one call and what
// to do after each.
type deleteBatch struct {
	entries []types.DeleteMessageBatchRequestEntry
	after   []func()
}

// entryIDs are the Ids of the entries of a batch request, in order: shared,
// so that a batch's entries need no allocation for them.
var entryIDs = func() (ids [MaxMessagesPerReceive]string) {
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return ids
}()

// Deleting: one gatherer takes completed messages from the channel, up to
// ten, or what arrives within deleteLinger, per call, and hands each batch
// to an idle caller, starting one while fewer than deletesInFlight run,
// waiting for one otherwise. A delete that waits a few milliseconds for
// company saves SQS requests (which are billed) and server time; calls in
// flight together keep deletes from lagging behind when each takes a round
// trip of tens of milliseconds. A caller lives as long as the loop: one
// goroutine per call would grow a new stack through the SDK's deep calls
// every time.
const (
	deletesInFlight = 16
	deleteLinger    = 10 * time.Millisecond
)

// deleteLoop gathers and deletes until the channel is closed and drained,
// then waits for the calls in flight. A failed delete only costs a
// redelivery, which the ledger answers as a duplicate.
func (w *Worker) deleteLoop() {
	var callers sync.WaitGroup
	defer callers.Wait()
	batches := make(chan *deleteBatch)
	defer close(batches)
	running := 0
	linger := time.NewTimer(deleteLinger)
	linger.Stop()
	for d := range w.deletes {
		batch := &deleteBatch{entries: make([]types.DeleteMessageBatchRequestEntry, 0, MaxMessagesPerReceive)}
		batch.add(d)
		linger.Reset(deleteLinger)
	gather:
		for len(batch.entries) < MaxMessagesPerReceive {
			select {
			case d, ok := <-w.deletes:
				if !ok {
					break gather
				}
				batch.add(d)
			case <-linger.C:
				break gather
			}
		}
		linger.Stop()
		select {
		case batches <- batch: // an idle caller took it
			continue
		default:
		}
		if running < deletesInFlight {
			running++
			callers.Go(func() {
				w.deleteBatch(batch)
				for b := range batches {
					w.deleteBatch(b)
				}
			})
			continue
		}
		batches <- batch
	}
}

func (b *deleteBatch) add(d deletion) {
	b.entries = append(b.entries, types.DeleteMessageBatchRequestEntry{Id: &entryIDs[len(b.entries)], ReceiptHandle: d.receipt})
	if d.after != nil {
		if b.after == nil {
			b.after = make([]func(), MaxMessagesPerReceive)
		}
		b.after[len(b.entries)-1] = d.after
	}
}

func (w *Worker) deleteBatch(batch *deleteBatch) {
	ctx, cancel := context.WithTimeout(context.Background(), sqsCallTimeout)
	defer cancel()
	out, err := w.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{
		QueueUrl: &w.cfg.QueueURL,
		Entries:  batch.entries,
	})
	if err != nil {
		w.stats.deleteFailed.Add(int64(len(batch.entries)))
		w.log.Warn("delete failed: the messages will be redelivered and suppressed as duplicates", "error", err, "messages", len(batch.entries))
		return
	}
	w.stats.deleted.Add(int64(len(out.Successful)))
	for _, f := range out.Failed {
		w.stats.deleteFailed.Add(1)
		w.log.Warn("delete failed: the message will be redelivered and suppressed as a duplicate",
			"code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
	}
	if batch.after == nil {
		return
	}
	// Only what SQS says it deleted: a message whose delete failed comes
	// back, and its redelivery needs what after would undo. They run
	// together, and this deleter waits for them.
	var afters sync.WaitGroup
	for _, s := range out.Successful {
		i, err := strconv.Atoi(aws.ToString(s.Id))
		if err == nil && i >= 0 && i < len(batch.entries) && batch.after[i] != nil {
			afters.Go(batch.after[i])
			batch.after[i] = nil
		}
	}
	afters.Wait()
}

// makeVisible sets the visibility of messages, received by a receive that
// was sent at received, to d from now, so that they are received again
// after d. A change that SQS refused for now (throttled, a server error,
// no answer) is tried again a few times, for up to about
// visibilityRetries: a message whose change is lost stays out of sight for
// the receive's whole visibility timeout instead.
func (w *Worker) makeVisible(msgs []types.Message, received time.Time, d time.Duration) {
	start := time.Now()
	if cut := time.Unix(0, w.cutPoll.Load()); cut.After(start) {
		d = max(d, cut.Sub(start)) // out of reach of the receives a stop cut off
	}
	for attempt := 1; len(msgs) > 0; attempt++ {
		retry, _ := w.changeVisibilityOf(context.Background(), msgs, received, d-time.Since(start))
		again := make([]types.Message, len(retry))
		for i, r := range retry {
			again[i] = msgs[r]
		}
		if msgs = again; len(msgs) == 0 || attempt == visibilityAttempts {
			break
		}
		time.Sleep(backoff(attempt, 100*time.Millisecond, time.Second))
	}
	if len(msgs) > 0 {
		w.log.Warn("could not change visibility: the messages return after the receive's visibility timeout instead", "messages", len(msgs))
	}
}

// visibilityAttempts is how often makeVisible tries a change: with its
// back-off, about two seconds in all.
const visibilityAttempts = 4

// changeVisibilityOf sets the visibility of msgs, received by a receive
// sent at received, to d from now, ten at a time, each call bounded by
// sqsCallTimeout and parent. SQS keeps a message out of sight for at most
// 12 hours from its receive, extensions included: d is cut to what is
// left of that, and a message with less than a second left is not asked
// for (it comes back when those 12 hours end). It answers with indexes
// into msgs: again, the changes that may succeed if tried again (those of
// calls that failed, and entries that SQS failed on its side), and
// refused, those that SQS refused for the caller's fault. A refused change
// mostly means that the receipt handle no longer holds the message: its
// visibility lapsed and it was received again (by this worker or
// another), or SQS moved it to the dead-letter queue, or it is visible
// again, to be received by anyone.
func (w *Worker) changeVisibilityOf(parent context.Context, msgs []types.Message, received time.Time, d time.Duration) (again, refused []int) {
	left := (MaxVisibility - time.Since(received)) / time.Second
	secs := int32(max(min((d+time.Second-1)/time.Second, left), 0))
	for start := 0; start < len(msgs); start += MaxMessagesPerReceive {
		chunk := msgs[start:min(start+MaxMessagesPerReceive, len(msgs))]
		if parent.Err() != nil || (left < 1 && d > 0) {
			for i := range chunk {
				again = append(again, start+i)
			}
			continue
		}
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id:                &entryIDs[i],
				ReceiptHandle:     m.ReceiptHandle,
				VisibilityTimeout: secs,
			}
		}
		ctx, cancel := context.WithTimeout(parent, sqsCallTimeout)
		out, err := w.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: &w.cfg.QueueURL,
			Entries:  entries,
		})
		cancel()
		if err != nil {
			if parent.Err() == nil {
				w.log.Debug("changing visibility failed", "error", err, "messages", len(chunk))
			}
			for i := range chunk {
				again = append(again, start+i)
			}
			continue
		}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(chunk) {
				w.log.Warn("could not change visibility of a message: SQS named an entry that was not asked", "id", aws.ToString(f.Id), "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
				continue
			}
			if !f.SenderFault {
				again = append(again, start+i)
				continue
			}
			refused = append(refused, start+i)
			w.log.Warn("could not change visibility of a message", "message_id", aws.ToString(chunk[i].MessageId), "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
		}
	}
	return again, refused
}

// Attributes the worker adds to a message it moves to the dead-letter queue.
const (
	AttrReason          = "SqsonceReason"
	AttrSourceMessageID = "SqsonceSourceMessageId"
	maxMessageAttrs     = 10
	maxReasonLen        = 1024 // bytes of the reason attribute
)

// deadLetter moves a message that must not run (again) to the dead-letter
// queue: a copy is sent there, and only once the send succeeded is the
// original deleted. Without a dead-letter queue, or when the send fails, the
// message is left with the longest back-off so that SQS's own redrive or
// retention deals with it. It returns the message's end: deadLettered, or
// givenBack (retrying after a failed attempt) when it was left.
func (w *Worker) deadLetter(j *job, reason string, log *jobLog) state {
	left := givenBack
	if st, _ := j.b.state(j); st == failed {
		left = retrying
	}
	if w.queue.dlqURL == "" {
		log.Warn("no dead-letter queue: leaving the message until its retention ends", "reason", reason)
		w.comeBack(j, left, w.cfg.MaxBackoff)
		return left
	}
	attrs := make(map[string]types.MessageAttributeValue, len(j.msg.MessageAttributes)+2)
	maps.Copy(attrs, j.msg.MessageAttributes)
	// On a FIFO queue the original deduplication id first (the copy has one
	// of its own, and a key may be read from it), then the reason, then
	// the source id: each replaces an earlier value (a message
	// dead-lettered before) or takes a free place; SQS allows ten.
	add := []struct{ k, v string }{{AttrReason, textcut.Cut(reason, maxReasonLen)}, {AttrSourceMessageID, j.id()}}
	if w.queue.fifo {
		if dedup := OriginalDeduplicationID(j.msg.Attributes, j.msg.MessageAttributes); dedup != "" {
			add = append([]struct{ k, v string }{{AttrDeduplicationID, dedup}}, add...)
		}
	}
	for _, a := range add {
		if _, ok := attrs[a.k]; ok || len(attrs) < maxMessageAttrs {
			attrs[a.k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(a.v)}
		}
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          &w.queue.dlqURL,
		MessageBody:       j.msg.Body,
		MessageAttributes: attrs,
	}
	if w.queue.fifo {
		// The copy is named by the delivery, not the operation: see
		// CopyDeduplicationID.
		in.MessageGroupId = aws.String(j.groupID())
		in.MessageDeduplicationId = aws.String(CopyDeduplicationID(j.id()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), sqsCallTimeout)
	defer cancel()
	// The ledger records the intent before the send and the copy after
	// it, on the record of an operation this worker failed or found
	// failed permanently: a count of dead letters by reason needs no read
	// of the dead-letter queue.
	mark := func(copyID string) {
		if j.claim.Err == nil && (j.claim.Outcome == ledger.Claimed || j.claim.Outcome == ledger.FailedPermanently) {
			w.flow.l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: j.key.key, Owner: j.owner, Reason: reason, CopyID: copyID}})
		}
	}
	mark("")
	out, err := w.sqs.SendMessage(ctx, in)
	if err != nil {
		log.Error("could not move the message to the dead-letter queue: leaving it for SQS's redrive", "error", err)
		w.comeBack(j, left, w.cfg.MaxBackoff)
		return left
	}
	mark(aws.ToString(out.MessageId))
	w.stats.deadLettered.Add(1)
	log.Warn("moved to the dead-letter queue", "reason", reason, "dead_letter_queue", w.queue.dlqURL)
	w.delete(j.msg)
	j.b.end(j, deadLettered)
	return deadLettered
}
