package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Pinger is implemented by a ledger that can say whether it would take a
// write, without writing: a shared store that answers and lets this host
// write. While its claims fail, the worker pings such a ledger instead of
// receiving messages only to give them back; and whenever ledgerPingEvery
// passes without a write or a ping that succeeded (an idle worker), it
// pings it too, so that Health.Ready and sqsonce_ledger_up follow the
// store whether or not messages arrive. A ledger that is not a Pinger (the
// embedded bbolt file, which this process holds open and locked) counts as
// up until a write to it fails, which only a write can tell.
type Pinger interface {
	Ping(ctx context.Context) error
}

// How the worker waits for a ledger that cannot record claims.
const (
	gateMinWait = 250 * time.Millisecond
	gateMaxWait = 5 * time.Second
)

// ledgerPingEvery is how long the worker goes without a sign of a Pinger
// ledger (a write or a ping that succeeded) before it pings it: an idle
// worker finds a store gone within about this and a ping's timeout
// (gateMaxWait), and back within about this. On DynamoDB a ping is a
// conditional write that writes nothing (one write unit): about 520,000 a
// month for a worker that stays idle.
const ledgerPingEvery = 5 * time.Second

// gate holds back new work while the ledger cannot record claims (a shared
// store that is down, a full disk under the embedded one): no message is
// received only to be given back, so none climbs towards the dead-letter
// queue while the ledger is away, and the worker resumes by itself when it
// answers again. Work already running goes on.
type gate struct {
	mu     sync.Mutex
	down   bool
	since  time.Time
	open   chan struct{} // while down: closed when the ledger records again
	fatal  error         // a ledger that will not come back (its table gone): Run ends
	lastOK time.Time     // when the ledger last took a write or answered a ping
}

// gateOpen returns nil while the ledger records, and otherwise a channel
// closed once it records again: claimed messages wait for it to start.
func (w *Worker) gateOpen() <-chan struct{} {
	g := &w.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.down {
		return nil
	}
	return g.open
}

// isFatal reports whether a claim error means the ledger cannot be used at
// all until an operator acts: its table is missing or newer than this code.
func isFatal(err error) bool {
	return errors.Is(err, ledger.ErrNoSchema) || errors.Is(err, ledger.ErrSchema)
}

// claimFailed records that a batch's claims could not be recorded. A
// batch that the store rolled back because of a concurrent transaction
// (ledger.ErrContention) does not hold new work back: the store answered,
// and the next batch may well pass.
func (w *Worker) claimFailed(err error) {
	w.stats.claimFailures.Add(1)
	w.ledgerFailed(err, "the ledger cannot record claims: no new work starts until it can; running work goes on")
}

// outcomeFailed records that an attempt's outcome (what: "completion",
// "failure") could not be recorded: no new work starts either, since its
// outcome could not be recorded now.
func (w *Worker) outcomeFailed(what string, err error) {
	w.ledgerFailed(err, "the ledger cannot record "+what+"s: no new work starts until it records again; ended work waits out of sight")
}

// ledgerFailed holds new work back after err, unless the store rolled the
// call back because of a concurrent transaction (ledger.ErrContention):
// the store answered, and the next call may well pass.
func (w *Worker) ledgerFailed(err error, why string) {
	if errors.Is(err, ledger.ErrContention) {
		return
	}
	g := &w.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if isFatal(err) && g.fatal == nil {
		g.fatal = err
	}
	if !g.down {
		g.down, g.since, g.open = true, w.now(), make(chan struct{})
		w.log.Error(why, "error", err)
	}
}

// claimsRecorded records that the ledger took a batch's claims or a
// completion (or answered a ping).
func (w *Worker) claimsRecorded() {
	g := &w.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	now := w.now()
	if g.down {
		w.log.Info("the ledger records claims again: new work starts", "down_for", now.Sub(g.since).Round(time.Millisecond))
		close(g.open)
	}
	g.down, g.lastOK = false, now
}

// watchLedger pings a ledger that is a Pinger whenever ledgerPingEvery
// has passed without a sign of it (see Pinger), until ctx ends: a ping
// that fails holds new work back as a failed claim does, one that succeeds
// lets it start again. It returns a func that stops the pings and waits for
// one under way. Without a Pinger it does nothing.
func (w *Worker) watchLedger(ctx context.Context) (stop func()) {
	pinger, ok := w.ledger.(Pinger)
	if !ok {
		return func() {}
	}
	return inBackground(ctx, func(ctx context.Context) {
		tick := time.NewTicker(ledgerPingEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.gate.mu.Lock()
			quiet := w.now().Sub(w.gate.lastOK) >= ledgerPingEvery
			w.gate.mu.Unlock()
			if !quiet {
				continue
			}
			pctx, done := context.WithTimeout(ctx, gateMaxWait)
			err := pinger.Ping(pctx)
			done()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				w.claimsRecorded()
			default:
				w.ledgerFailed(err, "the ledger does not answer: no new work starts until it does; running work goes on")
			}
		}
	})
}

// inBackground runs f in a goroutine of its own with a context that ends
// when ctx does or when the returned func is called: that func ends it and
// waits for f to return.
func inBackground(ctx context.Context, f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var done sync.WaitGroup
	done.Go(func() { f(ctx) })
	return func() {
		cancel()
		done.Wait()
	}
}

// ledgerState returns whether the ledger is down, and a fatal error.
func (w *Worker) ledgerState() (down bool, fatal error) {
	g := &w.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down, g.fatal
}

// awaitLedger waits, in poller i, while the ledger is down. With a Pinger
// it pings the ledger until it answers; without one it waits a back-off and
// returns probe: the next receive takes one message, whose claim tells
// whether the ledger works again. It returns a fatal error, or ctx's end.
func (w *Worker) awaitLedger(ctx context.Context, i int) (probe bool, err error) {
	pinger, canPing := w.ledger.(Pinger)
	for attempt := 1; ; attempt++ {
		down, fatal := w.ledgerState()
		switch {
		case fatal != nil:
			return false, fatal
		case !down:
			return false, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		}
		w.turn(i, true) // waiting on purpose: alive, not stuck
		sleep(ctx, backoff(attempt, gateMinWait, gateMaxWait))
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if !canPing {
			return true, nil
		}
		pctx, cancel := context.WithTimeout(ctx, gateMaxWait)
		err := pinger.Ping(pctx)
		cancel()
		if err == nil {
			w.claimsRecorded()
		} else if isFatal(err) {
			w.claimFailed(err)
		}
	}
}
