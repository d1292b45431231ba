// Command sqsonce-go is the sqsonce library contender of the comparison
// benchmark: worker.New with a bbolt ledger and a handler that does
// nothing, run until -expect deliveries are deleted (or SIGTERM), then
// stopped by cancelling Run's context. It prints a benchkit.Report as its
// last line, with the ledger's commits and the worker's counters.
//
// The SQS client is wrapped to see what the worker receives and deletes:
// a delivery counts as finished when its DeleteMessageBatch entry
// succeeds, as in the other contenders.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/bench/internal/benchkit"
	"github.com/sqsonce/sqsonce/worker"
)

func main() {
	var f benchkit.Flags
	f.Register()
	ledgerPath := flag.String("ledger", "", "ledger file (required; a fresh one per run)")
	pollers := flag.Int("pollers", 1, "receive loops")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	trackKeys := flag.Bool("track-keys", false, "count handler runs per operation key (for the duplicate run)")
	flag.Parse()
	if err := f.Check(); err != nil {
		fail(2, err)
	}
	if *ledgerPath == "" {
		fail(2, fmt.Errorf("-ledger is required"))
	}
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			fail(1, err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			fail(1, err)
		}
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	if err := run(f, *ledgerPath, *pollers, *trackKeys); err != nil {
		pprof.StopCPUProfile()
		fail(1, err)
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "sqsonce-go:", err)
	os.Exit(code)
}

func run(f benchkit.Flags, ledgerPath string, pollers int, trackKeys bool) error {
	rec := benchkit.NewRecorder(f.Expect)
	sqsClient, reqs := benchkit.NewClient(f.Endpoint)
	client := &watchedClient{Client: sqsClient, rec: rec, sent: map[string]int64{}}
	db, err := ledger.Open(ledgerPath, ledger.Options{})
	if err != nil {
		return err
	}
	defer db.Close()

	var runs atomic.Int64
	var keysMu sync.Mutex
	perKey := map[string]int64{}
	handler := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		runs.Add(1)
		if trackKeys {
			keysMu.Lock()
			perKey[m.Key]++
			keysMu.Unlock()
		}
		return nil
	})
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	timed := &timedLedger{DB: db}
	w, err := worker.New(worker.Config{
		QueueURL:    f.QueueURL,
		Pollers:     pollers,
		Concurrency: f.Concurrency,
		Key:         worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		Logger:      logger,
	}, client, timed, handler)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		select {
		case <-rec.Done():
			stop()
		case <-ctx.Done():
		}
	}()
	if err := w.Run(ctx); err != nil {
		return err
	}

	rep := benchkit.Report{Contender: "sqsonce-go", StartNS: client.firstReceive.Load()}
	rec.Fill(&rep)
	rep.Requests = reqs.Counts()
	commits := db.Commits()
	rep.Commits = &commits
	rep.HandlerRuns = runs.Load()
	if trackKeys {
		rep.Operations = int64(len(perKey))
		for _, n := range perKey {
			rep.MaxRunsPerKey = max(rep.MaxRunsPerKey, n)
		}
	}
	rep.LedgerWait = timed.summary()
	s := w.Stats()
	rep.WorkerStats = map[string]int64{
		"received": s.Received, "claimed": s.Claimed, "completed": s.Completed,
		"duplicates": s.Duplicates, "in_progress_elsewhere": s.InProgressElsewhere,
		"retried": s.Retried, "dead_lettered": s.DeadLettered, "conflicts": s.Conflicts,
		"deleted": s.Deleted, "delete_failed": s.DeleteFailed, "heartbeats": s.Heartbeats,
	}
	if err := db.Close(); err != nil {
		return err
	}
	rep.Print()
	return nil
}

// watchedClient is the SQS client the worker gets: it notes when the first
// receive went out and each received message's "sent" field, and records a
// delivery as finished when its delete succeeds.
type watchedClient struct {
	*sqs.Client
	rec          *benchkit.Recorder
	firstReceive atomic.Int64

	mu   sync.Mutex
	sent map[string]int64 // receipt handle -> "sent" field, until deleted
}

func (c *watchedClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.firstReceive.CompareAndSwap(0, time.Now().UnixNano())
	out, err := c.Client.ReceiveMessage(ctx, in, opts...)
	if err != nil || len(out.Messages) == 0 {
		return out, err
	}
	c.mu.Lock()
	for _, m := range out.Messages {
		s, ok := benchkit.SentMillis(aws.ToString(m.Body))
		if !ok {
			s = -1
		}
		c.sent[aws.ToString(m.ReceiptHandle)] = s
	}
	c.mu.Unlock()
	return out, nil
}

func (c *watchedClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := c.Client.DeleteMessageBatch(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	byID := make(map[string]string, len(in.Entries))
	for _, e := range in.Entries {
		byID[aws.ToString(e.Id)] = aws.ToString(e.ReceiptHandle)
	}
	sent := make([]int64, 0, len(out.Successful))
	c.mu.Lock()
	for _, s := range out.Successful {
		r := byID[aws.ToString(s.Id)]
		v, ok := c.sent[r]
		if !ok {
			v = -1
		}
		delete(c.sent, r)
		sent = append(sent, v)
	}
	c.mu.Unlock()
	if len(sent) > 0 {
		c.rec.Finish(sent...)
	}
	return out, nil
}

var _ worker.SQSClient = (*watchedClient)(nil)

// timedLedger is the ledger the worker gets: it times how long each
// ClaimBatch and Complete call waits for its (durable) commit.
type timedLedger struct {
	*ledger.DB

	mu       sync.Mutex
	claims   []float64 // ms per ClaimBatch call
	complete []float64 // ms per Complete call
}

func (l *timedLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	t := time.Now()
	c, err := l.DB.ClaimBatch(ctx, reqs)
	l.note(&l.claims, t)
	return c, err
}

func (l *timedLedger) Complete(ctx context.Context, c ledger.Completion) error {
	t := time.Now()
	err := l.DB.Complete(ctx, c)
	l.note(&l.complete, t)
	return err
}

func (l *timedLedger) note(xs *[]float64, t time.Time) {
	ms := float64(time.Since(t)) / 1e6
	l.mu.Lock()
	*xs = append(*xs, ms)
	l.mu.Unlock()
}

func (l *timedLedger) summary() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	mean := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(max(len(xs), 1))
	}
	return map[string]float64{
		"claim_batch_calls":   float64(len(l.claims)),
		"claim_batch_mean_ms": mean(l.claims),
		"claim_batch_p50_ms":  benchkit.Quantile(l.claims, 0.5),
		"complete_calls":      float64(len(l.complete)),
		"complete_mean_ms":    mean(l.complete),
		"complete_p50_ms":     benchkit.Quantile(l.complete, 0.5),
	}
}

var _ worker.Ledger = (*timedLedger)(nil)
