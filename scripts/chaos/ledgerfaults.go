package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// The faults of the embedded ledger (a bbolt file, one worker).

// phaseResult is the verdict of a fault that judges itself as it goes.
type phaseResult struct {
	name   string
	ok     bool
	detail string
}

func (e *env) phase(name string, ok bool, detail string) {
	e.mu.Lock()
	e.phases = append(e.phases, phaseResult{name, ok, detail})
	e.mu.Unlock()
	e.logf("phase %q: ok %v: %s", name, ok, detail)
}

// phaseOps is how many operations of their own the ledger phases send each
// time they need the worker busy.
const phaseOps = 20

// refuseTimeout bounds how long a worker that must not start takes to
// exit.
const refuseTimeout = 15 * time.Second

// LedgerPhases puts the ledger, before the run at the point at of the
// runs, through a second process on the ledger a worker holds (it must be
// refused before it touches the queue), a full disk under a running worker
// (commits fail; it must recover once the disk has room) and a read-only
// file system at start (refused, then it works once writable), on a tmpfs
// of its own; each phase sends operations of its own when it needs the
// worker busy, and the sending goes on meanwhile (they take 22 s of the
// timeline). It then signals the event NAME/phases.
func LedgerPhases(at float64) Fault {
	return func(p *plan) {
		s := p.slots[0][int(at*float64(len(p.slots[0])))]
		s.gap += 22 * time.Second
		s.before = append(s.before, func(ctx context.Context, e *env) error {
			defer e.signal(e.name + "/phases")
			return e.ledgerPhases(ctx)
		})
	}
}

// refused starts a worker on path that must not start, and judges it.
func (e *env) refused(ctx context.Context, path, want string) (bool, string, error) {
	side, err := e.startOn(path, true)
	if err != nil {
		return false, "", err
	}
	t0 := time.Now()
	ended := side.wait(ctx, refuseTimeout)
	_, code := side.exit()
	switch {
	case !ended:
		side.kill(endKill)
		return false, fmt.Sprintf("still running after %v", refuseTimeout), nil
	case code == 0 || !side.outputHas(want) || !side.outputHas("sqs_requests=0"):
		return false, fmt.Sprintf("exit %d, want one naming %q with no SQS request: %s", code, want, tailFile(side.out, 3)), nil
	}
	return true, fmt.Sprintf("refused in %.1fs, exit %d, naming %q, no SQS request", time.Since(t0).Seconds(), code, want), nil
}

