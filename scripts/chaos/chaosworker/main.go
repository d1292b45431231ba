// Command chaosworker is the worker that the chaos campaign (scripts/chaos)
// starts, kills and restarts. It is the real worker library on the real
// ledger (a bbolt file that survives restarts) with the real http handler,
// and three things added around them:
//
//   - the SQS client's transport injects faults (throttling, server errors,
//     timeouts, connection resets, lost acknowledgements) into
//     ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibility(Batch) and
//     SendMessage, seeded, at the rates given by flags;
//   - the ledger handed to the worker can kill its own process with SIGKILL
//     in the two windows around a completion: just before the real Complete
//     (window a: the handler succeeded, the completion is not durable, the
//     documented duplicate window) and just after it returned (window b:
//     durable, the message not deleted): at the next Complete after a
//     SIGUSR1 (window a) or SIGUSR2 (window b), at the n-th Complete, or
//     with a probability per Complete, as flags say. Before it kills itself it appends
//     one fsynced line to the crash log, so that the campaign can explain
//     the extra execution;
//   - every handler result, completion and failure is appended to the run's
//     event log, and the run's counters (faults injected, worker stats,
//     ledger commits) are written to a file every 250 ms and at exit.
//
// SIGTERM or SIGINT drains the worker and exits 0; a second signal cuts the
// drain short, as in `sqsonce run`. Exit status 3 means the ledger could not
// be opened, 1 any other failure to start.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// FaultOps are the SQS operations whose requests get faults.
var FaultOps = []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "SendMessage"}

type options struct {
	run        int
	endpoint   string
	queueURL   string
	ledgerPath string
	downstream string
	dir        string
	crashLog   string
	seed       uint64

	rates sqstest.Rates

	crashAAt, crashBAt     int64
	crashAProb, crashBProb float64

	concurrency    int
	pollers        int
	wait           time.Duration
	visibility     time.Duration
	handlerTimeout time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	grace          time.Duration
	sqsTimeout     time.Duration
	lockTimeout    time.Duration
	logLevel       string
}

func main() {
	var o options
	flag.IntVar(&o.run, "run", 0, "this run's number (names its files, sent as X-Chaos-Run)")
	flag.StringVar(&o.endpoint, "endpoint", "", "SQS endpoint (loopback)")
	flag.StringVar(&o.queueURL, "queue", "", "queue URL")
	flag.StringVar(&o.ledgerPath, "ledger", "", "ledger file")
	flag.StringVar(&o.downstream, "downstream", "", "URL the http handler POSTs to")
	flag.StringVar(&o.dir, "dir", "", "directory for this run's event log and counters")
	flag.StringVar(&o.crashLog, "crash-log", "", "crash log (shared by all runs)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the fault injection and crash draws")
	flag.Float64Var(&o.rates.Throttle, "throttle", 0, "rate of throttling errors per SQS request")
	flag.Float64Var(&o.rates.ServerError, "server-error", 0, "rate of HTTP 500 errors per SQS request")
	flag.Float64Var(&o.rates.Timeout, "timeout", 0, "rate of requests that hang until the client times out")
	flag.Float64Var(&o.rates.Reset, "reset", 0, "rate of connection resets before the request is sent")
	flag.Float64Var(&o.rates.LostAck, "lost-ack", 0, "rate of requests that take effect but whose answer is lost")
	flag.Int64Var(&o.crashAAt, "crash-a-at", 0, "kill this process in window a at the n-th Complete call (0: never)")
	flag.Int64Var(&o.crashBAt, "crash-b-at", 0, "kill this process in window b after the n-th Complete call (0: never)")
	flag.Float64Var(&o.crashAProb, "crash-a-prob", 0, "probability per Complete call of a kill in window a")
	flag.Float64Var(&o.crashBProb, "crash-b-prob", 0, "probability per Complete call of a kill in window b")
	flag.IntVar(&o.concurrency, "concurrency", 32, "handlers at once")
	flag.IntVar(&o.pollers, "pollers", 2, "receive loops")
	flag.DurationVar(&o.wait, "wait", time.Second, "long poll")
	flag.DurationVar(&o.visibility, "visibility", 5*time.Second, "visibility timeout and lease")
	flag.DurationVar(&o.handlerTimeout, "handler-timeout", 4*time.Second, "handler timeout")
	flag.DurationVar(&o.minBackoff, "min-backoff", time.Second, "first retry back-off")
	flag.DurationVar(&o.maxBackoff, "max-backoff", 4*time.Second, "longest back-off")
	flag.DurationVar(&o.grace, "grace", 5*time.Second, "shutdown grace")
	flag.DurationVar(&o.sqsTimeout, "sqs-timeout", 5*time.Second, "bound of one SQS HTTP exchange (sqsonce run uses wait + 30s)")
	flag.DurationVar(&o.lockTimeout, "lock-timeout", ledger.DefaultLockTimeout, "how long to wait for the ledger file lock")
	flag.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn or error")
	flag.Parse()
	os.Exit(run(o))
}

