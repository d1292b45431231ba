package ingest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ingest"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// receiver is one test's running Server: its queue, its address and how to
// stop it.
type receiver struct {
	t      *testing.T
	queue  sqstest.Queue
	client *sqs.Client // straight to the server, for the test's own reads
	srv    *ingest.Server
	url    string
	stop   func() error
}

type setupOptions struct {
	fifo    bool
	sources func(queueURL string) []ingest.Source
	edit    func(*ingest.Config)
	rt      http.RoundTripper // the receiver's SQS transport; nil: straight
}

func setup(t *testing.T, o setupOptions) *receiver {
	t.Helper()
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{FIFO: o.fifo})
	cfg := ingest.Config{Sources: o.sources(q.URL), Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	if o.edit != nil {
		o.edit(&cfg)
	}
	srvClient := client
	if o.rt != nil {
		srvClient = sqstest.NewClient(t, o.rt)
	}
	srv, err := ingest.New(cfg, srvClient)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	deadline := time.Now().Add(10 * time.Second)
	for !srv.Health().Ready {
		select {
		case err := <-done:
			t.Fatalf("Run: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the receiver was not ready within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return 30s after its context ended")
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return &receiver{t: t, queue: q, client: client, srv: srv, url: "http://" + ln.Addr().String(), stop: stop}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// reply is an answer of the receiver.
type reply struct {
	code       int
	retryAfter string
	Status     string `json:"status"`
	Key        string `json:"key"`
	MessageID  string `json:"message_id"`
	Error      string `json:"error"`
}

var httpClient = &http.Client{Transport: loopback.Transport(), Timeout: 30 * time.Second}

func (r *receiver) post(path string, h http.Header, body []byte) reply {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.url+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a reply
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &a); err != nil {
		r.t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, data)
	}
	a.code, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	return a
}

// drain receives everything in the queue.
func (r *receiver) drain(want int) []types.Message {
	r.t.Helper()
	return sqstest.Drain(r.t, r.client, r.queue.URL, want, 3*time.Second)
}

func (r *receiver) empty() {
	r.t.Helper()
	if visible, inflight := sqstest.Count(r.t, r.client, r.queue.URL); visible+inflight != 0 {
		r.t.Fatalf("the queue holds %d messages, want none", visible+inflight)
	}
}

func attrOf(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

const ghSecret = "gh webhook secret 1"

func githubSource(queueURL string) []ingest.Source {
	return []ingest.Source{{
		Name: "github", Path: "/hooks/github", QueueURL: queueURL,
		Verify: ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets(ghSecret)},
	}}
}

// githubKey is the key of a GitHub source named github: a SHA-256 of the
// body, after the source's name.
func githubKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "github:sha256:" + hex.EncodeToString(sum[:])
}

func githubHeader(delivery string, body []byte) http.Header {
	return header("X-GitHub-Delivery", delivery, "X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac([]byte(ghSecret), string(body))),
		"Content-Type", "application/json")
}

