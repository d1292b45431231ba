package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	bolt "go.etcd.io/bbolt"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/bench/internal/benchkit"
)

// result is what one run measured. Fields that do not apply are NaN.
type result struct {
	contender  string
	cfg        runConfig // the contenders' comparison's runs
	round      int       // 0: warm-up, -1: duplicate run
	deliveries int       // messages sent
	operations int       // distinct operations among them
	processed  int64

	fill       time.Duration
	startup    time.Duration // process start to first receive
	active     time.Duration // first receive to last delivery done
	throughput float64       // processed / active, per second
	latP50     float64       // ms
	latP99     float64       // ms
	cpu        float64       // user+sys seconds of the process and its waited-for children (rusage)
	ownCPU     float64       // user+sys seconds of the process alone
	maxRSS     float64       // MB
	commits    float64
	serverCPU  float64 // seconds the server used while the consumer ran
	busy       float64 // machine CPU busy fraction while the consumer ran
	other      float64 // fraction of the machine's CPU used by neither the consumer, the server nor this driver
	wall       time.Duration

	mallocs       float64 // heap allocations of the process, start to exit; NaN when not counted
	writeBytes    float64 // bytes the process sent to storage; NaN when not known
	handlerRuns   float64
	ranOps        float64 // distinct operations the handler ran for
	maxRunsPerKey float64
	stats         map[string]int64
	requests      map[string]int64 // SQS requests by action; nil when not counted
	ledgerWait    map[string]float64
	prefill       int64         // records written to the ledger before the first receive
	prefillTime   time.Duration // how long that took (left out of wall and start-up)
	prefillCPU    float64       // and its CPU seconds (left out of cpu and ownCPU)

	// The ledger comparison's runs (runLedger): several processes are
	// added up, cpu over all of them, maxRSS the largest one's.
	config       ledgerConfig
	dbCPU        float64          // seconds the ledger's server used while the workers ran
	driverCPU    float64          // seconds this process used meanwhile (the proxy, the queue's polling)
	batches      int64            // receives that returned messages
	roundTrips   map[string]int64 // PostgreSQL round trips by kind (pgProxy); nil when not counted
	ledgerReqs   map[string]int64 // DynamoDB requests, "call Action" -> n
	inFlightMax  float64          // DynamoDB requests in flight at once
	inFlightMean float64

	// The console comparison's runs (runConsoleCost).
	variant       string        // vPlain or vConsole
	consoleLedger int           // records in the ledger before the comparison's first run
	console       *consoleStats // the console and its client; nil without one

	// The realistic profile's: what the latency proxy saw and used.
	proxyCPU  float64          // seconds; NaN without the proxy
	proxyReqs map[string]int64 // requests by action
	delayMean float64          // ms, the delays applied
	delayP50  float64
	delayP99  float64
	rxRTT     float64 // ms, mean round trip of the receives that did not wait for messages; NaN when not measured
	rxRTTp50  float64
	// sqsonce-http's endpoint.
	workCPU  float64 // seconds; NaN unless sqsonce-http
	workReqs int64
}

// requestsPer1k returns SQS requests per 1,000 deliveries, NaN when not
// counted.
func (r *result) requestsPer1k() float64 {
	if r.requests == nil {
		return math.NaN()
	}
	var n int64
	for _, v := range r.requests {
		n += v
	}
	return r.per1k(float64(n))
}

func (r *result) per1k(v float64) float64 { return v / float64(r.processed) * 1000 }

