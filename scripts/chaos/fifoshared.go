package main

import "time"

// FIFOShared is the FIFO campaign on a shared ledger: the messages of a
// group that wait in a worker's hands behind a running one, while their
// ledger is slow or away and while another worker may take their claims
// over. On the embedded ledger nothing but a stop of the whole process
// makes the ledger slow, nothing makes it away, and no other worker can
// take a claim over. So this one runs several chaos workers at once on a
// FIFO queue, one PostgreSQL table between them, through the campaign's
// proxy, which stalls (every call hangs, for longer than a beat, or than
// the leases), refuses and cuts the connections, or stops the database,
// each time while a worker keeps messages waiting; and it stops one worker
// at a time (SIGSTOP) for longer than the leases, also while it keeps such
// messages: the others take its claims over, and when it goes on, what
// waited in its hands must not start. There are no replay rounds (every
// worker would have to stop for one): what fails for good stays in the
// dead-letter queue.
func FIFOShared(short bool) *Campaign {
	return &Campaign{
		Name:  "fifo-shared",
		Title: "several workers on one FIFO queue (maxReceiveCount 4) and one PostgreSQL table, through a TCP proxy",
		After: "tx",
		Load:  fifoLoad(pick(short, 600, 50), pick(short, 6, 3), pick(short, 30, 2)),
		System: System{FIFO: true, MaxReceive: 4, Postgres: true, Workers: pick(short, 3, 2), Concurrency: 8, Rates: sqsRates(short, false),
			SendLost: pick(short, 0.03, 0.05), Quiesce: 3 * time.Minute},
		Runs: Runs{Duration: pick(short, 75*time.Second, 10*time.Second), Ends: pick(short,
			map[string]int{endWindowA: 2, endWindowB: 2, endKill: 2, endTerm: 3},
			map[string]int{endWindowA: 1, endTerm: 1})},
		Faults: []Fault{
			Outages(pick(short, []Outage{{outageStall, 2, 8 * time.Second}, {outageStop, 1, 8 * time.Second}, {outageRefuse, 1, 6 * time.Second}, {outageCut, 1, 0}},
				[]Outage{{outageStall, 1, 7 * time.Second}})...),
			Pauses(pick(short, 4, 1), true),
		},
		Checks: []Check{GroupOrder},
	}
}