func TestServer_GitHub(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{sources: githubSource})
	payload := []byte(`{"action":"opened",  "number": 7}` + "\n")
	before := time.Now().UTC()
	a := r.post("/hooks/github", githubHeader("72d3162e-cc78-11e3-81ab-4c9367dc0958", payload), payload)
	if a.code != http.StatusOK || a.Status != "accepted" || a.Key != githubKey(payload) || a.MessageID == "" {
		t.Fatalf("answer %+v", a)
	}
	msgs := r.drain(1)
	if len(msgs) != 1 {
		t.Fatalf("%d messages in the queue", len(msgs))
	}
	m := msgs[0]
	if aws.ToString(m.Body) != string(payload) || aws.ToString(m.MessageId) != a.MessageID {
		t.Errorf("message %q (%s), want the body byte for byte (%s)", aws.ToString(m.Body), aws.ToString(m.MessageId), a.MessageID)
	}
	at, err := time.Parse(time.RFC3339Nano, attrOf(m, ingest.AttrReceivedAt))
	if attrOf(m, ingest.AttrKey) != a.Key || attrOf(m, ingest.AttrSource) != "github" || err != nil || at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("attributes %v", m.MessageAttributes)
	}
	if d := attrOf(m, ingest.AttrDeliveryID); d != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Errorf("delivery id attribute %q", d)
	}

	// GitHub signs the body, not X-GitHub-Delivery: the key needs no
	// delivery id, and a delivery id SQS cannot carry is left out.
	payload = []byte(`{"action":"closed","number":7}`)
	h := githubHeader("", payload)
	h.Set("X-GitHub-Delivery", "d\xffe")
	if a := r.post("/hooks/github", h, payload); a.code != 200 || a.Key != githubKey(payload) {
		t.Fatalf("without a usable delivery id: %+v", a)
	}
	if msgs := r.drain(1); len(msgs) != 1 || attrOf(msgs[0], ingest.AttrDeliveryID) != "" {
		t.Fatalf("queue %v, want one message without a delivery id", msgs)
	}
}

// A captured GitHub request re-sent with other delivery ids is the same
// operation: GitHub signs only the body, so the key comes from the body,
// and every copy carries one key (the worker runs it once). The delivery
// ids travel for support only.
func TestServer_GitHubCapturedRequest(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "Standard", true: "FIFO"}[fifo], func(t *testing.T) {
			t.Parallel()
			r := setup(t, setupOptions{fifo: fifo, sources: githubSource})
			payload := []byte(`{"action":"opened","pull_request":{"number":7}}`)
			captured := githubHeader("72d3162e-cc78-11e3-81ab-4c9367dc0958", payload)
			ids := []string{"72d3162e-cc78-11e3-81ab-4c9367dc0958", "attacker-1", "attacker-2"}
			answered := map[string]bool{}
			for _, id := range ids {
				h := captured.Clone()
				h.Set("X-GitHub-Delivery", id)
				a := r.post("/hooks/github", h, payload)
				if a.code != 200 {
					t.Fatalf("delivery %s: %+v, want 200", id, a)
				}
				answered[a.Key] = true
			}
			if len(answered) != 1 || !answered[githubKey(payload)] {
				t.Fatalf("answered with the keys %v, want only %s", answered, githubKey(payload))
			}
			want := len(ids)
			if fifo {
				want = 1 // SQS drops the copies: one deduplication id
			}
			msgs := r.drain(want + 1)
			if len(msgs) != want {
				t.Fatalf("%d messages, want %d", len(msgs), want)
			}
			keys, deliveries := map[string]bool{}, map[string]bool{}
			for _, m := range msgs {
				keys[attrOf(m, ingest.AttrKey)] = true
				deliveries[attrOf(m, ingest.AttrDeliveryID)] = true
			}
			if len(keys) != 1 || !keys[githubKey(payload)] {
				t.Errorf("keys %v, want only %s", keys, githubKey(payload))
			}
			if !fifo && len(deliveries) != len(ids) {
				t.Errorf("delivery ids %v, want each of %v", deliveries, ids)
			}
		})
	}
}

