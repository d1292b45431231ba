package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// writableOver is a console with writes over r's ledger and queues.
func (r *realistic) writable(t *testing.T) *bundle {
	t.Helper()
	keys, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"})
	must(t, err)
	b := &bundle{t: t, db: r.db, client: r.client, queue: r.queue, logs: &syncBuffer{}}
	h, err := console.New(console.Config{Ledger: r.db, SQS: r.client, QueueURL: r.queue.URL, DLQURL: r.queue.DLQURL, KeyOf: keys,
		Writes: true, Auth: console.Auth{Token: "s3cret-token"}, Refresh: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(b.logs, nil))})
	must(t, err)
	t.Cleanup(func() { h.Close() })
	b.h, b.srv = h, httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	return b
}

// messages receives every visible message of a queue (a visibility
// timeout of 0: they stay) and returns the body's id of each, by message
// id.
func messages(t *testing.T, c *sqs.Client, queue string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	for empty := 0; empty < 3; {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10}, console.ZeroVisibility)
		must(t, err)
		fresh := 0
		for _, m := range out.Messages {
			if _, ok := seen[aws.ToString(m.MessageId)]; !ok {
				fresh++
			}
			var v struct{ ID string }
			json.Unmarshal([]byte(aws.ToString(m.Body)), &v)
			seen[aws.ToString(m.MessageId)] = v.ID
		}
		if fresh == 0 {
			empty++
		}
	}
	return seen
}

// TestConsole_BulkActions: a replay by reason group moves exactly that
// group's dead letters after a dry run that counts them; a forget by a
// filter forgets exactly what its dry run counted; each is in the action
// log with who, what filter and how many.
func TestConsole_BulkActions(t *testing.T) {
	t.Parallel()
	r := newRealistic(t)
	b := r.writable(t)
	group := "failed on receive # of #: timeout after # calling shipping for #"
	code, page := b.get("/dead-letters", "s3cret-token")
	if code != http.StatusOK || !strings.Contains(strings.ReplaceAll(page, "&#43;", "+"), "/replay?group="+url.QueryEscape(group)) {
		t.Fatalf("the dead letters page offers no replay of the group %q: %d\n%s", group, code, page)
	}
	before := messages(t, r.client, r.queue.DLQURL)
	form := url.Values{"group": {group}, "rate": {"100"}, "max_replays": {"3"}}
	dry := url.Values{"dry_run": {"1"}}
	for k, v := range form {
		dry[k] = v
	}
	if code, page := b.post("/replay", "s3cret-token", dry); code != http.StatusOK {
		t.Fatalf("dry run: %d\n%s", code, page)
	}
	page = b.waitJob(1)
	if !strings.Contains(page, "dry run: would move 3 messages") {
		t.Fatalf("the dry run's page:\n%s", page)
	}
	follow := url.Values{"from_dry_run": {"1"}, "confirm": {"1"}}
	for k, v := range form {
		follow[k] = v
	}
	if code, page := b.post("/replay", "s3cret-token", follow); code != http.StatusOK {
		t.Fatalf("replay: %d\n%s", code, page)
	}
	if page = b.waitJob(2); !strings.Contains(page, "moved 3 messages") {
		t.Fatalf("the replay's page:\n%s", page)
	}
	// Exactly the group's dead letters moved: those the dry run saw of
	// it are gone from the dead-letter queue and in the queue, the others
	// stay. (The queue is not received from: that would let SQS redrive
	// what it holds.)
	after := messages(t, r.client, r.queue.DLQURL)
	var moved, stayed []string
	for id, body := range before {
		if _, ok := after[id]; ok {
			stayed = append(stayed, body)
		} else {
			moved = append(moved, body)
		}
	}
	slices.Sort(moved)
	slices.Sort(stayed)
	if fmt.Sprint(moved) != "[doomed-0 doomed-1 doomed-2]" || fmt.Sprint(stayed) != "[bad-0 bad-1 bad-2 lost-1 lost-2]" {
		t.Fatalf("the replay of the group moved %v and left %v", moved, stayed)
	}
	if v, n := sqstest.Count(t, r.client, r.queue.URL); v+n != 3 {
		t.Fatalf("%d messages in the queue after the replay, want the group's 3", v+n)
	}

	// Forget the permanent failures of the card processor's group.
	ff := url.Values{"state": {"permanent"}, "group": {"permanent: card processor said no for #"}}
	dry = url.Values{"dry_run": {"1"}}
	for k, v := range ff {
		dry[k] = v
	}
	if code, page := b.post("/forget/run", "s3cret-token", dry); code != http.StatusOK {
		t.Fatalf("forget dry run: %d\n%s", code, page)
	}
	page = b.waitForget(3)
	if !strings.Contains(page, "would forget <b>3</b>") {
		t.Fatalf("the forget dry run's page:\n%s", page)
	}
	for _, key := range []string{"bad-0", "bad-1", "bad-2"} {
		if _, err := r.db.Get(context.Background(), key); err != nil {
			t.Fatalf("the dry run forgot %s: %v", key, err)
		}
	}
	follow = url.Values{"from_dry_run": {"3"}}
	for k, v := range ff {
		follow[k] = v
	}
	if code, _ := b.post("/forget/run", "s3cret-token", follow); code != http.StatusUnprocessableEntity {
		t.Fatalf("a forget without the confirmation: %d", code)
	}
	follow.Set("confirm", "1")
	if code, page := b.post("/forget/run", "s3cret-token", follow); code != http.StatusOK {
		t.Fatalf("forget: %d\n%s", code, page)
	}
	if page = b.waitForget(4); !strings.Contains(page, "Forgot <b>3</b>") {
		t.Fatalf("the forget's page:\n%s", page)
	}
	var left []string
	must(t, r.db.ForEach(context.Background(), ledger.Filter{State: ledger.StateFailed}, func(rec ledger.Record) error {
		left = append(left, rec.Key)
		return nil
	}))
	slices.Sort(left)
	if fmt.Sprint(left) != "[doomed-0 doomed-1 doomed-2]" {
		t.Fatalf("failed after the forget: %v", left)
	}

	// The action log: who, what, the filter, how many.
	_, page = b.get("/actions", "s3cret-token")
	for _, want := range []string{
		"replay dry run", "replay", "forget dry run", "forget",
		"reason group “failed on receive # of #: timeout after # calling shipping for #”",
		"state “permanent”, reason group “permanent: card processor said no for #”",
		"token@",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the action log lacks %q:\n%s", want, page)
		}
	}
	if n := len(regexp.MustCompile(`<td class="r">3</td>`).FindAllString(page, -1)); n != 4 {
		t.Errorf("the action log has %d entries of 3, want the 4 actions:\n%s", n, page)
	}
}

