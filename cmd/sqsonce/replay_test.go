package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// replaySeed is a message put straight into a queue by a test.
type replaySeed struct {
	body         string
	attrs        map[string]types.MessageAttributeValue
	group, dedup string // FIFO only
}

// replayTestClient is c (whose request bodies are in memory, see
// sqsclient.InMemoryBodies) without retries: a call whose answer was lost
// fails the test instead of being retried, so that a helper never receives
// or sends a batch twice unnoticed.
func replayTestClient(c *sqs.Client) *sqs.Client {
	return sqs.New(c.Options(), func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
}

func replayStr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func replayNum(n int) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(n))}
}

// replayBodies makes one seed per id, with the body {"id":ID}.
func replayBodies(ids ...string) []replaySeed {
	seeds := make([]replaySeed, len(ids))
	for i, id := range ids {
		seeds[i] = replaySeed{body: fmt.Sprintf(`{"id":%q}`, id)}
	}
	return seeds
}

// replayPut sends the seeds to a queue in batches of ten, several batches at
// once, and returns their message ids in order.
func replayPut(t *testing.T, c *sqs.Client, url string, seeds []replaySeed) []string {
	t.Helper()
	c = replayTestClient(c)
	ids := make([]string, len(seeds))
	errs := make(chan error, (len(seeds)+9)/10)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for start := 0; start < len(seeds); start += 10 {
		batch := seeds[start:min(start+10, len(seeds))]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			entries := make([]types.SendMessageBatchRequestEntry, len(batch))
			for i, s := range batch {
				entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(s.body), MessageAttributes: s.attrs}
				if s.group != "" {
					entries[i].MessageGroupId, entries[i].MessageDeduplicationId = aws.String(s.group), aws.String(s.dedup)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
			if err == nil && len(out.Failed) > 0 {
				err = fmt.Errorf("%d refused: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
			}
			if err != nil {
				errs <- err
				return
			}
			for _, s := range out.Successful {
				i, _ := strconv.Atoi(aws.ToString(s.Id))
				ids[start+i] = aws.ToString(s.MessageId)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seeding %s: %v", url, err)
	}
	return ids
}

// replay runs `sqsonce replay --json ARGS` to its end (bounded) and returns
// its exit code, output and summary.
func (e *procEnv) replay(args string, extra ...string) (int, string, replaySummary) {
	e.t.Helper()
	cmd, out := e.start(strings.TrimSpace("replay --json "+args), extra...)
	code := wait(e.t, cmd, 2*time.Minute)
	return code, out.String(), replaySummaryIn(e.t, out.String())
}

// replaySummaryIn finds the JSON summary among a process's output lines.
func replaySummaryIn(t *testing.T, out string) replaySummary {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, `{"moved":`) {
			var s replaySummary
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				t.Fatalf("summary %q: %v", line, err)
			}
			return s
		}
	}
	t.Fatalf("no JSON summary in the output:\n%s", out)
	return replaySummary{}
}

// replayID is the "id" field of a message body ("" when it has none).
func replayID(m types.Message) string {
	var b struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(aws.ToString(m.Body)), &b)
	return b.ID
}

// replayByID indexes messages by their body's id, failing on a duplicate.
func replayByID(t *testing.T, msgs []types.Message, where string) map[string]types.Message {
	t.Helper()
	out := make(map[string]types.Message, len(msgs))
	for _, m := range msgs {
		id := replayID(m)
		if _, dup := out[id]; dup {
			t.Fatalf("%s holds %q twice", where, id)
		}
		out[id] = m
	}
	return out
}

