package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// Flow control on PostgreSQL. The records' flow fields are columns of the
// ledger's table, added by Init as columns an older sqsonce does not name
// (it lists the columns it reads and writes). Everything else has tables of
// its own, named after the ledger's table: _flow (flow documents), _rate
// (rate buckets), _slots (concurrency slots) and _procs (the process
// registry). The version table's flow_version column records
// ledger.FlowSchemaVersion; Open refuses a table without it (ErrNoSchema:
// run `sqsonce ledger init`), since this code's statements name the new
// columns.

// flowColumns are the record's flow columns, after the others of columns.
const flowColumns = `, own_failures, outage_failures, dead_lettered, dead_letter_reason, dead_letter_copy_id`

// claimFlowSet is what a claim sets of the flow columns: an expired record
// starts its counts again, and a claim clears the dead-letter mark.
const claimFlowSet = `own_failures = CASE WHEN o.expires <= excluded.claimed THEN 0 ELSE o.own_failures END,
	outage_failures = CASE WHEN o.expires <= excluded.claimed THEN 0 ELSE o.outage_failures END,
	dead_lettered = NULL, dead_letter_reason = NULL, dead_letter_group = NULL, dead_letter_copy_id = NULL`

// failFlowSet is what a failure sets of the flow columns: the count of its
// class (u.outage) goes up.
const failFlowSet = `own_failures = o.own_failures + CASE WHEN u.outage THEN 0 ELSE 1 END,
	outage_failures = o.outage_failures + CASE WHEN u.outage THEN 1 ELSE 0 END`

// flowCols scans the flow columns of a record.
type flowCols struct {
	own, outage    pgtype.Int4
	deadLettered   pgtype.Timestamptz
	reason, copyID []byte
}

func (f *flowCols) dest() []any {
	return []any{&f.own, &f.outage, &f.deadLettered, &f.reason, &f.copyID}
}

func (f *flowCols) apply(r *ledger.Record) {
	r.OwnFailures, r.OutageFailures = int(f.own.Int32), int(f.outage.Int32)
	r.DeadLettered = timeOf(f.deadLettered)
	r.DeadLetterReason, r.DeadLetterCopyID = string(f.reason), string(f.copyID)
}

// flowState is the flow statements and what a Ledger remembers between
// calls.
type flowState struct {
	q flowQueries
	// verified remembers, per slot pool, up to which limit its rows were
	// made (or touched) and when, by this host's clock: see TakeSlots.
	mu       sync.Mutex
	verified map[string]slotRows
	// made remembers when this host last made sure each rate bucket's
	// row exists, by its clock: see Reserve.
	made map[string]time.Time
	// pruned is when stale entries of both were last dropped: with a
	// partition per tenant, a long-running host sees many values once.
	pruned time.Time
}

// prune drops, at most once a minute, what the two maps hold that is no
// longer trusted (older than slotVerify, bucketVerify): its pool or
// bucket is made sure of again at its next use. Called with mu held.
func (f *flowState) prune(now time.Time) {
	if now.Sub(f.pruned) < time.Minute {
		return
	}
	f.pruned = now
	maps.DeleteFunc(f.made, func(_ string, at time.Time) bool { return now.Sub(at) > bucketVerify })
	maps.DeleteFunc(f.verified, func(_ string, v slotRows) bool { return now.Sub(v.at) > slotVerify })
}

type slotRows struct {
	limit int
	at    time.Time
}

// slotVerify is how long a pool's rows are taken to exist after this host
// made or touched them: well within ledger.SlotIdle, after which Sweep may
// remove rows untouched and free.
const slotVerify = time.Minute

// bucketVerify is how long a rate bucket's row is taken to exist after this
// host made sure of it: well within ledger.BucketIdle, after which Sweep
// may remove it.
const bucketVerify = time.Minute

// subset is the n elements of xs that pick names.
func subset[T any](xs []T, pick func(int) int, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = xs[pick(i)]
	}
	return out
}

type flowQueries struct {
	putFlowNew, putFlowOver, readFlow, deleteFlow, listFlows string
	putProc, removeProc, procs                               string
	makeBuckets, reserve, bucketLimits                       string
	ensureSlots, takeSlots, extendSlots, releaseSlots        string
	mark, explainMark, deadCounts                            string
	deadGroups                                               string
	minutesPut, minutesRead                                  string
	flowSchema                                               string
	sweep                                                    []string
}

// flowTables are the names of the flow tables and of the dead-letter index.
func flowTables(c *config) (docs, rate, slots, procs pgx.Identifier, deadIndex string) {
	return suffixed(c, "_flow"), suffixed(c, "_rate"), suffixed(c, "_slots"), suffixed(c, "_procs"), c.table[len(c.table)-1] + "_dlgroup"
}

// suffixed is the name of the table of the ledger's with suffix s.
func suffixed(c *config, s string) pgx.Identifier {
	id := slices.Clone(c.table)
	id[len(id)-1] += s
	return id
}

func newFlowState(c *config) flowState {
	return flowState{q: newFlowQueries(c), verified: map[string]slotRows{}, made: map[string]time.Time{}}
}

// nowNanos is the statement's clock (see nowExpr) in Unix nanoseconds.
const nowNanos = `(extract(epoch FROM ` + nowExpr + `) * 1000000)::bigint * 1000`

