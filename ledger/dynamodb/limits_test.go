package dynamodb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

func limitsOpen(t *testing.T, hosts int) ([]*Ledger, *ledgertest.Clock) {
	t.Helper()
	ctx := context.Background()
	clock := ledgertest.NewClock()
	c := dynamotest.NewClient(t, nil)
	opts := Options{Table: dynamotest.Table(t, c), Retention: ledgertest.Retention, Now: clock.Now}
	if _, err := Init(ctx, c, opts); err != nil {
		t.Fatal(err)
	}
	ls := make([]*Ledger, hosts)
	for i := range ls {
		l, err := Open(ctx, dynamotest.NewClient(t, nil), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls[i] = l
	}
	return ls, clock
}

// TestLimits_ReserveOneBeyondRetention: the one-request reservation of a
// busy bucket takes only the tokens whose starts fall within MaxRetention:
// when another host moved the bucket since this one saw it, those past it
// are reported not taken, and their intervals are not added to the TAT
// either (they were, leaving the bucket later than Plan, the embedded
// ledger and PostgreSQL put it, and stalled that much longer).
func TestLimits_ReserveOneBeyondRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ls, _ := limitsOpen(t, 2)
	a, b := ls[0], ls[1]
	bk := ledger.Bucket{Name: "slow", Rate: 1.0 / 86400, Burst: 1}
	day := bk.Interval()
	res := func(n int) ledger.Reservation {
		ts := make([]ledger.Token, n)
		for i := range ts {
			ts[i] = ledger.Token{Buckets: []int{0}}
		}
		return ledger.Reservation{Buckets: []ledger.Bucket{bk}, Tokens: ts}
	}
	taken := func(g ledger.Grant) int {
		k := 0
		for _, x := range g.Taken {
			if x {
				k++
			}
		}
		return k
	}
	if _, err := b.Reserve(ctx, res(1)); err != nil { // b sees TAT = now+1 interval
		t.Fatal(err)
	}
	moved := 1
	for range 3 { // a moves it to now+2,701 intervals
		g, err := a.Reserve(ctx, res(900))
		if err != nil {
			t.Fatal(err)
		}
		moved += taken(g)
	}
	g, err := b.Reserve(ctx, res(ledger.MaxTokens)) // fewer fit within MaxRetention
	if err != nil {
		t.Fatal(err)
	}
	fit := int(ledger.MaxRetention/day) - moved + 1
	if fit <= 0 || fit >= ledger.MaxTokens || taken(g) != fit {
		t.Fatalf("took %d tokens from %d intervals, want %d", taken(g), moved, fit)
	}
	g, err = a.Reserve(ctx, res(1))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Duration(moved+fit) * day; g.Next[0] != want {
		t.Errorf("the bucket is next free in %v (%.0f intervals), want %v (%.0f intervals) as Plan has it: %d tokens not taken still moved it",
			g.Next[0], float64(g.Next[0])/float64(day), want, float64(want)/float64(day), ledger.MaxTokens-fit)
	}
}

// TestLimits_HostCachesPruned: what a handle remembers of rate buckets
// (bucket) and of slots it found held (busy) is pruned once it no longer
// helps (a bucket idle for a minute, a busy hint passed): with a partition
// per tenant, a long-running worker saw each value once, and kept every
// one.
func TestLimits_HostCachesPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ls, clock := limitsOpen(t, 2)
	a, b := ls[0], ls[1]
	const values = 100
	for i := range values {
		name := fmt.Sprintf("queue | pointer /tenant = %d", i)
		if _, err := a.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: name, Rate: 5, Burst: 1}},
			Tokens: []ledger.Token{{Buckets: []int{0}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.TakeSlots(ctx, []ledger.SlotRequest{{Pool: name, Limit: 1, N: 1, Owner: "b", Lease: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.TakeSlots(ctx, []ledger.SlotRequest{{Pool: name, Limit: 1, N: 1, Owner: "a", Lease: time.Minute}}); err != nil {
			t.Fatal(err) // finds it held: a busy hint
		}
	}
	clock.Advance(2 * ledger.BucketIdle)
	if _, err := a.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: "other", Rate: 5, Burst: 1}},
		Tokens: []ledger.Token{{Buckets: []int{0}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TakeSlots(ctx, []ledger.SlotRequest{{Pool: "other", Limit: 1, N: 1, Owner: "a", Lease: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	a.flow.mu.Lock()
	buckets, busy := len(a.flow.bucket), len(a.flow.busy)
	a.flow.mu.Unlock()
	if buckets > values/2 || busy > values/2 {
		t.Errorf("after %d idle partition values were swept: this handle still remembers %d buckets and %d busy slots", values, buckets, busy)
	}
}
