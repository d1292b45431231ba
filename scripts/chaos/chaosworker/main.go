// Command chaosworker is the worker that the chaos campaign (scripts/chaos)
// starts, kills and restarts. It is the real worker library on the real
// ledger (a bbolt file that survives restarts, or with -postgres the shared
// ledger in a PostgreSQL table, which several chaos workers use at once)
// with the real http handler, and three things added around them:
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
//   - every claim and release the ledger made, every answer that a claim
//     was lost (to an extension of its lease), every handler call and
//     result, completion and failure is appended to the run's event log,
//     each with the attempt's owner token (which the http handler's
//     requests carry to the downstream too), and so is every wait for a
//     ledger that could not record claims (from the first batch whose
//     claims failed until a claim or a ping succeeds, as the worker itself
//     decides); the run's counters (faults injected, worker stats, ledger
//     commits and errors) are written to a file every 250 ms and at exit.
//
// With -pgtx (on -postgres) the handler is not the http handler but a
// transactional one (package pgtx): in the transaction that also records
// the operation complete, it inserts the attempt's effect row into the
// -effects table of the same database (the key, the payload's SHA-256 and
// the payload, the run, the attempt's claim, a sequence number of the run
// and its connection's local address), logs the insert, and then does what
// the body says, as the downstream would: {"fail":n} fails attempts 1..n
// with a retryable error (with "retry_after", after that many seconds),
// {"permanent":true} fails permanently, {"slow_ms":n} takes that long; the
// insert of a failed attempt is rolled back with it. In a share of the
// attempts (-tx-hold-share), and in the next attempt after a SIGWINCH, it
// holds the transaction open after the insert for -tx-hold, and first logs
// that it is inside and asks the campaign (POST
// -control/intx?run=N&key=K&owner=O), which may kill it there with SIGKILL
// before it answers. In another share (-tx-panic-share) it panics after the
// insert (and the hold), as a handler with a bug would: the event log says
// so, and the worker must turn the panic into a retryable failure once the
// transaction is rolled back; once the handler has returned, it reads from
// the database the state of that transaction's session, which must no
// longer be inside a transaction, and logs it with the handler's result.
// Once its worker has stopped on a drain, it asks the database how many
// sessions of its ledger's pool (application name chaosworker-N, N the
// run, as every run on -postgres names them) are still inside a
// transaction, and writes that into its counters: no handler runs then, so
// none may be.
//
// On a bbolt ledger it serves the ledger on a unix socket beside the file
// (the path plus ".sock") for `sqsonce ledger` commands, as `sqsonce run`
// does, with the same code: the campaign builds it with
// cmd/sqsonce/ledgersocket.go added to this package (go build -overlay),
// since a main package cannot be imported. Built without it (go vet, an
// editor), it serves no socket. At start it prints how long opening the
// ledger took and which file it holds (device and inode, and whether that
// file still has its name), so that the campaign can tell which file a run
// that started beside a compaction writes to.
//
// SIGTERM or SIGINT drains the worker and exits 0; a second signal cuts the
// drain short, as in `sqsonce run`. Exit status 3 means the ledger could not
// be opened, 1 any other failure to start.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/pgtx"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// serveSocket serves a bbolt ledger on a unix socket at path, as `sqsonce
// run` does. It is nil unless the campaign built this program with the
// ledger socket of cmd/sqsonce added (see the package documentation).
var serveSocket func(db *ledger.DB, path string, log *slog.Logger) (io.Closer, error)

// FaultOps are the SQS operations whose requests get faults.
var FaultOps = []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "SendMessage"}

