package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// TxConfig sizes the transactional campaign: several chaos workers at
// once on one standard queue and one ledger table in PostgreSQL, each
// with a transactional handler (package pgtx) whose effect is a row that
// it inserts, in the transaction of the operation's completion, into an
// effects table of the same database.
type TxConfig struct {
	Workers    int           // chaos workers at once
	Ops        int           // operations; 0: no transactional campaign
	Deliveries int           // deliveries planned
	Duration   time.Duration // the planned length of its worker runs, while its workload is sent
	// Kills are SIGKILLs at random and in the windows around the worker's
	// own completion (after the transaction committed); InTx more, inside
	// the transaction, between the insert and the commit.
	Kills, InTx int
	Terms       int           // SIGTERM drains over all workers
	Stops       int           // hard stops of the database (pg_ctl stop -m immediate)
	StopFor     time.Duration // how long it stays stopped: longer than a lease
	Refusals    int           // times the proxy refuses new connections and cuts the open ones
	RefuseFor   time.Duration // how long it refuses them
	Cuts        int           // times the proxy cuts the open connections
	// LostCommits are commits that the proxy loses, cutting their
	// connection: half of them never reach the server, the other half
	// commit and their answer is dropped.
	LostCommits int
	Concurrency int // handler concurrency of each worker
	// HoldShare of the attempts hold their transaction open for Hold after
	// the insert, and tell the campaign, which may kill them there.
	HoldShare float64
	Hold      time.Duration
	// PanicShare of the attempts panic after the insert (and the hold),
	// as a handler with a bug would.
	PanicShare float64
	// WritesShare of the attempts queue their insert on a batch that goes
	// with the completion and the commit in one round trip
	// (pgtx.NewWrites); they neither hold nor panic.
	WritesShare float64
}

// txEffectsTable is the transactional campaign's effects table: one row
// per attempt that inserted one and committed. No constraint keeps a key
// from having two: what must keep it is the transaction.
const txEffectsTable = "chaos_effects"

// inTxKill is a worker run that the campaign killed inside a transaction,
// after its insert and before its commit.
type inTxKill struct {
	run        int
	key, owner string
	t          time.Time
}

// txCampaign makes the transactional campaign of c: its own work
// directory (tx/ in c's), database, proxy, queue and worker runs; the same
// binaries, log and SQS server.
func (c *campaign) txCampaign() (*campaign, error) {
	tc := c.cfg.Tx
	cfg := c.cfg
	cfg.Ops, cfg.Deliveries, cfg.Duration = tc.Ops, tc.Deliveries, tc.Duration
	cfg.Kills, cfg.Terms, cfg.Pauses, cfg.Concurrency = tc.Kills+tc.InTx, tc.Terms, 0, tc.Concurrency
	// The machinery of the shared-ledger campaign (its outages, its plan's
	// deal of runs to the workers, its findings) reads these.
	cfg.Shared = SharedConfig{Workers: tc.Workers, Ops: tc.Ops, Deliveries: tc.Deliveries, Duration: tc.Duration,
		Kills: tc.Kills + tc.InTx, Terms: tc.Terms, Stops: tc.Stops, StopFor: tc.StopFor, Refusals: tc.Refusals,
		RefuseFor: tc.RefuseFor, Cuts: tc.Cuts, Concurrency: tc.Concurrency}
	t := &campaign{
		cfg:       cfg,
		name:      "tx",
		log:       c.log,
		rng:       rand.New(rand.NewPCG(c.cfg.Seed, 0x7a)),
		inHand:    map[string]int{},
		started:   c.started,
		dir:       filepath.Join(c.dir, "tx"),
		admin:     c.admin,
		workerBin: c.workerBin,
		downBin:   c.downBin,
		cliBin:    c.cliBin,
		effects:   txEffectsTable,
		txArmed:   map[int]bool{},
	}
	t.runsDir = filepath.Join(t.dir, "runs")
	t.crashLog = filepath.Join(t.dir, "crash.log")
	if err := os.MkdirAll(t.runsDir, 0o755); err != nil {
		return nil, err
	}
	return t, nil
}