func (e *env) ledgerPhases(ctx context.Context) error {
	// 1. A second process on the ledger a worker holds.
	p, err := e.startOn(e.ledger, false)
	if err != nil {
		return err
	}
	if !waitFor(ctx, 10*time.Second, func() bool { return e.counts(p.id).SQSRequests > 0 }) {
		e.note("run %d made no SQS request within 10s of its start", p.id)
	}
	ok, detail, err := e.refused(ctx, e.ledger, "another sqsonce process")
	if err != nil {
		return err
	}
	e.phase("second process on a held ledger", ok && p.alive(), fmt.Sprintf("%s; the holder alive: %v", detail, p.alive()))
	e.stopRun(ctx, p)

	// 2. A full disk under a running worker.
	tmp, err := mountTmpfs(filepath.Join(e.dir, "tmpfs"), 64)
	if err != nil {
		return err
	}
	e.tmp = tmp
	tmpLedger := filepath.Join(tmp.dir, "ledger.db")
	if err := copySparse(e.ledger, tmpLedger); err != nil {
		return fmt.Errorf("copy the ledger to the tmpfs: %w", err)
	}
	if p, err = e.startOn(tmpLedger, false); err != nil {
		return err
	}
	// Work before, during and after the full disk: the commits that fail,
	// and those that show the recovery.
	work := func() { e.extraOps(ctx, "diskfull", phaseOps) }
	work()
	waitFor(ctx, 10*time.Second, func() bool { return e.counts(p.id).CompletesOK > 0 })
	filler, size, err := tmp.fill()
	if err != nil {
		return fmt.Errorf("fill the tmpfs: %w", err)
	}
	full := e.counts(p.id)
	e.logf("disk full: %d MiB filler on the ledger's file system (run %d)", size>>20, p.id)
	work()
	failing := waitFor(ctx, 30*time.Second, func() bool { return e.counts(p.id).CommitErrors > full.CommitErrors })
	sleepCtx(ctx, 3*time.Second)
	during := e.counts(p.id)
	if err := os.Remove(filler); err != nil {
		return err
	}
	// Commits in flight as the disk was freed may still fail, and the
	// counters lag by up to 250 ms: count recovery from a second later.
	sleepCtx(ctx, time.Second)
	freed := e.counts(p.id)
	work()
	recovered := waitFor(ctx, 30*time.Second, func() bool {
		n := e.counts(p.id)
		return n.CompletesOK > freed.CompletesOK+5 && n.CommitErrors == freed.CommitErrors
	})
	after := e.counts(p.id)
	e.phase("disk full during commits", failing && recovered && p.alive(), fmt.Sprintf("commits failed while full: %v (%d), the worker alive: %v, recovered within 30s of freeing the disk: %v; %d work done but not recorded (left for redelivery), %d completions while full",
		failing, after.CommitErrors-full.CommitErrors, p.alive(), recovered, after.Stats.CompleteFailed, during.CompletesOK-full.CompletesOK))
	e.stopRun(ctx, p)

	// 3. A read-only file system when a worker starts; writable again, a
	// worker starts on it and works.
	if err := tmp.readOnly(true); err != nil {
		return err
	}
	ok, detail, err = e.refused(ctx, tmpLedger, "read-only")
	if err := errors.Join(err, tmp.readOnly(false)); err != nil {
		return err
	}
	if p, err = e.startOn(tmpLedger, false); err != nil {
		return err
	}
	before := e.counts(p.id)
	e.extraOps(ctx, "readonly", phaseOps)
	works := waitFor(ctx, 20*time.Second, func() bool { return e.counts(p.id).CompletesOK > before.CompletesOK+5 })
	e.phase("read-only ledger at start", ok && works, fmt.Sprintf("%s; restarted read-write, completes work within 20s: %v", detail, works))
	e.stopRun(ctx, p)
	if err := copySparse(tmpLedger, e.ledger+".copy"); err != nil {
		return fmt.Errorf("copy the ledger back: %w", err)
	}
	if err := os.Rename(e.ledger+".copy", e.ledger); err != nil {
		return err
	}
	return errors.Join(os.Remove(tmpLedger), tmp.unmount())
}

// Holds has a reader stop on the worker's ledger socket in n runs from the
// point from of the runs on (when the ledger has grown): `sqsonce ledger
// export` (the real command) lists the ledger through the socket into a
// pipe that the campaign does not read, for d (longer than the leases),
// while the worker goes on claiming and completing the operations that the
// hold sends as it begins; then the reader is let go and must finish its
// listing with no key twice.
func Holds(n int, d time.Duration, from float64) Fault {
	return func(p *plan) {
		steps := p.slots[0]
		first := int(from * float64(len(steps)))
		for _, i := range p.e.rng.Perm(len(steps) - first)[:min(n, len(steps)-first)] {
			s := steps[first+i]
			s.extra, s.held = s.extra+d, true
			s.during = append(s.during, func(ctx context.Context, e *env, r *proc) error {
				ok, detail := e.holdReader(ctx, r, d)
				e.logf("a reader that stops: ok %v: %s", ok, detail)
				e.mu.Lock()
				e.holds = append(e.holds, phaseResult{ok: ok, detail: detail})
				e.mu.Unlock()
				return nil
			})
		}
		p.e.judges = append(p.e.judges, func(e *env, h *history, s *section) {
			ok, details := len(e.holds) == n, []string{fmt.Sprintf("%d of %d made", len(e.holds), n)}
			for _, r := range e.holds {
				ok, details = ok && r.ok, append(details, r.detail)
			}
			s.must("ledger phase: a reader that stops (ledger socket)", ok, strings.Join(details, "; "))
		})
	}
}

// pipeBuffers is about what the pipe and the socket between the worker and
// a reader that stopped can hold: the pipe's 64 KiB, the unix socket's send
// buffer (net.core.wmem_default, 208 KiB) and a few small buffers of the
// two HTTP ends. A listing longer than this kept the worker's walk waiting
// on the reader.
const pipeBuffers = 320 << 10

