package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

var ctx = context.Background()

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func claimReq(key, owner string) ledger.ClaimRequest {
	return ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Minute, Fingerprint: []byte("fp"), MessageID: "m-" + owner}
}

func mustClaim(t testing.TB, l *postgres.Ledger, r ledger.ClaimRequest, want ledger.Outcome) ledger.Claim {
	t.Helper()
	c, err := l.Claim(ctx, r)
	must(t, err)
	if c.Outcome != want {
		t.Fatalf("claim %q by %q: %s, want %s", r.Key, r.Owner, c.Outcome, want)
	}
	return c
}

func TestInit(t *testing.T) {
	t.Parallel()

	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		l := open(t, opts)
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
		must(t, postgres.Init(ctx, opts))
		if _, err := l.Get(ctx, "k"); err != nil {
			t.Fatalf("a record after a second Init: %v", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		opts := postgres.Options{URL: url, Table: "ops"}
		const hosts = 6
		errs := make([]error, hosts)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for h := range hosts {
			wg.Go(func() {
				<-start
				errs[h] = postgres.Init(ctx, opts)
			})
		}
		close(start)
		wg.Wait()
		for h, err := range errs {
			if err != nil {
				t.Errorf("Init on host %d: %v", h, err)
			}
		}
		l := open(t, opts)
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
	})

	t.Run("SchemaQualifiedTable", func(t *testing.T) {
		t.Parallel()
		conn := pgtest.Connect(t, "")
		_, name := pgtest.Schema(t)
		opts := postgres.Options{URL: pgtest.URL(t), Table: name + ".ops"}
		must(t, postgres.Init(ctx, opts))
		l := open(t, opts)
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
		var n int
		must(t, conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.ops`, name)).Scan(&n))
		if n != 1 {
			t.Fatalf("%d records in %s.ops, want 1", n, name)
		}
	})

	// A ledger set up by an older sqsonce, without the function that
	// raises sqsonce's own SQLSTATEs: Open says to run Init, which adds
	// it and keeps the records and the version.
	t.Run("UpgradesAnOlderLedger", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		l := open(t, opts)
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
		l.Close()
		conn := pgtest.Connect(t, opts.URL)
		_, err := conn.Exec(ctx, `DROP FUNCTION sqsonce_operations_refuse(text, text, text)`)
		must(t, err)
		if _, err := postgres.Open(ctx, opts); !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") {
			t.Fatalf("Open of a ledger without the function: %v, want ErrNoSchema naming `sqsonce ledger init`", err)
		}
		must(t, postgres.Init(ctx, opts))
		l = open(t, opts)
		if rec, err := l.Get(ctx, "k"); err != nil || rec.Owner != "a" {
			t.Fatalf("the record after the upgrade: %+v, %v", rec, err)
		}
		var version int
		must(t, conn.QueryRow(ctx, `SELECT version FROM sqsonce_operations_version`).Scan(&version))
		if version != postgres.SchemaVersion {
			t.Fatalf("version %d after the upgrade, want %d", version, postgres.SchemaVersion)
		}
		// The completion's refusals work: a completion by another owner
		// commits nothing and says why.
		op, err := l.BeginOp(ctx)
		must(t, err)
		if err := op.CommitComplete(ctx, ledger.Completion{Key: "k", Owner: "b"}); !errors.Is(err, ledger.ErrNotOwner) {
			t.Fatalf("CommitComplete by another owner: %v, want ErrNotOwner", err)
		}
	})

	t.Run("NewerSchema", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		l := open(t, opts)
		_, err := pgtest.Connect(t, opts.URL).Exec(ctx, `UPDATE sqsonce_operations_version SET version = $1`, postgres.SchemaVersion+1)
		must(t, err)
		if err := postgres.Init(ctx, opts); !errors.Is(err, ledger.ErrSchema) {
			t.Fatalf("Init on a newer schema: %v, want ErrSchema", err)
		}
		if _, err := postgres.Open(ctx, opts); !errors.Is(err, ledger.ErrSchema) {
			t.Fatalf("Open on a newer schema: %v, want ErrSchema", err)
		}
		// The ledger opened before keeps working: the check is Open's.
		mustClaim(t, l, claimReq("k", "a"), ledger.Claimed)
	})
}

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		_, err := postgres.Open(ctx, postgres.Options{URL: url})
		if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") {
			t.Fatalf("Open without a table: %v, want ErrNoSchema naming `sqsonce ledger init`", err)
		}
	})

	t.Run("MissingVersion", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		conn := pgtest.Connect(t, opts.URL)
		_, err := conn.Exec(ctx, `DELETE FROM sqsonce_operations_version`)
		must(t, err)
		if _, err := postgres.Open(ctx, opts); !errors.Is(err, ledger.ErrNoSchema) {
			t.Fatalf("Open without a version: %v, want ErrNoSchema", err)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		// A port where nothing listens: refused at once.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		addr := ln.Addr().String()
		ln.Close()
		url := pgtest.ReplaceAddr(t, pgtest.URL(t), addr)
		_, err = postgres.Open(ctx, postgres.Options{URL: url, Timeout: 2 * time.Second})
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Open on a closed port: %v, want ErrUnavailable", err)
		}
		if err := postgres.Init(ctx, postgres.Options{URL: url, Timeout: 2 * time.Second}); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Init on a closed port: %v, want ErrUnavailable", err)
		}
	})

	t.Run("Silent", func(t *testing.T) {
		t.Parallel()
		// A server that accepts connections and never answers: Open
		// gives up after its timeout.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		t.Cleanup(func() { ln.Close() })
		var mu sync.Mutex
		var held []net.Conn
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range held {
				c.Close()
			}
		})
		url := pgtest.ReplaceAddr(t, pgtest.URL(t), ln.Addr().String())
		done := make(chan error, 1)
		go func() {
			_, err := postgres.Open(ctx, postgres.Options{URL: url, Timeout: 300 * time.Millisecond})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ledger.ErrUnavailable) {
				t.Fatalf("Open on a silent server: %v, want ErrUnavailable", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Open on a silent server did not give up")
		}
	})

	t.Run("PasswordNotInErrors", func(t *testing.T) {
		t.Parallel()
		const pw = "s3cret-Pa55word"
		base, _ := pgtest.Schema(t)
		// The test server trusts loopback, so the password is accepted
		// and ignored: Open gets as far as the missing table.
		withPW := strings.Replace(base, "postgres://postgres@", "postgres://postgres:"+pw+"@", 1)
		if withPW == base {
			t.Skip("the test server's URL is not of the form postgres://postgres@…")
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		closed := ln.Addr().String()
		ln.Close()
		for name, opts := range map[string]postgres.Options{
			"missing table": {URL: withPW},
			"unreachable":   {URL: pgtest.ReplaceAddr(t, withPW, closed), Timeout: time.Second},
			"bad option":    {URL: withPW + "&connect_timeout=soon"},
			"bad key=value": {URL: "host=127.0.0.1 password=" + pw + " port=notaport"},
		} {
			_, err := postgres.Open(ctx, opts)
			if err == nil {
				t.Fatalf("%s: Open succeeded", name)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("%s: the error shows the password: %v", name, err)
			}
			ierr := postgres.Init(ctx, opts)
			if ierr != nil && strings.Contains(ierr.Error(), pw) {
				t.Errorf("%s: Init's error shows the password: %v", name, ierr)
			}
		}
	})

	t.Run("BadOptions", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		for name, opts := range map[string]postgres.Options{
			"upper-case table":   {URL: url, Table: "Ops"},
			"quoted table":       {URL: url, Table: `ops"; DROP TABLE x; --`},
			"three-part name":    {URL: url, Table: "a.b.c"},
			"long table":         {URL: url, Table: strings.Repeat("t", 60)},
			"negative retention": {URL: url, Retention: -time.Hour},
			"retention too long": {URL: url, Retention: ledger.MaxRetention + time.Hour},
		} {
			if _, err := postgres.Open(ctx, opts); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
	})

	t.Run("Closed", func(t *testing.T) {
		t.Parallel()
		l := open(t, setup(t, nil))
		must(t, l.Close())
		must(t, l.Close())
		if _, err := l.Claim(ctx, claimReq("k", "a")); !errors.Is(err, ledger.ErrClosed) {
			t.Fatalf("claim after Close: %v, want ErrClosed", err)
		}
		if err := l.Complete(ctx, ledger.Completion{Key: "k", Owner: "a"}); !errors.Is(err, ledger.ErrClosed) {
			t.Fatalf("complete after Close: %v, want ErrClosed", err)
		}
	})

	t.Run("TableDropped", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		l := open(t, opts)
		conn := pgtest.Connect(t, opts.URL)
		_, err := conn.Exec(ctx, `DROP TABLE sqsonce_operations`)
		must(t, err)
		if _, err := l.Claim(ctx, claimReq("k", "a")); !errors.Is(err, ledger.ErrNoSchema) {
			t.Fatalf("claim on a dropped table: %v, want ErrNoSchema", err)
		}
		if err := l.Ping(ctx); !errors.Is(err, ledger.ErrNoSchema) {
			t.Fatalf("ping on a dropped table: %v, want ErrNoSchema", err)
		}
	})

	// Ping needs the right to write the table, and writes nothing.
	t.Run("PingWithoutWriting", func(t *testing.T) {
		t.Parallel()
		opts := setup(t, nil)
		l := open(t, opts)
		must(t, l.Ping(ctx))
		conn := pgtest.Connect(t, opts.URL)
		var n int
		must(t, conn.QueryRow(ctx, `SELECT count(*) FROM sqsonce_operations`).Scan(&n))
		if n != 0 {
			t.Fatalf("a ping wrote %d rows", n)
		}
	})
}
