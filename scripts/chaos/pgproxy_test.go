package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// TestTCPProxy_LoseCommits runs transactions through the proxy against the
// test server: they pass untouched until the proxy is told to lose
// commits; then the next commit's request never reaches the server (the
// transaction is rolled back), or its answer is dropped after the server
// committed; either way the client's commit fails, its connection is cut
// and the loss is recorded with the client's address.
func TestTCPProxy_LoseCommits(t *testing.T) {
	t.Parallel()
	// A commit by a simple query (pgx's Tx.Commit), and by a batch that
	// sends a statement and a prepared COMMIT behind it (postgres.OpTx).
	for _, batch := range []bool{false, true} {
		name := "Query"
		if batch {
			name = "Batch"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testLoseCommits(t, batch)
		})
	}
}

func testLoseCommits(t *testing.T, batch bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url, _ := pgtest.Schema(t)
	direct := pgtest.Connect(t, url)
	if _, err := direct.Exec(ctx, `CREATE TABLE rows (n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	p, err := newTCPProxy(pgtest.Addr(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	through := pgtest.ReplaceAddr(t, url, p.addr())

	// insert inserts n in a transaction of a new connection through the
	// proxy, rolled back with rollback, and returns the connection's local
	// address and the commit's (or the rollback's) error.
	insert := func(n int, rollback bool) (string, error) {
		t.Helper()
		conn, err := pgx.Connect(ctx, through)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO rows (n) VALUES ($1)`, n); err != nil {
			t.Fatal(err)
		}
		addr := conn.PgConn().Conn().LocalAddr().String()
		if rollback {
			return addr, tx.Rollback(ctx)
		}
		if !batch {
			return addr, tx.Commit(ctx)
		}
		if _, err := conn.Prepare(ctx, "COMMIT", "COMMIT"); err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue(`SELECT $1::int`, n)
		b.Queue("COMMIT")
		return addr, conn.SendBatch(ctx, b).Close()
	}
	has := func(n int) bool {
		t.Helper()
		var c int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM rows WHERE n = $1`, n).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c == 1
	}

	if _, err := insert(1, false); err != nil || !has(1) {
		t.Fatalf("an ordinary commit through the proxy: %v, row there: %v", err, has(1))
	}

	p.loseCommits(1, false)
	if _, err := insert(2, true); err != nil || has(2) {
		t.Fatalf("a rollback while a commit is to lose: %v, row there: %v", err, has(2))
	}
	if p.commitsToLose() != 1 {
		t.Fatalf("a rollback took the commit to lose: %d left", p.commitsToLose())
	}
	client, err := insert(3, false)
	if err == nil {
		t.Fatal("a commit whose request was lost succeeded")
	}
	if has(3) {
		t.Fatal("a commit that never reached the server took effect")
	}

	p.loseCommits(1, true)
	client2, err := insert(4, false)
	if err == nil {
		t.Fatal("a commit whose answer was lost succeeded")
	}
	if !has(4) {
		t.Fatal("a commit whose answer was lost did not take effect")
	}

	if _, err := insert(5, false); err != nil || !has(5) {
		t.Fatalf("a commit after the losses: %v, row there: %v", err, has(5))
	}
	lost := p.lostCommits()
	if len(lost) != 2 || lost[0].Answered || lost[0].Client != client || !lost[1].Answered || lost[1].Client != client2 {
		t.Fatalf("lost commits %+v, want the request of %s, then the answer of %s", lost, client, client2)
	}
	if p.commitsToLose() != 0 {
		t.Fatalf("%d commits still to lose", p.commitsToLose())
	}
}

// TestTCPProxy_LostCommitOwner loses the commits of operations'
// transactions, of both kinds (postgres.OpTx and Ledger.CommitOp), through
// the proxy: each loss names the claim whose completion went with it, read
// from the completion's Bind.
func TestTCPProxy_LostCommitOwner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url, _ := pgtest.Schema(t)
	p, err := newTCPProxy(pgtest.Addr(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	opts := postgres.Options{URL: pgtest.ReplaceAddr(t, url, p.addr()), Timeout: 5 * time.Second}
	if err := postgres.Init(ctx, opts); err != nil {
		t.Fatal(err)
	}
	l, err := postgres.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	claim := func(key, owner string) ledger.Completion {
		t.Helper()
		c, err := l.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Minute})
		if err != nil || c.Outcome != ledger.Claimed {
			t.Fatalf("claim %s: %v %v", key, c.Outcome, err)
		}
		return ledger.Completion{Key: key, Owner: owner}
	}
	opTx := func(c ledger.Completion) error {
		op, err := l.BeginOp(ctx)
		if err != nil {
			return err
		}
		defer op.Rollback(ctx)
		if _, err := op.Tx().Exec(ctx, `SELECT 1`); err != nil {
			return err
		}
		return op.CommitComplete(ctx, c)
	}
	commitOp := func(c ledger.Completion) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		return l.CommitOp(ctx, b, c)
	}
	var want []string
	for i, answered := range []bool{false, true, false, true} {
		do := opTx
		if i >= 2 {
			do = commitOp
		}
		// One ordinary commit first, so that the statements are prepared
		// on a connection of the pool.
		if err := do(claim(fmt.Sprintf("warm%d", i), "w")); err != nil {
			t.Fatal(err)
		}
		owner := fmt.Sprintf("owner-%d", i)
		c := claim(fmt.Sprintf("k%d", i), owner)
		p.loseCommits(1, answered)
		err := do(c)
		if err == nil {
			t.Fatalf("%d: a commit that the proxy lost succeeded", i)
		}
		t.Logf("%d (answer lost: %v): %v", i, answered, err)
		want = append(want, owner)
	}
	lost := p.lostCommits()
	if len(lost) != len(want) {
		t.Fatalf("%d commits lost, want %d: %+v", len(lost), len(want), lost)
	}
	for i, lc := range lost {
		if lc.Owner != want[i] {
			t.Errorf("lost commit %d: owner %q, want %q", i, lc.Owner, want[i])
		}
	}
}

// TestTCPProxy_Stall runs queries through the proxy against the test server:
// while the proxy stalls, a query on an open connection and a new
// connection both wait (a query with a shorter deadline fails), and both go
// on once the stall ends, on the same connections.
func TestTCPProxy_Stall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url, _ := pgtest.Schema(t)
	p, err := newTCPProxy(pgtest.Addr(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	through := pgtest.ReplaceAddr(t, url, p.addr())
	conn, err := pgx.Connect(ctx, through)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	one := func(ctx context.Context, c *pgx.Conn) error {
		var n int
		return c.QueryRow(ctx, `SELECT 1`).Scan(&n)
	}
	if err := one(ctx, conn); err != nil {
		t.Fatalf("a query through the proxy: %v", err)
	}

	const stall = time.Second
	p.setStall(true)
	start := time.Now()
	type result struct {
		err  error
		took time.Duration
	}
	old, fresh := make(chan result, 1), make(chan result, 1)
	go func() {
		err := one(ctx, conn)
		old <- result{err, time.Since(start)}
	}()
	go func() {
		c, err := pgx.Connect(ctx, through)
		if err == nil {
			defer c.Close(context.Background())
			err = one(ctx, c)
		}
		fresh <- result{err, time.Since(start)}
	}()
	short, cancelShort := context.WithTimeout(ctx, stall/4)
	defer cancelShort()
	other, err := pgx.Connect(short, through)
	if err == nil {
		other.Close(context.Background())
		t.Fatal("a connection with a deadline shorter than the stall was made")
	}
	time.Sleep(stall - time.Since(start))
	p.setStall(false)
	for name, ch := range map[string]chan result{"a query on an open connection": old, "a new connection": fresh} {
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s across the stall: %v", name, r.err)
		}
		if r.took < stall {
			t.Fatalf("%s answered after %v, during the %v stall", name, r.took, stall)
		}
	}
	if err := one(ctx, conn); err != nil {
		t.Fatalf("a query after the stall: %v", err)
	}
}