func (r *result) line() string {
	var s string
	if !math.IsNaN(r.proxyCPU) {
		s = fmt.Sprintf("proxy: CPU %.3f s/1k, %.0f%% busy, delay mean %.2f p50 %.2f p99 %.2f ms, receive round trip mean %.2f p50 %.2f ms, requests %v  ",
			r.per1k(r.proxyCPU), 100*r.proxyCPU/r.wall.Seconds(), r.delayMean, r.delayP50, r.delayP99, r.rxRTT, r.rxRTTp50, r.proxyReqs)
	}
	if !math.IsNaN(r.workCPU) {
		s += fmt.Sprintf("endpoint: CPU %.3f s/1k, %d requests  ", r.per1k(r.workCPU), r.workReqs)
	}
	s = fmt.Sprintf("%6d msgs  %8.0f msg/s  p50 %7.0f ms  p99 %7.0f ms  CPU %.3f s/1k (own %.3f)  RSS %5.1f MB  server CPU %.3f s/1k  busy %3.0f%% (other %2.0f%%)  fill %.1fs  start-up %dms",
		r.processed, r.throughput, r.latP50, r.latP99, r.per1k(r.cpu), r.per1k(r.ownCPU), r.maxRSS, r.per1k(r.serverCPU), 100*r.busy, 100*r.other,
		r.fill.Seconds(), r.startup.Milliseconds()) + "  " + s
	if !math.IsNaN(r.commits) {
		s += fmt.Sprintf("  commits %.0f (%.3f/msg)", r.commits, r.commits/float64(r.processed))
	}
	if !math.IsNaN(r.mallocs) {
		s += fmt.Sprintf("  allocs/msg %.0f", r.mallocs/float64(r.processed))
	}
	if !math.IsNaN(r.writeBytes) {
		s += fmt.Sprintf("  written %.0f B/msg", r.writeBytes/float64(r.processed))
	}
	if r.requests != nil {
		s += fmt.Sprintf("  requests/1k: receive %.0f, delete %.0f, all %.0f",
			r.per1k(float64(r.requests["ReceiveMessage"])), r.per1k(float64(r.requests["DeleteMessageBatch"]+r.requests["DeleteMessage"])), r.requestsPer1k())
	}
	if !math.IsNaN(r.handlerRuns) {
		s += fmt.Sprintf("  handler runs %.0f", r.handlerRuns)
	}
	if r.prefill > 0 {
		s += fmt.Sprintf("  prefill %d records in %.1fs, CPU %.1fs (not counted)", r.prefill, r.prefillTime.Seconds(), r.prefillCPU)
	}
	if w := r.ledgerWait; w != nil {
		s += fmt.Sprintf("  ledger wait: claim batch %.2f ms (%.0f calls), complete %.2f ms (mean)", w["claim_batch_mean_ms"], w["claim_batch_calls"], w["complete_mean_ms"])
	}
	return s
}

func newClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       benchkit.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("bench", "bench", ""),
	})
}

// runOne runs contender in cfg on a fresh queue holding ops operations,
// each sent copies times.
func (b *bench) runOne(ctx context.Context, contender string, cfg runConfig, round, ops, copies int) (*result, error) {
	return b.runOneExtra(ctx, contender, cfg, round, ops, copies, runExtra{})
}

// runExtra is what a run of the sqsonce binary may have besides: the
// console comparison's.
type runExtra struct {
	// ledger is a ledger file to run on, which the runs share, instead of
	// a fresh one.
	ledger string
	// console runs `sqsonce console` beside the worker, on the same
	// configuration, and a client that keeps its pages open and
	// refreshing (consoleProc).
	console bool
	// profile, when set, is a file for a CPU profile of the worker, taken
	// through its admin listener for the first -console-profile-seconds.
	profile string
}

