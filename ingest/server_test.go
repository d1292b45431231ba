package ingest_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	if a.code != http.StatusOK || a.Status != "accepted" || a.Key != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || a.MessageID == "" {
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
		{"NoDeliveryHeader", "", "/hooks/github", githubHeader("", []byte(`{}`)), `{}`, 400, "no X-GitHub-Delivery header"},
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
	if a := r.post("/hooks/orders", signed(good), []byte(good)); a.code != 200 || a.Key != "o-1" {
		t.Fatalf("the good one: %+v", a)
	}
	if msgs := r.drain(1); len(msgs) != 1 || attrOf(msgs[0], ingest.AttrKey) != "o-1" {
		t.Fatalf("queue %v, want only o-1", msgs)
	}
	if s := r.srv.Stats(); s.Accepted != 1 || s.Unverified != 3 || s.Keyless != 3 || s.NotFound != 1 {
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
				if a := send("msg_2", body); a.code == 200 && a.Key == "msg_2" {
					ok.Add(1)
				}
				return
			}
			if a := send("msg_1", body); a.code == 200 && a.Key == "msg_1" {
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
		if (k == "msg_1" && g != "c-1") || (k == "msg_2" && g != "c-2") || d != k {
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
	if a.code != 200 || !strings.HasPrefix(a.Key, "sha256:") || b.code != 200 || b.Key != "e-9" {
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
	if msgs := r.drain(1); len(msgs) != 1 || attrOf(msgs[0], ingest.AttrKey) != "d-1" {
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
