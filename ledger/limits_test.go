package ledger_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

func limitsOpen(t *testing.T) (*ledger.DB, *ledgertest.Clock) {
	t.Helper()
	clock := ledgertest.NewClock()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "l.db"), ledger.Options{Retention: ledgertest.Retention, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, clock
}

func manyTokens(n int, t ledger.Token) []ledger.Token {
	ts := make([]ledger.Token, n)
	for i := range ts {
		ts[i] = t
	}
	return ts
}

// TestLimits_IntervalRounding: Bucket.Interval rounds 1/Rate up to the
// nanosecond, so that no bucket gives its tokens faster than its rate.
// Rounded to the nearest, at 3/s, burst 1, four starts fell within one
// second (0, T, 2T, 3T = 999,999,999 ns), and at 7·10⁸/s (valid: up to
// 10⁹) the interval was 1 ns, 43 % over the rate.
func TestLimits_IntervalRounding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		rate float64
		n    int
	}{{3, 4}, {7e8, 1000}, {3e8, 1000}} {
		db, _ := limitsOpen(t)
		g, err := db.Reserve(ctx, ledger.Reservation{Buckets: []ledger.Bucket{{Name: "b", Rate: c.rate, Burst: 1}},
			Tokens: manyTokens(c.n, ledger.Token{Buckets: []int{0}})})
		if err != nil {
			t.Fatal(err)
		}
		// Burst 1: the n tokens span at least (n-1)/rate.
		least := time.Duration(math.Ceil(float64(c.n-1) / c.rate * 1e9))
		if last := g.Starts[c.n-1]; last < least {
			t.Errorf("rate %g/s, burst 1: %d tokens start within %v, the rate needs at least %v (interval %v)",
				c.rate, c.n, last, least, (&ledger.Bucket{Rate: c.rate, Burst: 1}).Interval())
		}
	}
}

// TestLimits_TokensPerCall: a reservation takes at most MaxTokens tokens
// (a worker asks for a received batch's), refused above with the count;
// PostgreSQL plans a call token by token at a cost that grows faster than
// their number, and 16,000 tokens ran into its timeout, reported as an
// unavailable store.
func TestLimits_TokensPerCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := limitsOpen(t)
	b := []ledger.Bucket{{Name: "b", Rate: 1e6, Burst: 1}}
	if _, err := db.Reserve(ctx, ledger.Reservation{Buckets: b, Tokens: manyTokens(ledger.MaxTokens, ledger.Token{Buckets: []int{0}})}); err != nil {
		t.Fatalf("%d tokens: %v", ledger.MaxTokens, err)
	}
	_, err := db.Reserve(ctx, ledger.Reservation{Buckets: b, Tokens: manyTokens(ledger.MaxTokens+1, ledger.Token{Buckets: []int{0}})})
	if !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), "1001 tokens in one call") {
		t.Errorf("%d tokens: %v, want ErrInvalidArgument naming the count", ledger.MaxTokens+1, err)
	}
}