func run(o options) (code int) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("run", o.run)

	// Count SQS requests from the start, so that a run that fails to start
	// can show it sent none.
	var sqsRequests atomic.Int64
	defer func() {
		fmt.Fprintf(os.Stderr, "chaosworker: run=%d exit=%d sqs_requests=%d\n", o.run, code, sqsRequests.Load())
	}()
	if o.endpoint == "" || o.queueURL == "" || o.ledgerPath == "" || o.downstream == "" || o.dir == "" || o.crashLog == "" {
		fmt.Fprintln(os.Stderr, "chaosworker: -endpoint, -queue, -ledger, -downstream, -dir and -crash-log are required")
		return 2
	}

	// The ledger first: a second process on the same file must fail here,
	// before it touches the queue.
	var commits, commitErrors atomic.Int64
	db, err := ledger.Open(o.ledgerPath, ledger.Options{
		LockTimeout: o.lockTimeout,
		OnCommit: func(_ int, _ time.Duration, err error) {
			if err != nil {
				commitErrors.Add(1)
			} else {
				commits.Add(1)
			}
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaosworker: %v\n", err)
		return 3
	}
	defer db.Close()

	events, err := event.OpenAppender(filepath.Join(o.dir, fmt.Sprintf("run-%d.events", o.run)), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}
	defer events.Close()
	crashes, err := event.OpenAppender(o.crashLog, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}
	defer crashes.Close()

	faults := sqstest.NewFaults(o.seed, sendLog{base: http.DefaultTransport, events: events})
	for _, op := range FaultOps {
		faults.Set(op, o.rates)
	}
	client := sqs.New(sqs.Options{
		Region:       sqstest.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
		BaseEndpoint: aws.String(o.endpoint),
		HTTPClient: &http.Client{
			Timeout:   o.sqsTimeout,
			Transport: countingTransport{base: faults, n: &sqsRequests},
		},
	}, sqsclient.InMemoryBodies) // as sqsonce run builds its client

	h, err := worker.NewHTTPHandler(worker.HTTPConfig{
		URL:    o.downstream,
		Client: &http.Client{Transport: runHeader{base: http.DefaultTransport, run: strconv.Itoa(o.run)}},
		Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}

	countsPath := filepath.Join(o.dir, fmt.Sprintf("run-%d.counts", o.run))
	var w *worker.Worker
	var completesOK atomic.Int64
	snapshot := func(final bool) {
		c := event.Counts{
			Run:          o.run,
			Faults:       map[string]map[string]int{},
			Commits:      commits.Load(),
			CommitErrors: commitErrors.Load(),
			CompletesOK:  completesOK.Load(),
			SQSRequests:  sqsRequests.Load(),
			Final:        final,
		}
		for op, byKind := range faults.Counts() {
			c.Faults[op] = map[string]int{}
			for k, n := range byKind {
				c.Faults[op][string(k)] = n
			}
		}
		if w != nil {
			c.Stats = w.Stats()
		}
		if err := event.WriteFileAtomic(countsPath, c); err != nil {
			log.Error("write counters", "error", err)
		}
	}

	cl := &chaosLedger{
		DB:          db,
		run:         o.run,
		events:      events,
		crashes:     crashes,
		crashAAt:    o.crashAAt,
		crashBAt:    o.crashBAt,
		crashAProb:  o.crashAProb,
		crashBProb:  o.crashBProb,
		rng:         rand.New(rand.NewPCG(o.seed, o.seed+1)),
		completesOK: &completesOK,
		beforeKill:  func() { snapshot(false) },
	}
	w, err = worker.New(worker.Config{
		QueueURL:          o.queueURL,
		WaitTime:          o.wait,
		VisibilityTimeout: o.visibility,
		Pollers:           o.pollers,
		Key:               worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		Concurrency:       o.concurrency,
		HandlerTimeout:    o.handlerTimeout,
		MinBackoff:        o.minBackoff,
		MaxBackoff:        o.maxBackoff,
		Grace:             o.grace,
		Logger:            log,
	}, client, cl, eventHandler{h: h, events: events})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		stop()
		<-sigs
		w.StopNow()
	}()
	usr := make(chan os.Signal, 2)
	signal.Notify(usr, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range usr {
			if sig == syscall.SIGUSR1 {
				cl.armA.Store(true)
			} else {
				cl.armB.Store(true)
			}
		}
	}()
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	var bg sync.WaitGroup
	tickDone := make(chan struct{})
	bg.Go(func() {
		for {
			select {
			case <-ticker.C:
				snapshot(false)
			case <-tickDone:
				return
			}
		}
	})
	err = w.Run(ctx)
	close(tickDone)
	bg.Wait()
	if cerr := db.Close(); cerr != nil && err == nil {
		err = cerr
	}
	snapshot(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}
	return 0
}

// chaosLedger is the real ledger with a kill switch around Complete and an
// event log of completions and failures.
type chaosLedger struct {
	*ledger.DB
	run                    int
	events, crashes        *event.Appender
	crashAAt, crashBAt     int64
	crashAProb, crashBProb float64
	completesOK            *atomic.Int64
	beforeKill             func()

	armA, armB atomic.Bool // set by SIGUSR1, SIGUSR2

	mu  sync.Mutex
	rng *rand.Rand
	n   atomic.Int64
}

var _ worker.Ledger = (*chaosLedger)(nil)

func (l *chaosLedger) draw(p float64) bool {
	if p <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < p
}

// CompleteBatch kills the process before the real completions (window a)
// or after they returned (window b) when told to. The worker records the
// completions that wait at the same moment in one call.
func (l *chaosLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	for _, c := range cs {
		n := l.n.Add(1)
		if l.armA.CompareAndSwap(true, false) || n == l.crashAAt || l.draw(l.crashAProb) {
			l.die(event.WindowA, c.Key, n)
		}
	}
	errs := l.DB.CompleteBatch(ctx, cs)
	ok := 0
	for i, c := range cs {
		l.log(event.WorkerEvent{Ev: event.EvComplete, Key: c.Key, Err: errText(errs[i])})
		if errs[i] == nil {
			ok++
		}
	}
	l.completesOK.Add(int64(ok))
	if ok > 0 {
		n := l.n.Load()
		if l.armB.CompareAndSwap(true, false) || (l.crashBAt > n-int64(len(cs)) && l.crashBAt <= n) || l.draw(l.crashBProb) {
			for i, c := range cs {
				if errs[i] == nil {
					l.die(event.WindowB, c.Key, n)
				}
			}
		}
	}
	return errs
}

// Fail is the real Fail, logged.
func (l *chaosLedger) Fail(ctx context.Context, f ledger.Failure) error {
	err := l.DB.Fail(ctx, f)
	l.log(event.WorkerEvent{Ev: event.EvFail, Key: f.Key, Perm: f.Permanent, Err: errText(err)})
	return err
}

func (l *chaosLedger) log(e event.WorkerEvent) {
	e.T = time.Now().UnixNano()
	if err := l.events.Append(e); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker: event log:", err)
	}
}

