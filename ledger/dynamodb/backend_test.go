package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

const lease = time.Minute

func claimReq(key, owner string) ledger.ClaimRequest {
	return ledger.ClaimRequest{Key: key, Owner: owner, Lease: lease, Fingerprint: []byte("fp"), MessageID: "m-" + owner}
}

func mustClaim(t *testing.T, l ledgertest.Ledger, key, owner string, want ledger.Outcome) ledger.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), claimReq(key, owner))
	if err != nil {
		t.Fatal(err)
	}
	if c.Outcome != want {
		t.Fatalf("claim %q by %q: %s, want %s (record %+v)", key, owner, c.Outcome, want, c.Record)
	}
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rawItem reads the item of key as stored, expired or not; nil when there
// is none.
func rawItem(t *testing.T, c *ddb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &ddb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "op#" + key}},
		ConsistentRead: aws.Bool(true),
	})
	must(t, err)
	if len(out.Item) == 0 {
		return nil
	}
	return out.Item
}

func number(t *testing.T, item map[string]types.AttributeValue, name string) int64 {
	t.Helper()
	n, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("attribute %s is %T, want a number", name, item[name])
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	must(t, err)
	return v
}

// faulty is a ledger whose client's requests go through a Faults
// transport, with the SDK's retries as maxAttempts says (0: the SDK's
// default), and a second, plain ledger on the same table for looking, with
// the default timeout whatever mod sets.
type faulty struct {
	l, other *dynamodb.Ledger
	faults   *dynamotest.Faults
	clock    *ledgertest.Clock
	client   *ddb.Client
	opts     dynamodb.Options
}

func setupFaulty(t *testing.T, maxAttempts int, mod func(*dynamodb.Options)) *faulty {
	t.Helper()
	clock := ledgertest.NewClock()
	plain := dynamotest.NewClient(t, nil)
	opts := newTable(t, plain, clock)
	if mod != nil {
		mod(&opts)
	}
	f := dynamotest.NewFaults(nil)
	c := dynamotest.NewClient(t, f, func(o *ddb.Options) {
		if maxAttempts > 0 {
			o.RetryMaxAttempts = maxAttempts
		}
	})
	looking := opts
	looking.Timeout = 0
	return &faulty{l: openPatiently(t, c, opts), other: open(t, plain, looking), faults: f, clock: clock, client: plain, opts: opts}
}