type options struct {
	run         int
	endpoint    string
	queueURL    string
	ledgerPath  string
	pgURL       string
	pgTable     string
	pgTimeout   time.Duration
	pgtx        bool
	effects     string
	control     string
	holdShare   float64
	hold        time.Duration
	panicShare  float64
	writesShare float64
	downstream  string
	dir         string
	crashLog    string
	seed        uint64

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
	flag.StringVar(&o.ledgerPath, "ledger", "", "ledger file (bbolt)")
	flag.StringVar(&o.pgURL, "postgres", "", "PostgreSQL connection string: the ledger is the shared one in -table there, not a file")
	flag.StringVar(&o.pgTable, "table", "", "the shared ledger's table (with -postgres; its default when empty)")
	flag.DurationVar(&o.pgTimeout, "ledger-timeout", 3*time.Second, "bound of each attempt of a shared ledger's call (with -postgres)")
	flag.BoolVar(&o.pgtx, "pgtx", false, "a transactional handler (package pgtx) that inserts each attempt's row into -effects, not the http handler (with -postgres)")
	flag.StringVar(&o.effects, "effects", "chaos_effects", "the effects table of -pgtx")
	flag.StringVar(&o.control, "control", "", "the campaign's control URL, asked from inside a held transaction (with -pgtx)")
	flag.Float64Var(&o.holdShare, "tx-hold-share", 0, "share of the attempts that hold their transaction open after the insert (with -pgtx)")
	flag.DurationVar(&o.hold, "tx-hold", 200*time.Millisecond, "how long such an attempt holds it (with -pgtx)")
	flag.Float64Var(&o.panicShare, "tx-panic-share", 0, "share of the attempts that panic after the insert (with -pgtx)")
	flag.Float64Var(&o.writesShare, "tx-writes-share", 0, "share of the attempts whose insert is queued on a batch and sent with the completion in one round trip (pgtx.NewWrites), the others running in the transaction (pgtx.New); such attempts neither hold nor panic (with -pgtx)")
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
	// The campaign may arm a run (SIGUSR1, SIGUSR2, SIGWINCH) as soon as it
	// has started it: caught from the start, they wait here until the
	// worker is set up. SIGUSR1 and SIGUSR2 would otherwise end a process
	// that has not caught them yet, and a SIGWINCH would be lost.
	usr := make(chan os.Signal, 2)
	signal.Notify(usr, syscall.SIGUSR1, syscall.SIGUSR2)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)

	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("run", o.run)
	// The stop signals are caught from the start, as in sqsonce: one that
	// comes while the ledger opens or the queue is read stops the worker
	// at once, rather than killing the process.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	// Count SQS requests from the start, so that a run that fails to start
	// can show it sent none.
	var sqsRequests atomic.Int64
	defer func() {
		fmt.Fprintf(os.Stderr, "chaosworker: run=%d exit=%d sqs_requests=%d\n", o.run, code, sqsRequests.Load())
	}()
	if o.endpoint == "" || o.queueURL == "" || (o.ledgerPath == "") == (o.pgURL == "") || (o.downstream == "") != o.pgtx || o.dir == "" || o.crashLog == "" {
		fmt.Fprintln(os.Stderr, "chaosworker: -endpoint, -queue, -dir, -crash-log, one of -ledger and -postgres, and -downstream or -pgtx are required")
		return 2
	}
	if o.pgtx && o.pgURL == "" {
		fmt.Fprintln(os.Stderr, "chaosworker: -pgtx needs -postgres")
		return 2
	}

	// The ledger first: a second process on the same file must fail here,
	// before it touches the queue.
	var commits, commitErrors atomic.Int64
	var store interface {
		worker.Ledger
		Close() error
	}
	var db *ledger.DB
	var pgl *postgres.Ledger
	opened := time.Now()
	app := fmt.Sprintf("chaosworker-%d", o.run) // the application name of the ledger's sessions
	if o.pgURL != "" {
		pgURL, err := withAppName(o.pgURL, app)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaosworker: -postgres:", err)
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pg, err := postgres.Open(ctx, postgres.Options{URL: pgURL, Table: o.pgTable, Timeout: o.pgTimeout})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaosworker: %v\n", err)
			return 3
		}
		store, pgl = pg, pg
		fmt.Fprintf(os.Stderr, "chaosworker: run=%d ledger opened in %dms: postgres\n", o.run, time.Since(opened).Milliseconds())
	} else {
		var err error
		db, err = ledger.Open(o.ledgerPath, ledger.Options{
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
		store = db
		fmt.Fprintf(os.Stderr, "chaosworker: run=%d ledger opened in %dms: %s\n", o.run, time.Since(opened).Milliseconds(), heldFile(o.ledgerPath))
	}
	defer store.Close()
	var sock io.Closer
	if db != nil && serveSocket != nil {
		// As sqsonce run: a socket that cannot be served is a warning.
		var err error
		if sock, err = serveSocket(db, o.ledgerPath+".sock", log); err != nil {
			log.Warn("ledger socket unavailable", "error", err)
		}
	}

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

	var h worker.Handler
	var sessions *sessionWatch
	if o.pgtx {
		sessions = &sessionWatch{raw: o.pgURL}
		tw := &txWork{
			run:        o.run,
			table:      pgx.Identifier{o.effects}.Sanitize(),
			events:     events,
			control:    o.control,
			holdShare:  o.holdShare,
			hold:       o.hold,
			panicShare: o.panicShare,
			writes:     o.writesShare,
			rng:        rand.New(rand.NewPCG(o.seed, o.seed+2)),
			client:     &http.Client{Timeout: 15 * time.Second},
		}
		go func() {
			for range winch {
				tw.armed.Store(true)
			}
		}()
		inTx, batched := pgtx.New(pgl, tw.do), pgtx.NewWrites(pgl, tw.queue)
		h = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if tw.draw(tw.writes) {
				return batched.Handle(ctx, m)
			}
			return inTx.Handle(ctx, m)
		})
	} else {
		h, err = worker.NewHTTPHandler(worker.HTTPConfig{
			URL:    o.downstream,
			Client: &http.Client{Transport: runHeader{base: http.DefaultTransport, run: strconv.Itoa(o.run)}},
			Logger: log,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaosworker:", err)
			return 1
		}
	}

	countsPath := filepath.Join(o.dir, fmt.Sprintf("run-%d.counts", o.run))
	var w *worker.Worker
	var completesOK atomic.Int64
	var leakChecked bool
	var leaked int64
	cl := &chaosLedger{
		inner:       store,
		run:         o.run,
		events:      events,
		crashes:     crashes,
		crashAAt:    o.crashAAt,
		crashBAt:    o.crashBAt,
		crashAProb:  o.crashAProb,
		crashBProb:  o.crashBProb,
		rng:         rand.New(rand.NewPCG(o.seed, o.seed+1)),
		completesOK: &completesOK,
	}
	snapshot := func(final bool) {
		c := event.Counts{
			Run:          o.run,
			Faults:       map[string]map[string]int{},
			Commits:      commits.Load(),
			CommitErrors: commitErrors.Load(),
			CompletesOK:  completesOK.Load(),
			LedgerErrors: cl.errors.Load(),
			SQSRequests:  sqsRequests.Load(),
			Final:        final,
		}
		for op, byKind := range faults.Counts() {
			c.Faults[op] = map[string]int{}
			for k, n := range byKind {
				c.Faults[op][string(k)] = n
			}
		}
		c.Waits, c.WaitNanos, c.Down = cl.waits()
		c.LeakChecked, c.LeakedSessions = leakChecked, leaked
		if w != nil {
			c.Stats = w.Stats()
		}
		if err := event.WriteFileAtomic(countsPath, c); err != nil {
			log.Error("write counters", "error", err)
		}
	}

	cl.beforeKill = func() { snapshot(false) }
	var wl worker.Ledger = cl
	if p, ok := store.(worker.Pinger); ok {
		// The worker pings a ledger that can be pinged while its claims
		// fail: so must the wrapper.
		wl = pingingLedger{chaosLedger: cl, p: p}
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
	}, client, wl, eventHandler{h: h, events: events, sessions: sessions})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		<-sigs
		stop()
		<-sigs
		w.StopNow()
	}()
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
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Stopped while it read its queue's attributes: it had not
		// started, so it stopped cleanly.
		err = nil
	}
	close(tickDone)
	bg.Wait()
	cl.endWait()
	if sessions != nil {
		sessions.close()
	}
	if o.pgtx {
		// Every handler has returned: a session of the pool still inside
		// a transaction holds one that nothing will end (and Close would
		// wait for its connection forever). Counted before Close.
		n, lerr := sessionsInTx(o.pgURL, app)
		if lerr != nil {
			fmt.Fprintln(os.Stderr, "chaosworker: count the sessions left in a transaction:", lerr)
		} else {
			leakChecked, leaked = true, n
		}
		snapshot(false)
	}
	if sock != nil {
		sock.Close()
	}
	if cerr := store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	snapshot(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}
	return 0
}

