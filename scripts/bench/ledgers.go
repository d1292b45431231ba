package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/scripts/bench/internal/benchkit"
)

// The ledgers sqsonce-go runs on in the ledger comparison.
const (
	lBbolt    = "bbolt"
	lPostgres = "postgres"
	// The PostgreSQL ledger with a handler that writes a row to the same
	// database: on its own connection, the worker then recording the
	// completion (write), or in one transaction with the completion
	// (package pgtx: tx, a Func run on the transaction; txbatch, Writes
	// sent with the completion in one round trip).
	lPostgresWrite   = "postgres-write"
	lPostgresTx      = "postgres-tx"
	lPostgresTxBatch = "postgres-txbatch"
	lDynamoDB        = "dynamodb"
)

var allLedgers = []string{lBbolt, lPostgres, lPostgresWrite, lPostgresTx, lPostgresTxBatch, lDynamoDB}

// isPostgresTx reports whether ledger runs its handlers' writes in one
// transaction with the completion (package pgtx).
func isPostgresTx(ledger string) bool { return ledger == lPostgresTx || ledger == lPostgresTxBatch }

// isPostgres reports whether ledger runs on PostgreSQL.
func isPostgres(ledger string) bool { return strings.HasPrefix(ledger, lPostgres) }

// ledgerConfig is one configuration of the ledger comparison: sqsonce-go
// on one ledger, in workers processes on one queue (and one table), each
// with concurrency handlers.
type ledgerConfig struct {
	ledger      string
	workers     int
	concurrency int
}

func (c ledgerConfig) String() string {
	return fmt.Sprintf("%s×%d/%d", c.ledger, c.workers, c.concurrency)
}

// ledgerConfigs lists the comparison's configurations in the order they
// run within a round: for each number of handlers, each ledger with one
// worker, then with -workers where -workers-ledger names it.
func (o *options) ledgerConfigs() []ledgerConfig {
	var cs []ledgerConfig
	for _, n := range o.ledgerConcurrency {
		for _, l := range o.ledgers {
			cs = append(cs, ledgerConfig{l, 1, n})
			if o.workers > 1 && contains(o.workersLedgers, l) {
				cs = append(cs, ledgerConfig{l, o.workers, n})
			}
		}
	}
	return cs
}

// sharedServers is what the ledger comparison knows of the shared
// ledgers' servers.
type sharedServers struct {
	pgURL      string // from SQSONCE_TEST_POSTGRES_URL
	pgAddr     string // host:port
	pgPID      int    // the postmaster, 0 when unknown
	pgSettings string // version and the settings that bear on commits

	ddbEndpoint string // from SQSONCE_TEST_DYNAMODB_ENDPOINT
	ddb         *ddb.Client
	ddbPID      int
}

// prepareShared checks the servers the -ledger list needs and finds their
// processes.
func (b *bench) prepareShared(ctx context.Context) error {
	s := &b.shared
	if slices.ContainsFunc(b.o.ledgers, isPostgres) || b.o.fleetRate > 0 {
		s.pgURL = os.Getenv("SQSONCE_TEST_POSTGRES_URL")
		u, err := url.Parse(s.pgURL)
		if s.pgURL == "" || err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return errors.New("-ledger postgres, -fleet-rate: SQSONCE_TEST_POSTGRES_URL must name the local PostgreSQL server as a postgres:// URL: run through scripts/with-postgres.sh or `make bench`")
		}
		s.pgAddr = u.Host
		if u.Port() == "" {
			s.pgAddr = net.JoinHostPort(u.Hostname(), "5432")
		}
		if port, _ := strconv.Atoi(u.Port()); port > 0 && isLoopback(u.Hostname()) {
			s.pgPID = listenerPID(port)
		}
		if s.pgPID == 0 {
			fmt.Fprintln(b.log, "bench: could not find the PostgreSQL server's process: its CPU will not be reported")
		}
		if s.pgSettings, err = pgSettings(ctx, s.pgURL); err != nil {
			return fmt.Errorf("-ledger postgres, -fleet-rate: %w", err)
		}
	}
	if contains(b.o.ledgers, lDynamoDB) {
		s.ddbEndpoint = strings.TrimRight(os.Getenv("SQSONCE_TEST_DYNAMODB_ENDPOINT"), "/")
		u, err := url.Parse(s.ddbEndpoint)
		if s.ddbEndpoint == "" || err != nil || u.Scheme != "http" || !isLoopback(u.Hostname()) {
			return errors.New("-ledger dynamodb: SQSONCE_TEST_DYNAMODB_ENDPOINT must name the local DynamoDB-compatible server (http://127.0.0.1:PORT): run through scripts/with-dynalite.sh or `make bench`")
		}
		s.ddb = ddb.New(ddb.Options{
			Region:       benchkit.Region,
			BaseEndpoint: aws.String(s.ddbEndpoint),
			Credentials:  credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		})
		if port, _ := strconv.Atoi(u.Port()); port > 0 {
			s.ddbPID = listenerPID(port)
		}
		if s.ddbPID == 0 {
			fmt.Fprintln(b.log, "bench: could not find the DynamoDB-compatible server's process: its CPU will not be reported")
		}
	}
	return nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// pgSettings describes the server: its version and the settings that
