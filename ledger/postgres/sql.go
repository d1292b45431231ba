package postgres

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsonce/sqsonce/ledger"
)

// The states as stored.
const (
	stateInProgress = 1
	stateComplete   = 2
	stateFailed     = 3
)

// columns are the columns of a record, in the order scanRecord reads them.
const columns = `key, state, permanent, fingerprint, attempts, owner, lease_expiry, first_seen,
	claimed, updated, completed, expires, last_error, message_id, result, takeover` + flowColumns

// nowExpr is the clock of a statement: the parameter, set only by tests
// (Options.Now), or else the server's now(). The parameter is always $1.
const nowExpr = `coalesce($1::timestamptz, now())`

// The SQLSTATEs of sqsonce's own with which the statements that end an
// operation's transaction refuse to go on, so that the COMMIT sent behind
// them in the same round trip is skipped and the transaction rolled back.
// They are raised by the ledger's function (see refuseFunction), with
// what the caller needs in the error's DETAIL field: the outcome is read
// from these fields, never from the message's text.
const (
	// codeNotCompleted: the completion found no claim of its owner in
	// progress. DETAIL is the number of records it completed.
	codeNotCompleted = "SQ001"
	// codeIsolation: the transaction does not run at READ COMMITTED.
	// DETAIL is the level it runs at.
	codeIsolation = "SQ002"
)

// refuseFunction is the statement that creates the function that raises
// an error of SQLSTATE code, with message and detail: PostgreSQL raises
// errors of one's own only from PL/pgSQL. It returns an integer so that it
// can stand in a CASE of integers, and is volatile, so that it runs only
// where its branch is taken. Init creates it beside the table (see ddl);
// name is its name, quoted.
func refuseFunction(name string) string {
	return `CREATE OR REPLACE FUNCTION ` + name + `(code text, message text, detail text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
	RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
END
$body$`
}

// refuseArgs are the argument types of the function that refuseFunction
// creates, as to_regprocedure reads them.
const refuseArgs = "(text, text, text)"

// queries are the statements, with the table's name filled in. Those that
// read the clock take it as $1 (see nowExpr), and those that write a record
// the retention in microseconds as $2.
type queries struct {
	claim, claimSupersede   string
	checkIsolation          string
	readOne, readMany       string
	complete, fail, explain string
	completeOrAbort         string
	release, releaseLast    string
	extend, reset, forget   string
	get, page, stats, sweep string
	list, listOpen          string
	overviewInProgress      string
	overviewOwners          string
	overviewFailures        string
	listNewest              string
	listNewestOpen          string
}