// runOneExtra is runOne with x.
func (b *bench) runOneExtra(ctx context.Context, contender string, cfg runConfig, round, ops, copies int, x runExtra) (*result, error) {
	b.seq++
	runID := b.seq
	runDir := filepath.Join(b.dir, fmt.Sprintf("run-%02d-%s-%s-c%d", runID, contender, cfg.profile, cfg.concurrency))
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("bench-%d-%s-%s", runID, contender, strconv.FormatInt(time.Now().UnixNano(), 36))
	q, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		return nil, fmt.Errorf("create queue: %w", err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	defer b.client.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: &queueURL})

	deliveries := ops * copies
	b.waitQuiet(ctx)
	fillStart := time.Now()
	sent, err := b.fill(ctx, queueURL, runID, ops, copies)
	if err != nil {
		return nil, err
	}
	r := &result{contender: contender, cfg: cfg, round: round, deliveries: deliveries, operations: ops, fill: time.Since(fillStart),
		commits: math.NaN(), mallocs: math.NaN(), writeBytes: math.NaN(), handlerRuns: math.NaN(), ranOps: math.NaN(), maxRunsPerKey: math.NaN(), ownCPU: math.NaN(), serverCPU: math.NaN(),
		proxyCPU: math.NaN(), delayMean: math.NaN(), delayP50: math.NaN(), delayP99: math.NaN(), rxRTT: math.NaN(), rxRTTp50: math.NaN(), workCPU: math.NaN()}
	if n, err := b.queueCount(ctx, queueURL); err != nil || n != deliveries {
		return nil, fmt.Errorf("queue holds %d messages after the fill, want %d (%v)", n, deliveries, err)
	}

	ledgerPath := filepath.Join(b.ledgerRoot(), filepath.Base(runDir), "ledger.db")
	// The commits before the worker's own: a fresh ledger's, or those of
	// the shared file so far and the worker's Open.
	txBase := b.ledgerBase
	if x.ledger != "" {
		ledgerPath = x.ledger
		n, err := ledgerTxID(ledgerPath)
		if err != nil {
			return nil, err
		}
		txBase = n + 1
		// No worker runs on it now: a socket left by one that was killed
		// would have the console's client start before this run's worker
		// serves it.
		if err := os.Remove(ledgerPath + ".sock"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	var consoleAddr string
	if x.console {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		consoleAddr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	var prefilled *benchkit.Report
	if contender == cSqsonceGo && b.o.prefill > 0 && !b.o.prefillInProcess {
		if prefilled, err = b.prefillLedger(ctx, ledgerPath, runDir); err != nil {
			return nil, err
		}
	}
	cmd, admin, err := b.command(contender, cfg, queueURL, deliveries, runDir, ledgerPath, round, copies > 1, consoleAddr, x.profile != "")
	if err != nil {
		return nil, err
	}
	if contender != cSQSConsumer {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = b.o.goEnv(cmd.Env)
	}
	// The helpers this run uses: their CPU is reported apart.
	var proxy, workSrv *helperProc
	if cfg.profile == pRealistic {
		proxy = b.proxy
	}
	if contender == cSqsonceHTTP {
		workSrv = b.workSrv
	}
	var stdout bytes.Buffer
	stderrPath := filepath.Join(runDir, "stderr.log")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = &stdout, stderr

	var cons *consoleProc
	if x.console {
		if cons, err = b.startConsole(filepath.Join(runDir, "sqsonce.toml"), runDir, consoleAddr); err != nil {
			return nil, err
		}
		defer cons.stop()
	}

	var proxy0 *proxyStats
	if proxy != nil {
		proxy0 = b.proxyStats()
	}
	workReqs0 := b.workRequests()
	proxyCPU0, workCPU0 := proxy.cpu(), workSrv.cpu()
	srv0 := b.serverCPU()
	self0 := selfCPU()
	busy0, total0 := machineTicks()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", contender, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if cons != nil {
		cons.browse(ledgerPath+".sock", runID)
	}
	var profiled chan error
	if x.profile != "" {
		profiled = make(chan error, 1)
		go func() { profiled <- fetchProfile(admin, b.o.consoleProfileSeconds, x.profile) }()
	}

	deadline := time.NewTimer(b.o.runTimeout)
	defer deadline.Stop()
	var waitErr error
	timedOut := false
	if contender == cSqsonceExec || contender == cSqsonceHTTP {
		// It runs until stopped: wait for the queue to be empty, note its
		// own CPU time and its count of SQS calls, then SIGTERM.
		waitCtx, stopWaiting := context.WithCancel(ctx)
		defer stopWaiting()
		select {
		case err := <-b.waitEmpty(waitCtx, queueURL):
			if err != nil {
				timedOut = true
			}
		case waitErr = <-exited:
			return nil, fmt.Errorf("sqsonce run exited early (%v); its log: %s", waitErr, tail(stderrPath))
		case <-deadline.C:
			timedOut = true
		}
		if cons != nil {
			if r.console, err = cons.stopBrowsing(); err != nil {
				cmd.Process.Kill()
				<-exited
				return nil, err
			}
		}
		if profiled != nil {
			if err := <-profiled; err != nil {
				fmt.Fprintf(b.log, "bench: the worker's CPU profile: %v\n", err)
			}
		}
		if own, _, err := procCPU(cmd.Process.Pid); err == nil {
			r.ownCPU = own
		}
		r.requests = scrapeSQSRequests(admin)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case waitErr = <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			waitErr = <-exited
		}
	} else {
		select {
		case waitErr = <-exited:
		case <-deadline.C:
			timedOut = true
		case <-ctx.Done():
			timedOut = true
		}
		if timedOut {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case waitErr = <-exited:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				waitErr = <-exited
			}
		}
	}
	r.wall = time.Since(t0)
	if srv1 := b.serverCPU(); srv0 >= 0 && srv1 >= 0 {
		r.serverCPU = srv1 - srv0
	}
	busy1, total1 := machineTicks()
	self1 := selfCPU()
	r.proxyCPU, r.workCPU = proxy.cpu()-proxyCPU0, workSrv.cpu()-workCPU0
	helpersCPU := 0.0
	for _, v := range []float64{r.proxyCPU, r.workCPU} {
		if !math.IsNaN(v) {
			helpersCPU += v
		}
	}
	if r.console != nil {
		helpersCPU += r.console.cpu
	}
	if proxy0 != nil {
		if proxy1 := b.proxyStats(); proxy1 != nil {
			r.fillProxy(proxy1.minus(proxy0))
		}
	}
	if n := b.workRequests(); workSrv != nil && n >= 0 && workReqs0 >= 0 {
		r.workReqs = n - workReqs0
	}
	if total1 > total0 {
		r.busy = float64(busy1-busy0) / float64(total1-total0)
	}
	if timedOut {
		return nil, fmt.Errorf("%s did not finish %d messages within %v (or was interrupted); its log: %s", contender, deliveries, b.o.runTimeout, tail(stderrPath))
	}
	if waitErr != nil {
		return nil, fmt.Errorf("%s: %v; its log: %s", contender, waitErr, tail(stderrPath))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return nil, errors.New("no rusage")
	}
	r.cpu = tv(ru.Utime) + tv(ru.Stime)
	r.maxRSS = float64(ru.Maxrss) / 1024 // KiB on Linux
	if total1 > total0 && !math.IsNaN(r.serverCPU) {
		used := float64(busy1-busy0) / userHZ
		r.other = max(used-r.cpu-r.serverCPU-helpersCPU-(self1-self0), 0) / (float64(total1-total0) / userHZ)
	}

	if contender == cSqsonceExec || contender == cSqsonceHTTP {
		if err := b.collectBinary(ctx, r, t0, stderrPath, ledgerPath, fmt.Sprintf("op-%d-", runID), txBase, sent); err != nil {
			return nil, err
		}
		if cons != nil {
			if err := cons.stop(); err != nil {
				return nil, err
			}
		}
	} else {
		rep, err := lastReport(stdout.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s: %w; its log: %s", contender, err, tail(stderrPath))
		}
		// A prefill happens before the first receive: its time and CPU
		// are not the run's (its pages stay in the peak RSS).
		r.prefill, r.prefillTime, r.prefillCPU = rep.PrefillRecords, time.Duration(rep.PrefillNS), rep.PrefillCPU
		r.cpu -= r.prefillCPU
		r.wall -= r.prefillTime
		if prefilled != nil {
			// Written by another process before this one started.
			r.prefill, r.prefillTime, r.prefillCPU = prefilled.PrefillRecords, time.Duration(prefilled.PrefillNS), prefilled.PrefillCPU
		}
		r.ownCPU = r.cpu // no children
		r.processed = rep.Processed
		r.startup = time.Duration(rep.StartNS-t0.UnixNano()) - time.Duration(rep.PrefillNS)
		r.active = time.Duration(rep.LastNS - rep.StartNS)
		r.latP50, r.latP99 = rep.LatP50MS, rep.LatP99MS
		r.requests = rep.Requests
		if rep.Mallocs > 0 {
			r.mallocs = float64(rep.Mallocs)
		}
		if rep.WriteBytes > 0 {
			r.writeBytes = float64(rep.WriteBytes)
		}
		if rep.Commits != nil {
			r.commits = float64(*rep.Commits)
			txid, err := ledgerTxID(ledgerPath)
			if err != nil {
				return nil, err
			}
			before := rep.PrefillCommits
			if prefilled != nil {
				before = prefilled.PrefillCommits + 1 // and the second Open's own transaction
			}
			if got := txid - b.ledgerBase - before; got != *rep.Commits {
				fmt.Fprintf(b.log, "bench: %s reported %d commits, its ledger file's txid says %d\n", contender, *rep.Commits, got)
			}
		}
		if isSqsonceGo(contender) {
			r.handlerRuns = float64(rep.HandlerRuns)
			r.stats = rep.WorkerStats
			r.ledgerWait = rep.LedgerWait
			if copies > 1 {
				r.ranOps = float64(rep.Operations)
				r.maxRunsPerKey = float64(rep.MaxRunsPerKey)
			}
		}
	}
	if r.processed != int64(deliveries) {
		return nil, fmt.Errorf("%s finished %d deliveries, want %d; its log: %s", contender, r.processed, deliveries, tail(stderrPath))
	}
	if r.proxyReqs != nil {
		// In the realistic profile every contender's requests are counted
		// alike, where they arrive.
		r.requests = r.proxyReqs
	}
	if r.active > 0 {
		r.throughput = float64(r.processed) / r.active.Seconds()
	}
	if n, err := b.queueCount(ctx, queueURL); err != nil || n != 0 {
		return nil, fmt.Errorf("%s: the queue still holds %d messages after the run (%v)", contender, n, err)
	}
	return r, nil
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// selfCPU returns the driver's own CPU seconds so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

