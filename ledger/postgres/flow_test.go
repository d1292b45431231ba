package postgres_test

import (
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// TestFlow_RoundTrips counts, through a proxy, the round trips of each flow
// call once its statements are prepared: one each, whatever the number of
// buckets, pools, slots or marks in the call; TakeSlots also when it makes
// a new pool's rows.
func TestFlow_RoundTrips(t *testing.T) {
	t.Parallel()
	opts := setup(t, nil)
	p := pgtest.NewProxy(t, pgtest.Addr(t, opts.URL))
	opts.URL = pgtest.WithParam(t, pgtest.ReplaceAddr(t, opts.URL, p.Addr()), "pool_max_conns", "1")
	l := open(t, opts)
	mustClaim(t, l, claimReq("k1", "o"), ledger.Claimed)
	mustClaim(t, l, claimReq("k2", "o"), ledger.Claimed)
	reserve := func(tag string) func() error {
		return func() error {
			_, err := ledgertest.ReserveEach(ctx, l, []ledgertest.Ask{
				{Bucket: "a" + tag, Rate: 40, Burst: 1, N: 10},
				{Bucket: "b" + tag, Rate: 5, Burst: 2, N: 10, Within: time.Second},
				{Bucket: "c" + tag, Rate: 1000, Burst: 10, N: 3},
			})
			return err
		}
	}
	var held []ledger.Slot
	take := func(pool string) func() error {
		return func() error {
			out, err := l.TakeSlots(ctx, []ledger.SlotRequest{
				{Pool: pool + "1", Limit: 20, N: 3, Owner: "o", Lease: time.Minute},
				{Pool: pool + "2", Limit: 5, N: 2, Owner: "o", Lease: time.Minute},
			})
			if err == nil {
				held = append(out[0], out[1]...)
			}
			return err
		}
	}
	version := int64(0)
	calls := []struct {
		name string
		call func() error
	}{
		{"Reserve, 3 buckets", reserve("")},
		{"Reserve, 3 new buckets", reserve("-new")},
		{"TakeSlots, 2 pools", take("p")},
		{"TakeSlots, 2 new pools", take("q")},
		{"ExtendSlots, 5 slots", func() error { return firstErr(l.ExtendSlots(ctx, held, time.Minute)) }},
		{"ReleaseSlots, 5 slots", func() error { return firstErr(l.ReleaseSlots(ctx, held)) }},
		{"MarkDeadLettered, 2 marks", func() error {
			return firstErr(l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "k1", Owner: "o", Reason: "r 1"}, {Key: "k2", Owner: "o", Reason: "r 2"}}))
		}},
		{"GetFlow", func() error { _, err := l.GetFlow(ctx, "s"); return err }},
		{"PutFlow", func() error {
			r, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: "s", Data: []byte("x")}, version)
			version = r.Doc.Version
			return err
		}},
		{"Processes", func() error { _, err := l.Processes(ctx); return err }},
	}
	// Once to prepare every statement (a first use costs one more round
	// trip), with the pools and buckets of the later "new" calls left new.
	for _, c := range calls {
		must(t, c.call())
		if c.name == "PutFlow" {
			must(t, c.call()) // the creation's statement, then the update's
		}
	}
	for i, c := range calls {
		switch c.name {
		case "Reserve, 3 new buckets":
			c.call = reserve("-newer")
		case "TakeSlots, 2 new pools":
			c.call = take("r")
		}
		calls[i] = c
	}
	for _, c := range calls {
		before := p.RoundTrips()
		must(t, c.call())
		if n := p.RoundTrips() - before; n != 1 {
			t.Errorf("%s: %d round trips, want 1", c.name, n)
		} else {
			t.Logf("%s: 1 round trip", c.name)
		}
	}
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
