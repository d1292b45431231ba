package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// bundle is one test's console over a real ledger file and real queues.
type bundle struct {
	t      *testing.T
	db     *ledger.DB
	client *sqs.Client
	queue  sqstest.Queue
	srv    *httptest.Server
	h      *console.Handler
	reg    *prometheus.Registry
	logs   *syncBuffer
}

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

// setup opens a ledger with a complete, a failed, a permanently failed, a
// live and a lapsed operation, a queue with a dead-letter queue, and a
// console over them configured by adjust.
func setup(t *testing.T, adjust func(*console.Config)) *bundle {
	t.Helper()
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{MaxReceiveCount: 3})
	b := &bundle{t: t, db: db, client: client, queue: q, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	claim := func(key, owner string, lease time.Duration) {
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: lease, MessageID: "m-" + key}); err != nil {
			t.Fatal(err)
		}
	}
	claim("orders/1", "w1", time.Hour)
	must(t, db.Complete(ctx, ledger.Completion{Key: "orders/1", Owner: "w1", Result: []byte(`{"receipt":"r-1"}`)}))
	claim("orders/2", "w1", time.Hour)
	must(t, db.Fail(ctx, ledger.Failure{Key: "orders/2", Owner: "w1", Err: "timeout talking to the bank"}))
	claim("orders/3", "w1", time.Hour)
	must(t, db.Fail(ctx, ledger.Failure{Key: "orders/3", Owner: "w1", Err: "card declined", Permanent: true}))
	claim("orders/4", "w2", time.Hour)
	claim("orders/5", "w3", time.Millisecond) // its lease lapses at once
	claim(`<script>alert("k")</script>`, "w1", time.Hour)
	must(t, db.Fail(ctx, ledger.Failure{Key: `<script>alert("k")</script>`, Owner: "w1", Err: `<img src=x onerror=alert(1)>`}))
	time.Sleep(5 * time.Millisecond)

	keyOf, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := console.Config{
		Ledger: db, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL, KeyOf: keyOf,
		LedgerName: "bbolt file", Registerer: b.reg, Refresh: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(b.logs, nil)),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	h, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	b.h = h
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writable is a console with writes and a token.
func writable(c *console.Config) {
	c.Writes = true
	c.Auth = console.Auth{Token: "s3cret-token"}
}