func replayIDs(msgs map[string]types.Message) []string {
	var ids []string
	for id := range msgs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// replayVisible returns the messages of a standard queue that are visible
// now, by body id (a message replay left invisible would be missing), and
// makes them visible again.
func replayVisible(t *testing.T, e *procEnv, url, where string) map[string]types.Message {
	t.Helper()
	return replayByID(t, replayDrain(t, e.client, url, 0), where)
}

// replayDrain receives every message of a standard queue that is visible
// now or becomes visible within wait, and makes them visible again. Unlike
// sqstest.Drain it holds what it received for long enough to count
// thousands of messages.
func replayDrain(t *testing.T, c *sqs.Client, url string, wait time.Duration) []types.Message {
	t.Helper()
	c = replayTestClient(c)
	deadline := time.Now().Add(wait)
	seen := make(map[string]bool)
	var msgs []types.Message
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 120,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		fresh := 0
		for _, m := range out.Messages {
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				msgs = append(msgs, m)
				fresh++
			}
		}
		if fresh == 0 && time.Now().After(deadline) {
			break
		}
	}
	for start := 0; start < len(msgs); start += 10 {
		var entries []types.ChangeMessageVisibilityBatchRequestEntry
		for i, m := range msgs[start:min(start+10, len(msgs))] {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// replayTake receives and deletes every message of a queue, in the order
// received, until two receives in a row come back empty.
func replayTake(t *testing.T, c *sqs.Client, url string) []types.Message {
	t.Helper()
	c = replayTestClient(c)
	var got []types.Message
	for empty := 0; empty < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
		} else {
			empty = 0
		}
		for _, m := range out.Messages {
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				cancel()
				t.Fatal(err)
			}
			got = append(got, m)
		}
		cancel()
	}
	return got
}

// replayPrepare writes ledger records: key → complete, failed, permanent or
// in_progress. The file is closed again before replay runs.
func replayPrepare(t *testing.T, e *procEnv, fates map[string]string) {
	t.Helper()
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for key, fate := range fates {
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "test", Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
		switch fate {
		case "complete":
			err = db.Complete(ctx, ledger.Completion{Key: key, Owner: "test"})
		case "failed", "permanent":
			err = db.Fail(ctx, ledger.Failure{Key: key, Owner: "test", Err: "boom", Permanent: fate == "permanent"})
		case "in_progress":
		default:
			t.Fatalf("fate %q", fate)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func replayWant(t *testing.T, got replaySummary, want replaySummary, out string) {
	t.Helper()
	got.Seconds, got.Rate = 0, 0
	if got != want {
		t.Fatalf("summary\n got %+v\nwant %+v\noutput:\n%s", got, want, out)
	}
}

func TestReplay_Usage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args string
		code int
		want string
	}{
		{"replay --help", exitOK, "5 minutes"},
		{"replay --max -1", exitUsage, "--max -1"},
		{"replay --max-replays 0", exitUsage, "--max-replays 0"},
		{"replay --rate -1", exitUsage, "--rate -1"},
		{"replay --since yesterday", exitUsage, "RFC 3339"},
		{"replay --until -5m", exitUsage, "RFC 3339"},
		{"replay --since 1h --until 2h", exitUsage, "is not before --until"},
		{"replay --hold 0s", exitUsage, "--hold"},
		{"replay --hold 13h", exitUsage, "--hold"},
		{"replay --concurrency 0", exitUsage, "--concurrency"},
		{"replay --key [", exitUsage, "--key"},
		{"replay extra", exitUsage, "unexpected arguments"},
		{"replay --from http://127.0.0.1:1/q --to http://127.0.0.1:1/q", exitUsage, "same queue"},
	}
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			t.Parallel()
			code, out := runMain(tc.args, map[string]string{"SQSONCE_QUEUE_URL": "http://127.0.0.1:1/q", "AWS_REGION": "us-east-1"})
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d; output should contain %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
}

func TestReplay_NoDeadLetterQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	bare := sqstest.CreateQueue(t, e.client, sqstest.QueueOptions{})
	cmd, out := e.start("replay", "SQSONCE_QUEUE_URL="+bare.URL)
	if code := wait(t, cmd, time.Minute); code != exitFailure || !strings.Contains(out.String(), "no dead-letter queue") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// Body and attributes travel; SqsonceReplays counts; --max-replays stops.
func TestReplay_MovesAndCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	full := map[string]types.MessageAttributeValue{
		worker.AttrReason: replayStr("conflict"), worker.AttrSourceMessageID: replayStr("src-full"),
	}
	for i := range 8 {
		full[fmt.Sprintf("a%d", i)] = replayStr(strconv.Itoa(i))
	}
	replayPut(t, e.client, e.queue.DLQURL, []replaySeed{
		{body: `{"id":"a","n":[1,2,{"x":"y"}]}`, attrs: map[string]types.MessageAttributeValue{
			"tenant": replayStr("t1"), "prio": replayNum(5),
			"blob":            {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 255}},
			worker.AttrReason: replayStr("handler failed permanently"), worker.AttrSourceMessageID: replayStr("src-a"),
		}},
		{body: `{"id":"b"}`, attrs: map[string]types.MessageAttributeValue{AttrReplays: replayNum(2)}},
		{body: `{"id":"c"}`, attrs: map[string]types.MessageAttributeValue{AttrReplays: replayNum(3)}},
		{body: `{"id":"full"}`, attrs: full},
	})

	code, out, sum := e.replay("")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 3, SkippedMaxReplays: 1}, out)
	if !strings.Contains(out, "replayed too often") {
		t.Errorf("the message left for --max-replays was not reported:\n%s", out)
	}
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); len(left) != 1 || left["c"].Body == nil {
		t.Fatalf("left in the DLQ: %v, want c, visible", replayIDs(left))
	}
	got := replayVisible(t, e, e.queue.URL, "the queue")
	if ids := replayIDs(got); !slices.Equal(ids, []string{"a", "b", "full"}) {
		t.Fatalf("moved %v", ids)
	}
	a := got["a"]
	if aws.ToString(a.Body) != `{"id":"a","n":[1,2,{"x":"y"}]}` {
		t.Errorf("body %q", aws.ToString(a.Body))
	}
	attr := func(m types.Message, name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
	if attr(a, "tenant") != "t1" || attr(a, "prio") != "5" || aws.ToString(a.MessageAttributes["prio"].DataType) != "Number" ||
		!bytes.Equal(a.MessageAttributes["blob"].BinaryValue, []byte{0, 1, 2, 255}) ||
		attr(a, worker.AttrReason) != "handler failed permanently" || attr(a, worker.AttrSourceMessageID) != "src-a" {
		t.Errorf("attributes of a: %+v", a.MessageAttributes)
	}
	if attr(a, AttrReplays) != "1" || aws.ToString(a.MessageAttributes[AttrReplays].DataType) != "Number" || attr(got["b"], AttrReplays) != "3" {
		t.Errorf("SqsonceReplays: a %q, b %q", attr(a, AttrReplays), attr(got["b"], AttrReplays))
	}
	f := got["full"].MessageAttributes
	if _, ok := f[worker.AttrReason]; len(f) != 10 || ok || attr(got["full"], AttrReplays) != "1" || attr(got["full"], worker.AttrSourceMessageID) != "src-full" || attr(got["full"], "a7") != "7" {
		t.Errorf("a message with 10 attributes: %d attributes, want its own 8, SqsonceSourceMessageId and SqsonceReplays: %v", len(f), f)
	}

	// A higher limit lets c go.
	code, out, sum = e.replay("--max-replays 5")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 1}, out)
	got = replayVisible(t, e, e.queue.URL, "the queue")
	if ids := replayIDs(got); !slices.Equal(ids, []string{"a", "b", "c", "full"}) || attr(got["c"], AttrReplays) != "4" {
		t.Fatalf("after the second replay the queue holds %v; c has SqsonceReplays %q, want 4", ids, attr(got["c"], AttrReplays))
	}
}

