//go:build unix

package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// A producer's trace context, as a sender puts it on a message.
const (
	testTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID      = "00f067aa0ba902b7"
	testTraceParent = "00-" + testTraceID + "-" + testSpanID + "-01"
	testTraceState  = "vendor=abc,other=1"
)

// seenTrace is what a handler saw of the trace context.
type seenTrace struct {
	parent, state string
	ctx           trace.SpanContext
}

// traceRecorder keeps, per key, what the Go handler saw.
type traceRecorder struct {
	mu   sync.Mutex
	seen map[string][]seenTrace
}

func (r *traceRecorder) add(ctx context.Context, m *worker.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string][]seenTrace{}
	}
	r.seen[m.Key] = append(r.seen[m.Key], seenTrace{m.TraceParent, m.TraceState, trace.SpanContextFromContext(ctx)})
}

func (r *traceRecorder) get(key string) []seenTrace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seenTrace(nil), r.seen[key]...)
}

func TestWorker_TraceContext(t *testing.T) {
	t.Parallel()

	t.Run("GoHandlerWithoutSpans", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		var rec traceRecorder
		b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			rec.add(ctx, m)
			return nil
		}))
		b.send(`{"id":"traced"}`, withAttr("traceparent", testTraceParent), withAttr("tracestate", testTraceState))
		b.send(`{"id":"untraced"}`)
		b.send(`{"id":"bad-parent"}`, withAttr("traceparent", "00-"+strings.ToUpper(testTraceID)+"-"+testSpanID+"-01"))
		b.send(`{"id":"bad-state"}`, withAttr("traceparent", testTraceParent), withAttr("tracestate", "Not A Tracestate"))
		b.waitEmpty(15 * time.Second)

		got := rec.get("traced")
		if len(got) != 1 || got[0].parent != testTraceParent || got[0].state != testTraceState {
			t.Fatalf("traced: handler saw %+v, want %s and %s", got, testTraceParent, testTraceState)
		}
		sc := got[0].ctx
		if sc.TraceID().String() != testTraceID || sc.SpanID().String() != testSpanID || !sc.IsRemote() || !sc.IsSampled() ||
			sc.TraceState().Get("vendor") != "abc" {
			t.Errorf("traced: ctx carries %v %v remote %v sampled %v state %q", sc.TraceID(), sc.SpanID(), sc.IsRemote(), sc.IsSampled(), sc.TraceState())
		}
		for _, key := range []string{"untraced", "bad-parent"} {
			got := rec.get(key)
			if len(got) != 1 || got[0].parent != "" || got[0].state != "" || got[0].ctx.IsValid() {
				t.Errorf("%s: handler saw %+v, want no trace context (and the message handled once)", key, got)
			}
		}
		if got := rec.get("bad-state"); len(got) != 1 || got[0].parent != testTraceParent || got[0].state != "" || got[0].ctx.TraceState().Len() != 0 {
			t.Errorf("bad-state: handler saw %+v, want the traceparent without the tracestate", got)
		}
	})

	t.Run("ExecHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		dir := t.TempDir()
		script := filepath.Join(dir, "handler.sh")
		// Writes what it was given, or "unset", to a file named by its key.
		src := "#!/bin/sh\nprintf '%s\\n%s\\n' \"${TRACEPARENT-unset}\" \"${TRACESTATE-unset}\" > \"" + dir + "/$SQSONCE_KEY\"\n"
		if err := os.WriteFile(script, []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
		b.start(b.config(), newExecHandler(t, worker.ExecConfig{Command: []string{script}, Env: []string{"PATH"}}))
		b.send(`{"id":"traced"}`, withAttr("traceparent", testTraceParent), withAttr("tracestate", testTraceState))
		b.send(`{"id":"parent-only"}`, withAttr("traceparent", testTraceParent))
		b.send(`{"id":"untraced"}`)
		b.waitEmpty(15 * time.Second)
		for key, want := range map[string]string{
			"traced":      testTraceParent + "\n" + testTraceState + "\n",
			"parent-only": testTraceParent + "\nunset\n",
			"untraced":    "unset\nunset\n",
		} {
			if got := execWaitFile(t, filepath.Join(dir, key)); got != want {
				t.Errorf("%s: the command saw %q, want %q", key, got, want)
			}
		}
	})

	t.Run("HTTPHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		var mu sync.Mutex
		headers := map[string]http.Header{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			headers[r.Header.Get("Idempotency-Key")] = r.Header.Clone()
			mu.Unlock()
		}))
		defer srv.Close()
		b.start(b.config(), newHTTPHandler(t, srv.URL))
		b.send(`{"id":"traced"}`, withAttr("traceparent", testTraceParent), withAttr("tracestate", testTraceState))
		b.send(`{"id":"untraced"}`)
		b.waitEmpty(15 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		if h := headers["traced"]; h.Get("traceparent") != testTraceParent || h.Get("tracestate") != testTraceState {
			t.Errorf("traced: headers traceparent %q tracestate %q", h.Get("traceparent"), h.Get("tracestate"))
		}
		h, ok := headers["untraced"]
		if !ok {
			t.Fatal("untraced: no request")
		}
		if _, ok := h["Traceparent"]; ok {
			t.Errorf("untraced: traceparent %q, want no header", h.Get("traceparent"))
		}
		if _, ok := h["Tracestate"]; ok {
			t.Errorf("untraced: tracestate %q, want no header", h.Get("tracestate"))
		}
	})

	// A traceparent of a later version is read by its first four fields,
	// and whatever follows them (here a line break and a header) is not
	// passed on: the work gets a version 00 traceparent of what was read.
	// A tracestate goes on as it was parsed, without the white space around
	// its members (a tab is a control character).
	t.Run("LaterVersion", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 2})
		dir := t.TempDir()
		script := filepath.Join(dir, "handler.sh")
		src := "#!/bin/sh\nprintf '%s|%s' \"${TRACEPARENT-unset}\" \"${TRACESTATE-unset}\" > \"" + dir + "/$SQSONCE_KEY\"\n"
		if err := os.WriteFile(script, []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		headers := map[string]http.Header{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			headers[r.Header.Get("Idempotency-Key")] = r.Header.Clone()
			mu.Unlock()
		}))
		defer srv.Close()
		httpH := newHTTPHandler(t, srv.URL)
		execH := newExecHandler(t, worker.ExecConfig{Command: []string{script}, Env: []string{"PATH"}})
		b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if strings.HasPrefix(m.Key, "exec-") {
				return execH.Handle(ctx, m)
			}
			return httpH.Handle(ctx, m)
		}))
		later := "cc-" + testTraceID + "-" + testSpanID + "-03-later\r\nX-Injected: 1"
		state := "vendor=abc\t,\tother=1"
		for _, via := range []string{"http", "exec"} {
			b.send(`{"id":"`+via+`-later"}`, withAttr("traceparent", later), withAttr("tracestate", state))
			b.send(`{"id":"`+via+`-v00"}`, withAttr("traceparent", testTraceParent), withAttr("tracestate", testTraceState))
		}
		b.waitEmpty(20 * time.Second)
		if dl := sqstest.Drain(t, b.client, b.queue.DLQURL, 0, time.Second); len(dl) > 0 {
			t.Errorf("%d messages dead-lettered, first: %s", len(dl), aws.ToString(dl[0].MessageAttributes[worker.AttrReason].StringValue))
		}
		want := map[string][2]string{
			"later": {testTraceParent, testTraceState},
			"v00":   {testTraceParent, testTraceState},
		}
		mu.Lock()
		defer mu.Unlock()
		for name, w := range want {
			h, ok := headers["http-"+name]
			if !ok {
				t.Errorf("http-%s: no request", name)
			} else if h.Get("traceparent") != w[0] || h.Get("tracestate") != w[1] || h.Get("X-Injected") != "" {
				t.Errorf("http-%s: headers traceparent %q tracestate %q X-Injected %q, want %q and %q", name,
					h.Get("traceparent"), h.Get("tracestate"), h.Get("X-Injected"), w[0], w[1])
			}
			if got := execWaitFile(t, filepath.Join(dir, "exec-"+name)); got != w[0]+"|"+w[1] {
				t.Errorf("exec-%s: the command saw %q, want %q", name, got, w[0]+"|"+w[1])
			}
		}
	})

	// fauxqs neither keeps a sent AWSTraceHeader nor returns it: xrayTransport
	// does what SQS does, between the client and the real server.
	t.Run("AWSTraceHeader", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		xray := newXrayTransport()
		b.client = sqstest.NewClient(t, xray)
		const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
		withXray := func(h string) func(*sqs.SendMessageInput) {
			return func(in *sqs.SendMessageInput) {
				in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String(h)}}
			}
		}
		b.send(`{"id":"xray"}`, withXray(header))
		b.send(`{"id":"unsampled"}`, withXray("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"))
		b.send(`{"id":"both"}`, withXray(header), withAttr("traceparent", testTraceParent))
		b.send(`{"id":"bad-xray"}`, withXray("Root=1-5759e988;Parent=53995c3f42cd8ad8"))
		// The worker starts once every send has been answered, so that the
		// transport knows each message's header before a receive gets it.
		var rec traceRecorder
		b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			rec.add(ctx, m)
			return nil
		}))
		b.waitEmpty(15 * time.Second)
		if !xray.asked() {
			t.Error("the worker's receives did not ask for AWSTraceHeader")
		}
		want := map[string]string{
			"xray":      "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01",
			"unsampled": "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00",
			"both":      testTraceParent,
			"bad-xray":  "",
		}
		for key, tp := range want {
			got := rec.get(key)
			if len(got) != 1 || got[0].parent != tp {
				t.Errorf("%s: handler saw %+v, want traceparent %q", key, got, tp)
				continue
			}
			if tp != "" && (got[0].ctx.TraceID().String() != tp[3:35] || got[0].ctx.SpanID().String() != tp[36:52]) {
				t.Errorf("%s: ctx carries %v", key, got[0].ctx)
			}
		}
	})

	t.Run("Spans", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{maxReceive: 5})
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		cfg := b.config()
		cfg.TracerProvider = tp
		var rec traceRecorder
		var inHandler sync.Map // key -> the span the handler's ctx carries
		b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			rec.add(ctx, m)
			n := len(rec.get(m.Key))
			inHandler.Store(m.Key+"#"+string(rune('0'+n)), trace.SpanFromContext(ctx).SpanContext())
			switch {
			case m.Key == "flaky" && n == 1:
				return errors.New("not yet")
			case m.Key == "broken":
				return worker.Permanent(errors.New("cannot do"))
			}
			return nil
		}))
		b.send(`{"id":"flaky","secret":"BODY-MUST-NOT-BE-TRACED"}`, withAttr("traceparent", testTraceParent), withAttr("tracestate", testTraceState))
		b.send(`{"id":"root"}`)
		b.send(`{"id":"broken"}`, withAttr("traceparent", testTraceParent))
		b.waitEmpty(20 * time.Second)
		byKey := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range spans.Ended() {
			key := ""
			for _, a := range s.Attributes() {
				if a.Key == "sqsonce.key" {
					key = a.Value.AsString()
				}
			}
			byKey[key] = append(byKey[key], s)
		}
		wantName := b.queue.URL[strings.LastIndexByte(b.queue.URL, '/')+1:] + " process"

		flaky := byKey["flaky"]
		if len(flaky) != 2 {
			t.Fatalf("flaky: %d spans, want 2 (one per attempt); all: %v", len(flaky), byKey)
		}
		seen := rec.get("flaky")
		for i, s := range flaky {
			attempt := i + 1
			attrs := spanAttrs(s)
			want := map[string]string{
				"messaging.system": "aws_sqs", "messaging.operation.type": "process",
				"messaging.destination.name": wantName[:len(wantName)-len(" process")],
				"sqsonce.key":                "flaky", "sqsonce.attempt": string(rune('0' + attempt)),
				"sqsonce.outcome": []string{"retry", "complete"}[i],
			}
			for k, v := range want {
				if attrs[k] != v {
					t.Errorf("flaky span %d: %s = %q, want %q", attempt, k, attrs[k], v)
				}
			}
			if attrs["messaging.message.id"] == "" {
				t.Errorf("flaky span %d: no messaging.message.id", attempt)
			}
			if s.Name() != wantName || s.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("flaky span %d: %q kind %v, want %q consumer", attempt, s.Name(), s.SpanKind(), wantName)
			}
			if s.Parent().TraceID().String() != testTraceID || s.Parent().SpanID().String() != testSpanID || s.SpanContext().TraceID().String() != testTraceID {
				t.Errorf("flaky span %d: parent %v in trace %v, want the producer's %s", attempt, s.Parent(), s.SpanContext().TraceID(), testTraceParent)
			}
			if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID().String() != testSpanID || l[0].SpanContext.TraceID().String() != testTraceID {
				t.Errorf("flaky span %d: links %v, want one to the producer", attempt, l)
			}
			if s.SpanContext().TraceState().Get("vendor") != "abc" {
				t.Errorf("flaky span %d: tracestate %q, want the producer's", attempt, s.SpanContext().TraceState())
			}
			wantCode := []codes.Code{codes.Error, codes.Unset}[i]
			if s.Status().Code != wantCode || (i == 0 && !strings.Contains(s.Status().Description, "not yet")) {
				t.Errorf("flaky span %d: status %v, want %v (with the error's text)", attempt, s.Status(), wantCode)
			}
			for _, a := range s.Attributes() {
				if strings.Contains(a.Value.String(), "BODY-MUST-NOT-BE-TRACED") {
					t.Errorf("flaky span %d: attribute %s carries the body", attempt, a.Key)
				}
			}
			// The work continues the consumer span's context.
			sc := s.SpanContext()
			if seen[i].parent != "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" || seen[i].state != testTraceState {
				t.Errorf("flaky attempt %d: the handler got %q %q, want its span's context %v", attempt, seen[i].parent, seen[i].state, sc)
			}
			if ctxSpan, _ := inHandler.Load("flaky#" + string(rune('0'+attempt))); !sc.Equal(ctxSpan.(trace.SpanContext)) {
				t.Errorf("flaky attempt %d: the handler's ctx carries span %v, want %v", attempt, ctxSpan, sc)
			}
		}
		if flaky[0].SpanContext().SpanID() == flaky[1].SpanContext().SpanID() {
			t.Error("flaky: both attempts have the same span")
		}

		root := byKey["root"]
		if len(root) != 1 || root[0].Parent().IsValid() || len(root[0].Links()) != 0 || spanAttrs(root[0])["sqsonce.outcome"] != "complete" {
			t.Fatalf("root: spans %v, want one root span without links, complete", root)
		}
		if got := rec.get("root"); len(got) != 1 || got[0].parent != "00-"+root[0].SpanContext().TraceID().String()+"-"+root[0].SpanContext().SpanID().String()+"-01" {
			t.Errorf("root: the handler got %+v, want the span's context", got)
		}
		broken := byKey["broken"]
		if len(broken) != 1 || spanAttrs(broken[0])["sqsonce.outcome"] != "permanent" || broken[0].Status().Code != codes.Error {
			t.Errorf("broken: spans %v, want one, permanent, status error", broken)
		}
	})
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attributes() {
		out[string(a.Key)] = a.Value.String()
	}
	return out
}

