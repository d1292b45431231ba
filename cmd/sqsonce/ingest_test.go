package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
)

const ingestSecret = "webhook-secret-one"

// ingestVars configure `sqsonce ingest` with one GitHub source whose
// secrets come from a variable, on a free port.
func ingestVars() []string {
	return []string{
		"SQSONCE_INGEST_LISTEN=127.0.0.1:0",
		`SQSONCE_INGEST_SOURCE=[{"name": "github", "path": "/hooks/github", "verify": "github", "secret_env": "TEST_GITHUB_SECRETS"}]`,
		"TEST_GITHUB_SECRETS=old-secret " + ingestSecret,
	}
}

// cmdRun is a running sqsonce process and its output.
type cmdRun struct {
	cmd *exec.Cmd
	out *syncBuffer
}

var ingestAddr = regexp.MustCompile(`"msg":"receiving webhooks","address":"([^"]+)"`)

// startIngest starts `sqsonce ingest` and returns it with its URL.
func (e *procEnv) startIngest(extra ...string) (*cmdRun, string) {
	e.t.Helper()
	cmd, out := e.start("ingest", append(ingestVars(), extra...)...)
	var addr string
	e.waitFor("the receiver's address", 20*time.Second, func() bool {
		m := ingestAddr.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil || cmd.ProcessState != nil
	})
	if addr == "" {
		e.t.Fatalf("the receiver did not start:\n%s", out)
	}
	return &cmdRun{cmd: cmd, out: out}, "http://" + addr + "/hooks/github"
}

// delivery is one signed GitHub delivery.
func delivery(id string, body []byte) *http.Request {
	sig := hmac.New(sha256.New, []byte(ingestSecret))
	sig.Write(body)
	req, _ := http.NewRequest(http.MethodPost, "", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(sig.Sum(nil)))
	req.Header.Set("Content-Type", "application/json")
	return req
}

// flakyTransport loses some requests before they are sent and some answers
// after the receiver handled them, as networks between senders and
// receivers do.
type flakyTransport struct {
	base      http.RoundTripper
	mu        sync.Mutex
	rng       *rand.Rand
	lostReq   float64
	lostReply float64
	lost      int
}

func (f *flakyTransport) roll() (lostReq, lostReply bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.rng.Float64()
	lostReq, lostReply = x < f.lostReq, x >= f.lostReq && x < f.lostReq+f.lostReply
	if lostReq || lostReply {
		f.lost++
	}
	return lostReq, lostReply
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	lostReq, lostReply := f.roll()
	if lostReq {
		return nil, fmt.Errorf("connection reset before the request was sent: %w", syscall.ECONNRESET)
	}
	resp, err := f.base.RoundTrip(req)
	if err != nil || !lostReply {
		return resp, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, fmt.Errorf("the answer was lost: %w", syscall.ECONNRESET)
}

// sendUntilAccepted posts a delivery as a sender does: again after an error,
// a timeout or a 5xx, until it is answered 2xx; a 4xx is final.
func sendUntilAccepted(t *testing.T, client *http.Client, url, id string, body []byte) (attempts int) {
	t.Helper()
	for attempts = 1; attempts <= 50; attempts++ {
		req := delivery(id, body)
		req.URL, _ = req.URL.Parse(url)
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode/100 == 2:
				return attempts
			case resp.StatusCode/100 == 4:
				t.Errorf("delivery %s answered %d", id, resp.StatusCode)
				return attempts
			}
		}
		time.Sleep(time.Duration(20*attempts) * time.Millisecond)
	}
	t.Errorf("delivery %s not accepted after 50 attempts", id)
	return attempts
}

