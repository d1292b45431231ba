// Command chaosworker is the worker that the chaos campaigns
// (scripts/chaos) start, kill and restart. It is the real worker library
// on the real ledger (a bbolt file that survives restarts, or
// the shared ledger in a PostgreSQL table, which several chaos
// workers use at once) with the real http handler, and these things added
// around them:
//
//   - the SQS client's transport injects faults (throttling, server
//     errors, timeouts, connection resets, lost acknowledgements, and
//     entries of a batch that fail on SQS's side) into
//     ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibility(Batch)
//     and SendMessage, seeded, at the rates it is given; under the
//     faults it logs every copy SQS accepted from a SendMessage (the
//     worker sends only its dead-letter copies) and every entry of a
//     DeleteMessageBatch before it goes, naming the message and its
//     operation from the receive that handed out the receipt handle;
//   - the ledger handed to the worker kills its own process with SIGKILL
//     in the two windows around a completion: at the next Complete after
//     a SIGUSR1, just before the real one (window a: the handler
//     succeeded, the completion is not durable, the documented duplicate
//     window), or after a SIGUSR2, just after it returned (window b:
//     durable, the message not deleted). Before it kills itself it
//     appends one fsynced line to the crash log, so that the campaign can
//     explain the extra execution;
//   - every claim and release the ledger made, every answer that an
//     operation is complete or that a claim was lost (to an extension of
//     its lease), every handler call and
//     result, completion and failure is appended to the run's event log,
//     each with the attempt's owner token (which the http handler's
//     requests carry to the downstream too), and so is every wait for a
//     ledger that could not record claims (from the first batch whose
//     claims failed until a claim or a ping succeeds, as the worker itself
//     decides); the run's counters (faults injected, worker stats, ledger
//     commits and errors) are written to a file every 250 ms and at exit.
//
// Its configuration (event.WorkerConfig) comes as JSON in its one flag,
// -config. With Tx (on Postgres) the handler is not the http handler but a
// transactional one (package pgtx): in the transaction that also records
// the operation complete, it inserts the attempt's effect row into the
// -effects table of the same database (the key, the payload's hash and
// the payload, the run, the attempt's claim, a sequence number of the run
// and its connection's local address), logs the insert, and then does what
// the body says, as the downstream would: {"fail":n} fails attempts 1..n
// with a retryable error (with "retry_after", after that many seconds),
// {"permanent":true} fails permanently, {"slow_ms":n} takes that long; the
// insert of a failed attempt is rolled back with it. A share of the
// attempts (-tx-writes-share) queue the insert on a batch sent with the
// completion and the commit in one round trip (pgtx.NewWrites). In a
// share of the others (HoldShare), and in the next one after a
// SIGWINCH, it holds the transaction open after the insert for Hold,
// and first logs that it is inside and asks the campaign (POST
// Control/intx?run=N&key=K&owner=O), which may kill it there with SIGKILL
// before it answers. In another share (PanicShare) it panics after
// the insert (and the hold), as a handler with a bug would: the event log
// says so, and the worker must turn the panic into a retryable failure
// once the transaction is rolled back; once the handler has returned, it
// reads from the database the state of that transaction's session, which
// must no longer be inside a transaction, and logs it with the handler's
// result. Once its worker has stopped on a drain, it asks the database how
// many sessions of its ledger's pool (application name chaosworker-N, N
// the run, as every run on Postgres names them) are still inside a
// transaction, and writes that into its counters: no handler runs then,
// so none may be.
//
// With Flow, the worker's flow control (the pause during an outage of the
// downstream, the rate limits) works on the ledger's own flow state,
// fleet-wide on a shared ledger, as in sqsonce run, and the counters keep
// the longest call that took rate tokens (ReserveMax); without it each
// run keeps the defaults in its own process.
//
// Broken makes it a worker that breaks the promise on purpose, so that a
// test can show that the campaigns' audit catches it: delete-first
// deletes each message whose handler succeeded before the worker records
// its completion; skip-claim answers every claim as made without writing
// it to the ledger.
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
	"cmp"
	"context"
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
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
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

// faultOps are the SQS operations whose requests get faults.
var faultOps = []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "SendMessage"}

// The modes of WorkerConfig.Broken.
const (
	brokenDeleteFirst = "delete-first"
	brokenSkipClaim   = "skip-claim"
)