func TestServer_Rejects(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{
		sources: func(q string) []ingest.Source {
			return append(githubSource(q),
				ingest.Source{Name: "orders", Path: "/hooks/orders", QueueURL: q, KeyPointer: "/order/id",
					Verify: ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("orders-secret")}},
				ingest.Source{Name: "stripe", Path: "/hooks/stripe", QueueURL: q,
					Verify: ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret)}})
		},
		edit: func(c *ingest.Config) { c.MaxBody = 1024 },
	})
	signed := func(b string) http.Header {
		return header("X-Signature", hex.EncodeToString(mac([]byte("orders-secret"), b)))
	}
	good := `{"order":{"id":"o-1"}}`
	big := `{"order":{"id":"o-2","pad":"` + strings.Repeat("x", 1100) + `"}}`
	binary := "{\"order\":{\"id\":\"o-3\",\"note\":\"a\x01b\"}}"
	stale := time.Now().Add(-10 * time.Minute).Unix()
	stripeBody := []byte(`{"id":"evt_1"}`)
	cases := []struct {
		name    string
		method  string
		path    string
		h       http.Header
		body    string
		code    int
		errPart string
	}{
		{"BadSignature", "", "/hooks/github", header("X-GitHub-Delivery", "d-1", "X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64)), `{}`, 401, "did not match"},
		{"NoSignature", "", "/hooks/github", header("X-GitHub-Delivery", "d-1"), `{}`, 401, "no X-Hub-Signature-256"},
		{"StaleTimestamp", "", "/hooks/stripe", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", stale, stripeSig(stripeSecret, stale, stripeBody))), string(stripeBody), 401, "old"},
		{"NoKeyInBody", "", "/hooks/orders", signed(`{"order":{}}`), `{"order":{}}`, 400, `pointer /order/id: no field`},
		{"InvalidJSON", "", "/hooks/orders", signed(`{"order":`), `{"order":`, 400, "not valid JSON"},
		{"TooLarge", "", "/hooks/orders", signed(big), big, 413, "larger than 1024 bytes"},
		{"NotSQSText", "", "/hooks/orders", signed(binary), binary, 400, "SQS cannot carry"},
		{"UnknownPath", "", "/hooks/nobody", nil, good, 404, "no source"},
		{"NotPost", http.MethodGet, "/hooks/orders", nil, "", 405, "only POST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, r.url+tc.path, strings.NewReader(tc.body))
			for k, vs := range tc.h {
				req.Header[k] = vs
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(data), tc.errPart) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, data, tc.code, tc.errPart)
			}
		})
	}
	if a := r.post("/hooks/orders", signed(good), []byte(good)); a.code != 200 || a.Key != "orders:o-1" {
		t.Fatalf("the good one: %+v", a)
	}
	if msgs := r.drain(1); len(msgs) != 1 || attrOf(msgs[0], ingest.AttrKey) != "orders:o-1" {
		t.Fatalf("queue %v, want only orders:o-1", msgs)
	}
	if s := r.srv.Stats(); s.Accepted != 1 || s.Unverified != 3 || s.Keyless != 2 || s.NotFound != 1 {
		t.Errorf("stats %+v", s)
	}
}

