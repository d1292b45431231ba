package dynamodb_test

// Benchmarks of the DynamoDB ledger against the local DynamoDB-compatible
// server (dynalite on loopback): they measure the ledger's requests and
// the server's speed, not DynamoDB's, whose latency (a few milliseconds a
// request within a region) dominates in real use; requests/batch is the
// figure that carries over. Run them with
//
//	scripts/with-dynalite.sh go test -run '^$' -bench . -benchtime=3s ./ledger/dynamodb/

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
)

// BenchmarkClaimComplete claims and completes keys in batches of 10, as a
// worker does with what one receive brings: one ClaimBatch, then one
// CompleteBatch, from 1 and from several goroutines sharing one ledger. An
// op is one pair (a claim and its completion). It reports pairs per second
// and the requests each batch of 10 pairs made (20 when nothing is
// contended: one conditional write per claim and per completion).
func BenchmarkClaimComplete(b *testing.B) {
	for _, goroutines := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("Batch10/Goroutines%d", goroutines), func(b *testing.B) {
			benchClaimComplete(b, goroutines, 10)
		})
	}
}

func benchClaimComplete(b *testing.B, goroutines, batch int) {
	ctx := context.Background()
	faults := dynamotest.NewFaults(nil) // nothing scripted: it counts requests
	c := dynamotest.NewClient(b, faults)
	opts := newTable(b, c, nil)
	opts.Concurrency = batch
	l := open(b, c, opts)
	var next, batches atomic.Int64
	before := faults.Requests("")
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for {
				first := int(next.Add(int64(batch))) - batch
				if first >= b.N {
					return
				}
				n := min(batch, b.N-first)
				owner := fmt.Sprintf("g%d-%d", g, first)
				reqs := make([]ledger.ClaimRequest, n)
				cs := make([]ledger.Completion, n)
				for j := range n {
					key := fmt.Sprintf("key-%08d", first+j)
					reqs[j] = claimReq(key, owner)
					cs[j] = ledger.Completion{Key: key, Owner: owner, Result: []byte(`{"status":"ok"}`)}
				}
				claims, err := l.ClaimBatch(ctx, reqs)
				if err != nil {
					b.Error(err)
					return
				}
				for j, c := range claims {
					if c.Outcome != ledger.Claimed {
						b.Errorf("claim %s: %s", reqs[j].Key, c.Outcome)
						return
					}
				}
				for j, err := range l.CompleteBatch(ctx, cs) {
					if err != nil {
						b.Errorf("complete %s: %v", cs[j].Key, err)
						return
					}
				}
				batches.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "pairs/s")
	}
	if n := batches.Load(); n > 0 {
		b.ReportMetric(float64(faults.Requests("")-before)/float64(n), "requests/batch")
	}
}
