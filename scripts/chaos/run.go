package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// run runs the campaign and audits it.
func (e *env) run(ctx context.Context) (*section, error) {
	s := e.c.System
	e.logf("%s", e.c.Title)
	var err error
	if s.Postgres {
		err = e.startDatabase(ctx)
	}
	if err = errors.Join(err, e.createQueues(ctx)); err != nil {
		return nil, err
	}
	if e.world, err = startWorld(e); err != nil {
		return nil, err
	}
	if err := e.writeCLIConfig(); err != nil {
		return nil, err
	}
	e.wl = e.c.Load(rand.New(rand.NewPCG(e.cfg.Seed, seedOf(e.name, 1))))
	e.loadOps, e.planned = len(e.wl.ops), len(e.wl.late)
	e.snd = newSender(e.cfg.Endpoint, e.queue, s.FIFO, e.cfg.Seed+seedOf(e.name, 2), s.SendLost)
	for _, u := range e.wl.main {
		e.planned += len(u.msgs)
	}
	e.logf("workload: %d operations, %d messages planned, %d units in the main sending, %d late", len(e.wl.ops), e.planned, len(e.wl.main), len(e.wl.late))
	p := e.newPlan()
	for _, f := range e.c.Faults {
		f(p)
	}
	start := time.Now()
	err = e.execute(ctx, p)
	e.world.close()
	e.elapsed = time.Since(start)
	if err != nil {
		return nil, err
	}
	e.logf("auditing")
	h, err := e.history(ctx)
	if err != nil {
		return nil, err
	}
	return e.audit(h), nil
}

// newPlan deals the runs' ends out to the workers in a random order, each
// run a random share of its worker's Runs.Duration.
func (e *env) newPlan() *plan {
	r, w := e.c.Runs, e.c.System.Workers
	var ends []string
	for _, k := range endKinds {
		for range r.Ends[k] {
			ends = append(ends, k)
		}
	}
	e.rng.Shuffle(len(ends), func(i, j int) { ends[i], ends[j] = ends[j], ends[i] })
	p := &plan{e: e, slots: make([][]*step, w)}
	for i, end := range ends {
		p.slots[i%w] = append(p.slots[i%w], &step{end: end, double: end == endTerm && e.rng.IntN(2) == 0, start: startRun})
	}
	for _, steps := range p.slots {
		shares, sum := make([]float64, len(steps)), 0.0
		for i := range steps {
			shares[i] = 0.5 + e.rng.Float64()
			sum += shares[i]
		}
		for i, s := range steps {
			s.dur = time.Duration(float64(r.Duration) * shares[i] / sum)
		}
	}
	return p
}

func startRun(ctx context.Context, e *env) (*proc, error) { return e.start(ctx) }

