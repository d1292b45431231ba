package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
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
	mAllocs     = func(r *result) float64 { return r.mallocs / float64(r.processed) }
)

func writeReport(w io.Writer, b *bench, m machine, results []*result, dup *result, consoleResults, ledgerResults, ledgerWarmups []*result, fleet *fleetResult) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Machine\n\n")
	p("- CPUs: %d × %s (kernel %s)\n", m.nproc, m.cpu, m.kernel)
	p("- Go %s, Node.js %s\n", strings.TrimPrefix(m.goVersion, "go"), strings.TrimPrefix(m.nodeVersion, "v"))
	p("- server: fauxqs %s (one Node.js process, single-threaded), on 127.0.0.1\n", m.fauxqs)
	if contains(b.o.contenders, cSQSConsumer) {
		p("- sqs-consumer %s with @aws-sdk/client-sqs %s\n", m.sqsConsumer, m.nodeSDK)
	}
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
	if len(consoleResults) > 0 {
		writeConsole(w, b, consoleResults)
	}
	if len(ledgerResults) > 0 {
		writeLedgers(w, b, ledgerResults, ledgerWarmups)
	}
	if fleet != nil {
		writeFleetRate(w, b, fleet)
	}
}

// writeContenders writes the comparison of the contenders: a table per
// profile and number of handlers.
func writeContenders(w io.Writer, b *bench, m machine, results []*result, dup *result) {
	o := b.o
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	gogc := "GOGC=" + o.gogc + " for the Go contenders"
	if o.gogc == "default" {
		gogc = "GOGC unset (baseline and sqsonce-go: Go's default, 100; the sqsonce binary: its own default, 400)"
	}
	p("## Results\n\n")
	loops := "as many receive loops for sqsonce and baseline as sqs-consumer has Consumers (one per 10 handlers)"
	if o.pollers > 0 {
		loops = fmt.Sprintf("%d receive loop(s) for sqsonce and baseline", o.pollers)
	}
	p("%d rounds of every contender in turn (%s) in each configuration, %s, %s. "+
		"Each cell: median (min–max) over the rounds.\n\n", o.rounds, strings.Join(o.contenders, " → "), loops, gogc)
	if contains(o.profiles, pStress) {
		p("- **stress**: %d messages per run; the contenders talk to the local server straight, which answers in well under a millisecond; the handlers do nothing (sqsonce-exec runs `/bin/true`, sqsonce-http's endpoint answers at once); baseline has %d delete loop(s); "+
			"plain, the ceiling, receives ten per call in each receive loop and deletes them in one DeleteMessageBatch while it receives again, with no handler, no bound on the messages in hand and no ledger.\n",
			o.messages, o.deletersOf(runConfig{profile: pStress}))
	}
	if contains(o.profiles, pRealistic) {
		p("- **realistic**: %d messages per run; every contender's SQS requests go through the latency proxy (`scripts/bench/latencyproxy`, a child process of the driver, so its CPU is its own), which holds each request before forwarding it: "+
			"%.0f %% of them %v ± %.0f %% (uniform), %.0f %% (at random, seeded %d) %v–%v (uniform), a mean of %v. "+
			"Each message's handler takes %v: a timer in baseline and sqsonce-go, `setTimeout` in sqs-consumer (a batch's messages wait at once), `%s` for sqsonce-exec, the endpoint's delay for sqsonce-http. "+
			"Baseline has %d delete loops, as many as the deletes sqsonce's worker has in flight (one, waiting a round trip per DeleteMessageBatch, would cap it at 10 messages per round trip). "+
			"The driver fills and counts the queues straight.\n",
			o.realMessages, 100*(1-o.latencyTailShare), o.latency, 100*o.latencyJitter, 100*o.latencyTailShare, o.latencySeed,
			time.Duration(0.75*float64(o.latencyTail)), o.latencyTail, o.configuredDelayMean().Round(10*time.Microsecond), o.work, execCommand(o.work),
			o.deletersOf(runConfig{profile: pRealistic}))
	}
	p("\n")

	by := map[runConfig]map[string][]*result{}
	for _, r := range results {
		if by[r.cfg] == nil {
			by[r.cfg] = map[string][]*result{}
		}
		by[r.cfg][r.contender] = append(by[r.cfg][r.contender], r)
	}
	mCeiling := func(r *result) float64 { c, _ := b.ceilingOf(r); return c }
	mOfCeiling := func(r *result) float64 { c, _ := b.ceilingOf(r); return r.throughput / c }
	mRTT := func(r *result) float64 { _, rtt := b.ceilingOf(r); return rtt }
	mProxyCPU := func(r *result) float64 { return r.per1k(r.proxyCPU) }
	mProxyBusy := func(r *result) float64 { return 100 * r.proxyCPU / r.wall.Seconds() }
	mWorkCPU := func(r *result) float64 { return r.per1k(r.workCPU) }

	for _, cfg := range o.runConfigs() {
		rsBy := by[cfg]
		if len(rsBy) == 0 {
			continue
		}
		med := func(c string, f func(*result) float64) float64 { return spreadOf(rsBy[c], f).med }
		p("### %s, %d handlers\n\n", cfg.profile, cfg.concurrency)
		realistic := cfg.profile == pRealistic
		if realistic {
			p("| contender | msg/s | ceiling msg/s | ÷ ceiling | p50 ms | p99 ms | CPU s / 1k msg | own CPU s / 1k msg | peak RSS MB | ledger commits / 1k msg | SQS requests / 1k msg | receive round trip ms | proxy CPU s / 1k msg | proxy busy %% | server CPU s / 1k msg | endpoint CPU s / 1k msg | server busy %% | machine busy %% | other load %% | start-up ms |\n")
			p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		} else {
			p("| contender | msg/s | p50 ms | p99 ms | CPU s / 1k msg | own CPU s / 1k msg | allocations / msg | peak RSS MB | ledger commits / 1k msg | SQS requests / 1k msg | server CPU s / 1k msg | endpoint CPU s / 1k msg | server busy %% | machine busy %% | other load %% | start-up ms |\n")
			p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		}
		for _, c := range o.contenders {
			rs := rsBy[c]
			if len(rs) == 0 {
				continue
			}
			p("| %s | %s", c, spreadOf(rs, mThroughput).cell(0))
			if realistic {
				p(" | %s | %s", spreadOf(rs, mCeiling).cell(0), spreadOf(rs, mOfCeiling).cell(2))
			}
			p(" | %s | %s | %s | %s", spreadOf(rs, mP50).cell(0), spreadOf(rs, mP99).cell(0),
				spreadOf(rs, mCPU).cell(3), spreadOf(rs, mOwnCPU).cell(3))
			if !realistic {
				p(" | %s", spreadOf(rs, mAllocs).cell(0))
			}
			p(" | %s | %s | %s", spreadOf(rs, mRSS).cell(1),
				spreadOf(rs, mCommits).cell(0), spreadOf(rs, mRequests).cell(0))
			if realistic {
				p(" | %s | %s | %s", spreadOf(rs, mRTT).cell(2), spreadOf(rs, mProxyCPU).cell(3), spreadOf(rs, mProxyBusy).cell(0))
			}
			p(" | %s | %s | %s | %s | %s | %s |\n", spreadOf(rs, mServerCPU).cell(3), spreadOf(rs, mWorkCPU).cell(3), spreadOf(rs, mServerBusy).cell(0),
				spreadOf(rs, mBusy).cell(0), spreadOf(rs, mOther).cell(0), spreadOf(rs, mStartup).cell(0))
		}
		p("\n")
		ratio := func(a, bb string) {
			if len(rsBy[a]) == 0 || len(rsBy[bb]) == 0 {
				return
			}
			p("- %s / %s: throughput %.2f×, CPU per message %.2f×\n", a, bb,
				med(a, mThroughput)/med(bb, mThroughput), med(a, mCPU)/med(bb, mCPU))
		}
		ratio(cSqsonceGo, cPlain)
		ratio(cSqsonceGo, cBaseline)
		ratio(cSqsonceGo, cBefore)
		ratio(cBefore, cPlain)
		ratio(cSqsonceGo, cSQSConsumer)
		ratio(cSqsonceExec, cSqsonceGo)
		ratio(cSqsonceHTTP, cSqsonceGo)
		if f, ok := b.execFloors[cfg.concurrency]; ok && !realistic && len(rsBy[cSqsonceExec]) > 0 {
			t := med(cSqsonceExec, mThroughput)
			p("- sqsonce-exec / the machine's process starts at %d at once (%.0f/s from Go's os/exec): %.2f×", f.parallel, f.goRate, t/f.goRate)
			if !math.IsNaN(f.xargsRate) {
				p(" (xargs -P %d: %.0f/s, %.2f×)", f.parallel, f.xargsRate, t/f.xargsRate)
			}
			p("\n")
		}
		if realistic {
			var all []*result
			for _, c := range o.contenders {
				all = append(all, rsBy[c]...)
			}
			pick := func(f func(*result) float64) spread { return spreadOf(all, f) }
			rtt := pick(func(r *result) float64 { return r.rxRTT })
			p("- the proxy's delays, over all this configuration's runs: mean %.2f ms, p50 %.2f, p99 %.2f (medians of the runs; configured mean %.2f); a receive's round trip through it (delay and server) %s ms, mean.\n",
				pick(func(r *result) float64 { return r.delayMean }).med, pick(func(r *result) float64 { return r.delayP50 }).med,
				pick(func(r *result) float64 { return r.delayP99 }).med, float64(o.configuredDelayMean())/1e6, rtt.cell(2))
			busiest := pick(mProxyBusy).max
			verdict := "not the bottleneck"
			if busiest > 50 {
				verdict = "**busy enough to weigh on the results**"
			}
			p("- the proxy used at most %.0f %% of one core in a run (%.3f CPU s / 1k msg, median): %s.\n", busiest, pick(mProxyCPU).med, verdict)
			p("- ceiling: min(P × 10 / R, handlers / W) with R the run's mean receive round trip and W = %v;", cfg.work)
			for _, c := range o.contenders {
				if len(rsBy[c]) == 0 {
					continue
				}
				pl, h := o.pollersOf(c, cfg)
				p(" %s P = %d, %d handlers;", c, pl, h)
			}
			p(" sqs-consumer's Consumers receive, handle and delete a batch before they receive again, so its own loop allows only 10 × P / (R + W + a delete's round trip).\n")
		}
		for _, c := range []string{cSqsonceGo, cBefore} {
			rs := rsBy[c]
			if len(rs) == 0 || rs[0].ledgerWait == nil {
				continue
			}
			lw := func(k string) func(*result) float64 {
				return func(r *result) float64 { return r.ledgerWait[k] }
			}
			perClaim := func(r *result) float64 { return float64(r.processed) / r.ledgerWait["claim_batch_calls"] }
			commitRate := func(r *result) float64 { return r.commits / r.active.Seconds() }
			perCommit := func(r *result) float64 { return float64(r.processed) / r.commits }
			p("- %s (medians): waiting for the durable claims, ClaimBatch %.2f ms (one call per receive, %.1f messages each); off the handler, a CompleteBatch call waits %.2f ms for its commit; "+
				"the ledger committed %.0f times a second, %.1f messages per commit, %.3f fsyncs per message (bbolt: two fdatasyncs per commit).\n",
				c, spreadOf(rs, lw("claim_batch_mean_ms")).med, spreadOf(rs, perClaim).med, spreadOf(rs, lw("complete_mean_ms")).med,
				spreadOf(rs, commitRate).med, spreadOf(rs, perCommit).med, 2*spreadOf(rs, mCommits).med/1000)
		}
		p("\n")
	}

	p("### Ratios at equal handlers (medians)\n\n")
	p("| profile | handlers | receive loops: sqsonce-go, baseline, sqs-consumer | sqsonce-go ÷ plain msg/s | CPU / msg | sqsonce-go ÷ baseline msg/s | CPU / msg | sqsonce-go ÷ sqs-consumer msg/s | CPU / msg | sqsonce-go ÷ ceiling |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, cfg := range o.runConfigs() {
		rsBy := by[cfg]
		if len(rsBy[cSqsonceGo]) == 0 {
			continue
		}
		med := func(c string, f func(*result) float64) float64 { return spreadOf(rsBy[c], f).med }
		cell := func(c string, f func(*result) float64) string {
			if len(rsBy[c]) == 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.2f×", med(cSqsonceGo, f)/med(c, f))
		}
		ofCeiling := "n/a"
		if cfg.profile == pRealistic {
			ofCeiling = fmt.Sprintf("%.2f", med(cSqsonceGo, mOfCeiling))
		}
		pGo, _ := o.pollersOf(cSqsonceGo, cfg)
		pBase, _ := o.pollersOf(cBaseline, cfg)
		pSC, _ := o.pollersOf(cSQSConsumer, cfg)
		p("| %s | %d | %d, %d, %d | %s | %s | %s | %s | %s | %s | %s |\n", cfg.profile, cfg.concurrency, pGo, pBase, pSC, cell(cPlain, mThroughput), cell(cPlain, mCPU), cell(cBaseline, mThroughput), cell(cBaseline, mCPU),
			cell(cSQSConsumer, mThroughput), cell(cSQSConsumer, mCPU), ofCeiling)
	}
	p("\nA receive loop brings at most 10 messages per round trip: where the SQS round trip is long (realistic), the contender with more loops has the higher ceiling (sqs-consumer runs one per Consumer; sqsonce and baseline run -sqsonce-pollers).\n\n")

	p("Notes:\n\n")
	p("- msg/s: deliveries finished ÷ (last finished − first receive); start-up (process start → first receive) is shown apart.\n")
	p("- finished: delete acknowledged (baseline, sqsonce-go, sqs-consumer); completion recorded in the ledger, just before the delete (sqsonce-exec, sqsonce-http).\n")
	p("- latency: finished − the body's `sent` (set when the message was sent, before the consumer started), so it is dominated by the backlog's wait.\n")
	p("- CPU: user+system of the consumer process from its rusage, with its waited-for children (for sqsonce-exec, one process per message); own CPU: the sqsonce binary's own, from /proc/PID/stat just before SIGTERM.\n")
	p("- ledger commits: sqsonce-go counts them (ledger.DB.Commits); for the sqsonce binary, the bbolt file's last transaction id after exit minus a fresh ledger's (bbolt adds one per commit).\n")
	p("- SQS requests: in the stress profile as the contender's client counts them (HTTP requests; the sqsonce binary: its `sqsonce_sqs_requests_total`, API calls after the SDK's retries, read from its admin listener before SIGTERM); in the realistic profile as the proxy counts them, alike for all.\n")
	p("- endpoint CPU: sqsonce-http's endpoint (`scripts/bench/workserver`), a child process of the driver; proxy CPU: the latency proxy's, from /proc/PID/stat; proxy busy: its CPU time ÷ the run's wall time (100 %% = one core).\n")
	p("- server busy: the server's CPU time ÷ the run's wall time (100%% = one core, all it can use); machine busy: all %d CPUs, from /proc/stat; other load: the part of the machine's CPU used by none of the consumer, the server, the proxy, the endpoint and the driver: other programs, and kernel threads such as the file system's journal writing out the ledger's fsyncs.\n", m.nproc)
	p("- sqs-consumer has no concurrency option: a Consumer handles one batch (at most 10) at a time. Here: as many Consumers on one client in one process as hold the handlers (%s), batchSize 10, waitTimeSeconds 20, %s.\n\n",
		scInstancesText(o), map[string]string{"batch": "handleMessageBatch (one DeleteMessageBatch per batch)", "message": "handleMessage (one DeleteMessage per message)"}[o.scMode])

	if len(b.execFloors) > 0 {
		p("### The floor under sqsonce-exec: starting processes\n\n")
		p("| processes at once | runs per try | process starts/s (Go os/exec, /bin/true) | process starts/s (xargs -P, /bin/true) |\n|--:|--:|--:|--:|\n")
		for _, n := range o.concurrency {
			if f, ok := b.execFloors[n]; ok {
				p("| %d | %d | %.0f | %.0f |\n", f.parallel, f.runs, f.goRate, f.xargsRate)
			}
		}
		p("\nMeasured by the driver before the runs, with the server idle, the best of %d tries: sqsonce-exec starts one process per message, so it cannot go faster than this, less the CPU that its own work and the server's take from the same cores.\n\n", execFloorReps)
	}

	if dup != nil {
		p("### Duplicates: every operation delivered %d times, sqsonce-go (%s, %d handlers)\n\n", o.dupCopies, dup.cfg.profile, dup.cfg.concurrency)
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

	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	for _, cfg := range o.runConfigs() {
		rsBy := by[cfg]
		if cfg.profile != pStress || len(rsBy) == 0 {
			continue
		}
		med := func(c string, f func(*result) float64) float64 { return spreadOf(rsBy[c], f).med }
		p("### Targets (stress, %d handlers)\n\n", cfg.concurrency)
		if len(rsBy[cSqsonceGo]) > 0 && len(rsBy[cPlain]) > 0 {
			// The plain poller is the ceiling: at 16 handlers a durable
			// claim before each batch's work costs more of it than at 64.
			want := 0.8
			if cfg.concurrency <= 16 {
				want = 0.6
			}
			r := med(cSqsonceGo, mThroughput) / med(cPlain, mThroughput)
			p("- sqsonce-go ≥ %.1f× the plain poller's throughput: %.2f× — %s\n", want, r, verdict(r >= want))
			c := med(cSqsonceGo, mCPU) / med(cPlain, mCPU)
			p("- sqsonce-go ≤ 2× the plain poller's CPU per message: %.2f× — %s\n", c, verdict(c <= 2))
		}
		if len(rsBy[cSqsonceGo]) > 0 && len(rsBy[cBaseline]) > 0 {
			r := med(cSqsonceGo, mThroughput) / med(cBaseline, mThroughput)
			p("- sqsonce-go ≥ 90%% of baseline throughput: %.0f%% — %s\n", 100*r, verdict(r >= 0.9))
		}
		if len(rsBy[cSqsonceGo]) > 0 && len(rsBy[cSQSConsumer]) > 0 {
			r := med(cSqsonceGo, mThroughput) / med(cSQSConsumer, mThroughput)
			p("- sqsonce-go ≥ 1.5× sqs-consumer throughput: %.2f× — %s\n", r, verdict(r >= 1.5))
			c := med(cSQSConsumer, mCPU) / med(cSqsonceGo, mCPU)
			p("- sqsonce-go ≥ 2× better CPU per message than sqs-consumer: %.2f× — %s\n", c, verdict(c >= 2))
		}
		for _, c := range []string{cSqsonceGo, cSqsonceExec, cSqsonceHTTP} {
			if len(rsBy[c]) > 0 {
				s := spreadOf(rsBy[c], mCommits)
				p("- %s ≤ 0.3 ledger commits per message: %.3f (worst round %.3f) — %s\n", c, s.med/1000, s.max/1000, verdict(s.max/1000 <= 0.3))
			}
		}
		for _, c := range []string{cSqsonceGo, cSqsonceExec, cSqsonceHTTP} {
			if len(rsBy[c]) > 0 {
				s := spreadOf(rsBy[c], mRSS)
				p("- %s peak RSS < 60 MB: %.1f MB (largest round) — %s\n", c, s.max, verdict(s.max < 60))
			}
		}
		if dup != nil && dup.cfg == cfg {
			p("- one handler run per operation with duplicates: %.0f runs for %d operations, at most %.0f per operation — %s\n",
				dup.handlerRuns, dup.operations, dup.maxRunsPerKey, verdict(dup.handlerRuns == float64(dup.operations) && dup.maxRunsPerKey == 1))
		}
		p("\n")
	}
	worst := 0.0
	for _, r := range append(slices.Clone(results), dup) {
		if r != nil {
			worst = max(worst, r.other)
		}
	}
	if worst > 0.05 {
		p("**Note:** up to %.0f%% of the machine's CPU went to neither a consumer, the server, the proxy, the endpoint nor the driver during a run (see \"other load\"); if that was other programs, the results are disturbed.\n\n", 100*worst)
	}
	p("### Runs, in the order they ran\n\n```\n")
	for _, r := range results {
		p("%-13s round %d  %-13s %s\n", r.cfg, r.round, r.contender, r.line())
	}
	if dup != nil {
		p("%-13s dup x%d   %-13s %s\n", dup.cfg, o.dupCopies, dup.contender, dup.line())
	}
	p("```\n")
}

// scInstancesText says how many Consumers sqs-consumer ran with at each
// number of handlers.
func scInstancesText(o options) string {
	var parts []string
	for _, n := range o.concurrency {
		k := o.scInstances(n)
		parts = append(parts, fmt.Sprintf("%d for %d handlers, up to %d at once", k, n, 10*k))
	}
	return strings.Join(parts, "; ")
}
