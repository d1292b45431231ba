package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/internal/w3ctrace"
)

// A producer's trace context, as a sender puts it on a message.
const (
	otelTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	otelSpanID      = "00f067aa0ba902b7"
	otelTraceParent = "00-" + otelTraceID + "-" + otelSpanID + "-01"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each export and
// keeps its spans, and every request body as it came.
type otlpReceiver struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each resource
	raw      [][]byte
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %s %s: %v", req.Header.Get("Content-Type"), req.Header.Get("Content-Encoding"), err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.raw = append(r.raw, body)
		for _, rs := range export.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.services = append(r.services, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// vars point the SDK at the receiver, exporting every 100ms.
func (r *otlpReceiver) vars() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=sqsonce-test"}
}

// named returns the spans of that name.
func (r *otlpReceiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// exportsContain reports whether the body of an export holds text.
func (r *otlpReceiver) exportsContain(text string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.raw {
		if bytes.Contains(b, []byte(text)) {
			return true
		}
	}
	return false
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key != key {
			continue
		}
		switch v := a.GetValue().Value.(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		}
	}
	return ""
}

func queueNameOf(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

// A message that carries a traceparent gets a consumer span per attempt,
// children of the producer's span and linked to it, exported over OTLP;
// the handler continues the consumer span; the body is in no export.
func TestTracing_Run(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	// Fails the first attempt (EX_TEMPFAIL), succeeds the second; keeps
	// what TRACEPARENT each attempt got.
	e := newEnv(t, false, `cat >/dev/null
echo "$TRACEPARENT" >> "$STATE/traceparents"
if [ -e "$STATE/tried" ]; then exit 0; fi
touch "$STATE/tried"
exit 75
`)
	cmd, out := e.start("run", rcv.vars()...)
	const secret = "BODY-MUST-NOT-BE-EXPORTED"
	body := `{"id":"traced-op","secret":"` + secret + `"}`
	if _, err := e.client.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: &e.queue.URL, MessageBody: &body,
		MessageAttributes: map[string]types.MessageAttributeValue{
			"traceparent": {DataType: aws.String("String"), StringValue: aws.String(otelTraceParent)},
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("two attempts and an empty queue", 30*time.Second, func() bool { return len(e.lines("traceparents")) == 2 && e.queueEmpty() })
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	name := queueNameOf(e.queue.URL) + " process"
	spans := rcv.named(name)
	if len(spans) != 2 {
		t.Fatalf("%d spans named %q, want 2 (one per attempt); output:\n%s", len(spans), name, out)
	}
	if spanAttr(spans[0], "sqsonce.attempt") == "2" {
		spans[0], spans[1] = spans[1], spans[0]
	}
	got := e.lines("traceparents")
	for i, s := range spans {
		want := map[string]string{
			"messaging.system": "aws_sqs", "messaging.operation.type": "process",
			"messaging.destination.name": queueNameOf(e.queue.URL),
			"sqsonce.key":                "traced-op", "sqsonce.attempt": []string{"1", "2"}[i],
			"sqsonce.outcome": []string{"retry", "complete"}[i],
		}
		for k, v := range want {
			if a := spanAttr(s, k); a != v {
				t.Errorf("span %d: %s = %q, want %q", i+1, k, a, v)
			}
		}
		if spanAttr(s, "messaging.message.id") == "" {
			t.Errorf("span %d: no messaging.message.id", i+1)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
			t.Errorf("span %d: kind %v, want consumer", i+1, s.Kind)
		}
		if hex.EncodeToString(s.TraceId) != otelTraceID || hex.EncodeToString(s.ParentSpanId) != otelSpanID {
			t.Errorf("span %d: trace %x parent %x, want the producer's %s", i+1, s.TraceId, s.ParentSpanId, otelTraceParent)
		}
		if len(s.Links) != 1 || hex.EncodeToString(s.Links[0].TraceId) != otelTraceID || hex.EncodeToString(s.Links[0].SpanId) != otelSpanID {
			t.Errorf("span %d: links %v, want one to the producer", i+1, s.Links)
		}
		wantStatus := []tracepb.Status_StatusCode{tracepb.Status_STATUS_CODE_ERROR, tracepb.Status_STATUS_CODE_UNSET}[i]
		if s.GetStatus().GetCode() != wantStatus {
			t.Errorf("span %d: status %v, want %v", i+1, s.GetStatus(), wantStatus)
		}
		if want := "00-" + otelTraceID + "-" + hex.EncodeToString(s.SpanId) + "-01"; i < len(got) && got[i] != want {
			t.Errorf("attempt %d: the command got TRACEPARENT %q, want its span's %q", i+1, got[i], want)
		}
	}
	if rcv.exportsContain(secret) {
		t.Error("an export carries the message body")
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, s := range rcv.services {
		if s != "sqsonce-test" {
			t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", s)
		}
	}
}

// traceParentOf reads a message's traceparent attribute, failing the test
// when it is not valid.
func traceParentOf(t *testing.T, m types.Message) string {
	t.Helper()
	tp := aws.ToString(m.MessageAttributes["traceparent"].StringValue)
	if _, err := w3ctrace.Parse(tp); err != nil {
		t.Fatalf("message %s: traceparent %q: %v", aws.ToString(m.MessageId), tp, err)
	}
	return tp
}

// send puts a valid traceparent on every message: a fresh unsampled one
// without tracing, its producer span's with it.
func TestTracing_Send(t *testing.T) {
	t.Parallel()
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		if code, out := e.run("send", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n"); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		msgs := sqstest.Drain(t, e.client, e.queue.URL, 2, 5*time.Second)
		if len(msgs) != 2 {
			t.Fatalf("%d messages, want 2", len(msgs))
		}
		a, b := traceParentOf(t, msgs[0]), traceParentOf(t, msgs[1])
		if a[3:35] == b[3:35] || !strings.HasSuffix(a, "-00") || !strings.HasSuffix(b, "-00") {
			t.Errorf("traceparents %s and %s: want two traces, not sampled", a, b)
		}
	})
	// Each message's span is its own, and says which message it sent:
	// in full batches, and in batches cut short by their size, whose
	// entries do not start at the first entry id.
	for name, sizes := range map[string][]int{
		"On":        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},             // two batches
		"CutBySize": {0, 100 << 10, 100 << 10, 100 << 10, 0, 0, 0, 0}, // three entries, then five
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sendTraced(t, sizes)
		})
	}
}

