package sqstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"

	"github.com/sqsonce/sqsonce/internal/awsfault"
	"github.com/sqsonce/sqsonce/internal/loopback"
)

// Kind is a kind of fault a [Faults] transport injects.
type Kind = awsfault.Kind

// The fault kinds. Of the faults of a whole request, only LostAck lets the
// request reach the server.
const (
	// Throttle answers HTTP 400 with the SQS JSON-protocol error
	// RequestThrottled (body __type "com.amazonaws.sqs#RequestThrottled" and
	// header X-Amzn-Query-Error "RequestThrottled;Sender"). The SDK decodes it
	// as *types.RequestThrottled, which its retryer classifies as a
	// retryable throttling error.
	Throttle = awsfault.Throttle
	// ServerError answers HTTP 500 with error code InternalFailure (fault
	// "Receiver"), which the SDK classifies as retryable.
	ServerError = awsfault.ServerError
	// Timeout blocks until the request's context ends (its deadline, its
	// cancellation or the HTTP client's timeout) and returns an error
	// wrapping the context's error.
	Timeout = awsfault.Timeout
	// Reset returns an error wrapping syscall.ECONNRESET, as if the
	// connection broke before the request was sent.
	Reset = awsfault.Reset
	// LostAck forwards the request, so it takes effect on the server, reads
	// and discards the response, then returns an error wrapping
	// syscall.ECONNRESET: the request happened but the client never learns
	// it. The SDK retries such errors, so a retried LostAck SendMessage
	// leaves duplicates behind.
	LostAck = awsfault.LostAck
	// EntryFailure fails one entry of a batch request that reaches the
	// server (SendMessageBatch, DeleteMessageBatch,
	// ChangeMessageVisibilityBatch), as SQS fails an entry on its side: the
	// entry is left out of the request the server sees, and the answer
	// lists it in Failed with SenderFault false, code InternalError (the
	// code AWS has answered for such an entry, aws/aws-sdk-java#2562). The
	// call itself succeeds; the SDK does not retry the entry. It is counted
	// per entry.
	EntryFailure Kind = "EntryFailure"
)

// batchOps are the operations whose entries EntryFailure fails.
var batchOps = map[string]bool{"SendMessageBatch": true, "DeleteMessageBatch": true, "ChangeMessageVisibilityBatch": true}

// entryFailure is the Failed entry of an entry failed by EntryFailure.
type entryFailure struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message"`
}

// SQSErrors is how SQS answers the faults Throttle and ServerError
// (awsJson1_0, query-compatible).
var SQSErrors = awsfault.Service{
	Namespace:       "com.amazonaws.sqs#",
	QueryCompatible: true,
	Throttle:        awsfault.Answer{Status: http.StatusBadRequest, Code: "RequestThrottled", Message: "Rate exceeded"},
	ServerError: awsfault.Answer{Status: http.StatusInternalServerError, Code: "InternalFailure",
		Message: "The request processing has failed because of an unknown error, exception or failure."},
}

// kinds lists the fault kinds in the order [Faults] draws them.
var kinds = [...]Kind{Throttle, ServerError, Timeout, Reset, LostAck}

// Rates gives, for one operation, the probability in [0, 1] that one request
// gets each kind of fault. Their sum must not exceed 1; for the remaining
// probability the request is forwarded untouched.
type Rates struct {
	Throttle, ServerError, Timeout, Reset, LostAck float64
	// EntryFailure is the probability in [0, 1] that each entry of a
	// batch request that reaches the server (no fault, or LostAck) fails
	// on its own (see [EntryFailure]), drawn entry by entry; it is not part
	// of the sum above. Only the batch operations SendMessageBatch,
	// DeleteMessageBatch and ChangeMessageVisibilityBatch have entries.
	EntryFailure float64
}

func (r Rates) of(k Kind) float64 {
	switch k {
	case Throttle:
		return r.Throttle
	case ServerError:
		return r.ServerError
	case Timeout:
		return r.Timeout
	case Reset:
		return r.Reset
	case LostAck:
		return r.LostAck
	}
	return 0
}

