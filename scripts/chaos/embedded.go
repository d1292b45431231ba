package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// Two more phases of the standard campaign, on the embedded ledger, run
// among its worker runs rather than beside them:
//
//   - a reader that stops: while a worker runs, `sqsonce ledger export`
//     reads the ledger through the worker's socket into a pipe that the
//     campaign does not read, and so stops part way through the listing;
//     the worker keeps claiming and completing meanwhile (operations that
//     the phase sends as the hold begins: see phaseWork), and the reader
//     is let go (the pipe read to its end) after a hold longer than the
//     leases;
//   - a compaction racing a restart: between two worker runs, `sqsonce
//     ledger compact` and the next worker start at the same moment; when
//     the compaction wins the file's lock, the worker waits for it and must
//     write to the compacted file: every operation it completes is sent
//     again after its run, and must be answered as a duplicate.

// pipeBuffers is about what the pipe and the socket between the worker and
// a reader that stopped can hold: the pipe's 64 KiB, the unix socket's send
// buffer (net.core.wmem_default, 208 KiB) and a few small buffers of the
// two HTTP ends. A listing longer than this kept the worker's walk waiting
// on the reader.
const pipeBuffers = 320 << 10

// readerHold is one hold of a worker's ledger socket by a reader that
// stopped.
type readerHold struct {
	run           int
	held          time.Duration
	inPipe        int   // bytes the reader wrote into the pipe before it stopped
	listing       int64 // bytes of the whole listing, read once let go
	records, dups int   // records listed; keys listed twice
	exit          int
	stderr        string
	before, after event.Counts
	sizes         [2]int64 // the ledger file's size when the hold began and ended
	alive         bool     // the worker was alive when the reader was let go
	// own: the operations the phase sent as the hold began; ownDone: those
	// the worker recorded complete during the hold.
	own, ownDone int
	sendErr      string
}

// ok judges a hold, and says what it found.
func (h readerHold) ok() (bool, string) {
	completed := h.after.CompletesOK - h.before.CompletesOK
	claimed := h.after.Stats.Claimed - h.before.Stats.Claimed
	lost := h.after.Stats.LeaseLost - h.before.Stats.LeaseLost
	held := "the whole listing fit in the pipe and socket buffers: the worker's walk did not wait"
	if h.listing > pipeBuffers {
		held = "the worker's walk waited on the reader"
	}
	d := fmt.Sprintf("run %d held %.0fs: reader stopped after %d KiB of a %d KiB listing (%s); meanwhile %d claims, %d completions (%d of the %d operations the phase sent), %d heartbeats, %d lost leases, %d takeovers, file %d -> %d KiB; let go: exit %d, %d records, %d listed twice",
		h.run, h.held.Seconds(), h.inPipe>>10, h.listing>>10, held, claimed, completed, h.ownDone, h.own, h.after.Stats.Heartbeats-h.before.Stats.Heartbeats,
		lost, h.after.Stats.Takeovers-h.before.Stats.Takeovers, h.sizes[0]>>10, h.sizes[1]>>10, h.exit, h.records, h.dups)
	switch {
	case h.sendErr != "":
		return false, d + "; the phase could not send its operations: " + h.sendErr
	case !h.alive:
		return false, d + "; the worker died during the hold"
	case h.inPipe == 0:
		return false, d + "; the reader wrote nothing: " + h.stderr
	case h.exit != 0:
		return false, d + "; the reader failed once let go: " + h.stderr
	case h.dups > 0:
		return false, d + "; the listing repeated keys"
	case completed == 0 || claimed == 0:
		// The phase's own operations make sure there is work to do during
		// the hold; which messages the queue hands out first is the
		// server's choice (a backlog may come before them), so any claim
		// and completion shows that the worker went on.
		return false, d + "; the worker did not claim and complete work while the reader held its socket (the phase had sent operations of its own)"
	case lost > 0:
		return false, d + "; leases lapsed while the reader held the socket"
	}
	return true, d
}

// holdOps is how many operations the phase of a reader that stops sends as
// its hold begins.
const holdOps = 20

// completedBy returns how many of ops run id recorded complete between
// from and to.
func (c *campaign) completedBy(id int, ops []*op, from, to time.Time) int {
	want := map[string]bool{}
	for _, o := range ops {
		want[o.id] = true
	}
	n := 0
	_ = event.ReadLines(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.events", id)), func(e event.WorkerEvent) {
		if e.Ev == event.EvComplete && e.Err == "" && want[e.Key] && e.T >= from.UnixNano() && e.T <= to.UnixNano() {
			n++
			delete(want, e.Key)
		}
	})
	return n
}

