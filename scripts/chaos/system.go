package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// Worker timing, the same for every run.
const (
	workerVisibility     = 5 * time.Second
	workerGrace          = 5 * time.Second
	workerHandlerTimeout = 10 * time.Second
	termTimeout          = 60 * time.Second // a drained worker exits within this
	// pauseFor is how long a paused worker stays stopped: longer than its
	// leases and visibility timeouts, so that they lapse while its work
	// is in flight.
	pauseFor = workerVisibility + 2*time.Second
	// mainShare is the part of the timeline over which the main sending
	// goes: the last runs still get work.
	mainShare = 0.97
)

// The shared ledger's table, and the bound of each attempt of a worker's
// call to it: the workers find out within it that the database is gone.
const (
	sharedTable         = "chaos_operations"
	sharedLedgerTimeout = 3 * time.Second
)

// env is one campaign while it runs: its system and what happened to it.
type env struct {
	*engine
	c                       *Campaign
	name, dir, runsDir      string
	crashLog, ledger        string // the crash log of its runs; its bbolt file
	queue, dlq, pgURL       string // pgURL: the workers' connection string, through the proxy
	rng                     *rand.Rand
	rngMu, mu               sync.Mutex
	faultMu                 sync.Mutex // one fault of the database or stop of a worker at a time
	pg                      *pgCluster
	pgOffset                time.Duration // PostgreSQL's clock against this host's, measured at its start
	proxy                   *tcpProxy
	world                   *world
	wl                      *workload
	snd                     *sender
	tl                      *timeline
	tmp                     *tmpfs
	lastApplied             map[string]time.Time
	elapsed                 time.Duration
	quiet                   bool
	planned, loadOps        int
	nextID, extraN          int
	judges                  []Check
	procs, finals           []*proc // what happened, under mu:
	cur                     *proc
	pauses, aimed, doubleTs int
	inHand                  map[string]int // key -> run killed while the downstream served it
	inTx                    []inTxKill
	paused                  map[int][]window
	outages, downs          []*outage // of the database, of the downstream
	forgets                 []forgetRec
	rounds                  []replayRound
	phases, holds           []phaseResult
	races                   []*compactRace
	notes                   []string
}

// window is a span of time.
type window struct{ from, to time.Time }

func (g *engine) newEnv(c *Campaign) (*env, error) {
	e := &env{engine: g, c: c, name: c.Name, dir: filepath.Join(g.dir, c.Name), rng: rand.New(rand.NewPCG(g.cfg.Seed, seedOf(c.Name, 0))),
		inHand: map[string]int{}, paused: map[int][]window{}, tl: &timeline{}}
	e.runsDir, e.crashLog, e.ledger = filepath.Join(e.dir, "runs"), filepath.Join(e.dir, "crash.log"), filepath.Join(e.dir, "ledger", "ledger.db")
	for _, d := range []string{e.runsDir, filepath.Dir(e.ledger)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "%7.1fs  %s: %s\n", time.Since(e.started).Seconds(), e.name, fmt.Sprintf(format, args...))
}

// note records a finding of the orchestration: each one fails the campaign.
func (e *env) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	e.mu.Lock()
	e.notes = append(e.notes, s)
	e.mu.Unlock()
	e.logf("FINDING: %s", s)
}

// intN draws from the campaign's random numbers, which its workers' runs
// share.
func (e *env) intN(n int) int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.IntN(n)
}

// workerArgs are the chaos worker's arguments for run id on the bbolt
// ledger at path or the shared one.
func (e *env) workerArgs(id int, path string) []string {
	s := e.c.System
	c := event.WorkerConfig{Run: id, Endpoint: e.cfg.Endpoint, Queue: e.queue, Ledger: path, Dir: e.runsDir, CrashLog: e.crashLog,
		Seed: e.cfg.Seed*1000 + uint64(id), Rates: s.Rates, Concurrency: s.Concurrency, Visibility: workerVisibility, Grace: workerGrace,
		HandlerTimeout: workerHandlerTimeout, Broken: e.cfg.Broken, Downstream: e.world.url + "/op", Flow: s.Flow}
	if s.Postgres {
		c.Ledger, c.Postgres, c.Table, c.LedgerTimeout = "", fmt.Sprintf("%s&application_name=chaosworker-%d", e.pgURL, id), sharedTable, sharedLedgerTimeout
	}
	if s.Tx != nil {
		tx := *s.Tx
		tx.Effects, tx.Control, c.Tx, c.Downstream = txEffectsTable, e.world.url, &tx, ""
	}
	b, _ := json.Marshal(c)
	return []string{"-config", string(b)}
}

