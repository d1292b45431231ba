package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// realistic is a ledger and queues as a worker left them: operations
// completed, some twice delivered; transient failures that recovered;
// permanent failures and failures on every receive, whose reasons name
// their operation, which the worker dead-lettered; claims of a worker that
// died, whose leases lapsed; and dead letters that SQS moved without
// sqsonce seeing them.
type realistic struct {
	db     *ledger.DB
	client *sqs.Client
	queue  sqstest.Queue
	srv    *httptest.Server
}

func newRealistic(t *testing.T) *realistic {
	t.Helper()
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{MaxReceiveCount: 3})
	// A worker that died holding three claims.
	for i := range 3 {
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: fmt.Sprintf("stuck-%d", i), Owner: fmt.Sprintf("deadhost/4711/abc/%d", i), Lease: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(url, body string) {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		send(q.URL, fmt.Sprintf(`{"id":"ok-%02d"}`, i))
	}
	for i := range 5 {
		send(q.URL, fmt.Sprintf(`{"id":"ok-%02d"}`, i)) // duplicates
	}
	for i := range 4 {
		send(q.URL, fmt.Sprintf(`{"id":"flaky-%d"}`, i))
	}
	for i := range 3 {
		send(q.URL, fmt.Sprintf(`{"id":"bad-%d"}`, i))
		send(q.URL, fmt.Sprintf(`{"id":"doomed-%d"}`, i))
	}
	// Moved by SQS after too many receives, never seen by sqsonce.
	send(q.DLQURL, `{"id":"lost-1"}`)
	send(q.DLQURL, `{"id":"lost-2"}`)

	keys, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"})
	must(t, err)
	var mu sync.Mutex
	tries := map[string]int{}
	w, err := worker.New(worker.Config{
		QueueURL: q.URL, WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, Concurrency: 8,
		Key:        worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		MinBackoff: worker.NoDelay, MaxBackoff: worker.NoDelay, Logger: slog.New(slog.DiscardHandler),
	}, client, db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		mu.Lock()
		tries[m.Key]++
		n := tries[m.Key]
		mu.Unlock()
		switch {
		case strings.HasPrefix(m.Key, "flaky-") && n == 1:
			return fmt.Errorf("503 from the bank for %s", m.Key)
		case strings.HasPrefix(m.Key, "bad-"):
			return worker.Permanent(fmt.Errorf("card processor said no for %s", m.Key))
		case strings.HasPrefix(m.Key, "doomed-"):
			return fmt.Errorf("timeout after 30s calling shipping for %s", m.Key)
		}
		return nil
	}))
	must(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, n := sqstest.Count(t, client, q.URL)
		dv, dn := sqstest.Count(t, client, q.DLQURL)
		if v+n == 0 && dv+dn == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not settle the queue in 2 minutes: %d+%d in the queue, %d+%d dead letters", v, n, dv, dn)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	cfg := console.Config{Ledger: db, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL, KeyOf: keys, Refresh: time.Nanosecond,
		Logger: slog.New(slog.DiscardHandler)}
	h, err := console.New(cfg)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &realistic{db: db, client: client, queue: q, srv: srv}
}

// truth is what the ledger and SQS hold, counted from the records.
type truth struct {
	inProgress, complete, toRetry, failedDead, permanent, lapsed int
	dead                                                         int // records marked dead-lettered
	deadByGroup, failedByGroup                                   map[string]int
	sqsDLQ                                                       int
}

func (r *realistic) truth(t *testing.T) truth {
	t.Helper()
	tr := truth{deadByGroup: map[string]int{}, failedByGroup: map[string]int{}}
	now := time.Now()
	must(t, r.db.ForEach(context.Background(), ledger.Filter{}, func(rec ledger.Record) error {
		switch {
		case rec.State == ledger.StateInProgress:
			tr.inProgress++
			if !rec.LeaseExpiry.After(now) {
				tr.lapsed++
			}
		case rec.State == ledger.StateComplete:
			tr.complete++
		case rec.Permanent:
			tr.permanent++
		case !rec.DeadLettered.IsZero():
			tr.failedDead++
		default:
			tr.toRetry++
		}
		if rec.State == ledger.StateFailed {
			tr.failedByGroup[ledger.ReasonGroup(rec.LastError)]++
		}
		if !rec.DeadLettered.IsZero() {
			tr.dead++
			tr.deadByGroup[ledger.ReasonGroup(rec.DeadLetterReason)]++
		}
		return nil
	}))
	out, err := r.client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &r.queue.DLQURL,
		AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"}})
	must(t, err)
	for _, v := range out.Attributes {
		n, _ := strconv.Atoi(v)
		tr.sqsDLQ += n
	}
	return tr
}

