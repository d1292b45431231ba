package main

import (
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// Standard is the standard campaign: one worker on a bbolt ledger and one
// standard queue with a dead-letter queue, sent about 30,000 deliveries of
// 10,000 operations (duplicates in bursts, at once and scattered,
// transient and permanent failures, slow ones, conflicting payloads and
// keyless bodies, some operations sent again once done) through a client
// that loses acknowledgements, with faults on every SQS call of the
// worker, entries of its batches failing on SQS's side among them. Its runs are killed (SIGKILL) at random, in its handler (while
// the downstream serves its request) and in the two windows around a
// completion, drained (SIGTERM, some twice), and paused (SIGSTOP) past
// their leases; a third of the way in, the ledger goes through a second
// process, a full disk and a read-only file system; in two later runs a
// reader stops on the ledger socket for longer than the leases, and six
// runs start together with `sqsonce ledger compact`.
func Standard(short bool) *Campaign {
	return &Campaign{
		Name:  "standard",
		Title: "one worker on a bbolt ledger, one standard queue (maxReceiveCount 5) and a dead-letter queue",
		Load:  standardLoad(pick(short, 10000, 500), pick(short, 30000, 1500), pick(short, 20*time.Second, 4*time.Second)),
		System: System{MaxReceive: 5, Workers: 1, Concurrency: pick(short, 32, 16), Rates: sqsRates(short, true),
			SendLost: pick(short, 0.03, 0.05), Quiesce: pick(short, 3*time.Minute, 90*time.Second)},
		Runs: Runs{Duration: pick(short, 188*time.Second, 4*time.Second), Ends: pick(short,
			map[string]int{endWindowA: 8, endWindowB: 8, endInHandler: 8, endKill: 8, endTerm: 6},
			map[string]int{endWindowA: 2, endWindowB: 2, endInHandler: 2, endKill: 2, endTerm: 2})},
		Faults: []Fault{
			LedgerPhases(1.0 / 3),
			Holds(pick(short, 2, 1), pick(short, 15*time.Second, 6*time.Second), 1.0/3),
			Compactions(pick(short, 6, 2)),
			Pauses(pick(short, 6, 1), false),
		},
	}
}

// Campaigns are every campaign, in the order of the report: the standard
// one; beside it, from the end of its ledger phases (whose waits it would
// otherwise lengthen), the FIFO one; beside both from the start the
// shared-ledger one, then the transactional one, then the FIFO one on a
// shared ledger (two campaigns of several workers on PostgreSQL at once
// would weigh on each other's waits).
func Campaigns(short bool) []*Campaign {
	return []*Campaign{Standard(short), FIFO(short), Shared(short), Tx(short), FIFOShared(short)}
}

// pick returns full, or small in the short form.
func pick[T any](short bool, full, small T) T {
	if short {
		return small
	}
	return full
}

// sqsRates are the faults injected into the workers' SQS calls; with
// entries, entries of their batches fail on SQS's side too.
func sqsRates(short, entries bool) sqstest.Rates {
	r := sqstest.Rates{Throttle: 0.02, ServerError: 0.02, Timeout: 0.003, Reset: 0.02, LostAck: 0.02}
	if short {
		r = sqstest.Rates{Throttle: 0.03, ServerError: 0.03, Timeout: 0.005, Reset: 0.03, LostAck: 0.03}
	}
	if entries {
		r.EntryFailure = r.Reset
	}
	return r
}
