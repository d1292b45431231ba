// Command sqsonce-go is the sqsonce library contender of the comparison
// benchmark: worker.New with a ledger and a handler that does nothing (or
// waits -work per message), run until -expect deliveries are deleted (or
// SIGTERM), then stopped by cancelling Run's context. The ledger is a
// bbolt file (-ledger), or with -backend a table of the shared ledger on
// PostgreSQL (-postgres-url) or DynamoDB (-dynamodb-endpoint) that the
// driver created. With -prefill N
// it first writes N complete records (keys pre-<i>) to a bbolt ledger
// through ClaimBatch and CompleteBatch, before the first receive, and
// reports what that took apart. It prints a benchkit.Report as its last
// line, with the ledger's commits (bbolt), its requests (DynamoDB) and the
// worker's counters.
//
// The SQS client is wrapped to see what the worker receives and deletes:
// a delivery counts as finished when its DeleteMessageBatch entry
// succeeds, as in the other contenders.
package main

import (
	"context"
	"crypto/sha256"
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
	ledgerPath := flag.String("ledger", "", "bbolt ledger file (a fresh one per run; required with -backend bbolt)")
	var lf ledgerFlags
	flag.StringVar(&lf.backend, "backend", "bbolt", "ledger backend: bbolt (-ledger), postgres (-postgres-url, -table) or dynamodb (-dynamodb-endpoint, -table)")
	flag.StringVar(&lf.postgresURL, "postgres-url", "", "postgres: connection URL")
	flag.StringVar(&lf.dynamoEndpoint, "dynamodb-endpoint", "", "dynamodb: the DynamoDB-compatible server's URL (loopback)")
	flag.StringVar(&lf.table, "table", "", "postgres, dynamodb: the ledger's table, created by the driver")
	latencies := flag.Bool("latencies", false, "put every delivery's latency in the report (the driver takes quantiles over several processes)")
	pollers := flag.Int("pollers", 1, "receive loops")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := flag.String("memprofile", "", "write a profile of the run's heap allocations to this file (go tool pprof -sample_index=alloc_objects)")
	trackKeys := flag.Bool("track-keys", false, "count handler runs per operation key (for the duplicate run)")
	prefill := flag.Int("prefill", 0, "complete records (keys pre-<i>) to write to the ledger before the first receive")
	prefillOnly := flag.Bool("prefill-only", false, "write the -prefill records, print a report of that and exit")
	work := flag.Duration("work", 0, "what the handler does: wait this long per message")
	flag.StringVar(&lf.pgHandler, "pg-handler", "", "postgres: what the handler writes: nothing (\"\"), write (a row into -effects-table on a connection of its own; the worker then records the completion) tx (the row and the completion in one transaction, package pgtx, a Func) or txbatch (the same, pgtx.NewWrites: one round trip)")
	flag.StringVar(&lf.effects, "effects-table", "", "postgres, with -pg-handler: the table the handler writes a row into, one per message")
	flag.Parse()
	lf.path = *ledgerPath
	if err := lf.check(); err != nil {
		fail(2, err)
	}
	if *prefill > 0 && lf.backend != "bbolt" {
		fail(2, fmt.Errorf("-prefill needs -backend bbolt"))
	}
	if *prefillOnly {
		if err := prefillOnlyRun(*ledgerPath, *prefill); err != nil {
			fail(1, err)
		}
		return
	}
	if err := f.Check(); err != nil {
		fail(2, err)
	}
	if *work < 0 {
		fail(2, fmt.Errorf("-work must not be negative"))
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
	if err := run(f, lf, *pollers, *trackKeys, *prefill, *latencies, *work); err != nil {
		pprof.StopCPUProfile()
		fail(1, err)
	}
	if *memprofile != "" {
		if err := writeHeapProfile(*memprofile); err != nil {
			fail(1, err)
		}
	}
}

// writeHeapProfile writes the allocations made since the start (the
// "allocs" profile) to path.
func writeHeapProfile(path string) error {
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(pf, 0); err != nil {
		pf.Close()
		return err
	}
	return pf.Close()
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "sqsonce-go:", err)
	os.Exit(code)
}

