package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/replay"
	"github.com/sqsonce/sqsonce/worker"
)

// bundle is one test's queues, ledger and log.
type bundle struct {
	t      *testing.T
	client *sqs.Client // for the test's own calls: no retries
	queue  sqstest.Queue
	fifo   bool
	db     *ledger.DB
	log    *syncBuffer
}

// setup makes a queue with a dead-letter queue and a ledger on a new file.
func setup(t *testing.T, fifo bool) *bundle {
	t.Helper()
	// A call whose answer was lost fails the test instead of being retried,
	// so that the test's own calls never receive or send a batch twice
	// unnoticed.
	client := sqstest.NewClient(t, nil, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{FIFO: fifo, MaxReceiveCount: 5, VisibilityTimeout: 5 * time.Second})
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &bundle{t: t, client: client, queue: q, fifo: fifo, db: db, log: &syncBuffer{}}
}

// config replays the dead-letter queue to the queue, keys from the body's
// "id" field, and logs to b.log.
func (b *bundle) config() replay.Config {
	b.t.Helper()
	keyOf, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"})
	if err != nil {
		b.t.Fatal(err)
	}
	cfg := replay.DefaultConfig()
	cfg.From, cfg.To, cfg.ToFIFO = b.queue.DLQURL, b.queue.URL, b.fifo
	cfg.KeyOf = keyOf
	cfg.Concurrency = 4
	cfg.Logger = b.cfgLogger()
	return cfg
}

// cfgLogger logs to b.log.
func (b *bundle) cfgLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// run replays with cfg to its end, with a client of its own (the SDK's
// retries on), and returns the summary and error.
func (b *bundle) run(cfg replay.Config) (replay.Summary, error) {
	b.t.Helper()
	r, err := replay.New(cfg, sqstest.NewClient(b.t, nil), b.db)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return r.Run(ctx)
}

// want compares a summary, without its times, with want.
func (b *bundle) want(got, want replay.Summary) {
	b.t.Helper()
	got.Seconds, got.Rate = 0, 0
	if got != want {
		b.t.Fatalf("summary\n got %+v\nwant %+v\nlog:\n%s", got, want, b.log)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// seed is a message put straight into a queue by a test.
type seed struct {
	body         string
	attrs        map[string]types.MessageAttributeValue
	group, dedup string // FIFO only
}

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func num(n int) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(n))}
}

// bodies makes one seed per id, with the body {"id":ID}.
func bodies(ids ...string) []seed {
	seeds := make([]seed, len(ids))
	for i, id := range ids {
		seeds[i] = seed{body: fmt.Sprintf(`{"id":%q}`, id)}
	}
	return seeds
}

// put sends the seeds to a queue in batches of ten, in order, and returns
// their message ids.
func (b *bundle) put(url string, seeds []seed) []string {
	b.t.Helper()
	var ids []string
	for start := 0; start < len(seeds); start += 10 {
		batch := seeds[start:min(start+10, len(seeds))]
		entries := make([]types.SendMessageBatchRequestEntry, len(batch))
		for i, s := range batch {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(s.body), MessageAttributes: s.attrs}
			if s.group != "" {
				entries[i].MessageGroupId, entries[i].MessageDeduplicationId = aws.String(s.group), aws.String(s.dedup)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := b.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		cancel()
		if err == nil && len(out.Failed) > 0 {
			err = fmt.Errorf("%d refused: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		if err != nil {
			b.t.Fatalf("seeding %s: %v", url, err)
		}
		got := make([]string, len(batch))
		for _, s := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(s.Id))
			got[i] = aws.ToString(s.MessageId)
		}
		ids = append(ids, got...)
	}
	return ids
}

// prepare writes ledger records: key → complete, failed, permanent or
// in_progress.
func (b *bundle) prepare(fates map[string]string) {
	b.t.Helper()
	ctx := context.Background()
	for key, fate := range fates {
		if _, err := b.db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "test", Lease: time.Hour}); err != nil {
			b.t.Fatal(err)
		}
		var err error
		switch fate {
		case "complete":
			err = b.db.Complete(ctx, ledger.Completion{Key: key, Owner: "test"})
		case "failed", "permanent":
			err = b.db.Fail(ctx, ledger.Failure{Key: key, Owner: "test", Err: "boom", Permanent: fate == "permanent"})
		case "in_progress":
		default:
			b.t.Fatalf("fate %q", fate)
		}
		if err != nil {
			b.t.Fatal(err)
		}
	}
}

// id is the "id" field of a message body ("" when it has none).
func id(m types.Message) string {
	var v struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(aws.ToString(m.Body)), &v)
	return v.ID
}

// visible returns the messages of a standard queue that are visible now,
// by body id (a message replay left invisible would be missing), failing on
// a duplicate; and makes them visible again.
func (b *bundle) visible(url, where string) map[string]types.Message {
	b.t.Helper()
	seen := make(map[string]bool)
	var msgs []types.Message
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 120,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		cancel()
		if err != nil {
			b.t.Fatal(err)
		}
		fresh := 0
		for _, m := range out.Messages {
			if mid := aws.ToString(m.MessageId); !seen[mid] {
				seen[mid] = true
				msgs = append(msgs, m)
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	for start := 0; start < len(msgs); start += 10 {
		var entries []types.ChangeMessageVisibilityBatchRequestEntry
		for i, m := range msgs[start:min(start+10, len(msgs))] {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := b.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
		cancel()
		if err != nil {
			b.t.Fatal(err)
		}
	}
	byID := make(map[string]types.Message, len(msgs))
	for _, m := range msgs {
		if _, dup := byID[id(m)]; dup {
			b.t.Fatalf("%s holds %q twice", where, id(m))
		}
		byID[id(m)] = m
	}
	return byID
}

// take receives and deletes every message of a queue, one at a time (a
// FIFO queue gives a group's next message only once its head is deleted),
// in the order received, until two receives in a row come back empty.
func (b *bundle) take(url string) []types.Message {
	b.t.Helper()
	var got []types.Message
	for empty := 0; empty < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			cancel()
			b.t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
		} else {
			empty = 0
		}
		for _, m := range out.Messages {
			if _, err := b.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				cancel()
				b.t.Fatal(err)
			}
			got = append(got, m)
		}
		cancel()
	}
	return got
}

func ids(msgs map[string]types.Message) []string {
	var out []string
	for k := range msgs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func attr(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

// logged reports whether the log holds a line with message msg.
func (b *bundle) logged(msg string) bool {
	return strings.Contains(b.log.String(), `"msg":"`+msg)
}

// unhideAll receives from a queue until it has n messages (waiting up to
// 30 s for held ones to come back) and makes them visible again at once.
func (b *bundle) unhideAll(url string, n int) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got []types.Message
	for len(got) < n {
		if time.Now().After(deadline) {
			b.t.Fatalf("%d of %d messages came back to %s", len(got), n, url)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(min(n-len(got), 10)), WaitTimeSeconds: 1, VisibilityTimeout: 60,
		})
		cancel()
		if err != nil {
			b.t.Fatal(err)
		}
		got = append(got, out.Messages...)
	}
	for _, m := range got {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
		cancel()
		if err != nil {
			b.t.Fatal(err)
		}
	}
}
