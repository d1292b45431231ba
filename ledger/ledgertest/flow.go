package ledgertest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Flow is the part of the contract that flow control uses: the failure
// classes and dead-letter marks of records, flow documents, rate buckets,
// concurrency slots and the process registry.
type Flow interface {
	MarkDeadLettered(ctx context.Context, ds []ledger.DeadLetter) []error
	DeadLetterCounts(ctx context.Context) (map[string]int, error)
	GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error)
	PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error)
	DeleteFlow(ctx context.Context, scope string, ifVersion int64) error
	ListFlows(ctx context.Context) ([]ledger.FlowDoc, error)
	Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error)
	BucketLimits(ctx context.Context, name string) (rate float64, burst int, found bool, err error)
	TakeSlots(ctx context.Context, rs []ledger.SlotRequest) ([][]ledger.Slot, error)
	ExtendSlots(ctx context.Context, ss []ledger.Slot, lease time.Duration) []error
	ReleaseSlots(ctx context.Context, ss []ledger.Slot) []error
	PutProcess(ctx context.Context, p ledger.Process) error
	RemoveProcess(ctx context.Context, id string) error
	Processes(ctx context.Context) ([]ledger.Process, error)
	FlowSchema(ctx context.Context) (int, error)
}

// runFlow is the part of Run that holds the flow contract on one handle.
func runFlow(t *testing.T, setup func(t *testing.T) (Ledger, *Clock)) {
	ctx := context.Background()

	t.Run("FailureClasses", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "bad input"}))
		for _, owner := range []string{"b", "c"} {
			mustClaim(t, l, req("k", owner), ledger.Claimed)
			must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: owner, Err: "503", Outage: true}))
		}
		c := mustClaim(t, l, req("k", "d"), ledger.Claimed)
		if c.Record.OwnFailures != 1 || c.Record.OutageFailures != 2 {
			t.Fatalf("the claim's record: own %d, outage %d; want 1 and 2", c.Record.OwnFailures, c.Record.OutageFailures)
		}
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "d"}))
		// A permanent failure counts as the operation's own.
		mustClaim(t, l, req("p", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "p", Owner: "a", Err: "bad card", Permanent: true}))
		for _, want := range []struct {
			key               string
			own, outage, atts int
		}{{"k", 1, 2, 4}, {"p", 1, 0, 1}} {
			check := func(how string, r ledger.Record) {
				t.Helper()
				if r.OwnFailures != want.own || r.OutageFailures != want.outage || r.Attempts != want.atts {
					t.Fatalf("%s %q: own %d, outage %d, attempts %d; want %d, %d, %d",
						how, want.key, r.OwnFailures, r.OutageFailures, r.Attempts, want.own, want.outage, want.atts)
				}
			}
			r, err := l.Get(ctx, want.key)
			must(t, err)
			check("get", r) // a completion does not reset them
			must(t, l.ForEach(ctx, ledger.Filter{Prefix: want.key}, func(r ledger.Record) error {
				check("for each", r)
				return nil
			}))
			p, err := l.List(ctx, ledger.Filter{Prefix: want.key}, "", 10)
			must(t, err)
			if len(p.Records) != 1 {
				t.Fatalf("list %q: %d records", want.key, len(p.Records))
			}
			check("list", p.Records[0])
		}
		// A forgotten key starts again; so does an expired one.
		must(t, l.Forget(ctx, "k"))
		if c := mustClaim(t, l, req("k", "e"), ledger.Claimed); c.Record.OwnFailures != 0 || c.Record.OutageFailures != 0 {
			t.Fatalf("a forgotten key claimed again: %+v", c.Record)
		}
		clock.Advance(Retention)
		if c := mustClaim(t, l, req("p", "e"), ledger.Claimed); c.Record.OwnFailures != 0 {
			t.Fatalf("an expired key claimed again: %+v", c.Record)
		}
	})

	t.Run("DeadLetterMarks", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		for i, key := range []string{"d1", "d2", "d3"} {
			mustClaim(t, l, req(key, "a"), ledger.Claimed)
			must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: "a", Err: "boom", Permanent: i == 2}))
		}
		clock.Advance(time.Second)
		marked := clock.Now()
		errs := l.MarkDeadLettered(ctx, []ledger.DeadLetter{
			{Key: "d1", Owner: "a", Reason: "GET /orders/8812: 503 from 10.0.0.7"},
			{Key: "d2", Owner: "z", Reason: "GET /orders/17: 503 from 10.0.0.9"},
			{Key: "d3", Owner: "a", Reason: "invalid card 4242", CopyID: "copy-3"},
			{Key: "absent", Owner: "a", Reason: "x"},
			{Key: "", Owner: "a"},
			{Key: "d1", Owner: ""},
		})
		for i, want := range []error{nil, nil, nil, ledger.ErrNotFound, ledger.ErrInvalidKey, ledger.ErrInvalidArgument} {
			if !errors.Is(errs[i], want) || (want == nil) != (errs[i] == nil) {
				t.Fatalf("mark %d: %v, want %v", i, errs[i], want)
			}
		}
		r, err := l.Get(ctx, "d1")
		must(t, err)
		if !r.DeadLettered.Equal(marked) || r.DeadLetterReason != "GET /orders/8812: 503 from 10.0.0.7" || r.DeadLetterCopyID != "" ||
			r.State != ledger.StateFailed || r.Attempts != 1 || r.LastError != "boom" || !r.Updated.Equal(marked) {
			t.Fatalf("marked (intent): %+v", r)
		}
		// The copy was sent: its id is recorded, the reason kept.
		clock.Advance(time.Second)
		must(t, l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "d1", Owner: "a", CopyID: "copy-1"}})[0])
		r, err = l.Get(ctx, "d1")
		must(t, err)
		if r.DeadLetterCopyID != "copy-1" || r.DeadLetterReason != "GET /orders/8812: 503 from 10.0.0.7" || !r.DeadLettered.Equal(clock.Now()) {
			t.Fatalf("marked (sent): %+v", r)
		}
		if r3, err := l.Get(ctx, "d3"); err != nil || r3.State != ledger.StateFailed || !r3.Permanent || r3.DeadLetterCopyID != "copy-3" {
			t.Fatalf("marked permanent failure: %+v, %v", r3, err)
		}
		wantCounts(t, l, map[string]int{"GET /orders/#: # from #": 2, "invalid card #": 1})

		// A record held by another owner's live lease is not marked; one
		// held by the caller's own claim, or a lapsed one, is.
		mustClaim(t, l, req("live", "a"), ledger.Claimed)
		errs = l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "live", Owner: "b", Reason: "r"}, {Key: "live", Owner: "a", Reason: "mine"}})
		if !errors.Is(errs[0], ledger.ErrNotOwner) || errs[1] != nil {
			t.Fatalf("marks of a record in progress: %v", errs)
		}
		clock.Advance(lease)
		must(t, l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "live", Owner: "b", Reason: "lapsed"}})[0])
		if r, err := l.Get(ctx, "live"); err != nil || r.State != ledger.StateInProgress || r.Owner != "a" || r.DeadLetterReason != "lapsed" {
			t.Fatalf("a lapsed claim marked: %+v, %v", r, err)
		}
		wantCounts(t, l, map[string]int{"GET /orders/#: # from #": 2, "invalid card #": 1, "lapsed": 1})

		// A replayed message's claim clears the mark; forgetting a record
		// removes it with the mark.
		c := mustClaim(t, l, req("d1", "b"), ledger.Claimed)
		if !c.Record.DeadLettered.IsZero() || c.Record.DeadLetterReason != "" || c.Record.DeadLetterCopyID != "" || c.Record.OwnFailures != 1 {
			t.Fatalf("a claim after the mark: %+v", c.Record)
		}
		if r, err := l.Get(ctx, "d1"); err != nil || !r.DeadLettered.IsZero() {
			t.Fatalf("read after the claim: %+v, %v", r, err)
		}
		must(t, l.Forget(ctx, "d2"))
		must(t, l.Reset(ctx, "d3")) // what replay does: the mark stays until the claim
		wantCounts(t, l, map[string]int{"invalid card #": 1, "lapsed": 1})
		mustClaim(t, l, req("d3", "b"), ledger.Claimed)
		wantCounts(t, l, map[string]int{"lapsed": 1})
		// An expired record swept takes its mark along.
		clock.Advance(Retention)
		_, err = l.Sweep(ctx)
		must(t, err)
		wantCounts(t, l, map[string]int{})
	})

	t.Run("FlowDocs", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		r, err := l.GetFlow(ctx, "q/a")
		must(t, err)
		if r.Found || r.Doc.Version != 0 || r.Doc.Scope != "q/a" || !r.Now.Equal(clock.Now()) {
			t.Fatalf("an absent document: %+v", r)
		}
		data := []byte{0, 1, 2, 0xff, '{', '}'}
		w, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a", Data: data}, 0)
		must(t, err)
		if !w.Found || w.Doc.Version != 1 || !w.Doc.Updated.Equal(clock.Now()) || !w.Doc.Expires.IsZero() || string(w.Doc.Data) != string(data) {
			t.Fatalf("written: %+v", w)
		}
		clock.Advance(time.Second)
		// A second creation conflicts and is told what is there.
		r, err = l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a", Data: []byte("other")}, 0)
		if !errors.Is(err, ledger.ErrConflict) || !r.Found || r.Doc.Version != 1 || string(r.Doc.Data) != string(data) || !r.Now.Equal(clock.Now()) {
			t.Fatalf("a conflicting creation: %+v, %v", r, err)
		}
		w, err = l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a", Data: []byte("v2"), TTL: time.Minute}, 1)
		must(t, err)
		if w.Doc.Version != 2 || !w.Doc.Expires.Equal(clock.Now().Add(time.Minute)) || w.Doc.TTL != 0 {
			t.Fatalf("second version: %+v", w)
		}
		if _, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a"}, 1); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("a stale write: %v", err)
		}
		r, err = l.GetFlow(ctx, "q/a")
		must(t, err)
		if !r.Found || r.Doc.Version != 2 || string(r.Doc.Data) != "v2" {
			t.Fatalf("read: %+v", r)
		}
		// Expired: absent, its version kept so that no stale writer takes
		// the scope with version 0 or an older one.
		clock.Advance(time.Minute)
		r, err = l.GetFlow(ctx, "q/a")
		must(t, err)
		if r.Found || r.Doc.Version != 2 || r.Doc.Data != nil {
			t.Fatalf("expired: %+v", r)
		}
		if r, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a"}, 0); !errors.Is(err, ledger.ErrConflict) || r.Found || r.Doc.Version != 2 {
			t.Fatalf("a creation over an expired document: %+v, %v", r, err)
		}
		expires := clock.Now().Add(time.Hour)
		w, err = l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a", Data: []byte("v3"), Expires: expires}, 2)
		must(t, err)
		if w.Doc.Version != 3 || !w.Doc.Expires.Equal(expires) {
			t.Fatalf("written over an expired document: %+v", w)
		}
		// Deleted: a tombstone one version on.
		if err := l.DeleteFlow(ctx, "q/a", 2); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("a delete of another version: %v", err)
		}
		must(t, l.DeleteFlow(ctx, "q/a", 3))
		if err := l.DeleteFlow(ctx, "q/a", 4); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a delete of a deleted document: %v", err)
		}
		if _, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "q/a"}, 3); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("a write by a writer that read the deleted version: %v", err)
		}
		r, err = l.GetFlow(ctx, "q/a")
		must(t, err)
		if r.Found || r.Doc.Version != 4 {
			t.Fatalf("deleted: %+v", r)
		}
		// Listing: live documents only, by scope.
		for _, scope := range []string{"q/c", "q/b", "q/d"} {
			d := ledger.FlowDoc{Scope: scope, Data: []byte(scope)}
			if scope == "q/d" {
				d.TTL = time.Second
			}
			_, err := l.PutFlow(ctx, d, 0)
			must(t, err)
		}
		clock.Advance(time.Second)
		docs, err := l.ListFlows(ctx)
		must(t, err)
		var scopes []string
		for _, d := range docs {
			scopes = append(scopes, d.Scope)
			if string(d.Data) != d.Scope || d.Version != 1 {
				t.Fatalf("listed: %+v", d)
			}
		}
		if fmt.Sprint(scopes) != "[q/b q/c]" {
			t.Fatalf("listed scopes %v, want [q/b q/c]", scopes)
		}
		// Tombstones go after FlowKeep: the scope starts again.
		clock.Advance(ledger.FlowKeep)
		_, err = l.Sweep(ctx)
		must(t, err)
		r, err = l.GetFlow(ctx, "q/a")
		must(t, err)
		if r.Found || r.Doc.Version != 0 {
			t.Fatalf("a tombstone after its keep: %+v", r)
		}
		if r, err := l.GetFlow(ctx, "q/b"); err != nil || !r.Found {
			t.Fatalf("a live document after a sweep: %+v, %v", r, err)
		}
		// Bounds.
		for _, d := range []ledger.FlowDoc{{Scope: ""}, {Scope: "x", Data: make([]byte, ledger.MaxFlowData+1)}, {Scope: "x", TTL: -1}} {
			if _, err := l.PutFlow(ctx, d, 0); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Fatalf("put %q with %d bytes, ttl %v: %v", d.Scope, len(d.Data), d.TTL, err)
			}
		}
		if _, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "x", Data: make([]byte, ledger.MaxFlowData)}, 0); err != nil {
			t.Fatalf("a document of MaxFlowData bytes: %v", err)
		}
	})

	t.Run("FlowCompareAndSet", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		casCounter(t, []Ledger{l, l, l, l}, 15)
	})

	t.Run("ReserveGCRA", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		ms := func(n ...int) []time.Duration {
			ds := make([]time.Duration, len(n))
			for i, v := range n {
				ds[i] = time.Duration(v) * time.Millisecond
			}
			return ds
		}
		gs, err := ReserveEach(ctx, l, []Ask{
			{Bucket: "b1", Rate: 10, Burst: 1, N: 5},
			{Bucket: "b3", Rate: 10, Burst: 3, N: 4},
			{Bucket: "w", Rate: 10, Burst: 1, N: 10, Within: 250 * time.Millisecond},
		})
		must(t, err)
		wantGrant(t, "burst 1", gs[0], ms(0, 100, 200, 300, 400), 500*time.Millisecond, 10, 1)
		wantGrant(t, "burst 3", gs[1], ms(0, 0, 0, 100), 200*time.Millisecond, 10, 3)
		wantGrant(t, "within 250ms", gs[2], ms(0, 100, 200), 300*time.Millisecond, 10, 1)
		// The same instant: the tokens go on where the last ones ended.
		gs, err = ReserveEach(ctx, l, []Ask{{Bucket: "b1", Rate: 10, Burst: 1, N: 1}, {Bucket: "w", Rate: 10, Burst: 1, N: 3, Within: 50 * time.Millisecond}})
		must(t, err)
		wantGrant(t, "burst 1 again", gs[0], ms(500), 600*time.Millisecond, 10, 1)
		wantGrant(t, "nothing within 50ms", gs[1], nil, 300*time.Millisecond, 10, 1)
		// Later: offsets from the new now; an idle bucket has its burst.
		clock.Advance(250 * time.Millisecond)
		gs, err = ReserveEach(ctx, l, []Ask{{Bucket: "b1", Rate: 10, Burst: 1, N: 2}, {Bucket: "b3", Rate: 10, Burst: 3, N: 1}})
		must(t, err)
		wantGrant(t, "burst 1 later", gs[0], ms(350, 450), 550*time.Millisecond, 10, 1)
		wantGrant(t, "burst 3 later", gs[1], ms(0), 50*time.Millisecond, 10, 3)
		clock.Advance(10 * time.Second)
		gs, err = ReserveEach(ctx, l, []Ask{{Bucket: "b3", Rate: 10, Burst: 3, N: 4}})
		must(t, err)
		wantGrant(t, "burst 3 idle", gs[0], ms(0, 0, 0, 100), 200*time.Millisecond, 10, 3)
		// A reserver with other limits is told the bucket's; its
		// reservation follows its own (no tolerance with burst 1).
		gs, err = ReserveEach(ctx, l, []Ask{{Bucket: "b3", Rate: 20, Burst: 1, N: 1}})
		must(t, err)
		wantGrant(t, "other limits", gs[0], ms(400), 450*time.Millisecond, 10, 3)
		gs, err = ReserveEach(ctx, l, []Ask{{Bucket: "b3", Rate: 20, Burst: 1, N: 1}})
		must(t, err)
		if gs[0].Rate != 20 || gs[0].Burst != 1 {
			t.Fatalf("the bucket's limits after another reserver's: %v/%d", gs[0].Rate, gs[0].Burst)
		}
		// An idle bucket is swept; it then starts with the next
		// reserver's limits.
		clock.Advance(ledger.BucketIdle + time.Minute)
		_, err = l.Sweep(ctx)
		must(t, err)
		gs, err = ReserveEach(ctx, l, []Ask{{Bucket: "b3", Rate: 5, Burst: 2, N: 1}})
		must(t, err)
		wantGrant(t, "swept", gs[0], ms(0), 0, 5, 2)
		// Bounds.
		for _, r := range [][]Ask{
			{{Bucket: "x", Rate: 0, Burst: 1, N: 1}},
			{{Bucket: "x", Rate: math.NaN(), Burst: 1, N: 1}},
			{{Bucket: "x", Rate: 1, Burst: 0, N: 1}},
			{{Bucket: "x", Rate: 1, Burst: 1, N: 0}},
			{{Bucket: "x", Rate: 1, Burst: 1, N: 1, Within: -1}},
			{{Bucket: "", Rate: 1, Burst: 1, N: 1}},
			{{Bucket: "x", Rate: 1, Burst: 1, N: 1}, {Bucket: "x", Rate: 1, Burst: 1, N: 1}},
		} {
			if _, err := ReserveEach(ctx, l, r); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Fatalf("reserve %+v: %v", r, err)
			}
		}
	})

	t.Run("ReserveTogether", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		fleet, tenant := ledger.Bucket{Name: "fleet", Rate: 10, Burst: 1}, ledger.Bucket{Name: "tenant", Rate: 5, Burst: 1}
		_, err := ReserveEach(ctx, l, []Ask{{Bucket: "fleet", Rate: 10, Burst: 1, N: 10}})
		must(t, err)
		// The fleet is a second ahead, the tenant idle: the tenant's
		// tokens start with the fleet's and move on from there.
		g, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{fleet, tenant},
			Tokens: []ledger.Token{{Buckets: []int{0, 1}}, {Buckets: []int{0, 1}}, {Buckets: []int{0}}, {Buckets: []int{1}, Within: 2 * time.Second}}})
		must(t, err)
		if fmt.Sprint(g.Starts, g.Taken, g.Next) != "[1s 1.2s 1.3s 1.4s] [true true true true] [1.4s 1.6s]" || !g.Now.Equal(clock.Now()) {
			t.Fatalf("tokens of a busy fleet and an idle tenant: %+v at %v", g, clock.Now())
		}
		// A token that does not fit is not taken and moves nothing;
		// the next one, of a quiet tenant, is taken.
		clock.Advance(400 * time.Millisecond)
		g, err = l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{fleet, tenant, {Name: "quiet", Rate: 5, Burst: 1}},
			Tokens: []ledger.Token{{Buckets: []int{0, 1}, Within: 1100 * time.Millisecond}, {Buckets: []int{0, 2}, Within: 1100 * time.Millisecond}}})
		must(t, err)
		if fmt.Sprint(g.Starts, g.Taken, g.Next) != "[1.2s 1s] [false true] [1.1s 1.2s 1.2s]" {
			t.Fatalf("a busy tenant's token before a quiet one's: %+v", g)
		}
	})

	t.Run("ReserveNotBefore", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		q, other := ledger.Bucket{Name: "queue", Rate: 10, Burst: 1}, ledger.Bucket{Name: "other", Rate: 10, Burst: 1}
		// An idle bucket: the first token starts at its NotBefore, the
		// next ones queue behind it whatever theirs, and one that would
		// start past its Within is not taken and moves nothing.
		g, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{q}, Tokens: []ledger.Token{
			{Buckets: []int{0}, NotBefore: 2 * time.Second}, {Buckets: []int{0}, NotBefore: 2 * time.Second},
			{Buckets: []int{0}, NotBefore: time.Second}, {Buckets: []int{0}, NotBefore: 3 * time.Second, Within: 2500 * time.Millisecond}}})
		must(t, err)
		if fmt.Sprint(g.Starts, g.Taken, g.Next) != "[2s 2.1s 2.2s 3s] [true true true false] [2.3s]" || !g.Now.Equal(clock.Now()) {
			t.Fatalf("tokens not before 2s, 2s, 1s and 3s (within 2.5s) of an idle bucket: %+v at %v", g, clock.Now())
		}
		// Later, with a second bucket: a token without NotBefore starts
		// where the queue is; one whose NotBefore is later starts then,
		// and moves both buckets from there.
		clock.Advance(time.Second)
		g, err = l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{q, other}, Tokens: []ledger.Token{
			{Buckets: []int{0, 1}}, {Buckets: []int{1}, NotBefore: 4 * time.Second}, {Buckets: []int{0}}}})
		must(t, err)
		if fmt.Sprint(g.Starts, g.Taken, g.Next) != "[1.3s 4s 1.4s] [true true true] [1.5s 4.1s]" {
			t.Fatalf("a queue a second later, with another bucket: %+v", g)
		}
		for _, nb := range []time.Duration{-1, ledger.MaxRetention + 1} {
			_, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{q}, Tokens: []ledger.Token{{Buckets: []int{0}, NotBefore: nb}}})
			if !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Fatalf("a token not before %v: %v", nb, err)
			}
		}
	})

	t.Run("ReserveNotBeforeOneBucket", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		b := []ledger.Bucket{{Name: "lead", Rate: 10, Burst: 1}}
		tokens := func(n int, nb time.Duration) []ledger.Token {
			ts := make([]ledger.Token, n)
			for i := range ts {
				ts[i] = ledger.Token{Buckets: []int{0}, NotBefore: nb, Within: 5 * time.Second}
			}
			return ts
		}
		// Tokens that share a NotBefore, as a worker asks for them a
		// lead ahead: an idle bucket starts them at it; a bucket whose
		// TAT is before it (idle until then) too, skipping the time
		// between; a bucket busy past it queues them behind its TAT.
		for i, c := range []struct {
			advance time.Duration
			n       int
			nb      time.Duration
			want    string
		}{
			{0, 2, time.Second, "[1s 1.1s] [true true] [1.2s]"},
			{500 * time.Millisecond, 2, time.Second, "[1s 1.1s] [true true] [1.2s]"},
			{0, 2, 100 * time.Millisecond, "[1.2s 1.3s] [true true] [1.4s]"},
			{0, 1, 6 * time.Second, "[6s] [false] [1.4s]"},
		} {
			clock.Advance(c.advance)
			g, err := l.Reserve(ctx, ledger.Reservation{Buckets: b, Tokens: tokens(c.n, c.nb)})
			must(t, err)
			if got := fmt.Sprint(g.Starts, g.Taken, g.Next); got != c.want || !g.Now.Equal(clock.Now()) {
				t.Fatalf("reservation %d: %d tokens not before %v, %v later: %s at %v; want %s", i, c.n, c.nb, c.advance, got, g.Now, c.want)
			}
		}
	})

	t.Run("BucketLimits", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		if _, _, found, err := l.BucketLimits(ctx, "limits"); err != nil || found {
			t.Fatalf("a bucket never reserved: found %v, %v", found, err)
		}
		for _, b := range []ledger.Bucket{{Name: "limits", Rate: 2.5, Burst: 3}, {Name: "limits", Rate: 40, Burst: 1}} {
			_, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{b}, Tokens: []ledger.Token{{Buckets: []int{0}}}})
			must(t, err)
			rate, burst, found, err := l.BucketLimits(ctx, "limits")
			if err != nil || !found || rate != b.Rate || burst != b.Burst {
				t.Fatalf("after a reservation at %v/s, burst %d: %v/s, burst %d, found %v, %v", b.Rate, b.Burst, rate, burst, found, err)
			}
		}
	})

	t.Run("BucketLimitsOfNoTake", func(t *testing.T) {
		// A reservation that takes no token (its only one would start
		// past its Within) is not the last reserver that took tokens:
		// a bucket keeps its limits, and none is made.
		t.Parallel()
		l, _ := setup(t)
		_, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: "held", Rate: 10, Burst: 1}}, Tokens: []ledger.Token{{Buckets: []int{0}}}})
		must(t, err)
		none := ledger.Token{Buckets: []int{0}, Within: time.Millisecond, NotBefore: time.Second}
		for _, name := range []string{"held", "new"} {
			g, err := l.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: name, Rate: 20, Burst: 3}}, Tokens: []ledger.Token{none}})
			if err != nil || g.Taken[0] {
				t.Fatalf("bucket %s: a token not before 1s within 1ms: taken %v, %v", name, g.Taken, err)
			}
		}
		if rate, burst, found, err := l.BucketLimits(ctx, "held"); err != nil || !found || rate != 10 || burst != 1 {
			t.Errorf("after a reservation at 20/s burst 3 that took nothing: %v/s burst %d found %v (%v); want 10/s burst 1", rate, burst, found, err)
		}
		if rate, burst, found, err := l.BucketLimits(ctx, "new"); err != nil || found {
			t.Errorf("a bucket whose only reservation took nothing: %v/s burst %d found %v (%v); want none", rate, burst, found, err)
		}
	})

	t.Run("ReserveInterleaved", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		reserveInterleaved(t, []Ledger{l, l}, clock)
	})

	t.Run("ReserveConcurrent", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		reserveConcurrent(t, []Ledger{l, l, l}, clock)
	})

	t.Run("Slots", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		take := func(pool string, limit, n int, owner string) []int {
			t.Helper()
			out, err := l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: pool, Limit: limit, N: n, Owner: owner, Lease: lease}})
			must(t, err)
			var idx []int
			for _, s := range out[0] {
				if s.Pool != pool || s.Owner != owner {
					t.Fatalf("took %+v for %s/%s", s, pool, owner)
				}
				idx = append(idx, s.Index)
			}
			slices.Sort(idx)
			return idx
		}
		wantIdx := func(what string, got []int, want ...int) {
			t.Helper()
			if !slices.Equal(got, want) {
				t.Fatalf("%s: slots %v, want %v", what, got, want)
			}
		}
		wantIdx("a takes 2 of 3", take("p", 3, 2, "a"), 0, 1)
		wantIdx("b asks 2, 1 is free", take("p", 3, 2, "b"), 2)
		wantIdx("c finds none", take("p", 3, 1, "c"))
		errs := l.ReleaseSlots(ctx, []ledger.Slot{{Pool: "p", Index: 0, Owner: "a"}, {Pool: "p", Index: 2, Owner: "a"}})
		if errs[0] != nil || !errors.Is(errs[1], ledger.ErrNotOwner) {
			t.Fatalf("releases: %v", errs)
		}
		wantIdx("c takes the released one", take("p", 3, 5, "c"), 0)
		clock.Advance(lease / 2)
		errs = l.ExtendSlots(ctx, []ledger.Slot{{Pool: "p", Index: 1, Owner: "a"}, {Pool: "p", Index: 1, Owner: "c"}}, lease)
		if errs[0] != nil || !errors.Is(errs[1], ledger.ErrNotOwner) {
			t.Fatalf("extensions: %v", errs)
		}
		// b's and c's leases lapse (b's slot 2, c's slot 0), a's
		// extended one holds. A lapsed slot still held by its owner can
		// be extended until another takes it.
		clock.Advance(lease / 2)
		must(t, l.ExtendSlots(ctx, []ledger.Slot{{Pool: "p", Index: 0, Owner: "c"}}, lease)[0])
		wantIdx("d takes the lapsed one", take("p", 3, 3, "d"), 2)
		if err := l.ExtendSlots(ctx, []ledger.Slot{{Pool: "p", Index: 2, Owner: "b"}}, lease)[0]; !errors.Is(err, ledger.ErrNotOwner) {
			t.Fatalf("an extension of a slot taken over: %v", err)
		}
		// A lower limit: slots from the new limit up are never handed
		// out; those held stay held.
		must(t, errors.Join(l.ReleaseSlots(ctx, []ledger.Slot{{Pool: "p", Index: 0, Owner: "c"}, {Pool: "p", Index: 1, Owner: "a"}})...))
		if err := l.ReleaseSlots(ctx, []ledger.Slot{{Pool: "p", Index: 1, Owner: "a"}})[0]; !errors.Is(err, ledger.ErrNotOwner) {
			t.Fatalf("a second release: %v", err)
		}
		wantIdx("limit 2", take("p", 2, 5, "e"), 0, 1)
		wantIdx("limit 2 again", take("p", 2, 5, "f"))
		// A higher one adds slots.
		wantIdx("limit 5", take("p", 5, 5, "g"), 3, 4)
		// Several pools in one call, each at most its limit.
		out, err := l.TakeSlots(ctx, []ledger.SlotRequest{
			{Pool: "x", Limit: 2, N: 3, Owner: "h", Lease: lease},
			{Pool: "y", Limit: 1, N: 1, Owner: "h", Lease: lease},
		})
		must(t, err)
		if len(out) != 2 || len(out[0]) != 2 || len(out[1]) != 1 || out[1][0].Pool != "y" {
			t.Fatalf("two pools: %+v", out)
		}
		for _, r := range [][]ledger.SlotRequest{
			{{Pool: "x", Limit: 0, N: 1, Owner: "o", Lease: lease}},
			{{Pool: "x", Limit: 1, N: 0, Owner: "o", Lease: lease}},
			{{Pool: "x", Limit: 1, N: 1, Owner: "", Lease: lease}},
			{{Pool: "x", Limit: 1, N: 1, Owner: "o", Lease: 0}},
			{{Pool: "x", Limit: ledger.MaxSlotLimit + 1, N: 1, Owner: "o", Lease: lease}},
			{{Pool: "x", Limit: 1, N: 1, Owner: "o", Lease: lease}, {Pool: "x", Limit: 1, N: 1, Owner: "p", Lease: lease}},
		} {
			if _, err := l.TakeSlots(ctx, r); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Fatalf("take %+v: %v", r, err)
			}
		}
		if err := l.ExtendSlots(ctx, []ledger.Slot{{Pool: "x", Index: 0, Owner: "h"}}, 0)[0]; !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("an extension by 0: %v", err)
		}
	})

	t.Run("SlotsConcurrent", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		slotsConcurrent(t, []Ledger{l, l, l, l})
	})

	t.Run("Processes", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		started := clock.Now().Add(-time.Minute)
		p := ledger.Process{ID: "host-a/42/x1", Host: "host-a", PID: 42, Version: "v1.2.3", Queue: "https://sqs/q",
			Started: started, InHand: 7, TTL: 15 * time.Second}
		must(t, l.PutProcess(ctx, p))
		q := p
		q.ID, q.Paused, q.PausedWhy, q.InHand = "host-b/7/y2", true, "outage of http://svc", 0
		q.TTL, q.Expires = 0, clock.Now().Add(time.Minute)
		must(t, l.PutProcess(ctx, q))
		clock.Advance(5 * time.Second)
		ps, err := l.Processes(ctx)
		must(t, err)
		if len(ps) != 2 {
			t.Fatalf("processes: %+v", ps)
		}
		a, b := ps[0], ps[1]
		beat := clock.Now().Add(-5 * time.Second)
		if a.ID != p.ID || a.Host != "host-a" || a.PID != 42 || a.Version != "v1.2.3" || a.Queue != "https://sqs/q" ||
			!a.Started.Equal(started) || !a.Beat.Equal(beat) || a.BeatAge != 5*time.Second || a.InHand != 7 || a.Paused ||
			!a.Expires.Equal(beat.Add(15*time.Second)) || a.TTL != 0 {
			t.Fatalf("process a: %+v", a)
		}
		if b.ID != q.ID || !b.Paused || b.PausedWhy != "outage of http://svc" || !b.Expires.Equal(q.Expires) {
			t.Fatalf("process b: %+v", b)
		}
		// A beat renews; a stop removes.
		p.InHand = 3
		must(t, l.PutProcess(ctx, p))
		must(t, l.RemoveProcess(ctx, q.ID))
		must(t, l.RemoveProcess(ctx, "never-there"))
		ps, err = l.Processes(ctx)
		must(t, err)
		if len(ps) != 1 || ps[0].InHand != 3 || ps[0].BeatAge != 0 || !ps[0].Expires.Equal(clock.Now().Add(15*time.Second)) {
			t.Fatalf("after a beat and a stop: %+v", ps)
		}
		// A process that stopped beating is listed, lapsed, for
		// ProcessKeep, then swept.
		clock.Advance(ledger.ProcessKeep)
		ps, err = l.Processes(ctx)
		must(t, err)
		if len(ps) != 1 || ps[0].BeatAge != ledger.ProcessKeep {
			t.Fatalf("a lapsed process: %+v", ps)
		}
		clock.Advance(15 * time.Second)
		_, err = l.Sweep(ctx)
		must(t, err)
		ps, err = l.Processes(ctx)
		must(t, err)
		if len(ps) != 0 {
			t.Fatalf("after its keep: %+v", ps)
		}
		for _, p := range []ledger.Process{{ID: "", TTL: time.Second}, {ID: "x"}, {ID: "x", TTL: -1}, {ID: "x", TTL: time.Second, PID: -1}} {
			if err := l.PutProcess(ctx, p); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Fatalf("put %+v: %v", p, err)
			}
		}
	})

	t.Run("FlowSchema", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		v, err := l.FlowSchema(ctx)
		must(t, err)
		if v != ledger.FlowSchemaVersion {
			t.Fatalf("flow schema %d, want %d", v, ledger.FlowSchemaVersion)
		}
	})
}

