package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// FIFOConfig sizes the FIFO campaign, which runs beside the standard one
// on queues, a ledger, a downstream and worker runs of its own.
type FIFOConfig struct {
	Ops      int           // operations; 0: no FIFO campaign
	Groups   int           // message groups of the ordinary operations
	Bursts   int           // bursts: runs of 4-8 operations of one group sent together, two slow ones among them
	Duration time.Duration // the planned length of its worker runs, while its workload is sent
	Replays  int           // replay rounds through `sqsonce replay`, the worker stopped
	Kills    int           // SIGKILLs of its worker: at random and in the windows around a completion
	Terms    int           // SIGTERM drains of its worker
	Pauses   int           // SIGSTOPs, longer than the leases, of a worker run
	Forgets  int           // records of operations waiting in a worker's hands forgotten (sqsonce ledger forget)
	// Shared is the FIFO campaign's part on a shared ledger (see
	// fifoshared.go), after the other campaigns on PostgreSQL; Ops 0: none.
	Shared SharedConfig
}

// fifoMaxReceiveCount is the FIFO queue's maxReceiveCount: small, so that
// SQS's own redrive moves messages too.
const fifoMaxReceiveCount = 4

// fifoLateAge is how long after payload a of a late conflict was applied
// its payloads b and c are sent.
const fifoLateAge = 2 * time.Second

