package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// sharedTable is a table of a shared backend that belongs to one test: the
// variables that point sqsonce processes at it, and the test's own way in.
type sharedTable struct {
	table string
	// addr is the server's host:port, for a proxy in front of it.
	addr string
	// vars are the SQSONCE_LEDGER_* variables for the table, with the
	// server reached at via (host:port; the server itself when empty).
	vars func(via string) []string
	// open opens the table from the test process.
	open func(t *testing.T) store
	// drop deletes the table, as an operator's mistake would.
	drop func(t *testing.T)
}

// sharedBackends are the backends a table of the test's own can be made on.
var sharedBackends = []struct {
	name string
	new  func(t *testing.T) *sharedTable
}{
	{BackendPostgres, newPostgresTable},
	{BackendDynamoDB, newDynamoDBTable},
}

// newPostgresTable is a table named ops in a schema of the test's own.
func newPostgresTable(t *testing.T) *sharedTable {
	t.Helper()
	raw, _ := pgtest.Schema(t)
	const table = "ops"
	return &sharedTable{
		table: table,
		addr:  pgtest.Addr(t, raw),
		vars: func(via string) []string {
			u := raw
			if via != "" {
				u = pgtest.ReplaceAddr(t, raw, via)
			}
			return []string{"SQSONCE_LEDGER_BACKEND=postgres", "SQSONCE_LEDGER_URL=" + u, "SQSONCE_LEDGER_TABLE=" + table}
		},
		open: func(t *testing.T) store {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := postgres.Open(ctx, postgres.Options{URL: raw, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		drop: func(t *testing.T) {
			t.Helper()
			conn := pgtest.Connect(t, raw)
			if _, err := conn.Exec(context.Background(), "DROP TABLE "+table+", "+table+"_version"); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// newDynamoDBTable is a table name of the test's own on the local server;
// the table, once made, is deleted when the test ends. (dynamotest.Table's
// names have hyphens, which ledger.table does not take.)
func newDynamoDBTable(t *testing.T) *sharedTable {
	t.Helper()
	client := dynamotest.NewClient(t, nil)
	endpoint := dynamotest.Endpoint(t)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	rand.Read(b[:])
	table := "t_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := client.DeleteTable(ctx, &ddb.DeleteTableInput{TableName: aws.String(table)})
		var notFound *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &notFound) {
			t.Errorf("delete table %s: %v", table, err)
		}
	})
	return &sharedTable{
		table: table,
		addr:  u.Host,
		vars: func(via string) []string {
			ep := endpoint
			if via != "" {
				ep = "http://" + via
			}
			return []string{"SQSONCE_LEDGER_BACKEND=dynamodb", "SQSONCE_LEDGER_TABLE=" + table,
				"SQSONCE_LEDGER_REGION=" + dynamotest.Region, "SQSONCE_LEDGER_ENDPOINT=" + ep}
		},
		open: func(t *testing.T) store {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := dynamodb.Open(ctx, client, dynamodb.Options{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		drop: func(t *testing.T) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if _, err := client.DeleteTable(ctx, &ddb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// newSharedEnv is newEnv with its processes on the shared table st, reached
// at via (the server itself when empty).
func newSharedEnv(t *testing.T, st *sharedTable, via, handler string) *procEnv {
	t.Helper()
	e := newEnv(t, false, handler)
	e.vars = append(e.vars, st.vars(via)...)
	return e
}

// initTable runs `sqsonce ledger init` and fails the test unless it worked.
func (e *procEnv) initTable() string {
	e.t.Helper()
	code, out := e.run("ledger init", "")
	if code != exitOK {
		e.t.Fatalf("ledger init: exit %d:\n%s", code, out)
	}
	return out
}

// sendOps sends one message per body, in order, in batches of ten.
func (e *procEnv) sendOps(bodies []string) {
	e.t.Helper()
	if code, out := e.run("send", strings.Join(bodies, "\n")+"\n"); code != exitOK {
		e.t.Fatalf("send: exit %d: %s", code, out)
	}
}

// counts returns how many times each first field occurs in lines.
func counts(lines []string) map[string]int {
	n := map[string]int{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 {
			n[f[0]]++
		}
	}
	return n
}

// silentListener accepts connections and never answers on them: a server
// that hangs.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestMain_SharedLedgerCommands(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st := b.new(t)
			e := newSharedEnv(t, st, "", `body=$(cat)
echo "$SQSONCE_KEY $body" >>"$STATE/effects"
case "$SQSONCE_KEY" in bad-*) exit 3 ;; esac
`)
			e.sendOps([]string{`{"id":"op-1"}`, `{"id":"op-2"}`, `{"id":"bad-1"}`})

			// Before init: run refuses at once and names the command that
			// creates the table, without touching the queue.
			start := time.Now()
			cmd, out := e.start("run")
			if code := wait(t, cmd, 60*time.Second); code != exitFailure || !strings.Contains(out.String(), "sqsonce ledger init") {
				t.Fatalf("run on a missing table: exit %d:\n%s", code, out)
			}
			t.Logf("run on a missing table exited after %v", time.Since(start).Round(time.Millisecond))
			if v, n := sqstest.Count(t, e.client, e.queue.URL); v != 3 || n != 0 {
				t.Fatalf("run on a missing table touched the queue: %d visible, %d in flight", v, n)
			}
			if got := e.lines("effects"); len(got) != 0 {
				t.Fatalf("work ran without a ledger: %q", got)
			}
			code, msg := e.run("check", "")
			if code != exitFailure || !strings.Contains(squash(msg), "fail ledger") || !strings.Contains(msg, "sqsonce ledger init") {
				t.Fatalf("check on a missing table: exit %d:\n%s", code, msg)
			}
			if code, msg := e.run("ledger stats", ""); code != exitFailure || !strings.Contains(msg, "sqsonce ledger init") {
				t.Fatalf("ledger stats on a missing table: exit %d:\n%s", code, msg)
			}

			first, second := e.initTable(), e.initTable()
			if !strings.Contains(first, st.table) || !strings.Contains(second, st.table) {
				t.Fatalf("init does not name the table:\n%s%s", first, second)
			}
			if b.name == BackendDynamoDB && (!strings.Contains(first, "was created") || !strings.Contains(second, "exists")) {
				t.Fatalf("init twice on dynamodb:\n%s%s", first, second)
			}

			code, msg = e.run("check", "")
			if code != exitOK || !strings.Contains(squash(msg), "ok ledger "+b.name+" table "+st.table+" answers (0 records)") {
				t.Fatalf("check: exit %d:\n%s", code, msg)
			}
			if b.name == BackendDynamoDB {
				// init turned TTL deletion on where the service has it;
				// dynalite has none, and check warns.
				want := "ok ledger ttl DynamoDB deletes expired records (TTL on ttl)"
				if dynamotest.Server(t) == dynamotest.Dynalite {
					want = "warn ledger ttl TTL deletion is"
				}
				if !strings.Contains(squash(msg), want) {
					t.Fatalf("check on %s does not say %q:\n%s", dynamotest.Server(t), want, msg)
				}
			}

			// A claim held by a host that is not running, for the counts.
			db := st.open(t)
			ctx := context.Background()
			if _, err := db.ClaimBatch(ctx, []ledger.ClaimRequest{{Key: "held-1", Owner: "elsewhere", Lease: time.Hour, MessageID: "m-held"}}); err != nil {
				t.Fatal(err)
			}

			cmd, out = e.start("run")
			e.waitFor("the three operations", 30*time.Second, func() bool { return len(e.lines("effects")) == 3 })
			e.waitFor("the queue to empty", 30*time.Second, e.queueEmpty)
			for _, name := range []string{"ledger.db", "ledger.db.sock"} {
				if _, err := os.Stat(filepath.Join(e.dir, name)); !os.IsNotExist(err) {
					t.Errorf("%s exists beside a shared ledger: %v", name, err)
				}
			}

			// The commands reach the table directly, with the worker running.
			code, msg = e.run("ledger get op-1", "")
			if code != exitOK || !strings.Contains(msg, "complete") || !strings.Contains(msg, "op-1") {
				t.Fatalf("get: exit %d:\n%s", code, msg)
			}
			code, msg = e.run("ledger get bad-1 --json", "")
			var rec ledger.RecordJSON
			if code != exitOK || json.Unmarshal([]byte(msg), &rec) != nil || rec.State != "failed" || !rec.Permanent || !strings.Contains(rec.LastError, "3") {
				t.Fatalf("get --json: exit %d:\n%s", code, msg)
			}
			if code, msg := e.run("ledger get nope", ""); code != exitFailure || !strings.Contains(msg, "no such operation") {
				t.Fatalf("get of an absent key: exit %d: %s", code, msg)
			}
			code, msg = e.run("ledger list --state complete", "")
			if code != exitOK || !strings.Contains(msg, "op-1") || !strings.Contains(msg, "op-2") || strings.Contains(msg, "bad-1") || strings.Contains(msg, "held-1") {
				t.Fatalf("list --state complete: exit %d:\n%s", code, msg)
			}
			code, msg = e.run("ledger list --prefix op- --json --limit 0", "")
			if code != exitOK || strings.Count(msg, "\n") != 2 {
				t.Fatalf("list --prefix: exit %d:\n%s", code, msg)
			}
			code, msg = e.run("ledger stats --json", "")
			var stats map[string]any
			if code != exitOK || json.Unmarshal([]byte(msg), &stats) != nil || stats["complete"] != 2.0 || stats["failed_permanently"] != 1.0 ||
				stats["in_progress"] != 1.0 || stats["via"] != b.name {
				t.Fatalf("stats --json: exit %d:\n%s", code, msg)
			}
			if _, ok := stats["file_size"]; ok {
				t.Errorf("stats of a shared table report a file size: %s", msg)
			}
			code, msg = e.run("ledger export", "")
			if code != exitOK || strings.Count(msg, "\n") != 4 {
				t.Fatalf("export: exit %d:\n%s", code, msg)
			}
			for _, key := range []string{"op-1", "op-2", "bad-1", "held-1"} {
				if !strings.Contains(msg, `"key":"`+key+`"`) {
					t.Errorf("export lacks %s:\n%s", key, msg)
				}
			}

			code, msg = e.run("ledger reset bad-1", "")
			if code != exitOK || !strings.Contains(msg, "failed permanently") || !strings.Contains(msg, "via the "+b.name) {
				t.Fatalf("reset: exit %d: %s", code, msg)
			}
			if r, err := db.Get(ctx, "bad-1"); err != nil || r.State != ledger.StateFailed || r.Permanent {
				t.Fatalf("after reset: %+v, %v", r, err)
			}
			if code, msg := e.run("ledger reset op-1", ""); code != exitFailure {
				t.Fatalf("reset of a complete record: exit %d: %s", code, msg)
			}
			if code, msg := e.run("ledger forget op-2 --yes", ""); code != exitOK || !strings.Contains(msg, "via the "+b.name) {
				t.Fatalf("forget: exit %d: %s", code, msg)
			}
			if _, err := db.Get(ctx, "op-2"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("forgotten record: %v", err)
			}
			// Forgotten, its next delivery runs it again.
			e.sendOps([]string{`{"id":"op-2"}`})
			e.waitFor("op-2 to run again", 30*time.Second, func() bool { return counts(e.lines("effects"))["op-2"] == 2 })

			if code, msg := e.run("ledger compact", ""); code != exitUsage || !strings.Contains(msg, "bbolt") {
				t.Fatalf("compact on a shared ledger: exit %d: %s", code, msg)
			}

			cmd.Process.Signal(syscall.SIGTERM)
			if code := wait(t, cmd, 30*time.Second); code != exitOK {
				t.Fatalf("run: exit %d:\n%s", code, out)
			}
			if n := counts(e.lines("effects")); n["op-1"] != 1 || n["bad-1"] != 1 {
				t.Fatalf("executions %v", n)
			}
		})
	}
}

func TestMain_SharedLedgerUnreachable(t *testing.T) {
	t.Parallel()
	// A store that refuses connections, and one that takes them and never
	// answers, on each backend; the commands of all at once, since each
	// waits out the store's timeout.
	type attempt struct {
		what  string
		e     *procEnv
		cmd   *exec.Cmd
		out   *syncBuffer
		start time.Time
		took  time.Duration
		done  chan struct{}
	}
	// Every store first, so that one whose server is missing fails the
	// test before any process runs (a process started, then left to the
	// cleanup while a goroutine waits for it, would hang the test).
	type setup struct {
		what string
		e    *procEnv
	}
	var setups []setup
	for _, b := range sharedBackends {
		for _, kind := range []string{"refused", "silent"} {
			st := b.new(t)
			addr := closedAddr(t)
			if kind == "silent" {
				addr = silentListener(t)
			}
			e := newSharedEnv(t, st, addr, "cat >/dev/null\n")
			e.sendOps([]string{`{"id":"op-1"}`})
			setups = append(setups, setup{what: "the " + b.name + " store " + kind, e: e})
		}
	}
	var attempts []*attempt
	for _, su := range setups {
		for _, args := range []string{"run", "ledger stats", "ledger init", "check"} {
			cmd, out := su.e.start(args)
			a := &attempt{what: args + " with " + su.what, e: su.e, cmd: cmd, out: out, start: time.Now(), done: make(chan struct{})}
			go func() { a.cmd.Wait(); a.took = time.Since(a.start); close(a.done) }()
			attempts = append(attempts, a)
		}
	}
	deadline := time.After(60 * time.Second)
	for _, a := range attempts {
		select {
		case <-a.done:
		case <-deadline:
			for _, a := range attempts {
				a.cmd.Process.Kill()
				<-a.done
			}
			t.Fatalf("%s did not give up on the store within 60s", a.what)
		}
		code := a.cmd.ProcessState.ExitCode()
		t.Logf("%s: exit %d after %v: %s", a.what, code, a.took.Round(time.Millisecond), lastLine(a.out.String()))
		out := a.out.String()
		if strings.HasPrefix(a.what, "check") {
			out = squash(out)
			if !strings.Contains(out, "fail ledger") {
				t.Errorf("%s: exit %d:\n%s", a.what, code, a.out)
			}
		}
		if code != exitFailure || !strings.Contains(out, ledger.ErrUnavailable.Error()) {
			t.Errorf("%s: exit %d:\n%s", a.what, code, a.out)
		}
	}
	for _, a := range attempts {
		if v, n := sqstest.Count(t, a.e.client, a.e.queue.URL); v != 1 || n != 0 {
			t.Fatalf("run without a ledger touched the queue: %d visible, %d in flight", v, n)
		}
	}
}

// TestMain_SharedLedgerDropped: a worker whose table is dropped under it
// stops with an error that says what to do, and loses nothing.
func TestMain_SharedLedgerDropped(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st := b.new(t)
			e := newSharedEnv(t, st, "", "cat >/dev/null\necho \"$SQSONCE_KEY\" >>\"$STATE/effects\"\n")
			e.initTable()
			cmd, out := e.start("run")
			e.sendOps([]string{`{"id":"op-1"}`})
			e.waitFor("the first operation", 30*time.Second, func() bool { return len(e.lines("effects")) == 1 })
			e.waitFor("the queue to empty", 30*time.Second, e.queueEmpty)

			st.drop(t)
			e.sendOps([]string{`{"id":"op-2"}`})
			if code := wait(t, cmd, 60*time.Second); code != exitFailure || !strings.Contains(out.String(), "sqsonce ledger init") {
				t.Fatalf("run with its table dropped: exit %d:\n%s", code, out)
			}
			if got := e.lines("effects"); len(got) != 1 {
				t.Fatalf("work ran without a table: %q", got)
			}
			if v, n := sqstest.Count(t, e.client, e.queue.URL); v+n != 1 {
				t.Fatalf("%d visible + %d in flight, want the message kept", v, n)
			}
			if v, n := sqstest.Count(t, e.client, e.queue.DLQURL); v+n != 0 {
				t.Fatalf("%d messages dead-lettered", v+n)
			}
			// Once the table is back, the next worker does the work.
			e.initTable()
			cmd, out = e.start("run")
			e.waitFor("the operation after init", 30*time.Second, func() bool { return len(e.lines("effects")) == 2 })
			cmd.Process.Signal(syscall.SIGTERM)
			if code := wait(t, cmd, 30*time.Second); code != exitOK {
				t.Fatalf("exit %d:\n%s", code, out)
			}
		})
	}
}

// TestMain_SharedLedgerPassword: the password of ledger.url is never
// printed, whether the commands work or fail.
func TestMain_SharedLedgerPassword(t *testing.T) {
	t.Parallel()
	const secret = "Zq7secretPw"
	raw, _ := pgtest.Schema(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	withUser := func(user, host string) string {
		v := *u
		v.User = url.UserPassword(user, secret)
		if host != "" {
			v.Host = host
		}
		return v.String()
	}
	cases := []struct {
		name, url string
		works     bool
	}{
		// The test server trusts every local connection, so a wrong
		// password alone is not refused; a role that does not exist is.
		{"UnknownRole", withUser("no_such_role", ""), false},
		{"Unreachable", withUser(u.User.Username(), closedAddr(t)), false},
		{"NotAURL", withUser(u.User.Username(), u.Hostname()+":99999"), false},
		{"Works", withUser(u.User.Username(), ""), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, "cat >/dev/null\necho \"$SQSONCE_KEY\" >>\"$STATE/effects\"\n")
			e.vars = append(e.vars, "SQSONCE_LEDGER_BACKEND=postgres", "SQSONCE_LEDGER_URL="+tc.url, "SQSONCE_LEDGER_TABLE=ops_"+strings.ToLower(tc.name))
			want := exitFailure
			if tc.works {
				want = exitOK
			}
			for _, args := range []string{"ledger init", "check", "ledger stats", "ledger export", "ledger get k"} {
				code, out := e.run(args, "")
				wantHere := want
				if args == "ledger get k" {
					wantHere = exitFailure // no such operation, at best
				}
				if code != wantHere || strings.Contains(out, secret) {
					t.Errorf("%s: exit %d, want %d; output:\n%s", args, code, wantHere, out)
				}
			}
			e.sendOps([]string{`{"id":"op-1"}`})
			cmd, out := e.start("run --log-level debug")
			if tc.works {
				e.waitFor("the operation", 30*time.Second, func() bool { return len(e.lines("effects")) == 1 })
				cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := wait(t, cmd, 60*time.Second); code != want || strings.Contains(out.String(), secret) {
				t.Errorf("run: exit %d, want %d; output:\n%s", code, want, out)
			}
		})
	}
}