// openPatiently opens a ledger whose Options.Timeout may be short, trying
// again for up to 30 s while the open finds DynamoDB unavailable: no fault
// is set yet, so that can only be a server slower than the timeout (moto
// under load), which the tests that set a short timeout do not test.
func openPatiently(t *testing.T, c dynamodb.Client, opts dynamodb.Options) *dynamodb.Ledger {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := dynamodb.Open(context.Background(), c, opts)
		if err == nil {
			t.Cleanup(func() { l.Close() })
			return l
		}
		if !errors.Is(err, ledger.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}

// A write whose answer is lost took effect; whether the SDK or the caller
// sends it again, the operation ends up with one owner and its completion
// recorded once.
func TestLedger_LostAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ClaimRetriedBySDK", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		s.faults.Next("UpdateItem", dynamotest.LostAck)
		c := mustClaim(t, s.l, "k", "a", ledger.Claimed)
		if got := s.faults.Count("UpdateItem", dynamotest.LostAck); got != 1 {
			t.Fatalf("%d lost answers injected, want 1", got)
		}
		if c.Record.Owner != "a" || c.Record.Attempts != 0 {
			t.Fatalf("claim after a lost answer: %+v", c.Record)
		}
		mustClaim(t, s.other, "k", "b", ledger.InProgress)
		must(t, s.l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}))
	})

	t.Run("ClaimRetriedByCaller", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 1, nil)
		s.faults.Next("UpdateItem", dynamotest.LostAck)
		if _, err := s.l.Claim(ctx, claimReq("k", "a")); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("claim whose answer was lost: err %v, want ErrUnavailable", err)
		}
		mustClaim(t, s.other, "k", "b", ledger.InProgress)
		c := mustClaim(t, s.l, "k", "a", ledger.Claimed)
		if c.Record.Owner != "a" || c.Record.Attempts != 0 {
			t.Fatalf("the caller's retry: %+v, want its own claim, no attempt counted", c.Record)
		}
	})

	t.Run("TakeoverRetriedBySDK", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		mustClaim(t, s.other, "k", "a", ledger.Claimed)
		s.clock.Advance(lease)
		s.faults.Next("UpdateItem", dynamotest.LostAck)
		c := mustClaim(t, s.l, "k", "b", ledger.Claimed)
		if c.Record.Owner != "b" || c.Record.Attempts != 1 {
			t.Fatalf("takeover after a lost answer: %+v, want owner b, one attempt (a's)", c.Record)
		}
		if err := s.other.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}); !errors.Is(err, ledger.ErrNotOwner) {
			t.Fatalf("complete by the previous owner: err %v, want ErrNotOwner", err)
		}
	})

	for _, attempts := range []int{0, 1} {
		by := map[int]string{0: "SDK", 1: "Caller"}[attempts]
		t.Run("CompleteRetriedBy"+by, func(t *testing.T) {
			t.Parallel()
			s := setupFaulty(t, attempts, nil)
			mustClaim(t, s.l, "k", "a", ledger.Claimed)
			s.faults.Next("UpdateItem", dynamotest.LostAck)
			err := s.l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a", Result: []byte("first")})
			if attempts == 1 {
				if !errors.Is(err, ledger.ErrUnavailable) {
					t.Fatalf("completion whose answer was lost: err %v, want ErrUnavailable", err)
				}
				err = s.l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a", Result: []byte("second")})
			}
			must(t, err)
			rec, err := s.other.Get(ctx, "k")
			must(t, err)
			if rec.State != ledger.StateComplete || string(rec.Result) != "first" || rec.Attempts != 1 {
				t.Fatalf("record after a lost completion: %+v, want complete with the first result", rec)
			}
			mustClaim(t, s.other, "k", "b", ledger.AlreadyComplete)
		})
	}

	t.Run("FailRetriedBySDK", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		mustClaim(t, s.l, "k", "a", ledger.Claimed)
		s.faults.Next("UpdateItem", dynamotest.LostAck)
		must(t, s.l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "boom", Permanent: true}))
		rec, err := s.other.Get(ctx, "k")
		must(t, err)
		if rec.State != ledger.StateFailed || !rec.Permanent || rec.LastError != "boom" {
			t.Fatalf("record after a lost failure: %+v", rec)
		}
		// Not a lost answer: a second failure is refused.
		if err := s.l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "again"}); !errors.Is(err, ledger.ErrState) {
			t.Fatalf("second failure: err %v, want ErrState", err)
		}
	})

	t.Run("ReleaseRetriedBySDK", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		mustClaim(t, s.l, "k", "a", ledger.Claimed)
		must(t, s.l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a", Err: "first"}))
		mustClaim(t, s.l, "k", "b", ledger.Claimed)
		// The first request (a delete of a first claim) fails its
		// condition; the update that follows loses its answer.
		s.faults.Next("UpdateItem", dynamotest.LostAck)
		must(t, s.l.Release(ctx, "k", "b"))
		rec, err := s.other.Get(ctx, "k")
		must(t, err)
		if rec.State != ledger.StateFailed || rec.Attempts != 1 || rec.LastError != "first" {
			t.Fatalf("record after a lost release: %+v", rec)
		}
	})

	// A first claim's release deletes the item; its retry finds nothing
	// and says so, and the item is gone as asked.
	t.Run("ReleaseOfFirstClaimRetriedBySDK", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		mustClaim(t, s.l, "k", "a", ledger.Claimed)
		s.faults.Next("DeleteItem", dynamotest.LostAck)
		if err := s.l.Release(ctx, "k", "a"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("retried release of a first claim: err %v, want ErrNotFound", err)
		}
		if item := rawItem(t, s.client, s.opts.Table, "k"); item != nil {
			t.Fatalf("the released first claim is still there: %v", item)
		}
		mustClaim(t, s.other, "k", "b", ledger.Claimed)
	})

	t.Run("ExtendRetriedBySDK", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		mustClaim(t, s.l, "k", "a", ledger.Claimed)
		s.clock.Advance(lease / 2)
		s.faults.Next("UpdateItem", dynamotest.LostAck)
		exp, err := s.l.Extend(ctx, "k", "a", lease)
		must(t, err)
		rec, err := s.other.Get(ctx, "k")
		must(t, err)
		if !rec.LeaseExpiry.Equal(exp) || !exp.Equal(s.clock.Now().Add(lease)) {
			t.Fatalf("lease %v after a lost extension that answered %v", rec.LeaseExpiry, exp)
		}
	})

	// A batch that fails part way gives back the claims it made.
	t.Run("FailedBatchGivesBack", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 1, func(o *dynamodb.Options) { o.Concurrency = 1 })
		s.faults.Next("UpdateItem", "", dynamotest.Reset)
		_, err := s.l.ClaimBatch(ctx, []ledger.ClaimRequest{claimReq("k1", "a1"), claimReq("k2", "a2"), claimReq("k3", "a3")})
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("batch with a failed request: err %v, want ErrUnavailable", err)
		}
		for _, key := range []string{"k1", "k2", "k3"} {
			if _, err := s.other.Get(ctx, key); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("%s after the failed batch: err %v, want ErrNotFound", key, err)
			}
		}
	})
}

