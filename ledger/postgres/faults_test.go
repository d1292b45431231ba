package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// bigRequest is more than any request pgx makes on its own (a ping, a
// rollback), less than a call's: the drops of the proxy target calls.
const bigRequest = 200

// viaProxy sets up a ledger whose one connection goes through a proxy, and
// warms it up so that its statements are prepared: the next call is one
// request.
func viaProxy(t *testing.T) (*postgres.Ledger, *pgtest.Proxy, postgres.Options) {
	t.Helper()
	opts := setup(t, nil)
	p := pgtest.NewProxy(t, pgtest.Addr(t, opts.URL))
	opts.URL = pgtest.WithParam(t, pgtest.ReplaceAddr(t, opts.URL, p.Addr()), "pool_max_conns", "1")
	opts.Timeout = 5 * time.Second
	l := open(t, opts)
	warmUp(t, l)
	return l, p, opts
}

// warmUp makes every kind of call once.
func warmUp(t *testing.T, l *postgres.Ledger) {
	t.Helper()
	mustClaim(t, l, claimReq("warm", "w1"), ledger.Claimed)
	must(t, l.Complete(ctx, ledger.Completion{Key: "warm", Owner: "w1"}))
	mustClaim(t, l, claimReq("warm-fail", "w1"), ledger.Claimed)
	must(t, l.Fail(ctx, ledger.Failure{Key: "warm-fail", Owner: "w1", Err: "x"}))
	mustClaim(t, l, claimReq("warm-fail", "w2"), ledger.Claimed)
	must(t, l.Release(ctx, "warm-fail", "w2"))
	_, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{claimReq("warm2", "w3"), claimReq("warm2", "w4")})
	must(t, err)
	_, err = l.Extend(ctx, "warm2", "w3", time.Minute)
	must(t, err)
}

