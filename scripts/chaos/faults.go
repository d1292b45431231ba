package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// The faults any campaign can use. Each places itself in the plan; the
// ends of runs (kills of every kind, drains) are the plan's own (Runs).

// extraOps sends n normal operations of a fault's own (ids "what-K-I",
// each in a group of its own on a FIFO queue), so that the fault's verdict
// depends neither on what the workload has left nor on the machine's
// speed. They join the workload: the audit counts them with the rest. A
// send that fails is a finding.
func (e *env) extraOps(ctx context.Context, what string, n int) []*op {
	e.mu.Lock()
	e.extraN++
	k := e.extraN
	e.mu.Unlock()
	var ops []*op
	var u unit
	for i := range n {
		id := fmt.Sprintf("%s-%d-%d", what, k, i)
		o := &op{id: id, class: normal, bodies: []string{normalBody(id, e.intN(100000))}}
		if e.c.System.FIFO {
			o.group = id
		}
		ops = append(ops, e.wl.add(o))
		u.msgs = append(u.msgs, e.wl.newMsg(o, 0))
	}
	if err := e.snd.send(ctx, u); err != nil && ctx.Err() == nil {
		e.note("%s: send its operations: %v", what, err)
	}
	return ops
}

// Pauses stops n runs (SIGSTOP), each a second or more after it starts,
// for pauseFor (longer than its leases), one at a time, with no outage of
// the database meanwhile: to the other workers it is a worker that died,
// and when it goes on, what it held is no longer its own. With aimed, a
// pause first waits (for up to aimFor) until its run keeps messages
// waiting behind a running one of their group.
func Pauses(n int, aimed bool) Fault {
	return func(p *plan) {
		steps := p.steps()
		for _, i := range p.e.rng.Perm(len(steps))[:min(n, len(steps))] {
			s := steps[i]
			at := time.Second + time.Duration(p.e.rng.Int64N(int64(max(s.dur/2, time.Second))))
			s.extra += at + pauseFor
			s.during = append(s.during, func(ctx context.Context, e *env, r *proc) error {
				if !r.wait(ctx, at) {
					e.pause(ctx, r, aimed)
				}
				return nil
			})
		}
	}
}

// aimFor bounds how long a pause or an outage waits for a run to keep
// messages waiting behind a running one.
const aimFor = 10 * time.Second

func (e *env) pause(ctx context.Context, p *proc, aimed bool) {
	e.faultMu.Lock()
	defer func() {
		// The next outage waits a while after p goes on: the others must
		// be able to take over what p held, and p to find out.
		go func() { sleepCtx(ctx, 2*time.Second); e.faultMu.Unlock() }()
	}()
	aim := aimed && e.aimAtWaiting(ctx, []*proc{p})
	if !p.alive() || ctx.Err() != nil {
		return
	}
	from := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	sleepCtx(ctx, pauseFor)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	e.mu.Lock()
	e.pauses++
	if aim {
		e.aimed++
	}
	e.paused[p.id] = append(e.paused[p.id], window{from, time.Now()})
	e.mu.Unlock()
	e.logf("run %d: stopped (SIGSTOP) for %v (while it kept messages waiting behind a running one: %v), continued", p.id, pauseFor, aim)
}

// aimAtWaiting waits, for up to aimFor, until one of the runs ps, alive,
// keeps messages that wait behind a running one of their group: a beat of
// its keepers kept such messages (its Stats.GroupWaitBeats went up; the
// counters lag by up to 250 ms, the beats come every third of the
// visibility timeout). It reports whether one did.
func (e *env) aimAtWaiting(ctx context.Context, ps []*proc) bool {
	before := map[int]int64{}
	for _, p := range ps {
		before[p.id] = e.counts(p.id).Stats.GroupWaitBeats
	}
	found := false
	waitFor(ctx, aimFor, func() bool {
		alive := false
		for _, p := range ps {
			if p.alive() {
				alive = true
				found = found || e.counts(p.id).Stats.GroupWaitBeats > before[p.id]
			}
		}
		return found || !alive
	})
	return found
}