// chaosLedger is the real ledger with a kill switch around Complete, an
// event log of completions, failures and waits for the ledger, and a count
// of the calls that found a shared ledger unavailable.
type chaosLedger struct {
	inner                  worker.Ledger
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

	errors atomic.Int64 // calls that failed with ledger.ErrUnavailable

	gateMu    sync.Mutex
	down      bool      // the last batch's claims failed, and no claim or ping succeeded since
	downSince time.Time // when the first of them failed
	nWaits    int64     // waits ended
	waited    time.Duration
}

var (
	_ worker.Ledger = (*chaosLedger)(nil)
	_ worker.Pinger = pingingLedger{}
)

// unavailable counts err when it says a shared ledger is unavailable.
func (l *chaosLedger) unavailable(err error) {
	if errors.Is(err, ledger.ErrUnavailable) {
		l.errors.Add(1)
	}
}

// ClaimBatch is the real ClaimBatch, each claim it made logged (once it
// returned: the claim was written before). A failed batch starts a wait
// for the ledger, and a successful one ends it, as in the worker, which
// holds new work back meanwhile.
func (l *chaosLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	claims, err := l.inner.ClaimBatch(ctx, reqs)
	l.unavailable(err)
	if errors.Is(err, ledger.ErrContention) {
		// Rolled back because of a concurrent transaction: the store
		// answered, and the worker does not wait for it.
		return claims, err
	}
	if err == nil {
		for i, c := range claims {
			if c.Err == nil && c.Outcome == ledger.Claimed {
				l.log(event.WorkerEvent{Ev: event.EvClaim, Key: reqs[i].Key, Owner: reqs[i].Owner, Takeover: c.Takeover})
			}
		}
	}
	if err != nil {
		l.gateMu.Lock()
		if !l.down {
			l.down, l.downSince = true, time.Now()
		}
		l.gateMu.Unlock()
	} else {
		l.up("")
	}
	return claims, err
}

