package dynamotest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Kind is a kind of fault a [Faults] transport injects.
type Kind string

// The fault kinds. Only LostAck lets the request reach the server.
const (
	// LostAck forwards the request, so it takes effect on the server,
	// reads and discards the answer, then returns an error wrapping
	// syscall.ECONNRESET: the request happened but the client never
	// learns it. The SDK retries such errors.
	LostAck Kind = "LostAck"
	// Reset returns an error wrapping syscall.ECONNRESET, as if the
	// connection broke before the request was sent.
	Reset Kind = "Reset"
	// Throttle answers HTTP 400 with the DynamoDB error
	// ThrottlingException, which the SDK retries with back-off.
	Throttle Kind = "Throttle"
	// ServerError answers HTTP 500 with InternalServerError, which the SDK
	// retries.
	ServerError Kind = "ServerError"
	// Timeout blocks until the request's context ends and returns an
	// error wrapping the context's error.
	Timeout Kind = "Timeout"
)

// Faults is an [http.RoundTripper] for a DynamoDB client that injects
// faults into chosen requests, as scripted by [Faults.Next] and
// [Faults.Always], and forwards everything else to a base transport. It
// counts the requests of each operation, faulted or not.
//
// The operation of a request is the X-Amz-Target header without its
// "DynamoDB_20120810." prefix, e.g. "UpdateItem". A Faults is safe for
// concurrent use.
type Faults struct {
	base http.RoundTripper

	mu       sync.Mutex
	next     map[string][]Kind
	always   map[string]Kind
	requests map[string]int
	faults   map[string]map[Kind]int
}

// NewFaults returns a Faults with nothing scripted that forwards to base;
// a nil base means [LoopbackTransport].
func NewFaults(base http.RoundTripper) *Faults {
	if base == nil {
		base = LoopbackTransport()
	}
	return &Faults{
		base:     base,
		next:     map[string][]Kind{},
		always:   map[string]Kind{},
		requests: map[string]int{},
		faults:   map[string]map[Kind]int{},
	}
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if op == "" {
		n := 0
		for _, c := range f.requests {
			n += c
		}
		return n
	}
	return f.requests[op]
}

// Count returns how many faults of kind k were injected into operation op.
func (f *Faults) Count(op string, k Kind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults[op][k]
}

func (f *Faults) pick(op string) Kind {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[op]++
	var k Kind
	if q := f.next[op]; len(q) > 0 {
		k, f.next[op] = q[0], q[1:]
	} else {
		k = f.always[op]
	}
	if k != "" {
		if f.faults[op] == nil {
			f.faults[op] = map[Kind]int{}
		}
		f.faults[op][k]++
	}
	return k
}

// Operation returns the DynamoDB operation of req: its X-Amz-Target header
// after the last dot, or "" if the header is absent.
func Operation(req *http.Request) string {
	target := req.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(target, '.'); i >= 0 {
		return target[i+1:]
	}
	return target
}

// RoundTrip implements [http.RoundTripper]; see [Kind] for what each fault
// does.
func (f *Faults) RoundTrip(req *http.Request) (*http.Response, error) {
	op := Operation(req)
	kind := f.pick(op)
	switch kind {
	case "":
		return f.base.RoundTrip(req)
	case LostAck:
		resp, err := f.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, connReset(op, kind)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	switch kind {
	case Throttle:
		return errorResponse(req, http.StatusBadRequest, "ThrottlingException", "Rate of requests exceeds the allowed throughput."), nil
	case ServerError:
		return errorResponse(req, http.StatusInternalServerError, "InternalServerError", "Internal server error"), nil
	case Timeout:
		<-req.Context().Done()
		return nil, fmt.Errorf("dynamotest: injected %s on %s: %w", kind, op, context.Cause(req.Context()))
	default: // Reset
		return nil, connReset(op, kind)
	}
}

// CloseIdleConnections closes idle connections of the base transport, if
// it has such a method.
func (f *Faults) CloseIdleConnections() {
	if c, ok := f.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func connReset(op string, kind Kind) error {
	return fmt.Errorf("dynamotest: injected %s on %s: %w", kind, op, &net.OpError{
		Op:  "read",
		Net: "tcp",
		Err: os.NewSyscallError("read", syscall.ECONNRESET),
	})
}

// errorResponse builds a DynamoDB (awsJson1_0) error answer.
func errorResponse(req *http.Request, status int, code, msg string) *http.Response {
	body, _ := json.Marshal(map[string]string{
		"__type":  "com.amazonaws.dynamodb.v20120810#" + code,
		"message": msg,
	})
	h := make(http.Header)
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(string(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
