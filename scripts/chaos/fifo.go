package main

import "time"

// FIFO is the FIFO campaign: one worker on a bbolt ledger, a FIFO queue
// (maxReceiveCount 4) with a FIFO dead-letter queue, several message
// groups. Its workload has duplicates (some deduplicated by SQS at the
// send, as sqsonce ingest sends them), transient failures, operations
// that fail permanently (also after every replay) or until the downstream
// is fixed, a conflicting payload right behind its original (also behind
// one that failed permanently, so that two messages of one failed key are
// dead-lettered) and two more after their key completed, and keyless
// messages; and bursts: runs of 4 to 8 operations of one group sent
// together, the first and one in the middle slow, half of them with a copy
// of one operation in another group, so that one receive brings several
// messages of a group and those behind a slow one wait in the worker's
// hands for several beats of its keeper. Entries of the worker's batches
// (deletes, visibility changes) fail on SQS's side among the faults of its
// SQS calls. The worker is killed and drained;
// its pauses wait until it keeps such waiting messages; the records of
// operations that wait so are forgotten; between runs the dead-letter
// queue is replayed. Every message is accounted for, and every group's
// effects are checked against the order in which their messages were sent
// (a replayed message joins the end of its group).
func FIFO(short bool) *Campaign {
	return &Campaign{
		Name:   "fifo",
		Title:  "one worker on a bbolt ledger, a FIFO queue (maxReceiveCount 4) and a FIFO dead-letter queue, replayed between runs",
		After:  "standard/phases",
		Load:   fifoLoad(pick(short, 1500, 150), pick(short, 12, 4), pick(short, 60, 3)),
		System: System{FIFO: true, MaxReceive: 4, Workers: 1, Concurrency: pick(short, 32, 16), Rates: sqsRates(short, true), SendLost: pick(short, 0.03, 0.05), Quiesce: 3 * time.Minute},
		Runs: Runs{Duration: pick(short, 160*time.Second, 16*time.Second), Ends: pick(short,
			map[string]int{endWindowA: 4, endWindowB: 4, endKill: 4, endTerm: 3},
			map[string]int{endWindowA: 1, endWindowB: 1, endKill: 1, endTerm: 1})},
		Faults: []Fault{Replays(pick(short, 4, 2)), Forgets(pick(short, 6, 2)), Pauses(pick(short, 2, 0), true)},
		Checks: []Check{GroupOrder},
	}
}