// Forgets forgets, with the real `sqsonce ledger forget` through the
// worker's ledger socket, the records of n operations that wait in the
// hands of the current run (claimed a second ago or more, not started):
// the operator's way to let an operation run again. The worker learns it
// at its next beat (the ledger answers that the claim is gone) and must
// then not start the operation's work; its next delivery runs it. Half of
// them come along the timeline, the rest in the last run, which lives
// until the queue is empty: the operation whose record it forgot is sure
// to come to its turn in that run's hands.
func Forgets(n int) Fault {
	return func(p *plan) {
		forget := func(ctx context.Context, e *env) error { return e.forgetWaiting(ctx) }
		var items []timed
		for _, at := range spread(n/2, 0, 1) {
			items = append(items, timed{at, forget})
		}
		p.timed = append(p.timed, items)
		for range n - n/2 {
			p.final = append(p.final, forget)
		}
	}
}

// forgetRec is a record that the campaign forgot.
type forgetRec struct {
	key      string
	from, to time.Time // the command ran between them: the record was gone at to
}

// forgetWaiting forgets the record of an operation that the current run
// claimed a second ago or more and has not started, settled nor released
// (on a FIFO queue, a message waiting behind a running one of its group),
// looking for one for up to 15 s.
func (e *env) forgetWaiting(ctx context.Context) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; sleepCtx(ctx, 200*time.Millisecond) {
		e.mu.Lock()
		p := e.cur
		e.mu.Unlock()
		if p == nil {
			continue
		}
		key, claimed := "", int64(0)
		claims := map[string]event.WorkerEvent{} // owner -> its claim
		_ = event.ReadLines(filepath.Join(e.runsDir, fmt.Sprintf("run-%d.events", p.id)), func(ev event.WorkerEvent) {
			switch ev.Ev {
			case event.EvClaim:
				claims[ev.Owner] = ev
			case event.EvStart, event.EvComplete, event.EvFail, event.EvRelease, event.EvLost:
				delete(claims, ev.Owner)
			}
		})
		for _, c := range claims {
			if time.Since(time.Unix(0, c.T)) >= time.Second && (key == "" || c.T < claimed) {
				key, claimed = c.Key, c.T
			}
		}
		if key == "" || !p.alive() {
			continue
		}
		f := forgetRec{key: key, from: time.Now()}
		out, err := e.cli(ctx, "ledger forget", "--yes", key).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "forgot") {
			e.logf("forget %s (run %d): %v: %s", key, p.id, err, strings.TrimSpace(string(out)))
			return nil
		}
		f.to = time.Now()
		e.mu.Lock()
		e.forgets = append(e.forgets, f)
		e.mu.Unlock()
		e.logf("forgot the record of %s, which run %d had claimed %.1fs before and not started", key, p.id, f.from.Sub(time.Unix(0, claimed)).Seconds())
		return nil
	}
	e.logf("forget: no operation waited in a worker's hands for a second or more within 15s")
	return nil
}

// Replays replays the dead-letter queue n times through the real `sqsonce
// replay`, with the worker stopped and nothing sent (so that every
// replayed copy enters its group after everything sent before and before
// everything sent after), well within SQS's five-minute deduplication
// window: between runs, the last one after the last planned run; the
// downstream's bug is fixed before the middle one (one worker).
func Replays(n int) Fault {
	return func(p *plan) {
		steps := p.slots[0]
		for k := range n {
			round := func(ctx context.Context, e *env) error { e.replayRound(ctx, k+1, k == n/2); return nil }
			if k == n-1 {
				p.after = append(p.after, round)
			} else {
				s := steps[(k+1)*len(steps)/n]
				s.before = append(s.before, round)
			}
		}
		p.e.judges = append(p.e.judges, func(e *env, h *history, s *section) {
			for _, r := range e.rounds {
				v := fmt.Sprintf("exit %d in %.1fs (downstream fixed before: %v): %s", r.exit, r.took.Seconds(), r.fixed, r.summary)
				s.row(fmt.Sprintf("replay round %d (sqsonce replay)", r.round), v)
			}
		})
	}
}

// replayRound is one run of `sqsonce replay`.
type replayRound struct {
	round   int
	fixed   bool
	exit    int
	summary string
	start   time.Time // before its first copy was sent
	took    time.Duration
}

