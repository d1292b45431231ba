package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/awsfault"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

func TestParseS3Pointer(t *testing.T) {
	t.Parallel()
	p, err := worker.ParseS3Pointer([]byte(`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k/1"}]`))
	if err != nil || p != (worker.S3Pointer{Bucket: "b", Key: "k/1"}) {
		t.Fatalf("%+v, %v", p, err)
	}
	if back, err := worker.ParseS3Pointer([]byte(p.Body())); err != nil || back != p {
		t.Fatalf("Body does not read back: %s: %+v, %v", p.Body(), back, err)
	}
	for body, want := range map[string]string{
		`{"id":"x"}`: "not a JSON array",
		`["software.amazon.payloadoffloading.PayloadS3Pointer"]`:                                    "of 1 elements, not 2",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"},1]`: "of 3 elements",
		`["com.example.Other",{"s3BucketName":"b","s3Key":"k"}]`:                                    "first element is not",
		`[1,{"s3BucketName":"b","s3Key":"k"}]`:                                                      "first element is not",
		`["software.amazon.payloadoffloading.PayloadS3Pointer","b/k"]`:                              "second element is not an object",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":1,"s3Key":"k"}]`:     "second element is not an object",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]`:                      "no s3BucketName",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":""}]`:    "no s3Key",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",null]`:                               "second element is not an object",
	} {
		if _, err := worker.ParseS3Pointer([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// s3Bundle is a test's queue, ledger and bucket, and an S3 client for the
// worker behind a transport that can inject faults.
type s3Bundle struct {
	*bundle
	s3     *s3.Client // the test's own: no faults
	bucket string
	faults *awsfault.Transport
	fault  atomic.Value // of awsfault.Kind: the fault of the next faulted requests
	left   atomic.Int64 // how many requests get it
	seen   s3Requests   // every request of the worker's S3 client
}

// s3Requests records the method and path of each request that passes.
type s3Requests struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	reqs []string
}

func (r *s3Requests) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Method+" "+req.URL.Path)
	r.mu.Unlock()
	return r.rt.RoundTrip(req)
}

// to returns the requests whose path is in bucket.
func (r *s3Requests) to(bucket string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.reqs {
		if _, path, _ := strings.Cut(q, " "); path == "/"+bucket || strings.HasPrefix(path, "/"+bucket+"/") {
			out = append(out, q)
		}
	}
	return out
}

func setupS3(t *testing.T, o options) *s3Bundle {
	t.Helper()
	b := &s3Bundle{bundle: setup(t, o), s3: sqstest.NewS3Client(t, nil)}
	b.bucket = sqstest.CreateBucket(t, b.s3)
	b.seen.rt = loopback.Transport()
	b.faults = awsfault.New(&b.seen, sqstest.S3Errors, func(string) awsfault.Kind {
		if b.left.Add(-1) >= 0 {
			return b.fault.Load().(awsfault.Kind)
		}
		return ""
	})
	return b
}

// inject gives the next n requests of the worker's S3 client fault k.
func (b *s3Bundle) inject(k awsfault.Kind, n int) {
	b.fault.Store(k)
	b.left.Store(int64(n))
}

func (b *s3Bundle) config() worker.Config {
	cfg := b.bundle.config()
	cfg.S3 = sqstest.NewS3Client(b.t, b.faults)
	cfg.Buckets = []string{b.bucket}
	return cfg
}

// sendPointer puts payload into the bucket under key and sends the
// Extended Client's pointer to it.
func (b *s3Bundle) sendPointer(key, payload string, attr string) {
	b.t.Helper()
	sqstest.PutObject(b.t, b.s3, b.bucket, key, []byte(payload))
	b.sendPointerOnly(key, len(payload), attr)
}

func (b *s3Bundle) sendPointerOnly(key string, size int, attr string) {
	b.t.Helper()
	b.send(worker.S3Pointer{Bucket: b.bucket, Key: key}.Body(), func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			attr: {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(size))},
		}
	})
}

