package pgtx

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
)

// BenchmarkWrites_InWorker runs b.N operations of a Writes handler of one
// insert through a worker of 16 handlers, on the local SQS server, and
// reports the round trips to PostgreSQL per message, counted by a proxy in
// front of the server: each message's own (BEGIN, the insert, the
// completion, COMMIT and the session's reset together) and its share of
// its receive's claim and of the worker's completion.
func BenchmarkWrites_InWorker(b *testing.B) {
	url, _ := pgtest.Schema(b)
	p := pgtest.NewProxy(b, pgtest.Addr(b, url))
	l := setup(b, pgtest.WithParam(b, pgtest.ReplaceAddr(b, url, p.Addr()), "pool_max_conns", "24"))
	q := newQueue(b)
	cfg := q.config()
	cfg.Concurrency = 16
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < b.N; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, b.N); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(fmt.Sprintf(`{"id":"b%d"}`, j))})
		}
		if _, err := q.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &q.q.URL, Entries: entries}); err != nil {
			b.Fatal(err)
		}
	}
	before := p.RoundTrips()
	b.ResetTimer()
	_, stop := q.start(cfg, l, NewWrites(l, queueInsert))
	q.waitEmpty(10*time.Second + time.Duration(b.N)*10*time.Millisecond)
	b.StopTimer()
	stats := stop()
	trips := p.RoundTrips() - before
	if stats.Completed != int64(b.N) {
		b.Fatalf("%d completed of %d", stats.Completed, b.N)
	}
	if rec := state(b, l, "b0"); rec.State != ledger.StateComplete {
		b.Fatalf("record %s", rec.State)
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/msg")
}