// runFlowShared is the part of RunShared that holds the flow contract across
// hosts.
func runFlowShared(t *testing.T, open OpenShared) {
	ctx := context.Background()

	t.Run("FlowAcrossHosts", func(t *testing.T) {
		t.Parallel()
		ls := open(t, NewClock(), 2)
		_, err := ls[0].PutFlow(ctx, ledger.FlowDoc{Scope: "s", Data: []byte("a")}, 0)
		must(t, err)
		if _, err := ls[1].PutFlow(ctx, ledger.FlowDoc{Scope: "s", Data: []byte("b")}, 0); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("a second creation from another host: %v", err)
		}
		docs, err := ls[1].ListFlows(ctx)
		must(t, err)
		if len(docs) != 1 || string(docs[0].Data) != "a" {
			t.Fatalf("listed on the other host: %+v", docs)
		}
		casCounter(t, ls, 10)
		must(t, ls[0].PutProcess(ctx, ledger.Process{ID: "p0", TTL: time.Minute}))
		must(t, ls[1].PutProcess(ctx, ledger.Process{ID: "p1", TTL: time.Minute}))
		for _, l := range ls {
			ps, err := l.Processes(ctx)
			must(t, err)
			if len(ps) != 2 || ps[0].ID != "p0" || ps[1].ID != "p1" {
				t.Fatalf("processes: %+v", ps)
			}
		}
	})

	t.Run("MarksAcrossHosts", func(t *testing.T) {
		t.Parallel()
		ls := open(t, NewClock(), 2)
		mustClaim(t, ls[0], req("k", "a"), ledger.Claimed)
		must(t, ls[0].Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "503", Outage: true}))
		must(t, ls[1].MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "k", Owner: "b", Reason: "outage 503"}})[0])
		r, err := ls[0].Get(ctx, "k")
		must(t, err)
		if r.OutageFailures != 1 || r.DeadLetterReason != "outage 503" {
			t.Fatalf("read on the first host: %+v", r)
		}
		wantCounts(t, ls[0], map[string]int{"outage #": 1})
	})

	t.Run("ReserveAcrossHosts", func(t *testing.T) {
		t.Parallel()
		clock := NewClock()
		reserveInterleaved(t, open(t, clock, 2), clock)
	})

	t.Run("ReserveConcurrentHosts", func(t *testing.T) {
		t.Parallel()
		clock := NewClock()
		reserveConcurrent(t, open(t, clock, 3), clock)
	})

	t.Run("ReserveTogetherConcurrentHosts", func(t *testing.T) {
		t.Parallel()
		clock := NewClock()
		reserveTogether(t, open(t, clock, 3), clock)
	})

	t.Run("SlotsAcrossHosts", func(t *testing.T) {
		t.Parallel()
		ls := open(t, NewClock(), 4)
		slotsConcurrent(t, ls)
	})
}