// Senders that retry, through `sqsonce ingest` to a FIFO queue and through
// `sqsonce run` to a handler: every event accepted has its effect once,
// however many times it was sent, at once or later, and whatever the
// network lost on the way.
func TestIngest_SendersThroughToOneEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, `cat >/dev/null; echo "$SQSONCE_KEY" >>"$STATE/effects"`+"\n")
	ing, url := e.startIngest()
	worker, wout := e.start("run", "SQSONCE_KEY_FROM=attribute", "SQSONCE_KEY_ATTRIBUTE=SqsonceKey")

	flaky := &flakyTransport{base: loopback.Transport(), rng: rand.New(rand.NewPCG(7, 7)), lostReq: 0.1, lostReply: 0.2}
	client := &http.Client{Transport: flaky, Timeout: 15 * time.Second}
	const events = 30
	var wg sync.WaitGroup
	for i := range events {
		id := fmt.Sprintf("d-%03d", i)
		body := []byte(fmt.Sprintf(`{"action":"opened","number":%d}`, i))
		copies := 1 + i%3 // one, two or three senders at once
		for range copies {
			wg.Go(func() { sendUntilAccepted(t, client, url, id, body) })
		}
		if i%5 == 0 {
			// And once more after the first is surely accepted.
			wg.Go(func() {
				sendUntilAccepted(t, client, url, id, body)
				time.Sleep(300 * time.Millisecond)
				sendUntilAccepted(t, client, url, id, body)
			})
		}
	}
	wg.Wait()
	e.waitFor("every event's effect", 60*time.Second, func() bool {
		return len(uniq(e.lines("effects"))) == events && e.queueEmpty()
	})
	time.Sleep(2 * time.Second) // a late duplicate would run now
	counts := map[string]int{}
	for _, k := range e.lines("effects") {
		counts[k]++
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("event %s took effect %d times", k, n)
		}
	}
	if len(counts) != events {
		t.Errorf("%d events took effect, want %d", len(counts), events)
	}
	t.Logf("the network lost %d requests or answers", flaky.lost)
	for _, p := range []*cmdRun{ing, {cmd: worker, out: wout}} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, p.cmd, 30*time.Second); code != 0 {
			t.Errorf("exit %d:\n%s", code, p.out)
		}
	}
}

func uniq(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// A receiver killed while a request waits on SQS answers nothing; the
// sender's retry, to the next receiver, gets the event in, once.
func TestIngest_KilledMidRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, "")
	proxy := newStallProxy(t, strings.TrimPrefix(sqstest.Endpoint(t), "http://"))
	endpoint := "SQSONCE_QUEUE_ENDPOINT=http://" + proxy.Addr()
	first, url := e.startIngest(endpoint)
	proxy.Stall()
	body := []byte(`{"action":"closed"}`)
	answered := make(chan error, 1)
	go func() {
		req := delivery("d-killed", body)
		req.URL, _ = req.URL.Parse(url)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		answered <- err
	}()
	e.waitFor("the send to wait on SQS", 10*time.Second, func() bool { return proxy.Held() > 0 })
	first.cmd.Process.Kill()
	if err := <-answered; err == nil || strings.Contains(err.Error(), "answered") {
		t.Fatalf("the request to the killed receiver: %v, want no answer", err)
	}
	first.cmd.Wait()
	proxy.Resume()

	_, url = e.startIngest(endpoint)
	client := &http.Client{Transport: loopback.Transport(), Timeout: 15 * time.Second}
	sendUntilAccepted(t, client, url, "d-killed", body)
	msgs := sqstest.Drain(t, e.client, e.queue.URL, 2, 3*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("%d messages in the FIFO queue, want the event once", len(msgs))
	}
}

// runIngestAndWorker starts `sqsonce ingest` with the sources given as
// SQSONCE_INGEST_SOURCE and `sqsonce run` reading the key ingest sends,
// and returns the receiver's base URL and a stop that checks both exit 0.
func (e *procEnv) runIngestAndWorker(sources string, vars ...string) (base string, stop func()) {
	e.t.Helper()
	ing, url := e.startIngest(append([]string{"SQSONCE_INGEST_SOURCE=" + sources}, vars...)...)
	worker, wout := e.start("run", "SQSONCE_KEY_FROM=attribute", "SQSONCE_KEY_ATTRIBUTE=SqsonceKey")
	return strings.TrimSuffix(url, "/hooks/github"), func() {
		for _, p := range []*cmdRun{ing, {cmd: worker, out: wout}} {
			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := wait(e.t, p.cmd, 30*time.Second); code != 0 {
				e.t.Errorf("exit %d:\n%s", code, p.out)
			}
		}
	}
}

