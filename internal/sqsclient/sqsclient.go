// Package sqsclient holds what every AWS client of this module (SQS, and
// DynamoDB for the shared ledger) needs beyond the AWS SDK's defaults: the
// binary, the tools and the tests build their clients with it.
package sqsclient

import (
	"bytes"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// InMemoryBodies is an sqs option that hands net/http every request body as
// an in-memory reader.
//
// The SDK wraps request bodies in a reader net/http does not know, so
// net/http copies the body straight to the socket and then checks it for
// bytes beyond Content-Length. The server can answer before that check;
// the SDK then closes its wrapper, the check reads an error instead of EOF,
// and net/http closes the connection under the answer being read ("use of
// closed network connection"). The SDK retries such a call, and the call
// had taken effect: a receive whose answer was lost leaves its messages
// invisible for a visibility timeout, a send whose answer was lost sends
// twice. With a body net/http knows the length of, the check does not run.
func InMemoryBodies(o *sqs.Options) {
	o.HTTPClient = InMemory(o.HTTPClient)
}

// Doer is an HTTP client as the AWS SDK's service clients take it
// (sqs.HTTPClient, dynamodb.HTTPClient).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// InMemory returns next, handing it every request body as an in-memory
// reader, for any service client: see InMemoryBodies.
func InMemory(next Doer) Doer { return inMemoryBodies{next: next} }

type inMemoryBodies struct{ next Doer }

func (c inMemoryBodies) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		data, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		r.ContentLength = int64(len(data))
	}
	return c.next.Do(r)
}