// waitForget waits for forget #id to end and returns its page.
func (b *bundle) waitForget(id int) string {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, page := b.get(fmt.Sprintf("/forget/job?id=%d", id), "s3cret-token")
		if !strings.Contains(page, "<b>Running</b>") {
			return page
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("forget #%d still running after a minute:\n%s", id, page)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsole_Story: an operation's page shows its attempts, the message
// it was sent (kept by the ledger, or read from its dead letter), and
// whether it is in the dead-letter queue now, with a link to exactly
// that.
func TestConsole_Story(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute)
	claim := func(key, owner string) {
		_, err := b.db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Hour})
		must(t, err)
	}
	claim("pay/1", "hostA/1/x/1")
	must(t, b.db.Fail(ctx, ledger.Failure{Key: "pay/1", Owner: "hostA/1/x/1", Err: "503 from the bank", Started: t0,
		Payload: &ledger.Payload{Body: []byte(`{"id":"pay/1","amount":4200}`), Attributes: map[string]string{"Tenant": "acme"}}}))
	claim("pay/1", "hostB/2/y/7")
	must(t, b.db.Complete(ctx, ledger.Completion{Key: "pay/1", Owner: "hostB/2/y/7", Started: time.Now().Add(-time.Second)}))
	code, page := b.get("/operation?key=pay/1", "")
	if code != http.StatusOK {
		t.Fatalf("operation: %d\n%s", code, page)
	}
	history := section(page, "Attempts")
	for _, want := range []string{"hostA/1/x", "hostB/2/y", `class="outcome failed"`, `class="outcome complete"`, "503 from the bank"} {
		if !strings.Contains(history, want) {
			t.Errorf("the attempts lack %q:\n%s", want, history)
		}
	}
	msg := section(page, "Message")
	for _, want := range []string{"the ledger (ledger.keep_body)", "Tenant", "acme", `{&#34;id&#34;:&#34;pay/1&#34;,&#34;amount&#34;:4200}`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message lacks %q:\n%s", want, msg)
		}
	}

	// orders/2 failed, and its message is in the dead-letter queue.
	_, err := b.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &b.queue.DLQURL, MessageBody: aws.String(`{"id":"orders/2","note":"dead"}`)})
	must(t, err)
	_, page = b.get("/operation?key=orders/2", "")
	dlq := section(page, "Dead-letter queue")
	if !strings.Contains(dlq, "In the dead-letter queue now") || !strings.Contains(dlq, `href="/dead-letters?key=orders%2F2"`) {
		t.Fatalf("the operation's page does not say it is in the dead-letter queue, with a link to it:\n%s", dlq)
	}
	if msg := section(page, "Message"); !strings.Contains(msg, "its message in the dead-letter queue") || !strings.Contains(msg, "&#34;note&#34;:&#34;dead&#34;") {
		t.Errorf("the message is not read from its dead letter:\n%s", msg)
	}
	_, page = b.get("/dead-letters?key=orders/2", "")
	if !strings.Contains(page, "&#34;note&#34;:&#34;dead&#34;") || strings.Count(page, `class="card letter"`) != 1 {
		t.Errorf("the page of the operation's dead letters:\n%s", page)
	}
	// orders/3 failed permanently, and is not there.
	_, page = b.get("/operation?key=orders/3", "")
	if dlq := section(page, "Dead-letter queue"); !strings.Contains(dlq, "Not in the dead-letter queue among the 1 message(s) read") {
		t.Errorf("the page of an operation not in the dead-letter queue:\n%s", dlq)
	}
}