// holdReader runs `sqsonce ledger export` against run p's ledger socket
// with its output into a pipe that nobody reads for hold, sending the
// hold's operations once the reader has stopped, then reads the pipe to
// its end, waits for the reader to finish and judges the hold.
func (e *env) holdReader(ctx context.Context, p *proc, hold time.Duration) (bool, string) {
	// The worker is up (it serves its socket once its ledger is open).
	waitFor(ctx, 10*time.Second, func() bool { return e.counts(p.id).SQSRequests > 0 || !p.alive() })
	pr, pw, err := os.Pipe()
	if err != nil {
		return false, err.Error()
	}
	defer pr.Close()
	var stderr bytes.Buffer
	cmd := e.cli(ctx, "ledger export")
	cmd.Stdout, cmd.Stderr = pw, &stderr
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return false, err.Error()
	}
	// The reader has stopped once the pipe stops filling.
	inPipe, still := -1, 0
	waitFor(ctx, 10*time.Second, func() bool {
		n := pipeBytes(pr)
		if still++; n != inPipe || n <= 0 {
			still = 0
		}
		inPipe = n
		return still >= 3
	})
	before, t0 := e.counts(p.id), time.Now()
	own := e.extraOps(ctx, "hold", phaseOps)
	p.wait(ctx, hold-time.Since(t0))
	held, after, alive := time.Since(t0), e.counts(p.id), p.alive()
	mine, ownDone := map[string]bool{}, map[string]bool{}
	for _, o := range own {
		mine[o.id] = true
	}
	_ = event.ReadLines(filepath.Join(e.runsDir, fmt.Sprintf("run-%d.events", p.id)), func(ev event.WorkerEvent) {
		if mine[ev.Key] && ev.Ev == event.EvComplete && ev.Err == "" && ev.T >= t0.UnixNano() {
			ownDone[ev.Key] = true
		}
	})

	// Let go: read everything, and wait for the reader to finish.
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	seen := map[string]bool{}
	listing, dups := 0, 0
	for sc := bufio.NewScanner(pr); sc.Scan(); {
		var rec struct {
			Key string `json:"key"`
		}
		listing += len(sc.Bytes()) + 1
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Key != "" {
			if seen[rec.Key] {
				dups++
			}
			seen[rec.Key] = true
		}
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	completed, claimed := after.CompletesOK-before.CompletesOK, after.Stats.Claimed-before.Stats.Claimed
	lost := after.Stats.LeaseLost - before.Stats.LeaseLost
	detail := fmt.Sprintf("run %d held %.0fs: the reader stopped after %d KiB of a %d KiB listing (the worker's walk waited on it: %v); meanwhile %d claims, %d completions (%d of the %d operations the hold sent), %d lost leases, %d takeovers; let go: exit %d, %d records, %d listed twice %s",
		p.id, held.Seconds(), inPipe>>10, listing>>10, listing > pipeBuffers, claimed, completed, len(ownDone), len(own), lost, after.Stats.Takeovers-before.Stats.Takeovers,
		cmd.ProcessState.ExitCode(), len(seen), dups, strings.TrimSpace(stderr.String()))
	// The hold's own operations make sure there is work to do; which
	// messages the queue hands out first is the server's choice, so any
	// claim and completion shows that the worker went on.
	return alive && inPipe > 0 && cmd.ProcessState.ExitCode() == 0 && dups == 0 && lost == 0 && completed > 0 && claimed > 0, detail
}

// pipeBytes returns how many bytes wait in the pipe that r reads.
func pipeBytes(r *os.File) int {
	sc, err := r.SyscallConn()
	if err != nil {
		return -1
	}
	n := int32(-1)
	_ = sc.Control(func(fd uintptr) {
		var v int32
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v))); errno == 0 {
			n = v
		}
	})
	return int(n)
}

func inode(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ""
	}
	return strconv.FormatUint(st.Ino, 10)
}

// Outcomes of a compaction racing a restart.
const (
	raceCompactionFirst = "compaction first"  // it took the lock; the worker opened the compacted file
	raceWorkerFirst     = "worker first"      // the worker took the lock; the compaction was refused
	raceWorkerRefused   = "worker refused"    // the compaction held the lock longer than the worker's lock timeout
	raceBroken          = "broken"            // anything else: a finding
	raceUnknown         = "outcome not known" // the worker died before it said which file it holds
)