// up ends a wait for the ledger, if one is on, and logs it; why is empty
// when the ledger answered again.
func (l *chaosLedger) up(why string) {
	l.gateMu.Lock()
	if !l.down {
		l.gateMu.Unlock()
		return
	}
	since := l.downSince
	d := time.Since(since)
	l.down = false
	l.nWaits++
	l.waited += d
	l.gateMu.Unlock()
	l.log(event.WorkerEvent{Ev: event.EvWait, Since: since.UnixNano(), Err: why})
}

// endWait logs a wait still on when the run ends, as ended then.
func (l *chaosLedger) endWait() { l.up(event.WaitCutShort) }

// waits returns the waits for the ledger ended so far, their total length
// and whether one is on.
func (l *chaosLedger) waits() (int64, int64, bool) {
	l.gateMu.Lock()
	defer l.gateMu.Unlock()
	return l.nWaits, int64(l.waited), l.down
}

// ReleaseBatch is the real ReleaseBatch, each release it made logged.
func (l *chaosLedger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	errs := l.inner.ReleaseBatch(ctx, refs)
	for i, err := range errs {
		l.unavailable(err)
		if err == nil {
			l.log(event.WorkerEvent{Ev: event.EvRelease, Key: refs[i].Key, Owner: refs[i].Owner})
		}
	}
	return errs
}

// ExtendBatch is the real ExtendBatch; each answer that a claim is no
// longer its owner's (another owns the operation, it is gone or settled)
// is logged.
func (l *chaosLedger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	errs := l.inner.ExtendBatch(ctx, refs, lease)
	for i, err := range errs {
		l.unavailable(err)
		if errors.Is(err, ledger.ErrNotOwner) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrState) {
			l.log(event.WorkerEvent{Ev: event.EvLost, Key: refs[i].Key, Owner: refs[i].Owner, Err: err.Error()})
		}
	}
	return errs
}

// Sweep is the real Sweep.
func (l *chaosLedger) Sweep(ctx context.Context) (int, error) {
	n, err := l.inner.Sweep(ctx)
	l.unavailable(err)
	return n, err
}

// pingingLedger is a chaosLedger on a ledger that the worker can ping: a
// ping that succeeds ends a wait for the ledger, as in the worker.
type pingingLedger struct {
	*chaosLedger
	p worker.Pinger
}

