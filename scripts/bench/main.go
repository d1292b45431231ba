// Command bench is the comparison benchmark behind `make bench`. It
// runs five consumers of one local SQS-compatible server side by side, each
// as its own process, on the same number of messages and the same
// concurrency, alternating A B C D E A B C D E … for several rounds:
//
//   - baseline: a minimal Go poller with no ledger (scripts/bench/baseline),
//     the ceiling;
//   - sqsonce-go: the worker library with a bbolt ledger
//     (scripts/bench/sqsonce-go);
//   - sqsonce-exec: the sqsonce binary with an exec handler;
//   - sqsonce-http: the sqsonce binary with an http handler, POSTing to an
//     endpoint the driver runs (scripts/bench/workserver);
//   - sqs-consumer: the npm package sqs-consumer (scripts/bench/node).
//
// The plain poller (plain, the baseline program with -plain) is the stress
// profile's ceiling: as many receive loops, each receiving ten and deleting
// them in one DeleteMessageBatch while it receives again, with no handler,
// no bound on the messages in hand and no ledger. With -before REV the
// worker library as it was at git revision REV runs too
// (sqsonce-go-before, scripts/bench/sqsonce-go built from that revision),
// so that a change is measured against the code before it in one run.
//
// It does so in two profiles (-profile), each at each number of handlers
// of -concurrency. In "stress" the contenders talk to the local server
// straight, which answers in well under a millisecond, and their handlers
// do nothing (sqsonce-exec runs /bin/true). In "realistic" every
// contender's SQS requests go through a proxy that delays each one
// (scripts/bench/latencyproxy: 10 ms give or take, 1 % in a 40 ms tail, by
// default), run as a child process so that its CPU is its own, and each
// message's handler waits -work (5 ms): a sleep in baseline, sqsonce-go and
// sqs-consumer, /bin/sleep for sqsonce-exec, the endpoint's delay for
// sqsonce-http. There each configuration's physical ceiling, min(P × 10 /
// R, handlers / W) messages per second for P pollers, the receive's round
// trip R and the work W, is reported beside what each contender reached.
// The driver's own SQS calls (filling and counting queues) go to the
// server straight.
//
// For each run it creates a fresh queue, fills it before the consumer
// starts, waits until every message is done and measures throughput,
// send-to-done latency, CPU per message, peak RSS and, for sqsonce, ledger
// commits per message. A last run sends every operation several times to
// sqsonce-go to show the work per delivery and per operation. It prints a
// table per profile and number of handlers with the median and range over
// the rounds, the machine's rate of starting processes (the floor under
// sqsonce-exec), and checks sqsonce against its targets.
//
// Then it compares the ledgers (-ledger): sqsonce-go on bbolt, on the
// shared ledger in PostgreSQL with one worker process and with -workers
// processes on one queue and one table, and on the shared ledger in
// DynamoDB (a local emulator), at each number of handlers of
// -ledger-concurrency, round after round. Besides throughput, CPU and
// memory it measures the database server's CPU and the ledger's round
// trips per received batch: for PostgreSQL through a proxy in front of the
// server that reads which statement each round trip carries (pgProxy),
// for DynamoDB by counting the client's HTTP requests in the worker.
//
// Then, when sqsonce-http is one of the contenders (or alone, with
// -console-cost), it measures what an open console costs a worker at full
// speed (console.go): sqsonce-http in the stress profile, with the bbolt
// ledger, without a console and with one, in turn, round after round, on a
// ledger of each size of -console-prefill (an empty one and one of a
// million records by default). "With one" is a real `sqsonce console`
// process on the worker's configuration, which reads the ledger through
// the worker's socket, and a client that keeps its pages open and
// refreshing: the overview every second, an operations page every two. It
// reports msg/s with and without, their ratio against the target (at most
// 5 % lost), the worker's CPU per message, and the console's CPU.
//
// Last, it measures a fleet-wide rate (-fleet-rate, fleetrate.go):
// -fleet-workers `sqsonce run` processes on one queue and one PostgreSQL
// ledger table with [flow] rate = -fleet-rate and burst = 1, on a backlog
// of -fleet-n messages sent before they start, their http handler POSTing
// to an endpoint in the driver that records when it was called. It
// reports the most calls in any whole second of wall time and in any
// sliding second, and the calls per second from the first to the last,
// each as a share of the rate.
//
// Run it from the repository root through scripts/with-sqs.sh, which starts
// the server and sets SQSONCE_TEST_SQS_ENDPOINT, and, for the ledger
// comparison and the fleet-wide rate, scripts/with-postgres.sh and
// scripts/with-dynalite.sh; `make bench` does that and builds bin/sqsonce
// first.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// The contenders, in the order they run in each round.
const (
	cPlain       = "plain"
	cBaseline    = "baseline"
	cSqsonceGo   = "sqsonce-go"
	cBefore      = "sqsonce-go-before"
	cSqsonceExec = "sqsonce-exec"
	cSqsonceHTTP = "sqsonce-http"
	cSQSConsumer = "sqs-consumer"
)