func (e *env) replayRound(ctx context.Context, k int, fix bool) {
	e.snd.gate.Lock()
	defer e.snd.gate.Unlock()
	if fix {
		e.world.fix()
	}
	r := replayRound{round: k, fixed: fix, exit: -1, start: time.Now()}
	logPath := filepath.Join(e.dir, fmt.Sprintf("replay-%d.log", k))
	logFile, err := os.Create(logPath)
	if err != nil {
		e.note("replay round %d: %v", k, err)
		return
	}
	defer logFile.Close()
	var stdout bytes.Buffer
	cmd := e.cli(ctx, "replay", "--from", e.dlq, "--to", e.queue, "--json", "--log-level", "info")
	cmd.Stdout, cmd.Stderr = &stdout, logFile
	err = cmd.Run()
	r.took, r.exit = time.Since(r.start), cmd.ProcessState.ExitCode()
	var s struct {
		Failed       int64 `json:"failed"`
		DeleteFailed int64 `json:"delete_failed"`
	}
	var ee *exec.ExitError
	switch jerr := json.Unmarshal(stdout.Bytes(), &s); {
	case err != nil && !errors.As(err, &ee):
		e.note("replay round %d: %v", k, err)
	case jerr != nil:
		e.note("replay round %d: exit %d, no summary on standard output (%v): %s", k, r.exit, jerr, tailFile(logPath, 5))
	case r.exit != 0 && (r.exit != 1 || s.Failed+s.DeleteFailed == 0):
		// 1: some messages could not be moved and are still in the
		// dead-letter queue; the summary counts them.
		e.note("replay round %d: exit %d: %s", k, r.exit, tailFile(logPath, 5))
	}
	r.summary = strings.TrimSpace(stdout.String())
	e.mu.Lock()
	e.rounds = append(e.rounds, r)
	e.mu.Unlock()
	e.logf("replay round %d: exit %d in %.1fs: %s", k, r.exit, r.took.Seconds(), r.summary)
}

// Kinds of outage of the database.
const (
	outageStop   = "stopped hard (pg_ctl stop -m immediate), then restarted"
	outageRefuse = "connections refused by the proxy, the open ones cut"
	outageCut    = "open connections cut by the proxy"
	outageStall  = "stalled by the proxy (nothing carried, the connections open)"
)

// resumeWithin is how long after the database answers again every live
// worker must have received again.
const resumeWithin = 30 * time.Second

// Outage is one kind of outage of the database: n of them, each lasting
// for (a stall: the first, third, ... for, the others a quarter of it).
type Outage struct {
	Kind string
	N    int
	For  time.Duration
}

// Outages takes the database from the workers (Postgres), or the
// downstream from their handlers (down503, down429, downHang, downRefuse:
// see world.setDown and DownstreamOutages), one outage at a time, at points spread over the timeline in a random order, each
// followed by a wait until every live worker receives again, with work
// of the outage's own sent meanwhile; on a FIFO queue each first waits
// (for up to aimFor) until a worker keeps messages waiting behind a
// running one. Its check judges each kind: every outage was made, every
// wait of a worker for the ledger that it caused ended by itself within
// resumeWithin of the database answering again (unless the run ended
// first), and every worker alive then received again within it.
func Outages(kinds ...Outage) Fault {
	return func(p *plan) {
		var list []Outage
		for _, k := range kinds {
			for i := range k.N {
				d := k.For
				if k.Kind == outageStall && i%2 == 1 {
					d /= 4
				}
				list = append(list, Outage{Kind: k.Kind, For: d})
			}
		}
		p.e.rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		var items []timed
		for i, at := range spread(len(list), 0.1, 0.85) {
			items = append(items, timed{at, func(ctx context.Context, e *env) error {
				if isDown(list[i].Kind) {
					return e.downOutage(ctx, list[i])
				}
				return e.outage(ctx, list[i])
			}})
		}
		p.timed = append(p.timed, items)
		p.e.judges = append(p.e.judges, func(e *env, h *history, s *section) { e.judgeOutages(h, s, kinds) })
		if slices.ContainsFunc(kinds, func(k Outage) bool { return isDown(k.Kind) }) {
			p.e.judges = append(p.e.judges, DownstreamOutages)
		}
	}
}

