package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// spread is the median, minimum and maximum of one metric over rounds.
type spread struct{ med, min, max float64 }

func spreadOf(rs []*result, f func(*result) float64) spread {
	var xs []float64
	for _, r := range rs {
		if v := f(r); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	slices.Sort(xs)
	med := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return spread{med, xs[0], xs[len(xs)-1]}
}

// cell formats a spread with the given number of decimals.
func (s spread) cell(dec int) string {
	if math.IsNaN(s.med) {
		return "n/a"
	}
	f := func(v float64) string { return fmt.Sprintf("%.*f", dec, v) }
	if s.min == s.max {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.min), f(s.max))
}

// The metrics of the table, per run.
var (
	mThroughput = func(r *result) float64 { return r.throughput }
	mP50        = func(r *result) float64 { return r.latP50 }
	mP99        = func(r *result) float64 { return r.latP99 }
	mCPU        = func(r *result) float64 { return r.per1k(r.cpu) }
	mOwnCPU     = func(r *result) float64 { return r.per1k(r.ownCPU) }
	mRSS        = func(r *result) float64 { return r.maxRSS }
	mCommits    = func(r *result) float64 { return r.per1k(r.commits) }
	mServerCPU  = func(r *result) float64 { return r.per1k(r.serverCPU) }
	mServerBusy = func(r *result) float64 { return 100 * r.serverCPU / r.wall.Seconds() }
	mBusy       = func(r *result) float64 { return 100 * r.busy }
	mOther      = func(r *result) float64 { return 100 * r.other }
	mStartup    = func(r *result) float64 { return float64(r.startup.Milliseconds()) }
	mRequests   = func(r *result) float64 { return r.requestsPer1k() }
)

func writeReport(w io.Writer, b *bench, m machine, results []*result, dup *result, ledgerResults, ledgerWarmups []*result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Machine\n\n")
	p("- CPUs: %d × %s (kernel %s)\n", m.nproc, m.cpu, m.kernel)
	p("- Go %s, Node.js %s\n", strings.TrimPrefix(m.goVersion, "go"), strings.TrimPrefix(m.nodeVersion, "v"))
	p("- server: fauxqs %s (one Node.js process, single-threaded), on 127.0.0.1\n", m.fauxqs)
	p("- sqs-consumer %s with @aws-sdk/client-sqs %s\n", m.sqsConsumer, m.nodeSDK)
	p("- ledger file system: %s\n", m.ledgerFS)
	if m.postgres != "" {
		p("- ledger server: %s, on 127.0.0.1\n", m.postgres)
	}
	if m.dynalite != "" {
		p("- ledger server: dynalite %s (one Node.js process, a DynamoDB emulator), on 127.0.0.1\n", m.dynalite)
	}
	p("- driver: `go run ./scripts/bench %s`\n\n", strings.Join(os.Args[1:], " "))
	if len(b.o.contenders) > 0 {
		writeContenders(w, b, m, results, dup)
	}
	if len(ledgerResults) > 0 {
		writeLedgers(w, b, ledgerResults, ledgerWarmups)
	}
}