var allContenders = []string{cPlain, cBaseline, cSqsonceGo, cSqsonceExec, cSqsonceHTTP, cSQSConsumer}

// isSqsonceGo reports whether contender runs the scripts/bench/sqsonce-go
// program: of this tree, or of the -before revision.
func isSqsonceGo(contender string) bool { return contender == cSqsonceGo || contender == cBefore }

// The helper programs the driver builds and runs as child processes.
const (
	hLatencyProxy = "latencyproxy"
	hWorkServer   = "workserver"
)

type options struct {
	messages         int
	rounds           int
	concurrency      []int // handlers; each configuration runs at each
	profiles         []string
	work             time.Duration // per message, in the realistic profile
	realMessages     int           // messages per run in the realistic profile
	execFloorRuns    int
	bin              string
	contenders       []string
	warmup           int
	dupCopies        int
	scInstancesFlag  int // 0: as many as hold the handlers
	scMode           string
	cpuprofile       string
	runTimeout       time.Duration
	fillWorkers      int
	out              string
	keep             bool
	quiet            time.Duration
	ledgerDir        string
	pollers          int
	baselineDeleters int // 0: 1 in the stress profile, 16 in the realistic one
	dupAdjacent      bool
	prefill          int
	prefillInProcess bool
	gogc             string // "default": GOGC unset
	before           string // a git revision: sqsonce-go-before runs its sqsonce-go

	// The latency proxy's delays.
	latency          time.Duration
	latencyJitter    float64
	latencyTail      time.Duration
	latencyTailShare float64
	latencySeed      uint64

	ledgers           []string // the ledger comparison's ledgers; none: no comparison
	workers           int
	workersLedgers    []string
	ledgerConcurrency []int
	ledgerMessages    int
	dynamoMessages    int
	ledgerRounds      int
	countRoundTrips   string // warmup, all or off
	pgPrefill         int
	pgPoolMaxConns    int

	// The console comparison (console.go).
	consoleCost            bool  // only the console comparison
	consolePrefill         []int // ledger sizes; none: no comparison
	consoleConcurrency     int
	consoleMessages        int
	consoleRounds          int
	consoleOverviewEvery   time.Duration
	consoleOperationsEvery time.Duration
	consoleProfileSeconds  int

	// The fleet-wide rate (fleetrate.go).
	fleetRate     float64 // operations per second; 0: not run
	fleetWorkers  int
	fleetMessages int
}

