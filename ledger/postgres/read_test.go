package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// A reader that stops in the middle of a walk holds nothing on the server,
// while other hosts claim, complete and forget around it; each record that
// exists for the whole walk is seen once, in key order.
func TestLedger_ForEachSlowReader(t *testing.T) {
	t.Parallel()
	opts := setup(t, nil)
	name := fmt.Sprintf("sqsonce-reader-%d", time.Now().UnixNano())
	readerOpts := opts
	readerOpts.URL = pgtest.WithParam(t, opts.URL, "application_name", name)
	reader, writer := open(t, readerOpts), open(t, opts)

	const n = 1000 // four pages and a bit
	var reqs []ledger.ClaimRequest
	for i := range n {
		reqs = append(reqs, claimReq(fmt.Sprintf("k%04d", 2*i), "a"))
	}
	for first := 0; first < n; first += 10 {
		_, err := writer.ClaimBatch(ctx, reqs[first:first+10])
		must(t, err)
	}
	// Forgotten during the walk: may be seen or not.
	doomed := map[string]bool{"k0100": true, "k1500": true}

	var seen []string
	stopped := make(chan struct{})
	resume := make(chan struct{})
	walked := make(chan error, 1)
	go func() {
		walked <- reader.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error {
			seen = append(seen, r.Key)
			if len(seen) == 300 {
				close(stopped)
				<-resume
			}
			return nil
		})
	}()
	<-stopped
	// The reader holds no session in a transaction, nor a query.
	admin := pgtest.Connect(t, "")
	var busy int
	must(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND (state <> 'idle' OR xact_start IS NOT NULL)`, name).Scan(&busy))
	if busy != 0 {
		t.Errorf("%d sessions of the stopped reader are in a transaction or a query", busy)
	}
	// Other hosts write meanwhile, before and after where the reader is:
	// new keys between the old ones, completions, forgetting.
	var wg sync.WaitGroup
	for h := range 3 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprintf("k%04d", 2*(h*300+i)+1)
				if _, err := writer.Claim(ctx, claimReq(key, "b")); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for k := range doomed {
		must(t, writer.Forget(ctx, k))
	}
	errs := writer.CompleteBatch(ctx, []ledger.Completion{{Key: "k0000", Owner: "a"}, {Key: "k1998", Owner: "a"}})
	must(t, errors.Join(errs...))
	close(resume)
	must(t, <-walked)

	if !slices.IsSorted(seen) {
		t.Fatal("the walk is not in key order")
	}
	if len(slices.Compact(slices.Clone(seen))) != len(seen) {
		t.Fatal("the walk saw a record twice")
	}
	set := map[string]bool{}
	for _, k := range seen {
		set[k] = true
	}
	for _, r := range reqs {
		if !set[r.Key] && !doomed[r.Key] {
			t.Errorf("the walk missed %s, which was there all along", r.Key)
		}
	}
}

// Filters look at a bounded number of records per query, also when few
// match: the walk still finds them all.
func TestLedger_ForEachSparseFilter(t *testing.T) {
	t.Parallel()
	l := open(t, setup(t, nil))
	var reqs []ledger.ClaimRequest
	for i := range 700 {
		reqs = append(reqs, claimReq(fmt.Sprintf("p/%04d", i), "a"))
	}
	reqs = append(reqs, claimReq("pz", "a"), claimReq("q/0", "a"), claimReq("o/0", "a"))
	for first := 0; first < len(reqs); first += 10 {
		_, err := l.ClaimBatch(ctx, reqs[first:min(first+10, len(reqs))])
		must(t, err)
	}
	for _, i := range []int{3, 333, 699} {
		key := fmt.Sprintf("p/%04d", i)
		must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: "a", Err: "e"}))
	}
	var got []string
	must(t, l.ForEach(ctx, ledger.Filter{State: ledger.StateFailed, Prefix: "p/"}, func(r ledger.Record) error {
		got = append(got, r.Key)
		return nil
	}))
	if fmt.Sprint(got) != "[p/0003 p/0333 p/0699]" {
		t.Fatalf("failed records under p/: %v", got)
	}
	count := 0
	must(t, l.ForEach(ctx, ledger.Filter{Prefix: "p"}, func(ledger.Record) error { count++; return nil }))
	if count != 701 {
		t.Fatalf("%d records under p, want 701", count)
	}
	stop := errors.New("stop")
	count = 0
	err := l.ForEach(ctx, ledger.Filter{}, func(ledger.Record) error {
		count++
		if count == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || count != 5 {
		t.Fatalf("a walk whose function failed: %v after %d records", err, count)
	}
}

// Sweep deletes in chunks, and hosts sweeping at once share the chunks:
// every expired record deleted once, none of the live ones.
func TestLedger_SweepChunks(t *testing.T) {
	t.Parallel()
	clock := ledgertest.NewClock()
	opts := setup(t, clock)
	opts.SweepChunk = 7
	const hosts, expired = 3, 400
	ls := make([]*postgres.Ledger, hosts)
	for h := range ls {
		ls[h] = open(t, opts)
	}
	for first := 0; first < expired; first += 10 {
		var reqs []ledger.ClaimRequest
		for k := first; k < first+10; k++ {
			reqs = append(reqs, claimReq(fmt.Sprintf("old%d", k), "a"))
		}
		_, err := ls[0].ClaimBatch(ctx, reqs)
		must(t, err)
	}
	clock.Advance(ledgertest.Retention / 2)
	for k := range 20 {
		mustClaim(t, ls[1], claimReq(fmt.Sprintf("young%d", k), "b"), ledger.Claimed)
	}
	clock.Advance(ledgertest.Retention / 2)

	removed := make([]int, hosts)
	var wg sync.WaitGroup
	for h := range hosts {
		wg.Go(func() {
			n, err := ls[h].Sweep(ctx)
			if err != nil {
				t.Errorf("host %d: %v", h, err)
			}
			removed[h] = n
		})
	}
	wg.Wait()
	total := 0
	for _, n := range removed {
		total += n
	}
	if total != expired {
		t.Fatalf("hosts removed %v, %d in all, want %d", removed, total, expired)
	}
	st, err := ls[2].Stats(ctx)
	must(t, err)
	if st.InProgress != 20 || st.Complete != 0 {
		t.Fatalf("stats after the sweep: %+v", st)
	}
	if n, err := ls[0].Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("a second sweep: %d, %v", n, err)
	}
}

// Times are kept to the microsecond: a clock with nanoseconds gives records
// whose times are the clock's, truncated, in every answer alike.
func TestLedger_MicrosecondTimes(t *testing.T) {
	t.Parallel()
	clock := ledgertest.NewClock()
	clock.Advance(123456789 * time.Nanosecond)
	opts := setup(t, clock)
	l := open(t, opts)
	r := claimReq("k", "a")
	r.Lease = time.Minute + 999*time.Nanosecond
	c := mustClaim(t, l, r, ledger.Claimed)
	want := clock.Now().Truncate(time.Microsecond)
	if !c.Record.Claimed.Equal(want) || !c.Record.LeaseExpiry.Equal(want.Add(time.Minute)) {
		t.Fatalf("claimed at %v lease to %v, want %v and a minute later", c.Record.Claimed, c.Record.LeaseExpiry, want)
	}
	exp, err := l.Extend(ctx, "k", "a", time.Minute+time.Nanosecond)
	must(t, err)
	rec, err := l.Get(ctx, "k")
	must(t, err)
	if !exp.Equal(rec.LeaseExpiry) || !rec.Expires.Equal(want.Add(ledgertest.Retention)) {
		t.Fatalf("extended to %v; record %+v", exp, rec)
	}
}

// Stats counts records by state and finds the oldest claim; FileSize and
// Commits stay zero.
func TestLedger_Stats(t *testing.T) {
	t.Parallel()
	clock := ledgertest.NewClock()
	l := open(t, setup(t, clock))
	st, err := l.Stats(ctx)
	must(t, err)
	if st != (ledger.Stats{}) {
		t.Fatalf("stats of an empty ledger: %+v", st)
	}
	mustClaim(t, l, claimReq("a", "o"), ledger.Claimed)
	first := clock.Now()
	clock.Advance(time.Second)
	mustClaim(t, l, claimReq("b", "o"), ledger.Claimed)
	mustClaim(t, l, claimReq("c", "o"), ledger.Claimed)
	must(t, l.Complete(ctx, ledger.Completion{Key: "c", Owner: "o"}))
	st, err = l.Stats(ctx)
	must(t, err)
	if st.InProgress != 2 || st.Complete != 1 || !st.OldestInProgress.Equal(first) || st.FileSize != 0 || st.Commits != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// A filter for records in progress, failed or by reason walks only the
// records that are not complete (their index in key order): it looks at
// none of the many complete records between them, however many there
// are, and pages through them by the same cursor.
func TestLedger_ListOpenRecords(t *testing.T) {
	t.Parallel()
	opts := setup(t, nil)
	l := open(t, opts)
	// 3,000 complete records, written as a table in use holds them.
	_, err := pgtest.Connect(t, opts.URL).Exec(ctx, `INSERT INTO sqsonce_operations (key, state, attempts, owner,
		first_seen, claimed, updated, completed, expires, result)
	SELECT convert_to('k/' || lpad(i::text, 4, '0'), 'UTF8'), 2, 1, convert_to('old', 'UTF8'),
		now(), now(), now(), now(), now() + interval '1 day', convert_to('{}', 'UTF8')
	FROM generate_series(0, 2999) i`)
	must(t, err)
	fail := func(key, owner, reason string) {
		t.Helper()
		must(t, l.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: reason}))
	}
	for _, k := range []string{"k/0500a", "k/1500a", "k/2500a"} {
		mustClaim(t, l, claimReq(k, "a"), ledger.Claimed)
		fail(k, "a", "Card declined for "+k)
	}
	mustClaim(t, l, claimReq("k/1000a", "a"), ledger.Claimed)
	// Failed, then claimed again: in progress, its reason kept.
	mustClaim(t, l, claimReq("k/2000a", "a"), ledger.Claimed)
	fail("k/2000a", "a", "timeout at the bank")
	mustClaim(t, l, claimReq("k/2000a", "b"), ledger.Claimed)
	// Failed, then done: complete, with no reason any more.
	mustClaim(t, l, claimReq("k/0700a", "a"), ledger.Claimed)
	fail("k/0700a", "a", "timeout at the bank")
	mustClaim(t, l, claimReq("k/0700a", "b"), ledger.Claimed)
	must(t, l.Complete(ctx, ledger.Completion{Key: "k/0700a", Owner: "b"}))

	for _, tc := range []struct {
		f    ledger.Filter
		want string
	}{
		{ledger.Filter{State: ledger.StateFailed}, "[k/0500a k/1500a k/2500a]"},
		{ledger.Filter{State: ledger.StateInProgress}, "[k/1000a k/2000a]"},
		{ledger.Filter{Reason: "TIMEOUT"}, "[k/2000a]"},
		{ledger.Filter{Reason: "declined", Prefix: "k/1"}, "[k/1500a]"},
		{ledger.Filter{Reason: "timeout", State: ledger.StateComplete}, "[]"},
	} {
		p, err := l.List(ctx, tc.f, "", 0)
		must(t, err)
		var got []string
		for _, r := range p.Records {
			got = append(got, r.Key)
		}
		if fmt.Sprint(got) != tc.want || p.Next != "" {
			t.Errorf("list %+v: %v, next %q; want %s", tc.f, got, p.Next, tc.want)
		}
		// The five records that are not complete, at most.
		if p.Scanned > 5 {
			t.Errorf("list %+v looked at %d records to find %d: it walked complete ones", tc.f, p.Scanned, len(got))
		}
		// A page at a time, by the cursor.
		var paged []string
		for after := ""; ; {
			p, err := l.List(ctx, tc.f, after, 1)
			must(t, err)
			for _, r := range p.Records {
				paged = append(paged, r.Key)
			}
			if p.Next == "" {
				break
			}
			after = p.Next
		}
		if fmt.Sprint(paged) != fmt.Sprint(got) {
			t.Errorf("list %+v by pages of 1: %v, want %v", tc.f, paged, got)
		}
	}
}
