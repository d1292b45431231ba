package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

// handlerClass classifies a handler's result the way the worker does.
func handlerClass(err error) string {
	var perm *worker.PermanentError
	var retry *worker.RetryError
	switch {
	case err == nil:
		return "done"
	case errors.As(err, &perm):
		return "permanent"
	case errors.As(err, &retry):
		return "retry-after"
	default:
		return "retry"
	}
}

// handlerLogs collects JSON log records; it is safe for concurrent use.
type handlerLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *handlerLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *handlerLogs) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the records logged so far with the message msg.
func (l *handlerLogs) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range bytes.Lines(l.buf.Bytes()) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func httpMessage() *worker.Message {
	return &worker.Message{
		Key:          "orders:42",
		Body:         []byte(`{"order":42}`),
		MessageID:    "m-1",
		QueueURL:     "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
		Attempt:      2,
		ReceiveCount: 3,
	}
}

func newHTTPHandler(t *testing.T, url string) *worker.HTTPHandler {
	t.Helper()
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// httpHandle calls h.Handle for m under a 5s deadline.
func httpHandle(t *testing.T, h *worker.HTTPHandler, m *worker.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return h.Handle(ctx, m)
}

func TestNewHTTPHandler_Invalid(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"",
		"example.com/hook",
		"/hook",
		"ftp://example.com/hook",
		"http://",
		"http:example.com",
		"localhost:8080",
		"http://exa mple.com/",
	} {
		if _, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url}); err == nil {
			t.Errorf("NewHTTPHandler(%q) = nil error, want one", url)
		}
	}
	for _, url := range []string{"http://127.0.0.1:8080/hook", "HTTPS://example.com", "https://example.com/a?b=c"} {
		if _, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: url}); err != nil {
			t.Errorf("NewHTTPHandler(%q): %v", url, err)
		}
	}
}

func TestHTTPHandler_Request(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path string
		header       http.Header
		body         []byte
	}
	reqs := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reqs <- seen{r.Method, r.URL.RequestURI(), r.Header.Clone(), body}
	}))
	defer srv.Close()
	h := newHTTPHandler(t, srv.URL+"/hook?x=1")

	for _, tc := range []struct {
		name, body, contentType, group string
	}{
		{"json object", `{"order":42}`, "application/json", ""},
		{"json with group", ` [1, 2] `, "application/json", "tenant-7"},
		{"text", "not json", "application/octet-stream", ""},
		{"binary", "\x00\xff\x01", "application/octet-stream", ""},
		{"empty", "", "application/octet-stream", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := httpMessage()
			m.Body = []byte(tc.body)
			m.GroupID = tc.group
			if err := httpHandle(t, h, m); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			r := <-reqs
			if r.method != http.MethodPost || r.path != "/hook?x=1" {
				t.Errorf("request %s %s, want POST /hook?x=1", r.method, r.path)
			}
			if string(r.body) != tc.body {
				t.Errorf("body %q, want %q", r.body, tc.body)
			}
			want := map[string]string{
				"Idempotency-Key":         "orders:42",
				"X-Sqsonce-Message-Id":    "m-1",
				"X-Sqsonce-Attempt":       "2",
				"X-Sqsonce-Receive-Count": "3",
				"X-Sqsonce-Queue-Url":     "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
				"Content-Type":            tc.contentType,
				"User-Agent":              "sqsonce",
			}
			for name, v := range want {
				if got := r.header.Get(name); got != v {
					t.Errorf("header %s = %q, want %q", name, got, v)
				}
			}
			if got, ok := r.header["X-Sqsonce-Group-Id"]; tc.group == "" && ok {
				t.Errorf("X-Sqsonce-Group-Id = %q, want no header", got)
			} else if tc.group != "" && r.header.Get("X-Sqsonce-Group-Id") != tc.group {
				t.Errorf("X-Sqsonce-Group-Id = %q, want %q", r.header.Get("X-Sqsonce-Group-Id"), tc.group)
			}
		})
	}
}