func newFlowQueries(c *config) flowQueries {
	t := c.table.Sanitize()
	docsID, rateID, slotsID, procsID, _ := flowTables(c)
	docs, rate, slots, procs := docsID.Sanitize(), rateID.Sanitize(), slotsID.Sanitize(), procsID.Sanitize()
	minutes := suffixed(c, "_minutes").Sanitize()
	return flowQueries{
		// A creation ($5 the expiry, $6 a TTL in microseconds) writes
		// only where the scope has no row; a write over version $7 only
		// where the row has it. The read behind either (readFlow) tells
		// the answer.
		putFlowNew: `
INSERT INTO ` + docs + ` (scope, version, data, updated, expires)
SELECT $2::bytea, 1, $3::bytea, c.now, CASE WHEN $5::bigint > 0 THEN c.now + $5::bigint * interval '1 microsecond' ELSE $4::timestamptz END
FROM (SELECT ` + nowExpr + ` AS now) c
ON CONFLICT (scope) DO NOTHING`,
		putFlowOver: `
UPDATE ` + docs + ` AS d SET version = d.version + 1, data = $3::bytea, updated = c.now,
	expires = CASE WHEN $5::bigint > 0 THEN c.now + $5::bigint * interval '1 microsecond' ELSE $4::timestamptz END
FROM (SELECT ` + nowExpr + ` AS now) c
WHERE d.scope = $2::bytea AND d.version = $6::bigint`,
		bucketLimits: `SELECT rate, burst FROM ` + rate + ` WHERE bucket = $1 AND tat > 0`, // a row made for a reservation that took nothing holds no limits
		readFlow: `SELECT d.version, d.data, d.updated, d.expires, c.now
FROM (SELECT ` + nowExpr + ` AS now) c LEFT JOIN ` + docs + ` d ON d.scope = $2::bytea`,
		deleteFlow: `
UPDATE ` + docs + ` AS d SET version = d.version + 1, data = NULL, updated = c.now, expires = c.now
FROM (SELECT ` + nowExpr + ` AS now) c
WHERE d.scope = $2::bytea AND d.version = $3::bigint AND (d.expires IS NULL OR d.expires > c.now)`,
		listFlows: `SELECT d.scope, d.version, d.data, d.updated, d.expires FROM ` + docs + ` d, (SELECT ` + nowExpr + ` AS now) c
WHERE d.expires IS NULL OR d.expires > c.now ORDER BY d.scope`,

		putProc: `
INSERT INTO ` + procs + ` AS p (id, host, pid, version, queue, started, beat, in_hand, paused, paused_why, expires)
SELECT $2::bytea, $3::bytea, $4::int, $5::bytea, $6::bytea, $7::timestamptz, c.now, $8::int, $9::boolean, $10::bytea,
	CASE WHEN $12::bigint > 0 THEN c.now + $12::bigint * interval '1 microsecond' ELSE $11::timestamptz END
FROM (SELECT ` + nowExpr + ` AS now) c
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, version = excluded.version, queue = excluded.queue,
	started = excluded.started, beat = excluded.beat, in_hand = excluded.in_hand, paused = excluded.paused,
	paused_why = excluded.paused_why, expires = excluded.expires`,
		removeProc: `DELETE FROM ` + procs + ` WHERE id = $1::bytea`,
		procs: `SELECT p.id, p.host, p.pid, p.version, p.queue, p.started, p.beat, p.in_hand, p.paused, p.paused_why, p.expires, c.now
FROM ` + procs + ` p, (SELECT ` + nowExpr + ` AS now) c
WHERE p.expires + $2::bigint * interval '1 microsecond' > c.now ORDER BY p.id`,

		// The rows of rate buckets, made idle where missing, so that
		// the reservation after it, in the same transaction, finds and
		// locks them.
		makeBuckets: `
INSERT INTO ` + rate + ` (bucket, tat, emission, rate, burst, asked, within_ns, at_ns, took, prev_rate, prev_burst)
SELECT r.bucket, 0, r.emission, r.rate, r.burst, 0, 0, 0, 0, r.rate, r.burst
FROM unnest($1::bytea[], $2::float8[], $3::int[], $4::bigint[]) AS r(bucket, rate, burst, emission)
ORDER BY r.bucket
ON CONFLICT (bucket) DO NOTHING`,
		// A reservation in one statement (see Reserve): cur locks the
		// buckets that exist, in their order, as claims lock records;
		// plan is ledger.Reservation.Plan, a token per step ($6 and $7
		// pair tokens with their buckets' indexes, 1-based; $8 are the
		// tokens' bounds, $10 their earliest starts), its last step the
		// buckets' new TATs; upd and ins write those that moved, ins
		// only where no other reserver made the bucket meanwhile. A row
		// per bucket tells the caller what the plan started from, and
		// whether the bucket was written.
		reserve: `
WITH RECURSIVE
req AS (SELECT * FROM unnest($2::bytea[], $3::float8[], $4::int[], $5::bigint[]) WITH ORDINALITY AS r(bucket, rate, burst, emission, i)),
cur AS (SELECT b.bucket, b.tat, b.rate, b.burst FROM ` + rate + ` b WHERE b.bucket = ANY($2::bytea[]) ORDER BY b.bucket FOR UPDATE),
c AS (SELECT ` + nowNanos + ` AS now),
was AS (SELECT r.i, r.bucket, r.rate, r.burst, r.emission, (r.burst - 1)::bigint * r.emission AS tau,
	coalesce(cur.tat, 0) AS tat, cur.rate AS held_rate, cur.burst AS held_burst
	FROM req r LEFT JOIN cur ON cur.bucket = r.bucket),
m AS (SELECT * FROM unnest($6::int[], $7::int[]) AS m(tok, bi)),
plan(k, tats) AS (
	SELECT 0, array(SELECT w.tat FROM was w ORDER BY w.i)
	UNION ALL
	SELECT p.k + 1, (
		SELECT array_agg(CASE WHEN s.fits AND w.i IN (SELECT m.bi FROM m WHERE m.tok = p.k + 1)
			THEN greatest(p.tats[w.i], s.start) + w.emission ELSE p.tats[w.i] END ORDER BY w.i)
		FROM was w, (
			SELECT st.start, st.start - c.now <= CASE WHEN ($8::bigint[])[p.k + 1] > 0 THEN ($8::bigint[])[p.k + 1]
				ELSE ` + fmt.Sprint(int64(ledger.MaxRetention)) + ` END AS fits
			FROM c, (SELECT greatest((SELECT now FROM c) + ($10::bigint[])[p.k + 1], max(p.tats[w2.i] - w2.tau)) AS start
				FROM was w2 JOIN m ON m.bi = w2.i AND m.tok = p.k + 1) st) s)
	FROM plan p WHERE p.k < $9::int),
fin AS (SELECT p.tats FROM plan p ORDER BY p.k DESC LIMIT 1),
upd AS (UPDATE ` + rate + ` AS b SET tat = fin.tats[w.i], emission = w.emission, rate = w.rate, burst = w.burst,
		at_ns = c.now, prev_rate = b.rate, prev_burst = b.burst
	FROM was w, fin, c WHERE b.bucket = w.bucket AND w.held_rate IS NOT NULL AND fin.tats[w.i] <> w.tat
	RETURNING b.bucket),
ins AS (INSERT INTO ` + rate + ` (bucket, tat, emission, rate, burst, asked, within_ns, at_ns, took, prev_rate, prev_burst)
	SELECT w.bucket, fin.tats[w.i], w.emission, w.rate, w.burst, 0, 0, c.now, 0, w.rate, w.burst
	FROM was w, fin, c WHERE w.held_rate IS NULL AND fin.tats[w.i] <> w.tat ORDER BY w.bucket
	ON CONFLICT (bucket) DO NOTHING
	RETURNING bucket)
SELECT w.i, w.tat, coalesce(w.held_rate, 0), coalesce(w.held_burst, 0), fin.tats[w.i],
	fin.tats[w.i] = w.tat OR w.bucket IN (SELECT bucket FROM upd UNION ALL SELECT bucket FROM ins), c.now
FROM was w, fin, c ORDER BY w.i`,

		// The rows 0..limit-1 of pools, made where missing and touched
		// where present, so that Sweep leaves them for a while.
		ensureSlots: `
INSERT INTO ` + slots + ` AS s (pool, idx, touched)
SELECT r.pool, g.idx, c.now
FROM unnest($2::bytea[], $3::int[]) AS r(pool, lim), generate_series(0, r.lim - 1) AS g(idx), (SELECT ` + nowExpr + ` AS now) c
ORDER BY r.pool, g.idx
ON CONFLICT (pool, idx) DO UPDATE SET touched = excluded.touched`,
		// Up to n free rows of each pool below its limit, skipping those
		// another transaction holds, taken by the request's owner.
		takeSlots: `
WITH r AS (SELECT * FROM unnest($2::bytea[], $3::int[], $4::int[], $5::bytea[], $6::bigint[])
		WITH ORDINALITY AS r(pool, lim, n, owner, lease, ord)),
	pick AS (SELECT r.ord, f.pool, f.idx, r.owner, r.lease FROM r CROSS JOIN LATERAL (
		SELECT s.pool, s.idx FROM ` + slots + ` s
		WHERE s.pool = r.pool AND s.idx < r.lim AND (s.owner IS NULL OR s.lease_expiry <= ` + nowExpr + `)
		ORDER BY s.idx LIMIT r.n FOR UPDATE OF s SKIP LOCKED) f)
UPDATE ` + slots + ` AS s SET owner = p.owner, lease_expiry = c.now + p.lease * interval '1 microsecond', touched = c.now
FROM pick p, (SELECT ` + nowExpr + ` AS now) c
WHERE s.pool = p.pool AND s.idx = p.idx
RETURNING p.ord, s.idx`,
		extendSlots:  slotUpdate(slots, `lease_expiry = c.now + $5::bigint * interval '1 microsecond', touched = c.now`),
		releaseSlots: slotUpdate(slots, `owner = NULL, lease_expiry = NULL, touched = c.now`),

		// Dead-letter marks, locked in key order as completions are.
		mark: `
WITH locked AS MATERIALIZED (
	SELECT key FROM ` + t + ` WHERE key = ANY($3::bytea[]) ORDER BY key FOR UPDATE)
UPDATE ` + t + ` AS o SET dead_lettered = c.now,
	dead_letter_reason = coalesce(u.reason, o.dead_letter_reason), dead_letter_group = coalesce(u.grp, o.dead_letter_group),
	dead_letter_copy_id = coalesce(u.copy, o.dead_letter_copy_id),
	updated = c.now, expires = c.now + $2::bigint * interval '1 microsecond'
FROM locked, unnest($3::bytea[], $4::bytea[], $5::bytea[], $6::bytea[], $7::bytea[]) AS u(key, owner, reason, grp, copy),
	(SELECT ` + nowExpr + ` AS now) c
WHERE o.key = ANY($3::bytea[]) AND o.key = locked.key AND o.key = u.key AND o.expires > c.now
	AND NOT (o.state = 1 AND o.owner <> u.owner AND o.lease_expiry > c.now)
RETURNING o.key`,
		explainMark: `SELECT key, owner FROM ` + t + ` WHERE key = ANY($2::bytea[]) AND expires > ` + nowExpr,
		// Through the partial index of dead-lettered records, which
		// carries the expiry: an index-only scan of those records.
		deadCounts: `SELECT dead_letter_group, count(*) FROM ` + t + `
WHERE dead_lettered IS NOT NULL AND expires > ` + nowExpr + ` GROUP BY dead_letter_group`,
		// The groups of marks with the latest mark's key and reason, for
		// the overview.
		deadGroups: `SELECT dead_letter_group, count(*), (array_agg(key ORDER BY dead_lettered DESC, key))[1],
	(array_agg(dead_letter_reason ORDER BY dead_lettered DESC, key))[1], max(dead_lettered)
FROM ` + t + ` WHERE dead_lettered IS NOT NULL AND expires > ` + nowExpr + ` GROUP BY dead_letter_group`,
		// A process's counts per minute ($1 minutes, $2 completions, $3
		// failures) added, and the minutes older than $4 removed.
		minutesPut: `WITH add AS (
	INSERT INTO ` + minutes + ` AS m (minute, completed, failed)
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) ORDER BY 1
	ON CONFLICT (minute) DO UPDATE SET completed = m.completed + excluded.completed, failed = m.failed + excluded.failed)
DELETE FROM ` + minutes + ` WHERE minute < $4::bigint`,
		minutesRead: `SELECT minute, completed, failed FROM ` + minutes + ` WHERE minute >= $1::bigint ORDER BY minute`,
		flowSchema:  fmt.Sprintf(`SELECT coalesce(flow_version, 0) FROM %s`, c.version.Sanitize()),

		// What Sweep removes beyond records (see sweepFlow), each
		// statement with the clock and how long the state is kept, in
		// microseconds.
		sweep: []string{
			`DELETE FROM ` + docs + ` WHERE expires + $2::bigint * interval '1 microsecond' <= ` + nowExpr,
			`DELETE FROM ` + procs + ` WHERE expires + $2::bigint * interval '1 microsecond' <= ` + nowExpr,
			`DELETE FROM ` + rate + ` WHERE tat + $2::bigint * 1000 <= ` + nowNanos,
			`DELETE FROM ` + slots + ` WHERE (pool, idx) IN (SELECT pool, idx FROM ` + slots + `
	WHERE touched + $2::bigint * interval '1 microsecond' <= ` + nowExpr + ` AND (owner IS NULL OR lease_expiry <= ` + nowExpr + `)
	FOR UPDATE SKIP LOCKED)`,
		},
	}
}

