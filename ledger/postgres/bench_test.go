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