func newQueries(c *config) queries {
	t := c.table.Sanitize()
	refuse := c.refuse.Sanitize()
	q := queries{
		// The check that the transaction of an OpTx runs at READ
		// COMMITTED (which READ UNCOMMITTED is, in PostgreSQL): BeginOp
		// starts it so, and the caller's statements may have changed it
		// (SET TRANSACTION) before their first query. It refuses with
		// codeIsolation.
		checkIsolation: `SELECT CASE WHEN current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') THEN 0
	ELSE ` + refuse + `('` + codeIsolation + `', 'sqsonce: the transaction of the completion runs at ' || current_setting('transaction_isolation') || ', not read committed', current_setting('transaction_isolation')) END`,

		claim:          claimStatement(t, false),
		claimSupersede: claimStatement(t, true),

		// The records claims did not take: each is locked by the claim's
		// statement, so this reads the version that decided it. The
		// clock comes with it, so that the time left of a lease is
		// measured by the clock that decided it.
		readOne:  `SELECT ` + columns + `, ` + nowExpr + ` FROM ` + t + ` WHERE key = $2::bytea`,
		readMany: `SELECT ` + columns + `, ` + nowExpr + ` FROM ` + t + ` WHERE key = ANY($2::bytea[])`,

		// Completions and failures of a batch, in one statement each;
		// each ends its claim's attempt, and counts it.
		// The records are first locked in key order, as claims lock them
		// (see ClaimBatch), so that a completion and a claim batch never
		// wait for each other in a cycle; they are found through the
		// primary key (key = ANY), whatever the planner thinks of the
		// unnest.
		complete: `
WITH locked AS MATERIALIZED (
	SELECT key FROM ` + t + ` WHERE key = ANY($3::bytea[]) ORDER BY key FOR UPDATE)
UPDATE ` + t + ` AS o SET state = 2, attempts = o.attempts + 1, completed = c.now, lease_expiry = NULL, last_error = NULL,
	result = u.result, updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond',
	history = CASE WHEN o.attempts = 0 AND o.history IS NULL THEN NULL
		ELSE ` + historyAppend("o.history", "u.started", "'complete'", "NULL") + ` END,
	payload = coalesce(u.payload, o.payload)
FROM locked, unnest($3::bytea[], $4::bytea[], $5::bytea[], $6::timestamptz[], $7::bytea[]) AS u(key, owner, result, started, payload),
	(SELECT ` + nowExpr + ` AS now) c
WHERE o.key = ANY($3::bytea[]) AND o.key = locked.key AND o.key = u.key AND o.owner = u.owner
	AND o.state = 1 AND o.expires > c.now
RETURNING o.key, o.owner`,
		fail: `
WITH locked AS MATERIALIZED (
	SELECT key FROM ` + t + ` WHERE key = ANY($3::bytea[]) ORDER BY key FOR UPDATE)
UPDATE ` + t + ` AS o SET state = 3, attempts = o.attempts + 1, permanent = u.permanent, lease_expiry = NULL, last_error = u.err,
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond', ` + failFlowSet + `,
	history = ` + historyAppend("o.history", "u.started", "CASE WHEN u.permanent THEN 'failed_permanently' ELSE 'failed' END", "u.herr") + `,
	payload = coalesce(u.payload, o.payload)
FROM locked, unnest($3::bytea[], $4::bytea[], $5::bytea[], $6::boolean[], $7::boolean[], $8::timestamptz[], $9::bytea[], $10::bytea[])
		AS u(key, owner, err, permanent, outage, started, herr, payload),
	(SELECT ` + nowExpr + ` AS now) c
WHERE o.key = ANY($3::bytea[]) AND o.key = locked.key AND o.key = u.key AND o.owner = u.owner
	AND o.state = 1 AND o.expires > c.now
RETURNING o.key, o.owner`,
		// What a transition that changed nothing found: the live records.
		explain: `SELECT key, state, permanent, owner, last_error FROM ` + t + `
WHERE key = ANY($2::bytea[]) AND expires > ` + nowExpr,

		// Release, which counts no attempt: a record that no attempt
		// has started is deleted, another becomes a retryable failure.
		releaseLast: `
DELETE FROM ` + t + ` WHERE key = $2::bytea AND owner = $3::bytea AND state = 1 AND attempts = 0
	AND expires > ` + nowExpr + ` RETURNING key`,
		release: `
UPDATE ` + t + ` AS o SET state = 3, permanent = false, lease_expiry = NULL,
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM (SELECT ` + nowExpr + ` AS now) c
WHERE o.key = $3::bytea AND o.owner = $4::bytea AND o.state = 1 AND o.attempts > 0 AND o.expires > c.now
RETURNING o.key`,
		extend: `
UPDATE ` + t + ` AS o SET lease_expiry = c.now + $5::bigint * interval '1 microsecond',
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM (SELECT ` + nowExpr + ` AS now) c
WHERE o.key = $3::bytea AND o.owner = $4::bytea AND o.state = 1 AND o.expires > c.now
RETURNING o.lease_expiry`,
		reset: `
UPDATE ` + t + ` AS o SET permanent = false, updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM (SELECT ` + nowExpr + ` AS now) c
WHERE o.key = $3::bytea AND o.state = 3 AND o.expires > c.now
RETURNING o.key`,
		forget: `DELETE FROM ` + t + ` WHERE key = $1::bytea`,

		get: `SELECT ` + columns + `, history, payload FROM ` + t + ` WHERE key = $2::bytea AND expires > ` + nowExpr,

		// A page of ForEach: at most $5 records after $2 in key order
		// within the prefix's range [$3, $4), with the last key looked
		// at and how many, so that the walk goes on past a page of
		// records that do not match. One row with NULL record columns
		// when none matches.
		page: `
WITH scan AS MATERIALIZED (
	SELECT ` + columns + ` FROM ` + t + `
	WHERE key > $2::bytea AND key >= $3::bytea AND ($4::bytea IS NULL OR key < $4::bytea)
	ORDER BY key LIMIT $5::int)
SELECT ` + prefixed("s.", columns) + `, l.last, l.n
FROM (SELECT (SELECT key FROM scan ORDER BY key DESC LIMIT 1) AS last, (SELECT count(*) FROM scan) AS n) l
LEFT JOIN scan s ON s.expires > $1::timestamptz AND ($6::smallint = 0 OR s.state = $6::smallint)
ORDER BY s.key`,

		list:           listStatement(t, ""),
		listOpen:       listStatement(t, "state <> 2 AND "),
		listNewest:     listNewestStatement(t, ""),
		listNewestOpen: listNewestStatement(t, "state <> 2 AND "),

		// The parts of an Overview. The records that are not complete
		// are found through their partial index; the activity reads
		// the records written since $2.
		overviewInProgress: `
SELECT ` + columns + ` FROM ` + t + ` WHERE state = 1 AND state <> 2 AND expires > ` + nowExpr + `
ORDER BY claimed, key LIMIT $2::int`,
		// The owners of the claims, which the overview groups by
		// process (ledger.ProcessOf), at most $2 of them.
		overviewOwners: `
SELECT owner, count(*), count(*) FILTER (WHERE lease_expiry <= ` + nowExpr + `)
FROM ` + t + ` WHERE state = 1 AND state <> 2 AND expires > ` + nowExpr + `
GROUP BY owner ORDER BY count(*) DESC, owner LIMIT $2::int`,
		// The failures by their text, which the overview groups by
		// ledger.ReasonGroup, at most $2 texts: the permanent ones, the
		// retryable ones marked dead-lettered, the latest's key, when.
		overviewFailures: `
SELECT last_error, count(*), count(*) FILTER (WHERE permanent), count(*) FILTER (WHERE NOT permanent AND dead_lettered IS NOT NULL),
	(array_agg(key ORDER BY updated DESC, key))[1], max(updated)
FROM ` + t + ` WHERE state = 3 AND state <> 2 AND expires > ` + nowExpr + `
GROUP BY last_error ORDER BY count(*) DESC, max(updated) DESC, last_error LIMIT $2::int`,

		// Stats in one snapshot: the open records through their partial
		// index, and every record through the smallest index.
		stats: `
SELECT (SELECT count(*) FROM ` + t + `),
	count(*) FILTER (WHERE state = 1),
	count(*) FILTER (WHERE state = 3 AND NOT permanent),
	count(*) FILTER (WHERE state = 3 AND permanent),
	min(claimed) FILTER (WHERE state = 1)
FROM ` + t + ` WHERE state <> 2`,

		// One chunk of a sweep: the oldest expired records that no
		// other transaction holds (another host's sweep, a claim taking
		// an expired record over), locked, then deleted.
		// The keys go through an array so that the planner finds them by
		// the primary key, whatever it guesses of the chunk's size.
		sweep: `
DELETE FROM ` + t + ` WHERE key = ANY(ARRAY(
	SELECT key FROM ` + t + ` WHERE expires <= ` + nowExpr + `
	ORDER BY expires LIMIT $2::int FOR UPDATE SKIP LOCKED))`,
	}
	// The completion of one operation that ends an OpTx: the completion
	// statement, made to refuse with codeNotCompleted when it completed
	// nothing, so that the COMMIT sent behind it in the same round trip is
	// skipped and the transaction, the handler's writes included, is
	// rolled back.
	q.completeOrAbort = strings.Replace(q.complete, "\nUPDATE ", ",\ndone AS (\nUPDATE ", 1) + `)
SELECT CASE WHEN count(*) = 1 THEN 0
	ELSE ` + refuse + `('` + codeNotCompleted + `', 'sqsonce: the completion found no claim of its owner in progress', count(*)::text) END FROM done`
	return q
}