// die records the crash durably, then kills this process with SIGKILL: no
// deferred function, no flush, no shutdown runs.
func (l *chaosLedger) die(window, key string, n int64) {
	if err := l.crashes.Append(event.Crash{Run: l.run, Window: window, Key: key, Nth: n}); err != nil {
		// Without the line the campaign could not explain the duplicate:
		// better not to crash at all.
		fmt.Fprintln(os.Stderr, "chaosworker: crash log:", err)
		return
	}
	l.beforeKill()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; wait for it
}

// eventHandler runs the real handler and logs what it returned.
type eventHandler struct {
	h      worker.Handler
	events *event.Appender
}

// messageKey is the context key under which eventHandler hands the message
// to runHeader.
type messageKey struct{}

func (e eventHandler) Handle(ctx context.Context, m *worker.Message) error {
	err := e.h.Handle(context.WithValue(ctx, messageKey{}, m), m)
	if aerr := e.events.Append(event.WorkerEvent{
		Ev: event.EvHandled, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID,
		Err: errText(err), T: time.Now().UnixNano(),
	}); aerr != nil {
		fmt.Fprintln(os.Stderr, "chaosworker: event log:", aerr)
	}
	return err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	if s := err.Error(); s != "" {
		return s
	}
	return "error"
}

// runHeader adds X-Chaos-Run to every request, so that the downstream knows
// which worker run it serves, and from the message being handled
// X-Chaos-Sent-At (when the delivery entered its queue, Unix milliseconds)
// X-Chaos-Send (the sender's event.AttrSend attribute, which every copy of
// a message keeps) and X-Chaos-Replays (how often sqsonce replay moved it,
// its SqsonceReplays attribute), so that the downstream can record which
// delivery it served.
type runHeader struct {
	base http.RoundTripper
	run  string
}