func main() {
	var o options
	var contenders, concurrency, profiles string
	flag.IntVar(&o.messages, "n", 20000, "messages per run in the stress profile")
	flag.IntVar(&o.realMessages, "realistic-n", 5000, "messages per run in the realistic profile (0: -n)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds: each contender runs once per round, in turn")
	flag.StringVar(&concurrency, "concurrency", "16,64", "handlers running at once in each contender, comma-separated: each profile runs at each")
	flag.StringVar(&profiles, "profile", strings.Join(allProfiles, ","), "profiles to run, comma-separated: stress (the local server straight, handlers that do nothing), realistic (every SQS request delayed by the latency proxy, handlers that take -work)")
	flag.DurationVar(&o.work, "work", 5*time.Millisecond, "realistic profile: each message's handler waits this long (the stress profile's do nothing)")
	flag.DurationVar(&o.latency, "sqs-latency", 10*time.Millisecond, "realistic profile: the delay the proxy gives most SQS requests, uniformly within ±-sqs-latency-jitter of it")
	flag.Float64Var(&o.latencyJitter, "sqs-latency-jitter", 0.2, "realistic profile: the spread of most requests' delay, a share of -sqs-latency")
	flag.DurationVar(&o.latencyTail, "sqs-latency-tail", 40*time.Millisecond, "realistic profile: the longest delay; -sqs-latency-tail-share of the requests wait 75–100 % of it instead")
	flag.Float64Var(&o.latencyTailShare, "sqs-latency-tail-share", 0.01, "realistic profile: the share of SQS requests delayed in the tail")
	flag.Uint64Var(&o.latencySeed, "sqs-latency-seed", 1, "realistic profile: the seed of the proxy's delays")
	flag.IntVar(&o.execFloorRuns, "exec-floor-n", 1000, "processes (/bin/true) started, in each of 3 tries, to measure the machine's rate of starting them at each number of handlers at once, with sqsonce-exec in the stress profile (0: not measured)")
	flag.StringVar(&o.bin, "bin", "bin/sqsonce", "the sqsonce binary (make build)")
	flag.StringVar(&contenders, "contenders", strings.Join(allContenders, ","), "contenders to run, comma-separated")
	flag.IntVar(&o.warmup, "warmup", 2000, "messages of one unmeasured warm-up run per contender first (0: none)")
	flag.IntVar(&o.dupCopies, "dup-copies", 3, "duplicate run: deliveries per operation, sqsonce-go only (0: no duplicate run)")
	flag.BoolVar(&o.dupAdjacent, "dup-adjacent", false, "duplicate run: send the copies of an operation one after another instead of all first copies first (copies then arrive together, while the first is in progress)")
	flag.IntVar(&o.scInstancesFlag, "sqs-consumer-instances", 0, "sqs-consumer: Consumers in its process (each handles one batch of up to 10 at a time; 0: as many as hold the handlers, 2 for 16, 7 for 64)")
	flag.StringVar(&o.scMode, "sqs-consumer-mode", "batch", "sqs-consumer: batch (handleMessageBatch, one DeleteMessageBatch per batch) or message (handleMessage, one DeleteMessage per message)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "directory for CPU profiles (.prof) and allocation profiles (.allocs) of the sqsonce-go runs (go tool pprof -top FILE)")
	flag.DurationVar(&o.runTimeout, "run-timeout", 3*time.Minute, "longest a single run may take")
	flag.IntVar(&o.fillWorkers, "fill-workers", 8, "concurrent SendMessageBatch calls when filling a queue")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (logs, ledgers)")
	flag.StringVar(&o.ledgerDir, "ledger-dir", "", "where sqsonce's ledger files go (default: the working directory, under $TMPDIR); the file system's fsync is part of what is measured")
	flag.IntVar(&o.baselineDeleters, "baseline-deleters", 0, "baseline's delete loops, each sending one DeleteMessageBatch at a time (0: 1 in the stress profile, where one keeps up, 16 in the realistic one, as many as the deletes sqsonce's worker has in flight: one that waits a round trip per batch would cap baseline at 10 messages per round trip)")
	flag.IntVar(&o.pollers, "sqsonce-pollers", 0, "receive loops of sqsonce-go, sqsonce-exec and sqsonce-http, and of baseline, which keeps their shape (0: as many as sqs-consumer has Consumers at the handler count, one per 10 handlers; the ledger comparison: 1)")
	flag.IntVar(&o.prefill, "prefill", 0, "sqsonce-go: complete records (keys pre-<i>) in its ledger before its first receive, written by a separate process first (a worker started on a big ledger); not counted in msg/s, CPU, commits, start-up or peak RSS")
	flag.BoolVar(&o.prefillInProcess, "prefill-in-process", false, "with -prefill: sqsonce-go writes the records itself before its first receive, so the ledger pages those writes touched stay in its peak RSS (a worker that wrote them all); their time and CPU are still left out")
	flag.StringVar(&o.gogc, "gogc", "400", "GOGC of the Go contenders (baseline, sqsonce-go, sqsonce-exec, sqsonce-http); 400 is the sqsonce binary's default, given to all alike; default or \"\": GOGC unset, so that baseline and sqsonce-go run with Go's default (100, the library embedded in a program that sets nothing) and the binary with its own (400)")
	flag.StringVar(&o.before, "before", "", "a git revision (a commit, a branch): sqsonce-go-before, the sqsonce-go program built from that revision, runs after sqsonce-go in every round, so that a change is compared with the code before it in one run")
	flag.DurationVar(&o.quiet, "quiet-wait", 30*time.Second, "before each run, wait up to this long for the machine to be idle (other programs disturb the results)")
	var ledgers, workersLedgers, ledgerConcurrency string
	flag.StringVar(&ledgers, "ledger", strings.Join(allLedgers, ","), "ledger comparison: the ledgers sqsonce-go runs on, comma-separated, of "+strings.Join(allLedgers, ", ")+" (empty: no comparison); postgres needs SQSONCE_TEST_POSTGRES_URL, dynamodb SQSONCE_TEST_DYNAMODB_ENDPOINT")
	flag.IntVar(&o.workers, "workers", 3, "ledger comparison: the shared ledgers of -workers-ledger also run with this many sqsonce-go processes on one queue and one table (1: not)")
	flag.StringVar(&workersLedgers, "workers-ledger", lPostgres, "ledger comparison: the ledgers that also run with -workers processes, comma-separated")
	flag.StringVar(&ledgerConcurrency, "ledger-concurrency", "16,64", "ledger comparison: handlers per worker process, comma-separated: each ledger runs at each")
	flag.IntVar(&o.ledgerMessages, "ledger-n", 0, "ledger comparison: messages per run (0: -n)")
	flag.IntVar(&o.dynamoMessages, "dynamodb-n", 2000, "ledger comparison: messages per run on DynamoDB (the local emulator takes a few ms of CPU per request; 0: -ledger-n)")
	flag.IntVar(&o.ledgerRounds, "ledger-rounds", 0, "ledger comparison: rounds (0: -rounds)")
	flag.IntVar(&o.pgPrefill, "pg-prefill", 100000, "ledger comparison: complete records in each run's PostgreSQL table, written and analyzed (VACUUM ANALYZE) before the run, as a table in use holds (0: an empty table, whose plans the server makes before it has statistics)")
	flag.IntVar(&o.pgPoolMaxConns, "pg-pool-max-conns", 0, "ledger comparison: pool_max_conns in the workers' PostgreSQL URL (0: pgx's default, max(4, CPUs))")
	flag.StringVar(&o.countRoundTrips, "count-round-trips", "warmup", "ledger comparison: which PostgreSQL runs carry their connections through the driver's proxy, which counts round trips: warmup (each configuration's warm-up run, the rounds go straight to the server), all (the proxy's hop and CPU then weigh on the rounds' figures) or off")
	var consolePrefill string
	flag.BoolVar(&o.consoleCost, "console-cost", false, "run only the console comparison: the sqsonce binary (sqsonce-http, stress) without a console and with `sqsonce console` open and refreshing, in turn (it also runs after the contenders when sqsonce-http is one of them)")
	flag.StringVar(&consolePrefill, "console-prefill", "0,1000000", "console comparison: the ledger sizes it runs on, comma-separated: complete records written before the first run (empty: no comparison)")
	flag.IntVar(&o.consoleConcurrency, "console-concurrency", 64, "console comparison: the worker's handlers")
	flag.IntVar(&o.consoleMessages, "console-n", 100000, "console comparison: messages per run, enough for the run to outlast the console's overview cache (5 s) several times")
	flag.IntVar(&o.consoleRounds, "console-rounds", 0, "console comparison: rounds, each without then with the console (0: -rounds)")
	flag.DurationVar(&o.consoleOverviewEvery, "console-overview-every", time.Second, "console comparison: how often the client opens the overview (its page refreshes itself every 30 s)")
	flag.DurationVar(&o.consoleOperationsEvery, "console-operations-every", 2*time.Second, "console comparison: how often the client opens an operations page, in turn the first page, the failed operations, the run's keys by prefix and one operation")
	flag.IntVar(&o.consoleProfileSeconds, "console-profile-seconds", 5, "console comparison, with -cpuprofile: the worker's first seconds profiled in each measured run (through admin.pprof)")
	var fleetRate string
	flag.StringVar(&fleetRate, "fleet-rate", "40", "fleet-wide rate: the [flow] rate (burst 1) of -fleet-workers sqsonce run processes on one queue and one PostgreSQL ledger table, measured at their http handler (empty: not run; needs SQSONCE_TEST_POSTGRES_URL)")
	flag.IntVar(&o.fleetWorkers, "fleet-workers", 3, "fleet-wide rate: the worker processes")
	flag.IntVar(&o.fleetMessages, "fleet-n", 600, "fleet-wide rate: the backlog, messages sent before the workers start")
	flag.Parse()
	o.contenders = splitList(contenders)
	if o.before != "" && !contains(o.contenders, cBefore) {
		if i := slices.Index(o.contenders, cSqsonceGo); i >= 0 {
			o.contenders = slices.Insert(o.contenders, i+1, cBefore)
		} else {
			o.contenders = append(o.contenders, cBefore)
		}
	}
	o.profiles = splitList(profiles)
	for _, v := range splitList(concurrency) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -concurrency: %q is not a positive number\n", v)
			os.Exit(2)
		}
		o.concurrency = append(o.concurrency, n)
	}
	if o.gogc == "" {
		o.gogc = "default"
	}
	if o.realMessages == 0 {
		o.realMessages = o.messages
	}
	o.ledgers = splitList(ledgers)
	o.workersLedgers = splitList(workersLedgers)
	for _, v := range splitList(ledgerConcurrency) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -ledger-concurrency: %q is not a positive number\n", v)
			os.Exit(2)
		}
		o.ledgerConcurrency = append(o.ledgerConcurrency, n)
	}
	if o.ledgerMessages == 0 {
		o.ledgerMessages = o.messages
	}
	if o.dynamoMessages == 0 {
		o.dynamoMessages = o.ledgerMessages
	}
	if o.ledgerRounds == 0 {
		o.ledgerRounds = o.rounds
	}
	for _, v := range splitList(consolePrefill) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "bench: -console-prefill: %q is not a number of records\n", v)
			os.Exit(2)
		}
		o.consolePrefill = append(o.consolePrefill, n)
	}
	if o.consoleRounds == 0 {
		o.consoleRounds = o.rounds
	}
	if fleetRate != "" {
		r, err := strconv.ParseFloat(fleetRate, 64)
		if err != nil || !(r > 0) {
			fmt.Fprintf(os.Stderr, "bench: -fleet-rate: %q is not a positive rate\n", fleetRate)
			os.Exit(2)
		}
		o.fleetRate = r
	}
	if o.consoleCost {
		o.contenders, o.ledgers, o.fleetRate = nil, nil, 0
	} else if !contains(o.contenders, cSqsonceHTTP) {
		o.consolePrefill = nil
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o *options) check() error {
	if o.messages < 10 || o.realMessages < 10 || o.rounds < 1 || o.fillWorkers < 1 || o.scInstancesFlag < 0 || o.pollers < 0 || o.execFloorRuns < 0 || o.baselineDeleters < 0 {
		return errors.New("-n and -realistic-n must be at least 10; -rounds and -fill-workers at least 1; -sqsonce-pollers, -sqs-consumer-instances, -baseline-deleters and -exec-floor-n not negative")
	}
	if len(o.contenders) > 0 && (len(o.concurrency) == 0 || len(o.profiles) == 0) {
		return errors.New("-concurrency and -profile must name at least one number of handlers and one profile")
	}
	for _, p := range o.profiles {
		if !slices.Contains(allProfiles, p) {
			return fmt.Errorf("-profile: unknown profile %q (want some of %s)", p, strings.Join(allProfiles, ", "))
		}
	}
	if o.work < 0 || o.latency < 0 || o.latencyTail < 0 || o.latencyJitter < 0 || o.latencyJitter > 1 || o.latencyTailShare < 0 || o.latencyTailShare > 1 {
		return errors.New("-work, -sqs-latency and -sqs-latency-tail must not be negative; -sqs-latency-jitter and -sqs-latency-tail-share must be between 0 and 1")
	}
	if o.ledgerMessages < 10 || o.dynamoMessages < 10 || o.ledgerRounds < 1 || o.workers < 1 || o.pgPrefill < 0 || o.pgPoolMaxConns < 0 {
		return errors.New("-ledger-n and -dynamodb-n must be at least 10; -ledger-rounds and -workers at least 1; -pg-prefill and -pg-pool-max-conns not negative")
	}
	if !slices.Contains([]string{"warmup", "all", "off"}, o.countRoundTrips) {
		return fmt.Errorf("-count-round-trips %q: want warmup, all or off", o.countRoundTrips)
	}
	if len(o.ledgers) > 0 && len(o.ledgerConcurrency) == 0 {
		return errors.New("-ledger-concurrency names no number of handlers")
	}
	for _, l := range append(slices.Clone(o.ledgers), o.workersLedgers...) {
		if !slices.Contains(allLedgers, l) {
			return fmt.Errorf("-ledger, -workers-ledger: unknown ledger %q (want some of %s)", l, strings.Join(allLedgers, ", "))
		}
	}
	if contains(o.workersLedgers, lBbolt) && o.workers > 1 {
		return errors.New("-workers-ledger: bbolt is one process's ledger: several workers cannot share it")
	}
	if o.consoleCost && len(o.consolePrefill) == 0 {
		return errors.New("-console-cost: -console-prefill names no ledger size")
	}
	if len(o.consolePrefill) > 0 && (o.consoleConcurrency < 1 || o.consoleMessages < 10 || o.consoleRounds < 1 ||
		o.consoleOverviewEvery <= 0 || o.consoleOperationsEvery <= 0 || o.consoleProfileSeconds < 1) {
		return errors.New("-console-concurrency, -console-rounds and -console-profile-seconds must be at least 1, -console-n at least 10, -console-overview-every and -console-operations-every positive")
	}
	if len(o.contenders) == 0 && len(o.ledgers) == 0 && len(o.consolePrefill) == 0 && o.fleetRate == 0 {
		return errors.New("nothing to run: -contenders, -ledger, -console-prefill and -fleet-rate are all empty")
	}
	if o.fleetRate > 0 && (o.fleetWorkers < 1 || o.fleetMessages < 10) {
		return errors.New("-fleet-workers must be at least 1, -fleet-n at least 10")
	}
	if o.prefill < 0 {
		return errors.New("-prefill must not be negative")
	}
	if o.scMode != "batch" && o.scMode != "message" {
		return fmt.Errorf("-sqs-consumer-mode %q: want batch or message", o.scMode)
	}
	for _, c := range o.contenders {
		known := c == cBefore && o.before != ""
		for _, k := range allContenders {
			known = known || c == k
		}
		if !known {
			return fmt.Errorf("-contenders: unknown contender %q (want some of %s)", c, strings.Join(allContenders, ", "))
		}
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run from the repository root (go.mod not found)")
	}
	return nil
}