// claimStatement is the statement of a claim: insert a new record, or
// take the existing one over when it may be taken. The new values are the
// excluded row's: excluded.claimed is the statement's clock. An expired
// record is taken as if it were absent: its history starts again. A claim
// counts no attempt, except when it takes over a claim in progress, whose
// attempt may have started (see ledger.Record.Attempts). The row written
// comes back, with whether it took over a claim that the request
// superseded.
//
// With supersede, $8 is ClaimRequest.Supersede and a slash: a record in
// progress under an owner token that begins with it is taken too, live
// lease or not. It is read first and locked (prev), as the write would
// lock it, so that the write takes the very version read and the answer
// can tell what it took over (the write's own version is not visible to a
// read after it); a record inserted by another claim after that read is
// not superseded.
func claimStatement(t string, supersede bool) string {
	with, join, inProgress, reclaimed := "", "", "o.lease_expiry <= excluded.claimed", "false"
	if supersede {
		// Joined to the row to insert, so that it is read before the
		// write, whatever else reads it.
		join = " LEFT JOIN prev ON true"
		with = `WITH prev AS MATERIALIZED (
	SELECT owner, expires FROM ` + t + ` WHERE key = $3::bytea AND state = 1
		AND substring(owner FROM 1 FOR octet_length($8::bytea)) = $8::bytea FOR UPDATE)
`
		inProgress = "(o.lease_expiry <= excluded.claimed OR o.owner IN (SELECT owner FROM prev))"
		reclaimed = "EXISTS (SELECT 1 FROM prev WHERE prev.expires > o.claimed)"
	}
	return `
` + with + `INSERT INTO ` + t + ` AS o (key, state, permanent, fingerprint, attempts, owner, lease_expiry,
	first_seen, claimed, updated, completed, expires, last_error, message_id, result, takeover)
SELECT $3::bytea, 1, false, $4::bytea, 0, $5::bytea, c.now + $6::bigint * interval '1 microsecond',
	c.now, c.now, c.now, NULL, c.now + $2::bigint * interval '1 microsecond', NULL, $7::bytea, NULL, false
FROM (SELECT ` + nowExpr + ` AS now) c` + join + `
ON CONFLICT (key) DO UPDATE SET
	state = 1,
	permanent = false,
	fingerprint = CASE WHEN o.expires <= excluded.claimed OR o.fingerprint IS NULL THEN excluded.fingerprint ELSE o.fingerprint END,
	attempts = CASE WHEN o.expires <= excluded.claimed THEN 0 WHEN o.state = 1 THEN o.attempts + 1 ELSE o.attempts END,
	owner = excluded.owner,
	lease_expiry = excluded.lease_expiry,
	first_seen = CASE WHEN o.expires <= excluded.claimed THEN excluded.first_seen ELSE o.first_seen END,
	claimed = excluded.claimed,
	updated = excluded.updated,
	completed = CASE WHEN o.expires <= excluded.claimed THEN NULL ELSE o.completed END,
	expires = excluded.expires,
	last_error = CASE WHEN o.expires <= excluded.claimed THEN NULL ELSE o.last_error END,
	message_id = CASE WHEN o.expires <= excluded.claimed OR excluded.message_id IS NOT NULL THEN excluded.message_id ELSE o.message_id END,
	result = CASE WHEN o.expires <= excluded.claimed THEN NULL ELSE o.result END,
	takeover = o.expires > excluded.claimed AND o.state = 1 AND o.lease_expiry <= excluded.claimed,
	` + claimFlowSet + `,
	history = CASE WHEN o.expires <= excluded.claimed THEN NULL
		WHEN o.state = 1 THEN ` + historyAppend("o.history", "NULL", "CASE WHEN o.lease_expiry <= excluded.claimed THEN 'lapsed' ELSE 'superseded' END", "NULL",
		"excluded.claimed") + `
		ELSE o.history END,
	payload = CASE WHEN o.expires <= excluded.claimed THEN NULL ELSE o.payload END
WHERE o.expires <= excluded.claimed
	OR ((o.fingerprint IS NULL OR excluded.fingerprint IS NULL OR o.fingerprint = excluded.fingerprint)
		AND ((o.state = 3 AND NOT o.permanent) OR (o.state = 1 AND ` + inProgress + `)))
RETURNING ` + columns + `, ` + reclaimed
}