// Throttling, server errors, connection errors and requests without an
// answer are ErrUnavailable once the SDK gives up; the caller's own
// context ending is not.
func TestLedger_Unavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kind := range []dynamotest.Kind{dynamotest.Throttle, dynamotest.ServerError, dynamotest.Reset, dynamotest.Timeout} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			s := setupFaulty(t, 2, func(o *dynamodb.Options) { o.Timeout = 300 * time.Millisecond })
			mustClaim(t, s.other, "done", "a", ledger.Claimed)
			for _, op := range []string{"UpdateItem", "GetItem", "Scan", "DeleteItem", "PutItem"} {
				s.faults.Always(op, kind)
			}
			for what, err := range map[string]error{
				"claim":    second(s.l.Claim(ctx, claimReq("k", "a"))),
				"complete": s.l.Complete(ctx, ledger.Completion{Key: "done", Owner: "a"}),
				"get":      second(s.l.Get(ctx, "done")),
				"stats":    second(s.l.Stats(ctx)),
				"forget":   s.l.Forget(ctx, "done"),
			} {
				if !errors.Is(err, ledger.ErrUnavailable) {
					t.Errorf("%s: err %v, want ErrUnavailable", what, err)
				}
			}
		})
	}
	t.Run("CallerCancelled", func(t *testing.T) {
		t.Parallel()
		s := setupFaulty(t, 0, nil)
		s.faults.Always("UpdateItem", dynamotest.Timeout)
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := s.l.Claim(cctx, claimReq("k", "a"))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("claim whose context ended: err %v, want the context's error alone", err)
		}
	})
}

// TTL deletion lags by days, and dynalite has none: an expired item is
// absent to every call before anything removes it.
func TestLedger_ExpiredIsAbsent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledgertest.NewClock()
	c := dynamotest.NewClient(t, nil)
	opts := newTable(t, c, clock)
	l := open(t, c, opts)
	mustClaim(t, l, "done", "a", ledger.Claimed)
	must(t, l.Complete(ctx, ledger.Completion{Key: "done", Owner: "a", Result: []byte("r")}))
	mustClaim(t, l, "failed", "a", ledger.Claimed)
	must(t, l.Fail(ctx, ledger.Failure{Key: "failed", Owner: "a", Err: "e", Permanent: true}))
	long := claimReq("running", "a")
	long.Lease = ledgertest.Retention
	_, err := l.Claim(ctx, long)
	must(t, err)

	item := rawItem(t, c, opts.Table, "done")
	expires := number(t, item, "expires")
	ttl := number(t, item, "ttl")
	if want := clock.Now().Add(ledgertest.Retention); expires != want.UnixNano() || ttl != want.Unix() {
		t.Fatalf("expires %d, ttl %d: want %d and %d", expires, ttl, want.UnixNano(), want.Unix())
	}

	clock.Advance(ledgertest.Retention)
	for _, key := range []string{"done", "failed", "running"} {
		if rawItem(t, c, opts.Table, key) == nil {
			t.Fatalf("%s is gone before any sweep", key)
		}
		if _, err := l.Get(ctx, key); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("get of expired %s: err %v, want ErrNotFound", key, err)
		}
	}
	for what, err := range map[string]error{
		"complete": l.Complete(ctx, ledger.Completion{Key: "running", Owner: "a"}),
		"fail":     l.Fail(ctx, ledger.Failure{Key: "running", Owner: "a"}),
		"release":  l.Release(ctx, "running", "a"),
		"extend":   second(l.Extend(ctx, "running", "a", lease)),
		"reset":    l.Reset(ctx, "failed"),
	} {
		if !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s of an expired record: err %v, want ErrNotFound", what, err)
		}
	}
	n := 0
	must(t, l.ForEach(ctx, ledger.Filter{}, func(ledger.Record) error { n++; return nil }))
	st, err := l.Stats(ctx)
	must(t, err)
	if n != 0 || st != (ledger.Stats{}) {
		t.Errorf("expired records walked %d, stats %+v: want none", n, st)
	}
	// A claim writes a new record over the expired one: its history and
	// its fingerprint are gone.
	other := claimReq("done", "b")
	other.Fingerprint = []byte("another")
	got, err := l.Claim(ctx, other)
	must(t, err)
	if got.Outcome != ledger.Claimed || got.Takeover || got.Record.Attempts != 0 || !got.Record.FirstSeen.Equal(clock.Now()) ||
		len(got.Record.Result) != 0 || !got.Record.Completed.IsZero() {
		t.Fatalf("claim over an expired record: %s %+v, want a new record", got.Outcome, got.Record)
	}
	rec, err := l.Get(ctx, "done")
	must(t, err)
	if rec.Attempts != 0 || rec.Owner != "b" || len(rec.Result) != 0 || string(rec.Fingerprint) != "another" {
		t.Fatalf("stored after the claim over an expired record: %+v", rec)
	}
	mustClaim(t, l, "done", "c", ledger.Conflict)
}