// holdReader runs `sqsonce ledger export` against run p's ledger socket
// with its output into a pipe that nobody reads for hold, sending the
// phase's operations (holdOps) once the reader has stopped, then reads the
// pipe to its end and waits for the reader to finish.
func (c *campaign) holdReader(ctx context.Context, p *proc, hold time.Duration) readerHold {
	h := readerHold{run: p.id, exit: -1}
	// The worker is up (it serves its socket once its ledger is open).
	waitFor(ctx, 10*time.Second, func() bool { return c.counts(p.id).SQSRequests > 0 || !p.alive() })
	pr, pw, err := os.Pipe()
	if err != nil {
		h.stderr = err.Error()
		return h
	}
	defer pr.Close()
	errPath := filepath.Join(c.runsDir, fmt.Sprintf("export-%d.log", p.id))
	errFile, err := os.Create(errPath)
	if err != nil {
		pw.Close()
		h.stderr = err.Error()
		return h
	}
	defer errFile.Close()
	cmd := exec.CommandContext(ctx, c.cliBin, "ledger", "export", "--config", c.cliConfig())
	cmd.Env = cliEnv()
	cmd.Stdout, cmd.Stderr = pw, errFile
	err = cmd.Start()
	pw.Close()
	if err != nil {
		h.stderr = err.Error()
		return h
	}
	// The reader has stopped once the pipe stops filling.
	last, still := -1, 0
	waitFor(ctx, 10*time.Second, func() bool {
		n := pipeBytes(pr)
		if n == last && n > 0 {
			still++
		} else {
			still = 0
		}
		last = n
		return still >= 3
	})
	h.inPipe = max(last, 0)
	h.before, h.sizes[0] = c.counts(p.id), fileSize(c.ledger)
	t0 := time.Now()
	own, err := c.phaseWork(ctx, "hold", holdOps)
	if err != nil {
		h.sendErr = err.Error()
	}
	p.wait(ctx, hold-time.Since(t0))
	h.held = time.Since(t0)
	h.after, h.sizes[1] = c.counts(p.id), fileSize(c.ledger)
	h.alive = p.alive()
	h.own, h.ownDone = len(own), c.completedBy(p.id, own, t0, time.Now())

	// Let go: read everything, and wait for the reader to finish.
	type listing struct {
		bytes         int64
		records, dups int
	}
	read := make(chan listing, 1)
	go func() {
		var l listing
		seen := map[string]bool{}
		r := bufio.NewReaderSize(pr, 1<<16)
		for {
			line, err := r.ReadBytes('\n')
			l.bytes += int64(len(line))
			var rec struct {
				Key string `json:"key"`
			}
			if len(line) > 0 && json.Unmarshal(line, &rec) == nil && rec.Key != "" {
				l.records++
				if seen[rec.Key] {
					l.dups++
				}
				seen[rec.Key] = true
			}
			if err != nil {
				read <- l
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	l := <-read
	h.listing, h.records, h.dups = l.bytes, l.records, l.dups
	if cmd.ProcessState != nil {
		h.exit = cmd.ProcessState.ExitCode()
	}
	h.stderr = tailFile(errPath, 3)
	ok, detail := h.ok()
	status := "ok"
	if !ok {
		status = "FAILED"
	}
	c.logf("reader that stops: %s: %s", status, detail)
	return h
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

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

func inode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
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
	run int // the worker run started with it
	// onLock: the worker was started the moment the compaction held the
	// file's lock (its temporary file appeared); otherwise the two were
	// started back to back.
	onLock  bool
	exit    int // the compaction's exit status
	output  string
	before  int64         // the file's size before, when it compacted
	after   int64         // and after
	opened  time.Duration // how long the worker's open took
	outcome string
	detail  string
	// Set once its run ended, when the compaction went first: the
	// operations the run completed, sent again then.
	resent   []string
	resentAt time.Time
}

var (
	compactedRe = regexp.MustCompile(`compacted .*: (\d+) -> (\d+) bytes`)
	openedRe    = regexp.MustCompile(`ledger opened in (\d+)ms: file dev=\d+ inode=(\d+)( \(deleted\))?`)
)

// raceWorkWait bounds how long a run that started during a compaction is
// given to complete its first operation before its planned end.
const raceWorkWait = 30 * time.Second

// raceCompaction starts `sqsonce ledger compact` and the next worker run
// (the last one has ended) at the same moment: every other time back to
// back, otherwise the worker the moment the compaction holds the ledger's
// lock, so that it starts during the compaction. It returns the run,
// restarted once more if the compaction made it give up, and what came of
// the race.
func (c *campaign) raceCompaction(ctx context.Context, n int) (*proc, *compactRace, error) {
	r := &compactRace{onLock: n%2 == 0, exit: -1}
	before := inode(c.ledger)
	tmp := c.ledger + ".compact" // where ledger.Compact writes, once it holds the lock
	os.Remove(tmp)
	var out strings.Builder
	cmd := exec.CommandContext(ctx, c.cliBin, "ledger", "compact", "--config", c.cliConfig())
	cmd.Env = cliEnv()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(exited) }()
	if r.onLock {
		deadline := time.Now().Add(10 * time.Second)
	poll:
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				break poll
			default:
			}
			if _, err := os.Stat(tmp); err == nil {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	p, err := c.startRun(c.ledger, runOpts{})
	if err != nil {
		<-exited
		return nil, nil, err
	}
	r.run = p.id
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return nil, nil, fmt.Errorf("sqsonce ledger compact: %w", werr)
	}
	r.exit = cmd.ProcessState.ExitCode()
	r.output = strings.TrimSpace(out.String())
	if m := compactedRe.FindStringSubmatch(r.output); m != nil {
		r.before, _ = strconv.ParseInt(m[1], 10, 64)
		r.after, _ = strconv.ParseInt(m[2], 10, 64)
	}
	// The worker says which file it holds once it opened the ledger, or
	// gives up after its lock timeout.
	var m []string
	waitFor(ctx, ledger.DefaultLockTimeout+10*time.Second, func() bool {
		b, _ := os.ReadFile(p.stderr)
		m = openedRe.FindStringSubmatch(string(b))
		return m != nil || !p.alive()
	})
	now := inode(c.ledger)
	compacted := r.exit == 0 && now != before
	locked := r.exit != 0 && strings.Contains(r.output, "stop the worker before compacting")
	switch {
	case m == nil && !p.alive() && p.outputHas("another sqsonce process"):
		r.outcome = raceWorkerRefused
		r.detail = fmt.Sprintf("the worker gave up waiting for the lock (compaction exit %d)", r.exit)
	case m == nil:
		r.outcome = raceUnknown
		r.detail = "the worker did not say which file it holds: " + p.tail(3)
	default:
		ms, _ := strconv.Atoi(m[1])
		r.opened = time.Duration(ms) * time.Millisecond
		held, _ := strconv.ParseUint(m[2], 10, 64)
		switch {
		case m[3] != "":
			r.outcome, r.detail = raceBroken, fmt.Sprintf("the worker holds a file that no longer has the ledger's name (inode %d; the name now leads to %d)", held, now)
		case compacted && held == now:
			r.outcome, r.detail = raceCompactionFirst, fmt.Sprintf("compacted %d -> %d KiB; the worker opened the compacted file in %v", r.before>>10, r.after>>10, r.opened)
			if r.opened >= lockWaited {
				r.detail += ", having waited for the compaction's lock"
			}
		case compacted:
			r.outcome, r.detail = raceBroken, fmt.Sprintf("compacted, but the worker holds inode %d, the ledger's name leads to %d", held, now)
		case locked && held == before:
			r.outcome, r.detail = raceWorkerFirst, "the compaction was refused: the worker holds the file"
		default:
			r.outcome, r.detail = raceBroken, fmt.Sprintf("compaction exit %d (%s), the worker holds inode %d, the file was %d and is %d", r.exit, lastLine(r.output), held, before, now)
		}
	}
	how := "back to back"
	if r.onLock {
		how = "the worker once the compaction held the lock"
	}
	c.logf("compaction racing run %d (%s): %s: %s", p.id, how, r.outcome, r.detail)
	if r.outcome == raceWorkerRefused {
		c.checkEnd(p)
		p, err = c.startRun(c.ledger, runOpts{})
		if err != nil {
			return nil, nil, err
		}
	}
	c.mu.Lock()
	c.races = append(c.races, r)
	c.mu.Unlock()
	return p, r, nil
}

// resendCompleted sends again, once race r's run has ended, every
// operation that the run completed while the compaction went first: each
// must be answered as a duplicate. Operations with two payloads are left
// out (which one completed is the audit's to find).
func (c *campaign) resendCompleted(ctx context.Context, r *compactRace, wl *workload, snd *sender) error {
	if r.outcome != raceCompactionFirst {
		return nil
	}
	var bodies []string
	seen := map[string]bool{}
	err := event.ReadLines(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.events", r.run)), func(e event.WorkerEvent) {
		if e.Ev != event.EvComplete || e.Err != "" || seen[e.Key] {
			return
		}
		seen[e.Key] = true
		if o := c.opByID(wl, e.Key); o != nil && o.class != classConflict {
			r.resent = append(r.resent, e.Key)
			bodies = append(bodies, o.body)
		}
	})
	if err != nil {
		return err
	}
	r.resentAt = time.Now()
	for len(bodies) > 0 {
		n := min(len(bodies), 10)
		if err := snd.sendBatch(ctx, bodies[:n]); err != nil {
			return err
		}
		bodies = bodies[n:]
	}
	c.logf("sent again the %d operations that run %d completed after the compaction", len(r.resent), r.run)
	return nil
}

// racePhase judges the compaction races from the ledger at the end and the
// downstream's executions: every operation resent after a run that started
// during a compaction must be complete, and must not have run again.
func racePhase(races []*compactRace, state func(key string) string, execs map[string][]event.Execution) phaseResult {
	r := phaseResult{name: "compaction racing a restart", ok: true}
	counts := map[string]int{}
	var problems []string
	resent, notComplete, ranAgain, waited := 0, 0, 0, 0
	var opens []string
	for _, rc := range races {
		counts[rc.outcome]++
		switch rc.outcome {
		case raceBroken, raceUnknown:
			problems = append(problems, fmt.Sprintf("run %d: %s", rc.run, rc.detail))
		case raceCompactionFirst:
			opens = append(opens, fmt.Sprintf("%dms", rc.opened.Milliseconds()))
			if rc.opened >= lockWaited {
				waited++
			}
		}
		for _, key := range rc.resent {
			resent++
			if s := state(key); s != "complete" {
				notComplete++
				if len(problems) < 10 {
					problems = append(problems, fmt.Sprintf("%s, completed by run %d after the compaction: %s in the ledger", key, rc.run, s))
				}
			}
			for _, e := range execs[key] {
				if e.Status == http200 && e.T > rc.resentAt.UnixNano() {
					ranAgain++
					if len(problems) < 10 {
						problems = append(problems, fmt.Sprintf("%s, completed by run %d after the compaction, ran again (execution %d, run %d)", key, rc.run, e.Seq, e.Run))
					}
					break
				}
			}
		}
	}
	r.detail = fmt.Sprintf("%d races: %d %s (the worker opened the compacted file in %s; %d of them waited for the compaction's lock), %d %s, %d %s; %d operations completed by the workers that started during a compaction, sent again: %d not complete in the ledger, %d ran again",
		len(races), counts[raceCompactionFirst], raceCompactionFirst, strings.Join(opens, ", "), waited, counts[raceWorkerFirst], raceWorkerFirst,
		counts[raceWorkerRefused], raceWorkerRefused, resent, notComplete, ranAgain)
	switch {
	case len(problems) > 0:
		r.ok = false
		r.detail += ": " + strings.Join(problems, "; ")
	case counts[raceCompactionFirst] == 0:
		r.ok = false
		r.detail += ": the compaction never went first, so no worker started during one"
	case resent == 0:
		r.ok = false
		r.detail += ": the workers that started during a compaction completed nothing"
	}
	return r
}

// holdPhase sums up the holds of the ledger socket.
func holdPhase(holds []readerHold) phaseResult {
	r := phaseResult{name: "a reader that stops (ledger socket)", ok: len(holds) > 0}
	var parts []string
	for _, h := range holds {
		ok, d := h.ok()
		if !ok {
			r.ok = false
			d = "FAILED: " + d
		}
		parts = append(parts, d)
	}
	if len(holds) == 0 {
		parts = append(parts, "no hold was made")
	}
	r.detail = strings.Join(parts, "; ")
	return r
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