// fifoCampaign makes the FIFO campaign that runs beside c: its own work
// directory (fifo/ in c's), ledger, downstream and worker runs; the same
// binaries, log and SQS server.
func (c *campaign) fifoCampaign() (*campaign, error) {
	f := &campaign{
		cfg:       c.cfg,
		name:      "fifo",
		log:       c.log,
		rng:       rand.New(rand.NewPCG(c.cfg.Seed, 0xf1f0)),
		inHand:    map[string]int{},
		started:   c.started,
		dir:       filepath.Join(c.dir, "fifo"),
		admin:     c.admin,
		workerBin: c.workerBin,
		downBin:   c.downBin,
		cliBin:    c.cliBin,
		// Its pauses find messages waiting.
		waitingPauses: true,
	}
	f.runsDir = filepath.Join(f.dir, "runs")
	f.crashLog = filepath.Join(f.dir, "crash.log")
	f.ledger = filepath.Join(f.dir, "ledger", "ledger.db")
	for _, d := range []string{f.runsDir, filepath.Dir(f.ledger)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// runFIFO runs the FIFO campaign: a FIFO queue with a FIFO dead-letter
// queue, several message groups, a workload of duplicates, transient and
// permanent failures, conflicting payloads (also after their key
// completed) and keyless messages; the worker killed and drained along the
// way; between runs, replays of the dead-letter queue through the real
// `sqsonce replay`, well within SQS's five-minute deduplication window,
// one of them after the downstream's bug was fixed. At the end it accounts
// for every message sent and checks the order of every group.
func (c *campaign) runFIFO(ctx context.Context) (*fifoReport, error) {
	fc := c.cfg.FIFO
	c.logf("FIFO campaign: %d operations in %d groups over %v, %d replays, %d kills, %d drains",
		fc.Ops, fc.Groups, fc.Duration, fc.Replays, fc.Kills, fc.Terms)
	if err := c.createFIFOQueues(ctx); err != nil {
		return nil, err
	}
	var err error
	c.downstream, c.downURL, err = startDownstream(ctx, c.downBin, c.dir, "")
	if err != nil {
		return nil, err
	}
	if err := c.writeCLIConfig(); err != nil {
		return nil, err
	}
	wl := newFIFOWorkload(rand.New(rand.NewPCG(c.cfg.Seed, 3)), fc.Ops, fc.Groups, fc.Bursts)
	snd := newFIFOSender(c.cfg.Endpoint, c.queue, c.cfg.Seed+7, c.cfg.SendLost)
	c.logf("workload: %d operations, %d messages planned (%d sent after their key completed), %d bursts", len(wl.ops), len(wl.main)+len(wl.late), len(wl.late), wl.bursts)

	steps := c.fifoPlan()
	var planned time.Duration
	for _, s := range steps {
		planned += s.dur
		if s.pauseAt > 0 {
			planned += s.pauseAt + pauseFor
		}
	}
	c.tl = &timeline{total: planned} // the sending follows the runs as planned
	start := time.Now()
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	sendDone := make(chan error, 1)
	go func() { sendDone <- c.sendFIFO(sendCtx, snd, wl) }()
	// Half the forgets come during the runs, the rest in the last run,
	// which lives until the queue is empty: the operation whose record it
	// forgot is sure to come to its turn in that run's hands (unless one
	// ahead of it fails).
	forgetCtx, stopForgets := context.WithCancel(ctx)
	defer stopForgets()
	forgetsDone := make(chan struct{})
	go func() {
		defer close(forgetsDone)
		c.forgetSome(forgetCtx, fc.Forgets/2)
	}()

	// Replay rounds between runs, the last one after the last run, when
	// nearly everything was sent; the downstream's bug is fixed before the
	// middle one.
	replayBefore := map[int]int{} // step -> replay round run before it
	for k := range fc.Replays - 1 {
		replayBefore[(k+1)*len(steps)/fc.Replays] = k
	}
	if fc.Replays > 0 {
		replayBefore[len(steps)] = fc.Replays - 1
	}
	fixAt := fc.Replays / 2
	var rounds []replayRound
	for i := 0; i <= len(steps); i++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if k, ok := replayBefore[i]; ok {
			rounds = append(rounds, c.replayRound(ctx, snd, k, k == fixAt))
		}
		if i == len(steps) {
			break
		}
		s := steps[i]
		if s.pauseAt > 0 {
			c.tl.segment(s.pauseAt + pauseFor + s.dur)
		} else {
			c.tl.segment(s.dur)
		}
		p, err := c.startRun(c.ledger, runOpts{})
		if err != nil {
			return nil, err
		}
		c.drive(ctx, p, s)
	}
	c.tl.finish()
	stopForgets()
	<-forgetsDone
	// A last worker, killed no more, while the late conflicts are sent and
	// until the queue is empty.
	if _, err := c.startRun(c.ledger, runOpts{}); err != nil {
		return nil, err
	}
	lastCtx, stopLastForgets := context.WithCancel(ctx)
	defer stopLastForgets()
	lastForgets := make(chan struct{})
	go func() {
		defer close(lastForgets)
		for range fc.Forgets - fc.Forgets/2 {
			c.forgetWaiting(lastCtx)
		}
	}()
	defer func() { stopLastForgets(); <-lastForgets }()
	var sendErr error
	select {
	case sendErr = <-sendDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if sendErr != nil {
		return nil, fmt.Errorf("sending: %w", sendErr)
	}
	c.logf("sending done: %d messages sent", len(snd.sent))
	quiet, qerr := c.waitQuiet(ctx)
	<-lastForgets
	c.mu.Lock()
	last := c.cur
	c.mu.Unlock()
	c.stopRun(ctx, last)
	if qerr != nil {
		return nil, qerr
	}
	if !quiet {
		c.note("the queue did not empty within %v after sending ended", c.cfg.Quiesce)
	}
	c.downstream.term()
	if !c.downstream.wait(ctx, 15*time.Second) {
		c.note("the downstream did not stop on SIGTERM")
		c.downstream.kill(endKill, "")
		c.downstream.wait(ctx, 5*time.Second)
	}
	elapsed := time.Since(start)
	c.logf("auditing")
	return c.auditFIFO(ctx, wl, snd, rounds, elapsed, quiet)
}

func (c *campaign) createFIFOQueues(ctx context.Context) error {
	name := fmt.Sprintf("chaos-%d-%s", c.cfg.Seed, strconv.FormatInt(time.Now().UnixNano(), 36))
	vis := strconv.Itoa(int(workerVisibility / time.Second))
	d, err := c.admin.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq.fifo"), Attributes: map[string]string{
		"FifoQueue": "true", "VisibilityTimeout": vis,
	}})
	if err != nil {
		return fmt.Errorf("create the FIFO dead-letter queue: %w", err)
	}
	c.dlq = aws.ToString(d.QueueUrl)
	ga, err := c.admin.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, ga.Attributes["QueueArn"], fifoMaxReceiveCount)
	q, err := c.admin.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + ".fifo"), Attributes: map[string]string{
		"FifoQueue": "true", "VisibilityTimeout": vis, "RedrivePolicy": policy,
	}})
	if err != nil {
		return fmt.Errorf("create the FIFO queue: %w", err)
	}
	c.queue = aws.ToString(q.QueueUrl)
	c.logf("queue %s, dead-letter queue %s (maxReceiveCount %d)", c.queue, c.dlq, fifoMaxReceiveCount)
	return nil
}