func (l pingingLedger) Ping(ctx context.Context) error {
	err := l.p.Ping(ctx)
	l.unavailable(err)
	if err == nil {
		l.up("")
	}
	return err
}

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
	errs := l.inner.CompleteBatch(ctx, cs)
	ok := 0
	for i, c := range cs {
		l.unavailable(errs[i])
		l.log(event.WorkerEvent{Ev: event.EvComplete, Key: c.Key, Owner: c.Owner, Err: errText(errs[i])})
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
	err := l.inner.Fail(ctx, f)
	l.unavailable(err)
	l.log(event.WorkerEvent{Ev: event.EvFail, Key: f.Key, Owner: f.Owner, Perm: f.Permanent, Err: errText(err)})
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

// eventHandler runs the real handler and logs that it was called, under
// which claim, and what it returned.
type eventHandler struct {
	h      worker.Handler
	events *event.Appender
	// sessions reads the state of a transaction's session after a
	// planned panic (with -pgtx).
	sessions *sessionWatch
}

// messageKey is the context key under which eventHandler hands the message
// to runHeader.
type messageKey struct{}

func (e eventHandler) Handle(ctx context.Context, m *worker.Message) error {
	start := event.WorkerEvent{Ev: event.EvStart, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID, Owner: m.Owner, T: time.Now().UnixNano()}
	if aerr := e.events.Append(start); aerr != nil {
		fmt.Fprintln(os.Stderr, "chaosworker: event log:", aerr)
	}
	defer func() {
		// A panic is logged, then goes on to the worker.
		if p := recover(); p != nil {
			ev := event.WorkerEvent{
				Ev: event.EvHandled, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID, Owner: m.Owner,
				Err: fmt.Sprintf("%s: %v", event.HandlerPanicked, p),
			}
			if tp, ok := p.(txPanic); ok && e.sessions != nil {
				ev.Session = e.sessions.state(tp.pid, tp.started)
			}
			ev.T = time.Now().UnixNano()
			e.log(ev)
			panic(p)
		}
	}()
	err := e.h.Handle(context.WithValue(ctx, messageKey{}, m), m)
	ev := event.WorkerEvent{
		Ev: event.EvHandled, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID, Owner: m.Owner,
		Err: errText(err), T: time.Now().UnixNano(),
	}
	if err != nil && ctx.Err() != nil {
		// Why the worker stopped the handler: its timeout, the end of
		// the grace, or a lease that another claim took over.
		ev.Cause = errText(context.Cause(ctx))
	}
	e.log(ev)
	return err
}

func (e eventHandler) log(ev event.WorkerEvent) {
	if err := e.events.Append(ev); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker: event log:", err)
	}
}