// On a FIFO target the group stays and the deduplication id is the key; a
// copy SQS drops as a duplicate of its original within 5 minutes is not
// deleted from the DLQ.
func TestReplay_FIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, "exit 0\n")
	// k9 was sent (deduplication id = its key, as sqsonce send does) and
	// taken from the queue moments ago.
	replayPut(t, e.client, e.queue.URL, []replaySeed{{body: `{"id":"k9"}`, group: "g9", dedup: "k9"}})
	orig := replayTake(t, e.client, e.queue.URL)
	if len(orig) != 1 {
		t.Fatalf("%d originals", len(orig))
	}
	replayPut(t, e.client, e.queue.DLQURL, []replaySeed{
		{body: `{"id":"k1","n":1}`, group: "g1", dedup: "d1"},
		{body: `{"id":"k2","n":2}`, group: "g1", dedup: "d2"},
		{body: `{"id":"k3"}`, group: "g2", dedup: "d3", attrs: map[string]types.MessageAttributeValue{"x": replayStr("y")}},
		{body: `{"id":"k9"}`, group: "g9", dedup: "d9", attrs: map[string]types.MessageAttributeValue{
			worker.AttrSourceMessageID: replayStr(aws.ToString(orig[0].MessageId)),
		}},
	})

	code, out, sum := e.replay("")
	if code != exitFailure || !strings.Contains(out, "deduplication within 5 minutes") {
		t.Fatalf("exit %d, want 1 for the copy SQS dropped:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 3, Failed: 1}, out)
	got := replayTake(t, e.client, e.queue.URL)
	var order []string
	for _, m := range got {
		id := replayID(m)
		order = append(order, id)
		group, dedup := m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]
		if want := map[string]string{"k1": "g1", "k2": "g1", "k3": "g2"}[id]; group != want || dedup != id {
			t.Errorf("%s: group %q, deduplication id %q; want %q and the key", id, group, dedup, want)
		}
	}
	if len(order) != 3 || slices.Index(order, "k1") > slices.Index(order, "k2") || !slices.Contains(order, "k3") {
		t.Fatalf("target received %v, want k1 before k2, and k3", order)
	}
	left := replayTake(t, e.client, e.queue.DLQURL)
	if len(left) != 1 || replayID(left[0]) != "k9" {
		t.Fatalf("left in the DLQ: %d messages, want k9", len(left))
	}
}