// listStatement is the statement of a chunk of List: at most $5 records after
// $2 in key order within the prefix's range [$3, $4), those of them that
// are live at the statement's clock ($1), match the state ($6) and the
// window of the last write [$7, $8), and have an error text when $9 (a
// reason is asked for: the client compares the texts), with the last key
// looked at and how many. One row with NULL record columns when none
// matches. where narrows the records looked at: list walks every record
// through the primary key, listOpen only those that are not complete
// through their index in key order (see ddl).
func listStatement(t, where string) string {
	return `
WITH scan AS MATERIALIZED (
	SELECT ` + columns + ` FROM ` + t + `
	WHERE ` + where + `key > $2::bytea AND key >= $3::bytea AND ($4::bytea IS NULL OR key < $4::bytea)
	ORDER BY key LIMIT $5::int)
SELECT ` + prefixed("s.", columns) + `, l.last, l.n
FROM (SELECT (SELECT key FROM scan ORDER BY key DESC LIMIT 1) AS last, (SELECT count(*) FROM scan) AS n) l
LEFT JOIN scan s ON s.expires > ` + nowExpr + ` AND ($6::smallint = 0 OR s.state = $6::smallint)
	AND ($7::timestamptz IS NULL OR s.updated >= $7::timestamptz)
	AND ($8::timestamptz IS NULL OR s.updated < $8::timestamptz)
	AND (NOT $9::boolean OR s.last_error IS NOT NULL)
ORDER BY s.key`
}

