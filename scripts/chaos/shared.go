package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// SharedConfig sizes the shared-ledger campaign, which runs beside the
// standard one: several chaos workers at once on one standard queue, one
// ledger table in PostgreSQL between them.
type SharedConfig struct {
	Workers     int           // chaos workers at once
	Ops         int           // operations; 0: no shared-ledger campaign
	Deliveries  int           // deliveries planned
	Duration    time.Duration // the planned length of its worker runs, while its workload is sent
	Kills       int           // SIGKILLs over all workers: at random, in the handler, in the windows around a completion
	Terms       int           // SIGTERM drains over all workers
	Stops       int           // hard stops of the database (pg_ctl stop -m immediate)
	StopFor     time.Duration // how long it stays stopped: longer than a lease
	Refusals    int           // times the proxy refuses new connections and cuts the open ones
	RefuseFor   time.Duration // how long it refuses them
	Cuts        int           // times the proxy cuts the open connections
	Stalls      int           // times the proxy stalls: carries nothing, the connections open
	StallFor    time.Duration // how long the longest stalls last; every other one lasts a quarter of it
	Pauses      int           // SIGSTOPs of a worker run, longer than the leases, while the others go on
	Concurrency int           // handler concurrency of each worker
	// Groups and Bursts: the message groups and the bursts of the FIFO
	// campaign's part on a shared ledger (FIFOConfig.Shared).
	Groups, Bursts int
}

// sharedTable is the ledger's table in the campaign's database.
const sharedTable = "chaos_operations"

// sharedLedgerTimeout bounds each attempt of a worker's ledger call: the
// workers find out within it that the database is gone.
const sharedLedgerTimeout = 3 * time.Second

// resumeWithin is how long after the database answers again every live
// worker must have received again.
const resumeWithin = 30 * time.Second

// Kinds of outage of the database.
const (
	outageStop   = "stopped hard (pg_ctl stop -m immediate), then restarted"
	outageRefuse = "connections refused by the proxy, the open ones cut"
	outageCut    = "open connections cut by the proxy"
	outageStall  = "stalled by the proxy (nothing carried, the connections open)"
)

// outage is one time the campaign took the database from the workers.
type outage struct {
	kind     string
	from, to time.Time // from just before the fault until the database answered again
	cut      int       // connections the proxy cut
	// resumed: how long after to each worker alive then received again
	// (a worker killed before it did is left out); stuck: the runs that
	// did not within resumeWithin.
	resumed map[int]time.Duration
	stuck   []int
	// The workers' waits for the ledger that it caused: those that ended
	// with the ledger answering again (their length, and how long after
	// to they ended), and how many ended with their run.
	waits    []time.Duration
	after    []time.Duration
	cutShort int
}

// waitSeconds returns the waits of the workers for the database in
// seconds, and their sum.
func (f *sharedFindings) waitSeconds() (each []float64, total float64) {
	each = []float64{}
	for _, w := range f.Waits {
		each = append(each, w.Seconds())
		total += w.Seconds()
	}
	return each, total
}

// sharedFindings is what the shared-ledger campaign found beyond what the
// standard audit finds.
type sharedFindings struct {
	Workers   int
	Outages   []*outage
	Waits     []time.Duration // every wait of a worker for the ledger that ended with the ledger answering again
	CutShort  int             // waits that ended with their run
	Takeovers int64
	Unavail   int64 // ledger calls that found the database unavailable
}

// sharedCampaign makes the shared-ledger campaign that runs beside c: its
// own work directory (shared/ in c's), database, queue, downstream and
// worker runs; the same binaries, log and SQS server.
func (c *campaign) sharedCampaign() (*campaign, error) {
	sc := c.cfg.Shared
	cfg := c.cfg
	cfg.Ops, cfg.Deliveries, cfg.Duration = sc.Ops, sc.Deliveries, sc.Duration
	cfg.Kills, cfg.Terms, cfg.Pauses, cfg.Concurrency = sc.Kills, sc.Terms, 0, sc.Concurrency
	s := &campaign{
		cfg:       cfg,
		name:      "shared",
		log:       c.log,
		rng:       rand.New(rand.NewPCG(c.cfg.Seed, 0x5a4ed)),
		inHand:    map[string]int{},
		started:   c.started,
		dir:       filepath.Join(c.dir, "shared"),
		admin:     c.admin,
		workerBin: c.workerBin,
		downBin:   c.downBin,
		cliBin:    c.cliBin,
	}
	s.runsDir = filepath.Join(s.dir, "runs")
	s.crashLog = filepath.Join(s.dir, "crash.log")
	if err := os.MkdirAll(s.runsDir, 0o755); err != nil {
		return nil, err
	}
	return s, nil
}