// waitQuiet waits up to -quiet-wait for a second in which the machine's
// CPUs are less than 10% busy, so that a run does not start while other
// programs are at work.
func (b *bench) waitQuiet(ctx context.Context) {
	deadline := time.Now().Add(b.o.quiet)
	for {
		b0, t0 := machineTicks()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		b1, t1 := machineTicks()
		if t1 <= t0 || float64(b1-b0)/float64(t1-t0) < 0.10 {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(b.log, "bench: the machine is %.0f%% busy with other work; running anyway\n", 100*float64(b1-b0)/float64(t1-t0))
			return
		}
	}
}

// serverCPU returns the server's CPU seconds so far, or -1.
func (b *bench) serverCPU() float64 {
	if b.serverPID == 0 {
		return -1
	}
	own, _, err := procCPU(b.serverPID)
	if err != nil {
		return -1
	}
	return own
}

// prefillLedger writes -prefill complete records to the ledger at path with
// a separate sqsonce-go process, which exits before the measured run starts.
func (b *bench) prefillLedger(ctx context.Context, path, runDir string) (*benchkit.Report, error) {
	return b.prefillLedgerN(ctx, path, runDir, b.o.prefill)
}

// prefillLedgerN writes n complete records (keys pre-<i>) to the ledger at
// path with a separate sqsonce-go process, its log in dir.
func (b *bench) prefillLedgerN(ctx context.Context, path, dir string, n int) (*benchkit.Report, error) {
	cmd := exec.CommandContext(ctx, b.exe[cSqsonceGo], "-ledger", path, "-prefill", strconv.Itoa(n), "-prefill-only")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	logPath := filepath.Join(dir, "prefill.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stderr = log
	fmt.Fprintf(b.log, "bench: writing %d records to %s\n", n, path)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("prefill: %v; its log: %s", err, tail(logPath))
	}
	rep, err := lastReport(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	return rep, nil
}

// command returns the process of one run of contender in cfg and, for
// the sqsonce binary, the address of its admin listener. The sqsonce
// binary's configuration gets console.listen = consoleAddr when it is set,
// and admin.pprof with pprof.
func (b *bench) command(contender string, cfg runConfig, queueURL string, expect int, runDir, ledgerPath string, round int, dup bool, consoleAddr string, pprof bool) (*exec.Cmd, string, error) {
	endpoint := b.endpointOf(cfg)
	common := []string{"-endpoint", endpoint, "-queue-url", queueURL, "-expect", strconv.Itoa(expect), "-concurrency", strconv.Itoa(cfg.concurrency)}
	if cfg.work > 0 && contender != cSQSConsumer {
		common = append(common, "-work", cfg.work.String())
	}
	switch contender {
	case cBaseline:
		return exec.Command(b.exe[contender], append(common, "-pollers", strconv.Itoa(b.o.loops(cfg)), "-deleters", strconv.Itoa(b.o.deletersOf(cfg)))...), "", nil
	case cPlain:
		return exec.Command(b.exe[cBaseline], append(common, "-plain", "-pollers", strconv.Itoa(b.o.loops(cfg)))...), "", nil
	case cSqsonceGo, cBefore:
		args := append(common, "-ledger", ledgerPath, "-pollers", strconv.Itoa(b.o.loops(cfg)))
		if b.o.cpuprofile != "" && round != 0 {
			if err := os.MkdirAll(b.o.cpuprofile, 0o755); err != nil {
				return nil, "", err
			}
			name := fmt.Sprintf("%s-%s-c%d-round%d.prof", contender, cfg.profile, cfg.concurrency, round)
			if round < 0 {
				name = fmt.Sprintf("%s-%s-c%d-dup.prof", contender, cfg.profile, cfg.concurrency)
			}
			args = append(args, "-cpuprofile", filepath.Join(b.o.cpuprofile, name))
			if contender == cSqsonceGo {
				// sqsonce-go-before may come from a revision without it.
				args = append(args, "-memprofile", filepath.Join(b.o.cpuprofile, strings.TrimSuffix(name, ".prof")+".allocs"))
			}
		}
		if dup {
			args = append(args, "-track-keys")
		}
		if b.o.prefill > 0 && b.o.prefillInProcess {
			args = append(args, "-prefill", strconv.Itoa(b.o.prefill))
		}
		return exec.Command(b.exe[contender], args...), "", nil
	case cSqsonceExec, cSqsonceHTTP:
		port, err := freePort()
		if err != nil {
			return nil, "", err
		}
		admin := fmt.Sprintf("127.0.0.1:%d", port)
		config := filepath.Join(runDir, "sqsonce.toml")
		err = os.WriteFile(config, fmt.Appendf(nil, `[queue]
url = %q
endpoint = %q
region = %q
wait_time = "20s"
max_messages = 10
visibility_timeout = "60s"
pollers = %d

[key]
from = "body"
pointer = "/id"

[ledger]
path = %q

[handler]
%s
concurrency = %d

[admin]
listen = %q
pprof = %t
%s`, queueURL, endpoint, benchkit.Region, b.o.loops(cfg), ledgerPath, b.handlerConfig(contender, cfg), cfg.concurrency, admin, pprof, consoleSection(consoleAddr)), 0o600)
		if err != nil {
			return nil, "", err
		}
		cmd := exec.Command(b.exe[contender], "run", "--config", config, "--log-format", "json")
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench", "AWS_EC2_METADATA_DISABLED=true")
		return cmd, admin, nil
	case cSQSConsumer:
		return exec.Command(b.exe[contender], "scripts/bench/node/consumer.mjs",
			"--endpoint", endpoint, "--queue-url", queueURL, "--expect", strconv.Itoa(expect),
			"--instances", strconv.Itoa(b.o.scInstances(cfg.concurrency)), "--batch-size", "10", "--mode", b.o.scMode,
			"--work", strconv.FormatFloat(float64(cfg.work)/1e6, 'f', -1, 64)), "", nil
	}
	return nil, "", fmt.Errorf("unknown contender %q", contender)
}

// handlerConfig returns the [handler] lines of the sqsonce binary's
// configuration but its concurrency: sqsonce-exec runs /bin/true, or
// /bin/sleep for the work; sqsonce-http POSTs to the driver's endpoint,
// which answers after the work.
func (b *bench) handlerConfig(contender string, cfg runConfig) string {
	if contender == cSqsonceHTTP {
		u := "http://" + b.workSrv.addrs["addr"] + "/"
		if cfg.work > 0 {
			u += "?delay=" + cfg.work.String()
		}
		return fmt.Sprintf("type = \"http\"\nurl = %q", u)
	}
	return fmt.Sprintf("type = \"exec\"\ncommand = %s", execCommand(cfg.work))
}

// execCommand is sqsonce-exec's command, as a TOML array: /bin/true, or
// /bin/sleep for the work (["/bin/sleep", "0.005"] for 5 ms).
func execCommand(work time.Duration) string {
	if work <= 0 {
		return `["/bin/true"]`
	}
	return fmt.Sprintf(`["/bin/sleep", %q]`, strconv.FormatFloat(work.Seconds(), 'f', -1, 64))
}

// fill sends ops operations copies times each, {"id":"op-<run>-<i>",
// "sent":<unix-ms>}, in batches of ten from several goroutines, all first
// copies before the second ones (with -dup-adjacent, each operation's
// copies one after another). It returns each operation's "sent"
// value. With copies > 1 every copy of an operation has the same body, so
// "sent" is when the fill started.
func (b *bench) fill(ctx context.Context, queueURL string, runID, ops, copies int) ([]int64, error) {
	sent := make([]int64, ops)
	total := ops * copies
	fixed := int64(0)
	if copies > 1 {
		fixed = time.Now().UnixMilli()
		for i := range sent {
			sent[i] = fixed
		}
	}
	starts := make(chan int)
	errs := make(chan error, b.o.fillWorkers)
	var wg sync.WaitGroup
	for range b.o.fillWorkers {
		wg.Go(func() {
			for start := range starts {
				now := time.Now().UnixMilli()
				if fixed != 0 {
					now = fixed
				}
				var entries []types.SendMessageBatchRequestEntry
				for d := start; d < min(start+10, total); d++ {
					op := d % ops
					if b.o.dupAdjacent {
						op = d / copies
					}
					if fixed == 0 {
						sent[op] = now
					}
					entries = append(entries, types.SendMessageBatchRequestEntry{
						Id:          aws.String(strconv.Itoa(d - start)),
						MessageBody: aws.String(fmt.Sprintf(`{"id":"op-%d-%d","sent":%d}`, runID, op, now)),
					})
				}
				if err := b.sendBatch(ctx, queueURL, entries); err != nil {
					errs <- err
					for range starts {
					}
					return
				}
			}
		})
	}
	for start := 0; start < total; start += 10 {
		starts <- start
	}
	close(starts)
	wg.Wait()
	close(errs)
	return sent, <-errs
}

func (b *bench) sendBatch(ctx context.Context, queueURL string, entries []types.SendMessageBatchRequestEntry) error {
	for attempt := 1; ; attempt++ {
		out, err := b.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &queueURL, Entries: entries})
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if len(out.Failed) == 0 {
			return nil
		}
		if attempt == 5 {
			return fmt.Errorf("send: %d entries failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[aws.ToString(f.Id)] = true
		}
		var again []types.SendMessageBatchRequestEntry
		for _, e := range entries {
			if failed[aws.ToString(e.Id)] {
				again = append(again, e)
			}
		}
		entries = again
	}
}

