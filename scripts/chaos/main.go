// Command chaos tries hard to break sqsonce's promise against the local
// SQS-compatible server and real processes, and prints one table of what it
// found.
//
// It creates a standard queue with a dead-letter queue (maxReceiveCount 5),
// starts a downstream HTTP server in its own process (scripts/chaos/downstream:
// it records every execution durably and honours Idempotency-Key), and runs
// the chaos worker (scripts/chaos/chaosworker: the worker library, the bbolt
// ledger and the http handler, with faults injected into its SQS calls)
// again and again on one ledger file: it kills it with SIGKILL at random
// moments, in the two windows around a completion, and while the downstream
// serves one of its requests, and drains it with SIGTERM. Meanwhile it sends
// a workload of duplicated, failing, permanently failing, conflicting and
// keyless deliveries through a client that loses acknowledgements, and
// puts the ledger through a full disk, a read-only file system and a second
// process. Once the queue is empty it audits every operation against the
// ledger, the downstream's log and the dead-letter queue.
//
// The exit status is 0 when no operation was lost, nothing was acknowledged
// that was not done, every execution beyond the first is explained by a
// crash in the documented window (or a kill that is equivalent to one), and
// every check passed; 1 otherwise.
//
// It writes its progress to standard error and, as it goes, to progress.log
// in its work directory. When the campaign fails or ends early, or with
// -keep or -dir, it keeps that directory and writes the report into it too:
// report.txt (the table, the checks that failed, the findings and the
// per-operation details) and report.json (the same for a program to read);
// its last line names them. runs/ holds every worker run's output, events
// and counters.
//
// Run it through `make chaos` (full) or `go test ./scripts/chaos` (short),
// which start the local server. Mounting the tmpfs of the ledger phases
// needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

func main() {
	short := flag.Bool("short", false, "the short form (the size TestChaosShort runs)")
	cfg := FullConfig()
	seed := flag.Uint64("seed", 0, "seed of everything random (default 1)")
	ops := flag.Int("ops", 0, "operations (default 10000, short 500)")
	deliveries := flag.Int("deliveries", 0, "deliveries (default 30000, short 1500)")
	duration := flag.Duration("duration", 0, "planned length of the chaos, while the workload is sent (default 240s, short 32s)")
	kills := flag.Int("kills", 0, "SIGKILLs of the worker (default 32, short 8)")
	terms := flag.Int("terms", 0, "SIGTERM drains of the worker (default 6, short 2)")
	pauses := flag.Int("pauses", -1, "SIGSTOPs of a worker run, longer than its leases (default 6, short 1)")
	dir := flag.String("dir", "", "work directory, kept (default: a temporary one, removed when the campaign passes)")
	keep := flag.Bool("keep", false, "keep the work directory")
	race := flag.Bool("race", false, "build the worker with the race detector")
	flag.Parse()
	if *short {
		cfg = ShortConfig()
	}
	set := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	if *seed > 0 {
		cfg.Seed = *seed
	}
	set(&cfg.Ops, *ops)
	set(&cfg.Deliveries, *deliveries)
	set(&cfg.Kills, *kills)
	set(&cfg.Terms, *terms)
	if *pauses >= 0 {
		cfg.Pauses = *pauses
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	cfg.Dir, cfg.Keep, cfg.Race = *dir, *keep, *race
	cfg.Endpoint = os.Getenv(sqstest.EndpointEnv)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