// withAppName returns the connection string raw with application_name set
// to app.
func withAppName(raw, app string) (string, error) {
	if !strings.Contains(raw, "://") {
		return raw + " application_name=" + app, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// sessionWatch reads the state of sessions of the database of raw, on a
// connection of its own. It is safe for concurrent use.
type sessionWatch struct {
	raw  string
	mu   sync.Mutex
	conn *pgx.Conn
}

// state returns the state of the transaction that server process pid
// started at started, from pg_stat_activity: the session's state while
// that transaction is its current one, sessionMovedOn once the session is
// in no transaction or in a later one (the pool gave the connection to
// another attempt), event.SessionGone when there is no such session, or
// event.SessionUnknown and why. A session inside the transaction is looked
// at again for up to 3 s: a connection that its client has just closed
// (one whose rollback failed) ends as soon as the server reads the end of
// the stream, a transaction that nothing ends stays.
func (s *sessionWatch) state(pid uint32, started time.Time) string {
	if started.IsZero() {
		return event.SessionUnknown + ": the transaction's start could not be read"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline := time.Now().Add(3 * time.Second)
	for {
		st := s.read(pid, started)
		if !strings.HasPrefix(st, "idle in transaction") || time.Now().After(deadline) {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *sessionWatch) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close(context.Background())
		s.conn = nil
	}
}

// read reads the state once, on a new connection when the one it has
// fails (the campaign's proxy cuts connections).
func (s *sessionWatch) read(pid uint32, started time.Time) string {
	st := s.readOn(pid, started)
	if strings.HasPrefix(st, event.SessionUnknown) {
		st = s.readOn(pid, started)
	}
	return st
}

// sessionMovedOn is the state of a session that is no longer inside the
// transaction looked for.
const sessionMovedOn = "out of that transaction"

func (s *sessionWatch) readOn(pid uint32, started time.Time) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.conn == nil {
		pc, err := pgxpool.ParseConfig(s.raw) // drops the pool's settings
		if err != nil {
			return event.SessionUnknown + ": " + err.Error()
		}
		if s.conn, err = pgx.ConnectConfig(ctx, pc.ConnConfig); err != nil {
			s.conn = nil
			return event.SessionUnknown + ": " + err.Error()
		}
	}
	var st *string
	var xactStart *time.Time
	err := s.conn.QueryRow(ctx, `SELECT state, xact_start FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&st, &xactStart)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return event.SessionGone
	case err != nil:
		s.conn.Close(context.Background())
		s.conn = nil
		return event.SessionUnknown + ": " + err.Error()
	case st == nil:
		return event.SessionUnknown + ": no state"
	case xactStart == nil || !xactStart.Equal(started):
		return sessionMovedOn
	}
	return *st
}

// sessionsInTx counts the sessions of application name app that are inside
// a transaction and not running a statement, on a connection of its own to
// the database of raw.
func sessionsInTx(raw, app string) (int64, error) {
	pc, err := pgxpool.ParseConfig(raw) // drops the pool's settings
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND state IN ('idle in transaction', 'idle in transaction (aborted)')`, app).Scan(&n)
	return n, err
}

// txWork is the work of the transactional handler (-pgtx): one effect row
// per attempt, inserted in the transaction of the operation's completion,
// then what the body asks for.
type txWork struct {
	run        int
	table      string // the effects table, quoted
	events     *event.Appender
	control    string
	holdShare  float64
	hold       time.Duration
	panicShare float64
	writes     float64 // share of the attempts made in the Writes form
	client     *http.Client

	seq   atomic.Int64
	armed atomic.Bool // SIGWINCH came: hold the next attempt's transaction
	mu    sync.Mutex
	rng   *rand.Rand
}

// txBody is what the workload's bodies may ask of the work.
type txBody struct {
	Fail       int  `json:"fail"`
	Permanent  bool `json:"permanent"`
	RetryAfter int  `json:"retry_after"`
	SlowMS     int  `json:"slow_ms"`
}

// do inserts the attempt's effect row in tx, logs it, holds the
// transaction open when drawn, and then succeeds or fails as the body
// says. Every error rolls the row back.
func (t *txWork) do(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
	client := ""
	if c := tx.Conn().PgConn().Conn(); c != nil {
		client = c.LocalAddr().String()
	}
	sql, args, inserted := t.row(m, client)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("insert the effect row: %w", err)
	}
	t.log(inserted)
	seq := inserted.Seq
	if t.armed.CompareAndSwap(true, false) || t.draw(t.holdShare) {
		t.log(event.WorkerEvent{Ev: event.EvInTx, Key: m.Key, Attempt: m.Attempt, Owner: m.Owner})
		if err := t.askControl(ctx, m); err != nil {
			// Not killed while it asked: the campaign must know that this
			// one went on.
			t.log(event.WorkerEvent{Ev: event.EvInTx, Key: m.Key, Attempt: m.Attempt, Owner: m.Owner, Err: "went on without an answer: " + err.Error()})
		}
		if err := sleepCtx(ctx, t.hold); err != nil {
			return err
		}
	}
	if t.draw(t.panicShare) {
		// The transaction's start (now() is the start of the current
		// transaction) tells it apart from a later one on the same
		// session: once this one is rolled back, the pool may hand the
		// connection to another attempt at once.
		var started time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&started); err != nil {
			started = time.Time{}
		}
		t.log(event.WorkerEvent{Ev: event.EvPanic, Key: m.Key, Attempt: m.Attempt, Owner: m.Owner})
		panic(txPanic{key: m.Key, seq: seq, run: t.run, pid: tx.Conn().PgConn().PID(), started: started})
	}
	if err := t.asked(ctx, m, "the row rolled back"); err != nil {
		return err
	}
	m.Result = fmt.Appendf(nil, "row %d of run %d", seq, t.run)
	return nil
}

