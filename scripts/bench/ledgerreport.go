package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The ledger comparison's metrics, per run.
var (
	mDBCPU      = func(r *result) float64 { return r.per1k(r.dbCPU) }
	mDBBusy     = func(r *result) float64 { return 100 * r.dbCPU / r.wall.Seconds() }
	mBatches    = func(r *result) float64 { return r.per1k(float64(r.batches)) }
	mClaimRT    = func(r *result) float64 { c, _, _ := r.ledgerTrips(); return c / float64(r.batches) }
	mCompleteRT = func(r *result) float64 { _, c, _ := r.ledgerTrips(); return c / float64(r.batches) }
	mOtherRT    = func(r *result) float64 { _, _, o := r.ledgerTrips(); return r.per1k(o) }
	mAllRT      = func(r *result) float64 { c, d, o := r.ledgerTrips(); return (c + d + o) / float64(r.processed) }
	mCommitsPB  = func(r *result) float64 { return r.commits / float64(r.batches) }
	mClaimMS    = func(r *result) float64 { return r.ledgerWait["claim_batch_mean_ms"] }
	mCompleteMS = func(r *result) float64 { return r.ledgerWait["complete_mean_ms"] }
	mDriverCPU  = func(r *result) float64 { return r.per1k(r.driverCPU) }
	mInFlightMx = func(r *result) float64 { return r.inFlightMax }
	mInFlightMn = func(r *result) float64 { return r.inFlightMean }
)