// cliConfig is the configuration file of the sqsonce command that replays.
func (c *campaign) cliConfig() string { return filepath.Join(c.dir, "sqsonce.toml") }

func (c *campaign) writeCLIConfig() error {
	cfg := fmt.Sprintf(`# The configuration with which the campaign runs sqsonce replay.
[queue]
url = %q
region = %q
endpoint = %q

[key]
from = "body"
pointer = "/id"

[ledger]
path = %q

[handler]
type = "http"
url = %q
`, c.queue, sqstest.Region, c.cfg.Endpoint, c.ledger, c.downURL+"/op")
	return os.WriteFile(c.cliConfig(), []byte(cfg), 0o644)
}

// killsAndDrains returns the ends of kills runs killed (a third in window
// a, a third in window b, the rest at random) and of terms runs drained.
func killsAndDrains(kills, terms int) []string {
	var ends []string
	for i := range kills {
		switch {
		case i < (kills+2)/3:
			ends = append(ends, endWindowA)
		case i < (kills+2)/3+(kills+1)/3:
			ends = append(ends, endWindowB)
		default:
			ends = append(ends, endKill)
		}
	}
	for range terms {
		ends = append(ends, endTerm)
	}
	return ends
}

// fifoPlan draws the FIFO campaign's worker runs: Kills kills (at random,
// in window a, in window b) and Terms drains in random order, at least as
// many runs as replay rounds, each a random share of Duration.
func (c *campaign) fifoPlan() []step {
	fc := c.cfg.FIFO
	ends := killsAndDrains(fc.Kills, fc.Terms)
	for len(ends) < fc.Replays {
		ends = append(ends, endTerm)
	}
	c.rng.Shuffle(len(ends), func(i, j int) { ends[i], ends[j] = ends[j], ends[i] })
	per := fc.Duration / time.Duration(len(ends))
	steps := make([]step, len(ends))
	for i, e := range ends {
		steps[i] = step{end: e, dur: per/2 + time.Duration(c.rng.Int64N(int64(per)))}
		steps[i].double = e == endTerm && c.rng.IntN(2) == 0
	}
	for _, i := range c.rng.Perm(len(steps))[:min(fc.Pauses, len(steps))] {
		steps[i].pauseAt = time.Second + time.Duration(c.rng.Int64N(int64(2*time.Second)))
	}
	return steps
}

