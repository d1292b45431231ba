package awsfault_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/awsfault"
)

var service = awsfault.Service{
	Namespace:       "com.example.svc#",
	QueryCompatible: true,
	Throttle:        awsfault.Answer{Status: http.StatusBadRequest, Code: "SlowDown", Message: "too fast"},
	ServerError:     awsfault.Answer{Status: http.StatusInternalServerError, Code: "Broken", Message: "broken"},
}

// bundle is a server that counts the requests reaching it and a client
// whose Transport gives requests the faults queued with next.
type bundle struct {
	hits atomic.Int64
	url  string
	tr   *awsfault.Transport
	c    *http.Client

	mu    sync.Mutex
	queue []awsfault.Kind
}

func setup(t *testing.T, s awsfault.Service) *bundle {
	t.Helper()
	b := &bundle{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	b.tr = awsfault.New(srv.Client().Transport, s, b.choose)
	b.c = &http.Client{Transport: b.tr}
	t.Cleanup(b.c.CloseIdleConnections)
	return b
}

func (b *bundle) next(ks ...awsfault.Kind) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, ks...)
}

func (b *bundle) choose(string) awsfault.Kind {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		return ""
	}
	k := b.queue[0]
	b.queue = b.queue[1:]
	return k
}

// call sends one request of operation op and reads its answer.
func (b *bundle) call(ctx context.Context, t *testing.T, op string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, strings.NewReader(`{"QueueUrl":"q"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "Service_2024."+op)
	resp, err := b.c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body, nil
}

func TestTransport(t *testing.T) {
	t.Parallel()

	t.Run("NoFault", func(t *testing.T) {
		t.Parallel()
		b := setup(t, service)
		resp, _, err := b.call(t.Context(), t, "Send")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("got %v, %v; want the server's 200", resp, err)
		}
		if got := b.hits.Load(); got != 1 {
			t.Errorf("%d requests reached the server, want 1", got)
		}
	})

	// S3's REST-XML answers, and the refusal of a missing permission.
	t.Run("XMLDenied", func(t *testing.T) {
		t.Parallel()
		b := setup(t, awsfault.Service{XML: true, Denied: awsfault.Answer{Status: http.StatusForbidden, Code: "AccessDenied", Message: "Access Denied"}})
		b.next(awsfault.Denied)
		resp, body, err := b.call(t.Context(), t, "")
		if err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/xml" {
			t.Fatalf("got %v, %v; want a 403 in XML", resp, err)
		}
		var doc struct {
			Code, Message string
			RequestID     string `xml:"RequestId"`
		}
		if err := xml.Unmarshal(body, &doc); err != nil || doc.Code != "AccessDenied" || doc.Message != "Access Denied" || doc.RequestID == "" {
			t.Fatalf("body %s: %v", body, err)
		}
		if resp.Header.Get("X-Amzn-Query-Error") != "" || b.hits.Load() != 0 {
			t.Errorf("headers %v, %d requests reached the server", resp.Header, b.hits.Load())
		}
	})

	t.Run("LostAck", func(t *testing.T) {
		t.Parallel()
		b := setup(t, service)
		b.next(awsfault.LostAck)
		_, _, err := b.call(t.Context(), t, "Send")
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("err %v, want a connection reset", err)
		}
		if got := b.hits.Load(); got != 1 {
			t.Errorf("%d requests reached the server, want 1: a lost answer is a request that happened", got)
		}
	})

	t.Run("Reset", func(t *testing.T) {
		t.Parallel()
		b := setup(t, service)
		b.next(awsfault.Reset)
		_, _, err := b.call(t.Context(), t, "Send")
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("err %v, want a connection reset", err)
		}
		if got := b.hits.Load(); got != 0 {
			t.Errorf("%d requests reached the server, want 0", got)
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, service)
		b.next(awsfault.Timeout)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, _, err := b.call(ctx, t, "Send")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want the context's deadline", err)
		}
		if got := b.hits.Load(); got != 0 {
			t.Errorf("%d requests reached the server, want 0", got)
		}
	})

	for _, tc := range []struct {
		kind       awsfault.Kind
		want       awsfault.Answer
		queryError string
	}{
		{awsfault.Throttle, service.Throttle, "SlowDown;Sender"},
		{awsfault.ServerError, service.ServerError, "Broken;Receiver"},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			for _, queryCompatible := range []bool{true, false} {
				s := service
				s.QueryCompatible = queryCompatible
				b := setup(t, s)
				b.next(tc.kind)
				resp, body, err := b.call(t.Context(), t, "Send")
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.want.Status {
					t.Errorf("status %d, want %d", resp.StatusCode, tc.want.Status)
				}
				var got struct {
					Type    string `json:"__type"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatalf("body %q: %v", body, err)
				}
				if got.Type != s.Namespace+tc.want.Code || got.Message != tc.want.Message {
					t.Errorf("body %q, want __type %q and message %q", body, s.Namespace+tc.want.Code, tc.want.Message)
				}
				want := ""
				if queryCompatible {
					want = tc.queryError
				}
				if h := resp.Header.Get("X-Amzn-Query-Error"); h != want {
					t.Errorf("query-compatible %v: X-Amzn-Query-Error %q, want %q", queryCompatible, h, want)
				}
				if resp.Header.Get("X-Amzn-Requestid") == "" {
					t.Error("no X-Amzn-Requestid")
				}
				if got := b.hits.Load(); got != 0 {
					t.Errorf("%d requests reached the server, want 0", got)
				}
			}
		})
	}

	t.Run("Counts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, service)
		b.next(awsfault.Reset, awsfault.Reset, "", awsfault.Throttle)
		for range 4 {
			_, _, _ = b.call(t.Context(), t, "Send")
		}
		_, _, _ = b.call(t.Context(), t, "Receive")
		if got := b.tr.Requests("Send"); got != 4 {
			t.Errorf("Requests(Send) = %d, want 4", got)
		}
		if got := b.tr.Requests(""); got != 5 {
			t.Errorf(`Requests("") = %d, want 5`, got)
		}
		if got := b.tr.Count("Send", awsfault.Reset); got != 2 {
			t.Errorf("Count(Send, Reset) = %d, want 2", got)
		}
		counts := b.tr.Counts()
		if len(counts) != 1 || len(counts["Send"]) != 2 || counts["Send"][awsfault.Throttle] != 1 {
			t.Errorf("Counts() = %v, want Send: 2 resets and 1 throttle", counts)
		}
		counts["Send"][awsfault.Reset] = 99
		if got := b.tr.Count("Send", awsfault.Reset); got != 2 {
			t.Errorf("changing the snapshot changed the count to %d", got)
		}
	})
}

func TestOperation(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]string{
		"AmazonSQS.ReceiveMessage":     "ReceiveMessage",
		"DynamoDB_20120810.UpdateItem": "UpdateItem",
		"NoDot":                        "NoDot",
		"":                             "",
	} {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if target != "" {
			req.Header.Set("X-Amz-Target", target)
		}
		if got := awsfault.Operation(req); got != want {
			t.Errorf("Operation(%q) = %q, want %q", target, got, want)
		}
	}
}

func TestNewRejectsNil(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"base":   func() { awsfault.New(nil, service, func(string) awsfault.Kind { return "" }) },
		"choose": func() { awsfault.New(http.DefaultTransport, service, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New with a nil %s did not panic", name)
				}
			}()
			f()
		}()
	}
}