// The ledger decides: complete stays (or is dropped), failed is reset and
// moved, in progress and absent move, keyless stays unless asked.
func TestReplay_Ledger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	replayPrepare(t, e, map[string]string{"done": "complete", "retry": "failed", "perm": "permanent", "busy": "in_progress"})
	replayPut(t, e.client, e.queue.DLQURL, append(replayBodies("done", "retry", "perm", "busy", "new"), replaySeed{body: `{"no_id":1}`}))

	code, out, sum := e.replay("")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 4, SkippedComplete: 1, SkippedKeyless: 1, Reset: 2}, out)
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); !slices.Equal(replayIDs(left), []string{"", "done"}) {
		t.Fatalf("left in the DLQ: %v, want the keyless message and done", replayIDs(left))
	}
	if got := replayVisible(t, e, e.queue.URL, "the queue"); !slices.Equal(replayIDs(got), []string{"busy", "new", "perm", "retry"}) {
		t.Fatalf("moved %v", replayIDs(got))
	}

	code, out, sum = e.replay("--drop-complete --include-keyless")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 1, DroppedComplete: 1}, out)
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); len(left) != 0 {
		t.Fatalf("left in the DLQ: %v", replayIDs(left))
	}
	if got := replayVisible(t, e, e.queue.URL, "the queue"); !slices.Equal(replayIDs(got), []string{"", "busy", "new", "perm", "retry"}) {
		t.Fatalf("in the queue: %v", replayIDs(got))
	}

	db := e.ledger()
	for key, want := range map[string]ledger.State{"done": ledger.StateComplete, "retry": ledger.StateFailed, "perm": ledger.StateFailed, "busy": ledger.StateInProgress} {
		rec, err := db.Get(context.Background(), key)
		if err != nil || rec.State != want || rec.Permanent {
			t.Errorf("%s: %+v, %v; want %s, not permanent", key, rec, err, want)
		}
	}
}

func TestReplay_Filters(t *testing.T) {
	t.Parallel()

	t.Run("Key", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		replayPut(t, e.client, e.queue.DLQURL, append(replayBodies("order-1", "order-2", "refund-1"), replaySeed{body: `{}`}))
		code, out, sum := e.replay("--key order-* --include-keyless")
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		replayWant(t, sum, replaySummary{Moved: 2, SkippedFiltered: 2}, out)
		if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); !slices.Equal(replayIDs(left), []string{"", "refund-1"}) {
			t.Fatalf("left in the DLQ: %v", replayIDs(left))
		}
		if got := replayVisible(t, e, e.queue.URL, "the queue"); !slices.Equal(replayIDs(got), []string{"order-1", "order-2"}) {
			t.Fatalf("moved %v", replayIDs(got))
		}
	})

	t.Run("Time", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		replayPut(t, e.client, e.queue.DLQURL, replayBodies("old-1", "old-2"))
		time.Sleep(1200 * time.Millisecond)
		mid := time.Now().UTC().Format(time.RFC3339Nano)
		time.Sleep(1200 * time.Millisecond)
		replayPut(t, e.client, e.queue.DLQURL, replayBodies("new-1"))

		code, out, sum := e.replay("--until 1h") // sent more than an hour ago: none
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		replayWant(t, sum, replaySummary{SkippedFiltered: 3}, out)
		code, out, sum = e.replay("--since " + mid)
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		replayWant(t, sum, replaySummary{Moved: 1, SkippedFiltered: 2}, out)
		code, out, sum = e.replay("--since 1h --until " + mid)
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		replayWant(t, sum, replaySummary{Moved: 2}, out)
		if got := replayVisible(t, e, e.queue.URL, "the queue"); !slices.Equal(replayIDs(got), []string{"new-1", "old-1", "old-2"}) {
			t.Fatalf("moved %v", replayIDs(got))
		}
	})

	t.Run("Max", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		var ids []string
		for i := range 25 {
			ids = append(ids, fmt.Sprintf("m-%02d", i))
		}
		replayPut(t, e.client, e.queue.DLQURL, replayBodies(ids...))
		code, out, sum := e.replay("--max 7")
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		replayWant(t, sum, replaySummary{Moved: 7}, out)
		got := replayVisible(t, e, e.queue.URL, "the queue")
		left := replayVisible(t, e, e.queue.DLQURL, "the DLQ")
		if len(got) != 7 || len(left) != 18 {
			t.Fatalf("%d moved and %d visible in the DLQ, want 7 and 18", len(got), len(left))
		}
	})
}