// On a FIFO queue the key is the deduplication id: a sender's retries,
// concurrent or not, leave one message, and every one of them is answered
// 200 (a duplicate is a success).
func TestServer_FIFODuplicates(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{fifo: true, sources: func(q string) []ingest.Source {
		return []ingest.Source{{
			Name: "standard", Path: "/hooks/standard", QueueURL: q, GroupPointer: "/customer",
			Verify: ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret)},
		}}
	}})
	key := standardKey(t, standardSecret)
	send := func(id, body string) reply {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		return r.post("/hooks/standard", header("webhook-id", id, "webhook-timestamp", ts,
			"webhook-signature", standardSig(key, id, ts, []byte(body))), []byte(body))
	}
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 6 {
		wg.Go(func() {
			body := `{"customer":"c-1","n":1}`
			if i%3 == 2 {
				body = `{"customer":"c-2","n":2}`
				if a := send("msg_2", body); a.code == 200 && a.Key == "standard:msg_2" {
					ok.Add(1)
				}
				return
			}
			if a := send("msg_1", body); a.code == 200 && a.Key == "standard:msg_1" {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 6 {
		t.Fatalf("%d of 6 answered 200", ok.Load())
	}
	msgs := r.drain(2)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want one per event id", len(msgs))
	}
	for _, m := range msgs {
		k, g := attrOf(m, ingest.AttrKey), m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		d := m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
		if (k == "standard:msg_1" && g != "c-1") || (k == "standard:msg_2" && g != "c-2") || d != k {
			t.Errorf("key %s: group %q, deduplication id %q", k, g, d)
		}
	}
	if a := send("msg_3", `{"n":3}`); a.code != 400 || !strings.Contains(a.Error, "no message group") {
		t.Errorf("without a group: %+v", a)
	}
}

// A sender without event ids can opt into a hash of the body.
func TestServer_HashMissing(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{sources: func(q string) []ingest.Source {
		return []ingest.Source{{Name: "plain", Path: "/in", QueueURL: q, KeyHeader: "X-Event-Id", HashMissing: true,
			Verify: ingest.VerifyConfig{Scheme: ingest.SchemeNone}}}
	}})
	a := r.post("/in", nil, []byte(`{"x":1}`))
	b := r.post("/in", header("X-Event-Id", "e-9"), []byte(`{"x":1}`))
	if a.code != 200 || !strings.HasPrefix(a.Key, "plain:sha256:") || b.code != 200 || b.Key != "plain:e-9" {
		t.Fatalf("answers %+v, %+v", a, b)
	}
}

// A send that SQS does not accept is answered 503 with Retry-After, so
// that the sender tries again; nothing is answered 2xx that SQS does not
// hold.
func TestServer_SendFails(t *testing.T) {
	t.Parallel()
	for _, kind := range []sqstest.Kind{sqstest.Throttle, sqstest.ServerError, sqstest.Timeout, sqstest.Reset} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			faults := sqstest.NewFaults(1, nil)
			r := setup(t, setupOptions{rt: faults, sources: githubSource, edit: func(c *ingest.Config) { c.RequestTimeout = 2 * time.Second }})
			faults.Set("SendMessage", rateOf(kind))
			payload := []byte(`{"n":1}`)
			start := time.Now()
			a := r.post("/hooks/github", githubHeader("d-1", payload), payload)
			if a.code != http.StatusServiceUnavailable || a.retryAfter != "5" || a.Status != "unavailable" {
				t.Fatalf("answer %+v", a)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("answered after %v", took)
			}
			r.empty()
			faults.Set("SendMessage", sqstest.Rates{})
			if a := r.post("/hooks/github", githubHeader("d-1", payload), payload); a.code != 200 {
				t.Fatalf("the retry: %+v", a)
			}
			if msgs := r.drain(1); len(msgs) != 1 {
				t.Fatalf("%d messages after the retry", len(msgs))
			}
		})
	}
}

func rateOf(k sqstest.Kind) sqstest.Rates {
	switch k {
	case sqstest.Throttle:
		return sqstest.Rates{Throttle: 1}
	case sqstest.ServerError:
		return sqstest.Rates{ServerError: 1}
	case sqstest.Timeout:
		return sqstest.Rates{Timeout: 1}
	case sqstest.Reset:
		return sqstest.Rates{Reset: 1}
	}
	return sqstest.Rates{LostAck: 1}
}

// holdSends holds every SendMessage until released.
type holdSends struct {
	base    http.RoundTripper
	held    chan struct{} // one value per send that waits
	release chan struct{} // closed to let them go
}

func newHoldSends() *holdSends {
	return &holdSends{base: loopback.Transport(), held: make(chan struct{}, 64), release: make(chan struct{})}
}