// Hosts sweep while another claims the expired keys anew: every key ends
// up claimed, and no sweep removes a claim made after the item expired.
func TestLedger_SweepRacesClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const keys = 200
	clock := ledgertest.NewClock()
	opts := newTable(t, dynamotest.NewClient(t, nil), clock)
	var ls []*dynamodb.Ledger
	for range 3 {
		ls = append(ls, open(t, dynamotest.NewClient(t, nil), opts))
	}
	for first := 0; first < keys; first += 10 {
		var reqs []ledger.ClaimRequest
		for k := first; k < first+10; k++ {
			reqs = append(reqs, claimReq(fmt.Sprintf("k%03d", k), "old"))
		}
		_, err := ls[0].ClaimBatch(ctx, reqs)
		must(t, err)
	}
	clock.Advance(ledgertest.Retention + time.Hour)
	var wg sync.WaitGroup
	removed := make([]int, 2)
	for h := range 2 {
		wg.Go(func() {
			n, err := ls[h].Sweep(ctx)
			if err != nil {
				t.Errorf("sweep on host %d: %v", h, err)
			}
			removed[h] = n
		})
	}
	wg.Go(func() {
		for k := keys - 1; k >= 0; k-- {
			if _, err := ls[2].Claim(ctx, claimReq(fmt.Sprintf("k%03d", k), "new")); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	for k := range keys {
		rec, err := ls[2].Get(ctx, fmt.Sprintf("k%03d", k))
		if err != nil || rec.Owner != "new" {
			t.Fatalf("k%03d after sweeps raced its claim: %+v, %v", k, rec, err)
		}
	}
	if total := removed[0] + removed[1]; total > keys {
		t.Fatalf("sweeps removed %v, more than the %d keys", removed, keys)
	}
	t.Logf("the sweeps removed %v of %d keys before their new claims", removed, keys)
}

// An item that cannot be decoded (written by hand, or by a newer sqsonce)
// is its own request's error and nobody else's, and Forget removes it.
func TestLedger_UnreadableItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamotest.NewClient(t, nil)
	opts := newTable(t, c, nil)
	l := open(t, c, opts)
	mustClaim(t, l, "good", "a", ledger.Claimed)
	put := func(item map[string]types.AttributeValue) {
		_, err := c.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(opts.Table), Item: item})
		must(t, err)
	}
	put(map[string]types.AttributeValue{
		"pk":    &types.AttributeValueMemberS{Value: "op#bad"},
		"state": &types.AttributeValueMemberS{Value: "weird"},
	})
	newer := rawItem(t, c, opts.Table, "good")
	newer["pk"] = &types.AttributeValueMemberS{Value: "op#newer"}
	newer["v"] = &types.AttributeValueMemberN{Value: "2"}
	put(newer)

	cs, err := l.ClaimBatch(ctx, []ledger.ClaimRequest{claimReq("bad", "b"), claimReq("fresh", "b"), claimReq("newer", "b")})
	must(t, err)
	if !errors.Is(cs[0].Err, ledger.ErrCorrupt) || cs[1].Outcome != ledger.Claimed || !errors.Is(cs[2].Err, ledger.ErrSchema) {
		t.Fatalf("batch with unreadable items: %+v", cs)
	}
	if _, err := l.Get(ctx, "bad"); !errors.Is(err, ledger.ErrCorrupt) {
		t.Errorf("get of an unreadable item: err %v, want ErrCorrupt", err)
	}
	if err := l.Complete(ctx, ledger.Completion{Key: "bad", Owner: "b"}); !errors.Is(err, ledger.ErrCorrupt) {
		t.Errorf("complete of an unreadable item: err %v, want ErrCorrupt", err)
	}
	var walked []string
	err = l.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error { walked = append(walked, r.Key); return nil })
	if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), "2 record(s)") || len(walked) != 2 {
		t.Errorf("walk past unreadable items: passed %v, err %v", walked, err)
	}
	must(t, l.Forget(ctx, "bad"))
	must(t, l.Forget(ctx, "newer"))
	mustClaim(t, l, "bad", "c", ledger.Claimed)
	must(t, l.ForEach(ctx, ledger.Filter{}, func(ledger.Record) error { return nil }))
}