// Ask asks a bucket for N tokens, each taking that bucket alone (the
// reservations of a handler's rate alone).
type Ask struct {
	Bucket string
	Rate   float64
	Burst  int
	N      int
	Within time.Duration
}

// Got is what an Ask took: the starts of the tokens taken, in order, when
// a further token would start, and the limits the bucket held.
type Got struct {
	Starts []time.Duration
	Next   time.Duration
	Rate   float64
	Burst  int
}

// ReserveEach reserves the tokens of asks in one call of r, each ask's
// tokens taking its bucket alone.
func ReserveEach(ctx context.Context, r interface {
	Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error)
}, asks []Ask) ([]Got, error) {
	var res ledger.Reservation
	for i, a := range asks {
		res.Buckets = append(res.Buckets, ledger.Bucket{Name: a.Bucket, Rate: a.Rate, Burst: a.Burst})
		for range a.N {
			res.Tokens = append(res.Tokens, ledger.Token{Buckets: []int{i}, Within: a.Within})
		}
	}
	g, err := r.Reserve(ctx, res)
	if err != nil {
		return nil, err
	}
	out := make([]Got, len(asks))
	k := 0
	for i, a := range asks {
		out[i] = Got{Next: g.Next[i], Rate: g.Rates[i], Burst: g.Bursts[i]}
		for range a.N {
			if g.Taken[k] {
				out[i].Starts = append(out[i].Starts, g.Starts[k])
			}
			k++
		}
	}
	return out, nil
}