func (r Rates) validate() error {
	sum := 0.0
	for _, k := range kinds {
		p := r.of(k)
		if !(p >= 0 && p <= 1) { // also rejects NaN
			return fmt.Errorf("rate of %s is %v, want a value in [0, 1]", k, p)
		}
		sum += p
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("rates sum to %v > 1", sum)
	}
	if p := r.EntryFailure; !(p >= 0 && p <= 1) {
		return fmt.Errorf("rate of %s is %v, want a value in [0, 1]", EntryFailure, p)
	}
	return nil
}

// Faults is an [http.RoundTripper] for an SQS client that injects faults
// into chosen operations and forwards everything else to a base transport.
//
// The operation of a request is the X-Amz-Target header without its
// "AmazonSQS." prefix, e.g. "ReceiveMessage". Each request of an operation
// with non-zero [Rates] draws one number from a pseudo-random source seeded
// by [NewFaults] to decide which fault, if any, it gets; requests of other
// operations draw nothing. A run that issues requests in the same order
// therefore gets the same faults; with concurrent requests the order, and so
// the assignment, depends on scheduling.
//
// A batch request that reaches the server then draws one number per
// entry if its operation has a non-zero [Rates].EntryFailure.
//
// A Faults is safe for concurrent use. Rates and the enabled switch may be
// changed while requests are in flight; a change applies to requests that
// start afterwards.
type Faults struct {
	rt   *awsfault.Transport
	base http.RoundTripper

	mu       sync.Mutex
	rng      *mrand.Rand
	enabled  bool
	rates    map[string]Rates
	failures map[string]int // entries failed, by operation
}

// NewFaults returns an enabled Faults with no rates set, drawing from a
// source seeded with seed and forwarding to base; a nil base means a clone
// of [http.DefaultTransport] without proxy.
func NewFaults(seed uint64, base http.RoundTripper) *Faults {
	if base == nil {
		base = loopback.Transport()
	}
	f := &Faults{
		base:     base,
		rng:      mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		enabled:  true,
		rates:    make(map[string]Rates),
		failures: make(map[string]int),
	}
	f.rt = awsfault.New(roundTripper(f.failEntries), SQSErrors, f.pick)
	return f
}

// Set sets the fault rates of operation op (e.g. "DeleteMessage"),
// replacing earlier ones; zero Rates turn its faults off. It panics if r is
// invalid (a rate outside [0, 1], a sum above 1, or an EntryFailure rate
// for an operation without entries).
func (f *Faults) Set(op string, r Rates) {
	if err := r.validate(); err != nil {
		panic(fmt.Sprintf("sqstest.Faults.Set(%q): %v", op, err))
	}
	if r.EntryFailure > 0 && !batchOps[op] {
		panic(fmt.Sprintf("sqstest.Faults.Set(%q): %s rate for an operation without entries", op, EntryFailure))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r == (Rates{}) {
		delete(f.rates, op)
		return
	}
	f.rates[op] = r
}

// SetEnabled turns fault injection on or off. While off, every request is
// forwarded untouched and no random numbers are drawn; rates and counters
// are kept.
func (f *Faults) SetEnabled(on bool) {
	f.mu.Lock()
	f.enabled = on
	f.mu.Unlock()
}

// Enabled reports whether fault injection is on.
func (f *Faults) Enabled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enabled
}

// Counts returns a snapshot of the number of faults injected so far, by
// operation and kind (EntryFailure counts entries). A fault counts when it
// is chosen, before it takes effect. The caller owns the returned maps.
func (f *Faults) Counts() map[string]map[Kind]int {
	counts := f.rt.Counts()
	f.mu.Lock()
	defer f.mu.Unlock()
	for op, n := range f.failures {
		if counts[op] == nil {
			counts[op] = make(map[Kind]int)
		}
		counts[op][EntryFailure] = n
	}
	return counts
}

// Count returns the number of faults of kind k injected so far into
// operation op (for EntryFailure, the number of entries failed).
func (f *Faults) Count(op string, k Kind) int {
	if k == EntryFailure {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.failures[op]
	}
	return f.rt.Count(op, k)
}

// pick decides the fault, if any, for one request of operation op. It
// returns "" for no fault.
func (f *Faults) pick(op string) Kind {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rates[op]
	if !f.enabled || !ok {
		return ""
	}
	u := f.rng.Float64()
	acc := 0.0
	for _, k := range kinds {
		acc += r.of(k)
		if u < acc {
			return k
		}
	}
	return ""
}