// bench is one invocation's state.
type bench struct {
	o          options
	endpoint   string
	client     *sqs.Client
	dir        string            // working directory
	exe        map[string]string // contender -> program
	serverPID  int               // 0 when unknown
	ledgerBase uint64            // bbolt txid of a fresh ledger, before any commit of its own
	seq        int               // runs so far, for queue names and operation ids
	log        io.Writer         // progress
	shared     sharedServers     // the shared ledgers' servers, for the ledger comparison
	started    time.Time

	proxy      *helperProc       // the latency proxy, for the realistic profile
	workSrv    *helperProc       // sqsonce-http's endpoint
	execFloors map[int]execFloor // by processes at once
	fleetBin   string            // the sqsonce binary, for the fleet-wide rate
}

// endpointOf returns the SQS endpoint the contenders use in c: the proxy's
// in the realistic profile.
func (b *bench) endpointOf(c runConfig) string {
	if c.profile == pRealistic {
		return "http://" + b.proxy.addrs["addr"]
	}
	return b.endpoint
}

// ledgerRoot is the directory under which each run's ledger file goes.
func (b *bench) ledgerRoot() string {
	if b.o.ledgerDir != "" {
		return b.o.ledgerDir
	}
	return b.dir
}

func run(ctx context.Context, o options) error {
	endpoint := strings.TrimRight(os.Getenv("SQSONCE_TEST_SQS_ENDPOINT"), "/")
	u, err := url.Parse(endpoint)
	if endpoint == "" || err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" {
		return errors.New("SQSONCE_TEST_SQS_ENDPOINT must name the local server (http://127.0.0.1:PORT): run through scripts/with-sqs.sh or `make bench`")
	}
	port, _ := strconv.Atoi(u.Port())
	dir, err := os.MkdirTemp("", "sqsonce-bench-")
	if err != nil {
		return err
	}
	b := &bench{o: o, endpoint: endpoint, client: newClient(endpoint), dir: dir, exe: map[string]string{}, log: os.Stderr, started: time.Now(),
		execFloors: map[int]execFloor{}}
	if o.keep {
		fmt.Fprintf(b.log, "bench: working directory %s (kept)\n", dir)
	} else {
		defer os.RemoveAll(dir)
		defer func() {
			if b.o.ledgerDir != "" {
				os.RemoveAll(b.o.ledgerDir)
			}
		}()
	}
	b.serverPID = listenerPID(port)
	if b.serverPID == 0 {
		fmt.Fprintln(b.log, "bench: could not find the server's process: server CPU will not be reported")
	}
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if err := b.prepareShared(ctx); err != nil {
		return err
	}
	if err := b.startHelpers(); err != nil {
		return err
	}
	defer b.proxy.stop()
	defer b.workSrv.stop()
	env := describeMachine(b)

	if o.execFloorRuns > 0 && contains(o.contenders, cSqsonceExec) && contains(o.profiles, pStress) {
		for _, n := range o.concurrency {
			b.waitQuiet(ctx)
			f, err := measureExecFloor(ctx, o.execFloorRuns, n)
			if err != nil {
				return err
			}
			b.execFloors[n] = f
			fmt.Fprintf(b.log, "exec floor: %d × /bin/true, %d at once: %.0f process starts/s from Go (os/exec), %.0f with xargs -P %d\n",
				f.runs, n, f.goRate, f.xargsRate, n)
		}
	}

	var results []*result
	var dup *result
	for _, cfg := range o.runConfigs() {
		if len(o.contenders) == 0 {
			break
		}
		n := o.messages
		if cfg.profile == pRealistic {
			n = o.realMessages
		}
		if o.warmup > 0 {
			for _, c := range o.contenders {
				r, err := b.runOne(ctx, c, cfg, 0, min(o.warmup, n), 1)
				if err != nil {
					return fmt.Errorf("%s: warm-up %s: %w", cfg, c, err)
				}
				fmt.Fprintf(b.log, "%-13s warm-up  %-13s %s\n", cfg, c, r.line())
			}
		}
		for round := 1; round <= o.rounds; round++ {
			for _, c := range o.contenders {
				r, err := b.runOne(ctx, c, cfg, round, n, 1)
				if err != nil {
					return fmt.Errorf("%s: round %d, %s: %w", cfg, round, c, err)
				}
				fmt.Fprintf(b.log, "%-13s round %d  %-13s %s\n", cfg, round, c, r.line())
				results = append(results, r)
			}
		}
		// The duplicate run: stress, at the first number of handlers.
		if dup == nil && cfg.profile == pStress && o.dupCopies > 1 && contains(o.contenders, cSqsonceGo) {
			ops := o.messages / o.dupCopies
			dup, err = b.runOne(ctx, cSqsonceGo, cfg, -1, ops, o.dupCopies)
			if err != nil {
				return fmt.Errorf("duplicate run: %w", err)
			}
			fmt.Fprintf(b.log, "%-13s dup x%d   %-13s %s\n", cfg, o.dupCopies, cSqsonceGo, dup.line())
		}
	}

	contendersTook := time.Since(b.started)
	var consoleResults []*result
	if len(o.consolePrefill) > 0 {
		if consoleResults, err = b.runConsoleCost(ctx); err != nil {
			return err
		}
	}
	consoleTook := time.Since(b.started) - contendersTook
	var ledgerResults, ledgerWarmups []*result
	if len(o.ledgers) > 0 {
		if ledgerResults, ledgerWarmups, err = b.runLedgers(ctx); err != nil {
			return err
		}
	}
	ledgersTook := time.Since(b.started) - contendersTook - consoleTook
	var fleet *fleetResult
	if o.fleetRate > 0 {
		if fleet, err = b.runFleetRate(ctx); err != nil {
			return fmt.Errorf("fleet-wide rate: %w", err)
		}
		fmt.Fprintf(b.log, "fleet rate  %d workers  %s\n", fleet.workers, fleet.line())
	}
	fmt.Fprintf(b.log, "bench: the contenders took %v, the console comparison %v, the ledger comparison %v, the fleet-wide rate %v\n",
		contendersTook.Round(time.Second), consoleTook.Round(time.Second), ledgersTook.Round(time.Second),
		(time.Since(b.started) - contendersTook - consoleTook - ledgersTook).Round(time.Second))

	var report bytes.Buffer
	writeReport(&report, b, env, results, dup, consoleResults, ledgerResults, ledgerWarmups, fleet)
	os.Stdout.Write(report.Bytes())
	if o.out != "" {
		if err := os.WriteFile(o.out, report.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// prepare builds the Go contenders, finds the others and measures the
// txid of a fresh ledger.
func (b *bench) prepare(ctx context.Context) error {
	build := slices.Clone(b.o.contenders)
	if len(b.o.ledgers) > 0 && !contains(build, cSqsonceGo) {
		build = append(build, cSqsonceGo)
	}
	if len(b.o.consolePrefill) > 0 {
		// sqsonce-http, its endpoint, and sqsonce-go to fill the ledgers.
		for _, c := range []string{cSqsonceHTTP, cSqsonceGo} {
			if !contains(build, c) {
				build = append(build, c)
			}
		}
	}
	if len(b.o.contenders) > 0 && contains(b.o.profiles, pRealistic) {
		build = append(build, hLatencyProxy)
	}
	if contains(build, cSqsonceHTTP) {
		build = append(build, hWorkServer)
	}
	if contains(build, cPlain) && !contains(build, cBaseline) {
		build = append(build, cBaseline) // plain is baseline -plain
	}
	for _, c := range build {
		switch c {
		case cBefore:
			out, err := buildBefore(ctx, b.o.before, b.dir)
			if err != nil {
				return err
			}
			b.exe[c] = out
		case cBaseline, cSqsonceGo, hLatencyProxy, hWorkServer:
			out := filepath.Join(b.dir, c)
			cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./scripts/bench/"+c)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("build %s: %w", c, err)
			}
			b.exe[c] = out
		case cSqsonceExec, cSqsonceHTTP:
			bin, err := sqsonceBinary(b.o.bin)
			if err != nil {
				return err
			}
			b.exe[c] = bin
		case cSQSConsumer:
			if _, err := os.Stat("scripts/bench/node/node_modules/sqs-consumer/package.json"); err != nil {
				return errors.New("sqs-consumer is not installed: npm ci --prefix scripts/bench/node")
			}
			node, err := exec.LookPath("node")
			if err != nil {
				return err
			}
			b.exe[c] = node
		}
	}
	if b.o.fleetRate > 0 {
		bin, err := sqsonceBinary(b.o.bin)
		if err != nil {
			return err
		}
		b.fleetBin = bin
	}
	if b.o.ledgerDir != "" {
		d, err := os.MkdirTemp(b.o.ledgerDir, "sqsonce-bench-ledgers-")
		if err != nil {
			return err
		}
		b.o.ledgerDir = d
	}
	base, err := freshLedgerTxID(filepath.Join(b.ledgerRoot(), "fresh", "ledger.db"))
	if err != nil {
		return err
	}
	b.ledgerBase = base
	return nil
}

// sqsonceBinary returns the absolute path of the sqsonce binary bin, which
// must be there.
func sqsonceBinary(bin string) (string, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("%s: %w (run `make build`)", bin, err)
	}
	return abs, nil
}