// dlq waits for n messages in the dead-letter queue and returns them.
func (b *s3Bundle) dlq(n int) []types.Message {
	b.t.Helper()
	msgs := sqstest.Drain(b.t, b.client, b.queue.DLQURL, n, 15*time.Second)
	if len(msgs) != n {
		b.t.Fatalf("%d messages in the dead-letter queue, want %d", len(msgs), n)
	}
	return msgs
}

func reason(m types.Message) string {
	return aws.ToString(m.MessageAttributes[worker.AttrReason].StringValue)
}

func TestWorker_S3Payloads(t *testing.T) {
	t.Parallel()
	big := `{"id":"order-1","blob":"` + strings.Repeat("y", 300<<10) + `"}`

	t.Run("PointerRunsOnceWithTheObject", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		var bodies sync.Map
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			bodies.Store(m.Key, string(m.Body))
			return nil
		}))
		b.sendPointer("k/1", big, worker.AttrExtendedPayloadSize)
		b.sendPointer("k/legacy", `{"id":"order-2"}`, worker.AttrLegacyPayloadSize)
		b.waitEmpty(20 * time.Second)
		// A copy of the first pointer, and another object of the same
		// content: both the same operation, suppressed.
		b.sendPointerOnly("k/1", len(big), worker.AttrExtendedPayloadSize)
		b.sendPointer("k/1-again", big, worker.AttrExtendedPayloadSize)
		b.waitEmpty(20 * time.Second)
		s := stop()
		if n := b.runs.count("order-1"); n != 1 {
			t.Errorf("order-1 ran %d times; runs %v", n, b.runs.counts())
		}
		if n := b.runs.count("order-2"); n != 1 {
			t.Errorf("order-2 (SQSLargePayloadSize) ran %d times; runs %v", n, b.runs.counts())
		}
		if got, _ := bodies.Load("order-1"); got != big {
			t.Errorf("the handler's body is %.100q, want the object's %d bytes", got, len(big))
		}
		if rec := b.record("order-1"); rec.State != ledger.StateComplete {
			t.Errorf("record %+v", rec)
		}
		// Each receive reads its pointer's object: a copy received while
		// the other ran here comes back, and is read again.
		if s.PayloadsRead != s.Received || s.Received < 4 || s.Duplicates != 2 || s.Completed != 2 {
			t.Errorf("stats %+v", s)
		}
		if _, ok := sqstest.GetObject(t, b.s3, b.bucket, "k/1"); !ok {
			t.Error("the object was deleted without DeleteObjects")
		}
	})

	t.Run("SameKeyOtherPayloadConflicts", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.sendPointer("a", `{"id":"op","n":1}`, worker.AttrExtendedPayloadSize)
		b.waitEmpty(20 * time.Second)
		b.sendPointer("b", `{"id":"op","n":2}`, worker.AttrExtendedPayloadSize)
		m := b.dlq(1)[0]
		stop()
		if !strings.Contains(reason(m), "conflict") || aws.ToString(m.Body) != (worker.S3Pointer{Bucket: b.bucket, Key: "b"}).Body() {
			t.Errorf("dead-lettered %q with reason %q", aws.ToString(m.Body), reason(m))
		}
		if n := b.runs.count("op"); n != 1 {
			t.Errorf("op ran %d times", n)
		}
	})

	t.Run("MissingObjectDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.sendPointerOnly("never-written", 10, worker.AttrExtendedPayloadSize)
		m := b.dlq(1)[0]
		s := stop()
		if r := reason(m); !strings.Contains(r, "payload unreadable: payload s3://"+b.bucket+"/never-written is gone: no such key") {
			t.Errorf("reason %q", r)
		}
		if a := m.MessageAttributes[worker.AttrExtendedPayloadSize]; aws.ToString(a.StringValue) != "10" || aws.ToString(m.Body) != (worker.S3Pointer{Bucket: b.bucket, Key: "never-written"}).Body() {
			t.Errorf("the copy lost its pointer: %q %+v", aws.ToString(m.Body), m.MessageAttributes)
		}
		if len(b.runs.counts()) != 0 || s.Claimed != 0 || s.PayloadsRejected != 1 {
			t.Errorf("runs %v, stats %+v", b.runs.counts(), s)
		}
		st, err := b.db.Stats(context.Background())
		if err != nil || st.InProgress+st.Complete+st.Failed+st.FailedPermanently != 0 {
			t.Errorf("the ledger holds records: %+v, %v", st, err)
		}
	})

	t.Run("AccessDeniedDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		b.inject(awsfault.Denied, 1)
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.sendPointer("k", `{"id":"denied"}`, worker.AttrExtendedPayloadSize)
		m := b.dlq(1)[0]
		stop()
		if r := reason(m); !strings.Contains(r, "access denied (403): s3:GetObject") {
			t.Errorf("reason %q", r)
		}
		if len(b.runs.counts()) != 0 {
			t.Errorf("runs %v", b.runs.counts())
		}
	})

	t.Run("NotAPointerDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.send(`{"id":"plain"}`, func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]types.MessageAttributeValue{
				worker.AttrExtendedPayloadSize: {DataType: aws.String("Number"), StringValue: aws.String("14")},
			}
		})
		// Without the attribute, a pointer body is a body.
		b.send(`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k","id":"x"}]`)
		m := b.dlq(2)
		stop()
		var reasons []string
		for _, d := range m {
			reasons = append(reasons, reason(d))
		}
		slices.Sort(reasons)
		if !strings.HasPrefix(reasons[0], "no operation key") ||
			!strings.Contains(reasons[1], "payload unreadable: the message has the ExtendedPayloadSize attribute but no S3 pointer: the body is not a JSON array") {
			t.Errorf("reasons %q", reasons)
		}
	})

	t.Run("TransientFailuresRetried", func(t *testing.T) {
		t.Parallel()
		for _, k := range []awsfault.Kind{awsfault.ServerError, awsfault.Throttle, awsfault.Timeout} {
			t.Run(string(k), func(t *testing.T) {
				t.Parallel()
				b := setupS3(t, options{maxReceive: 5})
				// More than the SDK's three attempts: the worker retries
				// the message.
				b.inject(k, 4)
				stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
					b.runs.add(m.Key)
					return nil
				}))
				b.sendPointer("k", `{"id":"flaky"}`, worker.AttrExtendedPayloadSize)
				b.waitEmpty(30 * time.Second)
				s := stop()
				if n := b.runs.count("flaky"); n != 1 {
					t.Errorf("ran %d times", n)
				}
				if s.PayloadsRetried < 1 || s.PayloadsRead != 1 || s.DeadLettered != 0 {
					t.Errorf("stats %+v", s)
				}
				if n := b.faults.Count("", k); n != 4 {
					t.Errorf("%d faults injected", n)
				}
			})
		}
	})

	t.Run("TooLargeDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		cfg := b.config()
		cfg.MaxPayload = 1000
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.sendPointer("big", big, worker.AttrExtendedPayloadSize)
		m := b.dlq(1)[0]
		stop()
		if r := reason(m); !strings.Contains(r, fmt.Sprintf("is %d bytes, more than the limit of 1000 bytes", len(big))) {
			t.Errorf("reason %q", r)
		}
		if len(b.runs.counts()) != 0 {
			t.Errorf("runs %v", b.runs.counts())
		}
	})

	t.Run("DeleteObjectsAfterTheMessage", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		cfg := b.config()
		cfg.DeleteObjects = true
		var objectThere atomic.Bool
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			if m.Key == "fails" {
				return worker.Permanent(errors.New("no"))
			}
			_, ok := sqstest.GetObject(t, b.s3, b.bucket, "del")
			objectThere.Store(ok)
			return nil
		}))
		b.sendPointer("del", `{"id":"del"}`, worker.AttrExtendedPayloadSize)
		b.waitEmpty(20 * time.Second)
		waitFor(t, "the object's delete", func() bool { _, ok := sqstest.GetObject(t, b.s3, b.bucket, "del"); return !ok })
		if !objectThere.Load() {
			t.Error("the object was gone while the handler ran")
		}
		// A duplicate of the completed operation: its object goes too.
		b.sendPointer("dup", `{"id":"del"}`, worker.AttrExtendedPayloadSize)
		b.waitEmpty(20 * time.Second)
		waitFor(t, "the duplicate's object's delete", func() bool { _, ok := sqstest.GetObject(t, b.s3, b.bucket, "dup"); return !ok })
		// A late copy of the first message: its object is gone.
		b.sendPointerOnly("del", 12, worker.AttrExtendedPayloadSize)
		// A dead-lettered message keeps its object: the copy points to it.
		b.sendPointer("failing", `{"id":"fails"}`, worker.AttrExtendedPayloadSize)
		m := b.dlq(2)
		s := stop()
		var reasons []string
		for _, d := range m {
			reasons = append(reasons, reason(d))
		}
		slices.Sort(reasons)
		if !strings.Contains(reasons[0], "failed permanently: ") || !strings.Contains(reasons[1], "/del is gone: no such key") {
			t.Errorf("reasons %q", reasons)
		}
		if _, ok := sqstest.GetObject(t, b.s3, b.bucket, "failing"); !ok {
			t.Error("the object of a dead-lettered message was deleted")
		}
		if n := b.runs.count("del"); n != 1 {
			t.Errorf("del ran %d times", n)
		}
		if s.ObjectsDeleted != 2 || s.ObjectDeleteFailed != 0 {
			t.Errorf("stats %+v", s)
		}
	})

	// The object goes only once SQS said the message was deleted: while
	// the delete fails, the object stays for the message's redelivery.
	t.Run("DeleteObjectsNotWhenTheDeleteFails", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 10})
		f := sqstest.NewFaults(1, nil)
		f.Set("DeleteMessageBatch", sqstest.Rates{ServerError: 1})
		b.client = sqstest.NewClient(t, f)
		cfg := b.config()
		cfg.DeleteObjects = true
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.sendPointer("kept", `{"id":"kept"}`, worker.AttrExtendedPayloadSize)
		waitFor(t, "a failed delete", func() bool { return f.Count("DeleteMessageBatch", sqstest.ServerError) >= 3 })
		time.Sleep(500 * time.Millisecond)
		if _, ok := sqstest.GetObject(t, b.s3, b.bucket, "kept"); !ok {
			t.Fatal("the object was deleted although the message's delete failed")
		}
		f.SetEnabled(false)
		b.waitEmpty(20 * time.Second)
		waitFor(t, "the object's delete", func() bool { _, ok := sqstest.GetObject(t, b.s3, b.bucket, "kept"); return !ok })
		s := stop()
		if n := b.runs.count("kept"); n != 1 || s.Duplicates < 1 || s.ObjectsDeleted != 1 {
			t.Errorf("ran %d times; stats %+v", n, s)
		}
	})

	// A pointer may name any bucket, and the worker reads with its own
	// credentials: only the buckets of Config.Buckets are read from, and
	// deleted from. A message that points elsewhere is dead-lettered, its
	// object neither read nor deleted.
	t.Run("BucketNotAllowed", func(t *testing.T) {
		t.Parallel()
		for name, buckets := range map[string]func(b *s3Bundle) []string{
			"Listed": func(b *s3Bundle) []string { return []string{b.bucket} },
			"None":   func(b *s3Bundle) []string { return nil },
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupS3(t, options{maxReceive: 5})
				other := sqstest.CreateBucket(t, b.s3)
				sqstest.PutObject(t, b.s3, other, "k", []byte(`{"id":"foreign"}`))
				cfg := b.config()
				cfg.DeleteObjects = true
				cfg.Buckets = buckets(b)
				stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
					b.runs.add(m.Key)
					return nil
				}))
				b.send(worker.S3Pointer{Bucket: other, Key: "k"}.Body(), withAttr(worker.AttrExtendedPayloadSize, "16"))
				m := b.dlq(1)[0]
				b.sendPointer("mine", `{"id":"mine"}`, worker.AttrExtendedPayloadSize)
				allowed := len(cfg.Buckets) > 0
				if allowed {
					b.waitEmpty(20 * time.Second)
				} else {
					b.dlq(1)
				}
				s := stop()
				if r := reason(m); !strings.Contains(r, fmt.Sprintf("payload unreadable: payload s3://%s/k: the bucket %q is not one that payloads are read from", other, other)) {
					t.Errorf("reason %q", r)
				}
				if got := b.seen.to(other); len(got) > 0 {
					t.Errorf("requests to the bucket not allowed: %q", got)
				}
				if _, ok := sqstest.GetObject(t, b.s3, other, "k"); !ok {
					t.Error("the object in the bucket not allowed was deleted")
				}
				if b.runs.count("foreign") != 0 || s.PayloadsRejected < 1 {
					t.Errorf("runs %v, stats %+v", b.runs.counts(), s)
				}
				if allowed && b.runs.count("mine") != 1 {
					t.Errorf("the allowed bucket's payload: runs %v", b.runs.counts())
				}
				if !allowed && (b.runs.count("mine") != 0 || len(b.seen.to(b.bucket)) > 0) {
					t.Errorf("with no bucket allowed, a payload was read: runs %v, requests %q", b.runs.counts(), b.seen.to(b.bucket))
				}
			})
		}
	})

	t.Run("AnyBucket", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		other := sqstest.CreateBucket(t, b.s3)
		sqstest.PutObject(t, b.s3, other, "k", []byte(`{"id":"anywhere"}`))
		cfg := b.config()
		cfg.Buckets = []string{worker.AnyBucket}
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			return nil
		}))
		b.send(worker.S3Pointer{Bucket: other, Key: "k"}.Body(), withAttr(worker.AttrExtendedPayloadSize, "17"))
		b.waitEmpty(20 * time.Second)
		stop()
		if b.runs.count("anywhere") != 1 {
			t.Errorf("runs %v", b.runs.counts())
		}
	})

	t.Run("OffHandsThePointerOn", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		cfg := b.config()
		cfg.S3 = nil
		cfg.Key = worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id", HashMissing: true}
		var got atomic.Value
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			got.Store(string(m.Body))
			return nil
		}))
		b.sendPointer("k", `{"id":"off"}`, worker.AttrExtendedPayloadSize)
		b.waitEmpty(20 * time.Second)
		s := stop()
		if g, _ := got.Load().(string); g != (worker.S3Pointer{Bucket: b.bucket, Key: "k"}).Body() {
			t.Errorf("the handler got %q", g)
		}
		if s.PayloadsRead != 0 {
			t.Errorf("stats %+v", s)
		}
	})

	t.Run("SNSEnvelopeOfAPointer", func(t *testing.T) {
		t.Parallel()
		b := setupS3(t, options{maxReceive: 5})
		cfg := b.config()
		cfg.Key.SNS = true
		var got atomic.Value
		stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			b.runs.add(m.Key)
			got.Store(string(m.Body))
			return nil
		}))
		sqstest.PutObject(t, b.s3, b.bucket, "sns", []byte(`{"id":"via-sns"}`))
		env, _ := json.Marshal(map[string]any{
			"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:us-east-1:000000000000:t",
			"Message":           worker.S3Pointer{Bucket: b.bucket, Key: "sns"}.Body(),
			"MessageAttributes": map[string]any{worker.AttrExtendedPayloadSize: map[string]string{"Type": "Number", "Value": "16"}},
		})
		b.send(string(env))
		b.waitEmpty(20 * time.Second)
		stop()
		if b.runs.count("via-sns") != 1 || got.Load() != `{"id":"via-sns"}` {
			t.Errorf("runs %v, body %v", b.runs.counts(), got.Load())
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