// runTx runs the transactional campaign: Workers chaos workers at once
// with transactional handlers, on one queue with a dead-letter queue and
// one PostgreSQL database behind the campaign's proxy; the standard
// campaign's kind of workload, every message tagged; each worker killed
// at random, in the windows around its own completion and inside the
// transaction between the insert and the commit, or drained, and
// restarted at once; a share of the handlers' attempts panic after their
// insert; meanwhile the database stopped hard and restarted, its
// connections refused and cut, and commits lost. Then the audit from the
// database itself (txAudit).
func (c *campaign) runTx(ctx context.Context) (*txReport, error) {
	tc := c.cfg.Tx
	c.logf("transactional campaign: %d workers with pgtx handlers on one queue and one PostgreSQL database, %d operations, about %d deliveries over %v, %d kills inside the transaction and %d others, %d drains, the database stopped %d times, refused %d times, cut %d times, %d commits lost, %.0f%% of the attempts panicking after their insert",
		tc.Workers, tc.Ops, tc.Deliveries, tc.Duration, tc.InTx, tc.Kills, tc.Terms, tc.Stops, tc.Refusals, tc.Cuts, tc.LostCommits, 100*tc.PanicShare)
	// Each handler holds a connection for its transaction; the worker's
	// claims, heartbeats and completions need more.
	if err := c.startDatabase(ctx, tc.Concurrency+8); err != nil {
		return nil, err
	}
	if err := c.createEffects(ctx); err != nil {
		return nil, err
	}
	if err := c.createQueues(ctx); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.control = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /intx", c.serveInTx)
	ctl := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ctl.Serve(ln) }()
	defer ctl.Close()

	wl := newWorkload(rand.New(rand.NewPCG(c.cfg.Seed, 7)), c.cfg.Ops, c.cfg.Deliveries)
	snd := newSender(c.cfg.Endpoint, c.queue, c.cfg.Seed+13, c.cfg.SendLost)
	snd.tagged = true
	c.logf("workload: %d operations, %d deliveries planned (%d keyless), %d units in the main phase; every message tagged (%s)", len(wl.ops), wl.planned(), len(wl.keyless), len(wl.main), event.AttrSend)

	start := time.Now()
	send := func(ctx context.Context) error { return c.send(ctx, snd, wl) }
	if err := c.driveWorkers(ctx, c.txPlan(), send, c.loseCommits); err != nil {
		return nil, err
	}
	c.logf("sending done: %d deliveries acknowledged to the sender, %d accepted by the server", snd.sent.Load(), snd.accepted.Load())
	quiet, err := c.quietThenStop(ctx)
	if err != nil {
		return nil, err
	}
	if c.appliedConn != nil {
		c.appliedConn.Close(context.Background())
	}
	elapsed := time.Since(start)
	c.logf("auditing")
	return c.txAudit(ctx, wl, snd, elapsed, quiet)
}

// createEffects creates the effects table, straight on the database.
func (c *campaign) createEffects(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pgURL(c.proxy.targetAddr()))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{c.effects}.Sanitize()+` (
		key text NOT NULL,
		body_sha256 text NOT NULL,
		body text NOT NULL,
		run int NOT NULL,
		owner text NOT NULL,
		attempt int NOT NULL,
		seq bigint NOT NULL,
		client text NOT NULL,
		inserted_at timestamptz NOT NULL DEFAULT clock_timestamp()
	)`)
	if err != nil {
		return fmt.Errorf("create the effects table: %w", err)
	}
	return nil
}

// txPlan draws each worker's runs: InTx kills inside the transaction,
// Kills more in window a (after the transaction committed, before the
// worker's own completion), window b (after that completion, before the
// delete) and at random, and the drains; every worker's runs last as long
// in all.
func (c *campaign) txPlan() [][]step {
	tc := c.cfg.Tx
	var ends []string
	for range tc.InTx {
		ends = append(ends, endInTx)
	}
	k := tc.Kills
	nA, nB := (k+2)/3, (k+1)/3
	for i := range k {
		switch {
		case i < nA:
			ends = append(ends, endWindowA)
		case i < nA+nB:
			ends = append(ends, endWindowB)
		default:
			ends = append(ends, endKill)
		}
	}
	for range tc.Terms {
		ends = append(ends, endTerm)
	}
	slots := c.deal(ends)
	// Every worker's runs span the first one's, which set the pace of the
	// sending: a run armed to be killed in a transaction finds work.
	var pace time.Duration
	for _, s := range slots[0] {
		pace += s.dur
	}
	for _, steps := range slots[1:] {
		var total time.Duration
		for _, s := range steps {
			total += s.dur
		}
		for i := range steps {
			steps[i].dur = time.Duration(float64(steps[i].dur) * float64(pace) / float64(max(total, 1)))
		}
	}
	return slots
}