// A walk in many pages sees each record that exists for the whole walk
// exactly once while records are written and removed.
func TestLedger_WalkDuringWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamotest.NewClient(t, nil)
	l := open(t, c, newTable(t, c, nil))
	const n = 800 // more than three pages
	for first := 0; first < n; first += 10 {
		var reqs []ledger.ClaimRequest
		for k := first; k < first+10; k++ {
			reqs = append(reqs, claimReq(fmt.Sprintf("k%04d", k), "a"))
		}
		_, err := l.ClaimBatch(ctx, reqs)
		must(t, err)
	}
	seen := map[string]int{}
	forgotten := map[string]bool{}
	i := 0
	err := l.ForEach(ctx, ledger.Filter{Prefix: "k"}, func(r ledger.Record) error {
		seen[r.Key]++
		i++
		if i%40 == 0 {
			// Remove a record (seen or not) and add one.
			victim := fmt.Sprintf("k%04d", (i*7)%n)
			forgotten[victim] = true
			if err := l.Forget(ctx, victim); err != nil {
				return err
			}
			if _, err := l.Claim(ctx, claimReq(fmt.Sprintf("k%04d-new", i), "b")); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, err)
	for key, times := range seen {
		if times != 1 {
			t.Errorf("%s seen %d times", key, times)
		}
	}
	for k := range n {
		key := fmt.Sprintf("k%04d", k)
		if !forgotten[key] && seen[key] != 1 {
			t.Errorf("%s was there for the whole walk but not seen", key)
		}
	}
}

// A host whose clock runs ahead takes a live lease over early, by its
// skew: the documented limit of leases compared with host clocks.
func TestLedger_ClockSkew(t *testing.T) {
	t.Parallel()
	clock := ledgertest.NewClock()
	const skew = 10 * time.Second
	c := dynamotest.NewClient(t, nil)
	opts := newTable(t, c, clock)
	a := open(t, c, opts)
	ahead := opts
	ahead.Now = func() time.Time { return clock.Now().Add(skew) }
	b := open(t, dynamotest.NewClient(t, nil), ahead)
	mustClaim(t, a, "k", "a", ledger.Claimed)
	clock.Advance(lease - skew - time.Second)
	mustClaim(t, b, "k", "b", ledger.InProgress)
	clock.Advance(time.Second)
	if got := mustClaim(t, b, "k", "b", ledger.Claimed); !got.Takeover {
		t.Fatal("want a takeover")
	}
	if err := a.Complete(context.Background(), ledger.Completion{Key: "k", Owner: "a"}); !errors.Is(err, ledger.ErrNotOwner) {
		t.Fatalf("complete by the owner whose lease was taken early: err %v, want ErrNotOwner", err)
	}
}

func TestLedger_Close(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamotest.NewClient(t, nil)
	l := open(t, c, newTable(t, c, nil))
	mustClaim(t, l, "k", "a", ledger.Claimed)
	must(t, l.Close())
	must(t, l.Close())
	for what, err := range map[string]error{
		"claim":    second(l.Claim(ctx, claimReq("k", "a"))),
		"complete": l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}),
		"get":      second(l.Get(ctx, "k")),
		"walk":     l.ForEach(ctx, ledger.Filter{}, func(ledger.Record) error { return nil }),
		"stats":    second(l.Stats(ctx)),
		"sweep":    second(l.Sweep(ctx)),
		"forget":   l.Forget(ctx, "k"),
		"fail":     l.Fail(ctx, ledger.Failure{Key: "k", Owner: "a"}),
		"release":  l.Release(ctx, "k", "a"),
		"extend":   second(l.Extend(ctx, "k", "a", lease)),
		"reset":    l.Reset(ctx, "k"),
		"batch":    l.CompleteBatch(ctx, []ledger.Completion{{Key: "k", Owner: "a"}})[0],
	} {
		if !errors.Is(err, ledger.ErrClosed) {
			t.Errorf("%s after close: err %v, want ErrClosed", what, err)
		}
	}
}
