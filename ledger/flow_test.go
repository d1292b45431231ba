package ledger_test

import (
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

// TestReservation_Take: the GCRA arithmetic every backend shares, at its
// edges.
func TestReservation_Take(t *testing.T) {
	t.Parallel()
	const s = int64(time.Second)
	now := int64(1_767_323_045) * s
	r := ledger.Reservation{Bucket: "b", Rate: 3, Burst: 1, N: 4}
	if r.Interval() != 333_333_333 {
		t.Fatalf("interval at 3/s: %v", r.Interval())
	}
	g, tat := r.Take(0, now, 3, 1)
	if len(g.Starts) != 4 || g.Starts[3] != 3*r.Interval() || tat != now+4*int64(r.Interval()) || g.Next != 4*r.Interval() {
		t.Fatalf("a new bucket: %+v, tat %d", g, tat-now)
	}
	// A TAT in the past is raised to now: an idle bucket is full.
	r.Burst = 2
	g, _ = r.Take(now-10*s, now, 3, 2)
	if g.Starts[0] != 0 || g.Starts[1] != 0 || g.Starts[2] != r.Interval() {
		t.Fatalf("an idle bucket with burst 2: %+v", g)
	}
	// Within: the first start beyond it ends the grant; a start exactly
	// at it is in.
	r = ledger.Reservation{Bucket: "b", Rate: 10, Burst: 1, N: 10, Within: 200 * time.Millisecond}
	g, tat = r.Take(now, now, 10, 1)
	if len(g.Starts) != 3 || tat != now+3*s/10 {
		t.Fatalf("within 200ms at 10/s: %+v", g)
	}
	g, tat = r.Take(now+s, now, 10, 1)
	if len(g.Starts) != 0 || tat != now+s || g.Next != time.Second {
		t.Fatalf("a bucket a second ahead, within 200ms: %+v, tat %d", g, tat-now)
	}
	// A bucket reserved past the bound gives nothing.
	r.Within = 0
	if g, _ := r.Take(now+int64(ledger.MaxRetention)+1, now, 10, 1); len(g.Starts) != 0 {
		t.Fatalf("a bucket reserved %v ahead gave %d tokens", ledger.MaxRetention, len(g.Starts))
	}
	for _, bad := range []ledger.Reservation{
		{Bucket: "b", Rate: 1.0 / 86400 / 2, Burst: 1, N: 1},
		{Bucket: "b", Rate: 1e10, Burst: 1, N: 1},
		{Bucket: "b", Rate: 1.0 / 86400, Burst: 10_000, N: 1},
		{Bucket: "b", Rate: 1, Burst: 1, N: 1, Within: ledger.MaxRetention + 1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v is valid", bad)
		}
	}
}