// do runs actions in order, up to the first error.
func (e *env) do(ctx context.Context, actions ...action) error {
	for _, a := range actions {
		if err := a(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// execute runs the plan: the workers' runs, the sending and the faults,
// then the last runs (killed no more) until the queue is empty.
func (e *env) execute(ctx context.Context, p *plan) error {
	for _, s := range p.slots[0] {
		e.tl.total += s.gap + s.dur + s.extra
	}
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	sendDone := make(chan error, 1)
	go func() { sendDone <- e.send(sendCtx) }()
	var faults sync.WaitGroup
	for _, items := range p.timed {
		faults.Go(func() {
			for _, t := range items {
				if !e.tl.waitUntil(ctx, t.at) {
					return
				}
				if err := t.do(ctx, e); err != nil && ctx.Err() == nil {
					e.note("%v", err)
				}
			}
		})
	}
	e.finals = make([]*proc, len(p.slots))
	errs := make([]error, len(p.slots))
	var wg sync.WaitGroup
	for i, steps := range p.slots {
		wg.Go(func() { errs[i] = e.runSlot(ctx, p, i, steps) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	finalDone := make(chan error, 1)
	go func() { finalDone <- e.do(ctx, p.final...) }()
	select {
	case err := <-sendDone:
		if err != nil {
			return fmt.Errorf("sending: %w", err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	faults.Wait()
	e.logf("sending done: %d messages sent", len(e.snd.sentMsgs()))
	e.quiet = e.waitQuiet(ctx)
	if err := <-finalDone; err != nil && ctx.Err() == nil {
		e.note("%v", err)
	}
	var stop sync.WaitGroup
	for _, p := range e.finals {
		stop.Go(func() { e.stopRun(ctx, p) })
	}
	stop.Wait()
	if !e.quiet && ctx.Err() == nil {
		e.note("the queue did not empty within %v after sending ended", e.c.System.Quiesce)
	}
	return ctx.Err()
}

// runSlot runs worker i's planned runs one after the other, then its last
// run (e.finals). The first worker's runs set the timeline's pace.
func (e *env) runSlot(ctx context.Context, p *plan, i int, steps []*step) error {
	for _, s := range steps {
		if i == 0 && s.gap > 0 {
			e.tl.segment(s.gap) // the sending goes on meanwhile
		}
		if err := errors.Join(e.do(ctx, s.before...), ctx.Err()); err != nil {
			return err
		}
		if i == 0 {
			e.tl.segment(s.dur + s.extra)
		}
		r, err := s.start(ctx, e)
		for _, d := range s.during {
			err = errors.Join(err, d(ctx, e, r))
		}
		if err != nil {
			return err
		}
		e.drive(ctx, r, s)
		if err := e.do(ctx, s.after...); err != nil {
			return err
		}
	}
	if i == 0 {
		e.tl.finish()
		if err := e.do(ctx, p.after...); err != nil {
			return err
		}
	}
	r, err := e.start(ctx)
	e.mu.Lock()
	e.finals[i] = r
	e.mu.Unlock()
	return err
}

// drive lets run p live for step s and ends it the planned way.
func (e *env) drive(ctx context.Context, p *proc, s *step) {
	kill := func(d time.Duration) {
		if !p.wait(ctx, d) {
			e.world.arm(p.id, s.end, false)
			p.kill(endKill)
			p.wait(ctx, 10*time.Second)
		}
	}
	switch arm := s.dur * time.Duration(40+e.intN(40)) / 100; s.end {
	case endWindowA, endWindowB, endInHandler, endInTx:
		// Armed part way through its time, so that work still comes, it
		// dies at its next completion (or served request, or held
		// transaction); if none comes, the campaign kills it.
		if p.wait(ctx, arm) {
			break
		}
		// Not before the run catches the signals, which it does before
		// it opens its ledger: until then, SIGUSR1 would end it.
		waitFor(ctx, 30*time.Second, func() bool { return p.outputHas("ledger opened in") || !p.alive() })
		e.world.arm(p.id, s.end, true)
		if sig := map[string]syscall.Signal{endWindowA: syscall.SIGUSR1, endWindowB: syscall.SIGUSR2, endInTx: syscall.SIGWINCH}[s.end]; sig != 0 {
			_ = p.cmd.Process.Signal(sig)
		}
		kill(s.dur - arm + 10*time.Second)
	case endKill:
		kill(s.dur)
	case endTerm:
		if p.wait(ctx, s.dur) {
			break
		}
		if s.double {
			p.term()
			if !p.wait(ctx, time.Second) {
				e.mu.Lock()
				e.doubleTs++
				e.mu.Unlock()
			}
		}
		e.stopRun(ctx, p) // it checks the end
		e.logf("run %d (planned: drained, with a second SIGTERM: %v): %s after %.1fs", p.id, s.double, e.endOf(p), time.Since(p.started).Seconds())
		return
	}
	e.checkEnd(p)
	e.logf("run %d (planned: %s): %s after %.1fs", p.id, s.end, e.endOf(p), time.Since(p.started).Seconds())
}

// waitQuiet waits until the queue reads empty (visible and in flight)
// four polls in a row, 750 ms apart (counts lag on the local server),
// restarting a last run that died meanwhile.
func (e *env) waitQuiet(ctx context.Context) bool {
	streak, lastLog := 0, time.Now()
	for deadline := time.Now().Add(e.c.System.Quiesce); time.Now().Before(deadline) && ctx.Err() == nil; sleepCtx(ctx, 750*time.Millisecond) {
		if v, f, err := e.queueCounts(ctx, e.queue); err != nil || v+f > 0 {
			if streak = 0; time.Since(lastLog) > 10*time.Second {
				e.logf("waiting for the queue to empty: %d visible, %d in flight (%v)", v, f, err)
				lastLog = time.Now()
			}
		} else if streak++; streak == 4 {
			e.logf("quiet: the queue is empty")
			return true
		}
		for i, p := range e.finals {
			if p.alive() {
				continue
			}
			e.checkEnd(p)
			e.note("the last run %d died while the queue emptied; restarted", p.id)
			q, err := e.start(ctx)
			if err != nil {
				e.note("restart a last run: %v", err)
				return false
			}
			e.mu.Lock()
			e.finals[i] = q
			e.mu.Unlock()
		}
	}
	return false
}

// send sends the workload: the main sending paced by the timeline (unit i
// due once it reached mainShare*i/len), from four goroutines on a standard
// queue and one on a FIFO queue, and meanwhile the late messages, each
// once its operation was applied lateAge ago, a trickling one now and
// then, and all of them once the main sending and the timeline are over.
func (e *env) send(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	main := make(chan error, 1)
	go func() {
		units, workers := make(chan unit), 4
		if e.c.System.FIFO {
			workers = 1
		}
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for u := range units {
					if err := e.snd.send(ctx, u); err != nil {
						errs <- err
						cancel()
						return
					}
				}
			})
		}
		for i := 0; i < len(e.wl.main) && e.tl.waitUntil(ctx, mainShare*float64(i)/float64(len(e.wl.main))); i++ {
			select {
			case units <- e.wl.main[i]:
			case <-ctx.Done():
			}
		}
		close(units)
		wg.Wait()
		close(errs)
		main <- errors.Join(<-errs, ctx.Err())
	}()
	rng := rand.New(rand.NewPCG(e.cfg.Seed, seedOf(e.name, 3)))
	pending := append([]*msg(nil), e.wl.late...)
	var lastPoll time.Time
	for done := false; !done || len(pending) > 0; sleepCtx(ctx, 50*time.Millisecond) {
		select {
		case err := <-main:
			if err != nil {
				return err
			}
			done = true
		default:
		}
		last := done && e.tl.fraction() >= 1
		if ctx.Err() != nil || len(pending) == 0 || (!last && time.Since(lastPoll) < 500*time.Millisecond) {
			continue
		}
		lastPoll = time.Now()
		applied, trickled := e.applied(ctx), false
		var rest []*msg
		for _, m := range pending {
			t, ok := applied[m.op.id]
			if !last && (!m.trickle || trickled || rng.IntN(8) != 0) && (m.trickle || !ok || time.Since(t) < e.wl.lateAge) {
				rest = append(rest, m)
				continue
			}
			trickled = trickled || m.trickle
			if err := e.snd.send(ctx, unit{msgs: []*msg{m}}); err != nil {
				return err
			}
		}
		pending = rest
	}
	return ctx.Err()
}

// applied returns which operations took effect, and when: from the
// downstream, or with transactional handlers from the effects table,
// straight from the database (what it read last while the database is out
// of reach). It is called by the sender alone.
func (e *env) applied(ctx context.Context) map[string]time.Time {
	if e.c.System.Tx == nil {
		return e.world.appliedOps()
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL(e.proxy.targetAddr()))
	if err != nil {
		return e.lastApplied
	}
	defer conn.Close(context.Background())
	out, key, t := map[string]time.Time{}, "", time.Time{}
	rows, err := conn.Query(ctx, `SELECT key, min(inserted_at) FROM `+txEffectsTable+` GROUP BY key`)
	if err == nil {
		if _, err = pgx.ForEachRow(rows, []any{&key, &t}, func() error { out[key] = t; return nil }); err == nil {
			e.lastApplied = out
		}
	}
	return e.lastApplied
}