// post sends one request and returns its status.
func post(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := (&http.Client{Transport: loopback.Transport(), Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A captured GitHub request, re-sent with other delivery ids to a standard
// queue (no deduplication by SQS), takes effect once: GitHub signs only
// the body, so every copy has the key of the body, and the worker runs the
// first and deletes the others as duplicates.
func TestIngest_CapturedGitHubRequestRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, `cat >/dev/null; echo "$SQSONCE_KEY" >>"$STATE/effects"`+"\n")
	base, stop := e.runIngestAndWorker(`[{"name": "github", "path": "/hooks/github", "verify": "github", "secret_env": "TEST_GITHUB_SECRETS"}]`)
	body := []byte(`{"action":"opened","pull_request":{"number":7}}`)
	for _, id := range []string{"72d3162e-cc78-11e3-81ab-4c9367dc0958", "attacker-1", "attacker-2"} {
		req := delivery(id, body)
		req.URL, _ = req.URL.Parse(base + "/hooks/github")
		if code := post(t, req); code != 200 {
			t.Fatalf("delivery %s answered %d", id, code)
		}
	}
	e.waitFor("the event's effect and an empty queue", 60*time.Second, func() bool {
		return len(e.lines("effects")) > 0 && e.queueEmpty()
	})
	time.Sleep(2 * time.Second) // a late copy would run now
	sum := sha256.Sum256(body)
	if got, want := e.lines("effects"), []string{"github:sha256:" + hex.EncodeToString(sum[:])}; !slices.Equal(got, want) {
		t.Errorf("effects %q, want one, %q", got, want)
	}
	stop()
}

// Two senders on one queue that both number their events from 1: each
// source keeps its own keys, so both events take effect, neither a
// conflict of the other.
func TestIngest_SourcesOnOneQueueKeepTheirKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, `cat >/dev/null; echo "$SQSONCE_KEY" >>"$STATE/effects"`+"\n")
	base, stop := e.runIngestAndWorker(`[`+
		`{"name": "shop", "path": "/shop", "verify": "hmac-sha256", "signature_header": "X-Signature", "secret_env": "SHOP_SECRET", "key_pointer": "/id"},`+
		`{"name": "crm", "path": "/crm", "verify": "hmac-sha256", "signature_header": "X-Signature", "secret_env": "CRM_SECRET", "key_pointer": "/id"}]`,
		"SHOP_SECRET=shop-secret", "CRM_SECRET=crm-secret")
	for _, ev := range []struct{ path, secret, body string }{
		{"/shop", "shop-secret", `{"id":"1","order":"o-17"}`},
		{"/crm", "crm-secret", `{"id":"1","contact":"c-4"}`},
	} {
		m := hmac.New(sha256.New, []byte(ev.secret))
		m.Write([]byte(ev.body))
		req, _ := http.NewRequest(http.MethodPost, base+ev.path, strings.NewReader(ev.body))
		req.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
		if code := post(t, req); code != 200 {
			t.Fatalf("%s answered %d", ev.path, code)
		}
	}
	e.waitFor("both events' effects", 60*time.Second, func() bool {
		return len(e.lines("effects")) == 2 && e.queueEmpty()
	})
	time.Sleep(2 * time.Second)
	got := e.lines("effects")
	slices.Sort(got)
	if want := []string{"crm:1", "shop:1"}; !slices.Equal(got, want) {
		t.Errorf("effects %q, want %q", got, want)
	}
	if v, n := sqstest.Count(t, e.client, e.queue.DLQURL); v+n != 0 {
		t.Errorf("%d messages in the dead-letter queue", v+n)
	}
	stop()
}

// Configuration mistakes exit 2 naming the key, before listening.
func TestIngest_BadConfiguration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	cases := []struct {
		name string
		vars []string
		want string
	}{
		{"NoSource", nil, "ingest.source: no [[ingest.source]]"},
		{"SecretUnset", []string{`SQSONCE_INGEST_SOURCE=[{"name":"gh","path":"/gh","verify":"github","secret_env":"NOT_SET_ANYWHERE"}]`}, "the variable NOT_SET_ANYWHERE is not set"},
		{"SecretInline", []string{`SQSONCE_INGEST_SOURCE=[{"name":"gh","path":"/gh","verify":"github","secret":"x"}]`}, "unknown field"},
		{"NoneWithSecret", []string{`SQSONCE_INGEST_SOURCE=[{"name":"plain","path":"/p","verify":"none","secret_env":"X","key_header":"X-Id"}]`}, `verify = "none" takes no secret`},
		{"NoKey", []string{`SQSONCE_INGEST_SOURCE=[{"name":"plain","path":"/p","verify":"none"}]`}, "set key_header or key_pointer"},
		{"BadScheme", []string{`SQSONCE_INGEST_SOURCE=[{"name":"x","path":"/x","verify":"md5","secret_env":"X"}]`}, "verify: must be one of"},
		{"BadListen", []string{"SQSONCE_INGEST_LISTEN=8080", `SQSONCE_INGEST_SOURCE=[{"name":"gh","path":"/gh","verify":"github","secret_env":"X"}]`, "X=s"}, "ingest.listen"},
		{"GitHubKeyHeader", []string{`SQSONCE_INGEST_SOURCE=[{"name":"gh","path":"/gh","verify":"github","secret_env":"X","key_header":"X-GitHub-Delivery"}]`, "X=s"},
			`source "gh": key_header X-GitHub-Delivery: verify github signs only the body (X-Hub-Signature-256), not this header`},
		{"HMACKeyHeader", []string{`SQSONCE_INGEST_SOURCE=[{"name":"p","path":"/p","verify":"hmac-sha256","signature_header":"X-Sig","secret_env":"X","key_header":"X-Event-Id"}]`, "X=s"},
			`source "p": key_header X-Event-Id: verify hmac-sha256 signs only the body, not this header`},
		{"HMACNoKey", []string{`SQSONCE_INGEST_SOURCE=[{"name":"p","path":"/p","verify":"hmac-sha256","signature_header":"X-Sig","secret_env":"X"}]`, "X=s"},
			`verify hmac-sha256 has no event id of its own: set key_pointer to the id in the body, or on_missing = "hash"`},
		{"LongKeyPrefix", []string{`SQSONCE_INGEST_SOURCE=[{"name":"gh","path":"/gh","verify":"github","secret_env":"X","key_prefix":"` + strings.Repeat("p", 200) + `"}]`, "X=s"},
			"key_prefix of 200 bytes: at most 128"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.run("ingest", "", tc.vars...)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, exitUsage, tc.want, out)
			}
		})
	}
}

