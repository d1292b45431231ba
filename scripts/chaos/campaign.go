package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// Config sizes a campaign.
type Config struct {
	Endpoint    string        // the local SQS-compatible server (loopback)
	Seed        uint64        // everything random derives from it
	Ops         int           // operations
	Deliveries  int           // deliveries planned (lost acknowledgements add more)
	Duration    time.Duration // the chaos timeline: worker runs and ledger phases, while the workload is sent
	Kills       int           // SIGKILLs of the worker (all kinds)
	Pauses      int           // SIGSTOPs, longer than the leases, of a worker run
	Terms       int           // SIGTERMs of the worker (drains)
	Rates       sqstest.Rates // faults per SQS request of the worker
	SendLost    float64       // rate of lost acknowledgements of the sender's sends
	Quiesce     time.Duration // how long the queue may take to empty after sending
	Dir         string        // work directory; a temporary one when empty
	Keep        bool          // keep the work directory even when the campaign passes
	BinDir      string        // the chaosworker and downstream binaries; built when empty
	Race        bool          // build the binaries with the race detector
	Concurrency int           // worker handler concurrency
	Holds       int           // worker runs whose ledger socket a reader holds and stops reading
	Hold        time.Duration // how long each of them holds it
	Races       int           // compactions started together with a worker run
	FIFO        FIFOConfig    // the FIFO campaign beside the standard one
	FIFOOnly    bool          // run the FIFO campaign alone
	Shared      SharedConfig  // the shared-ledger campaign beside the standard one
	Tx          TxConfig      // the transactional campaign, after the shared-ledger one
	TxOnly      bool          // run the transactional campaign alone
}

// FullConfig is `make chaos`.
func FullConfig() Config {
	return Config{
		Seed:        1,
		Ops:         10000,
		Deliveries:  30000,
		Duration:    240 * time.Second,
		Kills:       32,
		Pauses:      6,
		Terms:       6,
		Rates:       sqstest.Rates{Throttle: 0.02, ServerError: 0.02, Timeout: 0.003, Reset: 0.02, LostAck: 0.02},
		SendLost:    0.03,
		Quiesce:     3 * time.Minute,
		Concurrency: 32,
		Holds:       2,
		Hold:        15 * time.Second,
		Races:       6,
		FIFO: FIFOConfig{Ops: 1500, Groups: 12, Bursts: 60, Duration: 160 * time.Second, Replays: 4, Kills: 12, Terms: 3, Pauses: 2, Forgets: 6,
			Shared: SharedConfig{Workers: 3, Ops: 600, Groups: 6, Bursts: 30, Duration: 75 * time.Second, Kills: 6, Terms: 3, Pauses: 4,
				Stalls: 2, StallFor: 8 * time.Second, Stops: 1, StopFor: 8 * time.Second, Refusals: 1, RefuseFor: 6 * time.Second, Cuts: 1, Concurrency: 8}},
		Shared: SharedConfig{Workers: 3, Ops: 3000, Deliveries: 9000, Duration: 150 * time.Second, Kills: 24, Terms: 6,
			Stops: 3, StopFor: 8 * time.Second, Refusals: 3, RefuseFor: 6 * time.Second, Cuts: 4, Concurrency: 16},
		Tx: TxConfig{Workers: 3, Ops: 2000, Deliveries: 6000, Duration: 90 * time.Second, Kills: 9, InTx: 9, Terms: 3,
			Stops: 2, StopFor: 8 * time.Second, Refusals: 1, RefuseFor: 6 * time.Second, Cuts: 2, LostCommits: 24,
			Concurrency: 8, HoldShare: 0.08, Hold: 200 * time.Millisecond, PanicShare: 0.03, WritesShare: 0.4},
	}
}

// ShortConfig is the short form run by TestChaosShort.
func ShortConfig() Config {
	return Config{
		Seed:        1,
		Ops:         500,
		Deliveries:  1500,
		Duration:    32 * time.Second,
		Kills:       8,
		Pauses:      1,
		Terms:       2,
		Rates:       sqstest.Rates{Throttle: 0.03, ServerError: 0.03, Timeout: 0.005, Reset: 0.03, LostAck: 0.03},
		SendLost:    0.05,
		Quiesce:     90 * time.Second,
		Concurrency: 16,
		Holds:       1,
		Hold:        6 * time.Second,
		Races:       2,
		FIFO: FIFOConfig{Ops: 150, Groups: 4, Bursts: 3, Duration: 16 * time.Second, Replays: 2, Kills: 3, Terms: 1, Forgets: 2,
			Shared: SharedConfig{Workers: 2, Ops: 50, Groups: 3, Bursts: 2, Duration: 10 * time.Second, Kills: 1, Terms: 1, Pauses: 1,
				Stalls: 1, StallFor: 7 * time.Second, Concurrency: 8}},
		Shared: SharedConfig{Workers: 3, Ops: 300, Deliveries: 900, Duration: 24 * time.Second, Kills: 6, Terms: 2,
			Stops: 1, StopFor: 7 * time.Second, Refusals: 1, RefuseFor: 6 * time.Second, Cuts: 1, Concurrency: 8},
		Tx: TxConfig{Workers: 3, Ops: 200, Deliveries: 600, Duration: 20 * time.Second, Kills: 3, InTx: 3, Terms: 1,
			Stops: 1, StopFor: 6 * time.Second, Cuts: 1, LostCommits: 6,
			Concurrency: 8, HoldShare: 0.1, Hold: 200 * time.Millisecond, PanicShare: 0.05, WritesShare: 0.4},
	}
}

// Worker timing, the same for every run.
const (
	workerVisibility     = 5 * time.Second
	workerGrace          = 5 * time.Second
	workerHandlerTimeout = 10 * time.Second
	maxReceiveCount      = 5
	termTimeout          = 60 * time.Second // a drained worker exits within this
	refuseTimeout        = 15 * time.Second // a worker that must not start exits within this
)

// How many operations of their own the ledger phases send: the reader
// that stops (holdOps), the compaction races (raceOps), and the others
// each time they need work (phaseOpsEach).
const (
	raceOps      = 15
	phaseOpsEach = 20
)

// The planned length of the ledger fault phases on the timeline.
const (
	phaseSecond   = 4 * time.Second
	phaseFull     = 12 * time.Second
	phaseReadOnly = 6 * time.Second
	phaseBudget   = phaseSecond + phaseFull + phaseReadOnly
	// mainShare is the part of the timeline over which the main phase of
	// the workload is sent: the last run still gets work.
	mainShare = 0.97
)

