package ledger_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

func TestReasonGroup(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                                    "",
		"connection refused":                  "connection refused",
		"GET /orders/8812: 503 from 10.0.0.7": "GET /orders/#: # from #",
		"dial tcp 10.0.0.7:5432: connect: connection refused":  "dial tcp #:#: connect: connection refused",
		"order 3f2a9c1e-77b0-4c1d-9e2f-0a1b2c3d4e5f not found": "order # not found",
		"hash deadbeefcafe mismatch, face value":               "hash # mismatch, face value",
		"inventory service unavailable (attempt 3/5)":          "inventory service unavailable (attempt #/#)",
		"héllo wörld 42":  "héllo wörld #",
		"v1.2.3 released": "# released",
	} {
		if got := ledger.ReasonGroup(in); got != want {
			t.Errorf("ReasonGroup(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReservation_Plan: the GCRA arithmetic every backend shares, at its
// edges, and tokens that take several buckets at once.
func TestReservation_Plan(t *testing.T) {
	t.Parallel()
	const s = int64(time.Second)
	now := int64(1_767_323_045) * s
	tokens := func(n int, within time.Duration, buckets ...int) []ledger.Token {
		ts := make([]ledger.Token, n)
		for i := range ts {
			ts[i] = ledger.Token{Buckets: buckets, Within: within}
		}
		return ts
	}
	plan := func(r ledger.Reservation, tats ...int64) ledger.Grant {
		t.Helper()
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		n := len(r.Buckets)
		g := r.Plan(tats, make([]float64, n), make([]int, n), now)
		return g
	}
	b := ledger.Bucket{Name: "b", Rate: 3, Burst: 1}
	if b.Interval() != 333_333_334 {
		t.Fatalf("interval at 3/s: %v", b.Interval())
	}
	tats := []int64{0}
	g := plan(ledger.Reservation{Buckets: []ledger.Bucket{b}, Tokens: tokens(4, 0, 0)}, tats...)
	if g.Starts[3] != 3*b.Interval() || tats[0] != now+4*int64(b.Interval()) || g.Next[0] != 4*b.Interval() || g.Rates[0] != 3 {
		t.Fatalf("a new bucket: %+v, tat %d", g, tats[0]-now)
	}
	// A TAT in the past is raised to now: an idle bucket is full.
	b.Burst = 2
	g = plan(ledger.Reservation{Buckets: []ledger.Bucket{b}, Tokens: tokens(3, 0, 0)}, now-10*s)
	if g.Starts[0] != 0 || g.Starts[1] != 0 || g.Starts[2] != b.Interval() {
		t.Fatalf("an idle bucket with burst 2: %+v", g)
	}
	// Within: a start beyond it is not taken and moves nothing; a start
	// exactly at it is in.
	b = ledger.Bucket{Name: "b", Rate: 10, Burst: 1}
	tats = []int64{now}
	g = plan(ledger.Reservation{Buckets: []ledger.Bucket{b}, Tokens: tokens(10, 200*time.Millisecond, 0)}, tats...)
	if fmt.Sprint(g.Taken[:4]) != "[true true true false]" || tats[0] != now+3*s/10 || g.Starts[3] != 300*time.Millisecond {
		t.Fatalf("within 200ms at 10/s: %+v, tat %d", g, tats[0]-now)
	}
	// A bucket reserved past the bound gives nothing.
	if g := plan(ledger.Reservation{Buckets: []ledger.Bucket{b}, Tokens: tokens(1, 0, 0)}, now+int64(ledger.MaxRetention)+1); g.Taken[0] {
		t.Fatalf("a bucket reserved %v ahead gave a token", ledger.MaxRetention)
	}
	// Two buckets: a token starts at the later of its buckets' times,
	// and moves both from that start, so that the earlier bucket's next
	// token is an interval after it (not after its own time).
	fleet, tenant := ledger.Bucket{Name: "fleet", Rate: 10, Burst: 1}, ledger.Bucket{Name: "tenant", Rate: 5, Burst: 1}
	tats = []int64{now + s, now}
	g = plan(ledger.Reservation{Buckets: []ledger.Bucket{fleet, tenant}, Tokens: append(tokens(2, 0, 0, 1), tokens(1, 0, 0)...)}, tats...)
	if fmt.Sprint(g.Starts) != "[1s 1.2s 1.3s]" || tats[0] != now+14*s/10 || tats[1] != now+14*s/10 {
		t.Fatalf("tokens of a fleet a second ahead and an idle tenant: %+v, tats %d %d", g, tats[0]-now, tats[1]-now)
	}
	// A token that does not fit is skipped, and the one after it that
	// fits is taken: a busy tenant does not hold a quiet one back.
	tats = []int64{now, now + 2*s, now}
	g = plan(ledger.Reservation{Buckets: []ledger.Bucket{fleet, tenant, {Name: "quiet", Rate: 5, Burst: 1}},
		Tokens: []ledger.Token{{Buckets: []int{0, 1}, Within: time.Second}, {Buckets: []int{0, 2}, Within: time.Second}}}, tats...)
	if fmt.Sprint(g.Taken, g.Starts) != "[false true] [2s 0s]" || tats[1] != now+2*s || tats[0] != now+s/10 {
		t.Fatalf("a busy tenant's token before a quiet one's: %+v", g)
	}
	for _, bad := range []ledger.Reservation{
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1.0 / 86400 / 2, Burst: 1}}, Tokens: tokens(1, 0, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1e10, Burst: 1}}, Tokens: tokens(1, 0, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1.0 / 86400, Burst: 10_000}}, Tokens: tokens(1, 0, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1, Burst: 1}}, Tokens: tokens(1, ledger.MaxRetention+1, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1, Burst: 1}}, Tokens: tokens(1, 0, 1)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1, Burst: 1}}, Tokens: tokens(1, 0, 0, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1, Burst: 1}}, Tokens: tokens(1, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1, Burst: 1}, {Name: "b", Rate: 1, Burst: 1}}, Tokens: tokens(1, 0, 0)},
		{Buckets: []ledger.Bucket{{Name: "b", Rate: 1, Burst: 1}}},
	} {
		if err := bad.Validate(); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