func (t runHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Chaos-Run", t.run)
	if m, ok := req.Context().Value(messageKey{}).(*worker.Message); ok {
		if !m.SentAt.IsZero() {
			req.Header.Set("X-Chaos-Sent-At", strconv.FormatInt(m.SentAt.UnixMilli(), 10))
		}
		if v := m.Attributes[event.AttrSend]; v != "" {
			req.Header.Set("X-Chaos-Send", v)
		}
		if v := m.Attributes["SqsonceReplays"]; v != "" {
			req.Header.Set("X-Chaos-Replays", v)
		}
	}
	return t.base.RoundTrip(req)
}

// sendLog sits under the fault injection and logs every message that SQS
// accepted from a SendMessage (the worker sends only its dead-letter
// copies): the id SQS gave the copy and the message it copies, also when
// the answer is then lost on its way to the worker.
type sendLog struct {
	base   http.RoundTripper
	events *event.Appender
}

func (t sendLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if sqstest.Operation(req) != "SendMessage" || req.Body == nil {
		return t.base.RoundTrip(req)
	}
	in, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(in))
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	out, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(out))
	if rerr != nil {
		return resp, nil
	}
	var sent struct {
		QueueURL          string `json:"QueueUrl"`
		MessageAttributes map[string]struct {
			StringValue string
		}
	}
	var answer struct{ MessageId string }
	_ = json.Unmarshal(in, &sent)
	_ = json.Unmarshal(out, &answer)
	_ = t.events.Append(event.WorkerEvent{
		Ev: event.EvSent, MessageID: sent.MessageAttributes[worker.AttrSourceMessageID].StringValue,
		Copy: answer.MessageId, Queue: sent.QueueURL, T: time.Now().UnixNano(),
	})
	return resp, nil
}

// countingTransport counts the requests that reach it.
type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.base.RoundTrip(req)
}

func (t countingTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
