// Package dynamodb is a ledger on an Amazon DynamoDB table, shared by every
// sqsonce process that opens the same table, on any number of hosts. It
// keeps the contract of the embedded ledger (package ledger): the same
// records, outcomes, owner checks, limits and errors, and it passes the
// same behaviour suite (ledger/ledgertest, Run and RunShared).
//
// Init creates the table (`sqsonce ledger init`); Open opens a ledger on
// it. The ledger takes a Client, the few DynamoDB calls it makes, which
// the AWS SDK's *dynamodb.Client implements; credentials, region, endpoint,
// retries and the HTTP transport are the client's.
//
// The worker's credentials need dynamodb:GetItem, PutItem, UpdateItem,
// DeleteItem, Scan and DescribeTable on the table; Init also needs
// CreateTable, DescribeTimeToLive and UpdateTimeToLive. Give the client an
// HTTP transport that keeps about Options.Concurrency idle connections per
// host (net/http keeps 2 unless told otherwise; the SDK's default keeps 10).
//
// # Items
//
// One item per operation, under the partition key "pk" = "op#" + the
// operation key; a schema item under "meta#schema" records SchemaVersion.
// An operation's item holds the fields of ledger.Record: state
// ("in_progress", "complete", "failed"), permanent, fingerprint, attempts,
// owner, lease_expiry, first_seen, claimed, updated, completed, expires,
// last_error, message_id and result; times are Unix nanoseconds (numbers),
// so they compare exactly. attempts counts, beside the attempts that
// started (ledger.Record.Attempts), the claim's own while the item is in
// progress, so that a claim adds one to it whatever it takes over, in one
// conditional write, and a release takes that one back; the record read
// has it taken off. Two more attributes: ttl, the expiry in Unix
// seconds rounded up, for DynamoDB's TTL deletion, and write_id, a token of
// the call that wrote the item last (see Lost answers). An item is at most
// about 6 KiB (a 4 KiB result, a 1 KiB error text and a 512-byte key at
// most): a write costs one to six write units.
//
// # Claims are one conditional write
//
// A claim is an UpdateItem whose condition says: no item, or a live one
// that is claimable and has no other fingerprint:
//
//	attribute_not_exists(pk) OR (expires > :now
//	  AND ((state = "failed" AND permanent = false) OR (state = "in_progress" AND lease_expiry <= :now))
//	  AND (attribute_not_exists(fingerprint) OR fingerprint = :fp))
//
// (the fingerprint clause only when the request has one; a request that
// supersedes its caller's own claims, ClaimRequest.Supersede, adds "OR
// begins_with(owner, :supersede_slash)" to the lease's). The update sets
// the claim (attempts = if_not_exists(attempts, 0) + 1, first_seen and
// fingerprint if_not_exists, owner, lease, claimed, updated, expires, ttl)
// and returns the old item, from which the answer is derived (Takeover
// when it was in progress with a lapsed lease, Reclaimed when under a
// superseded token). When the condition fails, a strongly consistent
// read of the item answers InProgress, AlreadyComplete, Conflict or
// FailedPermanently with the record found; DynamoDB could return the item
// with the failure, but DynamoDB-compatible servers such as dynalite do
// not. When that read shows a record that is claimable after all (it
// changed between the write and the read), the claim writes again; when it
// shows an expired item, the claim replaces it with a PutItem conditioned
// on "attribute_not_exists(pk) OR expires <= :now", since an expired record
// is treated as absent. Checking and writing never interleave with another
// claim: DynamoDB applies conditional writes to one item one at a time.
//
// Complete, Fail, Release and Extend are UpdateItems (a first claim's
// Release a DeleteItem) conditioned on
//
//	expires > :now AND owner = :owner AND state = "in_progress"
//
// and, when the condition fails, a read tells ErrNotFound, ErrNotOwner and
// ErrState apart as the embedded ledger does. Reset is conditioned on a
// live failed record. A batch (ClaimBatch, CompleteBatch, FailBatch) is
// one request per item, Options.Concurrency at once, the items of one key
// in order; it is not a transaction (dynalite has none, and DynamoDB's
// cost twice as much).
//
// # Clocks
//
// DynamoDB has no clock for conditions: leases and expiries are compared
// with the clock of the host that writes (Options.Now). The hosts' clocks
// must agree to well within a lease. A host whose clock runs ahead of the
// others by s sees leases lapse s early and can take over a live lease s
// before it lapses, so that two hosts run the work at once for up to s; a
// host whose clock runs behind takes over late. Leases are the SQS
// visibility timeout (60 s, say) and NTP keeps clocks within milliseconds:
// skew of a second or more is a fault to alarm on. Expiries (days) shift by
// the same skew, which does not matter.
//
// # Retention, TTL and Sweep
//
// Every write sets expires = now + retention and ttl. Reads and conditions
// compare with expires, so an expired item is absent to the ledger from the
// moment it expires, although DynamoDB's TTL deletion removes it only
// within days (and dynalite never does). Init turns TTL deletion on where
// the service has it; InitReport says when it could not. Sweep removes
// expired items itself, with a full scan and a conditional delete per item
// ("expires <= :now", so that hosts sweeping at once never remove an item
// claimed anew, nor count one item twice). With TTL on, Sweep is not
// needed: run it daily at most, or not at all; without TTL run it about
// once per tenth of the retention.
//
// # Lost answers
//
// A write can take effect and its answer be lost (a connection reset, a
// timeout); the SDK then sends it again, and so may the caller. None of
// this gives an operation two owners or loses a completion:
//
//   - a claim whose retry finds the item in progress under its own owner
//     token (unique to the claim) with a live lease knows the write as its
//     own and answers Claimed with the record (Takeover and Reclaimed are
//     then false even if the lost write took a claim over);
//   - a completion whose retry finds the record complete under its owner
//     succeeds, as a second Complete by the same owner does;
//   - a failure or release whose retry finds the item last written by the
//     same call (write_id) succeeds; a retried release of a first claim
//     finds no item and answers ErrNotFound: the item is gone, as asked;
//   - an extension or reset whose retry runs again only renews again;
//   - a claim or transition whose answer is never learnt (the SDK gave up)
//     returns an error wrapping ledger.ErrUnavailable; its write may have
//     taken effect. A claim of a failed ClaimBatch that did take effect is
//     given back with Release when that still works, and otherwise holds
//     until its lease lapses, when the next delivery takes it over.
//
// Throttling, server errors and connection errors that the SDK gave up on,
// and requests without an answer within Options.Timeout, wrap
// ledger.ErrUnavailable.
//
// # Reading the whole table
//
// ForEach, Stats and Sweep scan the table, which reads (and bills) every
// item whatever the filter: about half a read unit per 4 KiB of table for
// Stats and Sweep (eventually consistent) and one for ForEach (strongly
// consistent). ForEach passes records in no particular order: a Scan
// returns items in the order of their keys' hashes, and a key order would
// need an index that every write pays for. Stats has no counters to read:
// keeping them exactly would need a transaction on every write, and TTL
// deletion does not report what it removes. Call it seldom on a large
// table.
//
// # Flow control
//
// A record's flow fields are attributes of its item (own_failures,
// outage_failures, dead_lettered, dead_letter_reason, dead_letter_copy_id),
// absent when zero. DeadLetterCounts scans the table, as Stats does. The
// rest is items under keys that start with "flow#", which the scans of
// records leave out: a flow document, a rate bucket, a slot (one per pool
// and index) and a process each have one, and an index item lists the
// scopes of documents and the ids of processes, so that ListFlows and
// Processes read those items and not the table.
//
// Reserve is one conditional UpdateItem per bucket, every bucket at once;
// a bucket that another host moved since this one saw it costs no more,
// unless it went idle or past the reservation's Within (then a read and a
// second write). TakeSlots tries as many slots as it asks for at once (one
// PutItem each, conditioned on the slot being free), and only when some
// were held reads the others to find the free ones: one round of requests
// when slots are free, at most three. The hosts' clocks decide: a bucket
// shared by hosts whose clocks differ by s may give about rate·s more
// starts in a window than its rate (s = 10 ms at 40 per second: 0.4), and
// a lease lapses s early on the host that runs ahead.
//
// # History, payload and activity
//
// A record's attempt history is a list attribute of its item (hist), to
// which a completion or a failure appends its attempt in its one
// conditional write (list_append); a write that finds the list full reads
// the item and sets it whole, the oldest attempt left out. A claim that
// takes another over cannot read the item first: it appends the attempt
// it ended with a second write, conditioned on its own claim. A kept
// payload is a binary attribute (payload). The completions and failures
// per minute that a process records are counted in memory and added every
// ledger.MinuteFlush to an item per hour ("flow#min#" and the Unix hour,
// an attribute per minute, ADD), which expires after ledger.MinuteKeep;
// Overview reads those of its window (an item per hour). The groups of
// failures and of dead letters of an Overview count its sample.
//
// # Upgrading
//
// Init records the flow schema on the schema item (flow_schema), whose
// schema_version stays 1: nothing else changes in the table, and an older
// sqsonce keeps working on it (its decoder reads the attributes it knows,
// its scans look at "op#" items only). Open refuses a table without
// flow_schema, or with an older one (flow schema 2 added the history,
// payload and activity above), with ledger.ErrNoSchema, naming `sqsonce
// ledger init`: run it with the new version before starting its workers.
package dynamodb
