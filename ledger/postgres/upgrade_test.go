package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// The table and the statements of a worker of the sqsonce before flow
// control (schema 1), kept as they were, on the default table: what an
// older worker runs during a rolling deploy or after a rollback.
const (
	v1Table   = `sqsonce_operations`
	v1Columns = `key, state, permanent, fingerprint, attempts, owner, lease_expiry, first_seen,
	claimed, updated, completed, expires, last_error, message_id, result, takeover`
	v1Now = `coalesce($1::timestamptz, now())`
)

var v1DDL = []string{
	`CREATE TABLE IF NOT EXISTS sqsonce_operations (
	key          bytea PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512),
	state        smallint NOT NULL CHECK (state BETWEEN 1 AND 3), -- 1 in progress, 2 complete, 3 failed
	permanent    boolean NOT NULL DEFAULT false,
	fingerprint  bytea,
	attempts     integer NOT NULL,
	owner        bytea NOT NULL,
	lease_expiry timestamptz,
	first_seen   timestamptz NOT NULL,
	claimed      timestamptz NOT NULL,
	updated      timestamptz NOT NULL,
	completed    timestamptz,
	expires      timestamptz NOT NULL,
	last_error   bytea,
	message_id   bytea,
	result       bytea,
	takeover     boolean NOT NULL DEFAULT false -- the current claim took over a lapsed lease
)`,
	`CREATE INDEX IF NOT EXISTS sqsonce_operations_expires ON sqsonce_operations (expires)`,
	`CREATE INDEX IF NOT EXISTS sqsonce_operations_open ON sqsonce_operations (claimed) INCLUDE (state, permanent) WHERE state <> 2`,
	`CREATE INDEX IF NOT EXISTS sqsonce_operations_openkey ON sqsonce_operations (key) WHERE state <> 2`,
	`CREATE TABLE IF NOT EXISTS sqsonce_operations_version (
	one     boolean PRIMARY KEY DEFAULT true CHECK (one),
	version integer NOT NULL
)`,
	`INSERT INTO sqsonce_operations_version (version) VALUES (1) ON CONFLICT (one) DO NOTHING`,
}

var v1 = struct{ claim, readMany, complete, fail, release, extend, get, stats, sweep, list string }{
	claim: `
INSERT INTO sqsonce_operations AS o (key, state, permanent, fingerprint, attempts, owner, lease_expiry,
	first_seen, claimed, updated, completed, expires, last_error, message_id, result, takeover)
SELECT $3::bytea, 1, false, $4::bytea, 1, $5::bytea, c.now + $6::bigint * interval '1 microsecond',
	c.now, c.now, c.now, NULL, c.now + $2::bigint * interval '1 microsecond', NULL, $7::bytea, NULL, false
FROM (SELECT ` + v1Now + ` AS now) c
ON CONFLICT (key) DO UPDATE SET
	state = 1,
	permanent = false,
	fingerprint = CASE WHEN o.expires <= excluded.claimed OR o.fingerprint IS NULL THEN excluded.fingerprint ELSE o.fingerprint END,
	attempts = CASE WHEN o.expires <= excluded.claimed THEN 1 ELSE o.attempts + 1 END,
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
	takeover = o.expires > excluded.claimed AND o.state = 1
WHERE o.expires <= excluded.claimed
	OR ((o.fingerprint IS NULL OR excluded.fingerprint IS NULL OR o.fingerprint = excluded.fingerprint)
		AND ((o.state = 3 AND NOT o.permanent) OR (o.state = 1 AND o.lease_expiry <= excluded.claimed)))
RETURNING ` + v1Columns,
	readMany: `SELECT ` + v1Columns + `, ` + v1Now + ` FROM sqsonce_operations WHERE key = ANY($2::bytea[])`,
	complete: `
WITH locked AS MATERIALIZED (
	SELECT key FROM sqsonce_operations WHERE key = ANY($3::bytea[]) ORDER BY key FOR UPDATE)
UPDATE sqsonce_operations AS o SET state = 2, completed = c.now, lease_expiry = NULL, last_error = NULL,
	result = u.result, updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM locked, unnest($3::bytea[], $4::bytea[], $5::bytea[]) AS u(key, owner, result),
	(SELECT ` + v1Now + ` AS now) c
WHERE o.key = ANY($3::bytea[]) AND o.key = locked.key AND o.key = u.key AND o.owner = u.owner
	AND o.state = 1 AND o.expires > c.now
RETURNING o.key, o.owner`,
	fail: `
WITH locked AS MATERIALIZED (
	SELECT key FROM sqsonce_operations WHERE key = ANY($3::bytea[]) ORDER BY key FOR UPDATE)
UPDATE sqsonce_operations AS o SET state = 3, permanent = u.permanent, lease_expiry = NULL, last_error = u.err,
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM locked, unnest($3::bytea[], $4::bytea[], $5::bytea[], $6::boolean[]) AS u(key, owner, err, permanent),
	(SELECT ` + v1Now + ` AS now) c
WHERE o.key = ANY($3::bytea[]) AND o.key = locked.key AND o.key = u.key AND o.owner = u.owner
	AND o.state = 1 AND o.expires > c.now
RETURNING o.key, o.owner`,
	release: `
UPDATE sqsonce_operations AS o SET attempts = o.attempts - 1, state = 3, permanent = false, lease_expiry = NULL,
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM (SELECT ` + v1Now + ` AS now) c
WHERE o.key = $3::bytea AND o.owner = $4::bytea AND o.state = 1 AND o.attempts > 1 AND o.expires > c.now
RETURNING o.key`,
	extend: `
UPDATE sqsonce_operations AS o SET lease_expiry = c.now + $5::bigint * interval '1 microsecond',
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM (SELECT ` + v1Now + ` AS now) c
WHERE o.key = $3::bytea AND o.owner = $4::bytea AND o.state = 1 AND o.expires > c.now
RETURNING o.lease_expiry`,
	get: `SELECT ` + v1Columns + ` FROM sqsonce_operations WHERE key = $2::bytea AND expires > ` + v1Now,
	stats: `
SELECT (SELECT count(*) FROM sqsonce_operations),
	count(*) FILTER (WHERE state = 1),
	count(*) FILTER (WHERE state = 3 AND NOT permanent),
	count(*) FILTER (WHERE state = 3 AND permanent),
	min(claimed) FILTER (WHERE state = 1)
FROM sqsonce_operations WHERE state <> 2`,
	sweep: `
DELETE FROM sqsonce_operations WHERE key = ANY(ARRAY(
	SELECT key FROM sqsonce_operations WHERE expires <= ` + v1Now + `
	ORDER BY expires LIMIT $2::int FOR UPDATE SKIP LOCKED))`,
	list: `SELECT ` + v1Columns + ` FROM sqsonce_operations WHERE key > $1::bytea ORDER BY key LIMIT 100`,
}

