package awsfault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Kind is a kind of fault a [Transport] injects.
type Kind string

// The fault kinds. Only LostAck lets the request reach the server.
const (
	// Throttle answers with the service's throttling error,
	// [Service].Throttle.
	Throttle Kind = "Throttle"
	// ServerError answers with the service's internal error,
	// [Service].ServerError.
	ServerError Kind = "ServerError"
	// Timeout blocks until the request's context ends (its deadline, its
	// cancellation or the HTTP client's timeout) and returns an error
	// wrapping the context's error.
	Timeout Kind = "Timeout"
	// Reset returns an error wrapping syscall.ECONNRESET, as if the
	// connection broke before the request was sent.
	Reset Kind = "Reset"
	// LostAck forwards the request, so it takes effect on the server, reads
	// and discards the answer, then returns an error wrapping
	// syscall.ECONNRESET: the request happened but the client never learns
	// it. The SDK retries such errors.
	LostAck Kind = "LostAck"
	// Denied answers with the service's refusal for want of a permission,
	// [Service].Denied, as an IAM policy without the action does.
	Denied Kind = "Denied"
)

// Answer is an error answer of a service.
type Answer struct {
	// Status is the HTTP status: 4xx for an error of the sender, 5xx for
	// one of the service.
	Status int
	// Code names the error, e.g. "ThrottlingException".
	Code string
	// Message is the error's message.
	Message string
}

// Service describes how a service answers errors: in the AWS JSON protocol
// (awsJson1_0), or in S3's REST-XML when XML is set.
type Service struct {
	// Namespace comes before Code in the answer's __type, e.g.
	// "com.amazonaws.sqs#".
	Namespace string
	// QueryCompatible adds the header X-Amzn-Query-Error "Code;Sender" (or
	// "Code;Receiver" for a 5xx status), as services that moved from the
	// query protocol, such as SQS, send it.
	QueryCompatible bool
	// XML answers as S3 does: an <Error> document with Code and Message,
	// Content-Type application/xml. Namespace and QueryCompatible are then
	// ignored.
	XML bool
	// Throttle, ServerError and Denied are the answers to requests given
	// those faults.
	Throttle, ServerError, Denied Answer
}

// Transport is an [http.RoundTripper] for an AWS client that gives each
// request the fault its choice function picks, if any, and forwards the
// other requests to a base transport. It counts the requests of each
// operation and the faults injected into them.
//
// A Transport is safe for concurrent use if its choice function is.
type Transport struct {
	base    http.RoundTripper
	service Service
	choose  func(op string) Kind

	mu       sync.Mutex
	requests map[string]int
	faults   map[string]map[Kind]int
}

// New returns a Transport that forwards to base, answers faults as service
// s does, and asks choose for the fault of each request, once per request,
// given the request's [Operation]; choose returns "" for no fault. New
// panics if base or choose is nil.
func New(base http.RoundTripper, s Service, choose func(op string) Kind) *Transport {
	if base == nil || choose == nil {
		panic("awsfault.New: nil base transport or choice function")
	}
	return &Transport{
		base:     base,
		service:  s,
		choose:   choose,
		requests: make(map[string]int),
		faults:   make(map[string]map[Kind]int),
	}
}

// Operation returns the operation of req: its X-Amz-Target header after
// the last dot (e.g. "ReceiveMessage" for "AmazonSQS.ReceiveMessage"), or
// "" if the header is absent.
func Operation(req *http.Request) string {
	target := req.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(target, '.'); i >= 0 {
		return target[i+1:]
	}
	return target
}

// RoundTrip implements [http.RoundTripper]; see [Kind] for what each fault
// does. Requests without a fault go to the base transport unchanged.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := Operation(req)
	kind := t.choose(op)
	t.count(op, kind)
	switch kind {
	case "":
		return t.base.RoundTrip(req)
	case LostAck:
		resp, err := t.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, connReset(op, kind)
	}

	// The other faults never reach the server; RoundTrip must still close
	// the request body.
	if req.Body != nil {
		_ = req.Body.Close()
	}
	switch kind {
	case Throttle:
		return t.service.answer(req, t.service.Throttle), nil
	case ServerError:
		return t.service.answer(req, t.service.ServerError), nil
	case Denied:
		return t.service.answer(req, t.service.Denied), nil
	case Timeout:
		ctx := req.Context()
		<-ctx.Done()
		return nil, fmt.Errorf("awsfault: injected %s on %s: %w", kind, op, context.Cause(ctx))
	default: // Reset, or a kind this package does not know
		return nil, connReset(op, kind)
	}
}

// CloseIdleConnections closes idle connections of the base transport, if
// it has such a method; [http.Client.CloseIdleConnections] calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// count counts one request of operation op and its fault, if any. A fault
// counts when it is chosen, before it takes effect.
func (t *Transport) count(op string, k Kind) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests[op]++
	if k == "" {
		return
	}
	if t.faults[op] == nil {
		t.faults[op] = make(map[Kind]int)
	}
	t.faults[op][k]++
}

// Requests returns how many requests of operation op the transport has
// seen, faulted or not; op "" counts every operation.
func (t *Transport) Requests(op string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if op == "" {
		n := 0
		for _, c := range t.requests {
			n += c
		}
		return n
	}
	return t.requests[op]
}

// Count returns how many faults of kind k were injected into operation op.
func (t *Transport) Count(op string, k Kind) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.faults[op][k]
}

// Counts returns a snapshot of the number of faults injected so far, by
// operation and kind; an operation without faults has no entry. The caller
// owns the returned maps.
func (t *Transport) Counts() map[string]map[Kind]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]map[Kind]int, len(t.faults))
	for op, byKind := range t.faults {
		out[op] = maps.Clone(byKind)
	}
	return out
}

// connReset returns an error shaped like the one net/http reports when the
// peer resets the connection: it wraps a *net.OpError and syscall.ECONNRESET.
func connReset(op string, kind Kind) error {
	return fmt.Errorf("awsfault: injected %s on %s: %w", kind, op, &net.OpError{
		Op:  "read",
		Net: "tcp",
		Err: os.NewSyscallError("read", syscall.ECONNRESET),
	})
}

// answer builds the service's error answer a to req.
func (s Service) answer(req *http.Request, a Answer) *http.Response {
	id := requestID()
	var body []byte
	h := make(http.Header)
	if s.XML {
		var doc struct {
			XMLName   xml.Name `xml:"Error"`
			Code      string
			Message   string
			RequestID string `xml:"RequestId"`
		}
		doc.Code, doc.Message, doc.RequestID = a.Code, a.Message, id
		out, _ := xml.Marshal(doc)
		body = append([]byte(xml.Header), out...)
		h.Set("Content-Type", "application/xml")
		h.Set("X-Amz-Request-Id", id)
	} else {
		body, _ = json.Marshal(map[string]string{
			"__type":  s.Namespace + a.Code,
			"message": a.Message,
		})
		h.Set("Content-Type", "application/x-amz-json-1.0")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if s.QueryCompatible && !s.XML {
		fault := "Sender"
		if a.Status >= 500 {
			fault = "Receiver"
		}
		h.Set("X-Amzn-Query-Error", a.Code+";"+fault)
	}
	h.Set("X-Amzn-Requestid", id)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status)),
		StatusCode:    a.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(string(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
