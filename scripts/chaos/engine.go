package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// Config is what every campaign of a run shares.
type Config struct {
	Endpoint string // the local SQS-compatible server (loopback)
	Seed     uint64 // everything random derives from it
	Dir      string // work directory; a temporary one when empty
	Keep     bool   // keep the work directory even when every campaign passes
	Race     bool   // build the chaos worker with the race detector
	Broken   string // the chaos worker's -broken mode: a worker that breaks the promise on purpose
	BinDir   string // the chaosworker and sqsonce binaries; built when empty
}

// Campaign is one campaign: what it sends (a workload), what it runs (a
// system), how its worker runs end and what else is done to them
// meanwhile (its faults), and the checks it adds to the one audit.
type Campaign struct {
	Name  string // names its work directory, its part of the report and its checks
	Title string // what it is, for the report
	// After is what it waits for before it starts: the name of another
	// campaign (its end) or of an event that a fault of one signals
	// ("standard/phases"); "" to start at once. An event of a campaign
	// that does not run counts as come.
	After  string
	Load   func(*rand.Rand) *workload
	System System
	Runs   Runs
	Faults []Fault
	Checks []Check
}

// System is what a campaign runs: the queues, the ledger and the workers.
type System struct {
	FIFO       bool // a FIFO queue and a FIFO dead-letter queue
	MaxReceive int  // the queue's maxReceiveCount
	// Postgres: the shared ledger in a PostgreSQL cluster of the campaign's
	// own, behind its TCP proxy; else a bbolt file.
	Postgres    bool
	Tx          *event.TxConfig // transactional handlers (pgtx) on Postgres; nil: the http handler and the downstream
	Workers     int             // chaos workers at once
	Concurrency int             // handlers at once in each
	Rates       sqstest.Rates
	SendLost    float64            // the sender's lost acknowledgements, per send
	Quiesce     time.Duration      // how long the queue may take to empty once everything was sent
	Flow        *worker.FlowConfig // the workers' flow control on the ledger's flow state; nil: the defaults, each in its process
	// ClockOffset sets the PostgreSQL server's clock this far from the
	// hosts' (the workers' and the campaign's), through libfaketime.
	ClockOffset time.Duration
}

// Runs says how each worker's runs end: Ends[kind] runs end each way
// (endWindowA, endKill, endTerm, ...), dealt out to the workers in a
// random order; every worker's planned runs last Duration in all, each a
// random share of it.
type Runs struct {
	Duration time.Duration
	Ends     map[string]int
}

// endKinds orders the kinds of Runs.Ends.
var endKinds = []string{endInTx, endWindowA, endWindowB, endInHandler, endKill, endTerm}

// A Fault places itself in a campaign's plan: on its timeline, between
// runs, at the start of a run or while one lives, or with the last runs;
// it may add a check of its own (env.judge).
type Fault func(p *plan)

// A Check adds a campaign's own figures and checks to its part of the
// report, from the one history.
type Check func(e *env, h *history, s *section)

// action is something a fault does.
type action func(ctx context.Context, e *env) error

// plan is what a campaign does to its workers: for each, its runs in order
// (steps), and the faults on the timeline, after the planned runs and
// while the last runs live.
type plan struct {
	e     *env
	slots [][]*step
	timed [][]timed // each list in order, the lists at once
	after []action  // once the planned runs ended (one worker), before the last one starts
	final []action  // while the last runs live, in order
}

// timed is an action at a point of the timeline (0 to 1).
type timed struct {
	at float64
	do action
}

// step is one planned worker run.
type step struct {
	end    string        // how it is to end
	dur    time.Duration // how long after its start (and its during) the campaign ends it
	double bool          // endTerm: a second SIGTERM a second after the first
	held   bool          // a reader holds its ledger socket (Holds)
	extra  time.Duration // planned time of its during faults, on the timeline
	gap    time.Duration // planned time of its before faults, on the timeline
	before []action      // before it starts, with no worker running (one worker)
	start  func(ctx context.Context, e *env) (*proc, error)
	during []func(ctx context.Context, e *env, p *proc) error // once it started, in order, before its countdown
	after  []action                                           // once it ended
}

// steps returns every step of the plan.
func (p *plan) steps() []*step {
	var out []*step
	for _, s := range p.slots {
		out = append(out, s...)
	}
	return out
}

// spread returns n points of the timeline spread evenly between from and to.
func spread(n int, from, to float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = from + (to-from)*(float64(i)+0.5)/float64(n)
	}
	return out
}

// engine is one run of the harness: the campaigns and what they share.
type engine struct {
	cfg               Config
	log               io.Writer
	dir               string
	started           time.Time
	workerBin, cliBin string
	admin             *sqs.Client

	events map[string]*barrier // what campaigns wait for, by name
}

// barrier is something a campaign may wait for: another campaign's end,
// or what a fault of one signals.
type barrier struct {
	done chan struct{}
	once sync.Once
}

// signal marks the event name as come.
func (g *engine) signal(name string) {
	if ev := g.events[name]; ev != nil {
		ev.once.Do(func() { close(ev.done) })
	}
}