// startOn starts a worker run on the bbolt ledger at path; a run that must
// be refused (side) does not become the current one.
func (e *env) startOn(path string, side bool) (*proc, error) {
	e.mu.Lock()
	e.nextID++
	id := e.nextID
	e.mu.Unlock()
	p, err := startProc(id, e.workerBin, e.workerArgs(id, path), filepath.Join(e.runsDir, fmt.Sprintf("run-%d.log", id)))
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.procs = append(e.procs, p)
	if side {
		p.signal = endRefused
	} else {
		e.cur = p
	}
	return p, nil
}

// start starts the next worker run. On the shared ledger it waits until
// the run opened the ledger: a worker cannot start while the database is
// out of reach (postgres.Open fails and it exits 3, as sqsonce run would),
// so such a start is counted as refused and made again a second later, as
// a service manager would, for 2 minutes at most.
func (e *env) start(ctx context.Context) (*proc, error) {
	if !e.c.System.Postgres {
		return e.startOn(e.ledger, false)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; sleepCtx(ctx, time.Second) {
		p, err := e.startOn("", false)
		if err != nil {
			return nil, err
		}
		waitFor(ctx, 45*time.Second, func() bool { return p.outputHas("ledger opened in") || !p.alive() })
		killed, code := p.exit()
		if p.alive() || ctx.Err() != nil || killed || code != 3 || !p.outputHas(ledger.ErrUnavailable.Error()) {
			return p, ctx.Err() // drive and checkEnd tell
		}
		p.setSignal(endRefused)
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no worker could open the shared ledger for 2 minutes: %s", tailFile(p.out, 2))
		}
		e.logf("run %d could not open the ledger, the database out of reach: starting another in 1s", p.id)
	}
}

// stopRun drains a run with SIGTERM and checks that it exits 0 in time.
func (e *env) stopRun(ctx context.Context, p *proc) {
	if p == nil {
		return
	}
	p.term()
	if p.wait(ctx, termTimeout) {
		e.checkEnd(p)
		return
	}
	if ctx.Err() == nil {
		e.note("run %d did not exit within %v of SIGTERM; killed", p.id, termTimeout)
	}
	p.kill(endKill)
	p.wait(ctx, 10*time.Second)
}

// checkEnd notes a run that ended in a way nobody asked for.
func (e *env) checkEnd(p *proc) {
	for _, bad := range []string{"DATA RACE", "panic:", "fatal error:"} {
		if p.outputHas(bad) {
			e.note("run %d output has %q:\n%s", p.id, bad, tailFile(p.out, 40))
			return
		}
	}
	if end := e.endOf(p); end == endFailed {
		killed, code := p.exit()
		e.note("run %d ended unexpectedly (killed %v, exit code %d, signal sent %q):\n%s", p.id, killed, code, p.signal, tailFile(p.out, 20))
	}
}

// endOf says how run p ended, as the report counts it.
func (e *env) endOf(p *proc) string {
	killed, code := p.exit()
	p.mu.Lock()
	sig := p.signal
	p.mu.Unlock()
	switch {
	case sig == endRefused:
		return endRefused
	case killed && (sig == endKill || sig == endInHandler || sig == endInTx):
		return sig
	case killed:
		w := ""
		_ = event.ReadLines(e.crashLog, func(cr event.Crash) {
			if cr.Run == p.id {
				w = cr.Window
			}
		})
		switch w {
		case event.WindowA:
			return endWindowA
		case event.WindowB:
			return endWindowB
		}
	case sig == endTerm && code == 0:
		return endTerm
	}
	return endFailed
}

// counts reads run id's latest counters.
func (e *env) counts(id int) event.Counts {
	var out event.Counts
	if b, err := os.ReadFile(filepath.Join(e.runsDir, fmt.Sprintf("run-%d.counts", id))); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// alive returns the runs alive now.
func (e *env) alive() []*proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*proc
	for _, p := range e.procs {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// createQueues creates the campaign's queue and its dead-letter queue.
func (e *env) createQueues(ctx context.Context) error {
	name, suffix := fmt.Sprintf("chaos-%s-%d-%s", e.name, e.cfg.Seed, strconv.FormatInt(time.Now().UnixNano(), 36)), ""
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(workerVisibility / time.Second))}
	if e.c.System.FIFO {
		suffix, attrs["FifoQueue"] = ".fifo", "true"
	}
	d, err := e.admin.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq" + suffix), Attributes: attrs})
	if err != nil {
		return fmt.Errorf("create the dead-letter queue: %w", err)
	}
	e.dlq = aws.ToString(d.QueueUrl)
	ga, err := e.admin.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, ga.Attributes["QueueArn"], e.c.System.MaxReceive)
	q, err := e.admin.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + suffix), Attributes: attrs})
	if err != nil {
		return fmt.Errorf("create the queue: %w", err)
	}
	e.queue = aws.ToString(q.QueueUrl)
	e.logf("queue %s, dead-letter queue %s (maxReceiveCount %d)", e.queue, e.dlq, e.c.System.MaxReceive)
	return nil
}