func TestHTTPHandler_Status(t *testing.T) {
	t.Parallel()
	var redirected atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/target", func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) })
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if v := q.Get("retry-after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		if q.Get("location") != "" {
			w.Header().Set("Location", "/target")
		}
		code, err := strconv.Atoi(q.Get("code"))
		if err != nil {
			code = http.StatusTeapot
		}
		w.WriteHeader(code)
		io.WriteString(w, q.Get("body"))
	})
	srv := httptest.NewServer(mux)
	// The subtests run in parallel, after this function returns.
	t.Cleanup(func() {
		srv.Close()
		if n := redirected.Load(); n != 0 {
			t.Errorf("redirect target requested %d times, want 0", n)
		}
	})

	// Parallel subtests may start well after the dates are made: the
	// expected delay of a date shrinks by the time since.
	made := time.Now()
	future := made.Add(90 * time.Second).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		query     string
		class     string
		after     time.Duration // for retry-after: the expected delay, to within 3s
		result    string
		errSubstr string
	}{
		{query: "code=200&body=ok", class: "done", result: "ok"},
		{query: "code=201", class: "done"},
		{query: "code=202&body=queued", class: "done", result: "queued"},
		{query: "code=204", class: "done"},
		{query: "code=400&body=bad+order", class: "permanent", errSubstr: `400 Bad Request: body "bad order"`},
		{query: "code=401", class: "permanent", errSubstr: "401"},
		{query: "code=404", class: "permanent", errSubstr: "404 Not Found"},
		{query: "code=409&retry-after=5", class: "permanent", errSubstr: "409"},
		{query: "code=422", class: "permanent", errSubstr: "422"},
		{query: "code=408", class: "retry", errSubstr: "408 Request Timeout"},
		{query: "code=429", class: "retry", errSubstr: "429"},
		{query: "code=429&retry-after=7", class: "retry-after", after: 7 * time.Second, errSubstr: "429"},
		{query: "code=500&body=boom", class: "retry", errSubstr: `500 Internal Server Error: body "boom"`},
		{query: "code=502", class: "retry", errSubstr: "502"},
		{query: "code=503&retry-after=" + future, class: "retry-after", after: 90 * time.Second, errSubstr: "503"},
		{query: "code=503&retry-after=" + past, class: "retry-after", after: 0, errSubstr: "503"},
		{query: "code=503&retry-after=0", class: "retry-after", after: 0, errSubstr: "503"},
		{query: "code=503&retry-after=soon", class: "retry", errSubstr: "503"},
		{query: "code=503&retry-after=-5", class: "retry", errSubstr: "503"},
		{query: "code=599", class: "retry", errSubstr: "599"},
		{query: "code=302&location=1", class: "retry", errSubstr: `302 Found to "/target" (redirects are not followed)`},
		{query: "code=307&location=1", class: "retry", errSubstr: "307"},
		{query: "code=308&location=1", class: "retry", errSubstr: "308"},
		{query: "code=304", class: "retry", errSubstr: "304"},
		{query: "code=300", class: "retry", errSubstr: "300"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			h := newHTTPHandler(t, srv.URL+"/status?"+strings.ReplaceAll(tc.query, " ", "+"))
			m := httpMessage()
			err := httpHandle(t, h, m)
			if got := handlerClass(err); got != tc.class {
				t.Fatalf("Handle = %v (%s), want %s", err, got, tc.class)
			}
			if err != nil && !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("error %q does not contain %q", err, tc.errSubstr)
			}
			var re *worker.RetryError
			low := tc.after - 3*time.Second
			if strings.Contains(tc.query, "GMT") {
				low -= time.Since(made)
			}
			if errors.As(err, &re) && (re.After < low || re.After > tc.after) {
				t.Errorf("RetryError.After = %v, want %v (to within 3s, less the time since the date was made)", re.After, tc.after)
			}
			if tc.class == "done" && string(m.Result) != tc.result {
				t.Errorf("Result = %q, want %q", m.Result, tc.result)
			}
		})
	}
}

func TestHTTPHandler_RedirectNotFollowedWithGivenClient(t *testing.T) {
	t.Parallel()
	var redirected atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/target", func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) })
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/target", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := &http.Client{} // follows redirects
	h, err := worker.NewHTTPHandler(worker.HTTPConfig{URL: srv.URL + "/hook", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	err = httpHandle(t, h, httpMessage())
	if got := handlerClass(err); got != "retry" {
		t.Fatalf("Handle = %v (%s), want retry", err, got)
	}
	if client.CheckRedirect != nil {
		t.Error("NewHTTPHandler changed the given client")
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("redirect target requested %d times, want 0", n)
	}
}

func TestHTTPHandler_BodyBounds(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		if r.URL.Path == "/fail" {
			code = http.StatusInternalServerError
		}
		w.WriteHeader(code)
		w.Write(bytes.Repeat([]byte("z"), 10000))
	}))
	defer srv.Close()

	m := httpMessage()
	if err := httpHandle(t, newHTTPHandler(t, srv.URL+"/ok"), m); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if want := strings.Repeat("z", 4096); string(m.Result) != want {
		t.Errorf("Result has %d bytes, want the first 4096", len(m.Result))
	}

	err := httpHandle(t, newHTTPHandler(t, srv.URL+"/fail"), httpMessage())
	if got := handlerClass(err); got != "retry" {
		t.Fatalf("Handle = %v (%s), want retry", err, got)
	}
	if n := strings.Count(err.Error(), "z"); n < 150 || n > 200 {
		t.Errorf("error has %d bytes of the body, want about 200: %q", n, err)
	}
}

