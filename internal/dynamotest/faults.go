package dynamotest

import (
	"net/http"
	"sync"

	"github.com/sqsonce/sqsonce/internal/awsfault"
)

// Kind is a kind of fault a [Faults] transport injects.
type Kind = awsfault.Kind

// The fault kinds. Only LostAck lets the request reach the server.
const (
	// LostAck forwards the request, so it takes effect on the server,
	// reads and discards the answer, then returns an error wrapping
	// syscall.ECONNRESET: the request happened but the client never
	// learns it. The SDK retries such errors.
	LostAck = awsfault.LostAck
	// Reset returns an error wrapping syscall.ECONNRESET, as if the
	// connection broke before the request was sent.
	Reset = awsfault.Reset
	// Throttle answers HTTP 400 with the DynamoDB error
	// ThrottlingException, which the SDK retries with back-off.
	Throttle = awsfault.Throttle
	// ServerError answers HTTP 500 with InternalServerError, which the SDK
	// retries.
	ServerError = awsfault.ServerError
	// Timeout blocks until the request's context ends and returns an
	// error wrapping the context's error.
	Timeout = awsfault.Timeout
)

// dynamoErrors is how DynamoDB answers the faults Throttle and ServerError
// (awsJson1_0).
var dynamoErrors = awsfault.Service{
	Namespace:   "com.amazonaws.dynamodb.v20120810#",
	Throttle:    awsfault.Answer{Status: http.StatusBadRequest, Code: "ThrottlingException", Message: "Rate of requests exceeds the allowed throughput."},
	ServerError: awsfault.Answer{Status: http.StatusInternalServerError, Code: "InternalServerError", Message: "Internal server error"},
}

// Faults is an [http.RoundTripper] for a DynamoDB client that injects
// faults into chosen requests, as scripted by [Faults.Next] and
// [Faults.Always], and forwards everything else to a base transport. It
// counts the requests of each operation, faulted or not.
//
// The operation of a request is the X-Amz-Target header without its
// "DynamoDB_20120810." prefix, e.g. "UpdateItem". A Faults is safe for
// concurrent use.
type Faults struct {
	rt *awsfault.Transport

	mu     sync.Mutex
	next   map[string][]Kind
	always map[string]Kind
}

// NewFaults returns a Faults with nothing scripted that forwards to base;
// a nil base means [LoopbackTransport].
func NewFaults(base http.RoundTripper) *Faults {
	if base == nil {
		base = LoopbackTransport()
	}
	f := &Faults{
		next:   map[string][]Kind{},
		always: map[string]Kind{},
	}
	f.rt = awsfault.New(base, dynamoErrors, f.pick)
	return f
}

// Next makes the next len(kinds) requests of operation op get these faults,
// in this order, after any scripted before.
func (f *Faults) Next(op string, kinds ...Kind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[op] = append(f.next[op], kinds...)
}

// Always makes every request of operation op get fault k (once what Next
// scripted is used up); "" turns it off.
func (f *Faults) Always(op string, k Kind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k == "" {
		delete(f.always, op)
		return
	}
	f.always[op] = k
}

// Requests returns how many requests of operation op the transport has
// seen, faulted or not; op "" counts every operation.
func (f *Faults) Requests(op string) int {
	return f.rt.Requests(op)
}

// Count returns how many faults of kind k were injected into operation op.
func (f *Faults) Count(op string, k Kind) int {
	return f.rt.Count(op, k)
}

// pick takes the fault, if any, of the next request of operation op from
// the script.
func (f *Faults) pick(op string) Kind {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q := f.next[op]; len(q) > 0 {
		f.next[op] = q[1:]
		return q[0]
	}
	return f.always[op]
}

// Operation returns the DynamoDB operation of req: its X-Amz-Target header
// after the last dot, or "" if the header is absent.
func Operation(req *http.Request) string {
	return awsfault.Operation(req)
}

// RoundTrip implements [http.RoundTripper]; see [Kind] for what each fault
// does.
func (f *Faults) RoundTrip(req *http.Request) (*http.Response, error) {
	return f.rt.RoundTrip(req)
}

// CloseIdleConnections closes idle connections of the base transport, if
// it has such a method.
func (f *Faults) CloseIdleConnections() {
	f.rt.CloseIdleConnections()
}
