package dynamodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// TestFlow_Requests counts the requests of the flow calls of two hosts on
// one table: a reservation of a busy bucket is one UpdateItem, whichever
// host moved the bucket last, with its tokens asked for a lead ahead or not; free slots are one PutItem each, made at
// once; a pool that others hold to its limit costs nothing for a while
// once it was found so.
func TestFlow_Requests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledgertest.NewClock()
	fa, fb := dynamotest.NewFaults(nil), dynamotest.NewFaults(nil)
	opts := newTable(t, dynamotest.NewClient(t, nil), clock)
	a, b := open(t, dynamotest.NewClient(t, fa), opts), open(t, dynamotest.NewClient(t, fb), opts)
	count := func(f *dynamotest.Faults, fn func()) (updates, gets, puts int) {
		u, g, p := f.Requests("UpdateItem"), f.Requests("GetItem"), f.Requests("PutItem")
		fn()
		return f.Requests("UpdateItem") - u, f.Requests("GetItem") - g, f.Requests("PutItem") - p
	}
	reserve := func(l *dynamodb.Ledger, n int) {
		t.Helper()
		_, err := ledgertest.ReserveEach(ctx, l, []ledgertest.Ask{{Bucket: "hot", Rate: 40, Burst: 1, N: n, Within: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The first of each host: a itself makes the bucket, b learns it
	// busy (a read) and writes again.
	if u, g, _ := count(fa, func() { reserve(a, 5) }); u != 1 || g != 0 {
		t.Fatalf("a's first reservation: %d updates, %d reads", u, g)
	}
	if u, g, _ := count(fb, func() { reserve(b, 5) }); u != 2 || g != 1 {
		t.Fatalf("b's first reservation: %d updates, %d reads", u, g)
	}
	for i := range 10 {
		l, f := a, fa
		if i%2 == 1 {
			l, f = b, fb
		}
		if u, g, _ := count(f, func() { reserve(l, 3) }); u != 1 || g != 0 {
			t.Fatalf("reservation %d of a busy bucket: %d updates, %d reads", i, u, g)
		}
		clock.Advance(10 * time.Millisecond)
	}
	// Tokens asked for a lead ahead (one NotBefore for all, as a worker
	// asks) of a bucket busy past it: one UpdateItem too.
	lead := ledger.Reservation{Buckets: []ledger.Bucket{{Name: "hot", Rate: 40, Burst: 1}}}
	for range 3 {
		lead.Tokens = append(lead.Tokens, ledger.Token{Buckets: []int{0}, Within: time.Minute, NotBefore: 100 * time.Millisecond})
	}
	if u, g, _ := count(fa, func() {
		if g, err := a.Reserve(ctx, lead); err != nil || g.Starts[0] < 100*time.Millisecond {
			t.Fatalf("tokens not before 100 ms: %+v, %v", g, err)
		}
	}); u != 1 || g != 0 {
		t.Fatalf("a reservation a lead ahead of a busy bucket: %d updates, %d reads", u, g)
	}

	take := func(l *dynamodb.Ledger, owner string, n int) int {
		t.Helper()
		out, err := l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: "p", Limit: 4, N: n, Owner: owner, Lease: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		return len(out[0])
	}
	if _, g, p := count(fa, func() {
		if got := take(a, "a", 4); got != 4 {
			t.Fatalf("a took %d free slots of 4", got)
		}
	}); p != 4 || g != 0 {
		t.Fatalf("taking 4 free slots: %d puts, %d reads", p, g)
	}
	if _, g, p := count(fb, func() {
		if got := take(b, "b", 2); got != 0 {
			t.Fatalf("b took %d slots of a full pool", got)
		}
	}); p != 2 || g != 2 {
		t.Fatalf("finding a pool full: %d puts, %d reads", p, g)
	}
	if _, g, p := count(fb, func() { take(b, "b", 2) }); p != 0 || g != 0 {
		t.Fatalf("a pool found full a moment ago: %d puts, %d reads", p, g)
	}
}

// TestFlow_LostAnswers: a flow write whose answer was lost, and which the
// SDK sent again, is known by its write id: the retry finds it and
// answers as the write did.
func TestFlow_LostAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := dynamotest.NewFaults(nil)
	opts := newTable(t, dynamotest.NewClient(t, nil), nil)
	l := open(t, dynamotest.NewClient(t, f), opts)
	f.Next("PutItem", dynamotest.LostAck)
	r, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "s", Data: []byte("a")}, 0)
	if err != nil || r.Doc.Version != 1 || f.Count("PutItem", dynamotest.LostAck) != 1 {
		t.Fatalf("a creation whose answer was lost: %+v, %v", r, err)
	}
	f.Next("UpdateItem", dynamotest.LostAck)
	if err := l.DeleteFlow(ctx, "s", 1); err != nil {
		t.Fatalf("a deletion whose answer was lost: %v", err)
	}
	got, err := l.GetFlow(ctx, "s")
	if err != nil || got.Found || got.Doc.Version != 2 {
		t.Fatalf("after the deletion: %+v, %v", got, err)
	}
	if _, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "s"}, 1); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("a write over the deleted version: %v", err)
	}
}