// outage is one time the campaign took the database from the workers.
type outage struct {
	kind     string
	from, to time.Time // from just before the fault until the database answered again
	cut      int       // connections the proxy cut
	// resumed: how long after to each worker alive then received again
	// (one killed before it did is left out); stuck: the runs that did
	// not within resumeWithin.
	resumed map[int]time.Duration
	stuck   []int
}

func isDown(kind string) bool {
	return kind == down503 || kind == down429 || kind == downHang || kind == downRefuse
}

// downOutage takes the downstream down for o.For (a worker's pause may
// come meanwhile).
func (e *env) downOutage(ctx context.Context, o Outage) error {
	out := &outage{kind: o.Kind, from: time.Now()}
	e.logf("downstream: %s for %v", o.Kind, o.For)
	err := e.world.setDown(o.Kind)
	sleepCtx(ctx, o.For)
	err = errors.Join(err, e.world.setDown(""))
	out.to = time.Now()
	e.mu.Lock()
	e.downs = append(e.downs, out)
	e.mu.Unlock()
	e.logf("downstream up again after %.1fs", out.to.Sub(out.from).Seconds())
	return err
}

func (e *env) outage(ctx context.Context, o Outage) error {
	e.faultMu.Lock() // a worker's pause first ends
	defer e.faultMu.Unlock()
	aim := e.c.System.FIFO && e.aimAtWaiting(ctx, e.alive())
	e.logf("database: %s for %v (while a worker kept messages waiting behind a running one: %v)", o.Kind, o.For, aim)
	out := &outage{kind: o.Kind, from: time.Now(), resumed: map[int]time.Duration{}}
	switch o.Kind {
	case outageStop:
		if err := e.pg.stopHard(ctx); err != nil {
			return err
		}
		sleepCtx(ctx, o.For)
		if err := e.pg.start(ctx); err != nil {
			return err
		}
		e.proxy.locked(func() { e.proxy.target = e.pg.addr() })
	case outageRefuse:
		e.proxy.locked(func() { e.proxy.refuse = true })
		out.cut = e.proxy.cutAll()
		sleepCtx(ctx, o.For)
		e.proxy.locked(func() { e.proxy.refuse = false })
	case outageCut:
		out.cut = e.proxy.cutAll()
	case outageStall:
		e.proxy.setStall(true)
		sleepCtx(ctx, o.For)
		e.proxy.setStall(false)
	}
	if err := pgPing(ctx, pgURL(e.proxy.addr()), 30*time.Second); err != nil && ctx.Err() == nil {
		e.note("the database did not answer through the proxy after an outage (%s): %v", o.Kind, err)
	}
	out.to = time.Now()
	// Every worker alive now must receive again, by itself (those that
	// started during the outage could not open the ledger, and were
	// started again). The outage brings the work it watches: while a
	// worker has not received again, a little more is sent every other
	// second, whatever the workload has left.
	alive := e.alive()
	received := map[int]int64{}
	for _, p := range alive {
		received[p.id] = e.counts(p.id).Stats.Received
	}
	var sent time.Time
	waitFor(ctx, resumeWithin, func() bool {
		waiting := false
		for _, p := range alive {
			// A run killed meanwhile may have received before it died:
			// its counters outlive it.
			if n := e.counts(p.id); out.resumed[p.id] == 0 && !n.Down && n.Stats.Received > received[p.id] {
				out.resumed[p.id] = max(time.Since(out.to), time.Nanosecond)
			}
			_, ok := out.resumed[p.id]
			waiting = waiting || (!ok && p.alive())
		}
		if waiting && time.Since(sent) > 2*time.Second {
			sent = time.Now()
			e.extraOps(ctx, "outage", 2)
		}
		return !waiting
	})
	for _, p := range alive {
		if _, ok := out.resumed[p.id]; !ok && p.alive() {
			out.stuck = append(out.stuck, p.id)
		}
	}
	e.mu.Lock()
	e.outages = append(e.outages, out)
	e.mu.Unlock()
	e.logf("database out of reach for %.1fs (%d connections cut); %d workers received again, not: %v", out.to.Sub(out.from).Seconds(), out.cut, len(out.resumed), out.stuck)
	return nil
}