// timeline tracks how far the chaos has come, as a fraction of its planned
// length: each worker run and each phase is a segment of planned length,
// and time inside a segment counts up to that length. The senders follow
// it, so that every run and phase has work to do even when one takes
// longer than planned.
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
	return float64(e) / float64(t.total)
}

// campaign is one run of the harness: the standard campaign, or the FIFO
// campaign that runs beside it (name "fifo") on queues, a ledger, a
// downstream and worker runs of its own.
type campaign struct {
	cfg      Config
	name     string // "" for the standard campaign; prefixes its log lines
	log      io.Writer
	rng      *rand.Rand
	dir      string
	runsDir  string
	crashLog string
	ledger   string // the ledger on disk
	tmp      *tmpfs

	admin      *sqs.Client
	queue      string
	dlq        string
	workerBin  string
	downBin    string
	cliBin     string // sqsonce: replay, ledger export and compact
	downURL    string
	control    string
	downstream *proc

	tl *timeline // how far the chaos has come: the sending follows it

	fifo *campaign // the FIFO campaign beside this one, or nil
	// fifoShared is the FIFO campaign's part on a shared ledger, after the
	// other campaigns on PostgreSQL, or nil.
	fifoShared *campaign
	shared     *campaign // the shared-ledger campaign beside this one, or nil
	tx         *campaign // the transactional campaign after the shared-ledger one, or nil

	// The shared-ledger campaign's database, the proxy in front of it and
	// the connection string its workers use; the outages made so far; the
	// last run of each worker, killed no more.
	pg          *pgCluster
	proxy       *tcpProxy
	pgWorkerURL string
	outs        []*outage
	finals      []*proc
	// The transactional campaign's effects table ("" in the others: their
	// workers call the downstream), the runs armed to be killed inside
	// their next held transaction, and those killed there.
	effects     string
	txArmed     map[int]bool
	inTx        []inTxKill
	appliedConn *pgx.Conn            // the sender's connection for applied, or nil
	lastApplied map[string]time.Time // what applied last read
	// phasesDone is closed once the ledger fault phases are over (or will
	// not come): the FIFO campaign starts then, so that its load does not
	// weigh on the phases' waits.
	phasesDone chan struct{}
	phasesOver func()

	pauses, doubleTerms int // done, for the report
	// aimedPauses counts the pauses that found messages waiting behind a
	// running one (waitingPauses).
	aimedPauses int
	// waitingPauses: a pause waits for its run to keep messages waiting
	// behind a running one of their group (the FIFO campaigns).
	waitingPauses bool
	// faults, when not nil, holds one token while a fault of the shared
	// ledger's campaign is on: an outage of the database, or a worker's
	// pause; they come one at a time.
	faults chan struct{}
	// paused holds when each run was stopped (SIGSTOP), by run.
	paused map[int][]window
	// forgets are the records of operations waiting in a worker's hands
	// that the campaign forgot (sqsonce ledger forget).
	forgets []forgetRec

	// The standard campaign's workload and sender, for the operations it
	// sends again after a compaction race, and the operations its phases
	// sent of their own (phaseWork).
	wl       *workload
	snd      *sender
	phaseOps []*op
	// outageWork, when not nil, sends a little work of the outage's own,
	// for the workers to show that they receive again after it;
	// fifoExtra holds the FIFO operations it sent.
	outageWork func(context.Context) error
	fifoExtra  []*fifoOp

	rngMu sync.Mutex // rng, when several workers' runs are driven at once

	mu      sync.Mutex
	cur     *proc
	procs   []*proc
	nextID  int
	inHand  map[string]int // key -> run, for kills in a handler
	phases  []phaseResult
	holds   []readerHold   // a reader that stops
	races   []*compactRace // a compaction racing a restart
	notes   []string       // findings of the orchestration (unexpected exits, ...)
	started time.Time
}

// phaseResult is the outcome of a ledger fault phase.
type phaseResult struct {
	name   string
	ok     bool
	detail string
}

func (c *campaign) logf(format string, args ...any) {
	prefix := ""
	if c.name != "" {
		prefix = c.name + ": "
	}
	fmt.Fprintf(c.log, "%7.1fs  %s%s\n", time.Since(c.started).Seconds(), prefix, fmt.Sprintf(format, args...))
}

func (c *campaign) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.notes = append(c.notes, s)
	c.mu.Unlock()
	c.logf("FINDING: %s", s)
}