// TestHTTPHandler_ConnectionReuse checks that response bodies are drained, so
// that one connection serves consecutive requests.
func TestHTTPHandler_ConnectionReuse(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		if r.URL.Path == "/fail" {
			code = http.StatusServiceUnavailable
		}
		w.WriteHeader(code)
		w.Write(bytes.Repeat([]byte("y"), 20000))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	ok, fail := newHTTPHandler(t, srv.URL+"/ok"), newHTTPHandler(t, srv.URL+"/fail")
	for range 3 {
		if err := httpHandle(t, ok, httpMessage()); err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
	for range 3 {
		if err := httpHandle(t, fail, httpMessage()); handlerClass(err) != "retry" {
			t.Fatalf("Handle = %v, want retry", err)
		}
	}
	// Two handlers, two clients: one connection each.
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for 6 requests by 2 handlers, want 2", n)
	}
}

func TestHTTPHandler_ConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	url := srv.URL
	srv.Close()

	err := httpHandle(t, newHTTPHandler(t, url), httpMessage())
	if got := handlerClass(err); got != "retry" {
		t.Fatalf("Handle = %v (%s), want retry", err, got)
	}
}

func TestHTTPHandler_Deadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	h := newHTTPHandler(t, srv.URL)
	cause := errors.New("handler timeout")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 200*time.Millisecond, cause)
	defer cancel()
	start := time.Now()
	err := h.Handle(ctx, httpMessage())
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Handle took %v past a 200ms deadline", elapsed)
	}
	if got := handlerClass(err); got != "retry" {
		t.Fatalf("Handle = %v (%s), want retry", err, got)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cause) {
		t.Errorf("error %q does not wrap the context's error and cause", err)
	}
}

func TestHTTPHandler_Concurrent(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(w, r.Body)
	}))
	defer srv.Close()
	h := newHTTPHandler(t, srv.URL)

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			m := httpMessage()
			m.Body = []byte{byte('a' + i)}
			if err := httpHandle(t, h, m); err != nil {
				t.Errorf("Handle: %v", err)
			} else if !bytes.Equal(m.Result, m.Body) {
				t.Errorf("Result %q, want %q", m.Result, m.Body)
			}
		})
	}
	wg.Wait()
	if n := hits.Load(); n != 20 {
		t.Errorf("%d requests, want 20", n)
	}
}

func TestHTTPHandler_InvalidHeaderValue(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()

	m := httpMessage()
	m.Key = "orders:\n42"
	err := httpHandle(t, newHTTPHandler(t, srv.URL), m)
	if got := handlerClass(err); got != "permanent" {
		t.Fatalf("Handle = %v (%s), want permanent", err, got)
	}
	if hits.Load() != 0 {
		t.Error("the request was sent")
	}
}

// Message attributes reach the endpoint as X-Sqsonce-Attr-<Name> headers,
// except values that no header can carry or too long to pass.
func TestHTTPHandler_Attributes(t *testing.T) {
	t.Parallel()
	headers := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers <- r.Header.Clone()
	}))
	defer srv.Close()
	h := newHTTPHandler(t, srv.URL)
	m := httpMessage()
	m.Attributes = map[string]string{
		"EventType": "payment.succeeded",
		"order.id":  "42",
		"Multi":     "line one\nline two",
		"Long":      strings.Repeat("x", worker.MaxAttrValue+1),
	}
	if err := httpHandle(t, h, m); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	got := <-headers
	for name, want := range map[string]string{"X-Sqsonce-Attr-Eventtype": "payment.succeeded", "X-Sqsonce-Attr-Order.id": "42"} {
		if v := got.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	for _, name := range []string{"X-Sqsonce-Attr-Multi", "X-Sqsonce-Attr-Long"} {
		if v, ok := got[http.CanonicalHeaderKey(name)]; ok {
			t.Errorf("header %s = %q, want none", name, v)
		}
	}
}