func run(f benchkit.Flags, lf ledgerFlags, pollers int, trackKeys bool, prefill int, latencies bool, work time.Duration) error {
	rec := benchkit.NewRecorder(f.Expect)
	sqsClient, reqs := benchkit.NewClient(f.Endpoint)
	client := &watchedClient{Client: sqsClient, rec: rec, sent: map[string]int64{}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lg, err := openLedger(ctx, lf)
	if err != nil {
		return err
	}
	defer lg.close()
	var pre prefilled
	if lg.db != nil {
		if pre, err = prefillLedger(lg.db, prefill); err != nil {
			return err
		}
	}

	var runs atomic.Int64
	var keysMu sync.Mutex
	perKey := map[string]int64{}
	var handler worker.Handler = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		runs.Add(1)
		if trackKeys {
			keysMu.Lock()
			perKey[m.Key]++
			keysMu.Unlock()
		}
		if work > 0 {
			t := time.NewTimer(work)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if handler, err = lg.writingHandler(ctx, lf, handler); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	timed := &timedLedger{Ledger: lg.store}
	var wl worker.Ledger = timed
	if p, ok := lg.store.(worker.Pinger); ok {
		wl = pingingLedger{timedLedger: timed, p: p}
	}
	w, err := worker.New(worker.Config{
		QueueURL:    f.QueueURL,
		Pollers:     pollers,
		Concurrency: f.Concurrency,
		Key:         worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		Logger:      logger,
	}, client, wl, handler)
	if err != nil {
		return err
	}

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

	rep := benchkit.Report{Contender: "sqsonce-go", Backend: lf.backend, StartNS: client.firstReceive.Load(), Batches: client.batches.Load()}
	rec.Fill(&rep)
	if latencies {
		rep.LatMS = rec.Latencies()
	}
	rep.Requests = reqs.Counts()
	if lg.db != nil {
		rep.PrefillRecords, rep.PrefillCommits, rep.PrefillCPU, rep.PrefillNS = int64(prefill), pre.commits, pre.cpu, int64(pre.took)
		commits := lg.db.Commits() - pre.commits
		rep.Commits = &commits
	}
	if lg.requests != nil {
		rep.LedgerRequests = lg.requests.Counts()
		rep.LedgerInFlight = lg.requests.InFlight()
	}
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
	if err := lg.close(); err != nil {
		return err
	}
	rep.Print()
	return nil
}

// prefillOnlyRun writes n records to the ledger at path and reports it.
func prefillOnlyRun(path string, n int) error {
	db, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		return err
	}
	pre, err := prefillLedger(db, n)
	if err != nil {
		db.Close()
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	rep := benchkit.Report{Contender: "sqsonce-go"}
	rep.PrefillRecords, rep.PrefillCommits, rep.PrefillCPU, rep.PrefillNS = int64(n), pre.commits, pre.cpu, int64(pre.took)
	rep.Print()
	return nil
}

// prefilled is what prefillLedger did.
type prefilled struct {
	commits uint64
	cpu     float64 // user+sys seconds
	took    time.Duration
}

// prefillLedger writes n complete records, keys pre-<i> (unlike the run's
// op-<run>-<i>), each with a 32-byte fingerprint and a 100-byte result,
// through ClaimBatch and CompleteBatch in batches of 1000.
func prefillLedger(db *ledger.DB, n int) (prefilled, error) {
	if n <= 0 {
		return prefilled{}, nil
	}
	const batch = 1000
	ctx := context.Background()
	t0, cpu0, commits0 := time.Now(), processCPU(), db.Commits()
	result := make([]byte, 100)
	for i := range result {
		result[i] = 'a' + byte(i%26)
	}
	reqs := make([]ledger.ClaimRequest, 0, batch)
	done := make([]ledger.Completion, 0, batch)
	for start := 0; start < n; start += batch {
		reqs, done = reqs[:0], done[:0]
		for i := start; i < min(start+batch, n); i++ {
			key := fmt.Sprintf("pre-%d", i)
			fp := sha256.Sum256([]byte(key))
			reqs = append(reqs, ledger.ClaimRequest{Key: key, Fingerprint: fp[:], Owner: "prefill", Lease: time.Hour, MessageID: key})
			done = append(done, ledger.Completion{Key: key, Owner: "prefill", Result: result})
		}
		claims, err := db.ClaimBatch(ctx, reqs)
		if err != nil {
			return prefilled{}, fmt.Errorf("prefill: %w", err)
		}
		for i, c := range claims {
			if c.Outcome != ledger.Claimed {
				return prefilled{}, fmt.Errorf("prefill: claim %s: %v", reqs[i].Key, c.Outcome)
			}
		}
		for i, err := range db.CompleteBatch(ctx, done) {
			if err != nil {
				return prefilled{}, fmt.Errorf("prefill: complete %s: %w", done[i].Key, err)
			}
		}
	}
	return prefilled{commits: db.Commits() - commits0, cpu: processCPU() - cpu0, took: time.Since(t0)}, nil
}

// processCPU returns the process's user+sys CPU seconds so far.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// watchedClient is the SQS client the worker gets: it notes when the first
// receive went out and each received message's "sent" field, and records a
// delivery as finished when its delete succeeds.
type watchedClient struct {
	*sqs.Client
	rec          *benchkit.Recorder
	firstReceive atomic.Int64
	batches      atomic.Int64 // receives that returned messages

	mu   sync.Mutex
	sent map[string]int64 // receipt handle -> "sent" field, until deleted
}

func (c *watchedClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.firstReceive.CompareAndSwap(0, time.Now().UnixNano())
	out, err := c.Client.ReceiveMessage(ctx, in, opts...)
	if err != nil || len(out.Messages) == 0 {
		return out, err
	}
	c.batches.Add(1)
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
// ClaimBatch and CompleteBatch call waits for its (durable) commit, and
// marks each call's context with its name, so that a DynamoDB client's
// requests are counted by the call that made them.
type timedLedger struct {
	worker.Ledger

	mu       sync.Mutex
	claims   []float64 // ms per ClaimBatch call
	complete []float64 // ms per CompleteBatch call
}

func (l *timedLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	t := time.Now()
	c, err := l.Ledger.ClaimBatch(benchkit.WithCall(ctx, "claim"), reqs)
	l.note(&l.claims, t)
	return c, err
}

func (l *timedLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	t := time.Now()
	errs := l.Ledger.CompleteBatch(benchkit.WithCall(ctx, "complete"), cs)
	l.note(&l.complete, t)
	return errs
}

func (l *timedLedger) Fail(ctx context.Context, f ledger.Failure) error {
	return l.Ledger.Fail(benchkit.WithCall(ctx, "fail"), f)
}

func (l *timedLedger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	return l.Ledger.ReleaseBatch(benchkit.WithCall(ctx, "release"), refs)
}

func (l *timedLedger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	return l.Ledger.ExtendBatch(benchkit.WithCall(ctx, "extend"), refs, lease)
}

func (l *timedLedger) Sweep(ctx context.Context) (int, error) {
	return l.Ledger.Sweep(benchkit.WithCall(ctx, "sweep"))
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

// pingingLedger is a timedLedger whose ledger can be pinged: the worker
// pings a shared ledger while it cannot record claims.
type pingingLedger struct {
	*timedLedger
	p worker.Pinger
}

func (l pingingLedger) Ping(ctx context.Context) error {
	return l.p.Ping(benchkit.WithCall(ctx, "ping"))
}

var (
	_ worker.Ledger = (*timedLedger)(nil)
	_ worker.Pinger = pingingLedger{}
)