// armInTx arms (on) or disarms run id's kill inside its next held
// transaction.
func (c *campaign) armInTx(id int, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.txArmed == nil {
		c.txArmed = map[int]bool{}
	}
	if on {
		c.txArmed[id] = true
	} else {
		delete(c.txArmed, id)
	}
}

// serveInTx is the control endpoint that a transactional handler calls
// from inside its transaction, after its insert, when it holds the
// transaction open: when its run is armed, the run is killed with SIGKILL
// before the answer, so the kill lands while the transaction is open.
func (c *campaign) serveInTx(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	run, _ := strconv.Atoi(q.Get("run"))
	key, owner := q.Get("key"), q.Get("owner")
	var p *proc
	c.mu.Lock()
	if c.txArmed[run] {
		delete(c.txArmed, run)
		for _, x := range c.procs {
			if x.id == run {
				p = x
			}
		}
	}
	c.mu.Unlock()
	if p == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if p.kill(endInTx, key) {
		c.mu.Lock()
		c.inTx = append(c.inTx, inTxKill{run: run, key: key, owner: owner, t: time.Now()})
		c.mu.Unlock()
		if a, err := event.OpenAppender(filepath.Join(c.dir, "kills.log"), true); err == nil {
			_ = a.Append(event.Crash{Run: run, Window: endInTx, Key: key})
			a.Close()
		}
	}
	p.wait(r.Context(), 10*time.Second)
	w.WriteHeader(http.StatusOK)
}

// loseCommits has the proxy lose LostCommits commits at planned points of
// the timeline, one at a time, alternately (in a seeded order) a request
// and an answer.
func (c *campaign) loseCommits(ctx context.Context) {
	n := c.cfg.Tx.LostCommits
	answered := make([]bool, n)
	for i := range answered {
		answered[i] = i%2 == 1
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 8))
	rng.Shuffle(n, func(i, j int) { answered[i], answered[j] = answered[j], answered[i] })
	for i, a := range answered {
		at := 0.05 + 0.9*(float64(i)+0.5)/float64(n)
		for c.tl.fraction() < at && ctx.Err() == nil {
			sleepCtx(ctx, 100*time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		c.proxy.loseCommits(1, a)
		if !waitFor(ctx, 30*time.Second, func() bool { return c.proxy.commitsToLose() == 0 }) {
			continue // no commit came: it stays to lose, the next one waits behind it
		}
		lost := c.proxy.lostCommits()
		l := lost[len(lost)-1]
		what := "its request never reached the server"
		if l.Answered {
			what = "the server committed, its answer dropped"
		}
		c.logf("database: a commit lost (connection of %s cut): %s", l.Client, what)
	}
}

// appliedRows reads from the effects table which operations took effect,
// and when, straight from the database. It is called by the sender alone.
// While the database is out of reach it returns what it read last.
func (c *campaign) appliedRows(ctx context.Context) map[string]time.Time {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	read := func() (map[string]time.Time, error) {
		if c.appliedConn == nil {
			conn, err := pgx.Connect(ctx, pgURL(c.proxy.targetAddr()))
			if err != nil {
				return nil, err
			}
			c.appliedConn = conn
		}
		rows, err := c.appliedConn.Query(ctx, `SELECT key, min(inserted_at) FROM `+pgx.Identifier{c.effects}.Sanitize()+` GROUP BY key`)
		if err != nil {
			return nil, err
		}
		out := map[string]time.Time{}
		var key string
		var t time.Time
		_, err = pgx.ForEachRow(rows, []any{&key, &t}, func() error {
			out[key] = t
			return nil
		})
		return out, err
	}
	out, err := read()
	if err != nil {
		if c.appliedConn != nil {
			c.appliedConn.Close(context.Background())
			c.appliedConn = nil
		}
		return c.lastApplied
	}
	c.lastApplied = out
	return out
}