func (h *holdSends) RoundTrip(req *http.Request) (*http.Response, error) {
	if sqstest.Operation(req) == "SendMessage" {
		h.held <- struct{}{}
		select {
		case <-h.release:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return h.base.RoundTrip(req)
}

// Beyond MaxInFlight a request is answered 503 at once, without reading or
// sending anything.
func TestServer_MaxInFlight(t *testing.T) {
	t.Parallel()
	hold := newHoldSends()
	r := setup(t, setupOptions{rt: hold, sources: githubSource, edit: func(c *ingest.Config) { c.MaxInFlight = 1 }})
	payload := []byte(`{"n":1}`)
	first := make(chan reply, 1)
	go func() { first <- r.post("/hooks/github", githubHeader("d-1", payload), payload) }()
	<-hold.held
	a := r.post("/hooks/github", githubHeader("d-2", payload), payload)
	if a.code != http.StatusServiceUnavailable || !strings.Contains(a.Error, "too many requests") {
		t.Fatalf("the second: %+v", a)
	}
	close(hold.release)
	if a := <-first; a.code != 200 {
		t.Fatalf("the first: %+v", a)
	}
	if msgs := r.drain(1); len(msgs) != 1 || attrOf(msgs[0], ingest.AttrDeliveryID) != "d-1" {
		t.Fatalf("queue %v", msgs)
	}
}

// A stop lets the requests in flight finish and be answered, and takes no
// new ones.
func TestServer_StopFinishesRequestsInFlight(t *testing.T) {
	t.Parallel()
	hold := newHoldSends()
	r := setup(t, setupOptions{rt: hold, sources: githubSource})
	payload := []byte(`{"n":1}`)
	first := make(chan reply, 1)
	go func() { first <- r.post("/hooks/github", githubHeader("d-1", payload), payload) }()
	<-hold.held
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	deadline := time.Now().Add(5 * time.Second)
	for !r.srv.Health().Draining && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := httpClient.Post(r.url+"/hooks/github", "application/json", strings.NewReader("{}")); err == nil {
		t.Error("a new request was taken during the stop")
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned with a request in flight: %v", err)
	default:
	}
	close(hold.release)
	if a := <-first; a.code != 200 {
		t.Fatalf("the request in flight: %+v", a)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if msgs := r.drain(1); len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
}

func TestNew_Invalid(t *testing.T) {
	t.Parallel()
	client := sqstest.NewClient(t, nil)
	gh := ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets(ghSecret)}
	hm := ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("s")}
	std := ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret)}
	cases := map[string]struct {
		sources []ingest.Source
		want    string
	}{
		"NoSource":      {nil, "no source"},
		"NoName":        {[]ingest.Source{{Path: "/a", QueueURL: "q", Verify: gh}}, "a name is required"},
		"BadPath":       {[]ingest.Source{{Name: "a", Path: "a", QueueURL: "q", Verify: gh}}, "must start with /"},
		"NoQueue":       {[]ingest.Source{{Name: "a", Path: "/a", Verify: gh}}, "a queue URL is required"},
		"TwoKeys":       {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh, KeyHeader: "X", KeyPointer: "/id"}}, "not both"},
		"NoKeyForNone":  {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: ingest.VerifyConfig{Scheme: ingest.SchemeNone}}}, "set key_header or key_pointer"},
		"BadPointer":    {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh, KeyPointer: "id"}}, "key_pointer"},
		"BadScheme":     {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: ingest.VerifyConfig{Scheme: "md5"}}}, "unknown verify scheme"},
		"SamePath":      {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh}, {Name: "b", Path: "/a", QueueURL: "q", Verify: gh}}, "already source"},
		"SameName":      {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh}, {Name: "a", Path: "/b", QueueURL: "q", Verify: gh}}, "used twice"},
		"BadHeaderName": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh, KeyHeader: "X Id"}}, "not a valid header name"},

		// A key from a header no signature covers.
		"GitHubKeyHeader": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh, KeyHeader: "X-GitHub-Delivery"}},
			"key_header X-GitHub-Delivery: verify github signs only the body (X-Hub-Signature-256), not this header: anyone holding one signed request could re-send it under other ids"},
		"HMACKeyHeader": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: hm, KeyHeader: "X-Event-Id"}},
			`verify hmac-sha256 signs only the body, not this header: anyone holding one signed request could re-send it under other ids, each taken as a new event; set key_pointer to an id in the body, or leave key_header empty with on_missing = "hash"`},
		"StripeKeyHeader": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret)}, KeyHeader: "X-Event-Id"}},
			"verify stripe signs only its timestamp and the body (Stripe-Signature), not this header"},
		"StandardOtherHeader": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: std, KeyHeader: "X-Event-Id"}},
			"verify standard signs webhook-id (or svix-id), webhook-timestamp and the body, not this header"},
		"StandardSvixID": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: std, KeyHeader: "svix-id"}}, "key_header svix-id: verify standard signs"},
		"NoKeyForHMAC": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: hm}},
			`verify hmac-sha256 has no event id of its own: set key_pointer to the id in the body, or on_missing = "hash"`},

		// Key prefixes.
		"LongPrefix":    {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh, KeyPrefix: ptr(strings.Repeat("p", 129))}}, "key_prefix of 129 bytes: at most 128"},
		"ControlPrefix": {[]ingest.Source{{Name: "a", Path: "/a", QueueURL: "q", Verify: gh, KeyPrefix: ptr("a\tb:")}}, `key_prefix "a\tb:": must be text that SQS can carry, without control characters`},
		"LongName":      {[]ingest.Source{{Name: strings.Repeat("n", 128), Path: "/a", QueueURL: "q", Verify: gh}}, "the key prefix, the name and a colon when key_prefix is not set, is longer than 128 bytes"},
	}
	for name, tc := range cases {
		_, err := ingest.New(ingest.Config{Sources: tc.sources}, client)
		if !errors.Is(err, ingest.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig with %q", name, err, tc.want)
		}
	}
	// A group pointer is for FIFO queues: Run says so before serving.
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{})
	srv, err := ingest.New(ingest.Config{Sources: []ingest.Source{{Name: "a", Path: "/a", QueueURL: q.URL, Verify: gh, GroupPointer: "/c"}}}, client)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := srv.Run(context.Background(), ln); !errors.Is(err, ingest.ErrInvalidConfig) || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("Run with a group pointer on a standard queue: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Where each scheme's key comes from, and what is accepted.
func TestSource_KeyFormat(t *testing.T) {
	t.Parallel()
	gh := ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets(ghSecret)}
	hm := ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("s")}
	std := ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret)}
	stripe := ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret)}
	none := ingest.VerifyConfig{Scheme: ingest.SchemeNone}
	cases := []struct {
		src  ingest.Source
		want string
	}{
		{ingest.Source{Name: "github", Verify: gh}, "github:sha256:<SHA-256 of the body>"},
		{ingest.Source{Name: "github", Verify: gh, KeyPointer: "/hook_id", KeyPrefix: ptr("gh/")}, "gh/<the body's /hook_id>"},
		{ingest.Source{Name: "stripe", Verify: stripe}, "stripe:<the body's /id>"},
		{ingest.Source{Name: "stripe", Verify: stripe, KeyPrefix: ptr("")}, "<the body's /id>"},
		{ingest.Source{Name: "svix", Verify: std}, "svix:<the signed webhook-id>"},
		{ingest.Source{Name: "svix", Verify: std, KeyHeader: "Webhook-Id"}, "svix:<the signed webhook-id>"},
		{ingest.Source{Name: "orders", Verify: hm, KeyPointer: "/order/id", HashMissing: true}, "orders:<the body's /order/id>, else orders:sha256:<SHA-256 of the body>"},
		{ingest.Source{Name: "orders", Verify: hm, HashMissing: true}, "orders:sha256:<SHA-256 of the body>"},
		{ingest.Source{Name: "plain", Verify: none, KeyHeader: "X-Event-Id"}, "plain:<the X-Event-Id header, not signed>"},
		{ingest.Source{Name: "plain", Verify: none, HashMissing: true}, "plain:sha256:<SHA-256 of the body>"},
	}
	for _, tc := range cases {
		tc.src.Path, tc.src.QueueURL = "/p", "q"
		got, err := tc.src.KeyFormat()
		if err != nil || got != tc.want {
			t.Errorf("%s %s: KeyFormat = %q, %v; want %q", tc.src.Name, tc.src.Verify.Scheme, got, err, tc.want)
		}
	}
	if _, err := (ingest.Source{Name: "x", Path: "/p", QueueURL: "q", Verify: gh, KeyHeader: "X-GitHub-Delivery"}).KeyFormat(); !errors.Is(err, ingest.ErrInvalidConfig) {
		t.Errorf("KeyFormat of a refused source: %v", err)
	}
}

