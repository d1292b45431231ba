// Package worker consumes an SQS queue and runs each operation once.
//
// A Worker receives messages with long polls, derives each message's
// operation key from what the message is (a JSON field of the body, a
// message attribute or the FIFO deduplication id; never the delivery),
// claims the key in a Ledger with one atomic write, runs the Handler, records
// the operation complete durably and only then deletes the message. A
// failed attempt is recorded and the message is left to become visible
// again after a back-off; a permanent failure goes to the queue's
// dead-letter queue. Duplicate deliveries of a completed operation are
// deleted without running the work.
//
// An operation can still run twice in these windows, and in no others:
//
//   - the process dies after the Handler's effect and before the completion
//     is durable (about a millisecond plus one fsync);
//   - the Handler is stopped (its timeout, the end of the shutdown grace, a
//     lost lease) or returns an error after its effect happened: the
//     attempt counts as failed and is retried;
//   - the ledger cannot commit the completion (a full disk, a shared store
//     that is away) before the worker stops: the completion is tried again,
//     with the message kept out of sight, until then; after that the
//     message is left for redelivery (Stats.CompleteFailed);
//   - the claim's lease lapses while the work runs (the process stopped or
//     cut off from a shared ledger for longer than the lease) and another
//     claim takes the operation over;
//   - the operation's record is gone (expired, forgotten, a new ledger) when
//     a delivery comes.
//
// The key is handed to the Handler (Message.Key, the SQSONCE_KEY variable
// of the exec handler, the Idempotency-Key header of the http handler) so
// that the system the work writes to can close these windows too. When that
// system is the PostgreSQL database of a shared ledger, package pgtx closes
// them outright: the Handler's writes and the completion commit in one
// transaction.
//
// The producer's trace context (the traceparent and tracestate attributes,
// or the AWSTraceHeader of X-Ray) goes on to the work too
// (Message.TraceParent, TRACEPARENT for exec, the traceparent header for
// http, the Handler's context); with Config.TracerProvider each attempt
// records a consumer span, which the work continues instead.
//
// A worker receives ahead of its free handlers (Config.Prefetch): messages
// received and claimed while every handler is busy wait, their visibility
// and lease kept up, and start as handlers come free, so that a receive's
// round trip and a claim's commit need not stand between one message and
// the next.
//
// # A message's lifecycle
//
// Each received message is in one state at a time, and only the
// transitions below change it, each checking the state it leaves under
// the lock of the message's received batch. The pollers, the batch's
// heartbeat, the stop and the message's own goroutine ask for transitions;
// none keeps a flag of its own.
//
//	received ──▶ claimed ──▶ waiting ──▶ starting ──▶ running ──▶ completing ──▶ settled
//	   │            │          │  ▲         │            │             │
//	   │            │          │  └─────────┤            └──▶ failed ──┴──▶ retrying
//	   │            │          │            │                   │
//	   └────────────┴──────────┴────────────┴──▶ given back │ lost │ dead-lettered │ deferred
//
// Every transition, by the state it leaves:
//
//	received   → claimed, settled, given back, dead-lettered, deferred
//	claimed    → waiting, given back, lost
//	waiting    → starting, given back, lost, deferred
//	starting   → running, waiting, given back, lost
//	running    → completing, failed, lost
//	completing → settled, retrying, lost
//	failed     → retrying, dead-lettered, deferred, waiting
//
// A message is received by a poller, which holds one of the worker's room
// for messages in hand (Config.Concurrency + Config.Prefetch) until the
// message ends or its handler succeeded (a receive may then bring the next
// while the completion commits). Its claim moves it to waiting: for its turn in its FIFO
// group, for a free handler, or for a ledger that records again. Starting
// is the one place that looks at the ledger's gate, the claim's lease and
// the (FIFO) message's receipt before the handler runs, and where the
// attempt is counted; the message holds a handler from then until it ends,
// its completion durable and its delete queued, so that no work starts
// while completions cannot be recorded. settled, retrying, given back,
// dead-lettered and lost are its ends: a duplicate of a complete operation
// is settled at once; a copy of an operation at work in this worker stays
// received, out of sight, until that work ends, and is then claimed (at
// its last receive, on a standard queue, it is deferred instead); a
// message whose operation runs elsewhere, whose key is missing or whose
// ledger record cannot be read is given back or dead-lettered unclaimed
// (one whose operation runs elsewhere is deferred instead near the
// redrive's receive count, on a standard queue); a
// heartbeat that learns that a claim is lost (or on a FIFO queue that SQS
// no longer takes a waiting message's receipt) ends it as lost, cutting a
// running attempt off; a stop gives back what has not started. A failed
// attempt goes back to waiting, keeping its claim, its failure not
// recorded, to run again after its back-off when flow control lets it, in
// two cases: its failure was an outage's and its next receive could be its
// last before the redrive, on a FIFO queue or when SQS refused the copy
// that would defer it; or it failed as an unavailable downstream does on
// its last receive before any outage is known, and waits (at most the
// trip's window, until another key succeeds) for a pause to find one.
package worker