func main() {
	config := flag.String("config", "", "the run's configuration: event.WorkerConfig as JSON")
	flag.Parse()
	var o event.WorkerConfig
	if err := json.Unmarshal([]byte(*config), &o); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker: -config:", err)
		os.Exit(2)
	}
	os.Exit(run(o))
}

// store is the ledger the worker uses, with Close.
type store interface {
	worker.Ledger
	Close() error
}

func run(o event.WorkerConfig) (code int) {
	// The campaign may arm a run (SIGUSR1, SIGUSR2, SIGWINCH) and stop it
	// as soon as it has started it: caught from the start, these signals
	// wait here until the worker is set up, as in sqsonce, rather than end
	// the process (a SIGWINCH would be lost).
	arms := make(chan os.Signal, 3)
	signal.Notify(arms, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("run", o.Run)

	// Count SQS requests from the start, so that a run that fails to start
	// can show it sent none.
	rec := &recorder{base: http.DefaultTransport, receipts: map[string][2]string{}, last: map[string]string{}, tags: map[string]string{}}
	defer func() {
		fmt.Fprintf(os.Stderr, "chaosworker: run=%d exit=%d sqs_requests=%d\n", o.Run, code, rec.requests.Load())
	}()
	if (o.Ledger == "") == (o.Postgres == "") || (o.Downstream == "") == (o.Tx == nil) || o.Tx != nil && o.Postgres == "" {
		fmt.Fprintln(os.Stderr, "chaosworker: want one of Ledger and Postgres, and one of Downstream and Tx (on Postgres)")
		return 2
	}

	// The ledger first: a second process on the same file must fail here,
	// before it touches the queue.
	var commitErrors atomic.Int64
	st, db, pgl := store(nil), (*ledger.DB)(nil), (*postgres.Ledger)(nil)
	opened := time.Now()
	var err error
	if o.Postgres != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pgl, err = postgres.Open(ctx, postgres.Options{URL: o.Postgres, Table: o.Table, Timeout: o.LedgerTimeout})
		cancel()
		st = pgl
	} else {
		db, err = ledger.Open(o.Ledger, ledger.Options{LockTimeout: o.LockTimeout, OnCommit: func(_ int, _ time.Duration, err error) {
			if err != nil {
				commitErrors.Add(1)
			}
		}})
		st = db
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaosworker: %v\n", err)
		return 3
	}
	held := "postgres"
	if db != nil {
		held = heldFile(o.Ledger)
	}
	fmt.Fprintf(os.Stderr, "chaosworker: run=%d ledger opened in %dms: %s\n", o.Run, time.Since(opened).Milliseconds(), held)
	defer st.Close()
	var sock io.Closer
	if db != nil && serveSocket != nil {
		// As sqsonce run: a socket that cannot be served is a warning.
		if sock, err = serveSocket(db, o.Ledger+".sock", log); err != nil {
			log.Warn("ledger socket unavailable", "error", err)
		}
	}

	events, err := event.OpenAppender(filepath.Join(o.Dir, fmt.Sprintf("run-%d.events", o.Run)), false)
	crashes, cerr := event.OpenAppender(o.CrashLog, true)
	if err = errors.Join(err, cerr); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}
	defer events.Close()
	defer crashes.Close()

	rec.events = events
	faults := sqstest.NewFaults(o.Seed, rec)
	for _, op := range faultOps {
		r := o.Rates
		if !strings.HasSuffix(op, "Batch") {
			r.EntryFailure = 0 // only a batch has entries
		}
		faults.Set(op, r)
	}
	client := sqs.New(sqs.Options{
		Region:       sqstest.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
		BaseEndpoint: aws.String(o.Endpoint),
		HTTPClient:   &http.Client{Timeout: 5 * time.Second, Transport: faults},
	}, sqsclient.InMemoryBodies) // as sqsonce run builds its client

	eh := eventHandler{events: events}
	var tw *txWork
	if o.Broken == brokenDeleteFirst {
		eh.deleteFirst = func(ctx context.Context, msgID string) {
			if rh := rec.receipt(msgID); rh != "" {
				_, _ = client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &o.Queue,
					Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: &rh}}})
			}
		}
	}
	if t := o.Tx; t != nil {
		eh.sessions = o.Postgres
		tw = &txWork{TxConfig: *t, run: o.Run, table: pgx.Identifier{t.Effects}.Sanitize(), events: events,
			rng: rand.New(rand.NewPCG(o.Seed, o.Seed+2)), client: &http.Client{Timeout: 15 * time.Second}}
		inTx, batched := pgtx.New(pgl, tw.do), pgtx.NewWrites(pgl, tw.queue)
		eh.h = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if tw.draw(t.WritesShare) {
				return batched.Handle(ctx, m)
			}
			return inTx.Handle(ctx, m)
		})
	} else if eh.h, err = worker.NewHTTPHandler(worker.HTTPConfig{URL: o.Downstream, Logger: log,
		Client: &http.Client{Transport: runHeader{base: http.DefaultTransport, run: strconv.Itoa(o.Run)}}}); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}

	countsPath := filepath.Join(o.Dir, fmt.Sprintf("run-%d.counts", o.Run))
	var w *worker.Worker
	leakChecked, leaked := false, int64(0)
	cl := &chaosLedger{inner: st, run: o.Run, events: events, crashes: crashes, skipClaims: o.Broken == brokenSkipClaim}
	snapshot := func() {
		c := event.Counts{Faults: faults.Counts(), CommitErrors: commitErrors.Load(), CompletesOK: cl.completesOK.Load(), LedgerErrors: cl.errors.Load(),
			SQSRequests: rec.requests.Load(), Down: cl.isDown(), LeakChecked: leakChecked, LeakedSessions: leaked, ReserveMax: time.Duration(cl.reserveMax.Load())}
		if w != nil {
			c.Stats = w.Stats()
		}
		if err := event.WriteFileAtomic(countsPath, c); err != nil {
			log.Error("write counters", "error", err)
		}
	}
	cl.beforeKill = snapshot
	var wl worker.Ledger = cl
	if p, ok := st.(worker.Pinger); ok {
		// The worker pings a ledger that can be pinged while its claims
		// fail: so must the wrapper.
		wl = pingingLedger{chaosLedger: cl, p: p}
	}
	var flow worker.FlowConfig
	if fl, ok := st.(worker.FlowLedger); ok && o.Flow != nil {
		// Flow control on the ledger's own flow state, as sqsonce run's.
		flow, wl = *o.Flow, chaosFlow{cl, flowLedger{fl, &cl.reserveMax}}
		if p, ok := st.(worker.Pinger); ok {
			wl = pingingFlow{pingingLedger{cl, p}, flowLedger{fl, &cl.reserveMax}}
		}
	}
	w, err = worker.New(worker.Config{
		QueueURL: o.Queue, WaitTime: time.Second, VisibilityTimeout: o.Visibility, Pollers: 2,
		Key: worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"}, Concurrency: o.Concurrency, HandlerTimeout: o.HandlerTimeout,
		MinBackoff: time.Second, MaxBackoff: 4 * time.Second, Grace: o.Grace, Logger: log, Flow: flow,
	}, client, wl, eh)
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
		for sig := range arms {
			switch {
			case sig == syscall.SIGUSR1:
				cl.armA.Store(true)
			case sig == syscall.SIGUSR2:
				cl.armB.Store(true)
			case tw != nil:
				tw.armed.Store(true)
			}
		}
	}()
	ticker := time.NewTicker(250 * time.Millisecond)
	tickDone := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-ticker.C:
				snapshot()
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
	ticker.Stop()
	cl.up(event.WaitCutShort)
	if eh.sessions != "" {
		// Every handler has returned: a session of the pool still inside
		// a transaction holds one that nothing will end (and Close would
		// wait for its connection forever). Counted before Close.
		if n, lerr := sessionsInTx(o.Postgres, fmt.Sprintf("chaosworker-%d", o.Run)); lerr != nil {
			fmt.Fprintln(os.Stderr, "chaosworker: count the sessions left in a transaction:", lerr)
		} else {
			leakChecked, leaked = true, n
		}
		snapshot()
	}
	if sock != nil {
		sock.Close()
	}
	if cerr := st.Close(); cerr != nil && err == nil {
		err = cerr
	}
	snapshot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 1
	}
	return 0
}

