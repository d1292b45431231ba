package main

import (
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
	"github.com/sqsonce/sqsonce/replay"
)

// replaySeed is a message put straight into a queue by a test.
type replaySeed struct {
	body         string
	attrs        map[string]types.MessageAttributeValue
	group, dedup string // FIFO only
}

// replayTestClient is c (whose request bodies are in memory, see
// sqsclient.InMemoryBodies) without retries: a call whose answer was lost
// fails the test instead of being retried, so that the test's own calls
// never receive or send a batch twice unnoticed.
func replayTestClient(c *sqs.Client) *sqs.Client {
	return sqs.New(c.Options(), func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
}

func replayStr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
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
func (e *procEnv) replay(args string, extra ...string) (int, string, replay.Summary) {
	e.t.Helper()
	cmd, out := e.start(strings.TrimSpace("replay --json "+args), extra...)
	code := wait(e.t, cmd, 2*time.Minute)
	return code, out.String(), replaySummaryIn(e.t, out.String())
}

// replaySummaryIn finds the JSON summary among a process's output lines.
func replaySummaryIn(t *testing.T, out string) replay.Summary {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, `{"moved":`) {
			var s replay.Summary
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				t.Fatalf("summary %q: %v", line, err)
			}
			return s
		}
	}
	t.Fatalf("no JSON summary in the output:\n%s", out)
	return replay.Summary{}
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

func replayWant(t *testing.T, got, want replay.Summary, out string) {
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
		{"replay --help", exitOK, "never the operation"},
		{"replay --max -1", exitUsage, "--max -1"},
		{"replay --max-replays 0", exitUsage, "--max-replays 0"},
		{"replay --rate -1", exitUsage, "--rate -1"},
		{"replay --since yesterday", exitUsage, "RFC 3339"},
		{"replay --until -5m", exitUsage, "RFC 3339"},
		{"replay --since 1h --until 2h", exitUsage, "not before the end of the window"},
		{"replay --hold 0s", exitUsage, "--hold"},
		{"replay --hold 13h", exitUsage, "--hold"},
		{"replay --concurrency 0", exitUsage, "--concurrency"},
		{"replay --key [", exitUsage, "--key"},
		{"replay extra", exitUsage, "unexpected arguments"},
		{"replay --from http://127.0.0.1:1/q --to http://127.0.0.1:1/q", exitUsage, "same queue"},
		{"replay --max -1 --hold 0s", exitUsage, "--max -1: want 0 (no limit) or more; --hold 0s: want 1s to 12h"},
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

// Without --json the summary is one line; the ledger file is opened by
// replay itself when no worker holds it.
func TestReplay_Text(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	replayPrepare(t, e, map[string]string{"done": "complete", "perm": "permanent"})
	replayPut(t, e.client, e.queue.DLQURL, append(replayBodies("done", "perm", "new"), replaySeed{body: `{}`}))
	code, out := e.run("replay", "")
	want := fmt.Sprintf("moved 2 messages from %s to %s in ", e.queue.DLQURL, e.queue.URL)
	if code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, `"ledger":"file"`) ||
		!strings.Contains(out, "left 2 (complete 1, keyless 1, max replays 0, filtered 0, conflicts 0); dropped 0 complete; reset 1; failed 0\n") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got := replayVisible(t, e, e.queue.URL, "the queue"); !slices.Equal(replayIDs(got), []string{"new", "perm"}) {
		t.Fatalf("moved %v", replayIDs(got))
	}
}

// A message without room for SqsonceReplays is left and counted, and the
// exit status says that not everything moved.
func TestReplay_NoRoom(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	full := map[string]types.MessageAttributeValue{}
	for i := range 10 {
		full[fmt.Sprintf("a%d", i)] = replayStr(strconv.Itoa(i))
	}
	replayPut(t, e.client, e.queue.DLQURL, append(replayBodies("plain"), replaySeed{body: `{"id":"full"}`, attrs: full}))
	code, out, sum := e.replay("")
	if code != exitFailure || !strings.Contains(out, "1 messages could not be moved") || !strings.Contains(out, `"no_room":1`) {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	replayWant(t, sum, replay.Summary{Moved: 1, NoRoom: 1}, out)
	if left := replayVisible(t, e, e.queue.DLQURL, "the DLQ"); !slices.Equal(replayIDs(left), []string{"full"}) {
		t.Fatalf("left in the DLQ: %v", replayIDs(left))
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
	replayWant(t, sum, replay.Summary{Moved: 2, SkippedComplete: 1, Reset: 1}, out)
	w.Process.Signal(syscall.SIGTERM)
	if code := wait(t, w, 20*time.Second); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, wout)
	}
	if rec, err := e.ledger().Get(context.Background(), "w-perm"); err != nil || rec.State != ledger.StateFailed || rec.Permanent {
		t.Fatalf("w-perm after replay: %+v, %v", rec, err)
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