// v1Worker runs the older worker's statements on one connection.
type v1Worker struct {
	t    *testing.T
	conn *pgx.Conn
}

const v1Retention, v1Lease = int64(24 * time.Hour / time.Microsecond), int64(time.Minute / time.Microsecond)

// open is what the older worker's Open checks: the tables, and a schema
// version it knows.
func (w v1Worker) open() {
	w.t.Helper()
	var table, version *string
	must(w.t, w.conn.QueryRow(ctx, `SELECT to_regclass($1)::text, to_regclass($2)::text`, `"sqsonce_operations"`, `"sqsonce_operations_version"`).Scan(&table, &version))
	var v int
	must(w.t, w.conn.QueryRow(ctx, `SELECT version FROM "sqsonce_operations_version"`).Scan(&v))
	if table == nil || version == nil || v > 1 {
		w.t.Fatalf("the older worker refuses the table: %v %v version %d", table, version, v)
	}
}

// claim runs the older claim and the read behind it, as its ClaimBatch does,
// and reports whether it took the record.
func (w v1Worker) claim(key, owner string) bool {
	w.t.Helper()
	b := &pgx.Batch{}
	b.Queue(v1.claim, nil, v1Retention, []byte(key), []byte("fp"), []byte(owner), v1Lease, []byte("m-"+owner))
	b.Queue(v1.readMany, nil, [][]byte{[]byte(key)})
	br := w.conn.SendBatch(ctx, b)
	defer br.Close()
	taken := true
	if err := v1Scan(br.QueryRow()); errors.Is(err, pgx.ErrNoRows) {
		taken = false
	} else {
		must(w.t, err)
	}
	var at time.Time
	must(w.t, v1Scan(br.QueryRow(), &at))
	must(w.t, br.Close())
	return taken
}

// exec runs one of the older transitions and reports how many rows it
// returned.
func (w v1Worker) exec(stmt string, args ...any) int {
	w.t.Helper()
	rows, err := w.conn.Query(ctx, stmt, args...)
	must(w.t, err)
	n := 0
	for rows.Next() {
		n++
	}
	must(w.t, rows.Err())
	return n
}

// v1Scan scans a row of the older columns into what its scanRecord did.
func v1Scan(r pgx.Row, extra ...any) error {
	var (
		key, fp, owner, lastErr, msgID, result                []byte
		state                                                 int16
		attempts                                              int32
		permanent, takeover                                   bool
		lease, firstSeen, claimed, updated, completed, expiry *time.Time
	)
	return r.Scan(append([]any{&key, &state, &permanent, &fp, &attempts, &owner, &lease, &firstSeen,
		&claimed, &updated, &completed, &expiry, &lastErr, &msgID, &result, &takeover}, extra...)...)
}

