// Package ledger records which operations sqsonce has taken, finished or
// failed, so that each operation takes effect once although its messages are
// delivered at least once.
//
// One Record is kept per operation key. A key moves through three states:
//
//	(none) --Claim--> in_progress --Complete--> complete --(expired)--> swept
//	                      |  ^
//	          Fail/Release|  | Claim again (retryable failure, lapsed lease, or a
//	                      |  |   claim of the caller's own it supersedes)
//	                      v  |
//	                     failed
//
// Claim is one atomic conditional write: checking the current record and
// writing the claim cannot interleave with another claim, in this process or
// any other. Its Outcome tells the caller what to do with the delivery.
// Every later transition (Complete, Fail, Release, Extend) names the owner
// token that Claim was given and is refused with ErrNotOwner when another
// owner has taken the operation over after the lease lapsed.
//
// DB is the embedded implementation on a bbolt file. Writes from concurrent
// callers are grouped into shared commits (group commit): each commit costs
// one fsync however many transitions it carries, and a write method returns
// only after its commit is durable on disk. The outcome and error types of
// this package are backend-neutral so that a shared backend (PostgreSQL,
// DynamoDB) can implement the same contract; the behaviour suite in
// ledger/ledgertest runs against any of them.
//
// # Flow control
//
// The ledger also keeps what the worker's flow control needs, the same on
// every backend and held by the same suite:
//
//   - failure classes: Fail counts a failure in Record.OwnFailures or, with
//     Failure.Outage, in Record.OutageFailures (an outage of what the work
//     calls), so that back-off and dead-lettering can look at the
//     operation's own failures only;
//   - dead-letter marks: MarkDeadLettered records on a record that its
//     message is being, or was, sent to the dead-letter queue (reason,
//     time, the copy's id); a later Claim that takes the operation clears
//     the mark, Forget removes it with the record; DeadLetterCounts counts
//     marks by ReasonGroup;
//   - flow documents (FlowDoc): small documents per scope, opaque to the
//     ledger, written with a compare-and-set on their version (PutFlow,
//     DeleteFlow; ErrConflict), for the worker's pause, probe and ramp;
//   - rate buckets (Reserve): the generic cell rate algorithm, a batch of
//     tokens per call, each taking one or several buckets at one start
//     (a handler's rate and a tenant's), answered as start offsets;
//   - concurrency slots (TakeSlots, ExtendSlots, ReleaseSlots): at most a
//     pool's limit held at once, by leases;
//   - a process registry (PutProcess, RemoveProcess, Processes).
//
// Every time-based decision uses the ledger's clock: the database server's
// on PostgreSQL, the host's on the embedded ledger and on DynamoDB. Calls
// answer with offsets from the ledger's now (Grant.Starts, Process.BeatAge)
// or with that now (FlowRead.Now), never with a time the caller must
// compare with its own clock. On DynamoDB each host's clock decides for its
// own requests: a rate bucket shared by hosts whose clocks differ by s may
// give about rate·s more starts in a window than its rate.
//
// On the embedded ledger, flow documents and the registry are buckets of
// the file, written durably like records; rate buckets and slots are kept
// in memory (the process is the whole fleet, and a restart begins with
// full buckets and free slots). Sweep removes flow state that has no more
// use: idle buckets (BucketIdle), tombstones of flow documents (FlowKeep),
// lapsed registrations (ProcessKeep), free slots (SlotIdle).
//
// # What a console reads
//
// Each record keeps the story of its operation: the attempts that ended
// (Record.History, the last MaxHistory: start, end, owner, outcome, error),
// appended by Complete, Fail and a claim that takes another over, and, when
// the caller passes one, the message itself (Record.Payload, bounded by
// MaxPayload). Get reads them; List and ForEach do not.
//
// An Overview reads what the ledger keeps counted, not the records: the
// counts by state, the failures by the group of their reason (ReasonGroup)
// with the latest reason and key of each group, the dead-letter marks by
// group likewise, how many retryable failures were dead-lettered (nothing
// retries them), and the completions and failures per minute of the last
// MinuteKeep, as they happened. The embedded ledger keeps these as counters
// and indexes in the file, written in the commits that change them; a
// shared one groups the records that are not complete through their index
// (PostgreSQL) or a sample (DynamoDB), and writes each process's counts
// per minute every MinuteFlush. Filter selects by reason group, by
// Permanent and by a dead-letter mark too, and List gives the records last
// written first (Filter.Newest) through an index in time order where the
// backend has one.
//
// # Upgrades
//
// Flow control came after the first ledger schema, and a ledger of that
// schema is upgraded in place: the embedded file at Open (new buckets, a
// flow_schema mark in the meta bucket), a shared ledger by its Init
// (`sqsonce ledger init`). An older sqsonce keeps working on an upgraded
// ledger, so that a rolling deploy or a rollback needs no stop: the core
// schema version and the records' encoding are unchanged, and everything
// new lives where it does not look (the embedded ledger keeps a record's
// flow fields in a bucket of their own, tied to the record by its
// FirstSeen; PostgreSQL adds columns with defaults, which its statements do
// not name, and tables of their own; DynamoDB adds attributes its decoder
// does not read and items its scans leave out). What an older worker does
// is not classified: its failures count in neither class and its claims
// leave a dead-letter mark in place. FlowSchema reports the flow schema a
// ledger was given (FlowSchemaVersion, 0 before), so that `check` can tell
// a ledger without flow control, or one made by a newer sqsonce. Flow
// schema 2 added the history, the kept payload and the counters of an
// overview in the same way: an older sqsonce writes records without them,
// so the embedded ledger stamps each commit of its own and counts again at
// Open when another version wrote the file since (see tally.go); history
// and activity then miss what that version did.
package ledger