// startDatabase starts the campaign's PostgreSQL cluster and the proxy in
// front of it, creates the ledger's table (and the effects table of the
// transactional handlers), and sets the workers' connection string:
// through the proxy, with a pool of a few connections more than the
// handlers, which may each hold one for their transaction.
func (e *env) startDatabase(ctx context.Context) (err error) {
	if e.pg, err = startPGCluster(ctx, e.c.System.ClockOffset); err != nil {
		return err
	}
	if e.c.System.ClockOffset != 0 {
		if e.pgOffset, err = e.pg.clockOffset(ctx); err != nil {
			return fmt.Errorf("read PostgreSQL's clock: %w", err)
		}
		e.logf("database: PostgreSQL's clock is %+.1fs from this host's (set %+v)", e.pgOffset.Seconds(), e.c.System.ClockOffset)
	}
	direct, pool := pgURL(e.pg.addr()), 8
	if e.proxy, err = newTCPProxy(e.pg.addr()); err == nil {
		err = postgres.Init(ctx, postgres.Options{URL: direct, Table: sharedTable})
	}
	if e.c.System.Tx != nil && err == nil {
		pool, err = pool+e.c.System.Concurrency, createEffects(ctx, direct)
	}
	if err != nil {
		return err
	}
	e.pgURL = pgURL(e.proxy.addr()) + "&pool_max_conns=" + strconv.Itoa(pool)
	e.logf("database: PostgreSQL at %s, the workers through the proxy at %s", e.pg.addr(), e.proxy.addr())
	return nil
}

// writeCLIConfig writes the configuration file of the sqsonce commands
// that the faults run on the bbolt ledger (replay, ledger export, compact
// and forget).
func (e *env) writeCLIConfig() error {
	cfg := fmt.Sprintf("[queue]\nurl = %q\nregion = %q\nendpoint = %q\n\n[key]\nfrom = \"body\"\npointer = \"/id\"\n\n[ledger]\npath = %q\n\n[handler]\ntype = \"http\"\nurl = %q\n",
		e.queue, sqstest.Region, e.cfg.Endpoint, e.ledger, e.world.url+"/op")
	return os.WriteFile(filepath.Join(e.dir, "sqsonce.toml"), []byte(cfg), 0o644)
}

// cli returns the command `sqsonce SUB --config FILE ARGS`, with the
// campaign's configuration file, in the campaign's environment without any SQSONCE_ setting that
// would override the file, and with static AWS credentials for the local
// server.
func (e *env) cli(ctx context.Context, sub string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.cliBin, append(append(strings.Fields(sub), "--config", filepath.Join(e.dir, "sqsonce.toml")), args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQSONCE_") && !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AWS_ACCESS_KEY_ID=chaos", "AWS_SECRET_ACCESS_KEY=chaos", "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1")
	return cmd
}

// queueCounts returns visible and in-flight (or delayed) messages of url.
func (e *env) queueCounts(ctx context.Context, url string) (int, int, error) {
	out, err := e.admin.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, 0, err
	}
	v, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	f, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	d, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)])
	return v, f + d, nil
}

// cleanup stops whatever of the campaign still runs.
func (e *env) cleanup() {
	e.mu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		if p.alive() {
			p.kill(endKill)
			p.wait(context.Background(), 5*time.Second)
		}
	}
	if e.proxy != nil {
		e.proxy.close()
	}
	if e.pg != nil {
		// Its log goes with the work directory, which is kept when the
		// campaign fails.
		e.pg.remove(filepath.Join(e.dir, "postgres.log"))
	}
	if err := e.tmp.unmount(); err != nil {
		e.logf("unmount %s: %v", e.tmp.dir, err)
	}
}

// deleteQueues deletes the campaign's queues (once no campaign runs: the
// local server may not survive a queue deleted under others' requests).
func (e *env) deleteQueues() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []string{e.queue, e.dlq} {
		if q != "" {
			_, _ = e.admin.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		}
	}
}