// historyAppend is the SQL of hist (a jsonb array of attempts, or NULL)
// with one attempt of the record o appended, of the last
// ledger.MaxHistory: it started at started (NULL, or later than its end:
// the claim's time o.claimed), ended at end (c.now by default) with
// outcome, and errText (bytea or NULL). An attempt is an object of s and e
// (start and end in Unix microseconds), o (the owner, base64), r (the
// outcome) and x (the error, base64, or null); see decodeHistory.
func historyAppend(hist, started, outcome, errText string, end ...string) string {
	e := "c.now"
	if len(end) > 0 {
		e = end[0]
	}
	start := `CASE WHEN ` + started + `::timestamptz IS NULL OR ` + started + `::timestamptz > ` + e + ` THEN o.claimed ELSE ` + started + `::timestamptz END`
	micro := func(t string) string { return `(extract(epoch FROM ` + t + `) * 1000000)::bigint` }
	return `jsonb_path_query_array(coalesce(` + hist + `, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
			's', ` + micro(start) + `, 'e', ` + micro(e) + `, 'o', encode(o.owner, 'base64'), 'r', ` + outcome + `,
			'x', encode(` + errText + `::bytea, 'base64'))), '$[last - ` + strconv.Itoa(ledger.MaxHistory-1) + ` to last]')`
}

// attemptJSON is an attempt as historyAppend writes it.
type attemptJSON struct {
	S, E int64
	O    string
	R    string
	X    *string
}

// decodeHistory reads a history column; what it cannot read counts as
// none.
func decodeHistory(b []byte) []ledger.Attempt {
	var js []attemptJSON
	if len(b) == 0 || json.Unmarshal(b, &js) != nil {
		return nil
	}
	h := make([]ledger.Attempt, 0, len(js))
	for _, j := range js {
		owner, _ := base64.StdEncoding.DecodeString(j.O)
		a := ledger.Attempt{Start: time.UnixMicro(j.S), End: time.UnixMicro(j.E), Owner: string(owner), Outcome: ledger.AttemptOutcome(j.R)}
		if j.X != nil {
			e, _ := base64.StdEncoding.DecodeString(*j.X)
			a.Error = string(e)
		}
		h = append(h, a)
	}
	return h
}