// TestConsole_PauseAndResume: a pause by hand writes the scope's pause
// state as the workers read it (worker.PauseDoc), for as long as asked; a
// resume deletes it; both are in the action log.
func TestConsole_PauseAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, writable)
	ctx := context.Background()
	code, _ := b.post("/flow/pause", "s3cret-token", url.Values{"scope": {"orders"}, "until": {"30m"}, "reason": {"bank maintenance"}})
	if code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}
	r, err := b.db.GetFlow(ctx, "orders")
	must(t, err)
	var doc worker.PauseDoc
	must(t, json.Unmarshal(r.Doc.Data, &doc))
	if !r.Found || doc.State != worker.PausePaused || !doc.Manual || doc.Reason != "bank maintenance" || !strings.HasPrefix(doc.By, "token@") ||
		r.Doc.Expires.Sub(r.Now) > 30*time.Minute || r.Doc.Expires.Sub(r.Now) < 29*time.Minute {
		t.Fatalf("the pause written: %+v, %+v", r, doc)
	}
	_, page := b.get("/", "s3cret-token")
	fc := section(page, "Flow control")
	if !strings.Contains(fc, "<code>orders</code>") || !strings.Contains(fc, "bank maintenance") || !strings.Contains(fc, "by hand") {
		t.Fatalf("the overview does not show the pause:\n%s", fc)
	}
	version := regexp.MustCompile(`name="version" value="([0-9]+)"`).FindStringSubmatch(fc)
	if version == nil {
		t.Fatalf("no resume button:\n%s", fc)
	}
	if code, _ := b.post("/flow/pause", "s3cret-token", url.Values{"scope": {"orders"}, "until": {"30m"}}); code != http.StatusBadRequest {
		t.Errorf("a pause without a reason: %d", code)
	}
	if code, _ := b.post("/flow/resume", "s3cret-token", url.Values{"scope": {"orders"}, "version": {version[1]}}); code != http.StatusOK {
		t.Fatalf("resume: %d", code)
	}
	if r, err := b.db.GetFlow(ctx, "orders"); err != nil || r.Found {
		t.Fatalf("after the resume: %+v, %v", r, err)
	}
	_, page = b.get("/actions", "s3cret-token")
	for _, want := range []string{"pause", "resume", "orders until", "bank maintenance", "refused: Reason"} {
		if !strings.Contains(page, want) {
			t.Errorf("the action log lacks %q:\n%s", want, page)
		}
	}
}

