// Package postgres is a ledger shared by several sqsonce processes, on
// several hosts, in one PostgreSQL table. It keeps the contract of package
// ledger (the same outcomes, owner checks, errors and limits as the embedded
// bbolt ledger) and passes the same behaviour suite, ledger/ledgertest.
//
// # Setting up
//
// Init creates the table, its indexes, a one-row table that records the
// schema version and a PL/pgSQL function, Table+"_refuse", by which the
// statements that end an operation's transaction refuse to go on with
// SQLSTATEs of sqsonce's own (SQ001, SQ002); `sqsonce ledger init` calls it,
// and adds what is missing to a ledger set up by an older sqsonce. Open
// connects and checks that schema: it does not create anything, so that a
// worker pointed at the wrong database fails at once (ErrNoSchema) instead
// of starting a ledger of its own. The connecting role needs SELECT,
// INSERT, UPDATE and DELETE on the table and EXECUTE on the function
// (every role has it unless revoked); Init needs the right to create
// tables and functions in the schema.
//
// # How a claim is decided
//
// Each claim is one conditional write, INSERT … ON CONFLICT (key) DO UPDATE …
// WHERE the record may be taken (there is none, it expired, it failed
// retryably, or its lease lapsed or its owner is one that the request
// supersedes, and the fingerprints do not differ). The
// database decides it atomically: of several hosts claiming one key at once,
// exactly one statement writes. A statement that does not write still locks
// the record until its transaction ends, so the read that follows it in the
// same round trip sees the record that decided the claim, and the loser is
// told who holds it. The claims of one batch are sent together, in key order
// (so that two batches never wait for each other's rows in a cycle), in one
// implicit transaction and one round trip; requests of one batch for the same
// key are decided in their order, as in the embedded ledger.
//
// # Clocks
//
// Leases and expiry are compared with the database server's clock, now(),
// never with the calling host's: two hosts whose clocks disagree still agree
// on whether a lease has lapsed. now() is the start of the statement's
// transaction; every statement here is short (one round trip, a bounded
// number of rows), and a clock read a little early only makes a lease look
// live a little longer. Options.Now replaces the server's clock for tests.
//
// PostgreSQL keeps times to the microsecond: every time in a Record is
// truncated to the microsecond, and so are leases and the retention.
//
// # Storage
//
// Keys, owners, fingerprints, error texts, message ids and results are stored
// as bytea: a Go string may hold any bytes, NUL included, which a text column
// refuses. bytea compares bytewise, so ForEach's key order is the embedded
// ledger's. Expired records count as absent everywhere until Sweep deletes
// them.
//
// # Lost answers
//
// A call whose connection fails after its statements were sent (the server
// restarted, the network cut the connection) does not know whether its
// transaction committed. Such a call is tried once more on a connection the
// pool has checked (for a few seconds after a lost connection, the pool
// pings each connection it hands out, so that the second attempt does not
// take another that the same failure cut),
// in a way that recognises its own earlier write: a claim that finds the
// record in progress under its own owner token was the first attempt's, and
// answers Claimed (Reclaimed is then false even if that attempt superseded
// a claim); a completion is idempotent for its owner; a failure that
// finds the record failed by its owner with its error, and a release that
// finds the record released, succeed. When the second attempt fails too, or
// a call runs out of time, the error wraps ledger.ErrUnavailable and the
// outcome is unknown: a claim may hold the operation (its lease then lapses
// and a later delivery takes it over; no two owners hold a live lease), a
// completion may have been recorded (the next delivery then answers
// AlreadyComplete). Either way the caller must not acknowledge the message.
//
// # Flow control
//
// The records' flow fields (ledger.Record.OwnFailures, OutageFailures and
// the dead-letter mark) are columns of the table; a partial index on the
// group of the dead-letter reason, over the marked records only, makes
// DeadLetterCounts a scan of those. Flow documents, rate buckets,
// concurrency slots and the process registry have tables of their own,
// named after the table: _flow, _rate, _slots and _procs. Every flow call
// is one round trip (after its statements are prepared on the connection):
// Reserve takes the tokens of every bucket of the call in one INSERT … ON
// CONFLICT DO UPDATE … RETURNING, from the server's clock; TakeSlots takes
// free rows of each pool with UPDATE … FOR UPDATE SKIP LOCKED, a pool's
// rows 0..limit-1 being made on first use in the same round trip. A call
// whose connection was lost after it was sent is tried once more: a
// reservation's first tokens, if it took effect, are then lost to everyone
// (a rate is undershot, never exceeded), and a PutFlow may answer
// ErrConflict with its own earlier write as the current document.
//
// # History, payload and activity
//
// A record's attempt history is a jsonb column (history), to which the
// statements of Complete, Fail and a takeover append in SQL, keeping the
// last ledger.MaxHistory; a kept payload is a bytea column (payload). The
// completions and failures per minute that a process records are counted
// in memory and added every ledger.MinuteFlush (and at Close) to the
// _minutes table, one statement, rather than by every transition, so that
// the hosts of a fleet do not queue on one row per minute; a crash loses
// the counts not yet added.
//
// # Upgrading
//
// Init upgrades a table made before flow control: it adds the flow columns
// (with defaults: the statements of an older sqsonce name their columns and
// do not see them, and adding them rewrites no row), the index (built in
// Init's transaction: writes to the table wait for one scan of it), the
// flow tables, and flow_version in the version table, whose version stays
// 1 so that older workers keep working on it. Init looks before it alters:
// on an upgraded table it adds no column and builds no index again. Open
// refuses a table without flow_version, or with an older one (flow schema
// 2 added the history and payload columns and the _minutes table), with
// ledger.ErrNoSchema, naming
// `sqsonce ledger init`: run it with the new version before starting its
// workers.
package postgres
