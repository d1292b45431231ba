// Package ledgertest is the behaviour suite every ledger backend must pass:
// the claim outcomes, owner checks, leases, retention and concurrency that
// the worker relies on. A backend's tests call Run with a function that
// opens a fresh, empty ledger on the given clock.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Ledger is what the suite exercises: the backend-neutral contract.
type Ledger interface {
	Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, error)
	ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error)
	Complete(ctx context.Context, c ledger.Completion) error
	CompleteBatch(ctx context.Context, cs []ledger.Completion) []error
	Fail(ctx context.Context, f ledger.Failure) error
	FailBatch(ctx context.Context, fs []ledger.Failure) []error
	Release(ctx context.Context, key, owner string) error
	ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error
	Extend(ctx context.Context, key, owner string, lease time.Duration) (time.Time, error)
	ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error
	Reset(ctx context.Context, key string) error
	Forget(ctx context.Context, key string) error
	Get(ctx context.Context, key string) (ledger.Record, error)
	ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error
	List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error)
	Overview(ctx context.Context, since time.Time) (ledger.Overview, error)
	Stats(ctx context.Context) (ledger.Stats, error)
	Sweep(ctx context.Context) (int, error)
	Flow
}

// Clock is a manual clock for tests, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock set to a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Retention is the retention the suite asks Open for.
const Retention = 24 * time.Hour

// Open opens a new empty ledger with Retention on clock's time.
type Open func(t *testing.T, clock *Clock) Ledger

const lease = time.Minute

var fp1, fp2 = []byte("fingerprint-1"), []byte("fingerprint-2")

func req(key, owner string) ledger.ClaimRequest {
	return ledger.ClaimRequest{Key: key, Owner: owner, Lease: lease, Fingerprint: fp1, MessageID: "m-" + owner}
}

