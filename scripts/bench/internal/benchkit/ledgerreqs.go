package benchkit

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
)

// callKey is the context key under which WithCall records the ledger call
// a request belongs to.
type callKey struct{}

// WithCall returns ctx marked as belonging to the ledger call named call
// ("claim", "complete", …), so that a LedgerRequests counter in the
// client's HTTP transport can tell whose requests it carries.
func WithCall(ctx context.Context, call string) context.Context {
	return context.WithValue(ctx, callKey{}, call)
}

// callOf returns the call ctx was marked with, "other" when none.
func callOf(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(string); ok {
		return c
	}
	return "other"
}

// Doer is an HTTP client as the AWS SDK's service clients take it.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// LedgerRequests counts the HTTP requests of a DynamoDB client by the
// ledger call that made them (see WithCall) and the action, and how many
// are in flight at once. It is safe for concurrent use.
type LedgerRequests struct {
	next Doer

	mu       sync.Mutex
	n        map[string]int64 // "call Action" -> requests
	inFlight int
	most     int
	sum      int64 // in flight as each request started, itself included
	started  int64
}

// NewLedgerRequests returns a counter that passes every request on to next.
func NewLedgerRequests(next Doer) *LedgerRequests {
	return &LedgerRequests{next: next, n: map[string]int64{}}
}

// Do counts req, by its X-Amz-Target action ("DynamoDB_20120810.UpdateItem")
// and its context's call, and passes it on.
func (c *LedgerRequests) Do(req *http.Request) (*http.Response, error) {
	action := req.Header.Get("X-Amz-Target")
	if _, a, ok := strings.Cut(action, "."); ok {
		action = a
	}
	k := callOf(req.Context()) + " " + action
	c.mu.Lock()
	c.n[k]++
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	c.sum += int64(c.inFlight)
	c.started++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
	}()
	return c.next.Do(req)
}

// Counts returns a copy of the counts, keyed "call Action".
func (c *LedgerRequests) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// InFlight returns the most requests that were in flight at once and the
// mean number in flight as a request started, itself included.
func (c *LedgerRequests) InFlight() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	mean := 0.0
	if c.started > 0 {
		mean = float64(c.sum) / float64(c.started)
	}
	return map[string]float64{"max": float64(c.most), "mean": mean}
}
