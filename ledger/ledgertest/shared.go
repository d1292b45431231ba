package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// OpenShared opens n handles on one new, empty store, as n hosts would:
// each with connections of its own, all sharing the records, with Retention
// and clock's time. Only a shared backend has one; the embedded ledger
// serves one process.
type OpenShared func(t *testing.T, clock *Clock, n int) []Ledger

// RunShared runs the part of the suite that needs several handles on one
// store: claims racing from different hosts, takeovers and owner checks
// across hosts, and hosts sweeping at once. A shared backend passes Run and
// RunShared.
func RunShared(t *testing.T, open OpenShared) {
	ctx := context.Background()

	// Every host claims every key at once: each key has exactly one
	// winner, and every loser is told the operation is in progress, with
	// the winner's record.
	t.Run("RacingClaimsOneWinner", func(t *testing.T) {
		t.Parallel()
		const hosts, keys = 4, 40
		ls := open(t, NewClock(), hosts)
		type answer struct {
			host int
			c    ledger.Claim
			err  error
		}
		answers := make([][]answer, keys)
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for h := range hosts {
			wg.Go(func() {
				<-start
				for k := range keys {
					c, err := ls[h].Claim(ctx, req(fmt.Sprintf("k%d", k), fmt.Sprintf("host%d", h)))
					mu.Lock()
					answers[k] = append(answers[k], answer{h, c, err})
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for k, as := range answers {
			winners := 0
			for _, a := range as {
				switch {
				case a.err != nil:
					t.Fatalf("k%d on host%d: %v", k, a.host, a.err)
				case a.c.Outcome == ledger.Claimed:
					winners++
				case a.c.Outcome != ledger.InProgress:
					t.Fatalf("k%d on host%d: %s, want claimed or in_progress", k, a.host, a.c.Outcome)
				case a.c.Record.Owner == fmt.Sprintf("host%d", a.host) || a.c.Record.State != ledger.StateInProgress:
					t.Fatalf("k%d on host%d: in progress with record %+v, want the winner's", k, a.host, a.c.Record)
				}
			}
			if winners != 1 {
				t.Fatalf("k%d claimed by %d hosts, want 1", k, winners)
			}
		}
	})

	// The same race with batches, as workers claim what one receive
	// brought: overlapping batches from every host.
	t.Run("RacingBatchesOneWinner", func(t *testing.T) {
		t.Parallel()
		const hosts, keys = 3, 30
		ls := open(t, NewClock(), hosts)
		won := make([]int, keys)
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for h := range hosts {
			wg.Go(func() {
				<-start
				for first := 0; first < keys; first += 5 {
					var reqs []ledger.ClaimRequest
					for k := first; k < min(first+10, keys); k++ {
						reqs = append(reqs, req(fmt.Sprintf("k%d", k), fmt.Sprintf("host%d-%d", h, first)))
					}
					cs, err := ls[h].ClaimBatch(ctx, reqs)
					if err != nil {
						t.Errorf("host%d batch at %d: %v", h, first, err)
						return
					}
					mu.Lock()
					for i, c := range cs {
						if c.Outcome == ledger.Claimed {
							won[first+i]++
						}
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for k, n := range won {
			if n != 1 {
				t.Errorf("k%d claimed %d times, want once", k, n)
			}
		}
	})

	// What one host records, every other host sees at once.
	t.Run("OneRecordForAllHosts", func(t *testing.T) {
		t.Parallel()
		ls := open(t, NewClock(), 2)
		a, b := ls[0], ls[1]
		mustClaim(t, a, req("done", "a"), ledger.Claimed)
		must(t, a.Complete(ctx, ledger.Completion{Key: "done", Owner: "a", Result: []byte("receipt-7")}))
		c := mustClaim(t, b, req("done", "b"), ledger.AlreadyComplete)
		if string(c.Record.Result) != "receipt-7" {
			t.Errorf("the other host sees result %q", c.Record.Result)
		}
		mustClaim(t, a, req("failing", "a"), ledger.Claimed)
		must(t, a.Fail(ctx, ledger.Failure{Key: "failing", Owner: "a", Err: "bad card", Permanent: true}))
		mustClaim(t, b, req("failing", "b"), ledger.FailedPermanently)
		must(t, b.Reset(ctx, "failing"))
		mustClaim(t, a, req("failing", "a2"), ledger.Claimed)
		other := req("done", "b")
		other.Fingerprint = fp2
		mustClaim(t, b, other, ledger.Conflict)
		must(t, b.Forget(ctx, "done"))
		if _, err := a.Get(ctx, "done"); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("a record one host forgot: %v on the other, want ErrNotFound", err)
		}
	})

	// A host whose lease lapsed loses the operation to another host, and
	// can change nothing of it afterwards; a live lease is respected.
	t.Run("TakeoverAcrossHosts", func(t *testing.T) {
		t.Parallel()
		clock := NewClock()
		ls := open(t, clock, 2)
		a, b := ls[0], ls[1]
		mustClaim(t, a, req("k", "a"), ledger.Claimed)
		clock.Advance(lease / 2)
		_, err := a.Extend(ctx, "k", "a", lease)
		must(t, err)
		clock.Advance(lease - time.Second)
		mustClaim(t, b, req("k", "b"), ledger.InProgress)
		clock.Advance(2 * time.Second)
		if c := mustClaim(t, b, req("k", "b"), ledger.Claimed); !c.Takeover || c.Record.Attempts != 1 {
			t.Fatalf("takeover: %+v", c)
		}
		for name, err := range map[string]error{
			"complete": a.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}),
			"fail":     a.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "x"}),
			"release":  a.Release(ctx, "k", "a"),
			"extend":   second(a.Extend(ctx, "k", "a", lease)),
		} {
			if !errors.Is(err, ledger.ErrNotOwner) {
				t.Errorf("%s by the host that lost the lease: err %v, want ErrNotOwner", name, err)
			}
		}
		must(t, b.Complete(ctx, ledger.Completion{Key: "k", Owner: "b"}))
		rec, err := a.Get(ctx, "k")
		must(t, err)
		if rec.State != ledger.StateComplete || rec.Owner != "b" {
			t.Fatalf("record %+v", rec)
		}
	})

	// A completion racing a takeover: exactly one of them wins, and the
	// record says which.
	t.Run("CompleteRacesTakeover", func(t *testing.T) {
		t.Parallel()
		const keys = 30
		clock := NewClock()
		ls := open(t, clock, 2)
		a, b := ls[0], ls[1]
		for k := range keys {
			mustClaim(t, a, req(fmt.Sprintf("k%d", k), "a"), ledger.Claimed)
		}
		clock.Advance(lease + time.Second)
		var completed, tookOver [keys]bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for k := range keys {
				completed[k] = a.Complete(ctx, ledger.Completion{Key: fmt.Sprintf("k%d", k), Owner: "a"}) == nil
			}
		})
		wg.Go(func() {
			for k := range keys {
				c, err := b.Claim(ctx, req(fmt.Sprintf("k%d", k), "b"))
				tookOver[k] = err == nil && c.Outcome == ledger.Claimed
			}
		})
		wg.Wait()
		for k := range keys {
			rec, err := a.Get(ctx, fmt.Sprintf("k%d", k))
			must(t, err)
			switch {
			case completed[k] == tookOver[k]:
				t.Errorf("k%d: completed %v and taken over %v: want exactly one", k, completed[k], tookOver[k])
			case completed[k] && rec.State != ledger.StateComplete:
				t.Errorf("k%d: completed, but the record is %+v", k, rec)
			case tookOver[k] && (rec.State != ledger.StateInProgress || rec.Owner != "b"):
				t.Errorf("k%d: taken over, but the record is %+v", k, rec)
			}
		}
	})

	// Every host sweeps at once: each expired record is removed once, and
	// no sweep fails because another removed a record first.
	t.Run("SweepingTogether", func(t *testing.T) {
		t.Parallel()
		const hosts, keys = 3, 300
		clock := NewClock()
		ls := open(t, clock, hosts)
		var reqs []ledger.ClaimRequest
		for k := range keys {
			reqs = append(reqs, req(fmt.Sprintf("k%d", k), "a"))
		}
		for first := 0; first < keys; first += 10 {
			_, err := ls[0].ClaimBatch(ctx, reqs[first:first+10])
			must(t, err)
		}
		mustClaim(t, ls[1], req("live", "b"), ledger.Claimed)
		clock.Advance(Retention - time.Hour)
		_, err := ls[1].Extend(ctx, "live", "b", lease)
		must(t, err)
		clock.Advance(2 * time.Hour)
		removed := make([]int, hosts)
		var wg sync.WaitGroup
		for h := range hosts {
			wg.Go(func() {
				n, err := ls[h].Sweep(ctx)
				if err != nil {
					t.Errorf("host%d sweep: %v", h, err)
				}
				removed[h] = n
			})
		}
		wg.Wait()
		total := 0
		for _, n := range removed {
			total += n
		}
		if total != keys {
			t.Errorf("hosts removed %v, %d in all, want %d", removed, total, keys)
		}
		if _, err := ls[2].Get(ctx, "live"); err != nil {
			t.Errorf("the live record: %v", err)
		}
	})

	runFlowShared(t, open)
}