// TestUpgrade_V1Table: a table made by the sqsonce before flow control is
// refused by this one until `ledger init` upgrades it; then both work on
// it at once: the older worker's statements (kept above as they were) run
// on the upgraded table and read what this version wrote, and this version
// reads what they wrote.
func TestUpgrade_V1Table(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	conn := pgtest.Connect(t, url)
	for _, stmt := range v1DDL {
		_, err := conn.Exec(ctx, stmt)
		must(t, err)
	}
	old := v1Worker{t: t, conn: conn}
	old.open()
	for _, key := range []string{"done", "failed", "perm", "running"} {
		if !old.claim(key, "a") {
			t.Fatalf("the older worker's first claim of %q", key)
		}
	}
	old.exec(v1.complete, nil, v1Retention, [][]byte{[]byte("done")}, [][]byte{[]byte("a")}, [][]byte{[]byte("receipt")})
	old.exec(v1.fail, nil, v1Retention, [][]byte{[]byte("failed"), []byte("perm")}, [][]byte{[]byte("a"), []byte("a")},
		[][]byte{[]byte("timeout"), []byte("bad card")}, []bool{false, true})

	opts := postgres.Options{URL: url, Retention: 24 * time.Hour}
	_, err := postgres.Open(ctx, opts)
	if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") {
		t.Fatalf("open of a table without flow control: %v", err)
	}
	must(t, postgres.Init(ctx, opts))
	must(t, postgres.Init(ctx, opts)) // again: nothing to do
	l := open(t, opts)
	if v, err := l.FlowSchema(ctx); err != nil || v != ledger.FlowSchemaVersion {
		t.Fatalf("flow schema after init: %d, %v", v, err)
	}
	for key, state := range map[string]ledger.State{"done": ledger.StateComplete, "failed": ledger.StateFailed, "perm": ledger.StateFailed, "running": ledger.StateInProgress} {
		r, err := l.Get(ctx, key)
		must(t, err)
		if r.State != state || r.OwnFailures != 0 || r.OutageFailures != 0 || !r.DeadLettered.IsZero() {
			t.Fatalf("%s written by the older worker: %+v", key, r)
		}
	}

	// This version's flow state, on the records and beside them.
	mustClaim(t, l, claimReq("failed", "b"), ledger.Claimed)
	must(t, l.Fail(ctx, ledger.Failure{Key: "failed", Owner: "b", Err: "503", Outage: true}))
	must(t, l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "perm", Owner: "b", Reason: "bad card 4242", CopyID: "copy-1"}})[0])
	_, err = l.PutFlow(ctx, ledger.FlowDoc{Scope: "q", Data: []byte("paused")}, 0)
	must(t, err)
	_, err = ledgertest.ReserveEach(ctx, l, []ledgertest.Ask{{Bucket: "b", Rate: 10, Burst: 1, N: 3}})
	must(t, err)
	_, err = l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: "p", Limit: 2, N: 1, Owner: "b", Lease: time.Minute}})
	must(t, err)
	must(t, l.PutProcess(ctx, ledger.Process{ID: "h/1/x", TTL: time.Minute}))

	// The older worker, on the upgraded table: its Open's checks, every
	// transition, reads of records this version wrote, stats and sweep.
	old.open()
	if !old.claim("new", "old") || !old.claim("failed", "old") {
		t.Fatal("the older worker's claims on the upgraded table")
	}
	if old.exec(v1.extend, nil, v1Retention, []byte("new"), []byte("old"), v1Lease) != 1 ||
		old.exec(v1.fail, nil, v1Retention, [][]byte{[]byte("failed")}, [][]byte{[]byte("old")}, [][]byte{[]byte("again")}, []bool{false}) != 1 ||
		old.exec(v1.complete, nil, v1Retention, [][]byte{[]byte("new")}, [][]byte{[]byte("old")}, [][]byte{nil}) != 1 {
		t.Fatal("the older worker's transitions on the upgraded table")
	}
	if !old.claim("failed", "old2") || old.exec(v1.release, nil, v1Retention, []byte("failed"), []byte("old2")) != 1 {
		t.Fatal("the older worker's release on the upgraded table")
	}
	for _, key := range []string{"perm", "failed", "new"} {
		must(t, v1Scan(conn.QueryRow(ctx, v1.get, nil, []byte(key))))
	}
	rows, err := conn.Query(ctx, v1.list, []byte{})
	must(t, err)
	n := 0
	for rows.Next() {
		must(t, v1Scan(rows))
		n++
	}
	must(t, rows.Err())
	if n != 5 {
		t.Fatalf("the older worker lists %d records, want 5", n)
	}
	var all, inProgress, failed, permanent int64
	var oldest *time.Time
	must(t, conn.QueryRow(ctx, v1.stats).Scan(&all, &inProgress, &failed, &permanent, &oldest))
	if all != 5 || inProgress != 1 || failed != 1 || permanent != 1 {
		t.Fatalf("the older worker's stats: %d records, %d in progress, %d failed, %d permanently", all, inProgress, failed, permanent)
	}
	old.exec(v1.sweep, nil, 100)

	// This version reads what the older worker wrote: its failures count
	// in neither class (it did not say), the counts so far stay.
	r, err := l.Get(ctx, "failed")
	must(t, err)
	if r.State != ledger.StateFailed || r.OutageFailures != 1 || r.OwnFailures != 0 || r.LastError != "again" {
		t.Fatalf("failed after the older worker: %+v", r)
	}
	if r, err := l.Get(ctx, "new"); err != nil || r.State != ledger.StateComplete || r.OwnFailures != 0 {
		t.Fatalf("a record the older worker made: %+v, %v", r, err)
	}
	if c, err := l.DeadLetterCounts(ctx); err != nil || c["bad card #"] != 1 {
		t.Fatalf("dead-letter counts: %v, %v", c, err)
	}
}