// runShared runs the shared-ledger campaign: Workers chaos workers at once
// on one queue with a dead-letter queue, sharing one PostgreSQL table
// through a TCP proxy that the campaign owns; the standard campaign's kind
// of workload; each worker killed at random moments, in the handler and in
// the windows around a completion, or drained, and restarted at once;
// meanwhile the database stopped hard and restarted, its connections
// refused and cut. Then the standard audit, with three more named windows
// for the extra executions: a completion (or failure) that could not be
// recorded because the database was unreachable, and a lease that lapsed
// while it was.
func (c *campaign) runShared(ctx context.Context) (*Report, error) {
	sc := c.cfg.Shared
	c.logf("shared-ledger campaign: %d workers on one queue and one PostgreSQL table, %d operations, about %d deliveries over %v, %d kills, %d drains, the database stopped %d times, refused %d times, cut %d times",
		sc.Workers, sc.Ops, sc.Deliveries, sc.Duration, sc.Kills, sc.Terms, sc.Stops, sc.Refusals, sc.Cuts)

	if err := c.startDatabase(ctx, 8); err != nil {
		return nil, err
	}
	if err := c.createQueues(ctx); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.control = "http://" + ln.Addr().String()
	ctl := &http.Server{Handler: http.HandlerFunc(c.serveKill), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ctl.Serve(ln) }()
	defer ctl.Close()
	c.downstream, c.downURL, err = startDownstream(ctx, c.downBin, c.dir, c.control)
	if err != nil {
		return nil, err
	}

	wl := newWorkload(rand.New(rand.NewPCG(c.cfg.Seed, 5)), c.cfg.Ops, c.cfg.Deliveries)
	snd := newSender(c.cfg.Endpoint, c.queue, c.cfg.Seed+11, c.cfg.SendLost)
	c.logf("workload: %d operations, %d deliveries planned (%d keyless), %d units in the main phase", len(wl.ops), wl.planned(), len(wl.keyless), len(wl.main))

	start := time.Now()
	send := func(ctx context.Context) error { return c.send(ctx, snd, wl) }
	c.wl, c.snd = wl, snd
	c.outageWork = func(ctx context.Context) error {
		_, err := c.phaseWork(ctx, "outage", 3)
		return err
	}
	if err := c.driveWorkers(ctx, c.sharedPlan(), send, nil); err != nil {
		return nil, err
	}
	c.logf("sending done: %d deliveries acknowledged to the sender, %d accepted by the server", snd.sent.Load(), snd.accepted.Load())

	quiet, err := c.quietThenStop(ctx)
	if err != nil {
		return nil, err
	}
	c.downstream.term()
	if !c.downstream.wait(ctx, 15*time.Second) {
		c.note("the downstream did not stop on SIGTERM")
		c.downstream.kill(endKill, "")
		c.downstream.wait(ctx, 5*time.Second)
	}
	elapsed := time.Since(start)
	c.logf("auditing")
	return c.audit(ctx, wl, snd, elapsed, quiet)
}