// Run runs a campaign and writes its report table to out, progress to log.
func Run(ctx context.Context, cfg Config, out, log io.Writer) (*Report, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("no SQS endpoint: set " + sqstest.EndpointEnv + " (make chaos does)")
	}
	if u, err := url.Parse(cfg.Endpoint); err != nil || u.Scheme != "http" || !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("SQS endpoint %q: the campaign only talks to a server on a loopback address", cfg.Endpoint)
	}
	if cfg.FIFOOnly && cfg.FIFO.Ops == 0 {
		return nil, errors.New("the FIFO campaign alone, with no operations")
	}
	if cfg.FIFOOnly && cfg.FIFO.Duration <= 0 {
		return nil, errors.New("the FIFO campaign needs a duration")
	}
	if fs := cfg.FIFO.Shared; cfg.FIFO.Ops > 0 && fs.Ops > 0 && (fs.Duration <= 0 || fs.Workers < 2 || fs.Groups < 1) {
		return nil, errors.New("the FIFO campaign's part on a shared ledger needs a duration, two workers or more and a message group")
	}
	if cfg.FIFOOnly && cfg.TxOnly {
		return nil, errors.New("the FIFO campaign alone and the transactional campaign alone: choose one")
	}
	if cfg.TxOnly && (cfg.Tx.Ops == 0 || cfg.Tx.Duration <= 0) {
		return nil, errors.New("the transactional campaign alone needs operations and a duration")
	}
	if fixed := phaseBudget + time.Duration(cfg.Holds)*cfg.Hold; !cfg.FIFOOnly && !cfg.TxOnly && cfg.Duration <= fixed+time.Second {
		return nil, fmt.Errorf("duration %v: want more than the %v that the ledger phases and the holds of the ledger socket take", cfg.Duration, fixed+time.Second)
	}
	c := &campaign{cfg: cfg, log: log, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), inHand: map[string]int{}, started: time.Now(), tl: &timeline{total: cfg.Duration}}
	dir := cfg.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sqsonce-chaos-"); err != nil {
			return nil, err
		}
	}
	c.dir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	progress, err := os.OpenFile(filepath.Join(dir, progressFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer progress.Close()
	lw := &logWriter{dst: log, file: progress}
	c.log = lw
	c.runsDir = filepath.Join(dir, "runs")
	c.crashLog = filepath.Join(dir, "crash.log")
	c.ledger = filepath.Join(dir, "ledger", "ledger.db")
	for _, d := range []string{c.runsDir, filepath.Dir(c.ledger)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	rep, err := c.run(ctx)
	c.cleanup()
	if rep != nil {
		rep.print(out)
	}
	if err == nil && rep != nil && rep.OK() && !cfg.Keep && cfg.Dir == "" {
		os.RemoveAll(dir)
		return rep, nil
	}
	c.mu.Lock()
	notes := append([]string(nil), c.notes...)
	fifo, fifoShared, shared, tx := c.fifo, c.fifoShared, c.shared, c.tx
	c.mu.Unlock()
	for _, o := range []struct {
		c    *campaign
		name string
	}{{fifo, "FIFO"}, {fifoShared, "FIFO shared"}, {shared, "shared"}, {tx, "tx"}} {
		if o.c == nil {
			continue
		}
		o.c.mu.Lock()
		for _, n := range o.c.notes {
			notes = append(notes, o.name+": "+n)
		}
		o.c.mu.Unlock()
	}
	if werr := writeReport(dir, rep, err, notes); werr != nil {
		fmt.Fprintf(lw, "chaos: write the report into %s: %v\n", dir, werr)
	}
	fmt.Fprintln(lw, keptLine(dir, rep, err))
	return rep, err
}

func (c *campaign) cleanup() {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	fifo, fifoShared, shared, tx, pg := c.fifo, c.fifoShared, c.shared, c.tx, c.pg
	c.mu.Unlock()
	for _, o := range []*campaign{fifo, fifoShared, shared, tx} {
		if o != nil {
			o.cleanup()
		}
	}
	for _, p := range procs {
		if p.alive() {
			p.kill(endKill, "")
			p.wait(context.Background(), 5*time.Second)
		}
	}
	if c.downstream != nil && c.downstream.alive() {
		c.downstream.term()
		if !c.downstream.wait(context.Background(), 10*time.Second) {
			c.downstream.kill(endKill, "")
		}
	}
	if c.proxy != nil {
		c.proxy.close()
	}
	if pg != nil {
		// Its log goes with the work directory, which is kept when the
		// campaign fails.
		pg.remove(filepath.Join(c.dir, "postgres.log"))
	}
	if err := c.tmp.unmount(); err != nil {
		fmt.Fprintf(c.log, "chaos: unmount %s: %v\n", c.tmp.dir, err)
	}
	if c.admin != nil && c.queue != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, q := range []string{c.queue, c.dlq} {
			_, _ = c.admin.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		}
	}
}

// run runs the standard campaign and, beside it, the FIFO campaign, the
// shared-ledger campaign and after that the transactional one, and returns
// their report. A report may come with an error: then it is the part that
// was done.
func (c *campaign) run(ctx context.Context) (*Report, error) {
	cfg := c.cfg
	withFIFO := cfg.FIFO.Ops > 0
	if withFIFO && cfg.FIFO.Duration <= 0 {
		return nil, errors.New("the FIFO campaign needs a duration")
	}

	// Binaries.
	if cfg.BinDir == "" {
		bin := filepath.Join(c.dir, "bin")
		c.logf("building the chaos worker, the downstream and sqsonce (race detector: %v)", cfg.Race)
		w, d, cli, err := buildBinaries(ctx, bin, cfg.Race, c.log)
		if err != nil {
			return nil, err
		}
		c.workerBin, c.downBin, c.cliBin = w, d, cli
	} else {
		c.workerBin, c.downBin, c.cliBin = filepath.Join(cfg.BinDir, "chaosworker"), filepath.Join(cfg.BinDir, "downstream"), filepath.Join(cfg.BinDir, "sqsonce")
	}
	c.admin = newSQSClient(cfg.Endpoint, &http.Client{Transport: loopbackTransport(), Timeout: 30 * time.Second})

	type fifoOutcome struct {
		rep *fifoReport
		err error
	}
	var fifoDone chan fifoOutcome
	fifoCtx, stopFIFO := context.WithCancel(ctx)
	defer stopFIFO()
	c.phasesDone = make(chan struct{})
	c.phasesOver = sync.OnceFunc(func() { close(c.phasesDone) })
	if cfg.FIFOOnly || cfg.TxOnly {
		c.phasesOver()
	}
	withFIFO = withFIFO && !cfg.TxOnly
	if withFIFO {
		f, err := c.fifoCampaign()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.fifo = f
		c.mu.Unlock()
		fifoDone = make(chan fifoOutcome, 1)
		go func() {
			select {
			case <-c.phasesDone:
			case <-fifoCtx.Done():
				fifoDone <- fifoOutcome{nil, fifoCtx.Err()}
				return
			}
			r, err := f.runFIFO(fifoCtx)
			fifoDone <- fifoOutcome{r, err}
		}()
	}

	withShared := cfg.Shared.Ops > 0 && !cfg.FIFOOnly && !cfg.TxOnly
	type sharedOutcome struct {
		rep *Report
		err error
	}
	var sharedDone chan sharedOutcome
	sharedOver := make(chan struct{}) // closed once the shared-ledger campaign is over (or will not come)
	sharedCtx, stopShared := context.WithCancel(ctx)
	defer stopShared()
	if withShared {
		s, err := c.sharedCampaign()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.shared = s
		c.mu.Unlock()
		sharedDone = make(chan sharedOutcome, 1)
		go func() {
			r, err := s.runShared(sharedCtx)
			close(sharedOver)
			sharedDone <- sharedOutcome{r, err}
		}()
	} else {
		close(sharedOver)
	}

	// The transactional campaign comes after the shared-ledger one, while
	// the standard campaign still runs: two campaigns of three workers on
	// PostgreSQL at once would weigh on each other's waits.
	withTx := cfg.Tx.Ops > 0 && !cfg.FIFOOnly
	type txOutcome struct {
		rep *txReport
		err error
	}
	var txDone chan txOutcome
	txCtx, stopTx := context.WithCancel(ctx)
	defer stopTx()
	txOver := make(chan struct{}) // closed once the transactional campaign is over (or will not come)
	if !withTx {
		go func() { <-sharedOver; close(txOver) }()
	}
	if withTx {
		t, err := c.txCampaign()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.tx = t
		c.mu.Unlock()
		txDone = make(chan txOutcome, 1)
		go func() {
			defer close(txOver)
			select {
			case <-sharedOver:
			case <-txCtx.Done():
				txDone <- txOutcome{nil, txCtx.Err()}
				return
			}
			r, err := t.runTx(txCtx)
			txDone <- txOutcome{r, err}
		}()
	}

	// The FIFO campaign's part on a shared ledger comes after the other
	// campaigns on PostgreSQL, for the same reason.
	withFIFOShared := withFIFO && cfg.FIFO.Shared.Ops > 0
	type fifoSharedOutcome struct {
		rep *fifoReport
		err error
	}
	var fifoSharedDone chan fifoSharedOutcome
	fifoSharedCtx, stopFIFOShared := context.WithCancel(ctx)
	defer stopFIFOShared()
	if withFIFOShared {
		f, err := c.fifoSharedCampaign()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.fifoShared = f
		c.mu.Unlock()
		fifoSharedDone = make(chan fifoSharedOutcome, 1)
		go func() {
			select {
			case <-txOver:
			case <-fifoSharedCtx.Done():
				fifoSharedDone <- fifoSharedOutcome{nil, fifoSharedCtx.Err()}
				return
			}
			r, err := f.runFIFOShared(fifoSharedCtx)
			fifoSharedDone <- fifoSharedOutcome{r, err}
		}()
	}

	rep := &Report{}
	var err error
	if !cfg.FIFOOnly && !cfg.TxOnly {
		rep, err = c.standard(ctx)
	}
	if withFIFO {
		if err != nil {
			stopFIFO()
		}
		fo := <-fifoDone
		if fo.err != nil && err == nil {
			err = fmt.Errorf("the FIFO campaign: %w", fo.err)
		}
		if rep != nil {
			rep.FIFO = fo.rep
		}
	}
	if withShared {
		if err != nil {
			stopShared()
		}
		so := <-sharedDone
		if so.err != nil && err == nil {
			err = fmt.Errorf("the shared-ledger campaign: %w", so.err)
		}
		if rep != nil {
			rep.Shared = so.rep
		}
	}
	if withTx {
		if err != nil {
			stopTx()
		}
		to := <-txDone
		if to.err != nil && err == nil {
			err = fmt.Errorf("the transactional campaign: %w", to.err)
		}
		if rep != nil {
			rep.Tx = to.rep
		}
	}
	if withFIFOShared {
		if err != nil {
			stopFIFOShared()
		}
		fo := <-fifoSharedDone
		if fo.err != nil && err == nil {
			err = fmt.Errorf("the FIFO campaign on a shared ledger: %w", fo.err)
		}
		if rep != nil {
			rep.FIFOShared = fo.rep
		}
	}
	return rep, err
}

// standard runs the standard campaign.
func (c *campaign) standard(ctx context.Context) (*Report, error) {
	defer c.phasesOver()
	cfg := c.cfg
	c.logf("campaign: %d operations, about %d deliveries over %v, %d kills, %d drains, seed %d", cfg.Ops, cfg.Deliveries, cfg.Duration, cfg.Kills, cfg.Terms, cfg.Seed)

	// The tmpfs first: without root there is no campaign.
	tmp, err := mountTmpfs(filepath.Join(c.dir, "tmpfs"), 64)
	if err != nil {
		return nil, err
	}
	c.tmp = tmp

	// Queues.
	if err := c.createQueues(ctx); err != nil {
		return nil, err
	}

	// The control listener (kills in a handler) and the downstream.
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
	// sqsonce ledger export and compact read this.
	if err := c.writeCLIConfig(); err != nil {
		return nil, err
	}

	// The workload.
	wl := newWorkload(rand.New(rand.NewPCG(cfg.Seed, 1)), cfg.Ops, cfg.Deliveries)
	snd := newSender(cfg.Endpoint, c.queue, cfg.Seed, cfg.SendLost)
	c.wl, c.snd = wl, snd
	c.logf("workload: %d operations, %d deliveries planned (%d keyless), %d units in the main phase", len(wl.ops), wl.planned(), len(wl.keyless), len(wl.main))

	start := time.Now()
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	sendDone := make(chan error, 1)
	go func() { sendDone <- c.send(sendCtx, snd, wl) }()

	// The worker runs: kills, drains and the ledger fault phases, while the
	// senders send.
	if err := c.chaos(ctx); err != nil {
		return nil, err
	}
	// A last worker, killed no more, while the late sends finish and until
	// the queue is empty.
	if _, err := c.startRun(c.ledger, runOpts{}); err != nil {
		return nil, err
	}
	var sendErr error
	select {
	case sendErr = <-sendDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if sendErr != nil {
		return nil, fmt.Errorf("sending: %w", sendErr)
	}
	c.logf("sending done: %d deliveries acknowledged to the sender, %d accepted by the server", snd.sent.Load(), snd.accepted.Load())

	quiet, qerr := c.waitQuiet(ctx)
	c.mu.Lock()
	last := c.cur
	c.mu.Unlock()
	c.stopRun(ctx, last)
	if qerr != nil {
		return nil, qerr
	}
	if !quiet {
		c.note("the queue did not empty within %v after sending ended", cfg.Quiesce)
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
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = 64
	return tr
}

func (c *campaign) createQueues(ctx context.Context) error {
	name := fmt.Sprintf("chaos-%d-%s", c.cfg.Seed, strconv.FormatInt(time.Now().UnixNano(), 36))
	vis := strconv.Itoa(int(workerVisibility / time.Second))
	d, err := c.admin.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq"), Attributes: map[string]string{"VisibilityTimeout": vis}})
	if err != nil {
		return fmt.Errorf("create the dead-letter queue: %w", err)
	}
	c.dlq = aws.ToString(d.QueueUrl)
	ga, err := c.admin.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, ga.Attributes["QueueArn"], maxReceiveCount)
	q, err := c.admin.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": vis, "RedrivePolicy": policy}})
	if err != nil {
		return fmt.Errorf("create the queue: %w", err)
	}
	c.queue = aws.ToString(q.QueueUrl)
	c.logf("queue %s, dead-letter queue %s (maxReceiveCount %d)", c.queue, c.dlq, maxReceiveCount)
	return nil
}

// send sends the main phase, paced by the timeline, and meanwhile the late
// deliveries: resends of operations the downstream applied a while ago
// (they must be suppressed by the ledger, not run again), the conflicting
// payloads once their first payload was applied, and more keyless
// messages.
func (c *campaign) send(ctx context.Context, s *sender, wl *workload) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mainDone := make(chan error, 1)
	go func() {
		mainDone <- s.runMain(ctx, wl.main, func(i int) bool {
			return c.tl.fraction() >= mainShare*float64(i)/float64(len(wl.main))
		})
	}()
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 2))
	minAge := max(c.cfg.Duration/12, 4*time.Second)
	pending := map[string]*op{}
	for _, o := range wl.ops {
		if o.late || o.class == classConflict {
			pending[o.id] = o
		}
	}
	keyless := wl.lateKeyless
	var mainErr error
	main := mainDone
	for round := 0; len(pending) > 0 || len(keyless) > 0 || main != nil; round++ {
		select {
		case mainErr = <-main:
			if mainErr != nil {
				return mainErr
			}
			main = nil
		default:
		}
		last := main == nil && (c.tl.fraction() >= 1 || round > 100000)
		applied, err := c.applied(ctx)
		if err != nil {
			return err
		}
		var bodies []string
		for id, o := range pending {
			t, ok := applied[id]
			if !last && (!ok || time.Since(t) < minAge) {
				continue
			}
			delete(pending, id)
			if o.class == classConflict {
				bodies = append(bodies, o.bodyB)
			} else {
				bodies = append(bodies, o.body)
			}
		}
		if len(keyless) > 0 && (last || rng.IntN(8) == 0) {
			bodies = append(bodies, keyless[0])
			keyless = keyless[1:]
		}
		for len(bodies) > 0 {
			n := min(len(bodies), 10)
			if err := s.sendBatch(ctx, bodies[:n]); err != nil {
				return err
			}
			bodies = bodies[n:]
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return nil
}

// applied asks the downstream which operations it applied, and when (in
// the transactional campaign, the effects table: appliedRows).
func (c *campaign) applied(ctx context.Context) (map[string]time.Time, error) {
	if c.effects != "" {
		return c.appliedRows(ctx), nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.downURL+"/applied", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask the downstream what it applied: %w", err)
	}
	defer resp.Body.Close()
	var list []struct {
		ID string `json:"id"`
		T  int64  `json:"t"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(list))
	for _, a := range list {
		out[a.ID] = time.Unix(0, a.T)
	}
	return out, nil
}

// runOpts are the per-run settings of a worker.
type runOpts struct {
	crashAAt, crashBAt int64
	lockTimeout        time.Duration
}

func (c *campaign) workerArgs(id int, ledgerPath string, o runOpts) []string {
	r := c.cfg.Rates
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	args := []string{
		"-run", strconv.Itoa(id),
		"-endpoint", c.cfg.Endpoint,
		"-queue", c.queue,
		"-dir", c.runsDir,
		"-crash-log", c.crashLog,
		"-seed", strconv.FormatUint(c.cfg.Seed*1000+uint64(id), 10),
		"-throttle", f(r.Throttle), "-server-error", f(r.ServerError), "-timeout", f(r.Timeout),
		"-reset", f(r.Reset), "-lost-ack", f(r.LostAck),
		"-concurrency", strconv.Itoa(c.cfg.Concurrency),
		"-visibility", workerVisibility.String(),
		"-grace", workerGrace.String(),
		"-handler-timeout", workerHandlerTimeout.String(),
	}
	if c.pgWorkerURL != "" {
		args = append(args, "-postgres", c.pgWorkerURL, "-table", sharedTable, "-ledger-timeout", sharedLedgerTimeout.String())
	} else {
		args = append(args, "-ledger", ledgerPath)
	}
	if c.effects != "" {
		tx := c.cfg.Tx
		args = append(args, "-pgtx", "-effects", c.effects, "-control", c.control,
			"-tx-hold-share", f(tx.HoldShare), "-tx-hold", tx.Hold.String(), "-tx-panic-share", f(tx.PanicShare),
			"-tx-writes-share", f(tx.WritesShare))
	} else {
		args = append(args, "-downstream", c.downURL+"/op")
	}
	if o.crashAAt > 0 {
		args = append(args, "-crash-a-at", strconv.FormatInt(o.crashAAt, 10))
	}
	if o.crashBAt > 0 {
		args = append(args, "-crash-b-at", strconv.FormatInt(o.crashBAt, 10))
	}
	if o.lockTimeout > 0 {
		args = append(args, "-lock-timeout", o.lockTimeout.String())
	}
	return args
}

// startRun starts the next worker run on ledgerPath and makes it current.
func (c *campaign) startRun(ledgerPath string, o runOpts) (*proc, error) {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	p, err := startProc(id, c.workerBin, c.workerArgs(id, ledgerPath, o), filepath.Join(c.runsDir, fmt.Sprintf("run-%d.log", id)), ledgerPath)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.cur = p
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// startSide starts a worker that is not the current run (it must be
// refused) and returns it.
func (c *campaign) startSide(ledgerPath string) (*proc, error) {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	p, err := startProc(id, c.workerBin, c.workerArgs(id, ledgerPath, runOpts{}), filepath.Join(c.runsDir, fmt.Sprintf("run-%d.log", id)), ledgerPath)
	if err != nil {
		return nil, err
	}
	p.signal = endRefused
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// stopRun drains a run with SIGTERM and checks that it exits 0 in time.
func (c *campaign) stopRun(ctx context.Context, p *proc) {
	p.term()
	if !p.wait(ctx, termTimeout) {
		if ctx.Err() == nil {
			c.note("run %d did not exit within %v of SIGTERM; killed", p.id, termTimeout)
		}
		p.kill(endKill, "")
		p.wait(ctx, 10*time.Second)
		return
	}
	c.checkEnd(p)
}

// checkEnd notes a run that ended in a way nobody asked for.
func (c *campaign) checkEnd(p *proc) {
	killed, code := p.exit()
	p.mu.Lock()
	sig := p.signal
	p.mu.Unlock()
	for _, bad := range []string{"DATA RACE", "panic:", "fatal error:"} {
		if p.outputHas(bad) {
			c.note("run %d output has %q:\n%s", p.id, bad, p.tail(40))
			return
		}
	}
	switch {
	case sig == endRefused:
	case killed && (sig == endKill || sig == endInHandler || sig == endInTx):
	case killed && c.crashed(p.id) != "":
	case !killed && code == 0 && sig == endTerm:
	default:
		c.note("run %d ended unexpectedly (killed %v, exit code %d, signal sent %q):\n%s", p.id, killed, code, sig, p.tail(20))
	}
}

// crashed returns the window in which run id killed itself, or "".
func (c *campaign) crashed(id int) string {
	w := ""
	_ = event.ReadLines(c.crashLog, func(cr event.Crash) {
		if cr.Run == id {
			w = cr.Window
		}
	})
	return w
}

// serveKill is the control endpoint the downstream calls to have the worker
// serving its request killed.
func (c *campaign) serveKill(w http.ResponseWriter, r *http.Request) {
	run, _ := strconv.Atoi(r.URL.Query().Get("run"))
	key := r.URL.Query().Get("key")
	var p *proc
	c.mu.Lock()
	for _, q := range c.procs {
		if q.id == run {
			p = q
		}
	}
	c.mu.Unlock()
	if p == nil || !p.alive() {
		http.Error(w, "no such run alive", http.StatusConflict)
		return
	}
	if p.kill(endInHandler, key) {
		c.mu.Lock()
		c.inHand[key] = run
		c.mu.Unlock()
		if a, err := event.OpenAppender(filepath.Join(c.dir, "kills.log"), true); err == nil {
			_ = a.Append(event.Crash{Run: run, Window: endInHandler, Key: key})
			a.Close()
		}
	}
	p.wait(r.Context(), 10*time.Second)
	w.WriteHeader(http.StatusOK)
}

func (c *campaign) downstreamPost(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.downURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// step is one planned worker run of the chaos phase.
type step struct {
	end     string        // how it is to end
	dur     time.Duration // when the campaign acts (kill, term, arm), after the pause if any
	pauseAt time.Duration // > 0: SIGSTOP this long after the start, for pauseFor
	double  bool          // endTerm: a second SIGTERM a second after the first
}

// pauseFor is how long a paused worker stays stopped: longer than its
// leases and visibility timeouts, so that they lapse while its work is in
// flight.
const pauseFor = workerVisibility + 2*time.Second

// plan draws the runs of the chaos phase: Kills kills of four kinds and
// Terms drains, in random order, each run a random share of the sending
// time.
func (c *campaign) plan() []step {
	var ends []string
	k := c.cfg.Kills
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
	for range c.cfg.Terms {
		ends = append(ends, endTerm)
	}
	c.rng.Shuffle(len(ends), func(i, j int) { ends[i], ends[j] = ends[j], ends[i] })
	per := (c.cfg.Duration - phaseBudget - time.Duration(c.cfg.Holds)*c.cfg.Hold) / time.Duration(len(ends))
	steps := make([]step, len(ends))
	for i, e := range ends {
		steps[i] = step{end: e, dur: per/2 + time.Duration(c.rng.Int64N(int64(per)))}
		steps[i].double = e == endTerm && c.rng.IntN(2) == 0
	}
	for _, i := range c.rng.Perm(len(steps))[:min(c.cfg.Pauses, len(steps))] {
		steps[i].pauseAt = time.Second + time.Duration(c.rng.Int64N(int64(2*time.Second)))
	}
	return steps
}

// chaos runs the planned worker runs and, a third of the way in, the ledger
// fault phases; some runs start together with a compaction, and in some
// later ones a reader holds the ledger socket.
func (c *campaign) chaos(ctx context.Context) error {
	steps := c.plan()
	phasesAt := len(steps) / 3
	holdAt, raceAt := c.planEmbedded(len(steps), phasesAt)
	races := 0
	for i, s := range steps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if i == phasesAt {
			if err := c.ledgerPhases(ctx); err != nil {
				return err
			}
			c.phasesOver()
		}
		seg := s.dur
		if s.pauseAt > 0 {
			seg += s.pauseAt + pauseFor
		}
		if holdAt[i] {
			seg += c.cfg.Hold
		}
		c.tl.segment(seg)
		var p *proc
		var race *compactRace
		var err error
		if raceAt[i] {
			p, race, err = c.raceCompaction(ctx, races)
			races++
			if err == nil {
				// Work for the run that started with the compaction,
				// which its race is judged by.
				_, err = c.phaseWork(ctx, "race", raceOps)
			}
		} else {
			p, err = c.startRun(c.ledger, runOpts{})
		}
		if err != nil {
			return err
		}
		if holdAt[i] {
			h := c.holdReader(ctx, p, c.cfg.Hold)
			c.mu.Lock()
			c.holds = append(c.holds, h)
			c.mu.Unlock()
		}
		if race != nil && race.outcome == raceCompactionFirst {
			// The race is judged by what this run completes: on a loaded
			// machine its planned time may pass before it completes
			// anything, so give it until it has, within reason.
			waitFor(ctx, raceWorkWait, func() bool { return c.counts(p.id).CompletesOK > 0 })
		}
		c.drive(ctx, p, s)
		if race != nil {
			if err := c.resendCompleted(ctx, race, c.wl, c.snd); err != nil {
				return err
			}
		}
	}
	c.tl.finish()
	return nil
}

// planEmbedded picks the runs in which a reader holds the ledger socket
// (after the ledger phases, when the ledger has grown) and those that
// start together with a compaction (any but the first), never both.
func (c *campaign) planEmbedded(n, phasesAt int) (hold, race map[int]bool) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 4))
	hold, race = map[int]bool{}, map[int]bool{}
	for _, i := range rng.Perm(n - phasesAt) {
		if len(hold) == c.cfg.Holds {
			break
		}
		hold[phasesAt+i] = true
	}
	for _, i := range rng.Perm(n - 1) {
		if len(race) == c.cfg.Races {
			break
		}
		if !hold[i+1] {
			race[i+1] = true
		}
	}
	return hold, race
}

// drive lets run p live for step s and ends it the planned way.
func (c *campaign) drive(ctx context.Context, p *proc, s step) {
	if s.pauseAt > 0 && !p.wait(ctx, s.pauseAt) {
		c.pause(ctx, p)
	}
	switch s.end {
	case endWindowA, endWindowB:
		// Armed part way through its segment, so that work still comes,
		// it kills itself at its next completion; if none comes, the
		// campaign kills it.
		arm := s.dur * time.Duration(40+c.intN(40)) / 100
		if !p.wait(ctx, arm) {
			sig := syscall.SIGUSR1
			if s.end == endWindowB {
				sig = syscall.SIGUSR2
			}
			// Not before the run catches the signal, which it does
			// before it opens its ledger: until then, its default
			// action would end the process.
			waitFor(ctx, 30*time.Second, func() bool { return p.outputHas("ledger opened in") || !p.alive() })
			_ = p.cmd.Process.Signal(sig)
			if !p.wait(ctx, s.dur-arm+10*time.Second) {
				p.kill(endKill, "")
				p.wait(ctx, 10*time.Second)
			}
		}
	case endKill:
		if !p.wait(ctx, s.dur) {
			p.kill(endKill, "")
			p.wait(ctx, 10*time.Second)
		}
	case endInHandler:
		arm := s.dur * time.Duration(40+c.intN(40)) / 100
		if !p.wait(ctx, arm) {
			if err := c.downstreamPost(ctx, "/arm?run="+strconv.Itoa(p.id)); err != nil {
				c.note("arm the downstream: %v", err)
			}
			if !p.wait(ctx, s.dur-arm+10*time.Second) {
				_ = c.downstreamPost(ctx, "/disarm?run="+strconv.Itoa(p.id))
				p.kill(endKill, "")
				p.wait(ctx, 10*time.Second)
			}
		}
	case endInTx:
		// Armed part way through (and told to hold its next attempt's
		// transaction open, SIGWINCH), it is killed inside the transaction
		// of the next attempt that holds it open (serveInTx); if none
		// comes, the campaign kills it.
		arm := s.dur * time.Duration(40+c.intN(40)) / 100
		if !p.wait(ctx, arm) {
			c.armInTx(p.id, true)
			_ = p.cmd.Process.Signal(syscall.SIGWINCH)
			if !p.wait(ctx, s.dur-arm+10*time.Second) {
				c.armInTx(p.id, false)
				p.kill(endKill, "")
				p.wait(ctx, 10*time.Second)
			}
		}
	case endTerm:
		if !p.wait(ctx, s.dur) {
			if s.double {
				p.term()
				if !p.wait(ctx, time.Second) {
					c.mu.Lock()
					c.doubleTerms++
					c.mu.Unlock()
				}
			}
			c.stopRun(ctx, p)
			what := "SIGTERM"
			if s.double {
				what = "SIGTERM twice"
			}
			c.logf("run %d: %s, exit %d after %.1fs", p.id, what, exitCode(p), time.Since(p.started).Seconds())
			return
		}
	}
	c.checkEnd(p)
	c.logf("run %d (planned: %s): %s after %.1fs", p.id, s.end, c.endOf(p), time.Since(p.started).Seconds())
}

// pause stops run p (SIGSTOP) for pauseFor, longer than its leases and
// visibility timeouts, so that they lapse while its work is in flight.
// In a FIFO campaign (waitingPauses) it first waits, for up to
// pauseAimFor, until p keeps messages that wait behind a running one of
// their group (a beat that kept such messages: Stats.GroupWaitBeats), so
// that the stop finds them waiting. On a shared ledger it waits for the
// database's outage in progress, if any, to end first, and holds the next
// one back until a while after p goes on: the other workers must be able
// to take over what p held, and p to find out.
func (c *campaign) pause(ctx context.Context, p *proc) {
	if c.faults != nil {
		select {
		case c.faults <- struct{}{}:
			defer func() {
				sleepCtx(ctx, 2*time.Second)
				<-c.faults
			}()
		case <-ctx.Done():
			return
		}
	}
	aim := ""
	if c.waitingPauses && c.aimAtWaiting(ctx, []*proc{p}) {
		aim = ", while it kept messages waiting behind a running one of their group"
	}
	if !p.alive() || ctx.Err() != nil {
		return
	}
	from := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	sleepCtx(ctx, pauseFor)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	c.mu.Lock()
	c.pauses++
	if aim != "" {
		c.aimedPauses++
	}
	if c.paused == nil {
		c.paused = map[int][]window{}
	}
	c.paused[p.id] = append(c.paused[p.id], window{from: from, to: time.Now()})
	c.mu.Unlock()
	c.logf("run %d: stopped (SIGSTOP) for %v%s, continued", p.id, pauseFor, aim)
}

// pauseAimFor bounds how long a pause or an outage in a FIFO campaign waits
// for a run to keep messages waiting behind a running one.
const pauseAimFor = 10 * time.Second

// aimAtWaiting waits, for up to pauseAimFor, until one of the runs ps, alive,
// keeps messages that wait behind a running one of their group: a beat of
// its keepers kept such messages (its Stats.GroupWaitBeats went up; the
// counters lag by up to 250 ms, the beats come every third of the
// visibility timeout). It reports whether one did.
func (c *campaign) aimAtWaiting(ctx context.Context, ps []*proc) bool {
	before := map[int]int64{}
	for _, p := range ps {
		before[p.id] = c.counts(p.id).Stats.GroupWaitBeats
	}
	found := false
	waitFor(ctx, pauseAimFor, func() bool {
		alive := false
		for _, p := range ps {
			if !p.alive() {
				continue
			}
			alive = true
			if c.counts(p.id).Stats.GroupWaitBeats > before[p.id] {
				found = true
			}
		}
		return found || !alive
	})
	return found
}

// intN draws from c.rng, which the runs of several workers driven at once
// share.
func (c *campaign) intN(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.IntN(n)
}

// endOf says how run p ended, as the report counts it.
func (c *campaign) endOf(p *proc) string {
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
		switch c.crashed(p.id) {
		case "a":
			return endWindowA
		case "b":
			return endWindowB
		}
	case sig == endTerm && code == 0:
		return endTerm
	}
	return endFailed
}

// counts reads run id's latest counters.
func (c *campaign) counts(id int) event.Counts {
	var out event.Counts
	b, err := os.ReadFile(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.counts", id)))
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// waitFor polls cond every 200 ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// ledgerPhases runs the ledger fault phases: a second process on a held
// ledger, a full disk under a running worker, a read-only file system at
// start.
func (c *campaign) ledgerPhases(ctx context.Context) error {
	// 1. A second process on the ledger a worker holds.
	c.tl.segment(phaseSecond)
	p, err := c.startRun(c.ledger, runOpts{})
	if err != nil {
		return err
	}
	if !waitFor(ctx, 10*time.Second, func() bool { return c.counts(p.id).SQSRequests > 0 }) {
		c.note("run %d made no SQS request within 10s of its start", p.id)
	}
	side, err := c.startSide(c.ledger)
	if err != nil {
		return err
	}
	t0 := time.Now()
	ended := side.wait(ctx, refuseTimeout)
	took := time.Since(t0)
	_, code := side.exit()
	r := phaseResult{name: "second process on a held ledger"}
	switch {
	case !ended:
		side.kill(endKill, "")
		r.detail = fmt.Sprintf("still running after %v", refuseTimeout)
	case code == 0:
		r.detail = "exited 0"
	case !side.outputHas("another sqsonce process"):
		r.detail = fmt.Sprintf("exit %d without naming another sqsonce process: %s", code, side.tail(3))
	case !side.outputHas("sqs_requests=0"):
		r.detail = fmt.Sprintf("exit %d but it sent SQS requests: %s", code, side.tail(3))
	case !p.alive():
		r.detail = "the running worker died meanwhile"
	default:
		r.ok = true
		r.detail = fmt.Sprintf("refused in %.1fs, exit %d, no SQS request, the holder unaffected", took.Seconds(), code)
	}
	c.phase(r)
	c.stopRun(ctx, p)

	// 2. A full disk under a running worker.
	c.tl.segment(phaseFull)
	tmpLedger := filepath.Join(c.tmp.dir, "ledger.db")
	if err := copySparse(c.ledger, tmpLedger); err != nil {
		return fmt.Errorf("copy the ledger to the tmpfs: %w", err)
	}
	p, err = c.startRun(tmpLedger, runOpts{})
	if err != nil {
		return err
	}
	// Work before, during and after the full disk: the commits that fail,
	// and those that show the recovery.
	if _, err := c.phaseWork(ctx, "diskfull", phaseOpsEach); err != nil {
		return err
	}
	waitFor(ctx, 10*time.Second, func() bool { return c.counts(p.id).CompletesOK > 0 })
	filler, size, err := c.tmp.fill()
	if err != nil {
		return fmt.Errorf("fill the tmpfs: %w", err)
	}
	full := c.counts(p.id)
	c.logf("disk full: %d MiB filler on the ledger's file system (run %d)", size>>20, p.id)
	if _, err := c.phaseWork(ctx, "diskfull", phaseOpsEach); err != nil {
		return err
	}
	failing := waitFor(ctx, 30*time.Second, func() bool { return c.counts(p.id).CommitErrors > full.CommitErrors })
	sleepCtx(ctx, 3*time.Second)
	during := c.counts(p.id)
	if err := os.Remove(filler); err != nil {
		return err
	}
	// Commits in flight as the disk was freed may still fail, and the
	// counters lag by up to 250 ms: count recovery from a second later.
	sleepCtx(ctx, time.Second)
	freed := c.counts(p.id)
	if _, err := c.phaseWork(ctx, "diskfull", phaseOpsEach); err != nil {
		return err
	}
	recovered := waitFor(ctx, 30*time.Second, func() bool {
		n := c.counts(p.id)
		return n.CompletesOK > freed.CompletesOK+5 && n.CommitErrors == freed.CommitErrors
	})
	after := c.counts(p.id)
	r = phaseResult{name: "disk full during commits"}
	switch {
	case !failing:
		r.detail = "no ledger commit failed while the disk was full: the phase did not bite"
	case !p.alive():
		r.detail = fmt.Sprintf("the worker died: %s", p.tail(5))
	case !recovered:
		r.detail = fmt.Sprintf("no recovery within 30s of freeing the disk (%d commits failed)", after.CommitErrors)
	default:
		r.ok = true
		r.detail = fmt.Sprintf("%d commits failed, %d work done but not recorded (left for redelivery), %d completions while full; recovered",
			after.CommitErrors-full.CommitErrors, after.Stats.CompleteFailed, during.CompletesOK-full.CompletesOK)
	}
	c.phase(r)
	c.stopRun(ctx, p)

	// 3. A read-only file system when a worker starts.
	c.tl.segment(phaseReadOnly)
	if err := c.tmp.readOnly(true); err != nil {
		return err
	}
	side, err = c.startSide(tmpLedger)
	if err != nil {
		return err
	}
	ended = side.wait(ctx, refuseTimeout)
	_, code = side.exit()
	if err := c.tmp.readOnly(false); err != nil {
		return err
	}
	r = phaseResult{name: "read-only ledger at start"}
	switch {
	case !ended:
		side.kill(endKill, "")
		r.detail = fmt.Sprintf("still running after %v", refuseTimeout)
	case code == 0:
		r.detail = "exited 0"
	case !side.outputHas("read-only"):
		r.detail = fmt.Sprintf("exit %d without saying read-only: %s", code, side.tail(3))
	case !side.outputHas("sqs_requests=0"):
		r.detail = fmt.Sprintf("exit %d but it sent SQS requests", code)
	default:
		r.ok = true
		r.detail = fmt.Sprintf("refused, exit %d, the error names a read-only file system", code)
	}
	// Writable again: a worker starts on it and works.
	p, err = c.startRun(tmpLedger, runOpts{})
	if err != nil {
		return err
	}
	before := c.counts(p.id)
	if _, err := c.phaseWork(ctx, "readonly", phaseOpsEach); err != nil {
		return err
	}
	if !waitFor(ctx, 20*time.Second, func() bool { return c.counts(p.id).CompletesOK > before.CompletesOK+5 }) && r.ok {
		r.ok = false
		r.detail += "; after remounting read-write the restarted worker completed nothing within 20s"
	} else if r.ok {
		r.detail += "; restarted read-write, works"
	}
	c.phase(r)
	c.stopRun(ctx, p)
	if err := copyDurable(tmpLedger, c.ledger); err != nil {
		return fmt.Errorf("copy the ledger back: %w", err)
	}
	if err := os.Remove(tmpLedger); err != nil {
		return err
	}
	return c.tmp.unmount()
}

func (c *campaign) phase(r phaseResult) {
	c.mu.Lock()
	c.phases = append(c.phases, r)
	c.mu.Unlock()
	status := "ok"
	if !r.ok {
		status = "FAILED"
	}
	c.logf("phase %q: %s: %s", r.name, status, r.detail)
}

// queueCounts returns visible and in-flight messages of url.
func (c *campaign) queueCounts(ctx context.Context, url string) (int, int, error) {
	out, err := c.admin.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, 0, err
	}
	v, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	f, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return v, f, nil
}

// waitQuiet waits until the main queue reads empty (visible and in flight)
// four polls in a row, 750 ms apart: counts lag on the local server.
func (c *campaign) waitQuiet(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(c.cfg.Quiesce)
	streak := 0
	lastLog := time.Now()
	for time.Now().Before(deadline) {
		v, f, err := c.queueCounts(ctx, c.queue)
		if err != nil {
			return false, err
		}
		if v == 0 && f == 0 {
			streak++
			if streak == 4 {
				c.logf("quiet: the queue is empty")
				return true, nil
			}
		} else {
			streak = 0
		}
		if time.Since(lastLog) > 10*time.Second {
			c.logf("waiting for the queue to empty: %d visible, %d in flight", v, f)
			lastLog = time.Now()
		}
		c.mu.Lock()
		last := c.finals
		if len(last) == 0 {
			last = []*proc{c.cur}
		}
		last = append([]*proc(nil), last...)
		c.mu.Unlock()
		for i, p := range last {
			if p.alive() {
				continue
			}
			c.checkEnd(p)
			c.note("the last run %d died while the queue emptied; restarted", p.id)
			var q *proc
			var err error
			if c.pgWorkerURL != "" {
				q, err = c.startSharedRun(ctx)
			} else {
				q, err = c.startRun(c.ledger, runOpts{})
			}
			if err != nil {
				return false, err
			}
			c.mu.Lock()
			if len(c.finals) > 0 {
				c.finals[i] = q
			}
			c.mu.Unlock()
		}
		sleepCtx(ctx, 750*time.Millisecond)
	}
	return false, ctx.Err()
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func exitCode(p *proc) int {
	_, code := p.exit()
	return code
}
