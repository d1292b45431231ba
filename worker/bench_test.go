//go:build unix

package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// BenchmarkWorker_Drain measures the whole path (receive, key, claim,
// no-op handler, durable complete, batched delete) against the local
// SQS-compatible server: each op is one message, pre-filled before the
// timer starts.
//
//	scripts/with-sqs.sh go test -run '^$' -bench Worker -benchtime 5000x ./worker/
func BenchmarkWorker_Drain(b *testing.B) {
	// Idle connections kept as the SDK's default HTTP client keeps them
	// (net/http's default of two per host would have the worker dial
	// anew whenever more calls than that are in flight).
	tr := loopback.Transport()
	tr.MaxIdleConnsPerHost = awshttp.DefaultHTTPTransportMaxIdleConnsPerHost
	client := sqstest.NewClient(b, tr)
	q := sqstest.CreateQueue(b, client, sqstest.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 30 * time.Second})
	fill(b, client, q.URL, b.N)
	db := openLedger(b)
	var done atomic.Int64
	all := make(chan struct{})
	w, err := worker.New(worker.Config{
		QueueURL: q.URL, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second,
		Key: worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"}, Concurrency: 32, Pollers: 2,
		Logger: testLoggerB(),
	}, client, db, worker.HandlerFunc(func(context.Context, *worker.Message) error {
		if done.Add(1) == int64(b.N) {
			close(all)
		}
		return nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	commits := db.Commits()
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	go w.Run(ctx)
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d handled", done.Load(), b.N)
	}
	elapsed := time.Since(start)
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	cancel()
	time.Sleep(200 * time.Millisecond)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(db.Commits()-commits)/float64(b.N), "commits/msg")
	// The process's CPU (user and system, every thread) per message: what
	// the worker and the ledger cost, apart from the SQS server's.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}

// processCPU is the user and system time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fill(b *testing.B, c *sqs.Client, url string, n int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for start := 0; start < n; start += 10 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var entries []types.SendMessageBatchRequestEntry
			for i := start; i < min(start+10, n); i++ {
				entries = append(entries, types.SendMessageBatchRequestEntry{
					Id: aws.String(fmt.Sprint(i - start)), MessageBody: aws.String(fmt.Sprintf(`{"id":"op-%d"}`, i)),
				})
			}
			if _, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
}

func testLoggerB() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