// outOfReach returns the times when the database was out of the workers'
// reach, each widened at its end: a call that began before an outage
// ended may still fail for up to a ledger timeout and a retry afterwards.
func (e *env) outOfReach() []window {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []window
	for _, o := range e.outages {
		out = append(out, window{o.from, o.to.Add(2*sharedLedgerTimeout + time.Second)})
	}
	return out
}

// judgeOutages adds the waits of the workers for the database and judges
// each kind of outage.
func (e *env) judgeOutages(h *history, s *section, kinds []Outage) {
	var waits []float64
	cutShort, byOutage := 0, map[*outage][]runEvent{}
	for _, ev := range h.kind(event.EvWait) {
		if ev.Err != "" {
			cutShort++
		} else {
			waits = append(waits, float64(ev.T-ev.Since)/1e9)
		}
		// A wait belongs to the last outage that began before it (calls
		// fail up to a ledger timeout after the fault), if it began
		// before that outage ended, give or take a retry.
		since := time.Unix(0, ev.Since)
		var of *outage
		for _, o := range e.outages {
			if !o.from.After(since.Add(time.Second)) && since.Before(o.to.Add(2*sharedLedgerTimeout)) && (of == nil || o.from.After(of.from)) {
				of = o
			}
		}
		byOutage[of] = append(byOutage[of], ev)
	}
	s.row("waits of the workers for the database", fmt.Sprintf("%d waits until it answered again (no new work while claims could not be recorded), %s s each, and %d until their run ended; %d ledger calls found it unavailable",
		len(waits), span(waits), cutShort, h.unavailable))
	for _, k := range slices.DeleteFunc(slices.Clone(kinds), func(k Outage) bool { return isDown(k.Kind) }) {
		n, cut, late := 0, 0, 0
		var downs, resumed, after []float64
		var stuck []int
		for _, o := range e.outages {
			if o.kind != k.Kind {
				continue
			}
			n, cut, stuck, downs = n+1, cut+o.cut, append(stuck, o.stuck...), append(downs, o.to.Sub(o.from).Seconds())
			for _, d := range o.resumed {
				resumed = append(resumed, d.Seconds())
			}
			for _, ev := range byOutage[o] {
				if a := max(time.Unix(0, ev.T).Sub(o.to), 0); ev.Err == "" {
					after = append(after, a.Seconds())
					if a > resumeWithin {
						late++
					}
				}
			}
		}
		s.must("database "+k.Kind, n == k.N && late == 0 && len(stuck) == 0, fmt.Sprintf("%d of %d made, out of reach %s s, %d connections cut; the workers stopped taking new work %d times and resumed by themselves %s s after it answered again (%d later than %v); %d workers alive when it answered again received again within %s s, runs that did not within %v: %v",
			n, k.N, span(downs), cut, len(after), span(after), late, resumeWithin, len(resumed), span(resumed), resumeWithin, stuck))
	}
}

// LostCommits has the proxy lose n commits (Postgres) at points spread
// over the timeline, one at a time, alternately (in a random order) a
// request, which never reaches the server, and an answer, dropped once
// the server committed; either way it cuts the connection.
func LostCommits(n int) Fault {
	return func(p *plan) {
		answered := make([]bool, n)
		for i := range answered {
			answered[i] = i%2 == 1
		}
		p.e.rng.Shuffle(n, func(i, j int) { answered[i], answered[j] = answered[j], answered[i] })
		var items []timed
		for i, at := range spread(n, 0.05, 0.95) {
			items = append(items, timed{at, func(ctx context.Context, e *env) error {
				e.proxy.loseCommits(1, answered[i])
				if waitFor(ctx, 30*time.Second, func() bool { return e.proxy.commitsToLose() == 0 }) {
					lost := e.proxy.lostCommits()
					e.logf("database: a commit lost (connection of %s cut; the server committed: %v)", lost[len(lost)-1].Client, answered[i])
				} // else no commit came: it stays to lose, the next one waits behind it
				return nil
			}})
		}
		p.timed = append(p.timed, items)
	}
}

// span writes the least and the greatest of vs, "-" when there are none.
func span(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if fmt.Sprintf("%.1f", lo) == fmt.Sprintf("%.1f", hi) {
		return fmt.Sprintf("%.1f", lo)
	}
	return fmt.Sprintf("%.1f-%.1f", lo, hi)
}
