// Benchmarks of the PostgreSQL ledger on the test server. Run them with
//
//	scripts/with-postgres.sh go test -run '^$' -bench . -benchtime=2000x ./ledger/postgres/
//
// What one worker does with a receive of 10 messages is one ClaimBatch of 10
// and, when the work is done, one CompleteBatch of 10: a pair per message.
// The benchmarks report pairs (claim and completion of one operation) per
// second, and the round trips a batch costs, counted by a proxy in front of
// the server in a warm-up before the timed part (which goes to the server
// directly).
package postgres_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

const benchBatch = 10

var benchResult = []byte(`{"status":"ok","id":"r-000000"}`)

// claimComplete claims and completes the 10 keys of batch i of prefix.
func claimComplete(l *postgres.Ledger, prefix string, i int) error {
	reqs := make([]ledger.ClaimRequest, benchBatch)
	done := make([]ledger.Completion, benchBatch)
	for j := range reqs {
		key := fmt.Sprintf("%s-%08d-%d", prefix, i, j)
		owner := fmt.Sprintf("%s-%d", key, time.Now().UnixNano())
		reqs[j] = ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Minute,
			Fingerprint: []byte("0123456789abcdef0123456789abcdef"), MessageID: "5fea7756-0ea4-451a-a703-a558b933e274"}
		done[j] = ledger.Completion{Key: key, Owner: owner, Result: benchResult}
	}
	cs, err := l.ClaimBatch(ctx, reqs)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if c.Outcome != ledger.Claimed {
			return fmt.Errorf("claim: %s", c.Outcome)
		}
	}
	for _, err := range l.CompleteBatch(ctx, done) {
		if err != nil {
			return err
		}
	}
	return nil
}

// roundTrips counts the round trips of one ClaimBatch and one
// CompleteBatch of 10, through a proxy, after a warm-up that prepares the
// statements.
func roundTrips(b *testing.B, opts postgres.Options) (claim, complete float64) {
	b.Helper()
	p := pgtest.NewProxy(b, pgtest.Addr(b, opts.URL))
	opts.URL = pgtest.WithParam(b, pgtest.ReplaceAddr(b, opts.URL, p.Addr()), "pool_max_conns", "1")
	l := open(b, opts)
	if err := claimComplete(l, "warm", 0); err != nil {
		b.Fatal(err)
	}
	const n = 50
	var claims, completes int64
	for i := range n {
		reqs := make([]ledger.ClaimRequest, benchBatch)
		done := make([]ledger.Completion, benchBatch)
		for j := range reqs {
			key := fmt.Sprintf("rt-%d-%d", i, j)
			reqs[j] = ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Minute}
			done[j] = ledger.Completion{Key: key, Owner: "o"}
		}
		before := p.RoundTrips()
		if _, err := l.ClaimBatch(ctx, reqs); err != nil {
			b.Fatal(err)
		}
		mid := p.RoundTrips()
		for _, err := range l.CompleteBatch(ctx, done) {
			if err != nil {
				b.Fatal(err)
			}
		}
		claims += mid - before
		completes += p.RoundTrips() - mid
	}
	return float64(claims) / n, float64(completes) / n
}

