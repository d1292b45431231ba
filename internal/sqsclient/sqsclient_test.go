package sqsclient

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

type recordDo struct {
	got *http.Request
}

func (r *recordDo) Do(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// opaque is a body type net/http cannot see through, as the SDK's is.
type opaque struct{ io.Reader }

func (opaque) Close() error { return nil }

func TestInMemoryBodies(t *testing.T) {
	rec := &recordDo{}
	o := sqs.Options{HTTPClient: rec}
	InMemoryBodies(&o)
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
	req.Body = opaque{strings.NewReader(`{"QueueUrl":"q"}`)}
	req.ContentLength = -1
	if _, err := o.HTTPClient.Do(req); err != nil {
		t.Fatal(err)
	}
	if rec.got.ContentLength != 16 || rec.got.GetBody == nil {
		t.Fatalf("content length %d, GetBody set %v", rec.got.ContentLength, rec.got.GetBody != nil)
	}
	for range 2 { // the body and a replay of it for a retry
		b, _ := io.ReadAll(rec.got.Body)
		if string(b) != `{"QueueUrl":"q"}` {
			t.Fatalf("body %q", b)
		}
		rec.got.Body, _ = rec.got.GetBody()
	}
	// A request without a body passes through untouched.
	req2, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if _, err := o.HTTPClient.Do(req2); err != nil || rec.got.Body != nil {
		t.Fatalf("bodyless request: %v, body %v", err, rec.got.Body)
	}
}