// listNewestStatement is the statement of a chunk of a List of the newest
// records: at most $5 records written before the cursor ($2 expiry, $3
// key: NULL from the newest) in the order of their expiry, newest first
// (the expiry is the last write plus the retention), within the prefix's
// range [$9, $10) and expiring no earlier than $11 (the window's start plus
// the retention), with the filters of listStatement, and the last expiry
// and key looked at and how many. $2 is infinity for the first chunk (with
// $3 NULL), $11 -infinity without a window, so that the expiry index
// bounds the scan. where narrows the records looked at, as for
// listStatement.
func listNewestStatement(t, where string) string {
	return `
WITH scan AS MATERIALIZED (
	SELECT ` + columns + ` FROM ` + t + `
	WHERE ` + where + `expires <= $2::timestamptz AND (expires < $2::timestamptz OR key < $3::bytea)
		AND expires >= $11::timestamptz
		AND key >= $9::bytea AND ($10::bytea IS NULL OR key < $10::bytea)
	ORDER BY expires DESC, key DESC LIMIT $5::int),
last AS (SELECT expires, key FROM scan ORDER BY expires, key LIMIT 1)
SELECT ` + prefixed("s.", columns) + `, (SELECT expires FROM last), (SELECT key FROM last), (SELECT count(*) FROM scan)
FROM (SELECT 1) one
LEFT JOIN scan s ON s.expires > ` + nowExpr + ` AND ($6::smallint = 0 OR s.state = $6::smallint)
	AND ($7::timestamptz IS NULL OR s.updated >= $7::timestamptz)
	AND ($8::timestamptz IS NULL OR s.updated < $8::timestamptz)
	AND (NOT $4::boolean OR s.last_error IS NOT NULL)
ORDER BY s.expires DESC, s.key DESC`
}

// prefixed puts p before each name of a comma-separated list.
func prefixed(p, list string) string {
	names := strings.Split(list, ",")
	for i, n := range names {
		names[i] = p + strings.TrimSpace(n)
	}
	return strings.Join(names, ", ")
}

// row is a record as scanned, with the columns a Record does not hold.
type row struct {
	rec       ledger.Record
	takeover  bool
	reclaimed bool      // a claim's: it took over a claim that its request superseded
	at        time.Time // the clock of the statement that read it, when it reads one
}

// scanRecord reads the columns of a record (see columns) and then extra.
// ok is false when the record's columns are NULL (a LEFT JOIN that found
// none).
func scanRecord(r pgx.Row, extra ...any) (rw row, ok bool, err error) {
	var (
		key, fp, owner, lastErr, msgID, result                []byte
		state                                                 pgtype.Int2
		attempts                                              pgtype.Int4
		permanent, takeover                                   pgtype.Bool
		lease, firstSeen, claimed, updated, completed, expiry pgtype.Timestamptz
	)
	var fl flowCols
	dest := append([]any{&key, &state, &permanent, &fp, &attempts, &owner, &lease, &firstSeen,
		&claimed, &updated, &completed, &expiry, &lastErr, &msgID, &result, &takeover}, fl.dest()...)
	dest = append(dest, extra...)
	if err := r.Scan(dest...); err != nil {
		return row{}, false, err
	}
	if key == nil {
		return row{}, false, nil
	}
	rw = row{
		rec: ledger.Record{
			Key:         string(key),
			State:       ledger.State(state.Int16),
			Permanent:   permanent.Bool,
			Fingerprint: nonEmpty(fp),
			Attempts:    int(attempts.Int32),
			Owner:       string(owner),
			LeaseExpiry: timeOf(lease),
			FirstSeen:   timeOf(firstSeen),
			Claimed:     timeOf(claimed),
			Updated:     timeOf(updated),
			Completed:   timeOf(completed),
			Expires:     timeOf(expiry),
			LastError:   string(lastErr),
			MessageID:   string(msgID),
			Result:      nonEmpty(result),
		},
		takeover: takeover.Bool,
	}
	fl.apply(&rw.rec)
	return rw, true, nil
}

func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

// bytesOrNil is s as a bytea parameter: NULL when empty.
func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// micros is d in whole microseconds, the precision of PostgreSQL's times.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// clock is the $1 of every statement: the test clock, or NULL for the
// server's now().
func (l *Ledger) clock() any {
	if l.cfg.now == nil {
		return nil
	}
	return l.cfg.now()
}