// get fetches a page, with the token when given, and returns its status
// and body.
func (b *bundle) get(path, token string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	must(b.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return b.do(req)
}

// post sends a form as a browser on the console's own page would, with
// the token when given.
func (b *bundle) post(path, token string, form url.Values) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	must(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", b.srv.URL)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return b.do(req)
}

func (b *bundle) do(req *http.Request) (int, string) {
	b.t.Helper()
	resp, err := b.srv.Client().Do(req)
	must(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(b.t, err)
	for name, want := range map[string]string{
		"X-Content-Type-Options": "nosniff",
		"Cache-Control":          "no-store",
	} {
		if got := resp.Header.Get(name); got != want {
			b.t.Errorf("%s %s: %s %q, want %q", req.Method, req.URL.Path, name, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		b.t.Errorf("%s %s: Content-Security-Policy %q", req.Method, req.URL.Path, csp)
	}
	return resp.StatusCode, string(body)
}

// noInlineScript fails when a page holds a script or an image element:
// the pages have none, so any is an untrusted value that was not escaped.
func noInlineScript(t *testing.T, page string) {
	t.Helper()
	if m := regexp.MustCompile(`(?i)<script|<img`).FindString(page); m != "" {
		t.Fatalf("page holds %q: an untrusted value was not escaped", m)
	}
}

func TestConsole_Pages(t *testing.T) {
	t.Parallel()

	t.Run("Overview", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		code, page := b.get("/", "")
		if code != http.StatusOK {
			t.Fatalf("overview: %d\n%s", code, page)
		}
		noInlineScript(t, page)
		for _, want := range []string{
			`<span class="n">2</span> in progress`, `<span class="n">1</span> complete`,
			`<span class="n">2</span> failed, to be retried`, `<span class="n">1</span> failed permanently`,
			`<span class="n">1</span> lapsed leases`,
			"orders%2F5",                  // the lapsed claim, linked
			"timeout talking to the bank", // a failure group
			"card declined",
			"<svg", `class="done"`, // the chart, drawn here
			"<code>w3</code>", // an owner holding claims
			"read-only",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("overview lacks %q", want)
			}
		}
		if strings.Contains(page, ">Replay<") {
			t.Error("a read-only console offers replay")
		}
	})

	t.Run("OperationsFilterAndPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		code, page := b.get("/operations?prefix=orders/&limit=2&order=key", "")
		if code != http.StatusOK || !strings.Contains(page, "orders%2F1") || !strings.Contains(page, "orders%2F2") || strings.Contains(page, "orders%2F3") {
			t.Fatalf("first page of 2: %d\n%s", code, page)
		}
		next := regexp.MustCompile(`class="next" href="([^"]+)"`).FindStringSubmatch(page)
		if next == nil {
			t.Fatalf("no next page link:\n%s", page)
		}
		nextURL := strings.ReplaceAll(next[1], "&amp;", "&")
		if !strings.Contains(nextURL, "prefix=orders%2F") || !strings.Contains(nextURL, "limit=2") || !strings.Contains(nextURL, "order=key") {
			t.Errorf("the next page's link %q loses the filter", nextURL)
		}
		_, page = b.get(nextURL, "")
		if !strings.Contains(page, "orders%2F3") || !strings.Contains(page, "orders%2F4") || strings.Contains(page, "orders%2F1\"") {
			t.Fatalf("second page:\n%s", page)
		}
		_, page = b.get("/operations?state=failed&reason=TIMEOUT", "")
		if !strings.Contains(page, "orders%2F2") || strings.Contains(page, "orders%2F3") {
			t.Fatalf("failed with reason timeout:\n%s", page)
		}
		code, page = b.get("/operations?since=2h&until=3h", "")
		if code != http.StatusBadRequest || !strings.Contains(page, "is not before") {
			t.Fatalf("a window that ends before it starts: %d\n%s", code, page)
		}
		code, page = b.get("/operations?since=yesterday", "")
		if code != http.StatusBadRequest || !strings.Contains(page, "since: &#34;yesterday&#34;") {
			t.Fatalf("a bad time: %d\n%s", code, page)
		}
		_, page = b.get("/operations?reason=onerror", "")
		noInlineScript(t, page)
		if !strings.Contains(page, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Fatalf("the reason is not shown escaped:\n%s", page)
		}
	})

	t.Run("Operation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		code, page := b.get("/operation?key=orders/1", "")
		for _, want := range []string{"orders/1", "complete", `{&#34;receipt&#34;:&#34;r-1&#34;}`, "sqsonce ledger get orders/1", "m-orders/1"} {
			if !strings.Contains(page, want) {
				t.Errorf("operation page (%d) lacks %q", code, want)
			}
		}
		code, page = b.get("/operation?key="+url.QueryEscape(`<script>alert("k")</script>`), "")
		if code != http.StatusOK {
			t.Fatalf("operation with an odd key: %d", code)
		}
		noInlineScript(t, page)
		if !strings.Contains(page, `ledger get &#39;&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;&#39;`) {
			t.Errorf("the shell command does not quote the key:\n%s", page)
		}
		code, page = b.get("/operation?key=nope", "")
		if code != http.StatusNotFound || !strings.Contains(page, "no live record") {
			t.Fatalf("missing key: %d\n%s", code, page)
		}
		if strings.Contains(page, "Forget this operation") {
			t.Error("a read-only console offers to forget")
		}
	})

	t.Run("ReadOnlyRefusesWrites", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		code, _ := b.post("/forget", "", url.Values{"key": {"orders/1"}, "typed": {"orders/1"}})
		if code != http.StatusForbidden {
			t.Fatalf("forget on a read-only console: %d", code)
		}
		if _, err := b.db.Get(context.Background(), "orders/1"); err != nil {
			t.Fatalf("read-only console forgot: %v", err)
		}
		for _, path := range []string{"/replay", "/export"} {
			if code, _ := b.get(path, ""); code != http.StatusForbidden {
				t.Errorf("GET %s on a read-only console: %d", path, code)
			}
		}
		if got := testutil.ToFloat64(counter(t, b.reg, "forget", "refused")); got != 1 {
			t.Errorf("refused forgets counted %v, want 1", got)
		}
	})
}

// counter finds sqsonce_console_actions_total{action, outcome}.
func counter(t *testing.T, reg *prometheus.Registry, action, outcome string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sqsonce_console_actions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["action"] == action && labels["outcome"] == outcome {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "none"})
}

