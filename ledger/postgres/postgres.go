package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsonce/sqsonce/ledger"
)

// SchemaVersion is the layout of the table this code writes, recorded by Init
// in the version table. Open refuses a table whose recorded version is higher
// with ledger.ErrSchema.
//
// What Init adds beside the table without changing its layout, which an
// older sqsonce neither uses nor minds, does not change the version, so that
// an older sqsonce still opens a ledger that a newer Init upgraded: the
// function that raises sqsonce's own SQLSTATEs (Table+"_refuse"), added
// after version 1. Open checks that it is there and, when it is not,
// fails with ledger.ErrNoSchema: `sqsonce ledger init` adds it.
const SchemaVersion = 1

// Defaults for Options.
const (
	DefaultTable      = "sqsonce_operations"
	DefaultTimeout    = 10 * time.Second
	DefaultSweepChunk = 2000
)

// maxTableLen leaves room in PostgreSQL's 63-byte names for the suffixes of
// the version table, the indexes and the function.
const maxTableLen = 63 - len("_version")

// tableName is a table name: lower-case letters, digits and underscores,
// optionally after a schema name and a dot.
var tableName = regexp.MustCompile(`^(?:([a-z_][a-z0-9_]*)\.)?([a-z_][a-z0-9_]*)$`)

// Options configure Init and Open. The zero value of each field picks its
// default.
type Options struct {
	// URL is the connection string, a URL (postgres://user@host:5432/db)
	// or key=value pairs, as pgx reads them; pool settings such as
	// pool_max_conns may be added to it. Empty means the standard PG*
	// environment variables (PGHOST, PGUSER, PGPASSWORD…). The password is
	// never logged nor put in an error.
	URL string
	// Table is the table of records, optionally qualified by its schema
	// ("ops.sqsonce_operations"); DefaultTable when empty. The schema
	// version is kept in Table+"_version". Lower-case letters, digits and
	// underscores only.
	Table string
	// Retention is how long a record is kept after its last write: zero
	// picks ledger.DefaultRetention; at most ledger.MaxRetention. Every
	// host sharing the table should use the same.
	Retention time.Duration
	// SweepChunk bounds how many records one statement of Sweep deletes,
	// and so how long it holds their locks; DefaultSweepChunk when zero.
	SweepChunk int
	// Timeout bounds connecting (in Open and Init) and each attempt of a
	// call; DefaultTimeout when zero. A call makes a second attempt only
	// when the first lost its connection (see the package documentation),
	// not when it ran out of time: an attempt that runs out of it fails the
	// call with an error wrapping ledger.ErrUnavailable.
	Timeout time.Duration
	// Now, when set, replaces the database server's clock: for tests only.
	// In production every host must use the server's clock, so that a
	// host whose clock runs ahead cannot take over a live lease.
	Now func() time.Time
}

// config is Options checked and with defaults filled in.
type config struct {
	table      pgx.Identifier
	version    pgx.Identifier // the schema version table
	refuse     pgx.Identifier // the function that raises sqsonce's own SQLSTATEs (see refuseFunction)
	indexes    [3]string      // names of the expiry index and the two indexes of the open records
	retention  time.Duration
	chunk      int
	timeout    time.Duration
	now        func() time.Time
	pool       *pgxpool.Config
	where      string // host, port and database, for messages
	tableLabel string // the table as given, for messages
	// lostAt is when a call last lost its connection (Unix nanoseconds):
	// for a while after, every connection is pinged as it leaves the
	// pool, so that a second attempt does not take another connection
	// that the same failure cut.
	lostAt atomic.Int64
}

// pingAfterLoss is how long after a lost connection the pool pings the
// connections it hands out; pgxpool's own rule pings only connections
// idle for more than a second.
const pingAfterLoss = 5 * time.Second