// xrayTransport stands in for what SQS does with AWSTraceHeader and fauxqs
// does not: it keeps the AWSTraceHeader system attribute of each message
// sent (by message id) and adds it to the message's system attributes when
// a receive asks for it (or for All).
type xrayTransport struct {
	rt http.RoundTripper

	mu      sync.Mutex
	headers map[string]string // message id -> AWSTraceHeader
	ask     bool              // a receive asked for AWSTraceHeader
}

func newXrayTransport() *xrayTransport {
	return &xrayTransport{rt: loopback.Transport(), headers: map[string]string{}}
}

func (x *xrayTransport) asked() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ask
}

func (x *xrayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := sqstest.Operation(req)
	if op != "SendMessage" && op != "ReceiveMessage" {
		return x.rt.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	var in struct {
		MessageSystemAttributes     map[string]struct{ StringValue string }
		MessageSystemAttributeNames []string
	}
	json.Unmarshal(body, &in)
	resp, err := x.rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	switch op {
	case "SendMessage":
		var sent struct{ MessageId string }
		json.Unmarshal(out, &sent)
		if h, ok := in.MessageSystemAttributes["AWSTraceHeader"]; ok {
			x.headers[sent.MessageId] = h.StringValue
		}
	case "ReceiveMessage":
		wants := false
		for _, n := range in.MessageSystemAttributeNames {
			wants = wants || n == "AWSTraceHeader" || n == "All"
		}
		x.ask = x.ask || wants
		var got map[string]any
		if wants && json.Unmarshal(out, &got) == nil {
			msgs, _ := got["Messages"].([]any)
			for _, m := range msgs {
				m, _ := m.(map[string]any)
				id, _ := m["MessageId"].(string)
				h, ok := x.headers[id]
				if !ok {
					continue
				}
				attrs, _ := m["Attributes"].(map[string]any)
				if attrs == nil {
					attrs = map[string]any{}
				}
				attrs["AWSTraceHeader"] = h
				m["Attributes"] = attrs
			}
			out, _ = json.Marshal(got)
			// The checksums of the body and attributes do not cover
			// system attributes: the SDK's checks still hold.
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func (x *xrayTransport) CloseIdleConnections() {
	if c, ok := x.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
