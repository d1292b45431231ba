// Package pgtest is test support for code that talks to PostgreSQL.
//
// Tests run against a real server, never a mock: scripts/with-postgres.sh
// starts a throwaway cluster on loopback (or finds the one that
// SQSONCE_TEST_POSTGRES_URL names) and `make test` runs the tests through
// it. A test that needs the server and does not find it fails; it is not
// skipped.
//
// The package provides:
//
//   - [URL]: the server's connection string from the environment;
//   - [Schema]: a schema of the test's own, dropped when the test ends, and
//     a connection string whose sessions create and find tables there, so
//     that tests run in parallel on one server without seeing each other;
//   - [Proxy]: a TCP proxy on loopback in front of the server that counts
//     round trips and can cut every connection or lose the server's next
//     answer, to test what a client does when a connection fails.
//   - [Cluster]: a server of one test's own, which the test stops and
//     starts again, to test what a client does while the server is down.
//
// Tests import it; the binary never does.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsonce/sqsonce/internal/loopback"
)

// URLEnv names the environment variable holding the connection string of
// the PostgreSQL server for tests, a URL such as
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const URLEnv = "SQSONCE_TEST_POSTGRES_URL"

// opTimeout bounds each statement the helpers run.
const opTimeout = 15 * time.Second

// server is the PostgreSQL server for tests, found through [URLEnv].
var server = loopback.Server{
	Env:    URLEnv,
	Name:   "a PostgreSQL server",
	Script: "scripts/with-postgres.sh",
}

// URL returns the server's connection string from [URLEnv]. When the
// variable is unset, or does not name a server on a loopback address (or a
// Unix socket), URL fails the test with t.Fatal; it never skips.
func URL(t testing.TB) string {
	t.Helper()
	raw := server.Lookup(t)
	cfg, err := pgconn.ParseConfig(raw)
	if err != nil {
		t.Fatalf("%s: %v", URLEnv, err)
	}
	if !strings.HasPrefix(cfg.Host, "/") && !loopback.IsHost(cfg.Host) {
		t.Fatalf("%s names host %q: tests only talk to a server on a loopback address", URLEnv, cfg.Host)
	}
	return raw
}

// Connect opens a connection with the connection string raw (the server at
// [URL] when empty) for a test's own statements, closed when the test ends.
func Connect(t testing.TB, raw string) *pgx.Conn {
	t.Helper()
	if raw == "" {
		raw = URL(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Schema creates a schema of the test's own and returns a connection string
// to the server at [URL] whose sessions use it (search_path), so that tables
// created without a schema name go there, and the schema's name. The schema
// and all in it are dropped when the test ends.
func Schema(t testing.TB) (url, name string) {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name = "t_" + hex.EncodeToString(b[:])
	raw := URL(t)
	exec(t, raw, "CREATE SCHEMA "+name)
	t.Cleanup(func() { exec(t, raw, "DROP SCHEMA "+name+" CASCADE") })
	return WithParam(t, raw, "search_path", name), name
}

// WithParam returns the connection string raw with the parameter name set
// to value (a run-time parameter such as search_path or application_name,
// or a pool setting such as pool_max_conns).
func WithParam(t testing.TB, raw, name, value string) string {
	t.Helper()
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("connection string: %v", err)
		}
		q := u.Query()
		q.Set(name, value)
		// A space as %20: pgx reads a + in a query value as itself.
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		return u.String()
	}
	return raw + " " + name + "='" + strings.ReplaceAll(value, "'", `\'`) + "'"
}

func exec(t testing.TB, raw, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Errorf("connect to the test server: %v", err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Errorf("%s: %v", sql, err)
	}
}

// Addr returns host:port of the server that the connection string raw
// names; it fails the test for a Unix socket.
func Addr(t testing.TB, raw string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(raw)
	if err != nil {
		t.Fatalf("connection string: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Fatalf("connection string names a Unix socket; a TCP address is needed here")
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}

// ReplaceAddr returns raw with the server's host and port replaced by addr
// (host:port).
func ReplaceAddr(t testing.TB, raw, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("connection string: %v", err)
		}
		u.Host = addr
		return u.String()
	}
	return raw + " host=" + host + " port=" + port
}