// decide what a commit costs.
func pgSettings(ctx context.Context, pgURL string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, pgURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version string
	if err := conn.QueryRow(cctx, `SHOW server_version`).Scan(&version); err != nil {
		return "", err
	}
	parts := []string{"PostgreSQL " + version}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"} {
		var v string
		if err := conn.QueryRow(cctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return "", err
		}
		parts = append(parts, name+"="+v)
	}
	return strings.Join(parts, ", "), nil
}

// runLedgers runs the ledger comparison: a warm-up of each configuration,
// then -ledger-rounds rounds of all of them in turn. It returns the
// rounds' results and the warm-ups'.
func (b *bench) runLedgers(ctx context.Context) (results, warmups []*result, err error) {
	configs := b.o.ledgerConfigs()
	if b.o.warmup > 0 {
		for _, c := range configs {
			n := b.o.warmup
			if c.ledger == lDynamoDB {
				n = max(min(n, b.o.dynamoMessages/4), 10) // the emulator is slow
			}
			r, err := b.runLedger(ctx, c, 0, n)
			if err != nil {
				return nil, nil, fmt.Errorf("warm-up %s: %w", c, err)
			}
			fmt.Fprintf(b.log, "warm-up  %-20s %s\n", c, r.ledgerLine())
			warmups = append(warmups, r)
		}
	}
	for round := 1; round <= b.o.ledgerRounds; round++ {
		for _, c := range configs {
			n := b.o.ledgerMessages
			if c.ledger == lDynamoDB {
				n = b.o.dynamoMessages
			}
			r, err := b.runLedger(ctx, c, round, n)
			if err != nil {
				return nil, nil, fmt.Errorf("round %d, %s: %w", round, c, err)
			}
			fmt.Fprintf(b.log, "round %d  %-20s %s\n", round, c, r.ledgerLine())
			results = append(results, r)
		}
	}
	return results, warmups, nil
}

// worker is one sqsonce-go process of a ledger run.
type workerProc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	log    string
}