// sendTraced sends one line per size (its padding) with tracing on, and
// checks each message against its producer span.
func sendTraced(t *testing.T, sizes []int) {
	rcv := newOTLPReceiver(t)
	e := newEnv(t, false, "exit 0\n")
	var lines strings.Builder
	for i, n := range sizes {
		fmt.Fprintf(&lines, `{"id":"op-%d","pad":"%s"}`+"\n", i, strings.Repeat("x", n))
	}
	if code, out := e.run("send", lines.String(), rcv.vars()...); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	n := len(sizes)
	msgs := sqstest.Drain(t, e.client, e.queue.URL, n, 5*time.Second)
	spans := rcv.named(queueNameOf(e.queue.URL) + " send")
	if len(msgs) != n || len(spans) != n {
		t.Fatalf("%d messages and %d producer spans, want %d each", len(msgs), len(spans), n)
	}
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		if s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || spanAttr(s, "messaging.system") != "aws_sqs" || spanAttr(s, "messaging.operation.type") != "send" {
			t.Errorf("span %v: want a producer span of aws_sqs send", s)
		}
		byID[spanAttr(s, "messaging.message.id")] = s
	}
	for _, m := range msgs {
		s := byID[aws.ToString(m.MessageId)]
		if s == nil {
			t.Errorf("message %s: no span with its id", aws.ToString(m.MessageId))
			continue
		}
		if tp, want := traceParentOf(t, m), "00-"+hex.EncodeToString(s.TraceId)+"-"+hex.EncodeToString(s.SpanId)+"-01"; tp != want {
			t.Errorf("message %s: traceparent %s, want its span's %s", aws.ToString(m.MessageId), tp, want)
		}
		if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("message %s: its span has status error %q", aws.ToString(m.MessageId), s.Status.GetMessage())
		}
	}
}