// Run runs the suite.
func Run(t *testing.T, open Open) {
	ctx := context.Background()
	setup := func(t *testing.T) (Ledger, *Clock) {
		t.Helper()
		clock := NewClock()
		return open(t, clock), clock
	}

	t.Run("ClaimOutcomes", func(t *testing.T) {
		t.Parallel()
		// Each case brings the key "k" into a state, then claims it as "b".
		cases := []struct {
			name     string
			prepare  func(t *testing.T, l Ledger, c *Clock)
			fp       []byte
			want     ledger.Outcome
			takeover bool
			attempts int
		}{
			{"New", func(*testing.T, Ledger, *Clock) {}, fp1, ledger.Claimed, false, 0},
			{"InProgressLiveLease", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				c.Advance(lease - time.Second)
			}, fp1, ledger.InProgress, false, 0},
			{"InProgressLapsedLeaseTakeover", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				c.Advance(lease)
			}, fp1, ledger.Claimed, true, 1},
			{"Complete", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a", Result: []byte("receipt-42")}))
			}, fp1, ledger.AlreadyComplete, false, 1},
			{"FailedRetryable", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "timeout"}))
			}, fp1, ledger.Claimed, false, 1},
			{"FailedPermanently", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "bad card", Permanent: true}))
			}, fp1, ledger.FailedPermanently, false, 1},
			{"ConflictWhileComplete", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
			}, fp2, ledger.Conflict, false, 1},
			{"ConflictWhileInProgress", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
			}, fp2, ledger.Conflict, false, 0},
			{"NoFingerprintIsNoConflict", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
			}, nil, ledger.AlreadyComplete, false, 1},
			{"Released", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Release(ctx, "k", "a"))
			}, fp1, ledger.Claimed, false, 0},
			{"ResetAfterPermanent", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "bad", Permanent: true}))
				must(t, l.Reset(ctx, "k"))
			}, fp1, ledger.Claimed, false, 1},
			{"ForgottenComplete", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
				must(t, l.Forget(ctx, "k"))
			}, fp2, ledger.Claimed, false, 0},
			{"ExpiredCompleteIsAbsent", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "a"), ledger.Claimed)
				must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
				c.Advance(Retention)
			}, fp2, ledger.Claimed, false, 0},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				l, clock := setup(t)
				tc.prepare(t, l, clock)
				r := req("k", "b")
				r.Fingerprint = tc.fp
				got, err := l.Claim(ctx, r)
				must(t, err)
				if got.Outcome != tc.want || got.Takeover != tc.takeover || got.Record.Attempts != tc.attempts {
					t.Fatalf("claim: got %s takeover=%v attempts=%d, want %s takeover=%v attempts=%d",
						got.Outcome, got.Takeover, got.Record.Attempts, tc.want, tc.takeover, tc.attempts)
				}
				if got.Record.Key != "k" {
					t.Fatalf("record key %q", got.Record.Key)
				}
				switch tc.want {
				case ledger.Claimed:
					if got.Record.Owner != "b" || got.Record.State != ledger.StateInProgress ||
						!got.Record.LeaseExpiry.Equal(clock.Now().Add(lease)) {
						t.Fatalf("claimed record: %+v", got.Record)
					}
				case ledger.AlreadyComplete:
					if tc.name == "Complete" && string(got.Record.Result) != "receipt-42" {
						t.Fatalf("stored result %q, want receipt-42", got.Record.Result)
					}
				case ledger.InProgress:
					if got.Record.Owner != "a" || !got.Record.LeaseExpiry.After(clock.Now()) {
						t.Fatalf("in-progress record: %+v", got.Record)
					}
				}
				// A non-claiming outcome writes nothing.
				if tc.want != ledger.Claimed {
					rec, err := l.Get(ctx, "k")
					must(t, err)
					if rec.Owner == "b" {
						t.Fatalf("outcome %s changed the owner to b", tc.want)
					}
				}
			})
		}
	})

	// A claim that names its caller's own earlier claims (Supersede)
	// takes over a record in progress under one of them, live lease or
	// not, in one conditional write; a token of another caller, even one
	// that merely starts with the same characters, keeps its live lease,
	// and no other outcome changes. Each case brings "k" into a state,
	// then claims it as "host-1/9" superseding "host-1".
	t.Run("Supersede", func(t *testing.T) {
		t.Parallel()
		claimAs := func(owner string) func(*testing.T, Ledger, *Clock) {
			return func(t *testing.T, l Ledger, _ *Clock) { mustClaim(t, l, req("k", owner), ledger.Claimed) }
		}
		cases := []struct {
			name                string
			prepare             func(t *testing.T, l Ledger, c *Clock)
			fp                  []byte
			want                ledger.Outcome
			takeover, reclaimed bool
		}{
			{"New", func(*testing.T, Ledger, *Clock) {}, fp1, ledger.Claimed, false, false},
			{"OwnLiveLease", claimAs("host-1/7"), fp1, ledger.Claimed, false, true},
			{"OwnLapsedLease", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-1/7"), ledger.Claimed)
				c.Advance(lease)
			}, fp1, ledger.Claimed, true, true},
			{"OwnLiveLeaseNoFingerprint", claimAs("host-1/7"), nil, ledger.Claimed, false, true},
			{"OtherLiveLease", claimAs("host-2/7"), fp1, ledger.InProgress, false, false},
			{"OtherSharingAPrefix", claimAs("host-10/7"), fp1, ledger.InProgress, false, false},
			{"OtherWithoutSlash", claimAs("host-1"), fp1, ledger.InProgress, false, false},
			{"OtherLonger", claimAs("host-1x/7"), fp1, ledger.InProgress, false, false},
			{"OtherLapsedLease", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-2/7"), ledger.Claimed)
				c.Advance(lease)
			}, fp1, ledger.Claimed, true, false},
			{"OwnConflict", claimAs("host-1/7"), fp2, ledger.Conflict, false, false},
			{"OwnComplete", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-1/7"), ledger.Claimed)
				must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "host-1/7"}))
			}, fp1, ledger.AlreadyComplete, false, false},
			{"OwnFailedRetryable", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-1/7"), ledger.Claimed)
				must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "host-1/7", Err: "timeout"}))
			}, fp1, ledger.Claimed, false, false},
			{"OwnFailedPermanently", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-1/7"), ledger.Claimed)
				must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "host-1/7", Err: "bad card", Permanent: true}))
			}, fp1, ledger.FailedPermanently, false, false},
			{"OwnReleased", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-1/7"), ledger.Claimed)
				must(t, l.Release(ctx, "k", "host-1/7"))
			}, fp1, ledger.Claimed, false, false},
			{"OwnExpired", func(t *testing.T, l Ledger, c *Clock) {
				mustClaim(t, l, req("k", "host-1/7"), ledger.Claimed)
				c.Advance(Retention)
			}, fp1, ledger.Claimed, false, false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				l, clock := setup(t)
				tc.prepare(t, l, clock)
				before, _ := l.Get(ctx, "k")
				r := req("k", "host-1/9")
				r.Fingerprint = tc.fp
				r.Supersede = "host-1"
				got, err := l.Claim(ctx, r)
				must(t, err)
				if got.Outcome != tc.want || got.Takeover != tc.takeover || got.Reclaimed != tc.reclaimed {
					t.Fatalf("claim: got %s takeover=%v reclaimed=%v, want %s takeover=%v reclaimed=%v",
						got.Outcome, got.Takeover, got.Reclaimed, tc.want, tc.takeover, tc.reclaimed)
				}
				rec, err := l.Get(ctx, "k")
				switch {
				case tc.want == ledger.Claimed:
					must(t, err)
					if rec.Owner != "host-1/9" || rec.State != ledger.StateInProgress || !rec.LeaseExpiry.Equal(clock.Now().Add(lease)) ||
						got.Record.Owner != "host-1/9" || got.LeaseLeft != lease {
						t.Fatalf("claimed: %+v, stored %+v", got, rec)
					}
					// The superseded claim can no longer change anything.
					if tc.reclaimed {
						if err := l.Complete(ctx, ledger.Completion{Key: "k", Owner: before.Owner}); !errors.Is(err, ledger.ErrNotOwner) {
							t.Fatalf("completion by the superseded claim: %v, want ErrNotOwner", err)
						}
					}
				case tc.want == ledger.InProgress:
					must(t, err)
					if rec.Owner != before.Owner || got.Record.Owner != before.Owner || got.LeaseLeft != lease {
						t.Fatalf("in progress: %+v, stored %+v; want the record of %q untouched", got, rec, before.Owner)
					}
				default:
					if err == nil && rec.Owner == "host-1/9" {
						t.Fatalf("outcome %s changed the owner: %+v", tc.want, rec)
					}
				}
			})
		}

		// The owner must be one of the tokens Supersede names.
		l, _ := setup(t)
		for _, owner := range []string{"host-2/1", "host-10/1", "host-1", "host-1x/1"} {
			r := req("k", owner)
			r.Supersede = "host-1"
			if _, err := l.Claim(ctx, r); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Errorf("claim by %q superseding host-1: %v, want ErrInvalidArgument", owner, err)
			}
		}
		if _, err := l.Get(ctx, "k"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a refused claim wrote: %v", err)
		}
	})

	// Record.Attempts counts the attempts that started: an attempt is
	// counted when it ends (Complete, Fail) or when a claim takes the
	// operation over from one that may have started (a lapsed lease, a
	// superseded claim); a claim alone counts none, and a release takes
	// none back.
	t.Run("Attempts", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		attempts := func(step string, want int) {
			t.Helper()
			rec, err := l.Get(ctx, "k")
			must(t, err)
			if rec.Attempts != want {
				t.Fatalf("after %s: %d attempts, want %d (record %+v)", step, rec.Attempts, want, rec)
			}
		}
		if c := mustClaim(t, l, req("k", "a"), ledger.Claimed); c.Record.Attempts != 0 {
			t.Fatalf("a first claim answers %d attempts, want 0", c.Record.Attempts)
		}
		attempts("a first claim", 0)
		_, err := l.Extend(ctx, "k", "a", lease)
		must(t, err)
		attempts("an extension", 0)
		must(t, l.Release(ctx, "k", "a"))
		if _, err := l.Get(ctx, "k"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a released claim that no attempt started before: %v, want it forgotten", err)
		}
		mustClaim(t, l, req("k", "b"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "b", Err: "first"}))
		attempts("a failure", 1)
		if c := mustClaim(t, l, req("k", "c"), ledger.Claimed); c.Record.Attempts != 1 {
			t.Fatalf("a claim after one failure answers %d attempts, want 1", c.Record.Attempts)
		}
		attempts("a claim after a failure", 1)
		must(t, l.Release(ctx, "k", "c"))
		attempts("a release", 1)
		mustClaim(t, l, req("k", "d"), ledger.Claimed)
		clock.Advance(lease)
		if c := mustClaim(t, l, req("k", "host-1/1"), ledger.Claimed); !c.Takeover || c.Record.Attempts != 2 {
			t.Fatalf("a takeover after a lapsed lease: %+v, want 2 attempts", c)
		}
		attempts("a takeover", 2)
		r := req("k", "host-1/2")
		r.Supersede = "host-1"
		if c := mustClaim(t, l, r, ledger.Claimed); !c.Reclaimed || c.Record.Attempts != 3 {
			t.Fatalf("a superseding claim: %+v, want 3 attempts", c)
		}
		attempts("a superseding claim", 3)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "host-1/2"}))
		attempts("a completion", 4)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "host-1/2"}))
		attempts("a second completion by the same owner", 4)
		if err := l.Fail(ctx, ledger.Failure{Key: "k", Owner: "host-1/2", Err: "late"}); !errors.Is(err, ledger.ErrState) {
			t.Fatalf("a failure after the completion: %v, want ErrState", err)
		}
		attempts("a refused failure", 4)

		// The batches count as the single calls do.
		mustClaim(t, l, req("x", "a"), ledger.Claimed)
		mustClaim(t, l, req("y", "a"), ledger.Claimed)
		for _, err := range l.CompleteBatch(ctx, []ledger.Completion{{Key: "x", Owner: "a"}}) {
			must(t, err)
		}
		for _, err := range l.FailBatch(ctx, []ledger.Failure{{Key: "y", Owner: "a", Err: "e"}}) {
			must(t, err)
		}
		for _, key := range []string{"x", "y"} {
			rec, err := l.Get(ctx, key)
			must(t, err)
			if rec.Attempts != 1 {
				t.Fatalf("%s after its batch: %d attempts, want 1", key, rec.Attempts)
			}
		}
	})

	t.Run("RecordFields", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		start := clock.Now()
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		clock.Advance(time.Second)
		must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "boom"}))
		clock.Advance(time.Second)
		r2 := req("k", "b")
		r2.MessageID = "m-2"
		mustClaim(t, l, r2, ledger.Claimed)
		clock.Advance(time.Second)
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "b", Result: []byte("ok")}))
		rec, err := l.Get(ctx, "k")
		must(t, err)
		want := ledger.Record{
			Key: "k", State: ledger.StateComplete, Fingerprint: fp1, Attempts: 2, Owner: "b",
			FirstSeen: start, Claimed: start.Add(2 * time.Second), Updated: start.Add(3 * time.Second),
			Completed: start.Add(3 * time.Second), Expires: start.Add(3*time.Second + Retention),
			MessageID: "m-2", Result: []byte("ok"), OwnFailures: 1,
			History: []ledger.Attempt{
				{Start: start, End: start.Add(time.Second), Owner: "a", Outcome: ledger.AttemptFailed, Error: "boom"},
				{Start: start.Add(2 * time.Second), End: start.Add(3 * time.Second), Owner: "b", Outcome: ledger.AttemptComplete},
			},
		}
		if err := equalRecord(rec, want); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		long := make([]byte, ledger.MaxKeyLen+1)
		for i := range long {
			long[i] = 'x'
		}
		for _, key := range []string{"", string(long), "bad\xffutf8"} {
			if _, err := l.Claim(ctx, req(key, "a")); !errors.Is(err, ledger.ErrInvalidKey) {
				t.Errorf("claim %q: err %v, want ErrInvalidKey", key, err)
			}
		}
		mustClaim(t, l, req(string(long[:ledger.MaxKeyLen]), "a"), ledger.Claimed)
		mustClaim(t, l, req("ключ/ü/\x00/🙂", "a"), ledger.Claimed)
		if _, err := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "", Lease: lease}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("empty owner: err %v", err)
		}
		if _, err := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "a"}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("zero lease: err %v", err)
		}
		// Oversized result and error are cut, not refused: the work is done.
		mustClaim(t, l, req("big", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "big", Owner: "a", Err: string(make([]byte, 10*ledger.MaxErrorLen))}))
		rec, err := l.Get(ctx, "big")
		must(t, err)
		if len(rec.LastError) != ledger.MaxErrorLen {
			t.Errorf("last error of %d bytes, want %d", len(rec.LastError), ledger.MaxErrorLen)
		}
		mustClaim(t, l, req("big", "b"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "big", Owner: "b", Result: make([]byte, 3*ledger.MaxResultLen)}))
		rec, err = l.Get(ctx, "big")
		must(t, err)
		if len(rec.Result) != ledger.MaxResultLen {
			t.Errorf("result of %d bytes, want %d", len(rec.Result), ledger.MaxResultLen)
		}
	})

	t.Run("OwnerChecks", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		clock.Advance(lease + time.Second)
		c := mustClaim(t, l, req("k", "b"), ledger.Claimed)
		if !c.Takeover {
			t.Fatal("expected a takeover")
		}
		// The old owner can no longer change anything.
		for name, err := range map[string]error{
			"complete": l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}),
			"fail":     l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "x"}),
			"release":  l.Release(ctx, "k", "a"),
			"extend":   second(l.Extend(ctx, "k", "a", lease)),
		} {
			if !errors.Is(err, ledger.ErrNotOwner) {
				t.Errorf("%s by the old owner: err %v, want ErrNotOwner", name, err)
			}
		}
		rec, err := l.Get(ctx, "k")
		must(t, err)
		if rec.Owner != "b" || rec.State != ledger.StateInProgress {
			t.Fatalf("record after refused transitions: %+v", rec)
		}
		// The new owner can, and completing twice is idempotent.
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "b"}))
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "b"}))
		if err := l.Fail(ctx, ledger.Failure{Key: "k", Owner: "b", Err: "late"}); !errors.Is(err, ledger.ErrState) {
			t.Errorf("fail after complete: err %v, want ErrState", err)
		}
		if err := l.Complete(ctx, ledger.Completion{Key: "nope", Owner: "b"}); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("complete of an absent key: err %v, want ErrNotFound", err)
		}
	})

	// Complete needs the record in progress under the owner: a failed
	// record (retryable or permanent) is not made complete by a late
	// report of success. Completing a complete record again is a success
	// that changes nothing.
	t.Run("CompleteNeedsInProgress", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		for _, permanent := range []bool{false, true} {
			key := fmt.Sprintf("failed-%v", permanent)
			mustClaim(t, l, req(key, "a"), ledger.Claimed)
			must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: "a", Err: "boom", Permanent: permanent}))
			if err := l.Complete(ctx, ledger.Completion{Key: key, Owner: "a", Result: []byte("late")}); !errors.Is(err, ledger.ErrState) {
				t.Errorf("complete of a failed record (permanent %v): err %v, want ErrState", permanent, err)
			}
			errs := l.CompleteBatch(ctx, []ledger.Completion{{Key: key, Owner: "a", Result: []byte("late")}})
			if !errors.Is(errs[0], ledger.ErrState) {
				t.Errorf("complete batch of a failed record (permanent %v): err %v, want ErrState", permanent, errs[0])
			}
			rec, err := l.Get(ctx, key)
			must(t, err)
			if rec.State != ledger.StateFailed || rec.Permanent != permanent || rec.LastError != "boom" || len(rec.Result) != 0 {
				t.Fatalf("failed record after refused completions: %+v", rec)
			}
		}
		mustClaim(t, l, req("done", "a"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "done", Owner: "a", Result: []byte("first")}))
		must(t, l.Complete(ctx, ledger.Completion{Key: "done", Owner: "a", Result: []byte("second")}))
		rec, err := l.Get(ctx, "done")
		must(t, err)
		if rec.State != ledger.StateComplete || string(rec.Result) != "first" {
			t.Fatalf("record completed twice: %+v, want complete with the first result", rec)
		}
	})

	t.Run("LeaseExtend", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		for range 5 {
			clock.Advance(lease / 2)
			exp, err := l.Extend(ctx, "k", "a", lease)
			must(t, err)
			if !exp.Equal(clock.Now().Add(lease)) {
				t.Fatalf("extended to %v, want %v", exp, clock.Now().Add(lease))
			}
		}
		// Two and a half leases later the claim still holds.
		mustClaim(t, l, req("k", "b"), ledger.InProgress)
		clock.Advance(lease)
		mustClaim(t, l, req("k", "b"), ledger.Claimed)
	})

	// The time left of a lease is the ledger's to tell: a caller whose
	// clock differs from the ledger's (a database server's) waits what
	// the ledger says, not its own clock's idea of the expiry.
	t.Run("LeaseLeft", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		c := mustClaim(t, l, req("k", "a"), ledger.Claimed)
		if c.LeaseLeft != lease {
			t.Fatalf("a new claim's lease left %v, want %v", c.LeaseLeft, lease)
		}
		clock.Advance(lease / 4)
		c = mustClaim(t, l, req("k", "b"), ledger.InProgress)
		if want := lease - lease/4; c.LeaseLeft != want {
			t.Fatalf("in progress: lease left %v, want %v (the ledger's clock)", c.LeaseLeft, want)
		}
		cs, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{req("j", "c"), req("j", "d")})
		must(t, err)
		if cs[0].Outcome != ledger.Claimed || cs[1].Outcome != ledger.InProgress || cs[1].LeaseLeft != lease {
			t.Fatalf("a key twice in a batch: %v then %v with %v left, want claimed then in progress with %v left",
				cs[0].Outcome, cs[1].Outcome, cs[1].LeaseLeft, lease)
		}
		clock.Advance(lease)
		c = mustClaim(t, l, req("k", "b"), ledger.Claimed)
		if !c.Takeover || c.LeaseLeft != lease {
			t.Fatalf("takeover: %+v, want a takeover with the new lease %v left", c, lease)
		}
		for _, o := range []struct {
			key string
			end func() error
		}{
			{"done", func() error { return l.Complete(ctx, ledger.Completion{Key: "done", Owner: "a"}) }},
			{"perm", func() error { return l.Fail(ctx, ledger.Failure{Key: "perm", Owner: "a", Permanent: true}) }},
		} {
			mustClaim(t, l, req(o.key, "a"), ledger.Claimed)
			must(t, o.end())
			if c, err := l.Claim(ctx, req(o.key, "b")); err != nil || c.LeaseLeft != 0 {
				t.Fatalf("claim of %q: %+v, %v: want no lease left", o.key, c, err)
			}
		}
	})

	// The heartbeat of a received batch extends its claims in one call,
	// and a stop gives back the unstarted ones in one call: each claim
	// gets its own answer, as from Extend and Release.
	t.Run("ExtendAndReleaseBatches", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		mustClaim(t, l, req("a", "o1"), ledger.Claimed)
		mustClaim(t, l, req("b", "o1"), ledger.Claimed)
		mustClaim(t, l, req("c", "o1"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "c", Owner: "o1"}))
		clock.Advance(lease / 2)
		errs := l.ExtendBatch(ctx, []ledger.ClaimRef{{Key: "b", Owner: "o1"}, {Key: "a", Owner: "o1"},
			{Key: "a", Owner: "other"}, {Key: "c", Owner: "o1"}, {Key: "gone", Owner: "o1"}, {Key: "", Owner: "o1"}}, lease)
		if len(errs) != 6 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ledger.ErrNotOwner) ||
			!errors.Is(errs[3], ledger.ErrState) || !errors.Is(errs[4], ledger.ErrNotFound) || !errors.Is(errs[5], ledger.ErrInvalidKey) {
			t.Fatalf("extend batch: %v", errs)
		}
		for _, k := range []string{"a", "b"} {
			rec, err := l.Get(ctx, k)
			must(t, err)
			if !rec.LeaseExpiry.Equal(clock.Now().Add(lease)) {
				t.Fatalf("%s: lease until %v after the batch, want %v", k, rec.LeaseExpiry, clock.Now().Add(lease))
			}
		}
		if errs := l.ExtendBatch(ctx, []ledger.ClaimRef{{Key: "a", Owner: "o1"}}, Retention+time.Second); !errors.Is(errs[0], ledger.ErrInvalidArgument) {
			t.Fatalf("extend batch beyond the retention: %v, want ErrInvalidArgument", errs)
		}
		if errs := l.ExtendBatch(ctx, nil, lease); len(errs) != 0 {
			t.Fatalf("empty extend batch: %v", errs)
		}
		// b failed once and was claimed again: its release keeps its history.
		must(t, l.Fail(ctx, ledger.Failure{Key: "b", Owner: "o1", Err: "first"}))
		mustClaim(t, l, req("b", "o2"), ledger.Claimed)
		errs = l.ReleaseBatch(ctx, []ledger.ClaimRef{{Key: "b", Owner: "o2"}, {Key: "a", Owner: "o1"},
			{Key: "c", Owner: "o1"}, {Key: "a", Owner: "o1"}})
		if len(errs) != 4 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ledger.ErrState) || !errors.Is(errs[3], ledger.ErrNotFound) {
			t.Fatalf("release batch: %v", errs)
		}
		if _, err := l.Get(ctx, "a"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a released first claim: err %v, want ErrNotFound", err)
		}
		rec, err := l.Get(ctx, "b")
		must(t, err)
		if rec.State != ledger.StateFailed || rec.Attempts != 1 || rec.LastError != "first" {
			t.Fatalf("b after its release: %+v", rec)
		}
		mustClaim(t, l, req("a", "o3"), ledger.Claimed)
		mustClaim(t, l, req("b", "o3"), ledger.Claimed)
	})

	// A lease longer than the retention would let an in-progress record
	// expire while its owner still runs the work, and another delivery
	// would run it again: such a claim or extension is refused.
	t.Run("LeaseWithinRetention", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		long := req("k", "a")
		long.Lease = Retention + time.Second
		if _, err := l.Claim(ctx, long); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("claim with a lease longer than the retention: err %v, want ErrInvalidArgument", err)
		}
		if _, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{req("other", "a"), long}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("batch with a lease longer than the retention: err %v, want ErrInvalidArgument", err)
		}
		for _, key := range []string{"k", "other"} {
			if _, err := l.Get(ctx, key); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("a refused claim wrote %q: err %v", key, err)
			}
		}
		longest := req("k", "a")
		longest.Lease = Retention
		c := mustClaim(t, l, longest, ledger.Claimed)
		clock.Advance(time.Minute)
		if _, err := l.Extend(ctx, "k", "a", Retention+time.Second); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("extend beyond the retention: err %v, want ErrInvalidArgument", err)
		}
		rec, err := l.Get(ctx, "k")
		must(t, err)
		if !rec.LeaseExpiry.Equal(c.Record.LeaseExpiry) {
			t.Fatalf("a refused extension moved the lease from %v to %v", c.Record.LeaseExpiry, rec.LeaseExpiry)
		}
		exp, err := l.Extend(ctx, "k", "a", Retention)
		must(t, err)
		if !exp.Equal(clock.Now().Add(Retention)) {
			t.Fatalf("extended to %v, want %v", exp, clock.Now().Add(Retention))
		}
	})

	t.Run("ReleaseFirstClaimForgets", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		must(t, l.Release(ctx, "k", "a"))
		if _, err := l.Get(ctx, "k"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("get after releasing a first claim: err %v, want ErrNotFound", err)
		}
		// A release after a failed attempt keeps the history.
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "first"}))
		mustClaim(t, l, req("k", "b"), ledger.Claimed)
		must(t, l.Release(ctx, "k", "b"))
		rec, err := l.Get(ctx, "k")
		must(t, err)
		if rec.State != ledger.StateFailed || rec.Attempts != 1 || rec.LastError != "first" {
			t.Fatalf("after release: %+v", rec)
		}
	})

	t.Run("ResetAndForget", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		if err := l.Reset(ctx, "absent"); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("reset absent: %v", err)
		}
		must(t, l.Forget(ctx, "absent"))
		mustClaim(t, l, req("k", "a"), ledger.Claimed)
		if err := l.Reset(ctx, "k"); !errors.Is(err, ledger.ErrState) {
			t.Errorf("reset in progress: %v", err)
		}
		must(t, l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
		if err := l.Reset(ctx, "k"); !errors.Is(err, ledger.ErrState) {
			t.Errorf("reset complete: %v", err)
		}
	})

	t.Run("Batches", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		mustClaim(t, l, req("done", "x"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "done", Owner: "x"}))
		reqs := []ledger.ClaimRequest{req("a", "o1"), req("b", "o2"), req("a", "o3"), req("done", "o4")}
		cs, err := l.ClaimBatch(ctx, reqs)
		must(t, err)
		want := []ledger.Outcome{ledger.Claimed, ledger.Claimed, ledger.InProgress, ledger.AlreadyComplete}
		for i := range cs {
			if cs[i].Outcome != want[i] {
				t.Fatalf("batch claim %d: %s, want %s", i, cs[i].Outcome, want[i])
			}
		}
		if _, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{req("c", "o5"), req("", "o6")}); !errors.Is(err, ledger.ErrInvalidKey) {
			t.Fatalf("batch with an empty key: err %v", err)
		}
		if _, err := l.Get(ctx, "c"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a refused batch wrote %q: err %v", "c", err)
		}
		errs := l.CompleteBatch(ctx, []ledger.Completion{{Key: "a", Owner: "o1"}, {Key: "b", Owner: "wrong"}, {Key: ""}})
		if errs[0] != nil || !errors.Is(errs[1], ledger.ErrNotOwner) || !errors.Is(errs[2], ledger.ErrInvalidKey) {
			t.Fatalf("complete batch errors: %v", errs)
		}
		errs = l.FailBatch(ctx, []ledger.Failure{{Key: "b", Owner: "o2", Err: "e"}, {Key: "a", Owner: "o1", Err: "e"}})
		if errs[0] != nil || !errors.Is(errs[1], ledger.ErrState) {
			t.Fatalf("fail batch errors: %v", errs)
		}
	})

	t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		const n = 64
		var wg sync.WaitGroup
		outcomes := make([]ledger.Outcome, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				c, err := l.Claim(ctx, req("hot", fmt.Sprintf("o%d", i)))
				outcomes[i], errs[i] = c.Outcome, err
			})
		}
		wg.Wait()
		claimed := 0
		for i := range n {
			must(t, errs[i])
			switch outcomes[i] {
			case ledger.Claimed:
				claimed++
			case ledger.InProgress:
			default:
				t.Fatalf("claim %d: %s", i, outcomes[i])
			}
		}
		if claimed != 1 {
			t.Fatalf("%d of %d concurrent claims won, want exactly 1", claimed, n)
		}
	})

	t.Run("ConcurrentManyKeys", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		const workers, keys = 16, 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		runs := map[string]int{}
		for w := range workers {
			wg.Go(func() {
				for k := range keys {
					key := fmt.Sprintf("k%d", k)
					owner := fmt.Sprintf("w%d-%d", w, k)
					c, err := l.Claim(ctx, req(key, owner))
					if err != nil {
						t.Error(err)
						return
					}
					if c.Outcome != ledger.Claimed {
						continue
					}
					mu.Lock()
					runs[key]++
					mu.Unlock()
					if err := l.Complete(ctx, ledger.Completion{Key: key, Owner: owner}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		for k := range keys {
			if n := runs[fmt.Sprintf("k%d", k)]; n != 1 {
				t.Errorf("key k%d ran %d times", k, n)
			}
		}
		st, err := l.Stats(ctx)
		must(t, err)
		if st.Complete != keys || st.InProgress != 0 {
			t.Errorf("stats %+v, want %d complete", st, keys)
		}
	})

	t.Run("RetentionAndSweep", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		for i := range 10 {
			key := fmt.Sprintf("old%d", i)
			mustClaim(t, l, req(key, "a"), ledger.Claimed)
			must(t, l.Complete(ctx, ledger.Completion{Key: key, Owner: "a"}))
		}
		clock.Advance(Retention / 2)
		mustClaim(t, l, req("young", "a"), ledger.Claimed)
		// Touching a record renews its retention.
		mustClaim(t, l, req("old0", "b"), ledger.AlreadyComplete)
		clock.Advance(Retention / 2)
		if _, err := l.Get(ctx, "old1"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("expired record: err %v, want ErrNotFound", err)
		}
		n, err := l.Sweep(ctx)
		must(t, err)
		if n != 10 {
			t.Fatalf("swept %d, want 10", n)
		}
		if _, err := l.Get(ctx, "young"); err != nil {
			t.Fatalf("young record swept: %v", err)
		}
		st, err := l.Stats(ctx)
		must(t, err)
		if st.Complete != 0 || st.InProgress != 1 {
			t.Fatalf("stats after sweep: %+v", st)
		}
		if n, _ := l.Sweep(ctx); n != 0 {
			t.Fatalf("second sweep removed %d", n)
		}
	})

	t.Run("ListPages", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		start := clock.Now()
		reasons := []string{"Timeout talking to the bank", "card declined", "TIMEOUT again"}
		for i := range 30 {
			key, owner := fmt.Sprintf("k%02d", i), fmt.Sprintf("o%d", i)
			if i >= 25 {
				key = fmt.Sprintf("other/%d", i)
			}
			mustClaim(t, l, req(key, owner), ledger.Claimed)
			switch i % 3 {
			case 0:
				must(t, l.Complete(ctx, ledger.Completion{Key: key, Owner: owner}))
			case 1:
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: reasons[(i/3)%len(reasons)], Permanent: i%2 == 0}))
			}
			clock.Advance(time.Minute)
		}
		var all []string
		must(t, l.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error { all = append(all, r.Key); return nil }))
		for _, limit := range []int{1, 7, 30, 1000} {
			got := listAll(t, l, ledger.Filter{}, limit)
			if len(got) != 30 || !sameKeys(got, all) {
				t.Fatalf("pages of %d: %d keys %v, want each of the 30 once: %v", limit, len(got), got, all)
			}
		}
		cases := []struct {
			f    ledger.Filter
			want string
		}{
			{ledger.Filter{Prefix: "other/"}, "[other/25 other/26 other/27 other/28 other/29]"},
			{ledger.Filter{State: ledger.StateFailed, Prefix: "k1"}, "[k10 k13 k16 k19]"},
			{ledger.Filter{State: ledger.StateInProgress, Prefix: "k0"}, "[k02 k05 k08]"},
			{ledger.Filter{Reason: "timeout"}, "[k01 k07 k10 k16 k19 other/25 other/28]"},
			{ledger.Filter{Reason: "DECLINED", State: ledger.StateFailed}, "[k04 k13 k22]"},
			{ledger.Filter{Since: start.Add(10 * time.Minute), Until: start.Add(13 * time.Minute)}, "[k10 k11 k12]"},
			{ledger.Filter{Since: start.Add(28 * time.Minute)}, "[other/28 other/29]"},
			{ledger.Filter{Until: start.Add(time.Minute)}, "[k00]"},
			{ledger.Filter{Prefix: "nothing"}, "[]"},
		}
		for _, tc := range cases {
			for _, limit := range []int{1, 2, 50} {
				got := listAll(t, l, tc.f, limit)
				slices.Sort(got)
				if fmt.Sprint(got) != tc.want {
					t.Errorf("list %+v by %d: %v, want %s", tc.f, limit, got, tc.want)
				}
			}
		}
		for _, limit := range []int{-1, ledger.MaxListLimit + 1} {
			if _, err := l.List(ctx, ledger.Filter{}, "", limit); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Errorf("list with limit %d: %v, want ErrInvalidArgument", limit, err)
			}
		}
		bad := ledger.Filter{Since: start.Add(time.Hour), Until: start}
		if _, err := l.List(ctx, bad, "", 10); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("list with a window that ends before it starts: %v, want ErrInvalidArgument", err)
		}
		// An expired record is not listed: record i was last written at
		// start+i minutes.
		clock.Advance(Retention - 11*time.Minute)
		got := listAll(t, l, ledger.Filter{}, 4)
		slices.Sort(got)
		if fmt.Sprint(got) != "[k20 k21 k22 k23 k24 other/25 other/26 other/27 other/28 other/29]" {
			t.Fatalf("after the first 20 expired: %v", got)
		}
	})

	// A failure's reason stays with a record claimed again, and goes when
	// it completes: a filter by reason finds records in progress and
	// failed, never a complete one.
	t.Run("ListByReason", func(t *testing.T) {
		t.Parallel()
		l, _ := setup(t)
		mustClaim(t, l, req("failed", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "failed", Owner: "a", Err: "Timeout at the bank"}))
		mustClaim(t, l, req("retrying", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "retrying", Owner: "a", Err: "timeout again"}))
		mustClaim(t, l, req("retrying", "b"), ledger.Claimed)
		mustClaim(t, l, req("done", "a"), ledger.Claimed)
		must(t, l.Fail(ctx, ledger.Failure{Key: "done", Owner: "a", Err: "timeout once"}))
		mustClaim(t, l, req("done", "b"), ledger.Claimed)
		must(t, l.Complete(ctx, ledger.Completion{Key: "done", Owner: "b"}))
		if rec, err := l.Get(ctx, "retrying"); err != nil || rec.State != ledger.StateInProgress || rec.LastError != "timeout again" {
			t.Fatalf("claimed again after a failure: %+v, %v; want in progress with the failure's reason", rec, err)
		}
		if rec, err := l.Get(ctx, "done"); err != nil || rec.State != ledger.StateComplete || rec.LastError != "" {
			t.Fatalf("complete after a failure: %+v, %v; want no reason", rec, err)
		}
		for _, tc := range []struct {
			f    ledger.Filter
			want string
		}{
			{ledger.Filter{Reason: "TIMEOUT"}, "[failed retrying]"},
			{ledger.Filter{Reason: "timeout", State: ledger.StateInProgress}, "[retrying]"},
			{ledger.Filter{Reason: "timeout", State: ledger.StateComplete}, "[]"},
			{ledger.Filter{Reason: "once"}, "[]"},
		} {
			for _, limit := range []int{1, 50} {
				got := listAll(t, l, tc.f, limit)
				slices.Sort(got)
				if fmt.Sprint(got) != tc.want {
					t.Errorf("list %+v by %d: %v, want %s", tc.f, limit, got, tc.want)
				}
			}
		}
	})

	t.Run("Overview", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		start := clock.Now()
		for i, key := range []string{"c1", "c2", "c3"} {
			mustClaim(t, l, req(key, "w0"), ledger.Claimed)
			must(t, l.Complete(ctx, ledger.Completion{Key: key, Owner: "w0"}))
			clock.Advance(time.Duration(i+1) * time.Minute)
		}
		for i, key := range []string{"f1", "f2", "f3", "f4"} {
			mustClaim(t, l, req(key, "w0"), ledger.Claimed)
			if i < 3 {
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: "w0", Err: "timeout"}))
			} else {
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: "w0", Err: "bad card", Permanent: true}))
			}
		}
		mustClaim(t, l, req("i1", "w1"), ledger.Claimed)
		clock.Advance(2 * lease)
		mustClaim(t, l, req("i2", "w2"), ledger.Claimed)
		clock.Advance(time.Second)
		mustClaim(t, l, req("i3", "w2"), ledger.Claimed)
		o, err := l.Overview(ctx, start.Add(-time.Hour))
		must(t, err)
		if o.Complete != 3 || o.Failed != 3 || o.FailedPermanently != 1 || o.InProgress != 3 || o.Estimate != "" || o.Partial {
			t.Errorf("counts %+v, estimate %q, partial %v", o.Stats, o.Estimate, o.Partial)
		}
		if !o.Now.Equal(clock.Now()) {
			t.Errorf("now %v, want %v", o.Now, clock.Now())
		}
		var inProgress []string
		for _, r := range o.OldestClaims {
			inProgress = append(inProgress, fmt.Sprintf("%s/%s/lapsed=%v", r.Key, r.Owner, !r.LeaseExpiry.After(o.Now)))
		}
		if fmt.Sprint(inProgress) != "[i1/w1/lapsed=true i2/w2/lapsed=false i3/w2/lapsed=false]" {
			t.Errorf("in progress, oldest first: %v", inProgress)
		}
		if fmt.Sprintf("%+v", o.Owners) != "[{Owner:w2 Claims:2 Lapsed:0} {Owner:w1 Claims:1 Lapsed:1}]" {
			t.Errorf("owners %+v", o.Owners)
		}
		if len(o.Failures) != 2 || o.Failures[0].Group != "timeout" || o.Failures[0].Count != 3 || o.Failures[0].Permanent != 0 ||
			!strings.HasPrefix(o.Failures[0].Example, "f") || o.Failures[1].Group != "bad card" || o.Failures[1].Count != 1 ||
			o.Failures[1].Permanent != 1 || o.Failures[1].Example != "f4" {
			t.Errorf("failures %+v", o.Failures)
		}
		completed, failed := 0, 0
		for i, m := range o.Activity {
			if i > 0 && !m.Start.After(o.Activity[i-1].Start) {
				t.Errorf("activity out of order: %+v", o.Activity)
			}
			completed += m.Completed
			failed += m.Failed
		}
		// Completions at start, +1m and +3m, the failures at +6m.
		if completed != 3 || failed != 4 || len(o.Activity) != 4 || !o.Activity[0].Start.Equal(start.Truncate(time.Minute)) ||
			o.Activity[3].Failed != 4 {
			t.Errorf("activity %+v: want 3 completions and 4 failures in 4 minutes from %v", o.Activity, start.Truncate(time.Minute))
		}
		// Activity before since is left out.
		o, err = l.Overview(ctx, clock.Now().Add(-time.Minute))
		must(t, err)
		if len(o.Activity) != 0 {
			t.Errorf("activity of the last minute: %+v, want none", o.Activity)
		}
	})

	t.Run("StatsMatchRecords", func(t *testing.T) {
		t.Parallel()
		l, clock := setup(t)
		for i := range 40 {
			key, owner := fmt.Sprintf("k%02d", i), fmt.Sprintf("o%d", i)
			mustClaim(t, l, req(key, owner), ledger.Claimed)
			clock.Advance(time.Second)
			switch i % 5 {
			case 0:
				must(t, l.Complete(ctx, ledger.Completion{Key: key, Owner: owner}))
			case 1:
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: "e"}))
			case 2:
				must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: "e", Permanent: true}))
			case 3:
				must(t, l.Release(ctx, key, owner))
			}
		}
		st, err := l.Stats(ctx)
		must(t, err)
		got := map[ledger.State]int{}
		permanent := 0
		must(t, l.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error {
			got[r.State]++
			if r.Permanent {
				permanent++
			}
			return nil
		}))
		if st.Complete != 8 || st.Failed != 8 || st.FailedPermanently != 8 || st.InProgress != 8 ||
			got[ledger.StateComplete] != 8 || got[ledger.StateFailed] != 16 || permanent != 8 || got[ledger.StateInProgress] != 8 {
			t.Fatalf("stats %+v, records by state %v (permanent %d)", st, got, permanent)
		}
		if want := NewClock().Now().Add(4 * time.Second); !st.OldestInProgress.Equal(want) {
			t.Fatalf("oldest in progress %v, want %v", st.OldestInProgress, want)
		}
		// The order of a walk is the backend's (the embedded ledger's key
		// order is checked in its own tests; a DynamoDB Scan has none):
		// only which records it passes is checked here.
		var failed []string
		must(t, l.ForEach(ctx, ledger.Filter{State: ledger.StateFailed, Prefix: "k1"}, func(r ledger.Record) error {
			failed = append(failed, r.Key)
			return nil
		}))
		slices.Sort(failed)
		if fmt.Sprint(failed) != "[k11 k12 k16 k17]" {
			t.Fatalf("failed with prefix k1: %v", failed)
		}
	})

	runFlow(t, setup)
	runStory(t, setup)
}