func wantCounts(t *testing.T, l Ledger, want map[string]int) {
	t.Helper()
	got, err := l.DeadLetterCounts(context.Background())
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead-letter counts %v, want %v", got, want)
	}
}

func wantGrant(t *testing.T, what string, g Got, starts []time.Duration, next time.Duration, rate float64, burst int) {
	t.Helper()
	if len(starts) == 0 {
		starts = []time.Duration{}
	}
	if len(g.Starts) == 0 {
		g.Starts = []time.Duration{}
	}
	if fmt.Sprint(g.Starts) != fmt.Sprint(starts) || g.Next != next || g.Rate != rate || g.Burst != burst {
		t.Fatalf("%s: starts %v next %v limits %v/%d; want %v, %v, %v/%d", what, g.Starts, g.Next, g.Rate, g.Burst, starts, next, rate, burst)
	}
}

// casCounter has each of ls add rounds to a counter in one flow document,
// each add a read and a compare-and-set tried until it holds: no add is
// lost, and no version is written twice.
func casCounter(t *testing.T, ls []Ledger, rounds int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(ls))
	for _, l := range ls {
		wg.Go(func() {
			for range rounds {
				for tries := 0; ; tries++ {
					if tries > 100*len(ls) {
						errs <- fmt.Errorf("no add after %d tries", tries)
						return
					}
					r, err := l.GetFlow(ctx, "counter")
					if err != nil {
						errs <- err
						return
					}
					n := uint64(0)
					if r.Found {
						n = binary.BigEndian.Uint64(r.Doc.Data)
					}
					_, err = l.PutFlow(ctx, ledger.FlowDoc{Scope: "counter", Data: binary.BigEndian.AppendUint64(nil, n+1)}, r.Doc.Version)
					if errors.Is(err, ledger.ErrConflict) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := ls[0].GetFlow(ctx, "counter")
	must(t, err)
	want := uint64(len(ls) * rounds)
	if !r.Found || binary.BigEndian.Uint64(r.Doc.Data) != want || r.Doc.Version != int64(want) {
		t.Fatalf("counter %d at version %d, want %d", binary.BigEndian.Uint64(r.Doc.Data), r.Doc.Version, want)
	}
}

// reserveInterleaved has two reservers take tokens of one bucket in turn,
// with the clock moving: their tokens never start closer than the bucket's
// interval (burst 1).
func reserveInterleaved(t *testing.T, ls []Ledger, clock *Clock) {
	t.Helper()
	ctx := context.Background()
	var starts []time.Time
	for i := range 30 {
		l := ls[i%len(ls)]
		gs, err := ReserveEach(ctx, l, []Ask{{Bucket: "shared", Rate: 20, Burst: 1, N: 1 + i%3}})
		must(t, err)
		now := clock.Now()
		for _, s := range gs[0].Starts {
			starts = append(starts, now.Add(s))
		}
		clock.Advance(time.Duration(i%4) * 30 * time.Millisecond)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-1]); d < 50*time.Millisecond {
			t.Fatalf("tokens %d and %d start %v apart, closer than the interval 50ms", i-1, i, d)
		}
	}
	if len(starts) != 60 {
		t.Fatalf("%d tokens, want 60", len(starts))
	}
}

// reserveTogether has reservers take tokens that each take a fleet's
// bucket (40/s) and one of two tenants' (10/s), all at once, while the
// clock moves: within every bucket the tokens start at least its interval
// apart (burst 1), although each token starts at the later of its two
// buckets' times.
func reserveTogether(t *testing.T, ls []Ledger, clock *Clock) {
	t.Helper()
	ctx := context.Background()
	buckets := []ledger.Bucket{{Name: "fleet", Rate: 40, Burst: 1}, {Name: "tenant-a", Rate: 10, Burst: 1}, {Name: "tenant-b", Rate: 10, Burst: 1}}
	var mu sync.Mutex
	var step sync.RWMutex
	starts := map[string][]time.Time{}
	var wg sync.WaitGroup
	errs := make(chan error, len(ls))
	for h, l := range ls {
		wg.Go(func() {
			for i := range 12 {
				// Two or three tokens: of tenant a, of tenant b, and
				// of the fleet alone.
				r := ledger.Reservation{Buckets: buckets, Tokens: []ledger.Token{{Buckets: []int{0, 1 + (h+i)%2}}, {Buckets: []int{0, 2 - (h+i)%2}}}}
				if i%3 == 0 {
					r.Tokens = append(r.Tokens, ledger.Token{Buckets: []int{0}})
				}
				step.RLock()
				g, err := l.Reserve(ctx, r)
				now := clock.Now()
				step.RUnlock()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for k, tk := range r.Tokens {
					if !g.Taken[k] {
						errs <- fmt.Errorf("token %d not taken without a bound", k)
					}
					for _, b := range tk.Buckets {
						starts[buckets[b].Name] = append(starts[buckets[b].Name], now.Add(g.Starts[k]))
					}
				}
				mu.Unlock()
				if h == 0 && i%2 == 1 {
					step.Lock()
					clock.Advance(70 * time.Millisecond)
					step.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, b := range buckets {
		ss := starts[b.Name]
		slices.SortFunc(ss, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ss); i++ {
			if d := ss[i].Sub(ss[i-1]); d < b.Interval() {
				t.Fatalf("bucket %s: tokens %d and %d start %v apart, closer than its interval %v", b.Name, i-1, i, d, b.Interval())
			}
		}
	}
	if n := len(starts["fleet"]); n != 3*(24+4) {
		t.Fatalf("%d tokens of the fleet, want %d", n, 3*28)
	}
}

// reserveConcurrent has reservers take tokens of one bucket at rate 40,
// burst 1, one at a time, all at once, while the clock moves: no window of
// one second holds more than ceil(40·1s)+burst starts.
func reserveConcurrent(t *testing.T, ls []Ledger, clock *Clock) {
	t.Helper()
	ctx := context.Background()
	const each, rate, burst = 40, 40, 1
	var mu sync.Mutex
	// The clock moves only between reservations (step holds it), so that
	// the now a reserver reads is the one the ledger used.
	var step sync.RWMutex
	var starts []time.Time
	var wg sync.WaitGroup
	errs := make(chan error, len(ls))
	for g, l := range ls {
		wg.Go(func() {
			for i := range each {
				step.RLock()
				gs, err := ReserveEach(ctx, l, []Ask{{Bucket: "hot", Rate: rate, Burst: burst, N: 1}})
				now := clock.Now()
				step.RUnlock()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, s := range gs[0].Starts {
					starts = append(starts, now.Add(s))
				}
				mu.Unlock()
				if g == 0 && i%4 == 3 {
					step.Lock()
					clock.Advance(100 * time.Millisecond)
					step.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(starts) != each*len(ls) {
		t.Fatalf("%d tokens, want %d", len(starts), each*len(ls))
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	limit := int(math.Ceil(rate*1.0)) + burst
	for i := range starts {
		j := i
		for j < len(starts) && starts[j].Sub(starts[i]) < time.Second {
			j++
		}
		if j-i > limit {
			t.Fatalf("%d starts within one second from %v, more than %d", j-i, starts[i], limit)
		}
	}
}

// slotsConcurrent has owners on ls take, hold and release slots of one pool
// at once: no slot is ever held by two owners, and never more than the
// limit are held.
func slotsConcurrent(t *testing.T, ls []Ledger) {
	t.Helper()
	ctx := context.Background()
	const limit, rounds = 3, 15
	var mu sync.Mutex
	held := map[int]string{}
	most := 0
	// hold records slots as held by who, failing when one is held already.
	hold := func(ss []ledger.Slot, who string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range ss {
			if other, ok := held[s.Index]; ok {
				return fmt.Errorf("slot %d taken by %s while %s holds it", s.Index, who, other)
			}
			held[s.Index] = who
		}
		most = max(most, len(held))
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ls))
	for g, l := range ls {
		for o := range 2 {
			owner := fmt.Sprintf("o%d-%d", g, o)
			wg.Go(func() {
				for range rounds {
					var mine []ledger.Slot
					// Two requests, the slots of the first held while
					// the second is made and while the others try.
					for _, n := range []int{2, limit} {
						out, err := l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: "pool", Limit: limit, N: n, Owner: owner, Lease: time.Hour}})
						if err == nil {
							err = hold(out[0], owner)
						}
						if err != nil {
							errs <- err
							return
						}
						mine = append(mine, out[0]...)
					}
					mu.Lock()
					for _, s := range mine {
						delete(held, s.Index)
					}
					mu.Unlock()
					for _, err := range l.ReleaseSlots(ctx, mine) {
						if err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most > limit || most == 0 {
		t.Fatalf("at most %d slots held at once, want 1 to %d", most, limit)
	}
}