// The health endpoints tell a receiver that serves from one that stops.
func TestIngest_Health(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	ing, _ := e.startIngest()
	resp, err := http.Get("http://" + adminAddr(t, e, ing.out) + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body["ready"] != true {
		t.Fatalf("/readyz %d %v", resp.StatusCode, body)
	}
	ing.cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, ing.cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, ing.out)
	}
}

// check reads each source's secrets and queue, and says when the worker
// would not read the key ingest sends.
func TestIngest_Check(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	common := []string{"SQSONCE_LEDGER_RETENTION=800h", "SQSONCE_SHUTDOWN_GRACE=30s", "SQSONCE_QUEUE_VISIBILITY_TIMEOUT=30s"}
	code, out := e.run("check", "", append(append(common, ingestVars()...), "SQSONCE_KEY_FROM=attribute", "SQSONCE_KEY_ATTRIBUTE=SqsonceKey")...)
	if code != 0 || !strings.Contains(squash(out), "ok ingest github POST /hooks/github, verify github (2 secrets), key github:sha256:<SHA-256 of the body>, to") || strings.Contains(out, "ingest key") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out = e.run("check", "", append(common, ingestVars()...)...)
	if code != 0 || !strings.Contains(squash(out), "warn ingest key the worker reads keys from the body") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out = e.run("check", "", append(common, "SQSONCE_INGEST_SOURCE="+
		`[{"name":"gh","path":"/gh","verify":"github","secret_env":"UNSET_SECRET_VARIABLE"},`+
		`{"name":"other","path":"/o","verify":"github","secret_env":"S","queue_url":"`+e.queue.URL+`-missing"}]`, "S=x")...)
	// A secret that is not set is a configuration error, on which sqsonce
	// ingest exits 2: check does too.
	if code != exitUsage || !strings.Contains(squash(out), "fail ingest") || !strings.Contains(out, "UNSET_SECRET_VARIABLE is not set") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// Two sources on one queue with one explicit key prefix share a key
	// space: a warning; each with its own prefix: none.
	shared := `[{"name":"shop","path":"/shop","verify":"stripe","secret_env":"S","key_prefix":""},` +
		`{"name":"crm","path":"/crm","verify":"stripe","secret_env":"S","key_prefix":""},` +
		`{"name":"github","path":"/gh","verify":"github","secret_env":"S"}]`
	code, out = e.run("check", "", append(common, "SQSONCE_INGEST_SOURCE="+shared, "S=x", "SQSONCE_KEY_FROM=attribute", "SQSONCE_KEY_ATTRIBUTE=SqsonceKey")...)
	if code != 0 || !strings.Contains(squash(out), `warn ingest keys sources "shop", "crm" send to `+e.queue.URL+` with one key prefix ""`) ||
		!strings.Contains(squash(out), "ok ingest shop POST /shop, verify stripe (1 secrets), key <the body's /id>") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if strings.Contains(out, `"github"`) {
		t.Errorf("github, with its own prefix, named as sharing:\n%s", out)
	}
}
