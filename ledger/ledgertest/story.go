package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// runStory is the part of Run that holds what a console reads: each
// operation's history and kept payload, the overview's groups of failures
// and dead letters, its processes and activity, and the filters of List.
func runStory(t *testing.T, setup func(t *testing.T) (Ledger, *Clock)) {
	ctx := context.Background()

	t.Run("History", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		start := clock.Now()
		mustClaim(t, l, req("k", "p1/1"), ledger.Claimed)
		clock.Advance(time.Second)
		must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "p1/1", Err: "card declined for k", Started: start.Add(500 * time.Millisecond),
			Payload: &ledger.Payload{Body: []byte(`{"id":"k"}`), Attributes: map[string]string{"Tenant": "t1"}}}))
		clock.Advance(time.Second)
		claimB := clock.Now()
		mustClaim(t, l, req("k", "p2/1"), ledger.Claimed)
		clock.Advance(lease + time.Second)
		takeover := clock.Now()
		if c := mustClaim(t, l, req("k", "p3/1"), ledger.Claimed); !c.Takeover {
			t.Fatalf("the claim after the lease lapsed: %+v, want a takeover", c)
		}
		clock.Advance(time.Second)
		startC := clock.Now().Add(-300 * time.Millisecond)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "p3/1", Started: startC}))
		end := clock.Now()
		rec, err := l.Get(ctx, "k")
		must(t, err)
		want := []ledger.Attempt{
			{Start: start.Add(500 * time.Millisecond), End: start.Add(time.Second), Owner: "p1/1", Outcome: ledger.AttemptFailed, Error: "card declined for k"},
			{Start: claimB, End: takeover, Owner: "p2/1", Outcome: ledger.AttemptLapsed},
			{Start: startC, End: end, Owner: "p3/1", Outcome: ledger.AttemptComplete},
		}
		if got := attempts(rec.History); got != attempts(want) {
			t.Fatalf("history\n got %s\nwant %s", got, attempts(want))
		}
		if rec.Attempts != 3 {
			t.Fatalf("attempts %d, want 3", rec.Attempts)
		}
		// The payload of the failure is kept: the completion passed none.
		if p := rec.Payload; p == nil || string(p.Body) != `{"id":"k"}` || p.Attributes["Tenant"] != "t1" || len(p.Attributes) != 1 || p.Cut {
			t.Fatalf("payload %+v, want the failure's", p)
		}

		// The last MaxHistory attempts are kept.
		for i := range ledger.MaxHistory + 5 {
			owner := fmt.Sprintf("p1/%d", i)
			mustClaim(t, l, req("many", owner), ledger.Claimed)
			clock.Advance(time.Second)
			must(t, l.Fail(ctx, ledger.Failure{Key: "many", Owner: owner, Err: fmt.Sprintf("error %d", i), Started: clock.Now().Add(-time.Second)}))
		}
		rec, err = l.Get(ctx, "many")
		must(t, err)
		if len(rec.History) != ledger.MaxHistory || rec.History[0].Error != "error 5" || rec.History[ledger.MaxHistory-1].Error != fmt.Sprintf("error %d", ledger.MaxHistory+4) {
			t.Fatalf("history of %d attempts: %s", ledger.MaxHistory+5, attempts(rec.History))
		}

		// A first attempt that completes: its attempt is the record's.
		claimed := clock.Now()
		mustClaim(t, l, req("once", "p1/9"), ledger.Claimed)
		clock.Advance(time.Second)
		must(t, l.Complete(ctx, ledger.Completion{Key: "once", Owner: "p1/9", Started: claimed.Add(100 * time.Millisecond),
			Payload: &ledger.Payload{Body: []byte(strings.Repeat("x", ledger.MaxPayload+100))}}))
		rec, err = l.Get(ctx, "once")
		must(t, err)
		if len(rec.History) != 1 || rec.History[0].Outcome != ledger.AttemptComplete || rec.History[0].Owner != "p1/9" ||
			!rec.History[0].End.Equal(clock.Now()) ||
			!(rec.History[0].Start.Equal(claimed) && rec.History[0].Derived || rec.History[0].Start.Equal(claimed.Add(100*time.Millisecond))) {
			t.Fatalf("history of a first attempt that completed: %s (derived %v)", attempts(rec.History), len(rec.History) == 1 && rec.History[0].Derived)
		}
		if p := rec.Payload; p == nil || !p.Cut || len(p.Body) > ledger.MaxPayload || len(p.Body) < ledger.MaxPayload-100 {
			t.Fatalf("a payload over MaxPayload: cut %v, %d bytes", p != nil && p.Cut, len(p.Body))
		}

		// A record made anew (forgotten, then claimed) has no history or
		// payload of the old one.
		must(t, l.Forget(ctx, "k"))
		mustClaim(t, l, req("k", "p4/1"), ledger.Claimed)
		rec, err = l.Get(ctx, "k")
		must(t, err)
		if len(rec.History) != 0 || rec.Payload != nil {
			t.Fatalf("a record made anew: history %s, payload %+v", attempts(rec.History), rec.Payload)
		}
	})

	t.Run("OverviewGroups", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		start := clock.Now().Truncate(time.Minute).Add(time.Minute)
		clock.Advance(start.Sub(clock.Now()))
		for i := range 3 {
			key := fmt.Sprintf("k-%d", i)
			mustClaim(t, l, req(key, "p1/1"), ledger.Claimed)
			must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: "p1/1", Err: "card processor said no for " + key}))
		}
		mustClaim(t, l, req("perm", "p1/2"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "perm", Owner: "p1/2", Err: "bad card 4242", Permanent: true}))
		// k-2's message went to the dead-letter queue.
		reason := "failed on receive 5 of 5: card processor said no for k-2"
		if errs := l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "k-2", Owner: "p1/1", Reason: reason, CopyID: "copy-2"}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		// A minute later k-0 is retried and completes: its failure and
		// its completion count, each in its minute.
		clock.Advance(time.Minute)
		mustClaim(t, l, req("k-0", "p2/1"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k-0", Owner: "p2/1"}))
		for _, c := range []ledger.ClaimRequest{req("a", "p1/7"), req("b", "p1/8"), req("c", "p2/3")} {
			mustClaim(t, l, c, ledger.Claimed)
		}
		o, err := l.Overview(ctx, start.Add(-time.Hour))
		must(t, err)
		if o.Failed != 2 || o.FailedPermanently != 1 || o.FailedDeadLettered != 1 || o.DeadLettered != 1 {
			t.Fatalf("failed %d, permanently %d, dead-lettered of the failed %d, dead-lettered %d; want 2, 1, 1, 1",
				o.Failed, o.FailedPermanently, o.FailedDeadLettered, o.DeadLettered)
		}
		var groups []string
		for _, g := range o.Failures {
			groups = append(groups, fmt.Sprintf("%s: %d (permanent %d, dead-lettered %d)", g.Group, g.Count, g.Permanent, g.DeadLettered))
			if ledger.ReasonGroup(g.Reason) != g.Group || !strings.HasPrefix(g.Example, map[string]string{"bad card #": "perm"}[g.Group]) {
				t.Errorf("group %q: example %q (%q), not of the group", g.Group, g.Reason, g.Example)
			}
		}
		if fmt.Sprint(groups) != "[card processor said no for #: 2 (permanent 0, dead-lettered 1) bad card #: 1 (permanent 1, dead-lettered 0)]" || o.FailureGroups != 2 {
			t.Errorf("failures by group (%d): %v", o.FailureGroups, groups)
		}
		if len(o.DeadLetters) != 1 || o.DeadLetters[0].Group != ledger.ReasonGroup(reason) || o.DeadLetters[0].Count != 1 ||
			o.DeadLetters[0].Example != "k-2" || o.DeadLetters[0].Reason != reason {
			t.Errorf("dead letters by group: %+v", o.DeadLetters)
		}
		if fmt.Sprintf("%+v", o.Owners) != "[{Owner:p1 Claims:2 Lapsed:0} {Owner:p2 Claims:1 Lapsed:0}]" {
			t.Errorf("processes holding claims: %+v", o.Owners)
		}
		var activity []string
		for _, m := range o.Activity {
			activity = append(activity, fmt.Sprintf("+%v: %d completed, %d failed", m.Start.Sub(start), m.Completed, m.Failed))
		}
		if fmt.Sprint(activity) != "[+0s: 0 completed, 4 failed +1m0s: 1 completed, 0 failed]" {
			t.Errorf("activity: %v", activity)
		}
		// A claim of the dead-lettered operation (its message replayed)
		// takes it out of the dead letters.
		mustClaim(t, l, req("k-2", "p2/9"), ledger.Claimed)
		o, err = l.Overview(ctx, start.Add(-time.Hour))
		must(t, err)
		if o.Failed != 1 || o.FailedDeadLettered != 0 || o.DeadLettered != 0 || len(o.DeadLetters) != 0 {
			t.Errorf("after a claim of the dead-lettered operation: failed %d, of them dead-lettered %d, dead-lettered %d %+v",
				o.Failed, o.FailedDeadLettered, o.DeadLettered, o.DeadLetters)
		}
	})

	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		for i := range 12 {
			key, owner := fmt.Sprintf("k%02d", i), fmt.Sprintf("p%d/1", i)
			mustClaim(t, l, req(key, owner), ledger.Claimed)
			switch i % 4 {
			case 0:
				must(t, l.Complete(ctx, ledger.Completion{Key: key, Owner: owner}))
			case 1:
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: "timeout after " + fmt.Sprint(i) + "s"}))
			case 2:
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: "bad card " + key, Permanent: true}))
			case 3:
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: "timeout after 9s"}))
				if errs := l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: key, Owner: owner, Reason: "last receive"}}); errs[0] != nil {
					t.Fatal(errs[0])
				}
			}
			clock.Advance(time.Minute)
		}
		for _, tc := range []struct {
			f    ledger.Filter
			want string
		}{
			{ledger.Filter{ReasonGroup: "timeout after #"}, "[k01 k03 k05 k07 k09 k11]"},
			{ledger.Filter{State: ledger.StateFailed, ReasonGroup: "bad card #"}, "[k02 k06 k10]"},
			{ledger.Filter{State: ledger.StateFailed, Permanent: ledger.FlagSet}, "[k02 k06 k10]"},
			{ledger.Filter{State: ledger.StateFailed, Permanent: ledger.FlagUnset, DeadLettered: ledger.FlagUnset}, "[k01 k05 k09]"},
			{ledger.Filter{DeadLettered: ledger.FlagSet}, "[k03 k07 k11]"},
			{ledger.Filter{State: ledger.StateFailed, DeadLettered: ledger.FlagSet, Prefix: "k0"}, "[k03 k07]"},
		} {
			for _, newest := range []bool{false, true} {
				f := tc.f
				f.Newest = newest
				for _, limit := range []int{1, 50} {
					got := listAll(t, l, f, limit)
					slices.Sort(got)
					if fmt.Sprint(got) != tc.want {
						t.Errorf("list %+v by %d: %v, want %s", f, limit, got, tc.want)
					}
				}
			}
		}
		// Newest first: by the last write, where the backend can.
		p, err := l.List(ctx, ledger.Filter{Newest: true}, "", 5)
		must(t, err)
		if p.Newest {
			var keys []string
			for _, r := range p.Records {
				keys = append(keys, r.Key)
			}
			if fmt.Sprint(keys) != "[k11 k10 k09 k08 k07]" {
				t.Errorf("the newest first: %v", keys)
			}
			p, err = l.List(ctx, ledger.Filter{Newest: true, State: ledger.StateFailed, Since: clock.Now().Add(-4*time.Minute - 30*time.Second)}, "", 50)
			must(t, err)
			keys = keys[:0]
			for _, r := range p.Records {
				keys = append(keys, r.Key)
			}
			if fmt.Sprint(keys) != "[k11 k10 k09]" || p.Next != "" {
				t.Errorf("the failures of the last 4½ minutes, newest first: %v, next %q", keys, p.Next)
			}
		}
	})
}

// attempts writes h for a comparison, times in UTC.
func attempts(h []ledger.Attempt) string {
	var b strings.Builder
	for _, a := range h {
		fmt.Fprintf(&b, "[%s→%s %s %s %q]", a.Start.UTC().Format(time.StampMilli), a.End.UTC().Format(time.StampMilli), a.Owner, a.Outcome, a.Error)
	}
	return b.String()
}
