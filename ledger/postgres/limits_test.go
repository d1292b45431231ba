package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

func limitsOpen(t *testing.T) (*Ledger, *ledgertest.Clock) {
	t.Helper()
	clock := ledgertest.NewClock()
	url, _ := pgtest.Schema(t)
	opts := Options{URL: url, Retention: ledgertest.Retention, Now: clock.Now}
	if err := Init(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	l, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clock
}

// TestLimits_HostCachesPruned: what a handle remembers of rate buckets
// (made) and slot pools (verified) is pruned once no longer trusted
// (older than bucketVerify, slotVerify): with a partition per tenant, a
// long-running worker saw each value once, and kept every one. The
// entries' host times, and the last pruning's, are set back by three
// minutes here, in place of waiting that long.
func TestLimits_HostCachesPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, clock := limitsOpen(t)
	const values = 200
	for i := range values {
		name := fmt.Sprintf("queue | pointer /tenant = %d", i)
		if _, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: name, Rate: 5, Burst: 1}},
			Tokens: []ledger.Token{{Buckets: []int{0}}}}); err != nil {
			t.Fatal(err)
		}
		out, err := l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: name, Limit: 1, N: 1, Owner: "o", Lease: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if errs := l.ReleaseSlots(ctx, out[0]); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	// Time passes: the values are idle, their rows swept.
	l.flow.mu.Lock()
	for k, v := range l.flow.made {
		l.flow.made[k] = v.Add(-3 * time.Minute)
	}
	for k, v := range l.flow.verified {
		v.at = v.at.Add(-3 * time.Minute)
		l.flow.verified[k] = v
	}
	l.flow.pruned = l.flow.pruned.Add(-3 * time.Minute)
	l.flow.mu.Unlock()
	clock.Advance(2 * ledger.BucketIdle)
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: "other", Rate: 5, Burst: 1}},
		Tokens: []ledger.Token{{Buckets: []int{0}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: "other", Limit: 1, N: 1, Owner: "o", Lease: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	l.flow.mu.Lock()
	made, verified := len(l.flow.made), len(l.flow.verified)
	l.flow.mu.Unlock()
	if made > values/2 || verified > values/2 {
		t.Errorf("after %d idle partition values were swept: this handle still remembers %d buckets and %d pools", values, made, verified)
	}
}

// TestLimits_ReserveManyTokens: the most tokens a call may take
// (ledger.MaxTokens) are planned by the statement, which plans token by
// token.
func TestLimits_ReserveManyTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := limitsOpen(t)
	ts := make([]ledger.Token, ledger.MaxTokens)
	for i := range ts {
		ts[i] = ledger.Token{Buckets: []int{0}}
	}
	g, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: "many", Rate: 1e6, Burst: 1}}, Tokens: ts})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Taken[len(ts)-1] || g.Starts[len(ts)-1] < time.Duration(len(ts)-1)*time.Microsecond {
		t.Errorf("the last of %d tokens at 10⁶/s: taken %v, start %v", len(ts), g.Taken[len(ts)-1], g.Starts[len(ts)-1])
	}
}