// tiles reads the numbers of a page's tiles by their label.
func tiles(page string) map[string]int {
	out := map[string]int{}
	re := regexp.MustCompile(`<span class="n">([0-9\x{202f}?]+)(?: <small>[^<]*</small>)?</span> ([^<]+)<`)
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		n, err := strconv.Atoi(strings.ReplaceAll(m[1], "\u202f", ""))
		if err != nil {
			n = -1
		}
		out[strings.TrimSpace(m[2])] = n
	}
	return out
}

// groupRows reads the rows of a table of reason groups: the group's text
// and the numbers of the row's cells, in order.
func groupRows(table string) map[string][]int {
	out := map[string][]int{}
	for _, row := range regexp.MustCompile(`(?s)<tr>(.*?)</tr>`).FindAllStringSubmatch(table, -1) {
		g := regexp.MustCompile(`<td class="reason">(?:<a [^>]*>)?([^<]*)`).FindStringSubmatch(row[1])
		if g == nil {
			continue
		}
		var ns []int
		for _, c := range regexp.MustCompile(`<td class="r">(?:<a [^>]*>)?([0-9\x{202f}]+)`).FindAllStringSubmatch(row[1], -1) {
			n, _ := strconv.Atoi(strings.ReplaceAll(c[1], "\u202f", ""))
			ns = append(ns, n)
		}
		out[strings.TrimSpace(unescape(g[1]))] = ns
	}
	return out
}

func unescape(s string) string {
	return strings.NewReplacer("&#34;", `"`, "&#39;", "'", "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(s)
}

// section is the part of page after the heading that starts with h, up to
// the next heading.
func section(page, h string) string {
	i := strings.Index(page, "<h2>"+h)
	if i < 0 {
		return ""
	}
	rest := page[i+4:]
	if j := strings.Index(rest, "<h2>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// TestConsole_Counts: on a ledger and queues as a worker leaves them, every
// count of the overview and of the dead-letter page is what the ledger
// and SQS hold, and reasons that name their operation are one group.
func TestConsole_Counts(t *testing.T) {
	t.Parallel()
	r := newRealistic(t)
	tr := r.truth(t)
	if tr.failedDead != 3 || tr.permanent != 3 || tr.lapsed != 3 || tr.dead != 6 {
		t.Fatalf("the scene is not as built: %+v", tr)
	}
	get := func(path string) string {
		t.Helper()
		resp, err := r.srv.Client().Get(r.srv.URL + path)
		must(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must(t, err)
		return string(b)
	}
	page := get("/")
	got := tiles(page)
	for label, want := range map[string]int{
		"in progress":           tr.inProgress,
		"complete":              tr.complete,
		"failed, to be retried": tr.toRetry,
		"failed, dead-lettered": tr.failedDead,
		"failed permanently":    tr.permanent,
		"lapsed leases":         tr.lapsed,
	} {
		if got[label] != want {
			t.Errorf("overview: %q shows %d, the ledger holds %d (tiles %v)", label, got[label], want, got)
		}
	}
	// Failures by reason: one group per shape, the counts the ledger's.
	rows := groupRows(section(page, "Failures by reason"))
	if len(rows) != len(tr.failedByGroup) {
		t.Errorf("failure groups on the overview: %v, the ledger's %v", rows, tr.failedByGroup)
	}
	for g, n := range tr.failedByGroup {
		row := rows[g]
		if len(row) != 3 || row[0]+row[1]+row[2] != n {
			t.Errorf("failure group %q: %v on the page, %d failed in the ledger", g, row, n)
		}
	}
	if row, ok := rows["permanent: card processor said no for #"]; !ok || row[2] != 3 {
		t.Errorf("the reasons that name their operation are not one group: %v", rows)
	}

	page = get("/dead-letters")
	got = tiles(page)
	if n := got["dead-lettered by sqsonce, as the ledger counts them"]; n != tr.dead {
		t.Errorf("dead letters: the page counts %d marked by sqsonce, the ledger holds %d (%v)", n, tr.dead, got)
	}
	if n := got["in the dead-letter queue: SQS's approximation"]; n != tr.sqsDLQ {
		t.Errorf("dead letters: the page says SQS holds %d, SQS says %d", n, tr.sqsDLQ)
	}
	rows = groupRows(section(page, "By reason, as the ledger counts them"))
	if len(rows) != len(tr.deadByGroup) {
		t.Errorf("dead-letter groups: %v on the page, the ledger's %v", rows, tr.deadByGroup)
	}
	for g, n := range tr.deadByGroup {
		if row := rows[g]; len(row) != 1 || row[0] != n {
			t.Errorf("dead-letter group %q: %v on the page, %d in the ledger", g, row, n)
		}
	}
	// The page of a tile lists what it counts.
	for state, want := range map[string]int{"retry": tr.toRetry, "dead": tr.failedDead, "permanent": tr.permanent} {
		page := get("/operations?limit=1000&state=" + state)
		if n := strings.Count(page, `<a href="/operation?key=`); n != want {
			t.Errorf("/operations?state=%s lists %d operations, the tile counts %d", state, n, want)
		}
	}
}