// Stripe signs its timestamp and the body, where the id is; Standard
// Webhooks sign the id, the timestamp and the body. A captured request
// re-sent as it is gets the same key; re-sent with another id, it does not
// verify.
func TestServer_SignedIDs(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{sources: func(q string) []ingest.Source {
		return []ingest.Source{
			{Name: "stripe", Path: "/stripe", QueueURL: q, Verify: ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret)}},
			{Name: "std", Path: "/std", QueueURL: q, Verify: ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret)}},
		}
	}})
	now := time.Now().Unix()
	stripeBody := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)
	captured := header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeSig(stripeSecret, now, stripeBody)))
	for range 2 {
		if a := r.post("/stripe", captured, stripeBody); a.code != 200 || a.Key != "stripe:evt_1" {
			t.Fatalf("stripe: %+v", a)
		}
	}
	if a := r.post("/stripe", captured, []byte(`{"id":"evt_2","type":"charge.succeeded"}`)); a.code != 401 {
		t.Errorf("stripe, another id in the body: %+v", a)
	}
	later := header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now+1, stripeSig(stripeSecret, now, stripeBody)))
	if a := r.post("/stripe", later, stripeBody); a.code != 401 {
		t.Errorf("stripe, another timestamp: %+v", a)
	}

	key := standardKey(t, standardSecret)
	ts := strconv.FormatInt(now, 10)
	stdBody := []byte(`{"type":"invoice.paid"}`)
	sig := standardSig(key, "msg_1", ts, stdBody)
	if a := r.post("/std", header("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", sig), stdBody); a.code != 200 || a.Key != "std:msg_1" {
		t.Fatalf("standard: %+v", a)
	}
	if a := r.post("/std", header("webhook-id", "attacker-1", "webhook-timestamp", ts, "webhook-signature", sig), stdBody); a.code != 401 {
		t.Errorf("standard, another webhook-id: %+v", a)
	}
	// A svix-id beside the signed webhook-id is not the key.
	if a := r.post("/std", header("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", sig, "svix-id", "attacker-2"), stdBody); a.code != 200 || a.Key != "std:msg_1" {
		t.Errorf("standard with a svix-id beside: %+v", a)
	}
	svix := standardSig(key, "msg_9", ts, stdBody)
	if a := r.post("/std", header("svix-id", "msg_9", "svix-timestamp", ts, "svix-signature", svix), stdBody); a.code != 200 || a.Key != "std:msg_9" {
		t.Errorf("svix: %+v", a)
	}
	msgs := r.drain(6)
	keys := map[string]int{}
	for _, m := range msgs {
		keys[attrOf(m, ingest.AttrKey)]++
	}
	if want := map[string]int{"stripe:evt_1": 2, "std:msg_1": 2, "std:msg_9": 1}; !maps.Equal(keys, want) {
		t.Errorf("keys in the queue %v, want %v", keys, want)
	}
}

