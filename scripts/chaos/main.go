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
// Every ledger phase sends operations of its own when it needs the worker
// busy (the full disk before, during and after, the worker restarted after
// the read-only file system, the hold of the ledger socket, the run that
// starts with a compaction), so that its verdict depends neither on the
// seed nor on the machine's load; the audit counts them with the rest.
//
// Among its worker runs come two more phases of the embedded ledger. In
// some runs a reader stops: `sqsonce ledger export` (the real command,
// built from the same tree) lists the ledger through the worker's socket
// (served by the chaos worker with the code of `sqsonce run`) into a pipe
// that the campaign does not read, for longer than the leases, while the
// worker goes on claiming and completing; then it is let go and must finish
// its listing with no key twice. Some runs start together with `sqsonce
// ledger compact`, back to back or the moment the compaction holds the
// file's lock: the worker must open the compacted file, and every
// operation it then completes is sent again after its run and must be
// answered as a duplicate, never run again, and be complete in the ledger
// at the end.
//
// Beside it, from the end of the ledger fault phases (whose waits it would
// otherwise lengthen), runs the FIFO campaign (fifo/ in the work directory):
// a FIFO queue with a FIFO dead-letter queue (maxReceiveCount 4), several
// message groups, its own ledger, downstream and worker runs, killed and
// drained too. Its workload has duplicates (some deduplicated by SQS at the
// send, as sqsonce ingest sends them), transient failures, operations that
// fail permanently (also after every replay) or until the downstream is
// fixed, a conflicting payload right behind its original (also behind one
// that failed permanently, so that two messages of one failed key are
// dead-lettered) and two more conflicting payloads after their key
// completed, and keyless messages; and bursts: runs of 4 to 8 operations of
// one group sent together in SendMessageBatch calls, the first and one in
// the middle slow (2-8.5 s), half of them with a copy of one operation in
// another group, so that one receive brings several messages of a group
// and those behind a slow one wait in the worker's hands for several beats
// of its keeper. Its pauses (SIGSTOP, longer than the leases) wait until
// the worker keeps such waiting messages, and it forgets (the real
// `sqsonce ledger forget`, through the worker's socket) the records of
// operations that wait so: the worker must not start them. Between worker
// runs it replays the dead-letter queue through the real `sqsonce replay`,
// built from the same tree, within SQS's five-minute deduplication window.
// Every message sent carries an attribute of its own, which every copy
// keeps, so that the audit accounts for each one: done (its payload
// applied, its key complete), in the queue, in the dead-letter queue,
// dropped by SQS at the send, or lost;
// a dead-letter copy or a replayed copy dropped by FIFO deduplication shows
// as lost. The downstream records which delivery applied each effect, and
// the audit counts every effect of a group applied after one whose
// delivery belongs after it: a delivery belongs where the campaign sent the
// message it copies, or, when sqsonce replay moved it, after everything
// sent before that replay round and before everything sent after it. The
// table reports how many messages waited behind a running one of their
// group (the workers' Stats.GroupWaited) and how many beats kept them
// (GroupWaitBeats), the claims lost (LeaseLost) and reclaimed
// (StaleReclaimed); and it must count no handler called after its
// attempt's claim was lost (from the runs' event logs: every claim
// written, released, taken over or answered lost, and every handler
// call, each with its owner token; see claimHistory), and no message that
// sqsonce dead-lettered although its payload should have completed.
//
// After it, and after the other campaigns on PostgreSQL, comes the FIFO
// campaign's part on a shared ledger (fifo-shared/): the same kind of
// workload, on a FIFO queue of its own, for several chaos workers at once
// that share one PostgreSQL table through the campaign's proxy, which
// stalls (nothing carried: the ledger slow), refuses and cuts the
// connections, or stops the database, each time while a worker keeps
// messages waiting behind a running one; meanwhile one worker at a time is
// stopped (SIGSTOP) for longer than the leases, also while it keeps such
// messages, so that the others take its claims over (see fifoshared.go).
// Its audit is the FIFO campaign's.
//
// Beside both, from the start, runs the shared-ledger campaign (shared/ in
// the work directory): three chaos workers at once on one standard queue
// with a dead-letter queue, sharing one ledger table in PostgreSQL, with a
// workload of the standard campaign's kind and a downstream of its own.
// The campaign starts a PostgreSQL cluster of its own (the server
// binaries of Debian's postgresql package, which scripts/with-postgres.sh
// installs; see pgCluster for why not the server that script starts) and
// puts a TCP proxy of its own between the workers and it. Each worker is
// killed at random, in its handler and in the windows around a completion,
// or drained, and restarted at once (a start while the database is out of
// reach fails, as `sqsonce run` does, and is made again a second later).
// Meanwhile the database is stopped hard (pg_ctl stop -m immediate) and
// restarted after longer than a lease, the proxy refuses new connections
// for a while and cuts the open ones, or cuts the open ones only; after
// each outage every live worker must receive again by itself. Its audit
// is the standard one, with three more named windows for an extra
// execution: a completion or a failure that could not be recorded because
// the database was out of reach, and a lease that lapsed while it was (a
// takeover with the database in reach all along is a finding). It reports
// the workers' waits for the database and the takeovers.
//
// Once the shared-ledger campaign is over (so that two campaigns of three
// workers on PostgreSQL do not weigh on each other's waits) comes the
// transactional campaign (tx/ in the work directory): three chaos workers
// at once with -pgtx, a transactional handler (package pgtx) whose effect
// is a row that it inserts into an effects table of the ledger's database
// in the transaction that records the operation complete, on one standard
// queue with a dead-letter queue and a PostgreSQL cluster and proxy of its
// own. Its workload is of the standard kind (transient and permanent
// failures come after the insert, which must be rolled back), every
// message tagged. Each worker is killed at random, in the windows around
// its own completion (after the transaction committed) and inside the
// transaction: a share of the attempts hold their transaction open after
// the insert and ask the campaign, which kills an armed run with SIGKILL
// before it answers; or drained. A share of the attempts panic after the
// insert, as a handler with a bug would. Meanwhile the database is stopped
// hard and restarted, its connections refused and cut, and the proxy loses
// commits: it holds back a COMMIT and cuts the connection (the server
// rolls back), or passes it on and cuts the connection once the server
// answered (the commit took effect, its answer is lost). Its audit reads
// the database itself: every operation complete in the ledger has exactly
// one effect row, of the attempt that completed it, every other operation
// none, with no window excepted; every message sent is done, in the
// dead-letter queue or still on the queue; every attempt whose handler
// said it committed did, every row of an attempt killed inside its
// transaction or that panicked was rolled back, and no transaction of a
// handler that panicked was left open; every lost commit was resolved by
// the operation's record as the database decided it; and no drained
// worker left a session of its pool inside a transaction.
//
// The exit status is 0 when no operation or message was lost, nothing was
// acknowledged that was not done, every execution beyond the first is
// explained by a crash in the documented window (or a kill that is
// equivalent to one, or, on the shared ledger, the database out of reach or
// the worker stopped for longer than its leases, or a record the campaign
// forgot), no handler was called after its claim was lost, no effect of a
// transactional handler was applied twice, no group ran out of order (but
// behind a worker stopped with the earlier message's attempt in flight), and
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
// Run it through `make chaos` (full) or `go test ./scripts/chaos` (short,
// without the transactional campaign: see TestChaosShort), which start the
// local server (and `make` makes sure PostgreSQL's server binaries are
// installed). Mounting the tmpfs of the ledger phases needs root; the
// transactional campaign alone (-tx-only) does not mount it.
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
	short := flag.Bool("short", false, "the short form (the size TestChaosShort runs, which leaves the transactional campaign out)")
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
	fifoOps := flag.Int("fifo-ops", -1, "operations of the FIFO campaign beside the standard one, 0 for none (default 1500, short 150)")
	fifoDuration := flag.Duration("fifo-duration", 0, "planned length of the FIFO campaign's worker runs (default 160s, short 16s)")
	fifoOnly := flag.Bool("fifo-only", false, "run the FIFO campaign alone (with its part on a shared ledger)")
	fifoSharedOps := flag.Int("fifo-shared-ops", -1, "operations of the FIFO campaign's part on a shared ledger (PostgreSQL), 0 for none (default 600, short 50)")
	fifoSharedDuration := flag.Duration("fifo-shared-duration", 0, "planned length of the worker runs of the FIFO campaign's part on a shared ledger (default 75s, short 10s)")
	sharedOps := flag.Int("shared-ops", -1, "operations of the shared-ledger campaign (PostgreSQL) beside the standard one, 0 for none (default 3000, short 300)")
	sharedDuration := flag.Duration("shared-duration", 0, "planned length of the shared-ledger campaign's worker runs (default 150s, short 24s)")
	txOps := flag.Int("tx-ops", -1, "operations of the transactional campaign (pgtx handlers on PostgreSQL) after the shared-ledger one, 0 for none (default 2000, short 200)")
	txDuration := flag.Duration("tx-duration", 0, "planned length of the transactional campaign's worker runs (default 90s, short 20s)")
	txOnly := flag.Bool("tx-only", false, "run the transactional campaign alone")
	holds := flag.Int("holds", -1, "worker runs whose ledger socket a reader holds and stops reading (default 2, short 1)")
	hold := flag.Duration("hold", 0, "how long a reader holds the ledger socket (default 15s, short 6s)")
	races := flag.Int("races", -1, "compactions started together with a worker run (default 6, short 2)")
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
	if *fifoOps >= 0 {
		cfg.FIFO.Ops = *fifoOps
	}
	if *fifoDuration > 0 {
		cfg.FIFO.Duration = *fifoDuration
	}
	cfg.FIFOOnly = *fifoOnly
	if *fifoSharedOps >= 0 {
		cfg.FIFO.Shared.Ops = *fifoSharedOps
	}
	if *fifoSharedDuration > 0 {
		cfg.FIFO.Shared.Duration = *fifoSharedDuration
	}
	if *sharedOps >= 0 {
		cfg.Shared.Ops = *sharedOps
		cfg.Shared.Deliveries = 3 * *sharedOps
	}
	if *sharedDuration > 0 {
		cfg.Shared.Duration = *sharedDuration
	}
	if *txOps >= 0 {
		cfg.Tx.Ops = *txOps
		cfg.Tx.Deliveries = 3 * *txOps
	}
	if *txDuration > 0 {
		cfg.Tx.Duration = *txDuration
	}
	cfg.TxOnly = *txOnly
	if *holds >= 0 {
		cfg.Holds = *holds
	}
	if *hold > 0 {
		cfg.Hold = *hold
	}
	if *races >= 0 {
		cfg.Races = *races
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