// TestConsole_PauseBelowRetention: a pause by hand is bounded by the
// queue's message retention (4 days on the test server), read from SQS,
// counted from the start of an automatic pause it replaces, whose start it
// keeps, as `sqsonce flow pause` does.
func TestConsole_PauseBelowRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, writable)
	ctx := context.Background()
	if code, body := b.post("/flow/pause", "s3cret-token", url.Values{"scope": {"orders"}, "until": {"97h"}, "reason": {"long"}}); code != http.StatusBadRequest ||
		!strings.Contains(body, "retention") {
		t.Fatalf("a pause past the queue's retention: %d\n%s", code, body)
	}
	if r, err := b.db.GetFlow(ctx, "orders"); err != nil || r.Found {
		t.Fatalf("a refused pause wrote: %+v, %v", r, err)
	}
	// An automatic pause an hour old: 95h30m more would make 96h30m.
	started := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	auto, err := json.Marshal(worker.PauseDoc{State: worker.PausePaused, Since: started, Reason: "503 from 3 keys"})
	must(t, err)
	_, err = b.db.PutFlow(ctx, ledger.FlowDoc{Scope: "orders", Data: auto, TTL: time.Hour}, 0)
	must(t, err)
	if code, body := b.post("/flow/pause", "s3cret-token", url.Values{"scope": {"orders"}, "until": {"95h30m"}, "reason": {"long"}}); code != http.StatusBadRequest ||
		!strings.Contains(body, "retention") {
		t.Fatalf("a pause past the retention from the automatic pause's start: %d\n%s", code, body)
	}
	if code, _ := b.post("/flow/pause", "s3cret-token", url.Values{"scope": {"orders"}, "until": {"90h"}, "reason": {"partner migrating"}}); code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}
	r, err := b.db.GetFlow(ctx, "orders")
	must(t, err)
	var doc worker.PauseDoc
	must(t, json.Unmarshal(r.Doc.Data, &doc))
	if !doc.Manual || doc.Reason != "partner migrating" || !doc.Since.Equal(started) || r.Doc.Expires.Sub(r.Now) < 89*time.Hour {
		t.Fatalf("the pause written over the automatic one: %+v, %+v (want its start %v kept)", r, doc, started)
	}
}

// TestConsole_Lists: the list is the newest first by default; a filter
// that matches one record among more than a call of List looks at shows
// it, not an empty page with a next link; a tile's count is the list's.
func TestConsole_Lists(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	// 60,000 complete records before one failure, in key order.
	for batch := range 60 {
		reqs := make([]ledger.ClaimRequest, 1000)
		cs := make([]ledger.Completion, 1000)
		for i := range reqs {
			key := fmt.Sprintf("a/%02d/%04d", batch, i)
			reqs[i] = ledger.ClaimRequest{Key: key, Owner: "w", Lease: time.Hour}
			cs[i] = ledger.Completion{Key: key, Owner: "w"}
		}
		_, err := b.db.ClaimBatch(ctx, reqs)
		must(t, err)
		for _, err := range b.db.CompleteBatch(ctx, cs) {
			must(t, err)
		}
	}
	_, err := b.db.Claim(ctx, ledger.ClaimRequest{Key: "z/needle", Owner: "w", Lease: time.Hour})
	must(t, err)
	must(t, b.db.Fail(ctx, ledger.Failure{Key: "z/needle", Owner: "w", Err: "a rare needle"}))

	_, page := b.get("/operations?order=key&reason=needle", "")
	if !strings.Contains(page, "z%2Fneedle") || strings.Contains(page, `class="next"`) {
		t.Fatalf("a sparse filter's page:\n%s", page)
	}
	// The newest first.
	_, page = b.get("/operations?limit=3", "")
	first := regexp.MustCompile(`operation\?key=([^"]+)"`).FindAllStringSubmatch(page, 3)
	if len(first) != 3 || first[0][1] != "z%2Fneedle" {
		t.Fatalf("the newest first: %v", first)
	}
	if !strings.Contains(page, "Newest first") {
		t.Errorf("the list does not say its order:\n%s", page)
	}
	// A state's count, exact.
	_, page = b.get("/operations?state=complete&limit=1", "")
	if !strings.Contains(page, "<b>60\u202f001</b> operation(s) match") {
		t.Errorf("the count of the complete operations:\n%s", section(page, ""))
	}
}

// TestConsole_LedgerDown: with the ledger away, the overview still shows
// the queues, and the dead-letter page says the ledger could not be read
// rather than that the operations have no record.
func TestConsole_LedgerDown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	_, err := b.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &b.queue.DLQURL, MessageBody: aws.String(`{"id":"orders/2"}`)})
	must(t, err)
	must(t, b.db.Close())
	code, page := b.get("/", "")
	if code != http.StatusBadGateway || !strings.Contains(page, "The ledger could not be read") || !strings.Contains(page, "<h2>Queues</h2>") ||
		!regexp.MustCompile(`dead-letter queue</a></td><td class="r">1</td>`).MatchString(page) {
		t.Fatalf("the overview with the ledger closed: %d\n%s", code, page)
	}
	code, page = b.get("/dead-letters", "")
	if code != http.StatusBadGateway || !strings.Contains(page, "The ledger could not be read") || strings.Contains(page, "no record") {
		t.Fatalf("the dead letters with the ledger closed: %d\n%s", code, page)
	}
}