// sendFIFO sends the main part of the workload, paced by the timeline,
// and each late conflict's payloads b and c once its payload a was applied
// a while ago (or at the end).
func (c *campaign) sendFIFO(ctx context.Context, s *fifoSender, wl *fifoWorkload) error {
	pending := map[string][]*fifoSend{}
	for _, l := range wl.late {
		pending[l.op.id] = append(pending[l.op.id], l)
	}
	next := 0
	var lastPoll time.Time
	for {
		for next < len(wl.main) && c.tl.fraction() >= mainShare*float64(next)/float64(len(wl.main)) {
			if b := wl.main[next].burst; b != 0 {
				// A burst leaves whole, once its first message is due.
				end := next
				for end < len(wl.main) && wl.main[end].burst == b {
					end++
				}
				if err := s.sendBatch(ctx, wl.main[next:end]); err != nil {
					return err
				}
				next = end
				continue
			}
			if err := s.send(ctx, wl.main[next]); err != nil {
				return err
			}
			next++
		}
		last := next == len(wl.main) && c.tl.fraction() >= 1
		if len(pending) > 0 && (last || time.Since(lastPoll) > 500*time.Millisecond) {
			lastPoll = time.Now()
			applied, err := c.applied(ctx)
			if err != nil {
				return err
			}
			for _, o := range wl.ops {
				ls, ok := pending[o.id]
				if !ok {
					continue
				}
				if t, done := applied[o.id]; !last && (!done || time.Since(t) < fifoLateAge) {
					continue
				}
				delete(pending, o.id)
				for _, l := range ls {
					if err := s.send(ctx, l); err != nil {
						return err
					}
				}
			}
		}
		if next == len(wl.main) && len(pending) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// replayRound is one run of `sqsonce replay` and what it said.
type replayRound struct {
	Round   int           `json:"round"`
	Fixed   bool          `json:"fixed"` // the downstream's bug was fixed just before
	Exit    int           `json:"exit"`
	Summary replayCounts  `json:"summary"`
	Err     string        `json:"error,omitempty"` // a failure to run it or to read its summary
	Start   time.Time     `json:"start"`           // before its first copy was sent
	Took    time.Duration `json:"took_ns"`
}

// replayCounts is the part of replay's --json summary that the campaign
// reads.
type replayCounts struct {
	Moved             int64 `json:"moved"`
	SkippedComplete   int64 `json:"skipped_complete"`
	SkippedKeyless    int64 `json:"skipped_keyless"`
	SkippedMaxReplays int64 `json:"skipped_max_replays"`
	SkippedFiltered   int64 `json:"skipped_filtered"`
	Reset             int64 `json:"reset"`
	Failed            int64 `json:"failed"`
	DeleteFailed      int64 `json:"delete_failed"`
}

// replayRound runs `sqsonce replay` from the dead-letter queue to the
// queue with the worker stopped (the chaos worker does not serve its
// ledger's socket, so replay opens the file) and nothing being sent, so
// that every replayed copy enters its group after everything sent before
// and before everything sent after.
func (c *campaign) replayRound(ctx context.Context, snd *fifoSender, k int, fix bool) replayRound {
	snd.mu.Lock()
	defer snd.mu.Unlock()
	r := replayRound{Round: k + 1, Fixed: fix}
	if fix {
		if err := c.downstreamPost(ctx, "/fix"); err != nil {
			c.note("replay round %d: fix the downstream: %v", r.Round, err)
		}
	}
	// The audit places every copy sent from here on in this round: after
	// every message sent before, before every message sent after.
	r.Start = time.Now()
	logPath := filepath.Join(c.dir, fmt.Sprintf("replay-%d.log", r.Round))
	logFile, err := os.Create(logPath)
	if err != nil {
		r.Err = err.Error()
		c.note("replay round %d: %v", r.Round, err)
		return r
	}
	defer logFile.Close()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, c.cliBin, "replay", "--config", c.cliConfig(), "--from", c.dlq, "--to", c.queue, "--json", "--log-level", "info")
	cmd.Env = cliEnv()
	cmd.Stdout = &stdout
	cmd.Stderr = logFile
	t0 := time.Now()
	err = cmd.Run()
	r.Took = time.Since(t0)
	r.Exit = -1
	if cmd.ProcessState != nil {
		r.Exit = cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		r.Err = err.Error()
	} else if jerr := json.Unmarshal(stdout.Bytes(), &r.Summary); jerr != nil {
		r.Err = fmt.Sprintf("exit %d, no summary on standard output (%v): %s", r.Exit, jerr, tailFile(logPath, 5))
	}
	s := r.Summary
	switch {
	case r.Err != "":
		c.note("replay round %d: %s", r.Round, r.Err)
	case r.Exit == 0, r.Exit == 1 && s.Failed+s.DeleteFailed > 0:
		// 1: some messages could not be moved and are still in the
		// dead-letter queue; the summary counts them.
	default:
		c.note("replay round %d: exit %d: %s", r.Round, r.Exit, tailFile(logPath, 5))
	}
	fixed := ""
	if fix {
		fixed = " (the downstream's bug fixed just before)"
	}
	c.logf("replay round %d%s: exit %d in %.1fs: moved %d, reset %d, left %d complete, %d keyless, %d replayed too often; failed %d, sent but not deleted %d",
		r.Round, fixed, r.Exit, r.Took.Seconds(), s.Moved, s.Reset, s.SkippedComplete, s.SkippedKeyless, s.SkippedMaxReplays, s.Failed, s.DeleteFailed)
	return r
}

// cliEnv is the environment of the sqsonce command: the campaign's, without
// any SQSONCE_ setting that would override its configuration file, and
// with static AWS credentials for the local server.
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SQSONCE_") || strings.HasPrefix(kv, "AWS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "AWS_ACCESS_KEY_ID=chaos", "AWS_SECRET_ACCESS_KEY=chaos", "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1")
}