// lockWaited is how long an open of the ledger takes, at least, when it
// had to wait for the file's lock: bbolt tries the lock again every 50 ms.
const lockWaited = 45 * time.Millisecond

// compactRace is one compaction started together with a worker run.
type compactRace struct {
	run     int
	onLock  bool // the worker started the moment the compaction held the file's lock, not back to back
	opened  time.Duration
	outcome string
	detail  string
	// Once its run ended, when the compaction went first: the operations
	// the run completed, sent again then.
	resent   []string
	resentAt time.Time
}

var openedRe = regexp.MustCompile(`ledger opened in (\d+)ms: file dev=\d+ inode=(\d+)( \(deleted\))?`)

// Compactions starts n runs (never the first, nor one with a hold)
// together with `sqsonce ledger compact`, every other time back to back,
// otherwise the worker the moment the compaction holds the file's lock:
// when the compaction wins the lock, the worker waits for it and must
// write to the compacted file; every operation it then completes is sent
// again after its run, and must be answered as a duplicate, never run
// again, and be complete in the ledger at the end. Each run that starts
// so gets operations of its own, and (when the compaction went first)
// until it completes one.
func Compactions(n int) Fault {
	return func(p *plan) {
		steps := p.slots[0]
		k := 0
		for _, i := range p.e.rng.Perm(len(steps) - 1) {
			s := steps[i+1]
			if k == n || s.held {
				continue
			}
			race := &compactRace{onLock: k%2 == 0}
			k++
			s.start = func(ctx context.Context, e *env) (*proc, error) { return e.raceCompaction(ctx, race) }
			s.during = append(s.during, func(ctx context.Context, e *env, r *proc) error {
				e.extraOps(ctx, "race", 15)
				if race.outcome == raceCompactionFirst {
					// On a loaded machine its planned time may pass before
					// it completes anything: give it until it has.
					waitFor(ctx, 30*time.Second, func() bool { return e.counts(r.id).CompletesOK > 0 })
				}
				return nil
			})
			s.after = append(s.after, func(ctx context.Context, e *env) error { return e.resendCompleted(ctx, race) })
		}
		p.e.judges = append(p.e.judges, func(e *env, h *history, s *section) { e.judgeRaces(h, s) })
	}
}

// raceCompaction starts `sqsonce ledger compact` and the next worker run
// (the last one has ended) at the same moment, and returns the run,
// restarted once more if the compaction made it give up.
func (e *env) raceCompaction(ctx context.Context, r *compactRace) (*proc, error) {
	before := inode(e.ledger)
	tmp := e.ledger + ".compact" // where ledger.Compact writes, once it holds the lock
	os.Remove(tmp)
	var out strings.Builder
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := e.cli(cctx, "ledger compact")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(10 * time.Second); r.onLock && time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		if _, err := os.Stat(tmp); err == nil || !cmdAlive(exited) {
			break
		}
	}
	p, err := e.startOn(e.ledger, false)
	if err != nil {
		<-exited
		return nil, err
	}
	r.run = p.id
	<-exited
	exit, output := cmd.ProcessState.ExitCode(), strings.TrimSpace(out.String())
	// The worker says which file it holds once it opened the ledger, or
	// gives up after its lock timeout.
	var m []string
	waitFor(ctx, ledger.DefaultLockTimeout+10*time.Second, func() bool {
		b, _ := os.ReadFile(p.out)
		m = openedRe.FindStringSubmatch(string(b))
		return m != nil || !p.alive()
	})
	now := inode(e.ledger)
	compacted := exit == 0 && now != before
	locked := exit != 0 && strings.Contains(output, "stop the worker, then compact")
	switch {
	case m == nil && !p.alive() && p.outputHas("another sqsonce process"):
		r.outcome, r.detail = raceWorkerRefused, fmt.Sprintf("the worker gave up waiting for the lock (compaction exit %d)", exit)
	case m == nil:
		r.outcome, r.detail = raceUnknown, "the worker did not say which file it holds: "+tailFile(p.out, 3)
	default:
		ms, _ := strconv.Atoi(m[1])
		r.opened = time.Duration(ms) * time.Millisecond
		held := m[2]
		switch {
		case m[3] != "":
			r.outcome, r.detail = raceBroken, fmt.Sprintf("the worker holds a file that no longer has the ledger's name (inode %s; the name now leads to %s)", held, now)
		case compacted && held == now:
			r.outcome, r.detail = raceCompactionFirst, fmt.Sprintf("%s; the worker opened the compacted file in %v", output, r.opened)
		case locked && held == before:
			r.outcome, r.detail = raceWorkerFirst, "the compaction was refused: the worker holds the file"
		default:
			r.outcome, r.detail = raceBroken, fmt.Sprintf("compaction exit %d (%s), the worker holds inode %s, the file was %s and is %s", exit, output, held, before, now)
		}
	}
	e.logf("compaction racing run %d (on the lock: %v): %s: %s", p.id, r.onLock, r.outcome, r.detail)
	if r.outcome == raceWorkerRefused {
		e.checkEnd(p)
		if p, err = e.startOn(e.ledger, false); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	e.races = append(e.races, r)
	e.mu.Unlock()
	return p, nil
}