// runLedger runs one configuration on a fresh queue of ops messages and a
// fresh ledger (a bbolt file, or a table of its own).
func (b *bench) runLedger(ctx context.Context, c ledgerConfig, round, ops int) (*result, error) {
	b.seq++
	runID := b.seq
	runDir := filepath.Join(b.dir, fmt.Sprintf("run-%02d-%s-w%d-c%d", runID, c.ledger, c.workers, c.concurrency))
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("bench-%d-%s-%s", runID, c.ledger, strconv.FormatInt(time.Now().UnixNano(), 36))
	q, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		return nil, fmt.Errorf("create queue: %w", err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	defer b.client.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: &queueURL})

	// The ledger: its arguments for the workers, made before the fill.
	var largs []string
	var proxy *pgProxy
	switch c.ledger {
	case lBbolt:
		largs = []string{"-backend", lBbolt, "-ledger", filepath.Join(b.ledgerRoot(), filepath.Base(runDir), "ledger.db")}
	case lPostgres, lPostgresWrite, lPostgresTx, lPostgresTxBatch:
		table := fmt.Sprintf("bench_run%d", runID)
		if err := postgres.Init(ctx, postgres.Options{URL: b.shared.pgURL, Table: table}); err != nil {
			return nil, err
		}
		defer b.dropPGTable(context.WithoutCancel(ctx), table)
		if err := b.prefillPG(ctx, table); err != nil {
			return nil, err
		}
		u, err := url.Parse(b.shared.pgURL)
		if err != nil {
			return nil, err
		}
		if b.o.countRoundTrips == "all" || (b.o.countRoundTrips == "warmup" && round == 0) {
			if proxy, err = newPGProxy(b.shared.pgAddr); err != nil {
				return nil, err
			}
			defer proxy.Close()
			u.Host = proxy.Addr()
		}
		switch {
		case b.o.pgPoolMaxConns > 0:
			q := u.Query()
			q.Set("pool_max_conns", strconv.Itoa(b.o.pgPoolMaxConns))
			u.RawQuery = q.Encode()
		case c.ledger != lPostgres:
			// A handler that writes holds a connection while it runs
			// (with tx, the ledger's own): room for every handler, and
			// for the worker's claims and heartbeats beside them.
			q := u.Query()
			q.Set("pool_max_conns", strconv.Itoa(c.concurrency+8))
			u.RawQuery = q.Encode()
		}
		workerURL := u.String()
		largs = []string{"-backend", lPostgres, "-postgres-url", workerURL, "-table", table}
		if c.ledger != lPostgres {
			effects := table + "_effects"
			if err := b.pgExec(ctx, `CREATE TABLE `+pgx.Identifier{effects}.Sanitize()+` (key text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return nil, err
			}
			defer b.pgExec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+pgx.Identifier{effects}.Sanitize())
			largs = append(largs, "-pg-handler", strings.TrimPrefix(c.ledger, lPostgres+"-"), "-effects-table", effects)
		}
	case lDynamoDB:
		table := fmt.Sprintf("bench-run%d", runID)
		if _, err := dynamodb.Init(ctx, b.shared.ddb, dynamodb.Options{Table: table}); err != nil {
			return nil, err
		}
		defer b.shared.ddb.DeleteTable(context.WithoutCancel(ctx), &ddb.DeleteTableInput{TableName: aws.String(table)})
		largs = []string{"-backend", lDynamoDB, "-dynamodb-endpoint", b.shared.ddbEndpoint, "-table", table}
	default:
		return nil, fmt.Errorf("unknown ledger %q", c.ledger)
	}

	b.waitQuiet(ctx)
	fillStart := time.Now()
	if _, err := b.fill(ctx, queueURL, runID, ops, 1); err != nil {
		return nil, err
	}
	r := &result{contender: cSqsonceGo, round: round, deliveries: ops, operations: ops, fill: time.Since(fillStart),
		config: c, commits: math.NaN(), handlerRuns: math.NaN(), ranOps: math.NaN(), maxRunsPerKey: math.NaN(),
		ownCPU: math.NaN(), serverCPU: math.NaN(), dbCPU: math.NaN()}
	if n, err := b.queueCount(ctx, queueURL); err != nil || n != ops {
		return nil, fmt.Errorf("queue holds %d messages after the fill, want %d (%v)", n, ops, err)
	}

	// One process stops by itself after the last delete, as in the
	// comparison above; several cannot know when the queue is done, so
	// they run until the queue is empty and are then stopped.
	expect := ops
	if c.workers > 1 {
		expect = 0
	}
	procs := make([]*workerProc, c.workers)
	for i := range procs {
		args := append([]string{"-endpoint", b.endpoint, "-queue-url", queueURL, "-expect", strconv.Itoa(expect),
			"-concurrency", strconv.Itoa(c.concurrency), "-pollers", strconv.Itoa(b.o.ledgerPollers())}, largs...)
		if c.workers > 1 {
			args = append(args, "-latencies")
		}
		if b.o.cpuprofile != "" && round != 0 {
			if err := os.MkdirAll(b.o.cpuprofile, 0o755); err != nil {
				return nil, err
			}
			args = append(args, "-cpuprofile", filepath.Join(b.o.cpuprofile,
				fmt.Sprintf("sqsonce-go-%s-w%d-c%d-round%d-p%d.prof", c.ledger, c.workers, c.concurrency, round, i+1)))
		}
		p := &workerProc{cmd: exec.Command(b.exe[cSqsonceGo], args...), log: filepath.Join(runDir, fmt.Sprintf("stderr-%d.log", i+1))}
		p.cmd.Env = b.o.goEnv(os.Environ())
		f, err := os.Create(p.log)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, f
		procs[i] = p
	}

	srv0, db0, self0 := b.serverCPU(), b.dbCPU(c.ledger), selfCPU()
	busy0, total0 := machineTicks()
	t0 := time.Now()
	type exit struct {
		i   int
		err error
	}
	exited := make(chan exit, len(procs))
	for i, p := range procs {
		if err := p.cmd.Start(); err != nil {
			for _, q := range procs[:i] {
				q.cmd.Process.Kill()
			}
			return nil, fmt.Errorf("start sqsonce-go: %w", err)
		}
		go func() { exited <- exit{i, p.cmd.Wait()} }()
	}
	deadline := time.NewTimer(b.o.runTimeout)
	defer deadline.Stop()
	waitErrs := make([]error, len(procs))
	running := len(procs)
	timedOut := false
	if c.workers > 1 {
		waitCtx, stopWaiting := context.WithCancel(ctx)
		defer stopWaiting()
		select {
		case err := <-b.waitEmpty(waitCtx, queueURL):
			timedOut = err != nil
		case e := <-exited:
			running--
			waitErrs[e.i] = e.err
			timedOut = true
			fmt.Fprintf(b.log, "bench: worker %d of %s exited early (%v); its log: %s\n", e.i+1, c, e.err, tail(procs[e.i].log))
		case <-deadline.C:
			timedOut = true
		}
	} else {
		select {
		case e := <-exited:
			running--
			waitErrs[e.i] = e.err
		case <-deadline.C:
			timedOut = true
		case <-ctx.Done():
			timedOut = true
		}
	}
	if running > 0 {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		kill := time.After(60 * time.Second)
		for running > 0 {
			select {
			case e := <-exited:
				running--
				waitErrs[e.i] = e.err
			case <-kill:
				for _, p := range procs {
					p.cmd.Process.Kill()
				}
				kill = nil
			}
		}
	}
	r.wall = time.Since(t0)
	srv1, db1 := b.serverCPU(), b.dbCPU(c.ledger)
	busy1, total1 := machineTicks()
	self1 := selfCPU()
	r.driverCPU = self1 - self0
	if srv0 >= 0 && srv1 >= 0 {
		r.serverCPU = srv1 - srv0
	}
	if db0 >= 0 && db1 >= 0 {
		r.dbCPU = db1 - db0
	}
	if total1 > total0 {
		r.busy = float64(busy1-busy0) / float64(total1-total0)
	}
	if timedOut {
		return nil, fmt.Errorf("%s did not finish %d messages within %v (or was interrupted); the first worker's log: %s", c, ops, b.o.runTimeout, tail(procs[0].log))
	}
	for i, err := range waitErrs {
		if err != nil {
			return nil, fmt.Errorf("%s: worker %d: %v; its log: %s", c, i+1, err, tail(procs[i].log))
		}
	}

	// What the processes measured, together.
	var lat []float64
	var start, last int64
	claimCalls, claimMS, completeCalls, completeMS := 0.0, 0.0, 0.0, 0.0
	r.requests, r.ledgerReqs = map[string]int64{}, map[string]int64{}
	r.handlerRuns = 0
	for i, p := range procs {
		ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			return nil, errors.New("no rusage")
		}
		r.cpu += tv(ru.Utime) + tv(ru.Stime)
		r.maxRSS = max(r.maxRSS, float64(ru.Maxrss)/1024)
		rep, err := lastReport(p.stdout.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s: worker %d: %w; its log: %s", c, i+1, err, tail(p.log))
		}
		r.processed += rep.Processed
		if rep.StartNS != 0 && (start == 0 || rep.StartNS < start) {
			start = rep.StartNS
		}
		last = max(last, rep.LastNS)
		if c.workers > 1 {
			lat = append(lat, rep.LatMS...)
		} else {
			r.latP50, r.latP99 = rep.LatP50MS, rep.LatP99MS
		}
		r.batches += rep.Batches
		for k, v := range rep.Requests {
			r.requests[k] += v
		}
		for k, v := range rep.LedgerRequests {
			r.ledgerReqs[k] += v
		}
		if f := rep.LedgerInFlight; f != nil {
			r.inFlightMax = max(r.inFlightMax, f["max"])
			r.inFlightMean += f["mean"] / float64(c.workers)
		}
		if rep.Commits != nil {
			if math.IsNaN(r.commits) {
				r.commits = 0
			}
			r.commits += float64(*rep.Commits)
		}
		r.handlerRuns += float64(rep.HandlerRuns)
		if w := rep.LedgerWait; w != nil {
			claimCalls += w["claim_batch_calls"]
			claimMS += w["claim_batch_calls"] * w["claim_batch_mean_ms"]
			completeCalls += w["complete_calls"]
			completeMS += w["complete_calls"] * w["complete_mean_ms"]
		}
	}
	if c.workers > 1 {
		r.latP50, r.latP99 = benchkit.Quantile(lat, 0.50), benchkit.Quantile(lat, 0.99)
	}
	r.ledgerWait = map[string]float64{
		"claim_batch_calls": claimCalls, "claim_batch_mean_ms": claimMS / max(claimCalls, 1),
		"complete_calls": completeCalls, "complete_mean_ms": completeMS / max(completeCalls, 1),
	}
	r.ownCPU = r.cpu
	r.startup = time.Duration(start - t0.UnixNano())
	r.active = time.Duration(last - start)
	if total1 > total0 && !math.IsNaN(r.serverCPU) {
		used := float64(busy1-busy0) / userHZ
		db := r.dbCPU
		if math.IsNaN(db) {
			db = 0
		}
		r.other = max(used-r.cpu-r.serverCPU-db-(self1-self0), 0) / (float64(total1-total0) / userHZ)
	}
	if proxy != nil {
		r.roundTrips = proxy.Counts()
		if r.roundTrips[rtClaim] == 0 {
			fmt.Fprintf(b.log, "bench: %s: the proxy recognised no claim among %v: has the claim's statement changed? (see statementKind)\n", c, r.roundTrips)
		}
	}
	if r.processed != int64(ops) {
		return nil, fmt.Errorf("%s finished %d deliveries, want %d; the first worker's log: %s", c, r.processed, ops, tail(procs[0].log))
	}
	if r.active > 0 {
		r.throughput = float64(r.processed) / r.active.Seconds()
	}
	if n, err := b.queueCount(ctx, queueURL); err != nil || n != 0 {
		return nil, fmt.Errorf("%s: the queue still holds %d messages after the run (%v)", c, n, err)
	}
	return r, nil
}

// dbCPU returns the CPU seconds the server of ledger has used so far, or -1
// when unknown (and for bbolt, which has none).
func (b *bench) dbCPU(ledger string) float64 {
	switch {
	case isPostgres(ledger):
		if b.shared.pgPID != 0 {
			if s, err := treeCPU(b.shared.pgPID); err == nil {
				return s
			}
		}
	case ledger == lDynamoDB:
		if b.shared.ddbPID != 0 {
			if own, _, err := procCPU(b.shared.ddbPID); err == nil {
				return own
			}
		}
	}
	return -1
}

// prefillPG writes -pg-prefill complete records (keys pre-<i>) into a new
// table and runs VACUUM ANALYZE, as autovacuum leaves a table in use: the
// server then plans the ledger's statements for a table of that size. On a
// table without statistics, a statement prepared while the table is small
// can keep a sequential scan in the connection's cached generic plan until
// autovacuum first analyzes the table.
func (b *bench) prefillPG(ctx context.Context, table string) error {
	if b.o.pgPrefill == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, b.shared.pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	t := pgx.Identifier{table}.Sanitize()
	_, err = conn.Exec(cctx, `INSERT INTO `+t+` (key, state, fingerprint, attempts, owner, first_seen, claimed, updated, completed, expires, message_id)
SELECT convert_to('pre-' || i, 'UTF8'), 2, sha256(convert_to('pre-' || i, 'UTF8')), 1, convert_to('prefill/' || i, 'UTF8'),
	now(), now(), now(), now(), now() + interval '7 days', convert_to(md5(i::text), 'UTF8')
FROM generate_series(1, $1::int) i`, b.o.pgPrefill)
	if err != nil {
		return fmt.Errorf("prefill %s: %w", table, err)
	}
	if _, err := conn.Exec(cctx, `VACUUM ANALYZE `+t); err != nil {
		return fmt.Errorf("prefill %s: %w", table, err)
	}
	return nil
}

// dropPGTable removes a run's table, its version table and its function.
func (b *bench) dropPGTable(ctx context.Context, table string) {
	t := pgx.Identifier{table}.Sanitize()
	v := pgx.Identifier{table + "_version"}.Sanitize()
	f := pgx.Identifier{table + "_refuse"}.Sanitize()
	if err := b.pgExec(ctx, `DROP TABLE IF EXISTS `+t+`, `+v+`; DROP FUNCTION IF EXISTS `+f+`(text, text, text)`); err != nil {
		fmt.Fprintf(b.log, "bench: drop %s: %v\n", table, err)
	}
}

// pgExec runs sql on the PostgreSQL server, on a connection of its own.
func (b *bench) pgExec(ctx context.Context, sql string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, b.shared.pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(cctx, sql)
	return err
}

// ledgerTrips returns the ledger's round trips for claims, for completions
// and for everything else: through the proxy for PostgreSQL, the HTTP
// requests for DynamoDB; NaN when not counted.
func (r *result) ledgerTrips() (claim, complete, other float64) {
	switch {
	case r.roundTrips != nil:
		var rest int64
		for k, v := range r.roundTrips {
			if k != rtClaim && k != rtComplete {
				rest += v
			}
		}
		return float64(r.roundTrips[rtClaim]), float64(r.roundTrips[rtComplete]), float64(rest)
	case len(r.ledgerReqs) > 0:
		for k, v := range r.ledgerReqs {
			call, _, _ := strings.Cut(k, " ")
			switch call {
			case "claim":
				claim += float64(v)
			case "complete":
				complete += float64(v)
			default:
				other += float64(v)
			}
		}
		return claim, complete, other
	}
	return math.NaN(), math.NaN(), math.NaN()
}

func (r *result) ledgerLine() string {
	s := fmt.Sprintf("%6d msgs  %8.0f msg/s  p50 %6.0f ms  p99 %6.0f ms  worker CPU %.3f s/1k  RSS %5.1f MB  db CPU %.3f s/1k  server CPU %.3f s/1k  driver CPU %.3f s/1k  busy %3.0f%% (other %2.0f%%)  fill %.1fs  start-up %dms  batches %d",
		r.processed, r.throughput, r.latP50, r.latP99, r.per1k(r.cpu), r.maxRSS, r.per1k(r.dbCPU), r.per1k(r.serverCPU), r.per1k(r.driverCPU),
		100*r.busy, 100*r.other, r.fill.Seconds(), r.startup.Milliseconds(), r.batches)
	if !math.IsNaN(r.commits) {
		s += fmt.Sprintf("  commits %.0f (%.2f/batch)", r.commits, r.commits/float64(r.batches))
	}
	s += fmt.Sprintf("  SQS requests/1k: receive %.0f, delete %.0f, all %.0f",
		r.per1k(float64(r.requests["ReceiveMessage"])), r.per1k(float64(r.requests["DeleteMessageBatch"])), r.requestsPer1k())
	if cl, co, ot := r.ledgerTrips(); !math.IsNaN(cl) {
		s += fmt.Sprintf("  ledger round trips per batch: claim %.2f, complete %.2f, other %.0f in all", cl/float64(r.batches), co/float64(r.batches), ot)
	}
	if r.roundTrips != nil {
		s += fmt.Sprintf(" %v", r.roundTrips)
	}
	if len(r.ledgerReqs) > 0 {
		s += fmt.Sprintf(" %v, in flight max %.0f mean %.1f", r.ledgerReqs, r.inFlightMax, r.inFlightMean)
	}
	if w := r.ledgerWait; w != nil {
		s += fmt.Sprintf("  ledger wait: claim batch %.2f ms (%.0f calls), complete %.2f ms (mean)", w["claim_batch_mean_ms"], w["claim_batch_calls"], w["complete_mean_ms"])
	}
	return s
}