// chaosLedger is the real ledger with a kill switch around Complete, an
// event log of claims, releases, lost claims, completions, failures and
// waits for the ledger, and a count of the calls that found a shared
// ledger unavailable.
type chaosLedger struct {
	inner           worker.Ledger
	run             int
	events, crashes *event.Appender
	beforeKill      func()
	skipClaims      bool // Broken skip-claim

	armA, armB  atomic.Bool // set by SIGUSR1, SIGUSR2
	completesOK atomic.Int64
	errors      atomic.Int64 // calls that failed with ledger.ErrUnavailable

	gateMu    sync.Mutex
	down      bool      // the last batch's claims failed, and no claim or ping succeeded since
	downSince time.Time // when the first of them failed

	reserveMax atomic.Int64 // the longest Reserve (with Flow), in nanoseconds
}

// flowLedger is the inner ledger's flow calls, the longest Reserve
// counted.
type flowLedger struct {
	worker.FlowLedger
	longest *atomic.Int64 // nanoseconds
}

func (l flowLedger) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error) {
	start := time.Now()
	g, err := l.FlowLedger.Reserve(ctx, r)
	for d, m := int64(time.Since(start)), l.longest.Load(); d > m && !l.longest.CompareAndSwap(m, d); m = l.longest.Load() {
	}
	return g, err
}