// buildBefore builds scripts/bench/sqsonce-go as it was at git revision
// rev, from the tree of that revision exported under dir, and returns the
// program's path.
func buildBefore(ctx context.Context, rev, dir string) (string, error) {
	src := filepath.Join(dir, "before-src")
	if err := os.MkdirAll(src, 0o700); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return "", fmt.Errorf("-before %s: git archive: %w", rev, err)
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("-before %s: unpack: %w", rev, err)
	}
	out := filepath.Join(dir, cBefore)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./scripts/bench/"+cSqsonceGo)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("-before %s: build %s: %w", rev, cSqsonceGo, err)
	}
	return out, nil
}

// startHelpers starts the latency proxy for the realistic profile and
// sqsonce-http's endpoint, as child processes.
func (b *bench) startHelpers() error {
	var err error
	if b.exe[hLatencyProxy] != "" {
		b.proxy, err = b.startHelper(hLatencyProxy, "-upstream", b.endpoint,
			"-latency", b.o.latency.String(), "-jitter", strconv.FormatFloat(b.o.latencyJitter, 'g', -1, 64),
			"-tail", b.o.latencyTail.String(), "-tail-share", strconv.FormatFloat(b.o.latencyTailShare, 'g', -1, 64),
			"-seed", strconv.FormatUint(b.o.latencySeed, 10))
		if err != nil {
			return err
		}
		fmt.Fprintf(b.log, "bench: latency proxy on %s (pid %d) in front of %s\n", b.proxy.addrs["addr"], b.proxy.cmd.Process.Pid, b.endpoint)
	}
	if b.exe[hWorkServer] != "" {
		if b.workSrv, err = b.startHelper(hWorkServer); err != nil {
			b.proxy.stop()
			return err
		}
		fmt.Fprintf(b.log, "bench: sqsonce-http's endpoint on %s (pid %d)\n", b.workSrv.addrs["addr"], b.workSrv.cmd.Process.Pid)
	}
	return nil
}

