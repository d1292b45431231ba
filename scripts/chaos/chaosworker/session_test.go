package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
)

// TestSessionWatch_TellsTransactionsApart: the campaign asks, once a
// panicked handler has returned, whether its transaction is still open.
// The session may be in a later transaction by then (the pool gave the
// connection, rolled back, to another attempt at once), which must not
// read as the panicked one left open; the panicked one still open must.
func TestSessionWatch_TellsTransactionsApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url, _ := pgtest.Schema(t)
	conn := pgtest.Connect(t, url)
	w := func(pid uint32, started time.Time) string { return sessionState(url, pid, started) }
	pid := conn.PgConn().PID()

	begin := func() time.Time {
		t.Helper()
		if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
			t.Fatal(err)
		}
		var started time.Time
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&started); err != nil {
			t.Fatal(err)
		}
		return started
	}
	first := begin()
	// Still inside it: read as open (after the watch's 3 s of patience).
	if st := w(pid, first); !strings.HasPrefix(st, "idle in transaction") {
		t.Fatalf("the transaction left open reads %q", st)
	}
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if st := w(pid, first); st != sessionMovedOn {
		t.Fatalf("after its rollback, with the session idle, the transaction reads %q", st)
	}
	time.Sleep(10 * time.Millisecond) // now() has microseconds: the next start differs
	second := begin()
	if st := w(pid, first); st != sessionMovedOn {
		t.Fatalf("with the session inside a later transaction, the first reads %q", st)
	}
	if st := w(pid, second); !strings.HasPrefix(st, "idle in transaction") {
		t.Fatalf("the later transaction, open, reads %q", st)
	}
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if st := w(pid, time.Time{}); !strings.HasPrefix(st, "unknown") {
		t.Fatalf("with no start read, the state is %q", st)
	}
}
