package sqstest

import (
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"sync"

	"github.com/sqsonce/sqsonce/internal/awsfault"
	"github.com/sqsonce/sqsonce/internal/loopback"
)

// Kind is a kind of fault a [Faults] transport injects.
type Kind = awsfault.Kind

// The fault kinds. Only LostAck lets the request reach the server.
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
)

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
// A Faults is safe for concurrent use. Rates and the enabled switch may be
// changed while requests are in flight; a change applies to requests that
// start afterwards.
type Faults struct {
	rt *awsfault.Transport

	mu      sync.Mutex
	rng     *mrand.Rand
	enabled bool
	rates   map[string]Rates
}

// NewFaults returns an enabled Faults with no rates set, drawing from a
// source seeded with seed and forwarding to base; a nil base means a clone
// of [http.DefaultTransport] without proxy.
func NewFaults(seed uint64, base http.RoundTripper) *Faults {
	if base == nil {
		base = loopback.Transport()
	}
	f := &Faults{
		rng:     mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		enabled: true,
		rates:   make(map[string]Rates),
	}
	f.rt = awsfault.New(base, SQSErrors, f.pick)
	return f
}

// Set sets the fault rates of operation op (e.g. "DeleteMessage"),
// replacing earlier ones; zero Rates turn its faults off. It panics if r is
// invalid (a rate outside [0, 1] or a sum above 1).
func (f *Faults) Set(op string, r Rates) {
	if err := r.validate(); err != nil {
		panic(fmt.Sprintf("sqstest.Faults.Set(%q): %v", op, err))
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
// operation and kind. A fault counts when it is chosen, before it takes
// effect. The caller owns the returned maps.
func (f *Faults) Counts() map[string]map[Kind]int {
	return f.rt.Counts()
}

// Count returns the number of faults of kind k injected so far into
// operation op.
func (f *Faults) Count(op string, k Kind) int {
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