func (o Options) config() (*config, error) {
	c := &config{
		retention: o.Retention,
		chunk:     o.SweepChunk,
		timeout:   o.Timeout,
		now:       o.Now,
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := CheckTable(o.Table); err != nil {
		return nil, err
	}
	m := tableName.FindStringSubmatch(o.Table)
	schema, name := m[1], m[2]
	c.tableLabel = o.Table
	c.table = qualified(schema, name)
	c.version = qualified(schema, name+"_version")
	c.refuse = qualified(schema, name+"_refuse")
	c.indexes = [3]string{name + "_expires", name + "_open", name + "_openkey"}
	switch {
	case c.retention == 0:
		c.retention = ledger.DefaultRetention
	case c.retention < 0 || c.retention > ledger.MaxRetention:
		return nil, fmt.Errorf("retention %v: want a positive duration of at most %v: %w", c.retention, ledger.MaxRetention, ledger.ErrInvalidArgument)
	}
	if c.chunk <= 0 {
		c.chunk = DefaultSweepChunk
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	pc, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		// pgx masks the password of a connection string it cannot
		// parse, as far as it can; the message says where without it.
		return nil, fmt.Errorf("connection string: %s: %w", redact(err.Error(), o.URL), ledger.ErrInvalidArgument)
	}
	if pc.ConnConfig.ConnectTimeout <= 0 || pc.ConnConfig.ConnectTimeout > c.timeout {
		pc.ConnConfig.ConnectTimeout = c.timeout
	}
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > time.Second || time.Since(time.Unix(0, c.lostAt.Load())) < pingAfterLoss
	}
	c.pool = pc
	c.where = fmt.Sprintf("%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
	if strings.HasPrefix(pc.ConnConfig.Host, "/") {
		c.where = fmt.Sprintf("%s/.s.PGSQL.%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
	}
	return c, nil
}

// CheckTable reports whether name can be the ledger's table (Options.Table):
// lower-case letters, digits and underscores, not starting with a digit, at
// most 55 bytes, optionally after a schema name and a dot. The error wraps
// ledger.ErrInvalidArgument.
func CheckTable(name string) error {
	if m := tableName.FindStringSubmatch(name); m == nil || len(m[2]) > maxTableLen {
		return fmt.Errorf("table %q: want a name of lower-case letters, digits and underscores, at most %d bytes, optionally after a schema and a dot: %w",
			name, maxTableLen, ledger.ErrInvalidArgument)
	}
	return nil
}

func qualified(schema, name string) pgx.Identifier {
	if schema == "" {
		return pgx.Identifier{name}
	}
	return pgx.Identifier{schema, name}
}

// redact removes every password of url from msg: pgx's own masking is
// best effort when a connection string cannot be parsed.
func redact(msg, url string) string {
	for _, pw := range passwords(url) {
		if pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// passwords finds what could be a password in a connection string: the part
// of a URL's user information after the colon, and the value of a
// password= pair.
func passwords(url string) []string {
	var pws []string
	if i := strings.Index(url, "://"); i >= 0 {
		rest := url[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				pws = append(pws, rest[c+1:at])
			}
		}
	}
	for _, f := range strings.FieldsFunc(url, func(r rune) bool { return r == ' ' || r == '&' || r == '?' }) {
		if v, ok := strings.CutPrefix(f, "password="); ok {
			pws = append(pws, strings.Trim(v, "'"))
		}
	}
	return pws
}

// Init creates the ledger's table, its indexes and the schema version table
// when they are missing, and records SchemaVersion. It is idempotent, and
// safe when several hosts run it at once: they take turns on an advisory
// lock. It fails with an error wrapping ledger.ErrSchema when the table was
// set up by a newer sqsonce, and ledger.ErrUnavailable when the server
// cannot be reached within Options.Timeout.
func Init(ctx context.Context, opts Options) error {
	c, err := opts.config()
	if err != nil {
		return fmt.Errorf("init ledger: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, c.pool.ConnConfig)
	if err != nil {
		return fmt.Errorf("init ledger %s: %w", c.where, classify(ctx, err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var got int
	err = pgx.BeginFunc(cctx, conn, func(tx pgx.Tx) error {
		// CREATE … IF NOT EXISTS is not safe against itself: two at once
		// can both find the table missing and one then fails on a
		// duplicate type. The lock makes Inits take turns.
		if _, err := tx.Exec(cctx, `SELECT pg_advisory_xact_lock(hashtext('sqsonce ledger init'))`); err != nil {
			return err
		}
		for _, stmt := range ddl(c) {
			if _, err := tx.Exec(cctx, stmt); err != nil {
				return err
			}
		}
		if err := initFlow(cctx, tx, c); err != nil {
			return err
		}
		return tx.QueryRow(cctx, fmt.Sprintf(`SELECT version FROM %s`, c.version.Sanitize())).Scan(&got)
	})
	if err != nil {
		return fmt.Errorf("init ledger %s table %s: %w", c.where, c.tableLabel, classify(ctx, err))
	}
	if got > SchemaVersion {
		return fmt.Errorf("init ledger %s table %s: set up with schema %d, this sqsonce knows up to %d: upgrade sqsonce: %w",
			c.where, c.tableLabel, got, SchemaVersion, ledger.ErrSchema)
	}
	return nil
}

// ddl is what Init runs, in order.
func ddl(c *config) []string {
	t := c.table.Sanitize()
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	key          bytea PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND %d),
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
)`, t, ledger.MaxKeyLen),
		// Sweep walks this index, oldest expiry first.
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (expires)`, pgx.Identifier{c.indexes[0]}.Sanitize(), t),
		// The records that are not complete, few next to the complete
		// ones: Stats counts them and finds the oldest claim here. state
		// is carried, not searchable, so that no write statement looking
		// for in-progress records by key is drawn to this index.
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (claimed) INCLUDE (state, permanent) WHERE state <> 2`, pgx.Identifier{c.indexes[1]}.Sanitize(), t),
		// The same records in key order: List walks them for a filter
		// that wants records in progress, failed or with a reason, which
		// would otherwise look at every complete record in between. A
		// write statement that looks for a key in progress may be drawn
		// to it: that is a lookup by key either way. It costs an index
		// entry per claim and per failure, none per completion.
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (key) WHERE state <> 2`, pgx.Identifier{c.indexes[2]}.Sanitize(), t),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	one     boolean PRIMARY KEY DEFAULT true CHECK (one),
	version integer NOT NULL
)`, c.version.Sanitize()),
		fmt.Sprintf(`INSERT INTO %s (version) VALUES (%d) ON CONFLICT (one) DO NOTHING`, c.version.Sanitize(), SchemaVersion),
		// Added after the table's first layout, without changing it:
		// see SchemaVersion.
		refuseFunction(c.refuse.Sanitize()),
	}
}

// Ledger is a ledger in a PostgreSQL table, shared by every process that
// opens the same table. It is safe for concurrent use; it holds a pool of
// connections (pgxpool, up to pool_max_conns of the URL).
//
// Each write method returns after its transaction committed, or with an
// error; what is committed is as durable as the server makes it
// (synchronous_commit).
type Ledger struct {
	pool   *pgxpool.Pool
	cfg    *config
	closed atomic.Bool
	q      queries
	flow   flowState // see flow.go
	// minutes gathers the completions and failures per minute that this
	// process recorded, written to the _minutes table every
	// ledger.MinuteFlush (see tallyMinutes).
	minutes ledger.MinuteTally
}

// Open connects to the server and checks the ledger's table. It fails with
// an error wrapping ledger.ErrNoSchema (naming `sqsonce ledger init`) when
// the table or its version is missing, ledger.ErrSchema when the table was
// set up by a newer sqsonce, ledger.ErrInvalidArgument for bad options, and
// ledger.ErrUnavailable when the server cannot be reached within
// Options.Timeout.
func Open(ctx context.Context, opts Options) (*Ledger, error) {
	c, err := opts.config()
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", c.where, classify(ctx, err))
	}
	l := &Ledger{pool: pool, cfg: c, q: newQueries(c), flow: newFlowState(c)}
	if err := l.checkSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open ledger %s: %w", c.where, err)
	}
	if err := l.checkFlowSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open ledger %s: %w", c.where, err)
	}
	return l, nil
}

// checkSchema connects (the pool connects lazily) and reads the version.
func (l *Ledger) checkSchema(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	var table, version, refuse *string
	err := l.pool.QueryRow(cctx, `SELECT to_regclass($1)::text, to_regclass($2)::text, to_regprocedure($3)::text`,
		l.cfg.table.Sanitize(), l.cfg.version.Sanitize(), l.cfg.refuse.Sanitize()+refuseArgs).Scan(&table, &version, &refuse)
	if err != nil {
		return fmt.Errorf("check schema: %w", classify(ctx, err))
	}
	if table == nil || version == nil {
		missing := l.cfg.tableLabel
		if table != nil {
			missing += "_version"
		}
		return fmt.Errorf("table %s does not exist: run `sqsonce ledger init` to create it: %w", missing, ledger.ErrNoSchema)
	}
	if refuse == nil {
		return fmt.Errorf("function %s_refuse%s does not exist (the ledger was set up by an older sqsonce): run `sqsonce ledger init` to add it: %w",
			l.cfg.tableLabel, refuseArgs, ledger.ErrNoSchema)
	}
	var got int
	err = l.pool.QueryRow(cctx, fmt.Sprintf(`SELECT version FROM %s`, l.cfg.version.Sanitize())).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("table %s_version records no schema version: run `sqsonce ledger init`: %w", l.cfg.tableLabel, ledger.ErrNoSchema)
	}
	if err != nil {
		return fmt.Errorf("check schema: %w", classify(ctx, err))
	}
	if got > SchemaVersion {
		return fmt.Errorf("table %s set up with schema %d, this sqsonce knows up to %d: upgrade sqsonce: %w",
			l.cfg.tableLabel, got, SchemaVersion, ledger.ErrSchema)
	}
	return nil
}

// Close closes the connections, waiting for those in use to be given back.
// Calls after Close fail with ledger.ErrClosed. Close is safe to call more
// than once.
func (l *Ledger) Close() error {
	if l.closed.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
	l.flushMinutes(ctx) // the counts this process gathered
	cancel()
	if l.closed.CompareAndSwap(false, true) {
		l.pool.Close()
	}
	return nil
}

// attempt is one try of a call's statements. again is true when an earlier
// attempt of the same call may have committed: its answer was lost with its
// connection.
type attempt func(ctx context.Context, again bool) error

// do runs try within Options.Timeout, and once more when the first try
// failed in a way that a second may fix: its connection was lost (again is
// then true: the first may have committed) or the server rolled it back
// because of a deadlock or serialization failure. Errors come back
// classified (see classify), for the caller to put in context.
func (l *Ledger) do(ctx context.Context, try attempt) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	again := false
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
		err := try(actx, again)
		cancel()
		if err == nil {
			return nil
		}
		if l.closed.Load() {
			return ledger.ErrClosed
		}
		retry, unknown := retryable(err)
		if unknown {
			l.cfg.lostAt.Store(time.Now().UnixNano())
		}
		if n == 2 || !retry || ctx.Err() != nil {
			return classify(ctx, err)
		}
		again = again || unknown
	}
}

// retryable reports whether err is worth a second attempt, and whether the
// first attempt may have taken effect (its outcome is unknown).
func retryable(err error) (retry, unknown bool) {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "40001", pgErr.Code == "40P01":
			// Serialization failure, deadlock: rolled back.
			return true, false
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P"):
			// Connection exception; the server shut the session down.
			return true, true
		}
		return false, false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), pgconn.Timeout(err):
		// Out of time: another try would exceed the call's bound.
		return false, true
	case pgconn.SafeToRetry(err):
		return true, false
	}
	// Anything else from pgx is the connection failing (reset, closed,
	// unexpected end of stream) after the request may have been sent.
	return true, true
}

// classify wraps err with the ledger error that says what it means: the
// caller's own context ending is returned as it is; a lost or refused
// connection, a timeout or a server that is shutting down or out of
// connections wraps ledger.ErrUnavailable; a transaction that the server
// rolled back because of a concurrent one (serialization failure,
// deadlock) ledger.ErrContention; a missing table ledger.ErrNoSchema. ctx
// is the caller's context.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "42P01":
			return fmt.Errorf("%v: run `sqsonce ledger init`: %w", err, ledger.ErrNoSchema)
		case pgErr.Code == "40001", pgErr.Code == "40P01":
			return fmt.Errorf("%w: %w", ledger.ErrContention, err)
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "53"),
			strings.HasPrefix(pgErr.Code, "57"), pgErr.Code == "55P03":
			return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
		}
		return err
	}
	// Not an answer of the server: the connection (refused, lost, cut
	// off by the timeout).
	return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
}

// Ping reports whether the server answers and would let this host write
// the ledger's table, without writing: it runs an update of no row. It
// fails with an error wrapping ledger.ErrUnavailable when the server cannot
// be reached, ledger.ErrNoSchema when the table is gone, and the server's
// error when the privilege is missing.
func (l *Ledger) Ping(ctx context.Context) error {
	err := l.do(ctx, func(ctx context.Context, _ bool) error {
		_, err := l.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET updated = updated WHERE false`, l.cfg.table.Sanitize()))
		return err
	})
	if err != nil {
		return fmt.Errorf("ping ledger %s: %w", l.cfg.where, err)
	}
	return nil
}