// queueCount returns the messages visible, in flight and delayed.
func (b *bench) queueCount(ctx context.Context, queueURL string) (int, error) {
	out, err := b.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}})
	if err != nil {
		return -1, err
	}
	n := 0
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		v, _ := strconv.Atoi(out.Attributes[k])
		n += v
	}
	return n, nil
}

// waitEmpty reports nil on the returned channel once the queue holds no
// message (visible, in flight or delayed), checking every 100ms.
func (b *bench) waitEmpty(ctx context.Context, queueURL string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				ch <- ctx.Err()
				return
			case <-t.C:
			}
			if n, err := b.queueCount(ctx, queueURL); err == nil && n == 0 {
				ch <- nil
				return
			}
		}
	}()
	return ch
}

// collectBinary fills r for a run of the sqsonce binary: the start and
// the counters from its JSON log, latency and the last completion from its
// ledger (Completed minus the body's "sent"; the run's records are those
// whose key starts with prefix), commits from the ledger file's
// transaction id less txBase, the id before the worker's first commit.
func (b *bench) collectBinary(ctx context.Context, r *result, t0 time.Time, logPath, ledgerPath, prefix string, txBase uint64, sent []int64) error {
	started, stats, err := readWorkerLog(logPath)
	if err != nil {
		return err
	}
	r.startup = started.Sub(t0)
	r.stats = stats
	r.processed = stats["deleted"]

	txid, err := ledgerTxID(ledgerPath)
	if err != nil {
		return err
	}
	r.commits = float64(txid - txBase)

	db, err := ledger.Open(ledgerPath, ledger.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	var lat []float64
	var last time.Time
	err = db.ForEach(ctx, ledger.Filter{State: ledger.StateComplete, Prefix: prefix}, func(rec ledger.Record) error {
		i := strings.LastIndexByte(rec.Key, '-')
		op, err := strconv.Atoi(rec.Key[i+1:])
		if err != nil || op < 0 || op >= len(sent) {
			return fmt.Errorf("ledger key %q is not one of this run's", rec.Key)
		}
		lat = append(lat, float64(rec.Completed.UnixNano())/1e6-float64(sent[op]))
		if rec.Completed.After(last) {
			last = rec.Completed
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(lat) != r.operations {
		return fmt.Errorf("%s: %d operations complete in the ledger, want %d", r.contender, len(lat), r.operations)
	}
	r.latP50 = benchkit.Quantile(lat, 0.50)
	r.latP99 = benchkit.Quantile(lat, 0.99)
	r.active = last.Sub(started)
	return nil
}

// readWorkerLog returns when the worker started receiving and the counters
// of its "worker stopped" line, from sqsonce's JSON log.
func readWorkerLog(path string) (time.Time, map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, nil, err
	}
	defer f.Close()
	var started time.Time
	var stats map[string]int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line["msg"] {
		case "worker started":
			s, _ := line["time"].(string)
			started, err = time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("%s: worker started at %q: %w", path, s, err)
			}
		case "worker stopped":
			stats = map[string]int64{}
			for k, v := range line {
				if n, ok := v.(float64); ok {
					stats[k] = int64(n)
				}
			}
		}
	}
	if started.IsZero() || stats == nil {
		return time.Time{}, nil, fmt.Errorf("%s: no \"worker started\" or \"worker stopped\" line; the log: %s", path, tail(path))
	}
	return started, stats, nil
}

// lastReport parses the last line of a contender's stdout.
func lastReport(out []byte) (*benchkit.Report, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var rep benchkit.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		return nil, fmt.Errorf("no report line on stdout (%q)", string(out))
	}
	return &rep, nil
}

// ledgerTxID returns the id of the last committed transaction of a bbolt
// file: bbolt adds one for every write transaction it commits.
func ledgerTxID(path string) (uint64, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("read ledger %s: %w", path, err)
	}
	defer db.Close()
	var id uint64
	err = db.View(func(tx *bolt.Tx) error { id = uint64(tx.ID()); return nil })
	return id, err
}

// freshLedgerTxID opens and closes a new ledger and returns its txid: the
// transactions bbolt and ledger.Open write before any operation.
func freshLedgerTxID(path string) (uint64, error) {
	db, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		return 0, err
	}
	if err := db.Close(); err != nil {
		return 0, err
	}
	return ledgerTxID(path)
}

// tail returns the last lines of a log file for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n" + strings.Join(lines, "\n")
}