// Operation returns the SQS operation of req: its X-Amz-Target header
// without the "AmazonSQS." prefix, or "" if the header is absent.
func Operation(req *http.Request) string {
	return awsfault.Operation(req)
}

// RoundTrip implements [http.RoundTripper]; see [Kind] for what each fault
// does. Requests without a fault go to the base transport unchanged.
func (f *Faults) RoundTrip(req *http.Request) (*http.Response, error) {
	return f.rt.RoundTrip(req)
}

// CloseIdleConnections closes idle connections of the base transport, if
// it has such a method; [http.Client.CloseIdleConnections] calls it.
func (f *Faults) CloseIdleConnections() {
	f.rt.CloseIdleConnections()
}

// roundTripper adapts a function to [http.RoundTripper].
type roundTripper func(*http.Request) (*http.Response, error)

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return rt(req) }

// failEntries forwards a request that no fault kept from the server to the
// base transport, first failing entries of a batch request at the
// operation's EntryFailure rate: the server sees the others (or nothing,
// when every entry failed), and the answer lists the failed ones in Failed
// besides what the server answered.
func (f *Faults) failEntries(req *http.Request) (*http.Response, error) {
	op := Operation(req)
	f.mu.Lock()
	on := f.enabled && f.rates[op].EntryFailure > 0 && req.Body != nil
	f.mu.Unlock()
	if !on {
		return f.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("sqstest.Faults: read the %s request: %w", op, err)
	}
	var fields map[string]json.RawMessage
	var entries []json.RawMessage
	if json.Unmarshal(body, &fields) != nil || json.Unmarshal(fields["Entries"], &entries) != nil {
		return f.base.RoundTrip(withBody(req, body)) // for the server to refuse
	}
	var kept []json.RawMessage
	var failed []entryFailure
	f.mu.Lock()
	rate := f.rates[op].EntryFailure
	for _, e := range entries {
		var id struct {
			ID string `json:"Id"`
		}
		if f.enabled && rate > 0 && json.Unmarshal(e, &id) == nil && f.rng.Float64() < rate {
			failed = append(failed, entryFailure{ID: id.ID, Code: "InternalError", Message: SQSErrors.ServerError.Message})
			continue
		}
		kept = append(kept, e)
	}
	f.failures[op] += len(failed)
	f.mu.Unlock()
	if len(failed) == 0 {
		return f.base.RoundTrip(withBody(req, body))
	}
	if len(kept) == 0 {
		return batchAnswer(req, map[string]json.RawMessage{"Successful": json.RawMessage("[]")}, failed)
	}
	if fields["Entries"], err = json.Marshal(kept); err != nil {
		return nil, err
	}
	if body, err = json.Marshal(fields); err != nil {
		return nil, err
	}
	resp, err := f.base.RoundTrip(withBody(req, body))
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err // refused as a whole: the server's answer stands
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("sqstest.Faults: read the %s answer: %w", op, err)
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(answer, &result); err != nil {
		return nil, fmt.Errorf("sqstest.Faults: the %s answer %q: %w", op, answer, err)
	}
	merged, err := batchAnswer(req, result, failed)
	if err != nil {
		return nil, err
	}
	merged.Header = resp.Header.Clone()
	merged.Header.Set("Content-Length", strconv.FormatInt(merged.ContentLength, 10))
	return merged, nil
}

// withBody returns a copy of req that sends body.
func withBody(req *http.Request, body []byte) *http.Request {
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.ContentLength = int64(len(body))
	return out
}

// batchAnswer returns a 200 answer to the batch request req: result (the
// server's answer, or the empty one) with failed added to its Failed
// entries.
func batchAnswer(req *http.Request, result map[string]json.RawMessage, failed []entryFailure) (*http.Response, error) {
	var all []any
	if raw, ok := result["Failed"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &all); err != nil {
			return nil, fmt.Errorf("sqstest.Faults: the Failed entries %s: %w", raw, err)
		}
	}
	for _, e := range failed {
		all = append(all, e)
	}
	var err error
	if result["Failed"], err = json.Marshal(all); err != nil {
		return nil, err
	}
	body, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	h := make(http.Header)
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}