// TestUpgrade_FlowSchema1: a table given flow control by the sqsonce before
// the history (flow schema 1: no history or payload column, no _minutes
// table) is refused by Open, naming `sqsonce ledger init`, which adds them;
// the records written before read with no history (a complete one derives
// its attempt), and the older worker's statements, which name neither,
// still write it.
func TestUpgrade_FlowSchema1(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	opts := postgres.Options{URL: url, Retention: 24 * time.Hour}
	must(t, postgres.Init(ctx, opts))
	conn := pgtest.Connect(t, url)
	for _, stmt := range []string{
		`ALTER TABLE sqsonce_operations DROP COLUMN history, DROP COLUMN payload`,
		`DROP TABLE sqsonce_operations_minutes`,
		`UPDATE sqsonce_operations_version SET flow_version = 1`,
	} {
		_, err := conn.Exec(ctx, stmt)
		must(t, err)
	}
	old := v1Worker{t: t, conn: conn}
	if !old.claim("done", "a") || !old.claim("failed", "a") {
		t.Fatal("the older worker's claims")
	}
	old.exec(v1.complete, nil, v1Retention, [][]byte{[]byte("done")}, [][]byte{[]byte("a")}, [][]byte{nil})
	old.exec(v1.fail, nil, v1Retention, [][]byte{[]byte("failed")}, [][]byte{[]byte("a")}, [][]byte{[]byte("timeout")}, []bool{false})
	_, err := postgres.Open(ctx, opts)
	if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") || !strings.Contains(err.Error(), "flow schema 1") {
		t.Fatalf("open of a table of flow schema 1: %v", err)
	}
	must(t, postgres.Init(ctx, opts))
	l := open(t, opts)
	if v, err := l.FlowSchema(ctx); err != nil || v != ledger.FlowSchemaVersion {
		t.Fatalf("flow schema after init: %d, %v", v, err)
	}
	r, err := l.Get(ctx, "done")
	must(t, err)
	if len(r.History) != 1 || !r.History[0].Derived || r.Payload != nil {
		t.Fatalf("a record the older worker completed: history %+v, payload %+v", r.History, r.Payload)
	}
	r, err = l.Get(ctx, "failed")
	must(t, err)
	if len(r.History) != 0 || r.Attempts != 1 {
		t.Fatalf("a record the older worker failed: attempts %d, history %+v", r.Attempts, r.History)
	}
	// This version's writes keep a history; the older worker's still work.
	if c, err := l.Claim(ctx, ledger.ClaimRequest{Key: "failed", Owner: "b", Lease: time.Minute}); err != nil || c.Outcome != ledger.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	must(t, l.Fail(ctx, ledger.Failure{Key: "failed", Owner: "b", Err: "timeout again"}))
	if !old.claim("failed", "c") || old.exec(v1.complete, nil, v1Retention, [][]byte{[]byte("failed")}, [][]byte{[]byte("c")}, [][]byte{nil}) != 1 {
		t.Fatal("the older worker's claim and completion on the upgraded table")
	}
	r, err = l.Get(ctx, "failed")
	must(t, err)
	if r.State != ledger.StateComplete || r.Attempts != 3 || len(r.History) != 1 || r.History[0].Owner != "b" || r.History[0].Error != "timeout again" {
		t.Fatalf("after this version's failure and the older worker's completion: %+v", r)
	}
}