func TestReplay_DryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	replayPrepare(t, e, map[string]string{"done": "complete", "perm": "permanent"})
	replayPut(t, e.client, e.queue.DLQURL, append(replayBodies("done", "perm", "n1", "n2"), replaySeed{body: `{}`}))
	code, out, sum := e.replay("--dry-run --drop-complete")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 3, DroppedComplete: 1, SkippedKeyless: 1, Reset: 1, DryRun: true}, out)
	if !strings.Contains(out, `"msg":"would move"`) {
		t.Errorf("no report of what would move:\n%s", out)
	}
	// Every message is visible again at once, none moved.
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); len(left) != 5 {
		t.Fatalf("%d messages visible in the DLQ after a dry run, want 5", len(left))
	}
	if got := replayVisible(t, e, e.queue.URL, "the queue"); len(got) != 0 {
		t.Fatalf("a dry run moved %v", replayIDs(got))
	}
	if rec, err := e.ledger().Get(context.Background(), "perm"); err != nil || !rec.Permanent {
		t.Fatalf("a dry run reset the record: %+v, %v", rec, err)
	}
}

// While a worker holds the ledger file, replay reaches it through the
// worker's socket.
func TestReplay_ThroughWorkerSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	replayPrepare(t, e, map[string]string{"w-done": "complete", "w-perm": "permanent"})
	// A worker on another queue, with the same ledger file.
	other := sqstest.CreateQueue(t, e.client, sqstest.QueueOptions{})
	w, wout := e.start("run", "SQSONCE_QUEUE_URL="+other.URL)
	e.waitFor("the worker's ledger socket", 15*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(e.dir, "ledger.db.sock"))
		return err == nil
	})
	replayPut(t, e.client, e.queue.DLQURL, replayBodies("w-done", "w-perm", "w-new"))
	code, out, sum := e.replay("")
	if code != exitOK || !strings.Contains(out, `"ledger":"worker socket"`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 2, SkippedComplete: 1, Reset: 1}, out)
	w.Process.Signal(syscall.SIGTERM)
	if code := wait(t, w, 20*time.Second); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, wout)
	}
	if rec, err := e.ledger().Get(context.Background(), "w-perm"); err != nil || rec.State != ledger.StateFailed || rec.Permanent {
		t.Fatalf("w-perm after replay: %+v, %v", rec, err)
	}
}

// A message left in the source whose --hold runs out during the run comes
// back: it is recognised, held again and counted once.
func TestReplay_HeldMessagesComeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	done := map[string]string{}
	var ids []string
	for i := range 25 {
		id := fmt.Sprintf("h-%02d", i)
		ids = append(ids, id)
		if i < 5 {
			done[id] = "complete"
		}
	}
	replayPrepare(t, e, done)
	replayPut(t, e.client, e.queue.DLQURL, replayBodies(ids...))
	// 20 messages at 5 a second outlast the 2 s hold of the 5 left.
	code, out, sum := e.replay("--hold 2s --rate 5 --log-level debug")
	if code != exitOK || !strings.Contains(out, "received again after --hold ran out") {
		t.Fatalf("exit %d, or no message came back:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: 20, SkippedComplete: 5}, out)
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); len(left) != 5 {
		t.Fatalf("%d messages visible in the DLQ, want the 5 complete ones", len(left))
	}
	if got := replayVisible(t, e, e.queue.URL, "the queue"); len(got) != 20 {
		t.Fatalf("%d messages in the queue, want 20", len(got))
	}
}