// Two senders that both count their events from 1, on one queue: each
// source's keys are its own, so both events are sent, and on a FIFO queue
// neither is dropped as the other's duplicate.
func TestServer_SourcesKeptApart(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "Standard", true: "FIFO"}[fifo], func(t *testing.T) {
			t.Parallel()
			r := setup(t, setupOptions{fifo: fifo, sources: func(q string) []ingest.Source {
				return []ingest.Source{
					{Name: "shop", Path: "/shop", QueueURL: q, KeyPointer: "/id", Verify: ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("shop-secret")}},
					{Name: "crm", Path: "/crm", QueueURL: q, KeyPointer: "/id", Verify: ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("crm-secret")}},
				}
			}})
			shop, crm := `{"id":"1","order":"o-17"}`, `{"id":"1","contact":"c-4"}`
			a := r.post("/shop", header("X-Signature", hex.EncodeToString(mac([]byte("shop-secret"), shop))), []byte(shop))
			b := r.post("/crm", header("X-Signature", hex.EncodeToString(mac([]byte("crm-secret"), crm))), []byte(crm))
			if a.code != 200 || b.code != 200 || a.Key == b.Key {
				t.Fatalf("answers %+v, %+v: want 200 with two keys", a, b)
			}
			msgs := r.drain(3)
			got := map[string]string{}
			for _, m := range msgs {
				got[attrOf(m, ingest.AttrKey)] = aws.ToString(m.Body)
				if fifo && m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)] != attrOf(m, ingest.AttrKey) {
					t.Errorf("deduplication id %q, key %q", m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)], attrOf(m, ingest.AttrKey))
				}
			}
			if len(msgs) != 2 || got[a.Key] != shop || got[b.Key] != crm {
				t.Errorf("queue %v, want both events under their own keys", got)
			}
		})
	}
}

