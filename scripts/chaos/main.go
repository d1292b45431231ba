// Command chaos tries hard to break sqsonce's promise against the local
// SQS-compatible server and real processes, and prints one table of what it
// found.
//
// It is one engine in Jepsen's shape, and campaigns that it runs:
//
//   - a workload (workload.go) is what a campaign sends, as data:
//     operations of classes (normal, transient, slow, permanent, broken
//     until fixed, conflicting, keyless), each message tagged with an
//     attribute of its own that every copy keeps, in units (alone, a
//     batch, copies at once), paced by the campaign's timeline, and late
//     messages sent once their operation took effect;
//   - a system (System) is what it runs: a standard or FIFO queue with a
//     dead-letter queue, the ledger (a bbolt file, or a table of a
//     PostgreSQL cluster of its own behind a TCP proxy that can stall,
//     refuse and cut connections and lose commits), how many chaos workers
//     at once (scripts/chaos/chaosworker: the worker library with faults
//     on its SQS calls, kill switches around a completion and an event log
//     of everything it did), and their handler: the http handler and a
//     downstream in the campaign's process (world.go), or transactional
//     handlers (pgtx) whose effect is a row of the ledger's database;
//   - faults (faults.go, ledgerfaults.go) are small things any campaign
//     can schedule: the ends of runs (SIGKILL at random, in the handler, in
//     the windows around a completion, inside a transaction; SIGTERM
//     drains, some twice), pauses (SIGSTOP past the leases), outages of
//     the database (stops, stalls, refusals, cuts), lost commits, forgets
//     of waiting records, dead-letter replays, a second process, a full
//     disk and a read-only file system under the ledger, a reader that
//     stops on the ledger socket, compactions racing a restart; those that
//     need the worker busy send operations of their own, so that their
//     verdict depends neither on the seed nor on the machine's load, and
//     some judge themselves;
//   - one audit (history.go, audit.go) reads one history (what was sent,
//     what every run claimed, ran, completed, failed, released, lost,
//     deleted and dead-lettered, what the downstream or the database
//     kept, what the faults did, and where every message is at the end)
//     and counts every operation and every message, names the window that
//     explains every execution beyond the first, and runs the checks a
//     campaign adds (checks.go: group order, transaction rows);
//   - one report (report.go): a table per campaign of figures and checks,
//     the must-be-zero ones marked, and report.txt and report.json.
//
// A campaign is one small file that names its workload, its system, how
// its runs end, its faults and its checks (standard.go, fifo.go,
// shared.go, tx.go, fifoshared.go; and flow.go, the flow-control
// campaigns, which run only when -only names them: make chaos-flow);
// scripts/chaos/README.md shows how to add one.
//
// The exit status is 0 when every must-be-zero figure is 0 and every check
// passed; 1 otherwise. It writes its progress to standard error and to
// progress.log in its work directory; when a campaign fails or the run
// ends early, or with -keep or -dir, it keeps that directory (one
// directory per campaign, with runs/: every worker run's output, events
// and counters) and writes the report into it too; its last line names it.
//
// Run it through `make chaos` (full), or `go test ./scripts/chaos` (the
// short form of every campaign but the transactional one: see
// TestChaosShort), which start the local server (and make sure
// PostgreSQL's server binaries are installed). The standard campaign's
// ledger phases mount a tmpfs, which needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

func main() {
	var cfg Config
	only := flag.String("only", "", "run only these campaigns, comma-separated (standard, fifo, shared, tx, fifo-shared; or flow, flow-fifo, flow-bbolt, which run only so)")
	short := flag.Bool("short", false, "the short form of every campaign (TestChaosShort's)")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of everything random")
	flag.StringVar(&cfg.Dir, "dir", "", "work directory, kept (default: a temporary one, removed when every campaign passes)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the work directory")
	flag.BoolVar(&cfg.Race, "race", false, "build the chaos worker with the race detector")
	flag.StringVar(&cfg.Broken, "broken", "", "run a chaos worker that breaks the promise on purpose (delete-first, skip-claim): the audit must fail")
	flag.Parse()
	names := strings.Split(*only, ",")
	campaigns := Campaigns(*short)
	if *only != "" {
		campaigns = slices.DeleteFunc(append(campaigns, Flow(*short)...), func(c *Campaign) bool { return !slices.Contains(names, c.Name) })
	}
	if len(campaigns) == 0 || *only != "" && len(campaigns) != len(names) {
		fmt.Fprintf(os.Stderr, "chaos: -only %s: not campaigns of %s\n", *only, "standard, fifo, shared, tx, fifo-shared, flow, flow-fifo, flow-bbolt")
		os.Exit(2)
	}
	cfg.Endpoint = os.Getenv(sqstest.EndpointEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg, campaigns, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