// replaySlow seeds n messages and starts a replay of them at 50 messages a
// second, returning once some have moved.
func replaySlow(t *testing.T, n int, args string) (*procEnv, []string, *exec.Cmd, *syncBuffer) {
	t.Helper()
	e := newEnv(t, false, "exit 0\n")
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("s-%03d", i))
	}
	replayPut(t, e.client, e.queue.DLQURL, replayBodies(ids...))
	cmd, out := e.start(strings.TrimSpace("replay --json --rate 50 " + args))
	e.waitFor("some messages to move", 30*time.Second, func() bool {
		v, _ := sqstest.Count(t, e.client, e.queue.URL)
		return v >= 30
	})
	return e, ids, cmd, out
}

// SIGTERM: the moves in hand finish and the rest is given back at once;
// every message is in exactly one queue.
func TestReplay_SIGTERM(t *testing.T) {
	t.Parallel()
	e, ids, cmd, out := replaySlow(t, 300, "")
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 30*time.Second); code != exitFailure || !strings.Contains(out.String(), "interrupted") {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, out)
	}
	sum := replaySummaryIn(t, out.String())
	if !sum.Interrupted || sum.Moved == 0 || sum.Moved >= 300 || sum.Failed != 0 || sum.DeleteFailed != 0 {
		t.Fatalf("summary %+v", sum)
	}
	left := replayVisible(t, e, e.queue.DLQURL, "the DLQ") // visible at once: nothing held back
	got := replayVisible(t, e, e.queue.URL, "the queue")
	if int64(len(got)) != sum.Moved {
		t.Errorf("%d in the queue, the summary says %d moved", len(got), sum.Moved)
	}
	for _, id := range ids {
		_, inLeft := left[id]
		_, inGot := got[id]
		if inLeft == inGot {
			t.Errorf("%s: in the DLQ %v, in the queue %v; want exactly one", id, inLeft, inGot)
		}
	}
	t.Logf("moved %d of %d before SIGTERM", sum.Moved, len(ids))
}

// SIGKILL loses nothing: every message is in the DLQ or the queue, and only
// messages that were in hand (at most concurrency × 10) can be in both.
func TestReplay_SIGKILL(t *testing.T) {
	t.Parallel()
	const concurrency = 8
	e, ids, cmd, out := replaySlow(t, 300, fmt.Sprintf("--hold 3s --concurrency %d", concurrency))
	cmd.Process.Kill()
	wait(t, cmd, 10*time.Second)
	// Long enough for the messages the killed process held to come back.
	left := replayByID(t, replayDrain(t, e.client, e.queue.DLQURL, 5*time.Second), "the DLQ")
	got := replayVisible(t, e, e.queue.URL, "the queue")
	both := 0
	for _, id := range ids {
		_, inLeft := left[id]
		_, inGot := got[id]
		switch {
		case !inLeft && !inGot:
			t.Errorf("%s is in neither queue", id)
		case inLeft && inGot:
			both++
		}
	}
	if both > concurrency*10 {
		t.Errorf("%d messages in both queues, more than the %d a replay holds at once", both, concurrency*10)
	}
	if len(left)+len(got)-both != len(ids) {
		t.Errorf("%d in the DLQ + %d in the queue - %d in both != %d:\n%s", len(left), len(got), both, len(ids), out)
	}
	t.Logf("killed after moving %d; %d left, %d in both (at-least-once copies)", len(got), len(left), both)
}

// The replay rate against the local server (SQS's own message move task
// moves at most 500 messages a second).
func TestReplay_Throughput(t *testing.T) {
	t.Parallel()
	const n = 2000
	e := newEnv(t, false, "exit 0\n")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t-%04d", i)
	}
	replayPut(t, e.client, e.queue.DLQURL, replayBodies(ids...))
	start := time.Now()
	code, out, sum := e.replay("")
	wall := time.Since(start)
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	replayWant(t, sum, replaySummary{Moved: n}, out)
	if got := replayVisible(t, e, e.queue.URL, "the queue"); len(got) != n {
		t.Fatalf("%d messages in the queue, want %d", len(got), n)
	}
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); len(left) != 0 {
		t.Fatalf("%d messages left in the DLQ", len(left))
	}
	t.Logf("replayed %d messages at %.0f messages/s (moving %.2fs; whole process %.2fs with start-up and the final empty receives)",
		n, sum.Rate, float64(n)/sum.Rate, wall.Seconds())
}