func cmdAlive(exited chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// resendCompleted sends again, once race r's run has ended, every
// operation that the run completed while the compaction went first: each
// must be answered as a duplicate. Operations with two payloads are left
// out (which one completed is the audit's to find).
func (e *env) resendCompleted(ctx context.Context, r *compactRace) error {
	if r.outcome != raceCompactionFirst {
		return nil
	}
	var u unit
	seen := map[string]bool{}
	err := event.ReadLines(filepath.Join(e.runsDir, fmt.Sprintf("run-%d.events", r.run)), func(ev event.WorkerEvent) {
		if o := e.wl.opByID(ev.Key); ev.Ev == event.EvComplete && ev.Err == "" && !seen[ev.Key] && o != nil && len(o.bodies) == 1 {
			seen[ev.Key] = true
			r.resent = append(r.resent, ev.Key)
			u.msgs = append(u.msgs, e.wl.newMsg(o, 0))
		}
	})
	r.resentAt = time.Now()
	if err := errors.Join(err, e.snd.send(ctx, u)); err != nil {
		return err
	}
	e.logf("sent again the %d operations that run %d completed after the compaction", len(r.resent), r.run)
	return nil
}

// judgeRaces judges the compaction races from the ledger at the end and the
// executions: every operation resent after a run that started during a
// compaction must be complete, and must not have run again.
func (e *env) judgeRaces(h *history, s *section) {
	counts := map[string]int{}
	var problems, opens []string
	resent, bad := 0, 0
	for _, rc := range e.races {
		counts[rc.outcome]++
		switch rc.outcome {
		case raceBroken, raceUnknown:
			problems = append(problems, fmt.Sprintf("run %d: %s", rc.run, rc.detail))
		case raceCompactionFirst:
			opens = append(opens, fmt.Sprintf("%dms (waited for its lock: %v)", rc.opened.Milliseconds(), rc.opened >= lockWaited))
		}
		for _, key := range rc.resent {
			resent++
			if st := h.state(key); st != "complete" {
				bad++
				problems = append(problems, fmt.Sprintf("%s, completed by run %d after the compaction: %s in the ledger", key, rc.run, st))
			}
			for _, x := range h.execs[key] {
				if x.Status == 200 && x.T > rc.resentAt.UnixNano() {
					bad++
					problems = append(problems, fmt.Sprintf("%s, completed by run %d after the compaction, ran again (execution %d, run %d)", key, rc.run, x.Seq, x.Run))
					break
				}
			}
		}
	}
	detail := fmt.Sprintf("%d races: %d %s (the worker opened the compacted file in %s), %d %s, %d %s; %d operations completed by the workers that started during a compaction, sent again: %d not complete in the ledger or run again",
		len(e.races), counts[raceCompactionFirst], raceCompactionFirst, strings.Join(opens, ", "), counts[raceWorkerFirst], raceWorkerFirst,
		counts[raceWorkerRefused], raceWorkerRefused, resent, bad)
	switch {
	case len(problems) > 0:
		detail += ": " + strings.Join(problems[:min(len(problems), 10)], "; ")
	case counts[raceCompactionFirst] == 0:
		detail += ": the compaction never went first, so no worker started during one"
	case resent == 0:
		detail += ": the workers that started during a compaction completed nothing"
	}
	s.must("ledger phase: compaction racing a restart", len(problems) == 0 && counts[raceCompactionFirst] > 0 && resent > 0, detail)
}