// TestLostAnswers cuts a call's connection after the server committed its
// transaction, so that the answer never arrives, or before the server sees
// the request: either way the call is tried again on a new connection and
// answers as if nothing had happened, with the operation claimed once.
func TestLostAnswers(t *testing.T) {
	t.Parallel()
	for _, lose := range []string{"reply", "request"} {
		drop := func(t *testing.T, p *pgtest.Proxy) {
			t.Helper()
			before := p.Drops()
			if lose == "reply" {
				p.DropNextReply(bigRequest)
			} else {
				p.DropNextRequest(bigRequest)
			}
			t.Cleanup(func() {
				if p.Drops() == before {
					t.Errorf("the proxy lost no %s", lose)
				}
			})
		}
		t.Run("Claim/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _ := viaProxy(t)
			drop(t, p)
			c := mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
			if c.Record.Owner != "a" || c.Record.Attempts != 0 || c.Takeover {
				t.Fatalf("claim after a lost %s: %+v", lose, c)
			}
			rec, err := l.Get(ctx, "k")
			must(t, err)
			if rec.Owner != "a" || rec.Attempts != 0 || rec.State != ledger.StateInProgress {
				t.Fatalf("record after a lost %s: %+v", lose, rec)
			}
			// Another owner still finds it in progress.
			mustClaim(t, l, claimReq("k", "b"), ledger.InProgress)
		})
		t.Run("ClaimBatch/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _ := viaProxy(t)
			mustClaim(t, l, claimReq("held", "x"), ledger.Claimed)
			drop(t, p)
			cs, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{claimReq("k1", "a"), claimReq("k2", "a"), claimReq("k1", "b"), claimReq("held", "a")})
			must(t, err)
			want := []ledger.Outcome{ledger.Claimed, ledger.Claimed, ledger.InProgress, ledger.InProgress}
			for i, c := range cs {
				if c.Outcome != want[i] {
					t.Fatalf("batch claim %d after a lost %s: %s, want %s", i, lose, c.Outcome, want[i])
				}
			}
			if cs[2].Record.Owner != "a" || cs[3].Record.Owner != "x" {
				t.Fatalf("in-progress records: %+v, %+v", cs[2].Record, cs[3].Record)
			}
		})
		t.Run("Complete/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _ := viaProxy(t)
			mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
			mustClaim(t, l, claimReq("k2", "a"), ledger.Claimed)
			drop(t, p)
			errs := l.CompleteBatch(ctx, []ledger.Completion{{Key: "k", Owner: "a", Result: []byte("r")}, {Key: "k2", Owner: "b"}})
			if errs[0] != nil || !errors.Is(errs[1], ledger.ErrNotOwner) {
				t.Fatalf("complete after a lost %s: %v", lose, errs)
			}
			mustClaim(t, l, claimReq("k", "b"), ledger.AlreadyComplete)
		})
		t.Run("Fail/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _ := viaProxy(t)
			mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
			drop(t, p)
			must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "bad card", Permanent: true}))
			mustClaim(t, l, claimReq("k", "b"), ledger.FailedPermanently)
		})
		t.Run("Release/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _ := viaProxy(t)
			mustClaim(t, l, claimReq("first", "a"), ledger.Claimed)
			mustClaim(t, l, claimReq("again", "a"), ledger.Claimed)
			must(t, l.Fail(ctx, ledger.Failure{Key: "again", Owner: "a", Err: "e"}))
			mustClaim(t, l, claimReq("again", "b"), ledger.Claimed)
			drop(t, p)
			must(t, l.Release(ctx, "first", "a"))
			drop(t, p)
			must(t, l.Release(ctx, "again", "b"))
			if _, err := l.Get(ctx, "first"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("a released first claim: %v", err)
			}
			rec, err := l.Get(ctx, "again")
			must(t, err)
			if rec.State != ledger.StateFailed || rec.Attempts != 1 {
				t.Fatalf("a released claim: %+v", rec)
			}
		})
		t.Run("Extend/"+lose, func(t *testing.T) {
			t.Parallel()
			l, p, _ := viaProxy(t)
			mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
			drop(t, p)
			exp, err := l.Extend(ctx, "k", "a", 2*time.Minute)
			must(t, err)
			rec, err := l.Get(ctx, "k")
			must(t, err)
			if !rec.LeaseExpiry.Equal(exp) {
				t.Fatalf("extended to %v, the record says %v", exp, rec.LeaseExpiry)
			}
		})
	}

	// Every connection of the pool cut while idle (a server restart): the
	// next call works on a new one.
	t.Run("CutWhileIdle", func(t *testing.T) {
		t.Parallel()
		l, p, _ := viaProxy(t)
		p.Cut()
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
	})

	// The server ends the ledger's sessions (pg_terminate_backend, as an
	// administrator or a failover would): the next calls work.
	t.Run("Terminated", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		name := fmt.Sprintf("sqsonce-terminated-%d", time.Now().UnixNano())
		opts.URL = pgtest.WithParam(t, opts.URL, "application_name", name)
		l := open(t, opts)
		warmUp(t, l)
		admin := pgtest.Connect(t, "")
		var n int
		must(t, admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n))
		if n == 0 {
			t.Fatal("no session of the ledger to end")
		}
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
	})

	// While the server cannot be reached, calls fail with ErrUnavailable
	// (within the timeout), and work again once it can.
	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		l, p, opts := viaProxy(t)
		p.Refuse(true)
		p.Cut()
		_, err := l.Claim(ctx, claimReq("k", "a"))
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("claim while unreachable: %v, want ErrUnavailable", err)
		}
		for _, err := range l.CompleteBatch(ctx, []ledger.Completion{{Key: "warm2", Owner: "w3"}}) {
			if !errors.Is(err, ledger.ErrUnavailable) {
				t.Fatalf("complete while unreachable: %v, want ErrUnavailable", err)
			}
		}
		if _, err := l.Sweep(ctx); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("sweep while unreachable: %v, want ErrUnavailable", err)
		}
		if _, err := postgres.Open(ctx, opts); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("open while unreachable: %v, want ErrUnavailable", err)
		}
		if err := l.Ping(ctx); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("ping while unreachable: %v, want ErrUnavailable", err)
		}
		p.Refuse(false)
		if err := l.Ping(ctx); err != nil {
			t.Fatalf("ping once reachable: %v", err)
		}
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
	})
}

// A cut takes every open connection at once. The call that finds its
// connection gone tries again on a connection the pool has checked, not on
// another one the same cut closed.
func TestLostAnswers_EveryConnectionCut(t *testing.T) {
	t.Parallel()
	opts := setup(t, nil)
	p := pgtest.NewProxy(t, pgtest.Addr(t, opts.URL))
	opts.URL = pgtest.WithParam(t, pgtest.ReplaceAddr(t, opts.URL, p.Addr()), "pool_max_conns", "4")
	opts.Timeout = 5 * time.Second
	l := open(t, opts)
	// Four connections in the pool, each used a moment ago.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			<-start
			_, err := l.Claim(ctx, claimReq(fmt.Sprintf("warm-%d", i), "w"))
			if err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	for round := range 5 {
		p.Cut()
		if _, err := l.Claim(ctx, claimReq(fmt.Sprintf("after-cut-%d", round), "a")); err != nil {
			t.Fatalf("round %d: a claim after every connection was cut: %v, want it to succeed on a checked connection", round, err)
		}
	}
}