// slotUpdate is the statement that sets set on the slots ($2 pools, $3
// indexes) that their owners ($4) hold, and returns those it set. The rows
// are locked in their order first, as ensureSlots locks them, so that the
// two never wait for each other in a cycle.
func slotUpdate(slots, set string) string {
	return `
WITH u AS (SELECT * FROM unnest($2::bytea[], $3::int[], $4::bytea[]) AS u(pool, idx, owner)),
	locked AS MATERIALIZED (
		SELECT s.pool, s.idx FROM ` + slots + ` s, u WHERE s.pool = u.pool AND s.idx = u.idx AND s.owner = u.owner
		ORDER BY s.pool, s.idx FOR UPDATE OF s)
UPDATE ` + slots + ` AS s SET ` + set + `
FROM locked, u, (SELECT ` + nowExpr + ` AS now) c
WHERE s.pool = locked.pool AND s.idx = locked.idx AND u.pool = s.pool AND u.idx = s.idx AND s.owner = u.owner
RETURNING u.pool, u.idx, u.owner`
}

// initFlow creates what flow control needs, in Init's transaction: the
// records' flow columns and their index, the flow tables, and the flow
// version. It leaves the ledger's table alone when it has them, so that
// running Init again takes no lock on it; and it does nothing on a table of
// a newer schema, which Init then refuses.
func initFlow(ctx context.Context, tx pgx.Tx, c *config) error {
	var version int
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT version FROM %s`, c.version.Sanitize())).Scan(&version); err != nil {
		return err
	}
	if version > SchemaVersion {
		return nil
	}
	t := c.table.Sanitize()
	docs, rate, slots, procs, deadIndex := flowTables(c)
	has := func(table pgx.Identifier, column string) (bool, error) {
		var n int
		err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped`,
			table.Sanitize(), column).Scan(&n)
		return n > 0, err
	}
	var stmts []string
	if ok, err := has(c.table, "dead_letter_copy_id"); err != nil {
		return err
	} else if !ok {
		// New columns that an older sqsonce's statements do not name:
		// its inserts take their defaults. Adding them rewrites nothing.
		stmts = append(stmts, `ALTER TABLE `+t+`
	ADD COLUMN IF NOT EXISTS own_failures integer NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS outage_failures integer NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS dead_lettered timestamptz,
	ADD COLUMN IF NOT EXISTS dead_letter_reason bytea,
	ADD COLUMN IF NOT EXISTS dead_letter_group bytea,
	ADD COLUMN IF NOT EXISTS dead_letter_copy_id bytea`)
	}
	if ok, err := has(c.table, "history"); err != nil {
		return err
	} else if !ok {
		// The records' history and kept payload (flow schema 2): columns
		// an older sqsonce does not name either.
		stmts = append(stmts, `ALTER TABLE `+t+`
	ADD COLUMN IF NOT EXISTS history jsonb,
	ADD COLUMN IF NOT EXISTS payload bytea`)
	}
	var index *string
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1)::text`, append(slices.Clone(c.table[:len(c.table)-1]), deadIndex).Sanitize()).Scan(&index); err != nil {
		return err
	}
	if index == nil {
		// DeadLetterCounts reads this index alone: the dead-lettered
		// records are few, and it carries their expiry.
		stmts = append(stmts, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (dead_letter_group) INCLUDE (expires) WHERE dead_lettered IS NOT NULL`,
			pgx.Identifier{deadIndex}.Sanitize(), t))
	}
	stmts = append(stmts,
		`CREATE TABLE IF NOT EXISTS `+docs.Sanitize()+` (
	scope   bytea PRIMARY KEY,
	version bigint NOT NULL,
	data    bytea,
	updated timestamptz NOT NULL,
	expires timestamptz -- NULL: never; a tombstone's is its deletion
)`,
		`CREATE TABLE IF NOT EXISTS `+rate.Sanitize()+` (
	bucket     bytea PRIMARY KEY,
	tat        bigint NOT NULL, -- theoretical arrival time, Unix nanoseconds
	emission   bigint NOT NULL, -- the last reservation's interval T, nanoseconds
	rate       double precision NOT NULL,
	burst      integer NOT NULL,
	asked      integer NOT NULL, -- the last reservation's n
	within_ns  bigint NOT NULL,  -- the last reservation's bound
	at_ns      bigint NOT NULL,  -- the last reservation's clock
	took       integer NOT NULL, -- the tokens it took
	prev_rate  double precision NOT NULL, -- the limits before it
	prev_burst integer NOT NULL
)`,
		`CREATE TABLE IF NOT EXISTS `+slots.Sanitize()+` (
	pool         bytea NOT NULL,
	idx          integer NOT NULL,
	owner        bytea,
	lease_expiry timestamptz,
	touched      timestamptz NOT NULL,
	PRIMARY KEY (pool, idx)
)`,
		`CREATE TABLE IF NOT EXISTS `+procs.Sanitize()+` (
	id         bytea PRIMARY KEY,
	host       bytea,
	pid        integer NOT NULL,
	version    bytea,
	queue      bytea,
	started    timestamptz,
	beat       timestamptz NOT NULL,
	in_hand    integer NOT NULL,
	paused     boolean NOT NULL,
	paused_why bytea,
	expires    timestamptz NOT NULL
)`,
		`CREATE TABLE IF NOT EXISTS `+suffixed(c, "_minutes").Sanitize()+` (
	minute    bigint PRIMARY KEY, -- Unix minute
	completed bigint NOT NULL,
	failed    bigint NOT NULL
)`,
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS flow_version integer`, c.version.Sanitize()),
		fmt.Sprintf(`UPDATE %s SET flow_version = %d WHERE flow_version IS NULL OR flow_version < %d`,
			c.version.Sanitize(), ledger.FlowSchemaVersion, ledger.FlowSchemaVersion),
	)
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// checkFlowSchema refuses a table that Init has not given flow control
// yet: this code's statements name its columns.
func (l *Ledger) checkFlowSchema(ctx context.Context) error {
	v, err := l.readFlowSchema(ctx)
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	if v < ledger.FlowSchemaVersion {
		return fmt.Errorf("table %s was set up by an older sqsonce (flow schema %d, this one needs %d): run `sqsonce ledger init` with this version to upgrade it (older workers keep working on the upgraded table): %w",
			l.cfg.tableLabel, v, ledger.FlowSchemaVersion, ledger.ErrNoSchema)
	}
	return nil
}

func (l *Ledger) readFlowSchema(ctx context.Context) (int, error) {
	var v int
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		err := l.pool.QueryRow(ctx, l.flow.q.flowSchema).Scan(&v)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42703" { // undefined_column: made before flow control
			v, err = 0, nil
		}
		return err
	})
	return v, err
}

// FlowSchema returns the flow schema version recorded in the version table
// by the newest sqsonce whose Init ran on it (0: none that knew flow
// control).
func (l *Ledger) FlowSchema(ctx context.Context) (int, error) {
	v, err := l.readFlowSchema(ctx)
	if err != nil {
		return 0, fmt.Errorf("flow schema: %w", err)
	}
	return v, nil
}

// MarkDeadLettered records dead-letter marks (see ledger.DeadLetter) in one
// statement and one round trip, one error per mark: nil once committed,
// ErrNotFound without a live record, ErrNotOwner when another owner's live
// lease holds the record. Marks of one key in a call are applied in their
// order, one round trip each. The mark does not change the record's state;
// it renews its retention.
func (l *Ledger) MarkDeadLettered(ctx context.Context, ds []ledger.DeadLetter) []error {
	errs := make([]error, len(ds))
	// Rounds of distinct keys: the n-th mark of each key in the n-th.
	var rounds [][]int
	seen := map[string]int{}
	for i := range ds {
		if err := ds[i].Validate(); err != nil {
			errs[i] = err
			continue
		}
		n := seen[ds[i].Key]
		seen[ds[i].Key] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	for _, round := range rounds {
		l.markRound(ctx, ds, round, errs)
	}
	return errs
}

// markRound records the marks ds[i] for i in items, whose keys differ.
func (l *Ledger) markRound(ctx context.Context, ds []ledger.DeadLetter, items []int, errs []error) {
	var keys, owners, reasons, groups, copies [][]byte
	for _, i := range items {
		d := &ds[i]
		reason := textcut.Cut(d.Reason, ledger.MaxErrorLen)
		keys, owners = append(keys, []byte(d.Key)), append(owners, []byte(d.Owner))
		reasons, copies = append(reasons, bytesOrNil(reason)), append(copies, bytesOrNil(textcut.Cut(d.CopyID, ledger.MaxMessageIDLen)))
		if reason != "" {
			groups = append(groups, []byte(ledger.ReasonGroup(reason)))
		} else {
			groups = append(groups, nil)
		}
	}
	done := map[string]bool{}
	live := map[string]string{}
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		clear(done)
		clear(live)
		b := &pgx.Batch{}
		b.Queue(l.flow.q.mark, l.clock(), micros(l.cfg.retention), keys, owners, reasons, groups, copies)
		b.Queue(l.flow.q.explainMark, l.clock(), keys)
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var key []byte
			if err := rows.Scan(&key); err != nil {
				rows.Close()
				return err
			}
			done[string(key)] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var key, owner []byte
			if err := rows.Scan(&key, &owner); err != nil {
				rows.Close()
				return err
			}
			live[string(key)] = string(owner)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	for _, i := range items {
		d := &ds[i]
		owner, ok := live[d.Key]
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("mark dead-lettered %q: %w", d.Key, err)
		case done[d.Key]:
			errs[i] = nil
		case !ok:
			errs[i] = fmt.Errorf("mark dead-lettered %q: %w", d.Key, ledger.ErrNotFound)
		default:
			errs[i] = fmt.Errorf("mark dead-lettered %q: in progress under claim %q, not %q: %w", d.Key, owner, d.Owner, ledger.ErrNotOwner)
		}
	}
}

// DeadLetterCounts counts the live records marked dead-lettered by the
// group of their reason (ledger.ReasonGroup), reading the partial index of
// those records only.
func (l *Ledger) DeadLetterCounts(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		clear(counts)
		rows, err := l.pool.Query(ctx, l.flow.q.deadCounts, l.clock())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var group []byte
			var n int64
			if err := rows.Scan(&group, &n); err != nil {
				return err
			}
			counts[string(group)] += int(n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter counts: %w", err)
	}
	return counts, nil
}

// scanFlowRead reads a row of readFlow or getFlow.
func scanFlowRead(r pgx.Row, scope string) (ledger.FlowRead, error) {
	var version pgtype.Int8
	var data []byte
	var updated, expires pgtype.Timestamptz
	var now time.Time
	if err := r.Scan(&version, &data, &updated, &expires, &now); err != nil {
		return ledger.FlowRead{}, err
	}
	if !version.Valid {
		return ledger.FlowRead{Doc: ledger.FlowDoc{Scope: scope}, Now: now}, nil
	}
	d := ledger.FlowDoc{Scope: scope, Version: version.Int64, Data: nonEmpty(data), Updated: timeOf(updated), Expires: timeOf(expires)}
	if !d.Live(now) {
		return ledger.FlowRead{Doc: ledger.FlowDoc{Scope: scope, Version: d.Version}, Now: now}, nil
	}
	return ledger.FlowRead{Doc: d, Found: true, Now: now}, nil
}

// BucketLimits returns the rate and burst that the rate bucket name holds
// (see ledger.DB.BucketLimits).
func (l *Ledger) BucketLimits(ctx context.Context, name string) (rate float64, burst int, found bool, err error) {
	err = l.do(ctx, func(ctx context.Context, _ bool) error {
		var b int32
		switch err := l.pool.QueryRow(ctx, l.flow.q.bucketLimits, []byte(name)).Scan(&rate, &b); {
		case errors.Is(err, pgx.ErrNoRows):
			rate, burst, found = 0, 0, false
			return nil
		case err != nil:
			return err
		}
		burst, found = int(b), true
		return nil
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("bucket limits %q: %w", name, err)
	}
	return rate, burst, found, nil
}

// GetFlow reads the document of scope, with the server's clock. A document
// that expired or was deleted is not Found; Doc.Version is then its last
// version.
func (l *Ledger) GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error) {
	if err := ledger.ValidateScope(scope); err != nil {
		return ledger.FlowRead{}, fmt.Errorf("get flow: %w", err)
	}
	var r ledger.FlowRead
	err := l.do(ctx, func(ctx context.Context, _ bool) (err error) {
		r, err = scanFlowRead(l.pool.QueryRow(ctx, l.flow.q.readFlow, l.clock(), []byte(scope)), scope)
		return err
	})
	if err != nil {
		return ledger.FlowRead{}, fmt.Errorf("get flow %q: %w", scope, err)
	}
	return r, nil
}

// PutFlow writes doc as version ifVersion+1 if the scope's stored version
// is ifVersion (see ledger.DB.PutFlow), in one round trip: the write, and
// the read of what it left. A write whose answer was lost with its
// connection is tried again and may then answer ErrConflict with its own
// earlier write as the current document.
func (l *Ledger) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error) {
	if err := doc.Validate(); err != nil {
		return ledger.FlowRead{}, fmt.Errorf("put flow: %w", err)
	}
	if ifVersion < 0 {
		return ledger.FlowRead{}, fmt.Errorf("put flow %q: negative version %d: %w", doc.Scope, ifVersion, ledger.ErrInvalidArgument)
	}
	var expires any
	if !doc.Expires.IsZero() {
		expires = doc.Expires
	}
	var r ledger.FlowRead
	var wrote bool
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		b := &pgx.Batch{}
		args := []any{l.clock(), []byte(doc.Scope), nonEmpty(doc.Data), expires, micros(doc.TTL)}
		if ifVersion == 0 {
			b.Queue(l.flow.q.putFlowNew, args...)
		} else {
			b.Queue(l.flow.q.putFlowOver, append(args, ifVersion)...)
		}
		b.Queue(l.flow.q.readFlow, l.clock(), []byte(doc.Scope))
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		wrote = tag.RowsAffected() == 1
		if r, err = scanFlowRead(br.QueryRow(), doc.Scope); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return ledger.FlowRead{}, fmt.Errorf("put flow %q: %w", doc.Scope, err)
	}
	if !wrote {
		return r, fmt.Errorf("put flow %q: stored version %d, not %d: %w", doc.Scope, r.Doc.Version, ifVersion, ledger.ErrConflict)
	}
	return r, nil
}

// DeleteFlow deletes the live document of scope if its version is ifVersion
// (see ledger.DB.DeleteFlow), in one round trip.
func (l *Ledger) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	if err := ledger.ValidateScope(scope); err != nil {
		return fmt.Errorf("delete flow: %w", err)
	}
	var answer error
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		b := &pgx.Batch{}
		b.Queue(l.flow.q.deleteFlow, l.clock(), []byte(scope), ifVersion)
		b.Queue(l.flow.q.readFlow, l.clock(), []byte(scope))
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		r, err := scanFlowRead(br.QueryRow(), scope)
		if err != nil {
			return err
		}
		switch {
		case tag.RowsAffected() == 1:
			answer = nil
		case again && !r.Found && r.Doc.Version == ifVersion+1:
			answer = nil // the earlier attempt's tombstone
		case r.Found && r.Doc.Version != ifVersion:
			answer = fmt.Errorf("delete flow %q: stored version %d, not %d: %w", scope, r.Doc.Version, ifVersion, ledger.ErrConflict)
		default:
			answer = fmt.Errorf("delete flow %q: %w", scope, ledger.ErrNotFound)
		}
		return br.Close()
	})
	if err != nil {
		return fmt.Errorf("delete flow %q: %w", scope, err)
	}
	return answer
}

// ListFlows returns the live flow documents, by scope.
func (l *Ledger) ListFlows(ctx context.Context) ([]ledger.FlowDoc, error) {
	var docs []ledger.FlowDoc
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		docs = docs[:0]
		rows, err := l.pool.Query(ctx, l.flow.q.listFlows, l.clock())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var scope, data []byte
			var d ledger.FlowDoc
			var expires pgtype.Timestamptz
			if err := rows.Scan(&scope, &d.Version, &data, &d.Updated, &expires); err != nil {
				return err
			}
			d.Scope, d.Data, d.Expires = string(scope), nonEmpty(data), timeOf(expires)
			docs = append(docs, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	return docs, nil
}

// PutProcess registers p or renews its registration (see
// ledger.DB.PutProcess), with the server's clock.
func (l *Ledger) PutProcess(ctx context.Context, p ledger.Process) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("put process: %w", err)
	}
	var started, expires any
	if !p.Started.IsZero() {
		started = p.Started
	}
	if !p.Expires.IsZero() {
		expires = p.Expires
	}
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		_, err := l.pool.Exec(ctx, l.flow.q.putProc, l.clock(), []byte(p.ID), bytesOrNil(p.Host), p.PID, bytesOrNil(p.Version),
			bytesOrNil(p.Queue), started, p.InHand, p.Paused, bytesOrNil(p.PausedWhy), expires, micros(p.TTL))
		return err
	})
	if err != nil {
		return fmt.Errorf("put process %q: %w", p.ID, err)
	}
	return nil
}

// RemoveProcess removes the registration of id; an absent id is not an
// error.
func (l *Ledger) RemoveProcess(ctx context.Context, id string) error {
	if err := ledger.ValidateScope(id); err != nil {
		return fmt.Errorf("remove process: %w", err)
	}
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		_, err := l.pool.Exec(ctx, l.flow.q.removeProc, []byte(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("remove process %q: %w", id, err)
	}
	return nil
}

// Processes returns the registered processes, by ID (see
// ledger.DB.Processes); BeatAge is measured with the server's clock.
func (l *Ledger) Processes(ctx context.Context) ([]ledger.Process, error) {
	var ps []ledger.Process
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		ps = ps[:0]
		rows, err := l.pool.Query(ctx, l.flow.q.procs, l.clock(), micros(ledger.ProcessKeep))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, host, version, queue, why []byte
			var started pgtype.Timestamptz
			var now time.Time
			var p ledger.Process
			if err := rows.Scan(&id, &host, &p.PID, &version, &queue, &started, &p.Beat, &p.InHand, &p.Paused, &why, &p.Expires, &now); err != nil {
				return err
			}
			p.ID, p.Host, p.Version, p.Queue, p.PausedWhy = string(id), string(host), string(version), string(queue), string(why)
			p.Started, p.BeatAge = timeOf(started), now.Sub(p.Beat)
			ps = append(ps, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("processes: %w", err)
	}
	return ps, nil
}

// Reserve takes rate tokens (see ledger.Reservation) with the server's
// clock, in one statement and one round trip: it locks the buckets, plans
// the reservation in SQL as ledger.Reservation.Plan does, and writes the
// buckets that moved. Buckets this host has not seen for a while are made
// first where missing, by a statement sent in the same round trip and
// transaction. The plan is made again here from the TATs the
// statement started from, and must agree. A bucket that was missing and
// that another reserver made meanwhile is not written: the tokens that
// take it are not taken (those of its other buckets go unused: the rate
// is undershot, never exceeded). A call whose answer was lost with its
// connection is tried once more: the tokens of the first attempt, if it
// committed, are then lost to everyone in the same way.
func (l *Ledger) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error) {
	if err := r.Validate(); err != nil {
		return ledger.Grant{}, err
	}
	n := len(r.Buckets)
	names, rates, bursts, emissions := make([][]byte, n), make([]float64, n), make([]int32, n), make([]int64, n)
	for i, b := range r.Buckets {
		names[i], rates[i], bursts[i], emissions[i] = []byte(b.Name), b.Rate, int32(b.Burst), int64(b.Interval())
	}
	var toks, bks []int32
	withins, notBefores := make([]int64, len(r.Tokens)), make([]int64, len(r.Tokens))
	for k, t := range r.Tokens {
		withins[k], notBefores[k] = int64(t.Within), int64(t.NotBefore)
		for _, b := range t.Buckets {
			toks, bks = append(toks, int32(k+1)), append(bks, int32(b+1))
		}
	}
	var fresh []int
	seen := time.Now()
	l.flow.mu.Lock()
	for i, b := range r.Buckets {
		if at, ok := l.flow.made[b.Name]; !ok || seen.Sub(at) > bucketVerify {
			fresh = append(fresh, i)
		}
	}
	l.flow.mu.Unlock()
	var g ledger.Grant
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		b := &pgx.Batch{}
		if len(fresh) > 0 {
			pick := func(i int) int { return fresh[i] }
			b.Queue(l.flow.q.makeBuckets, subset(names, pick, len(fresh)), subset(rates, pick, len(fresh)),
				subset(bursts, pick, len(fresh)), subset(emissions, pick, len(fresh)))
		}
		b.Queue(l.flow.q.reserve, l.clock(), names, rates, bursts, emissions, toks, bks, withins, int32(len(r.Tokens)), notBefores)
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		if len(fresh) > 0 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		tats, held, heldBurst, planned := make([]int64, n), make([]float64, n), make([]int, n), make([]int64, n)
		written := make([]bool, n)
		var now int64
		got := 0
		for rows.Next() {
			var i int64
			var burst int32
			var tat, next int64
			var rate float64
			var ok bool
			if err := rows.Scan(&i, &tat, &rate, &burst, &next, &ok, &now); err != nil {
				return err
			}
			if i < 1 || i > int64(n) {
				return fmt.Errorf("a row for bucket %d of %d", i, n)
			}
			tats[i-1], held[i-1], heldBurst[i-1], planned[i-1], written[i-1] = tat, rate, int(burst), next, ok
			got++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%d rows for %d buckets", got, n)
		}
		g = r.Plan(tats, held, heldBurst, now)
		if !slices.Equal(tats, planned) {
			return fmt.Errorf("the server planned TATs %v, this host %v", planned, tats)
		}
		for k, t := range r.Tokens {
			for _, b := range t.Buckets {
				if !written[b] {
					g.Taken[k] = false
				}
			}
		}
		rows.Close()
		return br.Close()
	})
	if err == nil {
		l.flow.mu.Lock()
		for _, i := range fresh {
			l.flow.made[r.Buckets[i].Name] = seen
		}
		l.flow.prune(seen)
		l.flow.mu.Unlock()
	}
	if err != nil {
		return ledger.Grant{}, fmt.Errorf("reserve: %w", err)
	}
	return g, nil
}

// TakeSlots takes free slots for each request (see ledger.SlotRequest), in
// one round trip, with the server's clock: one statement takes up to n
// free rows of each pool below its limit, skipping rows another
// transaction holds. A pool's rows 0..limit-1 are made on first use, in
// the same round trip (and again once a minute, touching them so that
// Sweep leaves them).
func (l *Ledger) TakeSlots(ctx context.Context, rs []ledger.SlotRequest) ([][]ledger.Slot, error) {
	if err := ledger.ValidateSlotRequests(rs); err != nil {
		return nil, err
	}
	var pools, owners [][]byte
	var limits, ns []int32
	var leases []int64
	var ensurePools [][]byte
	var ensureLimits []int32
	now := time.Now()
	l.flow.mu.Lock()
	for i := range rs {
		r := &rs[i]
		pools, owners = append(pools, []byte(r.Pool)), append(owners, []byte(r.Owner))
		limits, ns, leases = append(limits, int32(r.Limit)), append(ns, int32(r.N)), append(leases, micros(r.Lease))
		if v, ok := l.flow.verified[r.Pool]; !ok || v.limit < r.Limit || now.Sub(v.at) > slotVerify {
			ensurePools, ensureLimits = append(ensurePools, []byte(r.Pool)), append(ensureLimits, int32(r.Limit))
		}
	}
	l.flow.mu.Unlock()
	out := make([][]ledger.Slot, len(rs))
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		for i := range out {
			out[i] = []ledger.Slot{}
		}
		b := &pgx.Batch{}
		if len(ensurePools) > 0 {
			b.Queue(l.flow.q.ensureSlots, l.clock(), ensurePools, ensureLimits)
		}
		b.Queue(l.flow.q.takeSlots, l.clock(), pools, limits, ns, owners, leases)
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		if len(ensurePools) > 0 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var ord int64
			var idx int32
			if err := rows.Scan(&ord, &idx); err != nil {
				rows.Close()
				return err
			}
			r := &rs[ord-1]
			out[ord-1] = append(out[ord-1], ledger.Slot{Pool: r.Pool, Index: int(idx), Owner: r.Owner})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("take slots: %w", err)
	}
	if len(ensurePools) > 0 {
		l.flow.mu.Lock()
		for i, p := range ensurePools {
			if v := l.flow.verified[string(p)]; v.limit <= int(ensureLimits[i]) || now.Sub(v.at) > slotVerify {
				l.flow.verified[string(p)] = slotRows{limit: int(ensureLimits[i]), at: now}
			}
		}
		l.flow.prune(now)
		l.flow.mu.Unlock()
	}
	for i := range out {
		slices.SortFunc(out[i], func(a, b ledger.Slot) int { return a.Index - b.Index })
	}
	return out, nil
}

// ExtendSlots renews the leases of slots to now+lease (the server's clock),
// in one statement, one error per slot: ErrNotOwner for a slot its owner no
// longer holds.
func (l *Ledger) ExtendSlots(ctx context.Context, ss []ledger.Slot, lease time.Duration) []error {
	if err := ledger.ValidateSlotLease(lease); err != nil {
		errs := make([]error, len(ss))
		for i := range errs {
			errs[i] = fmt.Errorf("extend slots: %w", err)
		}
		return errs
	}
	return l.eachSlot(ctx, "extend slot", l.flow.q.extendSlots, ss, micros(lease))
}

// ReleaseSlots gives slots back, in one statement, one error per slot:
// ErrNotOwner for a slot its owner no longer holds.
func (l *Ledger) ReleaseSlots(ctx context.Context, ss []ledger.Slot) []error {
	return l.eachSlot(ctx, "release slot", l.flow.q.releaseSlots, ss)
}

func (l *Ledger) eachSlot(ctx context.Context, op, stmt string, ss []ledger.Slot, extra ...any) []error {
	errs := make([]error, len(ss))
	var pools, owners [][]byte
	var idxs []int32
	for i, s := range ss {
		if err := ledger.ValidateSlot(s); err != nil {
			errs[i] = fmt.Errorf("%s: %w", op, err)
			continue
		}
		pools, owners, idxs = append(pools, []byte(s.Pool)), append(owners, []byte(s.Owner)), append(idxs, int32(s.Index))
	}
	if len(pools) == 0 {
		return errs
	}
	type slotKey struct {
		pool, owner string
		idx         int32
	}
	done := map[slotKey]bool{}
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		if !again {
			clear(done)
		}
		rows, err := l.pool.Query(ctx, stmt, append([]any{l.clock(), pools, idxs, owners}, extra...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var pool, owner []byte
			var idx int32
			if err := rows.Scan(&pool, &idx, &owner); err != nil {
				return err
			}
			done[slotKey{string(pool), string(owner), idx}] = true
		}
		return rows.Err()
	})
	for i, s := range ss {
		switch {
		case errs[i] != nil:
		case err != nil:
			errs[i] = fmt.Errorf("%s %s#%d: %w", op, s.Pool, s.Index, err)
		case !done[slotKey{s.Pool, s.Owner, int32(s.Index)}]:
			errs[i] = fmt.Errorf("%s %s#%d: not held by %q: %w", op, s.Pool, s.Index, s.Owner, ledger.ErrNotOwner)
		}
	}
	return errs
}

// sweepFlow removes the flow state that has no more use: tombstones of flow
// documents older than ledger.FlowKeep, registrations lapsed more than
// ledger.ProcessKeep ago, idle rate buckets, and slot rows free and
// untouched for ledger.SlotIdle.
func (l *Ledger) sweepFlow(ctx context.Context) error {
	keeps := []time.Duration{ledger.FlowKeep, ledger.ProcessKeep, ledger.BucketIdle, ledger.SlotIdle}
	for i, stmt := range l.flow.q.sweep {
		err := l.do(ctx, func(ctx context.Context, _ bool) error {
			_, err := l.pool.Exec(ctx, stmt, l.clock(), micros(keeps[i]))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// tallyMinutes counts the transitions of a batch that took effect (errs
// nil) as completions or failures of this minute, and writes the counts
// gathered when they are due.
func (l *Ledger) tallyMinutes(ctx context.Context, errs []error, failed bool) {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	if failed {
		l.minutes.Add(l.localNow(), 0, n)
	} else {
		l.minutes.Add(l.localNow(), n, 0)
	}
	l.flushMinutesIfDue(ctx)
}

// flushMinutesIfDue writes the counts gathered when they are due.
func (l *Ledger) flushMinutesIfDue(ctx context.Context) {
	if l.minutes.Due(ledger.MinuteFlush) {
		l.flushMinutes(ctx)
	}
}

// localNow is the test clock, or this host's: the minute of a count.
func (l *Ledger) localNow() time.Time {
	if l.cfg.now != nil {
		return l.cfg.now()
	}
	return time.Now()
}

// flushMinutes adds the counts gathered to the _minutes table and removes
// the minutes older than ledger.MinuteKeep, in one statement. Counts that
// cannot be written are kept for the next time.
func (l *Ledger) flushMinutes(ctx context.Context) {
	c := l.minutes.Take()
	if len(c) == 0 {
		return
	}
	var ms, done, failed []int64
	for m, n := range c {
		ms, done, failed = append(ms, m), append(done, int64(n[0])), append(failed, int64(n[1]))
	}
	cut := l.localNow().Add(-ledger.MinuteKeep).Unix() / 60
	err := l.do(ctx, func(ctx context.Context, again bool) error {
		if again {
			return nil // it may have been added: not twice
		}
		_, err := l.pool.Exec(ctx, l.flow.q.minutesPut, ms, done, failed, cut)
		return err
	})
	if err != nil {
		l.minutes.Return(c)
	}
}