func TestConsole_Safety(t *testing.T) {
	t.Parallel()

	t.Run("NewRefusesWritesWithoutCredential", func(t *testing.T) {
		t.Parallel()
		db, err := ledger.Open(filepath.Join(t.TempDir(), "l.db"), ledger.Options{})
		must(t, err)
		defer db.Close()
		keyOf, _ := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"})
		_, err = console.New(console.Config{Ledger: db, SQS: sqstest.NewClient(t, nil), QueueURL: "http://q", KeyOf: keyOf, Writes: true})
		if !errors.Is(err, console.ErrInvalidConfig) || !strings.Contains(err.Error(), "Writes needs a credential") {
			t.Fatalf("writes without a credential: %v", err)
		}
	})

	t.Run("Credential", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		if code, _ := b.get("/operations", ""); code != http.StatusUnauthorized {
			t.Errorf("a page without the token: %d", code)
		}
		if code, _ := b.get("/operations", "wrong"); code != http.StatusUnauthorized {
			t.Errorf("a page with a wrong token: %d", code)
		}
		if code, _ := b.get("/operations", "s3cret-token"); code != http.StatusOK {
			t.Errorf("a page with the token: %d", code)
		}
		// A write without the credential is refused and changes nothing.
		code, _ := b.post("/forget", "", url.Values{"key": {"orders/1"}, "typed": {"orders/1"}})
		if code != http.StatusUnauthorized {
			t.Errorf("forget without the token: %d", code)
		}
		if _, err := b.db.Get(context.Background(), "orders/1"); err != nil {
			t.Fatalf("forget without the token took effect: %v", err)
		}
		// A browser asking for a page is sent to the sign-in form, whose
		// cookie then opens the pages.
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/operations?state=failed", nil)
		req.Header.Set("Accept", "text/html")
		noFollow := *b.srv.Client()
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := noFollow.Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/sign-in?next=%2Foperations") {
			t.Fatalf("a browser without the token: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		form := url.Values{"token": {"s3cret-token"}, "next": {"/operations?state=failed"}}
		req, _ = http.NewRequest(http.MethodPost, b.srv.URL+"/sign-in", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err = noFollow.Do(req)
		must(t, err)
		resp.Body.Close()
		cookies := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/operations?state=failed" || len(cookies) != 1 ||
			!cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(cookies[0].Value, "s3cret") {
			t.Fatalf("sign-in: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
		}
		req, _ = http.NewRequest(http.MethodGet, b.srv.URL+"/operations", nil)
		req.AddCookie(cookies[0])
		if code, _ := b.do(req); code != http.StatusOK {
			t.Errorf("a page with the sign-in cookie: %d", code)
		}
	})

	t.Run("BasicAuth", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *console.Config) { c.Auth = console.Auth{User: "ops", Password: "pa55"} })
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/", nil)
		if code, _ := b.do(req); code != http.StatusUnauthorized {
			t.Errorf("without the password: %d", code)
		}
		req.SetBasicAuth("ops", "wrong")
		if code, _ := b.do(req); code != http.StatusUnauthorized {
			t.Errorf("with a wrong password: %d", code)
		}
		req.SetBasicAuth("ops", "pa55")
		if code, page := b.do(req); code != http.StatusOK || !strings.Contains(page, "signed in as <b>ops</b>") {
			t.Errorf("with the password: %d", code)
		}
	})

	t.Run("CrossOriginPostRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/forget", strings.NewReader("key=orders/1&typed=orders/1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer s3cret-token")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Origin", "https://evil.example")
		code, _ := b.do(req)
		if code != http.StatusForbidden {
			t.Fatalf("cross-origin forget: %d", code)
		}
		if _, err := b.db.Get(context.Background(), "orders/1"); err != nil {
			t.Fatalf("a cross-origin forget took effect: %v", err)
		}
		if !strings.Contains(b.logs.String(), "refused a cross-origin request") {
			t.Errorf("the refusal is not logged:\n%s", b.logs)
		}
	})
}