// writeContenders writes the comparison of the contenders.
func writeContenders(w io.Writer, b *bench, m machine, results []*result, dup *result) {
	o := b.o
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Results\n\n")
	p("%d messages per run, %d rounds run in turn (%s), %d handlers per contender, %d poller(s) for sqsonce, GOGC=%s for the Go contenders. "+
		"Each cell: median (min–max) over the rounds.\n\n", o.messages, o.rounds, strings.Join(o.contenders, " → "), o.concurrency, o.pollers, o.gogc)
	p("| contender | msg/s | p50 ms | p99 ms | CPU s / 1k msg | own CPU s / 1k msg | peak RSS MB | ledger commits / 1k msg | SQS requests / 1k msg | server CPU s / 1k msg | server busy %% | machine busy %% | other load %% | start-up ms |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	by := map[string][]*result{}
	for _, r := range results {
		by[r.contender] = append(by[r.contender], r)
	}
	for _, c := range o.contenders {
		rs := by[c]
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c,
			spreadOf(rs, mThroughput).cell(0), spreadOf(rs, mP50).cell(0), spreadOf(rs, mP99).cell(0),
			spreadOf(rs, mCPU).cell(3), spreadOf(rs, mOwnCPU).cell(3), spreadOf(rs, mRSS).cell(1),
			spreadOf(rs, mCommits).cell(0), spreadOf(rs, mRequests).cell(0), spreadOf(rs, mServerCPU).cell(3), spreadOf(rs, mServerBusy).cell(0),
			spreadOf(rs, mBusy).cell(0), spreadOf(rs, mOther).cell(0), spreadOf(rs, mStartup).cell(0))
	}
	p("\n")
	p("- msg/s: deliveries finished ÷ (last finished − first receive); start-up (process start → first receive) is shown apart.\n")
	p("- finished: delete acknowledged (baseline, sqsonce-go, sqs-consumer); completion recorded in the ledger, just before the delete (sqsonce-exec).\n")
	p("- latency: finished − the body's `sent` (set when the message was sent, before the consumer started), so it is dominated by the backlog's wait.\n")
	p("- CPU: user+system of the consumer process from its rusage, with its waited-for children (for sqsonce-exec, %d × /bin/true); own CPU: sqsonce-exec's own, from /proc/PID/stat just before SIGTERM.\n", o.messages)
	p("- ledger commits: sqsonce-go counts them (ledger.DB.Commits); for sqsonce-exec, the bbolt file's last transaction id after exit minus a fresh ledger's (bbolt adds one per commit).\n")
	p("- server busy: the server's CPU time ÷ the run's wall time (100%% = one core, all it can use); machine busy: all %d CPUs, from /proc/stat; other load: the part of the machine's CPU used by none of the consumer, the server and the driver: other programs, and kernel threads such as the file system's journal writing out the ledger's fsyncs.\n", m.nproc)
	p("- sqs-consumer has no concurrency option: a Consumer handles one batch (at most 10) at a time. Here: %d Consumers on one client in one process (up to %d handlers at once), batchSize 10, waitTimeSeconds 20, %s.\n\n",
		o.scInstances, 10*o.scInstances, map[string]string{"batch": "handleMessageBatch (one DeleteMessageBatch per batch)", "message": "handleMessage (one DeleteMessage per message)"}[o.scMode])

	med := func(c string, f func(*result) float64) float64 { return spreadOf(by[c], f).med }
	ratio := func(a, b string) {
		if len(by[a]) == 0 || len(by[b]) == 0 {
			return
		}
		p("- %s / %s: throughput %.2f×, CPU per message %.2f×\n", a, b,
			med(a, mThroughput)/med(b, mThroughput), med(a, mCPU)/med(b, mCPU))
	}
	p("### Ratios (medians)\n\n")
	ratio(cSqsonceGo, cBaseline)
	ratio(cSqsonceGo, cSQSConsumer)
	ratio(cSqsonceExec, cSqsonceGo)
	p("\n")

	if rs := by[cSqsonceGo]; len(rs) > 0 && rs[0].ledgerWait != nil {
		lw := func(k string) func(*result) float64 {
			return func(r *result) float64 { return r.ledgerWait[k] }
		}
		perClaim := func(r *result) float64 { return float64(r.processed) / r.ledgerWait["claim_batch_calls"] }
		commitRate := func(r *result) float64 { return r.commits / r.active.Seconds() }
		slotMS := func(r *result) float64 { return 1000 * float64(o.concurrency) / r.throughput }
		p("### Where sqsonce-go's time goes (medians)\n\n")
		p("- each message holds one of the %d handler slots from before its receive until its handler returns: %d slots ÷ %.0f msg/s = %.2f ms per message;\n",
			o.concurrency, o.concurrency, med(cSqsonceGo, mThroughput), spreadOf(rs, slotMS).med)
		p("- of that, waiting for the durable claims: ClaimBatch %.2f ms (one call per receive, %.1f messages each);\n",
			spreadOf(rs, lw("claim_batch_mean_ms")).med, spreadOf(rs, perClaim).med)
		p("- after the work, off the slot: a CompleteBatch call (the completions waiting together) waits %.2f ms for its durable commit, then the deletes are queued;\n",
			spreadOf(rs, lw("complete_mean_ms")).med)
		p("- the ledger committed %.0f times a second (%.2f commits per message), one commit at a time.\n\n",
			spreadOf(rs, commitRate).med, spreadOf(rs, mCommits).med/1000)
	}

	if dup != nil {
		p("### Duplicates: every operation delivered %d times, sqsonce-go\n\n", o.dupCopies)
		order := "all first copies sent before the second ones"
		if o.dupAdjacent {
			order = "each operation's copies sent one after another"
		}
		p("%d operations × %d = %d deliveries, %s.\n\n", dup.operations, o.dupCopies, dup.deliveries, order)
		p("| deliveries | operations | handler runs | operations run | max runs per operation | duplicates suppressed | msg/s (deliveries) | CPU ms / delivery | CPU ms / operation | commits / delivery | commits / operation | peak RSS MB |\n")
		p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		p("| %d | %d | %.0f | %.0f | %.0f | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.1f |\n\n",
			dup.deliveries, dup.operations, dup.handlerRuns, dup.ranOps, dup.maxRunsPerKey, dup.stats["duplicates"], dup.throughput,
			1000*dup.cpu/float64(dup.deliveries), 1000*dup.cpu/float64(dup.operations),
			dup.commits/float64(dup.deliveries), dup.commits/float64(dup.operations), dup.maxRSS)
	}

	p("### Targets\n\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	if len(by[cSqsonceGo]) > 0 && len(by[cBaseline]) > 0 {
		r := med(cSqsonceGo, mThroughput) / med(cBaseline, mThroughput)
		p("- sqsonce-go ≥ 90%% of baseline throughput: %.0f%% — %s\n", 100*r, verdict(r >= 0.9))
	}
	if len(by[cSqsonceGo]) > 0 && len(by[cSQSConsumer]) > 0 {
		r := med(cSqsonceGo, mThroughput) / med(cSQSConsumer, mThroughput)
		p("- sqsonce-go ≥ 1.5× sqs-consumer throughput: %.2f× — %s\n", r, verdict(r >= 1.5))
		c := med(cSQSConsumer, mCPU) / med(cSqsonceGo, mCPU)
		p("- sqsonce-go ≥ 2× better CPU per message than sqs-consumer: %.2f× — %s\n", c, verdict(c >= 2))
	}
	for _, c := range []string{cSqsonceGo, cSqsonceExec} {
		if len(by[c]) > 0 {
			s := spreadOf(by[c], mCommits)
			p("- %s ≤ 0.3 ledger commits per message: %.3f (worst round %.3f) — %s\n", c, s.med/1000, s.max/1000, verdict(s.max/1000 <= 0.3))
		}
	}
	for _, c := range []string{cSqsonceGo, cSqsonceExec} {
		if len(by[c]) > 0 {
			s := spreadOf(by[c], mRSS)
			p("- %s peak RSS < 60 MB: %.1f MB (largest round) — %s\n", c, s.max, verdict(s.max < 60))
		}
	}
	if dup != nil {
		p("- one handler run per operation with duplicates: %.0f runs for %d operations, at most %.0f per operation — %s\n",
			dup.handlerRuns, dup.operations, dup.maxRunsPerKey, verdict(dup.handlerRuns == float64(dup.operations) && dup.maxRunsPerKey == 1))
	}
	worst := 0.0
	for _, r := range append(slices.Clone(results), dup) {
		if r != nil {
			worst = max(worst, r.other)
		}
	}
	if worst > 0.05 {
		p("\n**Note:** up to %.0f%% of the machine's CPU went to neither a consumer, the server nor the driver during a run (see \"other load\"); if that was other programs, the results are disturbed.\n", 100*worst)
	}
	p("\n### Runs, in the order they ran\n\n```\n")
	for _, r := range results {
		p("round %d  %-13s %s\n", r.round, r.contender, r.line())
	}
	if dup != nil {
		p("dup x%d   %-13s %s\n", o.dupCopies, dup.contender, dup.line())
	}
	p("```\n")
}