// writeLedgers writes the ledger comparison: a table per number of
// handlers, the ratios between ledgers, and the targets.
func writeLedgers(w io.Writer, b *bench, results, warmups []*result) {
	o := b.o
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	configs := o.ledgerConfigs()
	by := map[ledgerConfig][]*result{}
	for _, r := range results {
		by[r.config] = append(by[r.config], r)
	}
	warm := map[ledgerConfig][]*result{}
	for _, r := range warmups {
		warm[r.config] = append(warm[r.config], r)
	}
	// trips returns the runs of c whose ledger round trips were counted:
	// its rounds, or else its warm-up (PostgreSQL's proxy runs in the
	// warm-up only, unless -count-round-trips all), and a mark for the
	// latter.
	trips := func(c ledgerConfig) ([]*result, string) {
		for _, r := range by[c] {
			if cl, _, _ := r.ledgerTrips(); !math.IsNaN(cl) {
				return by[c], ""
			}
		}
		return warm[c], " †"
	}
	names := make([]string, len(configs))
	for i, c := range configs {
		names[i] = c.String()
	}
	p("## Ledgers\n\n")
	p("sqsonce-go on each ledger: %d messages per run (%d on DynamoDB), %d rounds of every configuration in turn (%s; ledger×worker processes/handlers each), "+
		"%d poller(s) per process, GOGC=%s. A fresh queue and a fresh ledger (bbolt file, or table) per run; each PostgreSQL table holds %d complete records of earlier operations, vacuumed and analyzed, before the run. Each cell: median (min–max) over the rounds.\n\n",
		o.ledgerMessages, o.dynamoMessages, o.ledgerRounds, strings.Join(names, " → "), o.ledgerPollers(), o.gogc, o.pgPrefill)
	for _, n := range o.ledgerConcurrency {
		p("### %d handlers per worker process\n\n", n)
		p("| ledger | workers | msg/s | p50 ms | p99 ms | worker CPU s / 1k msg | ledger server CPU s / 1k msg | ledger server busy %% | SQS server CPU s / 1k msg | driver CPU s / 1k msg | peak RSS MB | SQS requests / 1k msg | batches / 1k msg | claim round trips / batch | completion round trips / batch | other round trips / 1k msg | bbolt commits / batch | ClaimBatch ms | CompleteBatch ms | machine busy %% | other load %% |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, c := range configs {
			if c.concurrency != n {
				continue
			}
			rs := by[c]
			ts, mark := trips(c)
			cell := func(f func(*result) float64, dec int) string {
				v := spreadOf(ts, f).cell(dec)
				if v == "n/a" {
					return v
				}
				return v + mark
			}
			p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.ledger, c.workers,
				spreadOf(rs, mThroughput).cell(0), spreadOf(rs, mP50).cell(0), spreadOf(rs, mP99).cell(0),
				spreadOf(rs, mCPU).cell(3), spreadOf(rs, mDBCPU).cell(3), spreadOf(rs, mDBBusy).cell(0), spreadOf(rs, mServerCPU).cell(3), spreadOf(rs, mDriverCPU).cell(3),
				spreadOf(rs, mRSS).cell(1), spreadOf(rs, mRequests).cell(0), spreadOf(rs, mBatches).cell(0),
				cell(mClaimRT, 2), cell(mCompleteRT, 2), cell(mOtherRT, 1), spreadOf(rs, mCommitsPB).cell(2),
				spreadOf(rs, mClaimMS).cell(2), spreadOf(rs, mCompleteMS).cell(2),
				spreadOf(rs, mBusy).cell(0), spreadOf(rs, mOther).cell(0))
		}
		p("\n")
		for _, c := range configs {
			if c.concurrency == n && c.ledger == lDynamoDB {
				rs := by[c]
				p("- %s, %d worker(s): DynamoDB requests in flight at once: at most %s, on average %s as a request starts.\n", c.ledger, c.workers,
					spreadOf(rs, mInFlightMx).cell(0), spreadOf(rs, mInFlightMn).cell(1))
			}
		}
		p("\n")
	}
	p("- msg/s: deliveries finished (deleted) ÷ (last delete − first receive), over all worker processes; one process stops by itself after the last delete, several are stopped (SIGTERM) once the queue is empty.\n")
	p("- worker CPU: user+system of every worker process, from rusage; ledger server CPU: the PostgreSQL server's processes (the postmaster, its live children and those it reaped), or the DynamoDB emulator's process, from /proc; busy: its CPU ÷ the run's wall time (100%% = one core); driver CPU: this program's, which carries PostgreSQL's connections through its proxy.\n")
	p("- peak RSS: the largest worker process's.\n")
	p("- batches: receives that returned messages. Round trips: PostgreSQL's counted by a proxy in the driver, by the statement each carries (-count-round-trips %s); † marks figures from the configuration's warm-up run (%d messages), the only one carried through the proxy, whose hop and CPU would otherwise weigh on the rounds. DynamoDB's are HTTP requests, counted by the worker's client, by the ledger call that made them (they run concurrently: see in flight). Other: connecting, preparing statements, pings, extensions, everything else.\n",
		o.countRoundTrips, o.warmup)
	p("- ClaimBatch ms, CompleteBatch ms: the worker's mean wait per call (one ClaimBatch per received batch; one CompleteBatch per group of completions waiting together, at most 64).\n")
	p("- The DynamoDB figures are those of dynalite, a Node.js emulator: they say nothing of DynamoDB's own speed, only what the client asks of it (requests per batch, how many at once) and what that costs the worker.\n\n")

	med := func(c ledgerConfig, f func(*result) float64) float64 { return spreadOf(by[c], f).med }
	has := func(c ledgerConfig) bool { return len(by[c]) > 0 }
	p("### Ratios (medians)\n\n")
	for _, n := range o.ledgerConcurrency {
		base := ledgerConfig{lBbolt, 1, n}
		for _, c := range configs {
			if c.concurrency != n || c == base || !has(c) {
				continue
			}
			if has(base) {
				p("- %d handlers: %s ×%d / bbolt: throughput %.2f×, worker CPU per message %.2f×\n", n, c.ledger, c.workers,
					med(c, mThroughput)/med(base, mThroughput), med(c, mCPU)/med(base, mCPU))
			}
			if one := (ledgerConfig{c.ledger, 1, n}); c.workers > 1 && has(one) {
				p("- %d handlers: %s, %d workers / 1 worker: throughput %.2f×, worker CPU per message %.2f×, server CPU per message %.2f×\n", n, c.ledger, c.workers,
					med(c, mThroughput)/med(one, mThroughput), med(c, mCPU)/med(one, mCPU), med(c, mDBCPU)/med(one, mDBCPU))
			}
		}
		// A handler that writes to the ledger's database: on its own, or
		// in one transaction with the completion.
		write := ledgerConfig{lPostgresWrite, 1, n}
		for _, tx := range []ledgerConfig{{lPostgresTx, 1, n}, {lPostgresTxBatch, 1, n}} {
			if !has(write) || !has(tx) {
				continue
			}
			wt, _ := trips(write)
			tt, mark := trips(tx)
			p("- %d handlers: %s / postgres-write: throughput %.2f×, worker CPU per message %.2f×, database CPU per message %.2f×; round trips per message %s against %s%s (the write's own included)\n",
				n, tx.ledger, med(tx, mThroughput)/med(write, mThroughput), med(tx, mCPU)/med(write, mCPU), med(tx, mDBCPU)/med(write, mDBCPU),
				spreadOf(tt, mAllRT).cell(2), spreadOf(wt, mAllRT).cell(2), mark)
		}
	}
	p("\n### Targets\n\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	if c := (ledgerConfig{lPostgres, 1, 64}); has(c) {
		v := med(c, mThroughput)
		p("- one worker on PostgreSQL ≥ 5,000 msg/s at 64 handlers: %.0f msg/s — %s\n", v, verdict(v >= 5000))
	}
	for _, c := range configs {
		if c.ledger == lBbolt || !has(c) {
			continue
		}
		ts, mark := trips(c)
		cl, co := spreadOf(ts, mClaimRT), spreadOf(ts, mCompleteRT)
		if math.IsNaN(cl.max) {
			continue
		}
		if c.ledger == lDynamoDB {
			// DynamoDB has no conditional batch write (a transaction fails
			// as a whole when one condition does): a batch is one request
			// per message, all sent at once, so one round of requests.
			perMsg := func(f func(*result) float64) func(*result) float64 {
				return func(r *result) float64 { return f(r) * float64(r.batches) / float64(r.processed) }
			}
			cm, om := spreadOf(ts, perMsg(mClaimRT)), spreadOf(ts, perMsg(mCompleteRT))
			// A request the SDK retried (a throttle) counts twice: one
			// in two hundred is allowed.
			p("- %s: one round of concurrent requests per received batch, one request per message (no conditional batch write in DynamoDB): claims %.3f requests per message (worst run %.3f) — %s; completions %.3f (worst %.3f) — %s\n",
				c, cm.med, cm.max, verdict(cm.max <= 1.005), om.med, om.max, verdict(om.max <= 1.005))
			continue
		}
		if isPostgresTx(c.ledger) {
			// The completion is in each message's own transaction, by
			// design: the target is the round trips per message.
			tx := spreadOf(ts, mAllRT)
			p("- %s: ≤ 2.5 round trips per message, the handler's write included: %.2f%s (worst run %.2f) — %s\n",
				c, tx.med, mark, tx.max, verdict(tx.max <= 2.5))
			continue
		}
		unit := "round trips"
		p("- %s: ≤ 1 ledger round trip per received batch for claims: %.2f %s%s (worst run %.2f) — %s; for completions: %.2f (worst %.2f) — %s\n",
			c, cl.med, unit, mark, cl.max, verdict(cl.max <= 1), co.med, co.max, verdict(co.max <= 1))
	}
	for _, c := range configs {
		if c.workers > 1 && has(c) && has(ledgerConfig{c.ledger, 1, c.concurrency}) {
			r := med(c, mThroughput) / med(ledgerConfig{c.ledger, 1, c.concurrency}, mThroughput)
			p("- %d workers together no slower than one (%s, %d handlers each): %.2f× — %s\n", c.workers, c.ledger, c.concurrency, r, verdict(r >= 1))
		}
	}
	p("\n### Ledger runs, in the order they ran\n\n```\n")
	for _, r := range warmups {
		p("warm-up  %-20s %s\n", r.config, r.ledgerLine())
	}
	for _, r := range results {
		p("round %d  %-20s %s\n", r.round, r.config, r.ledgerLine())
	}
	p("```\n")
}