// splitList splits a comma-separated flag value; empty gives none.
func splitList(s string) []string {
	var xs []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			xs = append(xs, v)
		}
	}
	return xs
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// machine describes where the benchmark ran.
type machine struct {
	nproc                        int
	cpu                          string
	goVersion, nodeVersion       string
	fauxqs, sqsConsumer, nodeSDK string
	kernel                       string
	ledgerFS                     string
	postgres                     string // version and settings, when compared
	dynalite                     string
}

func describeMachine(b *bench) machine {
	m := machine{nproc: runtime.NumCPU(), cpu: cpuModel(), goVersion: runtime.Version()}
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		m.nodeVersion = strings.TrimSpace(string(out))
	}
	m.fauxqs = packageVersion("scripts/sqs/node_modules/fauxqs/package.json")
	m.sqsConsumer = packageVersion("scripts/bench/node/node_modules/sqs-consumer/package.json")
	m.nodeSDK = packageVersion("scripts/bench/node/node_modules/@aws-sdk/client-sqs/package.json")
	if out, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	m.ledgerFS = fsType(b.ledgerRoot())
	m.postgres = b.shared.pgSettings
	if contains(b.o.ledgers, lDynamoDB) {
		m.dynalite = packageVersion("scripts/dynalite/node_modules/dynalite/package.json")
	}
	return m
}

func packageVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "not installed"
	}
	_, rest, ok := strings.Cut(string(b), `"version"`)
	if !ok {
		return "unknown"
	}
	_, rest, _ = strings.Cut(rest, `"`)
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// fsType returns the type of the file system holding dir, from
// /proc/self/mounts (the longest mount point that is a prefix of dir).
func fsType(dir string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "unknown"
	}
	best, typ := "", "unknown"
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimRight(mp, "/")+"/")) && len(mp) > len(best) {
			best, typ = mp, f[2]+" ("+f[0]+" on "+mp+")"
		}
	}
	return typ
}