// Run runs the campaigns, each once what it waits for has come, writes
// the report's table to out and the progress to log (and to progress.log
// in the work directory), and returns the report. A report may come with
// an error: then it is the part that was done.
func Run(ctx context.Context, cfg Config, campaigns []*Campaign, out, log io.Writer) (*Report, error) {
	if u, err := url.Parse(cfg.Endpoint); err != nil || u.Scheme != "http" || !loopback.IsHost(u.Hostname()) {
		return nil, fmt.Errorf("SQS endpoint %q: the campaigns only talk to a server on a loopback address (set %s; make chaos does)", cfg.Endpoint, sqstest.EndpointEnv)
	}
	g := &engine{cfg: cfg, started: time.Now(), dir: cfg.Dir, events: map[string]*barrier{}, workerBin: filepath.Join(cfg.BinDir, "chaosworker"), cliBin: filepath.Join(cfg.BinDir, "sqsonce")}
	var err error
	if g.dir == "" {
		g.dir, err = os.MkdirTemp("", "sqsonce-chaos-")
	}
	var progress *os.File
	if err == nil {
		if err = os.MkdirAll(g.dir, 0o755); err == nil {
			progress, err = os.OpenFile(filepath.Join(g.dir, progressFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		}
	}
	if err != nil {
		return nil, err
	}
	defer progress.Close()
	g.log = &logWriter{dst: log, file: progress}
	if cfg.BinDir == "" {
		fmt.Fprintf(g.log, "building the chaos worker and sqsonce (race detector: %v)\n", g.cfg.Race)
		if g.workerBin, g.cliBin, err = buildBinaries(ctx, filepath.Join(g.dir, "bin"), cfg.Race, g.log); err != nil {
			return nil, err
		}
	}
	g.admin = newSQSClient(cfg.Endpoint, &http.Client{Transport: loopbackTransport(), Timeout: 30 * time.Second})
	for _, c := range campaigns {
		g.events[c.Name], g.events[c.Name+"/phases"] = &barrier{done: make(chan struct{})}, &barrier{done: make(chan struct{})}
	}
	sections, envs, errs := make([]*section, len(campaigns)), make([]*env, len(campaigns)), make([]error, len(campaigns))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range campaigns {
		wg.Go(func() {
			defer g.signal(c.Name + "/phases")
			defer g.signal(c.Name)
			if ev := g.events[c.After]; ev != nil { // what none of these campaigns makes has come
				select {
				case <-ev.done:
				case <-ctx.Done():
					errs[i] = ctx.Err()
					return
				}
			}
			if envs[i], errs[i] = g.newEnv(c); errs[i] == nil {
				sections[i], errs[i] = envs[i].run(ctx)
				envs[i].cleanup()
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("campaign %s: %w", c.Name, errs[i])
				cancel() // the others end early too: the run is void
			}
		})
	}
	wg.Wait()
	rep := &Report{Elapsed: time.Since(g.started)}
	for i, e := range envs {
		if e != nil {
			e.deleteQueues()
		}
		if sections[i] != nil {
			rep.Sections = append(rep.Sections, sections[i])
		}
	}
	err = errors.Join(errs...)
	rep.print(out)
	if err == nil && rep.OK() && !cfg.Keep && cfg.Dir == "" {
		os.RemoveAll(g.dir)
		return rep, nil
	}
	last, werr := rep.write(g.dir, err)
	if werr != nil {
		fmt.Fprintf(g.log, "chaos: write the report into %s: %v\n", g.dir, werr)
	}
	fmt.Fprintln(g.log, last)
	return rep, err
}

// seedOf derives a campaign's stream of random numbers from its name.
func seedOf(name string, k uint64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() + k
}

// newSQSClient makes the campaign's SQS clients, with the fix every SQS
// client of this module needs (sqsclient.InMemoryBodies): without it an
// answer can be lost to a race in net/http, and the SDK retries a call
// that took effect (a receive's messages stay hidden for its visibility
// timeout).
func newSQSClient(endpoint string, hc *http.Client) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       sqstest.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
	}, sqsclient.InMemoryBodies)
}

func loopbackTransport() *http.Transport {
	tr := loopback.Transport()
	tr.MaxIdleConnsPerHost = 64
	return tr
}

// timeline tracks how far a campaign has come, as a fraction of its planned
// length: each run of its first worker is a segment of planned length, and
// time inside a segment counts up to that length. The sending and the
// faults on the timeline follow it, so that every run has work to do and
// every fault comes while runs live, even when one takes longer than
// planned.
type timeline struct {
	mu       sync.Mutex
	total    time.Duration
	done     time.Duration
	segStart time.Time
	segDur   time.Duration
}

func (t *timeline) segment(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done += t.segDur
	t.segStart, t.segDur = time.Now(), d
}

func (t *timeline) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done, t.segDur = t.total, 0
}

func (t *timeline) fraction() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.done + min(max(time.Since(t.segStart), 0), t.segDur)
	return float64(e) / float64(max(t.total, 1))
}

// waitUntil waits until the timeline reaches at, or ctx ends.
func (t *timeline) waitUntil(ctx context.Context, at float64) bool {
	for t.fraction() < at && ctx.Err() == nil {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return ctx.Err() == nil
}

// waitFor polls cond every 200 ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); sleepCtx(ctx, 200*time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
	}
	return true
}