// listAll reads every page of a List of f, limit records at a time, and
// returns the keys in the order read.
func listAll(t *testing.T, l Ledger, f ledger.Filter, limit int) []string {
	t.Helper()
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("list %+v: more than 1000 pages", f)
		}
		p, err := l.List(context.Background(), f, after, limit)
		must(t, err)
		if len(p.Records) > limit {
			t.Fatalf("list %+v: a page of %d records, over the limit %d", f, len(p.Records), limit)
		}
		for _, r := range p.Records {
			if !f.Match(r) {
				t.Fatalf("list %+v gave %q, which does not match: %+v", f, r.Key, r)
			}
			keys = append(keys, r.Key)
		}
		if p.Next == "" {
			return keys
		}
		after = p.Next
	}
}

func mustClaim(t *testing.T, l Ledger, r ledger.ClaimRequest, want ledger.Outcome) ledger.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), r)
	must(t, err)
	if c.Outcome != want {
		t.Fatalf("claim %q by %q: %s, want %s", r.Key, r.Owner, c.Outcome, want)
	}
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sameKeys reports whether a and b hold the same keys, each once.
func sameKeys(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b) && len(slices.Compact(a)) == len(b)
}

func second[T any](_ T, err error) error { return err }

func equalRecord(got, want ledger.Record) error {
	g, w := fmt.Sprintf("%+v", norm(got)), fmt.Sprintf("%+v", norm(want))
	if g != w {
		return fmt.Errorf("record\n got %s\nwant %s", g, w)
	}
	return nil
}

// norm puts times in UTC so that records compare by instant.
func norm(r ledger.Record) ledger.Record {
	for _, p := range []*time.Time{&r.LeaseExpiry, &r.FirstSeen, &r.Claimed, &r.Updated, &r.Completed, &r.Expires, &r.DeadLettered} {
		if !p.IsZero() {
			*p = p.UTC()
		}
	}
	r.History = slices.Clone(r.History)
	for i := range r.History {
		r.History[i].Start, r.History[i].End = r.History[i].Start.UTC(), r.History[i].End.UTC()
	}
	if r.Payload != nil {
		p := *r.Payload
		r.Payload = &p
	}
	return r
}