// The chaos ledgers with the inner ledger's flow calls.
type (
	chaosFlow struct {
		*chaosLedger
		flowLedger
	}
	pingingFlow struct {
		pingingLedger
		flowLedger
	}
)

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
// returned: the claim was written before, after the call was sent, both
// times in the event). A failed batch starts a wait
// for the ledger, and a successful one ends it, as in the worker, which
// holds new work back meanwhile. With Broken skip-claim every claim is
// answered as made, and nothing is written.
func (l *chaosLedger) ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error) {
	if l.skipClaims {
		out := make([]ledger.Claim, len(reqs))
		for i, r := range reqs {
			now := time.Now()
			out[i] = ledger.Claim{Outcome: ledger.Claimed, LeaseLeft: r.Lease, Record: ledger.Record{Key: r.Key, State: ledger.StateInProgress,
				Fingerprint: r.Fingerprint, Attempts: 1, Owner: r.Owner, LeaseExpiry: now.Add(r.Lease), FirstSeen: now, Claimed: now, Updated: now}}
		}
		return out, nil
	}
	sent := time.Now()
	claims, err := l.inner.ClaimBatch(ctx, reqs)
	l.unavailable(err)
	switch {
	case errors.Is(err, ledger.ErrContention):
		// Rolled back because of a concurrent transaction: the store
		// answered, and the worker does not wait for it.
	case err != nil:
		l.gateMu.Lock()
		if !l.down {
			l.down, l.downSince = true, time.Now()
		}
		l.gateMu.Unlock()
	default:
		for i, c := range claims {
			switch {
			case c.Err == nil && c.Outcome == ledger.Claimed:
				l.events.Log(event.WorkerEvent{Ev: event.EvClaim, Key: reqs[i].Key, Owner: reqs[i].Owner, Takeover: c.Takeover, Since: sent.UnixNano()})
			case c.Err == nil && c.Outcome == ledger.AlreadyComplete:
				l.events.Log(event.WorkerEvent{Ev: event.EvDone, Key: reqs[i].Key})
			}
		}
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
	l.down = false
	l.gateMu.Unlock()
	l.events.Log(event.WorkerEvent{Ev: event.EvWait, Since: since.UnixNano(), Err: why})
}

// isDown reports whether a wait for the ledger is on.
func (l *chaosLedger) isDown() bool {
	l.gateMu.Lock()
	defer l.gateMu.Unlock()
	return l.down
}

// ReleaseBatch is the real ReleaseBatch, each release it made logged.
func (l *chaosLedger) ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error {
	errs := l.inner.ReleaseBatch(ctx, refs)
	for i, err := range errs {
		l.unavailable(err)
		if err == nil {
			l.events.Log(event.WorkerEvent{Ev: event.EvRelease, Key: refs[i].Key, Owner: refs[i].Owner})
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
			l.events.Log(event.WorkerEvent{Ev: event.EvLost, Key: refs[i].Key, Owner: refs[i].Owner, Err: err.Error()})
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

// CompleteBatch kills the process before the real completions (window a)
// or after they returned (window b) when armed to. The worker records the
// completions that wait at the same moment in one call.
func (l *chaosLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	if len(cs) > 0 && l.armA.CompareAndSwap(true, false) {
		l.die(event.WindowA, cs[0].Key)
	}
	errs := l.inner.CompleteBatch(ctx, cs)
	ok := ""
	for i, c := range cs {
		l.unavailable(errs[i])
		l.events.Log(event.WorkerEvent{Ev: event.EvComplete, Key: c.Key, Owner: c.Owner, Err: errText(errs[i])})
		if errs[i] == nil {
			l.completesOK.Add(1)
			ok = c.Key
		}
	}
	if ok != "" && l.armB.CompareAndSwap(true, false) {
		l.die(event.WindowB, ok)
	}
	return errs
}

// Fail is the real Fail, logged.
func (l *chaosLedger) Fail(ctx context.Context, f ledger.Failure) error {
	err := l.inner.Fail(ctx, f)
	l.unavailable(err)
	l.events.Log(event.WorkerEvent{Ev: event.EvFail, Key: f.Key, Owner: f.Owner, Err: errText(err)})
	return err
}

// die records the crash durably, then kills this process with SIGKILL: no
// deferred function, no flush, no shutdown runs.
func (l *chaosLedger) die(window, key string) {
	if err := l.crashes.Append(event.Crash{Run: l.run, Window: window, Key: key}); err != nil {
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
	// sessions is the database whose sessions are read after a planned
	// panic (with Tx).
	sessions string
	// deleteFirst, with Broken delete-first, deletes a message whose
	// handler succeeded, before the worker records its completion.
	deleteFirst func(ctx context.Context, msgID string)
}

// messageKey is the context key under which eventHandler hands the message
// to runHeader.
type messageKey struct{}

func (e eventHandler) Handle(ctx context.Context, m *worker.Message) (err error) {
	ev := event.WorkerEvent{Ev: event.EvStart, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID, Owner: m.Owner, T: time.Now().UnixNano()}
	e.events.Log(ev)
	ev.Ev = event.EvHandled
	defer func() {
		// A panic is logged, then goes on to the worker.
		if p := recover(); p != nil {
			ev.Err = fmt.Sprintf("%s: %v", event.HandlerPanicked, p)
			if tp, ok := p.(txPanic); ok && e.sessions != "" {
				ev.Session = sessionState(e.sessions, tp.pid, tp.started)
			}
			ev.T = time.Now().UnixNano()
			e.events.Log(ev)
			panic(p)
		}
	}()
	err = e.h.Handle(context.WithValue(ctx, messageKey{}, m), m)
	ev.Err, ev.T = errText(err), time.Now().UnixNano()
	if err != nil && ctx.Err() != nil {
		// Why the worker stopped the handler: its timeout, the end of
		// the grace, or a lease that another claim took over.
		ev.Cause = errText(context.Cause(ctx))
	}
	e.events.Log(ev)
	if err == nil && e.deleteFirst != nil {
		e.deleteFirst(ctx, m.MessageID)
	}
	return err
}

// sessionMovedOn is the state of a session that is no longer inside the
// transaction looked for.
const sessionMovedOn = "out of that transaction"

// sessionState returns the state of the transaction that server process
// pid started at started, from pg_stat_activity, read on a connection of
// its own to the database of raw (a new one once if the campaign's proxy
// cuts it): the session's state while that transaction is its current
// one, sessionMovedOn once the session is in no transaction or in a later
// one (the pool gave the connection to another attempt),
// event.SessionGone when there is no such session, or event.SessionUnknown
// and why. A session inside the transaction is looked at again for up to
// 3 s: a connection that its client has just closed (one whose rollback
// failed) ends as soon as the server reads the end of the stream, a
// transaction that nothing ends stays.
func sessionState(raw string, pid uint32, started time.Time) (st string) {
	if started.IsZero() {
		return event.SessionUnknown + ": the transaction's start could not be read"
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := connect(ctx, raw)
		for deadline := time.Now().Add(3 * time.Second); err == nil; time.Sleep(100 * time.Millisecond) {
			var state *string
			var xactStart *time.Time
			switch err = conn.QueryRow(ctx, `SELECT state, xact_start FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&state, &xactStart); {
			case errors.Is(err, pgx.ErrNoRows):
				st, err = event.SessionGone, nil
			case err != nil:
			case state == nil:
				st = event.SessionUnknown + ": no state"
			case xactStart == nil || !xactStart.Equal(started):
				st = sessionMovedOn
			case strings.HasPrefix(*state, "idle in transaction") && time.Now().Before(deadline):
				continue
			default:
				st = *state
			}
			conn.Close(context.Background())
			if err == nil {
				return st
			}
		}
		st = event.SessionUnknown + ": " + err.Error()
	}
	return st
}

// connect opens a connection of its own to the database of raw, without
// the pool's settings.
func connect(ctx context.Context, raw string) (*pgx.Conn, error) {
	pc, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, pc.ConnConfig)
}

// sessionsInTx counts the sessions of application name app that are inside
// a transaction and not running a statement, on a connection of its own to
// the database of raw.
func sessionsInTx(raw, app string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := connect(ctx, raw)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND state IN ('idle in transaction', 'idle in transaction (aborted)')`, app).Scan(&n)
	return n, err
}

// txWork is the work of the transactional handler (Tx): one effect row
// per attempt, inserted in the transaction of the operation's completion,
// then what the body asks for.
type txWork struct {
	event.TxConfig
	run    int
	table  string // the effects table, quoted
	events *event.Appender
	client *http.Client

	seq   atomic.Int64
	armed atomic.Bool // SIGWINCH came: hold the next attempt's transaction
	mu    sync.Mutex
	rng   *rand.Rand
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
	t.events.Log(inserted)
	if t.armed.CompareAndSwap(true, false) || t.draw(t.HoldShare) {
		t.events.Log(event.WorkerEvent{Ev: event.EvInTx, Key: m.Key, Attempt: m.Attempt, Owner: m.Owner})
		if err := t.askControl(ctx, m); err != nil {
			// Not killed while it asked: the campaign must know that this
			// one went on.
			t.events.Log(event.WorkerEvent{Ev: event.EvInTx, Key: m.Key, Attempt: m.Attempt, Owner: m.Owner, Err: "went on without an answer: " + err.Error()})
		}
		if err := sleepCtx(ctx, t.Hold); err != nil {
			return err
		}
	}
	if t.draw(t.PanicShare) {
		// The transaction's start (now() is the start of the current
		// transaction) tells it apart from a later one on the same
		// session: once this one is rolled back, the pool may hand the
		// connection to another attempt at once.
		var started time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&started); err != nil {
			started = time.Time{}
		}
		t.events.Log(event.WorkerEvent{Ev: event.EvPanic, Key: m.Key, Attempt: m.Attempt, Owner: m.Owner})
		panic(txPanic{key: m.Key, seq: inserted.Seq, run: t.run, pid: tx.Conn().PgConn().PID(), started: started})
	}
	if err := t.asked(ctx, m, "the row rolled back"); err != nil {
		return err
	}
	m.Result = fmt.Appendf(nil, "row %d of run %d", inserted.Seq, t.run)
	return nil
}

// row returns the statement that inserts m's effect row, as the next row
// of this run, from the connection client, and the event that logs it.
func (t *txWork) row(m *worker.Message, client string) (sql string, args []any, inserted event.WorkerEvent) {
	hash := event.Hash(m.Body)
	seq := t.seq.Add(1)
	sql = `INSERT INTO ` + t.table + ` (key, body_hash, body, run, owner, attempt, seq, client) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	args = []any{m.Key, hash, string(m.Body), t.run, m.Owner, m.Attempt, seq, client}
	return sql, args, event.WorkerEvent{Ev: event.EvInsert, Key: m.Key, Attempt: m.Attempt, MessageID: m.MessageID, Owner: m.Owner, Seq: seq, Hash: hash, Client: client}
}

// asked does what m's body asks of its attempt: a wait, then a permanent
// or a transient failure; row says what became of the attempt's row then.
func (t *txWork) asked(ctx context.Context, m *worker.Message, row string) error {
	var b struct {
		Fail       int  `json:"fail"`
		Permanent  bool `json:"permanent"`
		RetryAfter int  `json:"retry_after"`
		SlowMS     int  `json:"slow_ms"`
	}
	_ = json.Unmarshal(m.Body, &b)
	if err := sleepCtx(ctx, time.Duration(b.SlowMS)*time.Millisecond); err != nil {
		return err
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
	sql, args, inserted := t.row(m, event.BatchClient)
	b.Queue(sql, args...)
	t.events.Log(inserted)
	m.Result = fmt.Appendf(nil, "row %d of run %d", inserted.Seq, t.run)
	return nil
}

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
	t.mu.Lock()
	defer t.mu.Unlock()
	return share > 0 && t.rng.Float64() < share
}

// askControl tells the campaign that this attempt is inside its
// transaction, after the insert; a campaign that means to kill this run
// there does so before it answers. An error says that the campaign did not
// answer.
func (t *txWork) askControl(ctx context.Context, m *worker.Message) error {
	q := url.Values{"run": {strconv.Itoa(t.run)}, "key": {m.Key}, "owner": {m.Owner}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.Control+"/intx?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// sleepCtx sleeps for d, or until ctx ends: then it returns why.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
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
		var st syscall.Stat_t
		if err != nil || (target != path && target != path+" (deleted)") || syscall.Stat(link, &st) != nil {
			continue
		}
		return fmt.Sprintf("file dev=%d inode=%d%s", st.Dev, st.Ino, strings.TrimPrefix(target, path))
	}
	return "file not found among the open files"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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
		req.Header.Set("X-Chaos-Send", m.Attributes[event.AttrSend])
		req.Header.Set("X-Chaos-Replays", m.Attributes["SqsonceReplays"])
	}
	return t.base.RoundTrip(req)
}

// recorder sits under the fault injection and counts every request. It
// logs every message that a receive handed out (EvReceive: Seq numbers the
// receive), every copy that SQS
// accepted from a SendMessage (EvSent: the id SQS gave the copy, and the
// message it copies), also when the answer is then lost on its way to the
// worker, and every entry of a DeleteMessageBatch as it goes (EvDelete:
// the message and its operation key, from the receive that handed out the
// receipt handle).
type recorder struct {
	base     http.RoundTripper
	events   *event.Appender
	requests atomic.Int64 // every request
	receives int64        // answers of ReceiveMessage so far
	mu       sync.Mutex
	receipts map[string][2]string // receipt handle -> message id, key
	last     map[string]string    // message id -> its last receipt handle
	tags     map[string]string    // AttrSend -> the message last received with it
}

func (t *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	op := sqstest.Operation(req)
	if (op != "SendMessage" && op != "ReceiveMessage" && op != "DeleteMessageBatch") || req.Body == nil {
		return t.base.RoundTrip(req)
	}
	in, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(in))
	var sent struct {
		QueueURL          string `json:"QueueUrl"`
		MessageAttributes map[string]struct{ StringValue string }
		Entries           []struct{ ReceiptHandle string }
	}
	_ = json.Unmarshal(in, &sent)
	for _, e := range sent.Entries {
		t.mu.Lock()
		m := t.receipts[e.ReceiptHandle]
		t.mu.Unlock()
		t.events.Log(event.WorkerEvent{Ev: event.EvDelete, MessageID: m[0], Key: m[1]})
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || op == "DeleteMessageBatch" {
		return resp, err
	}
	out, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(out))
	if rerr != nil {
		return resp, nil
	}
	var answer struct {
		MessageId string
		Messages  []struct {
			MessageId, ReceiptHandle, Body string
			Attributes                     map[string]string
			MessageAttributes              map[string]struct{ StringValue string }
		}
	}
	_ = json.Unmarshal(out, &answer)
	t.mu.Lock()
	defer t.mu.Unlock()
	if op == "SendMessage" { // a deferral's copy names no source: the message last received with its tag
		src := cmp.Or(sent.MessageAttributes[worker.AttrSourceMessageID].StringValue, t.tags[sent.MessageAttributes[event.AttrSend].StringValue])
		t.events.Log(event.WorkerEvent{Ev: event.EvSent, MessageID: src, Copy: answer.MessageId, Queue: sent.QueueURL, Send: sent.MessageAttributes[event.AttrSend].StringValue})
	}
	t.receives++
	for _, m := range answer.Messages {
		var b struct{ ID any } // json matches "id" to ID
		_ = json.Unmarshal([]byte(m.Body), &b)
		key, _ := b.ID.(string)
		t.receipts[m.ReceiptHandle] = [2]string{m.MessageId, key}
		t.last[m.MessageId] = m.ReceiptHandle
		t.tags[m.MessageAttributes[event.AttrSend].StringValue] = m.MessageId
		t.events.Log(event.WorkerEvent{Ev: event.EvReceive, MessageID: m.MessageId, Key: key, Seq: t.receives, Group: m.Attributes["MessageGroupId"],
			Send: m.MessageAttributes[event.AttrSend].StringValue})
	}
	return resp, nil
}

// receipt returns the receipt handle of the last receive of message id.
func (t *recorder) receipt(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last[id]
}
