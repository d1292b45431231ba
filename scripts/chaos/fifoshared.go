package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The FIFO campaign's part on a shared ledger: the messages of a group that
// wait in a worker's hands behind a running one, while their ledger is
// slow or away and while another worker may take their claims over. On the
// embedded ledger the worker is alone and the ledger is in its process:
// nothing but a stop of the whole process (SIGSTOP) makes the ledger
// slow, nothing makes it away, and no other worker can take a claim over.
// So this part runs Workers chaos workers at once on a FIFO queue of its
// own, one PostgreSQL table between them, through the campaign's TCP
// proxy, which stalls (the ledger slow: every call hangs, for longer than
// a beat, or than the leases), refuses and cuts the connections, or stops
// the database (the ledger away); and it stops one worker at a time
// (SIGSTOP) for longer than the leases while the others go on: the
// messages it held come back to the others, whose claims take its over,
// and when it goes on, what waited in its hands must not start. The
// workload is the FIFO campaign's, with its bursts; there are no replay
// rounds (every worker would have to stop for one), so what fails for
// good stays in the dead-letter queue. The audit is the FIFO campaign's.

// fifoSharedCampaign makes the FIFO campaign's part on a shared ledger:
// its own work directory (fifo-shared/ in c's), database, proxy, queues,
// downstream and worker runs; the same binaries, log and SQS server.
func (c *campaign) fifoSharedCampaign() (*campaign, error) {
	sc := c.cfg.FIFO.Shared
	cfg := c.cfg
	cfg.Ops, cfg.Duration = sc.Ops, sc.Duration
	cfg.Kills, cfg.Terms, cfg.Pauses, cfg.Concurrency = sc.Kills, sc.Terms, sc.Pauses, sc.Concurrency
	// The machinery of the shared-ledger campaign (its outages, its deal of
	// runs to the workers, its findings) reads this.
	cfg.Shared = sc
	f := &campaign{
		cfg:       cfg,
		name:      "fifo-shared",
		log:       c.log,
		rng:       rand.New(rand.NewPCG(c.cfg.Seed, 0xf1f05)),
		inHand:    map[string]int{},
		started:   c.started,
		dir:       filepath.Join(c.dir, "fifo-shared"),
		admin:     c.admin,
		workerBin: c.workerBin,
		downBin:   c.downBin,
		cliBin:    c.cliBin,
		// Its pauses find messages waiting, and come between the
		// database's outages.
		waitingPauses: true,
		faults:        make(chan struct{}, 1),
	}
	f.runsDir = filepath.Join(f.dir, "runs")
	f.crashLog = filepath.Join(f.dir, "crash.log")
	if err := os.MkdirAll(f.runsDir, 0o755); err != nil {
		return nil, err
	}
	return f, nil
}

// runFIFOShared runs the FIFO campaign's part on a shared ledger (see
// above) and audits it as the FIFO campaign.
func (c *campaign) runFIFOShared(ctx context.Context) (*fifoReport, error) {
	sc := c.cfg.Shared
	c.logf("FIFO campaign on a shared ledger: %d workers on one FIFO queue and one PostgreSQL table, %d operations in %d groups (%d bursts) over %v, %d kills, %d drains, %d stops of a worker (SIGSTOP %v); the database stalled %d times, stopped %d times, refused %d times, cut %d times",
		sc.Workers, sc.Ops, sc.Groups, sc.Bursts, sc.Duration, sc.Kills, sc.Terms, sc.Pauses, pauseFor, sc.Stalls, sc.Stops, sc.Refusals, sc.Cuts)
	if err := c.startDatabase(ctx, 8); err != nil {
		return nil, err
	}
	if err := c.createFIFOQueues(ctx); err != nil {
		return nil, err
	}
	var err error
	c.downstream, c.downURL, err = startDownstream(ctx, c.downBin, c.dir, "")
	if err != nil {
		return nil, err
	}
	wl := newFIFOWorkload(rand.New(rand.NewPCG(c.cfg.Seed, 9)), sc.Ops, sc.Groups, sc.Bursts)
	snd := newFIFOSender(c.cfg.Endpoint, c.queue, c.cfg.Seed+17, c.cfg.SendLost)
	c.logf("workload: %d operations, %d messages planned (%d sent after their key completed), %d bursts", len(wl.ops), len(wl.main)+len(wl.late), len(wl.late), wl.bursts)

	c.outageWork = func(ctx context.Context) error { return c.sendFIFOExtra(ctx, snd) }
	start := time.Now()
	send := func(ctx context.Context) error { return c.sendFIFO(ctx, snd, wl) }
	if err := c.driveWorkers(ctx, c.fifoSharedPlan(), send, nil); err != nil {
		return nil, err
	}
	c.logf("sending done: %d messages sent", len(snd.sent))
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
	return c.auditFIFO(ctx, wl, snd, nil, elapsed, quiet)
}

// sendFIFOExtra sends, after an outage, one operation of the outage's own
// in a group of its own (so that nothing holds it back): a normal one,
// which the audit counts with the workload's (c.fifoExtra).
func (c *campaign) sendFIFOExtra(ctx context.Context, snd *fifoSender) error {
	c.mu.Lock()
	k := len(c.fifoExtra)
	o := &fifoOp{id: fmt.Sprintf("o-%d", k), class: fifoNormal, group: fmt.Sprintf("outage%d", k)}
	o.bodies = []string{fmt.Sprintf(`{"id":%q,"amount":%d}`, o.id, k)}
	c.fifoExtra = append(c.fifoExtra, o)
	c.mu.Unlock()
	return snd.send(ctx, &fifoSend{tag: "o-s-" + strconv.Itoa(k), op: o})
}

// fifoSharedPlan draws each worker's runs: kills in the two windows around
// a completion and at random, and drains, dealt out to the workers; then
// Pauses of the runs, at random, stop for pauseFor a second or more after
// they start.
func (c *campaign) fifoSharedPlan() [][]step {
	sc := c.cfg.Shared
	ends := killsAndDrains(sc.Kills, sc.Terms)
	slots := c.deal(ends)
	var can []*step
	for _, steps := range slots {
		for i := range steps {
			can = append(can, &steps[i])
		}
	}
	c.rng.Shuffle(len(can), func(i, j int) { can[i], can[j] = can[j], can[i] })
	for _, s := range can[:min(sc.Pauses, len(can))] {
		s.pauseAt = time.Second + time.Duration(c.rng.Int64N(int64(max(s.dur/2, time.Second))))
	}
	return slots
}
