//go:build browser

// The console in a real browser: `make test-browser` runs this (it installs
// Debian's chromium when missing); `go test -tags browser` needs chromium
// on the PATH and the local SQS-compatible server.

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/chromedp/chromedp"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
)

// browserToken is the console's token in this test.
const browserToken = "browser-test-token-0123456789"

// screenshotDir is where the test keeps its screenshots: $SQSONCE_SCREENSHOTS,
// or a new folder under the system's temporary directory. They are test
// output, never committed.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SQSONCE_SCREENSHOTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sqsonce-console-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

func TestConsole_Browser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed: run `make test-browser`, which installs Debian's chromium and runs this test (%v)", err)
	}
	// The worker's handler: operations whose key starts with bad- fail
	// permanently (exit 3) until $STATE/fixed exists; the rest succeed.
	e := newEnv(t, false, `key="$SQSONCE_KEY"
case "$key" in bad-*) [ -e "$STATE/fixed" ] || { echo "card processor said no for $key" >&2; exit 3; } ;; esac
echo "{\"receipt\":\"r-$key\"}"
`)
	ctx := context.Background()
	// A claim of a worker that died (its lease lapsed) and one of a live
	// worker on another host, in the ledger before the worker starts.
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []ledger.ClaimRequest{
		{Key: "stuck-1", Owner: "host-a/4711", Lease: time.Millisecond, MessageID: "m-stuck"},
		{Key: "slow-1", Owner: "host-b/815", Lease: time.Hour, MessageID: "m-slow"},
	} {
		if _, err := db.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	worker, workerOut := e.start("run", "SQSONCE_LEDGER_KEEP_BODY=true")
	for i := range 30 {
		e.send(fmt.Sprintf(`{"id":"ok-%02d","amount":%d}`, i, i*10))
	}
	for i := range 3 {
		e.send(fmt.Sprintf(`{"id":"bad-%d"}`, i))
	}
	e.waitFor("the worker to finish the messages and dead-letter the failures", time.Minute, func() bool {
		v, n := countQueue(e, e.queue.DLQURL)
		return e.queueEmpty() && v+n == 3
	})

	addr := freePort(t)
	console, consoleOut := e.start("console", "SQSONCE_CONSOLE_LISTEN="+addr, "SQSONCE_CONSOLE_WRITES=true",
		"SQSONCE_CONSOLE_AUTH=token", "SQSONCE_CONSOLE_CREDENTIAL_ENV=CONSOLE_TOKEN", "CONSOLE_TOKEN="+browserToken)
	base := "http://" + addr
	e.waitFor("the console to listen", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/sign-in")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	shots := screenshotDir(t)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 4*time.Minute)
	defer cancelTimeout()

	step := 0
	shot := func(name string) {
		t.Helper()
		step++
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(shots, fmt.Sprintf("%02d-%s.png", step, name))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v\nconsole:\n%s", what, err, consoleOut)
		}
	}
	text := func(sel string) string {
		t.Helper()
		// A page that refreshes itself (a replay's progress) may be
		// replaced while it is read: read it again.
		for try := 0; ; try++ {
			s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
			if err == nil {
				return s
			}
			if try == 20 {
				t.Fatalf("read %s: %v", sel, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	location := func() string {
		t.Helper()
		loc, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	// leave waits until the browser has left the page at from (a click
	// that navigates returns before the next page is there, and the
	// page it leaves may still match what the caller waits for next).
	leave := func(what, from string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for location() == from {
			if time.Now().After(deadline) {
				t.Fatalf("%s: still at %s after 10s", what, from)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// waitText reloads until the page's main part holds want.
	waitText := func(what, want string) string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			body := text("main")
			if strings.Contains(body, want) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no %q on the page after a minute:\n%s", what, want, body)
			}
			time.Sleep(500 * time.Millisecond)
			run("reload", chromedp.Reload())
		}
	}

	// Sign in: the console sends a browser without its token to the form.
	run("open the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	shot("sign-in")
	run("sign in", chromedp.SendKeys(chromedp.ID("token"), browserToken), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("section.tiles")))

	// The overview: the counts, the failures by reason group, the
	// lapsed claims.
	body := text("main")
	for _, want := range []string{"1\nlapsed leases", "stuck-1", "host-a/4711", `card processor said no for #"`, "30\ncomplete",
		"3\nfailed permanently", "0\nfailed, to be retried", "1\nworkers up", "3 dead-lettered"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q:\n%s", want, body)
		}
	}
	shot("overview")
	if shots := os.Getenv("SQSONCE_README_SCREENSHOT"); shots != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shots, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The workers: the worker, up; the claims of processes the registry
	// does not list.
	run("workers", chromedp.Navigate(base+"/workers"), chromedp.WaitVisible(chromedp.CSS("table.workers")))
	body = text("main")
	for _, want := range []string{"up", strconv.Itoa(worker.Process.Pid), "host-a", "host-b"} {
		if !strings.Contains(body, want) {
			t.Errorf("workers page lacks %q:\n%s", want, body)
		}
	}
	shot("workers")

	// Filter: the failed operations, by their reason.
	run("filter failed", chromedp.Navigate(base+"/operations"), chromedp.WaitVisible(chromedp.CSS("form.filters")),
		chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "permanent"),
		chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "processor"),
		chromedp.Click(chromedp.CSS(`form.filters button`)))
	leave("filter failed", base+"/operations")
	run("the filtered list", chromedp.WaitVisible(chromedp.CSS("table")))
	loc := location()
	if !strings.Contains(loc, "state=permanent") || !strings.Contains(loc, "reason=processor") {
		t.Errorf("the filter is not in the URL: %s", loc)
	}
	body = text("main")
	if !strings.Contains(body, "bad-0") || !strings.Contains(body, "bad-2") || strings.Contains(body, "ok-01") || !strings.Contains(body, "Newest first") {
		t.Errorf("failed operations:\n%s", body)
	}
	shot("operations-failed")

	// Page through the complete ones, ten at a time, in key order.
	run("first page", chromedp.Navigate(base+"/operations?state=complete&limit=10&order=key"), chromedp.WaitVisible(chromedp.CSS("a.next")))
	first := text("tbody")
	firstURL := location()
	if body := text("main"); !strings.Contains(body, "30 operation(s) match") {
		t.Errorf("the list does not count the complete operations:\n%s", body)
	}
	run("next page", chromedp.Click(chromedp.CSS("a.next")))
	leave("next page", firstURL)
	run("the next page", chromedp.WaitVisible(chromedp.CSS("tbody")))
	second := text("tbody")
	if !strings.Contains(first, "ok-00") || strings.Contains(second, "ok-00") || !strings.Contains(second, "ok-10") {
		t.Errorf("pages:\nfirst %s\nsecond %s", first, second)
	}
	shot("operations-page-2")

	// Open an operation from the list.
	run("open ok-12", chromedp.Click(chromedp.CSS(`a[href*="key=ok-12"]`)), chromedp.WaitVisible(chromedp.CSS("table.fields")))
	body = text("main")
	for _, want := range []string{"ok-12", "complete", `{"receipt":"r-ok-12"}`, "ledger get ok-12", `{"id":"ok-12","amount":120}`} {
		if !strings.Contains(body, want) {
			t.Errorf("operation page lacks %q:\n%s", want, body)
		}
	}
	shot("operation")

	// A failed operation: its attempt, and its message in the dead-letter
	// queue now, with a link to exactly it.
	run("open bad-1", chromedp.Navigate(base+"/operation?key=bad-1"), chromedp.WaitVisible(chromedp.CSS("table.history")))
	body = text("main")
	for _, want := range []string{"failed_permanently", "card processor said no for bad-1", "In the dead-letter queue now"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page of a dead-lettered operation lacks %q:\n%s", want, body)
		}
	}
	shot("operation-dead-lettered")
	run("its dead letter", chromedp.Click(chromedp.CSS(`p.dlq-now a`)), chromedp.WaitVisible(chromedp.CSS("div.letter")))
	if body = text("main"); !strings.Contains(body, `{"id":"bad-1"}`) || strings.Contains(body, "bad-2") {
		t.Errorf("the page of the operation's dead letters:\n%s", body)
	}
	shot("dead-letters-of-one")

	// The dead letters, counted by the ledger beside SQS's count, still
	// there after they were read.
	run("dead letters", chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible(chromedp.CSS("main table")))
	body = text("main")
	for _, want := range []string{"3\ndead-lettered by sqsonce", "3\nin the dead-letter queue: SQS's approximation", "Read 3 message(s)",
		`card processor said no for #"`} {
		if !strings.Contains(body, want) {
			t.Errorf("dead letters page lacks %q:\n%s", want, body)
		}
	}
	shot("dead-letters")

	// Replay the group: a dry run, then the move it shows, and the
	// operations complete.
	run("replay the group", chromedp.Click(chromedp.CSS(`a[href*="/replay?group="]`)), chromedp.WaitVisible(chromedp.CSS(`form.card input[name="group"]`)))
	if v, err := chromedp.Run(bctx, chromedp.Value(chromedp.CSS(`input[name="group"]`))); err != nil || !strings.HasPrefix(v, "failed permanently: permanent: exec ") || !strings.HasSuffix(v, `"card processor said no for #"`) {
		t.Errorf("the replay form's group: %q, %v", v, err)
	}
	run("dry run", chromedp.SetValue(chromedp.CSS(`input[name="rate"]`), "50"), chromedp.Click(chromedp.CSS(`form.card button`)))
	body = waitText("dry run", "dry run: would move 3 messages")
	if !strings.Contains(body, "Sample of what would move") || !strings.Contains(body, "bad-0") {
		t.Errorf("dry run page:\n%s", body)
	}
	if v, n := countQueue(e, e.queue.URL); v+n != 0 {
		t.Fatalf("the dry run moved %d messages", v+n)
	}
	shot("replay-dry-run")
	if err := os.WriteFile(filepath.Join(e.dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run("replay", chromedp.Click(chromedp.CSS(`input[name="confirm"]`)), chromedp.Click(chromedp.CSS(`form.card.danger button`)))
	waitText("replay", "moved 3 messages from")
	shot("replay-done")
	run("watch", chromedp.Navigate(base+"/operations?prefix=bad-&order=key"))
	waitText("the replayed operations to complete", "bad-2\tcomplete")
	waitText("all three complete", "bad-0\tcomplete")
	if rows := text("tbody"); strings.Contains(rows, "failed") || strings.Count(rows, "\tcomplete") != 3 {
		t.Errorf("after the replay:\n%s", rows)
	}
	shot("operations-after-replay")

	// Forget what a filter matches: a dry run, then the forget.
	run("forget form", chromedp.Navigate(base+"/forget"), chromedp.WaitVisible(chromedp.CSS(`form.card input[name="key"]`)),
		chromedp.SendKeys(chromedp.CSS(`form.card input[name="key"]`), "ok-2*"),
		chromedp.Click(chromedp.CSS(`form.card button`)))
	body = waitText("forget dry run", "would forget 10 operation(s)")
	shot("forget-dry-run")
	run("forget", chromedp.Click(chromedp.CSS(`input[name="confirm"]`)), chromedp.Click(chromedp.CSS(`form.forget-many button`)))
	waitText("forget", "Forgot 10 operation(s)")
	shot("forget-done")
	if code, _ := e.run("ledger get ok-25", ""); code == 0 {
		t.Error("ok-25 is still in the ledger after the forget of ok-2*")
	}

	// Pause the intake by hand, then resume it.
	run("pause", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("section.tiles")),
		chromedp.Click(chromedp.CSS(`details summary`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "bank maintenance"),
		chromedp.Click(chromedp.CSS(`form[action$="/flow/pause"] button`)))
	waitText("the pause", "bank maintenance")
	shot("paused")
	run("resume", chromedp.Click(chromedp.CSS(`form[action$="/flow/resume"] button`)))
	waitText("the resume", "No scope is paused")

	// The action log.
	run("actions", chromedp.Navigate(base+"/actions"), chromedp.WaitVisible(chromedp.CSS("table.actions")))
	body = text("main")
	for _, want := range []string{"replay dry run", "forget dry run", "pause", "resume", "key \u201cok-2*\u201d", "bank maintenance"} {
		if !strings.Contains(body, want) {
			t.Errorf("the action log lacks %q:\n%s", want, body)
		}
	}
	shot("actions")

	// Forget one, after typing its key.
	run("forget", chromedp.Navigate(base+"/operation?key=ok-03"), chromedp.WaitVisible(chromedp.ID("typed")),
		chromedp.SendKeys(chromedp.ID("typed"), "ok-03"), chromedp.Click(chromedp.CSS("button.danger")))
	waitText("forget", "Forgotten")
	shot("forgotten")

	// A write without the credential is refused, and so is a POST from
	// another site, made by the browser (which holds the sign-in cookie).
	form := url.Values{"key": {"ok-04"}, "typed": {"ok-04"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/forget", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forget without the credential: %s", resp.Status)
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/forget"><input name="key" value="ok-05"><input name="typed" value="ok-05"><button id="go">win a prize</button></form>`, base)
	}))
	defer evil.Close()
	// Another site: the same address by another name.
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
	run("cross-origin post", chromedp.Navigate(evilURL), chromedp.Click(chromedp.ID("go")), chromedp.WaitVisible(chromedp.CSS("main")))
	body = text("main")
	if !strings.Contains(body, "came from another site") {
		t.Errorf("a cross-origin POST was not refused:\n%s", body)
	}
	shot("cross-origin-refused")
	for _, key := range []string{"ok-04", "ok-05"} {
		if code, out := e.run("ledger get "+key, ""); code != 0 {
			t.Errorf("%s was forgotten by a refused request: %d %s", key, code, out)
		}
	}
	if code, _ := e.run("ledger get ok-03", ""); code == 0 {
		t.Error("ok-03 is still in the ledger after the console forgot it")
	}
	if !strings.Contains(consoleOut.String(), "console: forgot an operation") || !strings.Contains(consoleOut.String(), "refused a cross-origin request") {
		t.Errorf("the console's log lacks the forget or the refusal:\n%s", consoleOut)
	}

	// A key with a right-to-left override is shown as stored, the
	// control written as its code point.
	run("a key with a bidirectional control", chromedp.Navigate(base+"/operation?"+url.Values{"key": {"refund-\u202efdp.exe"}}.Encode()),
		chromedp.WaitVisible(chromedp.CSS("main p.error")))
	if body = text("main"); !strings.Contains(body, "refund-U+202Efdp.exe") || strings.ContainsRune(body, '\u202e') {
		t.Errorf("a key with U+202E is not shown as stored:\n%q", body)
	}
	shot("bidi-control-shown")

	// Sign out: the browser's session ends, and a page asks for the
	// token again.
	run("sign out", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("section.tiles")),
		chromedp.Click(chromedp.CSS(`form.inline button`)), chromedp.WaitVisible(chromedp.ID("token")))
	run("a page after sign-out", chromedp.Navigate(base+"/operations"), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := location(); !strings.Contains(loc, "/sign-in?next=") {
		t.Errorf("a page after sign-out: at %s, want the sign-in form", loc)
	}
	if body = text("body"); strings.Contains(body, e.queue.URL) || strings.Contains(body, "writes enabled") {
		t.Errorf("the sign-in form after sign-out shows the installation:\n%s", body)
	}
	shot("signed-out")
	if !strings.Contains(consoleOut.String(), "console: signed out") {
		t.Errorf("the console's log lacks the sign-out:\n%s", consoleOut)
	}

	console.Process.Signal(os.Interrupt)
	if code := wait(t, console, 30*time.Second); code != 0 {
		t.Errorf("console exited %d:\n%s", code, consoleOut)
	}
	worker.Process.Signal(os.Interrupt)
	if code := wait(t, worker, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d:\n%s", code, workerOut)
	}
}

// send sends one message to the test's queue.
func (e *procEnv) send(body string) {
	e.t.Helper()
	if _, err := e.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &e.queue.URL, MessageBody: aws.String(body)}); err != nil {
		e.t.Fatal(err)
	}
}

// countQueue is a queue's visible and in-flight messages.
func countQueue(e *procEnv, queue string) (int, int) {
	return sqstest.Count(e.t, e.client, queue)
}
