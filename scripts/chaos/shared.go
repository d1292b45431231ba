package main

import "time"

// Shared is the shared-ledger campaign: three chaos workers at once on one
// standard queue, sharing one ledger table in PostgreSQL (a cluster of the
// campaign's own, behind its TCP proxy), with a workload of the standard
// campaign's kind. Each worker is killed at random, in its handler and in
// the windows around a completion, or drained, and restarted at once (a
// start while the database is out of reach fails, as `sqsonce run` does,
// and is made again a second later). Meanwhile the database is stopped
// hard (pg_ctl stop -m immediate) and restarted after longer than a lease,
// the proxy refuses new connections for a while and cuts the open ones,
// or cuts the open ones only; after each outage every live worker must
// receive again by itself. An extra execution may be explained by three
// more named windows: a completion or a failure that could not be
// recorded because the database was out of reach, and a lease that lapsed
// while it was (a takeover with the database in reach all along is a
// finding).
func Shared(short bool) *Campaign {
	return &Campaign{
		Name:  "shared",
		Title: "three workers at once on one standard queue (maxReceiveCount 5) and one PostgreSQL table, through a TCP proxy",
		Load:  standardLoad(pick(short, 3000, 300), pick(short, 9000, 900), pick(short, 12500*time.Millisecond, 4*time.Second)),
		System: System{MaxReceive: 5, Postgres: true, Workers: 3, Concurrency: pick(short, 16, 8), Rates: sqsRates(short, false),
			SendLost: pick(short, 0.03, 0.05), Quiesce: pick(short, 3*time.Minute, 90*time.Second)},
		Runs: Runs{Duration: pick(short, 150*time.Second, 24*time.Second), Ends: pick(short,
			map[string]int{endWindowA: 6, endWindowB: 6, endInHandler: 6, endKill: 6, endTerm: 6},
			map[string]int{endWindowA: 2, endWindowB: 2, endInHandler: 1, endKill: 1, endTerm: 2})},
		Faults: []Fault{Outages(pick(short,
			[]Outage{{outageStop, 3, 8 * time.Second}, {outageRefuse, 3, 6 * time.Second}, {outageCut, 4, 0}},
			[]Outage{{outageStop, 1, 7 * time.Second}, {outageRefuse, 1, 6 * time.Second}, {outageCut, 1, 0}})...)},
	}
}