// An explicit empty prefix keeps the bare event id; sources on one queue
// with one explicit prefix share a key space, and that is said.
func TestConfig_SharedKeySpaces(t *testing.T) {
	t.Parallel()
	hm := ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("s")}
	src := func(name, queue string, prefix *string) ingest.Source {
		return ingest.Source{Name: name, Path: "/" + name, QueueURL: queue, KeyPointer: "/id", KeyPrefix: prefix, Verify: hm}
	}
	cfg := ingest.Config{Sources: []ingest.Source{
		src("a", "q1", nil), src("b", "q1", nil), // their names
		src("c", "q1", ptr("")), src("d", "q1", ptr("")), src("e", "q2", ptr("")), // c and d share
		src("f", "q1", ptr("b:")), // f takes b's
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got := cfg.SharedKeySpaces()
	want := []string{
		`sources "b", "f" send to q1 with one key prefix "b:"`,
		`sources "c", "d" send to q1 with one key prefix ""`,
	}
	if len(got) != len(want) {
		t.Fatalf("SharedKeySpaces = %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("SharedKeySpaces[%d] = %q, want it to start %q", i, got[i], want[i])
		}
	}
}

// An event id that SQS cannot carry in an attribute (U+FFFF, written as a
// JSON escape in a body SQS does carry) is the sender's to fix: 400, not a
// 503 that the sender would retry for ever.
func TestServer_KeyNotSQSText(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{sources: func(q string) []ingest.Source {
		return []ingest.Source{{Name: "orders", Path: "/orders", QueueURL: q, KeyPointer: "/id",
			Verify: ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature", Secrets: secrets("s")}}}
	}})
	b := `{"id":"a\uffffb"}`
	a := r.post("/orders", header("X-Signature", hex.EncodeToString(mac([]byte("s"), b))), []byte(b))
	if a.code != 400 || !strings.Contains(a.Error, "the event id has a character that SQS cannot carry in an attribute (at byte 8 of the key)") {
		t.Fatalf("answer %+v, want 400", a)
	}
	r.empty()
}

// With tracing off, the event's trace context is the request's, as parsed
// and validated, formatted anew: a later version's extra fields and any
// white space or control character in it do not reach the queue, where an
// http handler would refuse them in a header.
func TestServer_TraceContextAsParsed(t *testing.T) {
	t.Parallel()
	r := setup(t, setupOptions{sources: githubSource})
	payload := []byte(`{"action":"opened"}`)
	h := githubHeader("d-1", payload)
	h.Set("Traceparent", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-later\tmore")
	h.Set("Tracestate", "vendor=abc , other=1\t")
	if a := r.post("/hooks/github", h, payload); a.code != http.StatusOK {
		t.Fatalf("answer %+v", a)
	}
	m := r.drain(1)[0]
	if tp, ts := attrOf(m, "traceparent"), attrOf(m, "tracestate"); tp != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || ts != "vendor=abc,other=1" {
		t.Fatalf("traceparent %q, tracestate %q: want them as parsed, formatted anew", tp, ts)
	}
}
