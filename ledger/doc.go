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
package ledger