// row returns the statement that inserts m's effect row, as the next row
// of this run, from the connection client, and the event that logs it.
func (t *txWork) row(m *worker.Message, client string) (sql string, args []any, inserted event.WorkerEvent) {
	sum := sha256.Sum256(m.Body)
	hash := hex.EncodeToString(sum[:])
	seq := t.seq.Add(1)
	sql = `INSERT INTO ` + t.table + ` (key, body_sha256, body, run, owner, attempt, seq, client) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	args = []any{m.Key, hash, string(m.Body), t.run, m.Owner, m.Attempt, seq, client}
	inserted = event.WorkerEvent{Ev: event.EvInsert, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID, Owner: m.Owner, Seq: seq, Hash: hash, Client: client}
	return sql, args, inserted
}

// asked does what m's body asks of its attempt: a wait, then a permanent
// or a transient failure; row says what became of the attempt's row then.
func (t *txWork) asked(ctx context.Context, m *worker.Message, row string) error {
	var b txBody
	_ = json.Unmarshal(m.Body, &b)
	if b.SlowMS > 0 {
		if err := sleepCtx(ctx, time.Duration(b.SlowMS)*time.Millisecond); err != nil {
			return err
		}
	}
	switch {
	case b.Permanent:
		return worker.Permanent(fmt.Errorf("permanent failure, %s", row))
	case m.Attempt <= b.Fail:
		err := fmt.Errorf("transient failure %d of %d, %s", m.Attempt, b.Fail, row)
		if b.RetryAfter > 0 {
			return worker.RetryAfter(time.Duration(b.RetryAfter)*time.Second, err)
		}
		return err
	}
	return nil
}

// queue is the work of an attempt in the Writes form: it queues the
// attempt's effect row on b, sent with the completion and the commit in
// one round trip, and logs it as inserted before it is sent. A failure
// that the body asks for is returned first, and nothing is sent; so is a
// slow attempt's wait, with no transaction open.
func (t *txWork) queue(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
	if err := t.asked(ctx, m, "nothing sent"); err != nil {
		return err
	}
	sql, args, inserted := t.row(m, batchClient)
	b.Queue(sql, args...)
	t.log(inserted)
	m.Result = fmt.Appendf(nil, "row %d of run %d", inserted.Seq, t.run)
	return nil
}

// batchClient stands for the connection of an attempt in the Writes form,
// which the handler does not see.
const batchClient = "batch"

// txPanic is the value of a transactional handler's planned panic: pid is
// the server process of its transaction's session.
type txPanic struct {
	key     string
	seq     int64
	run     int
	pid     uint32
	started time.Time // the transaction's start, by the server's clock; zero when unread
}

func (p txPanic) String() string {
	return fmt.Sprintf("chaos: a planned panic after the insert of %s, row %d of run %d", p.key, p.seq, p.run)
}

// draw reports true with probability share.
func (t *txWork) draw(share float64) bool {
	if share <= 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rng.Float64() < share
}

// askControl tells the campaign that this attempt is inside its
// transaction, after the insert; a campaign that means to kill this run
// there does so before it answers. An error says that the campaign did not
// answer.
func (t *txWork) askControl(ctx context.Context, m *worker.Message) error {
	if t.control == "" {
		return nil
	}
	q := url.Values{"run": {strconv.Itoa(t.run)}, "key": {m.Key}, "owner": {m.Owner}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.control+"/intx?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (t *txWork) log(e event.WorkerEvent) {
	e.T = time.Now().UnixNano()
	if err := t.events.Append(e); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker: event log:", err)
	}
}

// sleepCtx sleeps for d, or until ctx ends: then it returns why.
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// heldFile describes the file of path that this process holds open: its
// device and inode, and "(deleted)" when the name no longer leads to it.
// It reads /proc/self/fd, so that it names the file really open, not the
// one that the name leads to now.
func heldFile(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return "file unknown: " + err.Error()
	}
	for _, fd := range fds {
		link := filepath.Join("/proc/self/fd", fd.Name())
		target, err := os.Readlink(link)
		if err != nil || (target != path && target != path+" (deleted)") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(link, &st); err != nil {
			continue
		}
		deleted := ""
		if target != path {
			deleted = " (deleted)"
		}
		return fmt.Sprintf("file dev=%d inode=%d%s", st.Dev, st.Ino, deleted)
	}
	return "file not found among the open files"
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
// X-Chaos-Owner (the attempt's owner token: the claim it runs under),
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
		req.Header.Set("X-Chaos-Owner", m.Owner)
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