func BenchmarkClaimComplete(b *testing.B) {
	for _, hosts := range []int{1, 4} {
		b.Run(fmt.Sprintf("batch10/hosts%d", hosts), func(b *testing.B) {
			opts := setup(b, nil)
			rtClaim, rtComplete := roundTrips(b, opts)
			ls := make([]*postgres.Ledger, hosts)
			for h := range ls {
				ls[h] = open(b, opts)
				if err := claimComplete(ls[h], fmt.Sprintf("warm%d", h), 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for h := range hosts {
				wg.Go(func() {
					for i := h; i < b.N; i += hosts {
						if err := claimComplete(ls[h], fmt.Sprintf("h%d", h), i); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "pairs/s")
			b.ReportMetric(rtClaim, "roundtrips/claimbatch")
			b.ReportMetric(rtComplete, "roundtrips/completebatch")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkStats is Stats on a table of a million records, 1% in progress,
// after VACUUM ANALYZE (as autovacuum leaves a table in use).
func BenchmarkStats(b *testing.B) {
	opts := setup(b, nil)
	l := open(b, opts)
	conn := pgtest.Connect(b, opts.URL)
	_, err := conn.Exec(ctx, `INSERT INTO sqsonce_operations (key, state, fingerprint, attempts, owner, lease_expiry,
		first_seen, claimed, updated, completed, expires, message_id, result)
	SELECT convert_to('key-' || md5(i::text), 'UTF8'), CASE WHEN i % 100 = 0 THEN 1 ELSE 2 END,
		decode(md5(i::text), 'hex'), 1, convert_to('owner-' || i, 'UTF8'), now() + interval '1 minute',
		now(), now(), now(), now(), now() + interval '1 day', convert_to(md5(i::text), 'UTF8'),
		convert_to('{"status":"ok"}', 'UTF8')
	FROM generate_series(1, 1000000) i`)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE sqsonce_operations`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		st, err := l.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.InProgress != 10000 || st.Complete != 990000 {
			b.Fatalf("stats %+v", st)
		}
	}
}

// The table of bigRecords records that BenchmarkList1M and
// BenchmarkOverview1M read, as a ledger in use holds them. Keys are
// "orders:" or, one in ten, "refunds:", then an md5 in hex, so that they
// come in no particular order within each. One record in a thousand has
// failed (all of them orders), one in three of those permanently, with one
// of four reasons, and ten of them with a rare one (rareReason); one in
// five hundred is in progress, claimed by one of seven hosts, a third of
// those with a lapsed lease; the rest are complete. Their last writes are spread over the last two days, so
// that the last hour holds about one in 48 of them.
const (
	bigRecords = 1_000_000
	rareReason = "chargeback window closed"
)

// fillBig writes the table in one INSERT from generate_series (not a
// million claims) and analyzes it, as autovacuum leaves a table in use.
func fillBig(b *testing.B, opts postgres.Options) {
	b.Helper()
	conn := pgtest.Connect(b, opts.URL)
	start := time.Now()
	_, err := conn.Exec(ctx, `INSERT INTO sqsonce_operations (key, state, permanent, fingerprint, attempts, owner, lease_expiry,
		first_seen, claimed, updated, completed, expires, last_error, message_id, result)
	SELECT convert_to(CASE WHEN i % 10 = 0 THEN 'refunds:' ELSE 'orders:' END || md5(i::text), 'UTF8'),
		s.state, s.state = 3 AND (i / 1000) % 3 = 0, decode(md5(i::text), 'hex'), CASE WHEN s.state = 3 THEN 3 ELSE 1 END,
		convert_to('host-' || (i % 7) || '/' || (1000 + i % 97), 'UTF8'),
		CASE WHEN s.state = 1 THEN now() + CASE WHEN i % 3 = 0 THEN interval '-5 minutes' ELSE interval '1 minute' END END,
		w.at, w.at, w.at, CASE WHEN s.state = 2 THEN w.at END, w.at + interval '7 days',
		CASE WHEN s.state = 3 THEN convert_to(CASE
			WHEN i % 100000 = 7 THEN $1
			WHEN (i / 1000) % 4 = 0 THEN 'card processor said no (exit status 3)'
			WHEN (i / 1000) % 4 = 1 THEN 'POST https://payments.internal/charge: 503 Service Unavailable'
			WHEN (i / 1000) % 4 = 2 THEN 'context deadline exceeded'
			ELSE 'exit status 75' END, 'UTF8') END,
		convert_to(md5(i::text || 'm'), 'UTF8'),
		CASE WHEN s.state = 2 THEN convert_to('{"status":"ok","id":"r-' || i || '"}', 'UTF8') END
	FROM generate_series(1, $2::int) i,
		LATERAL (SELECT CASE WHEN i % 1000 = 7 THEN 3 WHEN i % 500 = 1 THEN 1 ELSE 2 END AS state) s,
		LATERAL (SELECT now() - (i % 172800) * interval '1 second' AS at) w`, rareReason, bigRecords)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE sqsonce_operations`); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d records in %v", bigRecords, time.Since(start).Round(time.Millisecond))
}

// BenchmarkList1M reads the console's first page (50 records) of a table
// of 1,000,000 records: unfiltered, by state (the failed records, one in
// a thousand: the page is read up to List's bound of 50,000 records), by
// key prefix, and by a reason that ten records have (read up to the
// bound). records and scanned are the first page's.
func BenchmarkList1M(b *testing.B) {
	opts := setup(b, nil)
	fillBig(b, opts)
	l := open(b, opts)
	for _, bc := range []struct {
		name string
		f    ledger.Filter
	}{
		{"first-page", ledger.Filter{}},
		{"state-failed", ledger.Filter{State: ledger.StateFailed}},
		{"prefix", ledger.Filter{Prefix: "refunds:"}},
		{"reason-rare", ledger.Filter{Reason: "CHARGEBACK window"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var p ledger.Page
			for b.Loop() {
				var err error
				if p, err = l.List(ctx, bc.f, "", 0); err != nil {
					b.Fatal(err)
				}
			}
			// A page short of the limit either ends the listing or
			// stopped at List's bound (a sparse filter).
			if len(p.Records) < ledger.DefaultListLimit && p.Next != "" && p.Scanned < 50_000 {
				b.Fatalf("%+v: %d records on the first page, %d scanned, and a next page", bc.f, len(p.Records), p.Scanned)
			}
			for _, r := range p.Records {
				if !bc.f.Match(r) {
					b.Fatalf("%+v: the page holds %+v", bc.f, r)
				}
			}
			b.ReportMetric(float64(len(p.Records)), "records")
			b.ReportMetric(float64(p.Scanned), "scanned")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

// BenchmarkOverview1M reads the console's overview of a table of
// 1,000,000 records.
func BenchmarkOverview1M(b *testing.B) {
	opts := setup(b, nil)
	fillBig(b, opts)
	l := open(b, opts)
	for b.Loop() {
		o, err := l.Overview(ctx, time.Now().Add(-time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if o.Complete+o.InProgress+o.Failed+o.FailedPermanently != bigRecords || len(o.Failures) != 5 || len(o.Activity) == 0 {
			b.Fatalf("overview: %+v, %d failure groups, %d minutes", o.Stats, len(o.Failures), len(o.Activity))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}