func TestConsole_Writes(t *testing.T) {
	t.Parallel()

	t.Run("ForgetNeedsTheTypedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		code, page := b.post("/forget", "s3cret-token", url.Values{"key": {"orders/2"}, "typed": {"orders/"}})
		if code != http.StatusUnprocessableEntity || !strings.Contains(page, "not this operation") {
			t.Fatalf("forget with a mistyped key: %d\n%s", code, page)
		}
		if _, err := b.db.Get(context.Background(), "orders/2"); err != nil {
			t.Fatalf("a mistyped forget took effect: %v", err)
		}
		code, page = b.post("/forget", "s3cret-token", url.Values{"key": {"orders/2"}, "typed": {"orders/2"}})
		if code != http.StatusOK || !strings.Contains(page, "Forgotten") {
			t.Fatalf("forget: %d\n%s", code, page)
		}
		if _, err := b.db.Get(context.Background(), "orders/2"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("after forget: %v", err)
		}
		if !regexp.MustCompile(`console: forgot an operation.*actor=token@127\.0\.0\.1:\d+ key=orders/2`).MatchString(b.logs.String()) {
			t.Errorf("the forget is not logged with its actor:\n%s", b.logs)
		}
		if got := testutil.ToFloat64(counter(t, b.reg, "forget", "done")); got != 1 {
			t.Errorf("forgets counted %v, want 1", got)
		}
	})

	// Forgetting a key the ledger has no record of says so, and is
	// neither logged nor counted as done; a page that says "forgotten"
	// is not believed above a live record.
	t.Run("ForgetWithoutRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		code, page := b.post("/forget", "s3cret-token", url.Values{"key": {"orders/9"}, "typed": {"orders/9"}})
		if code != http.StatusNotFound || !strings.Contains(page, "no record of <code>orders/9</code>: nothing was forgotten") || strings.Contains(page, "Forgotten") {
			t.Errorf("forget of a key without a record: %d\n%s", code, page)
		}
		if strings.Contains(b.logs.String(), "forgot an operation") {
			t.Errorf("a forget of nothing is logged as done:\n%s", b.logs)
		}
		if done, refused := testutil.ToFloat64(counter(t, b.reg, "forget", "done")), testutil.ToFloat64(counter(t, b.reg, "forget", "refused")); done != 0 || refused != 1 {
			t.Errorf("a forget of nothing counted done %v, refused %v; want 0 and 1", done, refused)
		}
		code, page = b.get("/operation?key=orders/1&forgotten=1", "s3cret-token")
		if code != http.StatusOK || strings.Contains(page, "Forgotten") || !strings.Contains(page, "r-1") {
			t.Errorf("a live record under \"forgotten\": %d\n%s", code, page)
		}
	})

	t.Run("Export", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		code, body := b.get("/export?prefix=orders/&state=failed&order=key", "s3cret-token")
		if code != http.StatusOK {
			t.Fatalf("export: %d\n%s", code, body)
		}
		var keys []string
		for line := range strings.Lines(body) {
			var j ledger.RecordJSON
			must(t, json.Unmarshal([]byte(line), &j))
			keys = append(keys, j.Key+":"+j.State)
		}
		if fmt.Sprint(keys) != "[orders/2:failed orders/3:failed]" {
			t.Fatalf("exported %v", keys)
		}
	})

	t.Run("DeadLettersAndReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		ctx := context.Background()
		// Dead letters: two of the failed operation, one of a complete
		// one, one without a key.
		send := func(body, reason string) {
			in := &sqs.SendMessageInput{QueueUrl: &b.queue.DLQURL, MessageBody: aws.String(body)}
			if reason != "" {
				in.MessageAttributes = map[string]types.MessageAttributeValue{
					worker.AttrReason: {DataType: aws.String("String"), StringValue: aws.String(reason)},
				}
			}
			_, err := b.client.SendMessage(ctx, in)
			must(t, err)
		}
		send(`{"id":"orders/2"}`, "handler exited 1: timeout")
		send(`{"id":"orders/2"}`, "handler exited 1: timeout")
		send(`{"id":"orders/1"}`, "")
		send(`{"no":"key"}`, "no operation key: /id missing")
		code, page := b.get("/dead-letters", "s3cret-token")
		if code != http.StatusOK {
			t.Fatalf("dead letters: %d\n%s", code, page)
		}
		for _, want := range []string{"Read 4 message(s)", "handler exited #: timeout", "(no reason given", "orders%2F2", "/id missing"} {
			if !strings.Contains(page, want) {
				t.Errorf("dead letters page lacks %q:\n%s", want, page)
			}
		}
		// Nothing was hidden: every message can be received at once.
		if n := visible(t, b.client, b.queue.DLQURL); n != 4 {
			t.Fatalf("%d dead letters visible after the page, want 4", n)
		}

		// A replay without a dry run is refused.
		form := url.Values{"key": {"orders/*"}, "rate": {"100"}, "max_replays": {"3"}}
		code, page = b.post("/replay", "s3cret-token", form)
		if code != http.StatusConflict || !strings.Contains(page, "Run a dry run first") {
			t.Fatalf("replay without a dry run: %d\n%s", code, page)
		}
		// The dry run counts and samples, and moves nothing.
		dry := url.Values{"dry_run": {"1"}}
		for k, v := range form {
			dry[k] = v
		}
		code, page = b.post("/replay", "s3cret-token", dry)
		if code != http.StatusOK {
			t.Fatalf("dry run: %d\n%s", code, page)
		}
		page = b.waitJob(1)
		for _, want := range []string{"dry run: would move 2 messages", "left 2 (complete 1, keyless 0, max replays 0, filtered 1", "Sample of what would move", "orders%2F2", `name="from_dry_run" value="1"`} {
			if !strings.Contains(page, want) {
				t.Errorf("dry run's page lacks %q:\n%s", want, page)
			}
		}
		if n := visible(t, b.client, b.queue.URL); n != 0 {
			t.Fatalf("the dry run moved %d messages", n)
		}
		// Without the confirmation, nothing moves.
		follow := url.Values{"from_dry_run": {"1"}}
		for k, v := range form {
			follow[k] = v
		}
		if code, _ := b.post("/replay", "s3cret-token", follow); code != http.StatusUnprocessableEntity {
			t.Fatalf("replay without the confirmation: %d", code)
		}
		follow.Set("confirm", "1")
		code, page = b.post("/replay", "s3cret-token", follow)
		if code != http.StatusOK {
			t.Fatalf("replay: %d\n%s", code, page)
		}
		page = b.waitJob(2)
		if !strings.Contains(page, "moved 2 messages from "+b.queue.DLQURL+" to "+b.queue.URL) || !strings.Contains(page, "reset 2") {
			t.Fatalf("replay's page:\n%s", page)
		}
		if n := visible(t, b.client, b.queue.URL); n != 2 {
			t.Fatalf("%d messages in the queue after the replay, want 2", n)
		}
		if rec, err := b.db.Get(ctx, "orders/2"); err != nil || rec.State != ledger.StateFailed || rec.Permanent {
			t.Fatalf("orders/2 after the replay: %+v %v", rec, err)
		}
		// The recent replays say their filters as typed, not URL-encoded.
		if _, page := b.get("/replay", "s3cret-token"); !strings.Contains(page, "key “orders/*”") || strings.Contains(page, "orders%2F%2A") {
			t.Errorf("the recent replays' filters:\n%s", page)
		}
		if got := testutil.ToFloat64(counter(t, b.reg, "replay", "done")); got != 1 {
			t.Errorf("replays counted %v, want 1", got)
		}
		if !strings.Contains(b.logs.String(), "console: replay started") || !strings.Contains(b.logs.String(), "actor=token@") {
			t.Errorf("the replay is not logged with its actor:\n%s", b.logs)
		}
	})
}