// driveWorkers runs the main phase of a campaign of several workers at
// once: the workers' runs (slots, paced by the first worker's), the
// sending of the workload (send, which follows c.tl) and the database's
// outages together, and also, when not nil, another fault of the database
// alongside the outages. It returns once the runs ended, sending is done
// and the outages (and also) have finished.
func (c *campaign) driveWorkers(ctx context.Context, slots [][]step, send func(context.Context) error, also func(context.Context)) error {
	var planned time.Duration
	for _, s := range slots[0] {
		planned += s.dur
	}
	c.tl = &timeline{total: planned} // the first worker's runs set the pace
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	sendDone := make(chan error, 1)
	go func() { sendDone <- send(sendCtx) }()

	outCtx, stopOutages := context.WithCancel(ctx)
	defer stopOutages()
	outDone := make(chan error, 1)
	go func() { outDone <- c.outages(outCtx) }()
	alsoDone := make(chan struct{})
	go func() {
		defer close(alsoDone)
		if also != nil {
			also(outCtx)
		}
	}()

	if err := c.runSlots(ctx, slots); err != nil {
		return err
	}
	var sendErr error
	select {
	case sendErr = <-sendDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	if sendErr != nil {
		return fmt.Errorf("sending: %w", sendErr)
	}
	if err := <-outDone; err != nil {
		return err
	}
	<-alsoDone
	return nil
}

// startDatabase starts the campaign's PostgreSQL cluster and the proxy in
// front of it, creates the ledger's table, and sets the connection string
// of the workers: through the proxy, with a pool of poolConns connections.
func (c *campaign) startDatabase(ctx context.Context, poolConns int) error {
	pg, err := startPGCluster(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.pg = pg
	c.mu.Unlock()
	proxy, err := newTCPProxy(pg.addr())
	if err != nil {
		return err
	}
	c.proxy = proxy
	if err := postgres.Init(ctx, postgres.Options{URL: pgURL(pg.addr()), Table: sharedTable}); err != nil {
		return fmt.Errorf("init the shared ledger: %w", err)
	}
	c.pgWorkerURL = pgURL(proxy.addr()) + "&pool_max_conns=" + strconv.Itoa(poolConns)
	c.logf("database: PostgreSQL (%s) at %s, the workers through the proxy at %s, table %s", filepath.Base(filepath.Dir(pg.bin)), pg.addr(), proxy.addr(), sharedTable)
	return nil
}

// runSlots runs the workers of a campaign of several at once: each slot
// runs its planned runs one after the other, then a last run that is
// killed no more (c.finals). The first slot's runs set the timeline's pace.
func (c *campaign) runSlots(ctx context.Context, slots [][]step) error {
	c.finals = make([]*proc, len(slots))
	var wg sync.WaitGroup
	errs := make([]error, len(slots))
	for i, steps := range slots {
		wg.Go(func() {
			for _, s := range steps {
				if ctx.Err() != nil {
					errs[i] = ctx.Err()
					return
				}
				if i == 0 {
					c.tl.segment(s.dur)
				}
				p, err := c.startSharedRun(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				c.drive(ctx, p, s)
			}
			if i == 0 {
				c.tl.finish()
			}
			p, err := c.startSharedRun(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			c.mu.Lock()
			c.finals[i] = p
			c.mu.Unlock()
		})
	}
	wg.Wait()
	c.tl.finish()
	return errors.Join(errs...)
}

// quietThenStop waits until the queue is empty, then drains the last run
// of every slot, and reports whether the queue emptied (a note when not).
func (c *campaign) quietThenStop(ctx context.Context) (bool, error) {
	quiet, qerr := c.waitQuiet(ctx)
	c.mu.Lock()
	finals := append([]*proc(nil), c.finals...)
	c.mu.Unlock()
	var stop sync.WaitGroup
	for _, p := range finals {
		stop.Go(func() { c.stopRun(ctx, p) })
	}
	stop.Wait()
	if qerr != nil {
		return false, qerr
	}
	if !quiet {
		c.note("the queue did not empty within %v after sending ended", c.cfg.Quiesce)
	}
	return quiet, nil
}

// startSharedRun starts a worker run on the shared ledger and waits until
// it opened the ledger. A worker cannot start while the database is out of
// reach (postgres.Open fails and it exits 3, as sqsonce run would): such a
// start is counted as refused and made again a second later, as a service
// manager would, until the database answers (for 2 minutes at most).
func (c *campaign) startSharedRun(ctx context.Context) (*proc, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := c.startRun("", runOpts{})
		if err != nil {
			return nil, err
		}
		waitFor(ctx, 45*time.Second, func() bool { return p.outputHas("ledger opened in") || !p.alive() })
		if p.alive() || ctx.Err() != nil {
			return p, ctx.Err()
		}
		killed, code := p.exit()
		if killed || code != 3 || !p.outputHas(ledger.ErrUnavailable.Error()) {
			return p, nil // drive and checkEnd tell
		}
		p.mu.Lock()
		p.signal = endRefused
		p.mu.Unlock()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no worker could open the shared ledger for 2 minutes: %s", p.tail(2))
		}
		c.logf("run %d could not open the ledger, the database out of reach: starting another in 1s", p.id)
		sleepCtx(ctx, time.Second)
	}
}

// sharedPlan draws each worker's runs: the kills of four kinds and the
// drains dealt out in turn after a shuffle (deal).
func (c *campaign) sharedPlan() [][]step {
	sc := c.cfg.Shared
	var ends []string
	k := sc.Kills
	nA, nB, nIn := (k+3)/4, (k+2)/4, (k+1)/4
	for i := range k {
		switch {
		case i < nA:
			ends = append(ends, endWindowA)
		case i < nA+nB:
			ends = append(ends, endWindowB)
		case i < nA+nB+nIn:
			ends = append(ends, endInHandler)
		default:
			ends = append(ends, endKill)
		}
	}
	for range sc.Terms {
		ends = append(ends, endTerm)
	}
	return c.deal(ends)
}

// deal shuffles the planned ends of runs and deals them out in turn to
// the workers of c.cfg.Shared, each run a random share of its Duration.
func (c *campaign) deal(ends []string) [][]step {
	sc := c.cfg.Shared
	c.rng.Shuffle(len(ends), func(i, j int) { ends[i], ends[j] = ends[j], ends[i] })
	slots := make([][]step, sc.Workers)
	for i, e := range ends {
		slots[i%sc.Workers] = append(slots[i%sc.Workers], step{end: e})
	}
	for _, steps := range slots {
		per := sc.Duration / time.Duration(max(len(steps), 1))
		for i := range steps {
			steps[i].dur = per/2 + time.Duration(c.rng.Int64N(int64(per)))
			steps[i].double = steps[i].end == endTerm && c.rng.IntN(2) == 0
		}
	}
	return slots
}

// outages takes the database from the workers at planned points of the
// timeline, one outage at a time, each followed by a wait until every
// live worker receives again.
func (c *campaign) outages(ctx context.Context) error {
	sc := c.cfg.Shared
	var kinds []string
	for range sc.Stops {
		kinds = append(kinds, outageStop)
	}
	for range sc.Refusals {
		kinds = append(kinds, outageRefuse)
	}
	for range sc.Cuts {
		kinds = append(kinds, outageCut)
	}
	for range sc.Stalls {
		kinds = append(kinds, outageStall)
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 6))
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for i, kind := range kinds {
		at := 0.1 + 0.75*(float64(i)+0.5)/float64(len(kinds))
		for c.tl.fraction() < at && ctx.Err() == nil {
			sleepCtx(ctx, 100*time.Millisecond)
		}
		if ctx.Err() != nil {
			return nil
		}
		o, err := c.outage(ctx, kind)
		if err != nil || o == nil {
			return err
		}
		c.mu.Lock()
		c.outs = append(c.outs, o)
		c.mu.Unlock()
	}
	return nil
}

// outage makes one outage of the given kind and waits until every worker
// alive when the database answers again receives again. It returns nil
// when ctx ended before it began.
func (c *campaign) outage(ctx context.Context, kind string) (*outage, error) {
	if c.faults != nil {
		// One fault at a time: a worker's pause first ends.
		select {
		case c.faults <- struct{}{}:
			defer func() { <-c.faults }()
		case <-ctx.Done():
			return nil, nil
		}
	}
	aim := ""
	if c.waitingPauses {
		// A FIFO campaign's outage finds messages waiting.
		c.mu.Lock()
		var alive []*proc
		for _, p := range c.procs {
			if p.alive() {
				alive = append(alive, p)
			}
		}
		c.mu.Unlock()
		if c.aimAtWaiting(ctx, alive) {
			aim = ", while a worker kept messages waiting behind a running one of their group"
		}
	}
	c.logf("database: %s%s", kind, aim)
	o := &outage{kind: kind, from: time.Now(), resumed: map[int]time.Duration{}}
	switch kind {
	case outageStop:
		if err := c.pg.stopHard(ctx); err != nil {
			return nil, err
		}
		sleepCtx(ctx, c.cfg.Shared.StopFor)
		if err := c.pg.start(ctx); err != nil {
			return nil, err
		}
		c.proxy.setTarget(c.pg.addr())
	case outageRefuse:
		c.proxy.setRefuse(true)
		o.cut = c.proxy.cutAll()
		sleepCtx(ctx, c.cfg.Shared.RefuseFor)
		c.proxy.setRefuse(false)
	case outageCut:
		o.cut = c.proxy.cutAll()
	case outageStall:
		// The first, third, ... for StallFor, longer than the leases; the
		// others for a quarter of that, longer than a beat.
		d := c.cfg.Shared.StallFor
		c.mu.Lock()
		for _, prev := range c.outs {
			if prev.kind == outageStall {
				d = c.cfg.Shared.StallFor + c.cfg.Shared.StallFor/4 - d
			}
		}
		c.mu.Unlock()
		c.proxy.setStall(true)
		sleepCtx(ctx, d)
		c.proxy.setStall(false)
	}
	if err := pgPing(ctx, pgURL(c.proxy.addr()), 30*time.Second); err != nil && ctx.Err() == nil {
		c.note("the database did not answer through the proxy after an outage (%s): %v", kind, err)
	}
	o.to = time.Now()
	// Every worker alive now must receive again, by itself (those that
	// started during the outage could not open the ledger, and were
	// started again). The outage brings the work it watches: while a
	// worker has not received again, a little more is sent every other
	// second, whatever the workload has left.
	alive := map[int]*proc{}
	received := map[int]int64{}
	c.mu.Lock()
	for _, p := range c.procs {
		if p.alive() {
			alive[p.id] = p
		}
	}
	c.mu.Unlock()
	for id := range alive {
		received[id] = c.counts(id).Stats.Received
	}
	var sent time.Time
	waitFor(ctx, resumeWithin, func() bool {
		defer func() {
			if c.outageWork != nil && time.Since(sent) > 2*time.Second && len(o.resumed) < len(alive) {
				sent = time.Now()
				if err := c.outageWork(ctx); err != nil && ctx.Err() == nil {
					c.note("after an outage (%s): send work: %v", kind, err)
				}
			}
		}()
		waiting := false
		for id, p := range alive {
			if _, ok := o.resumed[id]; ok {
				continue
			}
			// A run killed meanwhile may have received before it died:
			// its counters outlive it.
			n := c.counts(id)
			if !n.Down && n.Stats.Received > received[id] {
				o.resumed[id] = time.Since(o.to)
				continue
			}
			waiting = waiting || p.alive()
		}
		return !waiting
	})
	for id, p := range alive {
		if _, ok := o.resumed[id]; !ok && p.alive() {
			o.stuck = append(o.stuck, id)
		}
	}
	sort.Ints(o.stuck)
	var res []string
	for id, d := range o.resumed {
		res = append(res, fmt.Sprintf("run %d %.1fs", id, d.Seconds()))
	}
	sort.Strings(res)
	stuck := ""
	if len(o.stuck) > 0 {
		stuck = fmt.Sprintf("; NOT receiving again within %v: runs %v", resumeWithin, o.stuck)
	}
	c.logf("database out of reach for %.1fs (%d connections cut); receiving again after: %s%s", o.to.Sub(o.from).Seconds(), o.cut, strings.Join(res, ", "), stuck)
	return o, nil
}

// sharedWindows returns the times when the database was out of the
// workers' reach, each widened by margin at its end: a call that began
// before an outage ended may still fail for up to a ledger timeout and a
// retry afterwards.
func (c *campaign) sharedWindows() []window {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []window
	for _, o := range c.outs {
		out = append(out, window{from: o.from, to: o.to.Add(2*sharedLedgerTimeout + time.Second)})
	}
	return out
}

// window is a span of time.
type window struct{ from, to time.Time }

// sharedFindings gathers the shared-ledger campaign's own figures: the
// outages, the workers' waits for the ledger (from their event logs), the
// takeovers and the ledger calls that found the database unavailable.
func (c *campaign) sharedFindings(rl *runLogs) (*sharedFindings, error) {
	f := &sharedFindings{Workers: c.cfg.Shared.Workers, Takeovers: rl.stats.Takeovers}
	c.mu.Lock()
	f.Outages = append(f.Outages, c.outs...)
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		f.Unavail += c.counts(p.id).LedgerErrors
		err := event.ReadLines(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.events", p.id)), func(e event.WorkerEvent) {
			if e.Ev != event.EvWait {
				return
			}
			d := time.Duration(e.T - e.Since)
			if e.Err == "" {
				f.Waits = append(f.Waits, d)
			} else {
				f.CutShort++
			}
			// A wait belongs to the last outage that began before it
			// (calls fail up to a ledger timeout after the fault), if it
			// began before that outage ended, give or take a retry.
			since := time.Unix(0, e.Since)
			var of *outage
			for _, o := range f.Outages {
				if !o.from.After(since.Add(time.Second)) && since.Before(o.to.Add(2*sharedLedgerTimeout)) && (of == nil || o.from.After(of.from)) {
					of = o
				}
			}
			switch {
			case of == nil:
			case e.Err == "":
				of.waits = append(of.waits, d)
				of.after = append(of.after, max(time.Unix(0, e.T).Sub(of.to), 0))
			default:
				of.cutShort++
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// phases judges each kind of outage: it happened as planned; every wait of
// a worker for the ledger that it caused ended by itself (the worker
// resumed) within resumeWithin of the database answering again, unless its
// run ended first; and every worker alive when the database answered again
// received again within resumeWithin, unless it was killed first.
func (f *sharedFindings) phases(cfg SharedConfig) []phaseResult {
	var out []phaseResult
	for _, k := range []struct {
		kind string
		want int
	}{{outageStop, cfg.Stops}, {outageRefuse, cfg.Refusals}, {outageCut, cfg.Cuts}, {outageStall, cfg.Stalls}} {
		if k.want == 0 {
			continue
		}
		r := phaseResult{name: "database " + k.kind, ok: true}
		n, cut, cutShort := 0, 0, 0
		var downs, resumed, waits, after []float64
		var stuck []string
		late := 0
		for _, o := range f.Outages {
			if o.kind != k.kind {
				continue
			}
			n++
			cut += o.cut
			downs = append(downs, o.to.Sub(o.from).Seconds())
			for _, d := range o.resumed {
				resumed = append(resumed, d.Seconds())
			}
			for i, d := range o.waits {
				waits = append(waits, d.Seconds())
				after = append(after, o.after[i].Seconds())
				if o.after[i] > resumeWithin {
					late++
				}
			}
			cutShort += o.cutShort
			for _, id := range o.stuck {
				stuck = append(stuck, fmt.Sprint(id))
			}
		}
		r.detail = fmt.Sprintf("%d times, out of reach %s s, %d connections cut; the workers stopped taking new work %d times and resumed by themselves %s s after it answered again (waits of %s s), %d more waits ended with their run; %d workers alive when it answered again received again within %s s",
			n, spread(downs), cut, len(waits), spread(after), spread(waits), cutShort, len(resumed), spread(resumed))
		switch {
		case n < k.want:
			r.ok = false
			r.detail += fmt.Sprintf("; only %d of %d were made", n, k.want)
		case late > 0:
			r.ok = false
			r.detail += fmt.Sprintf("; %d waits ended more than %v after it answered again", late, resumeWithin)
		case len(stuck) > 0:
			r.ok = false
			r.detail += fmt.Sprintf("; runs %s did not receive again within %v", strings.Join(stuck, ", "), resumeWithin)
		}
		out = append(out, r)
	}
	return out
}

// spread writes the least and the greatest of vs, "-" when there are none.
func spread(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	if fmt.Sprintf("%.1f", lo) == fmt.Sprintf("%.1f", hi) {
		return fmt.Sprintf("%.1f", lo)
	}
	return fmt.Sprintf("%.1f-%.1f", lo, hi)
}