// ingest continues a request's trace context, or starts one.
func TestTracing_Ingest(t *testing.T) {
	t.Parallel()
	post := func(t *testing.T, url, id string, header map[string]string) {
		t.Helper()
		req := delivery(id, []byte(`{"n":1}`))
		req.URL, _ = req.URL.Parse(url)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Client{Transport: loopback.Transport(), Timeout: 15 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("answered %d", resp.StatusCode)
		}
	}
	// The three requests carry one body, and so one key: they are told
	// apart by their delivery ids.
	byDelivery := func(msgs []types.Message) map[string]types.Message {
		out := map[string]types.Message{}
		for _, m := range msgs {
			out[aws.ToString(m.MessageAttributes["SqsonceDeliveryId"].StringValue)] = m
		}
		return out
	}
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "")
		_, url := e.startIngest()
		post(t, url, "with-context", map[string]string{"traceparent": otelTraceParent, "tracestate": "vendor=abc"})
		post(t, url, "without", nil)
		post(t, url, "invalid", map[string]string{"traceparent": "00-zz"})
		msgs := byDelivery(sqstest.Drain(t, e.client, e.queue.URL, 3, 5*time.Second))
		if tp, ts := traceParentOf(t, msgs["with-context"]), aws.ToString(msgs["with-context"].MessageAttributes["tracestate"].StringValue); tp != otelTraceParent || ts != "vendor=abc" {
			t.Errorf("with-context: traceparent %q tracestate %q, want the request's", tp, ts)
		}
		for _, k := range []string{"without", "invalid"} {
			if tp := traceParentOf(t, msgs[k]); tp[3:35] == otelTraceID || !strings.HasSuffix(tp, "-00") {
				t.Errorf("%s: traceparent %q, want a fresh unsampled context", k, tp)
			}
		}
	})
	t.Run("On", func(t *testing.T) {
		t.Parallel()
		rcv := newOTLPReceiver(t)
		e := newEnv(t, false, "")
		ing, url := e.startIngest(rcv.vars()...)
		post(t, url, "with-context", map[string]string{"traceparent": otelTraceParent})
		msgs := byDelivery(sqstest.Drain(t, e.client, e.queue.URL, 1, 5*time.Second))
		ing.cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, ing.cmd, 30*time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, ing.out)
		}
		spans := rcv.named(queueNameOf(e.queue.URL) + " send")
		if len(spans) != 1 {
			t.Fatalf("%d producer spans, want 1:\n%s", len(spans), ing.out)
		}
		s := spans[0]
		if hex.EncodeToString(s.TraceId) != otelTraceID || hex.EncodeToString(s.ParentSpanId) != otelSpanID || s.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
			t.Errorf("span: trace %x parent %x kind %v, want a producer child of %s", s.TraceId, s.ParentSpanId, s.Kind, otelTraceParent)
		}
		if key := aws.ToString(msgs["with-context"].MessageAttributes["SqsonceKey"].StringValue); spanAttr(s, "sqsonce.key") != key || !strings.HasPrefix(key, "github:sha256:") ||
			spanAttr(s, "messaging.message.id") != aws.ToString(msgs["with-context"].MessageId) {
			t.Errorf("span attributes %v", s.Attributes)
		}
		if tp, want := traceParentOf(t, msgs["with-context"]), "00-"+otelTraceID+"-"+hex.EncodeToString(s.SpanId)+"-01"; tp != want {
			t.Errorf("traceparent %s, want the producer span's %s", tp, want)
		}
	})
}

// Tracing variables that cannot be honoured exit 2 naming the variable.
func TestTracing_BadConfiguration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	cases := []struct {
		name string
		vars []string
		want string
	}{
		{"Exporter", []string{"OTEL_TRACES_EXPORTER=zipkin"}, `OTEL_TRACES_EXPORTER="zipkin": supported: otlp`},
		{"Protocol", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": supported: http/protobuf`},
		{"TracesProtocol", []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json"`},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"run", "send", "ingest"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				t.Parallel()
				vars := tc.vars
				if cmd == "ingest" {
					vars = append(ingestVars(), vars...)
				}
				code, out := e.run(cmd, "", vars...)
				if code != exitUsage || !strings.Contains(out, tc.want) {
					t.Errorf("exit %d, want %d with %q:\n%s", code, exitUsage, tc.want, out)
				}
			})
		}
	}
	// Off by name: none, and nothing set at all.
	if code, out := e.run("send", "{\"id\":\"x\"}\n", "OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"); code != 0 {
		t.Errorf("OTEL_TRACES_EXPORTER=none: exit %d:\n%s", code, out)
	}
}
