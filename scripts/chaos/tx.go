package main

import (
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// Tx is the transactional campaign: three chaos workers at once whose
// handlers (package pgtx) insert each attempt's effect row, in the
// transaction that records the operation complete, into a table of the
// ledger's database with no unique constraint (four in ten attempts queue
// it with pgtx.NewWrites, sent with the completion and the commit in one
// round trip), on one standard queue and a PostgreSQL cluster and proxy of
// their own, with a workload of the standard kind (transient and permanent
// failures come after the insert, which must be rolled back). Each worker
// is killed at random, in the windows around its own completion (after
// the transaction committed) and inside the transaction, between the
// insert and the commit, or drained; some attempts panic after the
// insert, as a handler with a bug would. Meanwhile the database is stopped
// hard and restarted, its connections refused and cut, and the proxy
// loses commits: it holds back a COMMIT and cuts the connection (the
// server rolls back), or passes it on and cuts the connection once the
// server answered (the commit took effect, its answer is lost). Its audit
// reads the database itself, with no window excepted (TxRows).
func Tx(short bool) *Campaign {
	return &Campaign{
		Name:  "tx",
		Title: "three workers at once with transactional handlers (pgtx) whose effect is a row inserted with the completion; one standard queue (maxReceiveCount 5) and one PostgreSQL database, through a TCP proxy",
		After: "shared",
		Load:  standardLoad(pick(short, 2000, 200), pick(short, 6000, 600), pick(short, 7500*time.Millisecond, 4*time.Second)),
		System: System{MaxReceive: 5, Postgres: true, Workers: 3, Concurrency: 8, Rates: sqsRates(short, false), SendLost: pick(short, 0.03, 0.05),
			Quiesce: pick(short, 3*time.Minute, 90*time.Second), Tx: &event.TxConfig{HoldShare: pick(short, 0.08, 0.1), Hold: 200 * time.Millisecond,
				PanicShare: pick(short, 0.03, 0.05), WritesShare: 0.4}},
		Runs: Runs{Duration: pick(short, 90*time.Second, 20*time.Second), Ends: pick(short,
			map[string]int{endInTx: 9, endWindowA: 3, endWindowB: 3, endKill: 3, endTerm: 3},
			map[string]int{endInTx: 3, endWindowA: 1, endWindowB: 1, endKill: 1, endTerm: 1})},
		Faults: []Fault{
			Outages(pick(short,
				[]Outage{{outageStop, 2, 8 * time.Second}, {outageRefuse, 1, 6 * time.Second}, {outageCut, 2, 0}},
				[]Outage{{outageStop, 1, 6 * time.Second}, {outageCut, 1, 0}})...),
			LostCommits(pick(short, 24, 6)),
		},
		Checks: []Check{TxRows},
	}
}