// waitJob waits for replay #id to end and returns its page.
func (b *bundle) waitJob(id int) string {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, page := b.get(fmt.Sprintf("/replay/job?id=%d", id), "s3cret-token")
		if !strings.Contains(page, "<b>Running</b>") {
			return page
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("replay #%d still running after a minute:\n%s", id, page)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// visible counts the messages of a queue that a receive can take now,
// and gives them back at once.
func visible(t *testing.T, c *sqs.Client, queue string) int {
	t.Helper()
	seen := map[string]bool{}
	for range 5 {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10}, console.ZeroVisibility)
		must(t, err)
		for _, m := range out.Messages {
			seen[aws.ToString(m.MessageId)] = true
		}
	}
	return len(seen)
}

// The overview says when the ledger read it, not when the console asked: a
// worker's socket gives an overview it read a while ago.
func TestConsole_OverviewAge(t *testing.T) {
	t.Parallel()
	// The ledger's clock is two minutes behind: its overview is dated
	// then.
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{Now: func() time.Time { return time.Now().Add(-2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{})
	keyOf, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := console.New(console.Config{Ledger: db, SQS: client, QueueURL: q.URL, KeyOf: keyOf, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`Read 2m [0-9]+s ago`).Match(body) {
		t.Fatalf("the overview does not say it was read 2 minutes ago:\n%s", body)
	}
}
