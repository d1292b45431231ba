package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// socketDeadline turns a call stuck behind a stalled client into a failure
// instead of a hung test. It is not a measure of speed.
const socketDeadline = 30 * time.Second

// socketSetup is a ledger with records and its socket, served with opts.
type socketSetup struct {
	db   *ledger.DB
	path string // the ledger file
	sock *ledgerSocket
	logs *syncBuffer
}

func setupSocket(t *testing.T, records int, opts socketOptions) *socketSetup {
	t.Helper()
	ctx := context.Background()
	s := &socketSetup{path: filepath.Join(t.TempDir(), "ledger.db"), logs: &syncBuffer{}}
	db, err := ledger.Open(s.path, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s.db = db
	for i := 0; i < records; i += 500 {
		var reqs []ledger.ClaimRequest
		for j := i; j < min(i+500, records); j++ {
			reqs = append(reqs, ledger.ClaimRequest{Key: fmt.Sprintf("k%05d", j), Owner: "o", Lease: time.Hour, MessageID: "m"})
		}
		if _, err := db.ClaimBatch(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	s.sock, err = listenLedgerSocket(db, socketPath(s.path), slog.New(slog.NewTextHandler(s.logs, nil)), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.sock.Close() })
	return s
}

// growLedger claims and completes keys with results of the largest size
// until the file is at least twice as large as it was, so that bbolt must map
// it anew: a write that waits for every open read transaction.
func growLedger(ctx context.Context, db *ledger.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	start := fi.Size()
	big := make([]byte, ledger.MaxResultLen)
	for round := 0; ; round++ {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Size() >= 2*start {
			return nil
		}
		if round == 1000 {
			return fmt.Errorf("file still %d bytes after %d rounds, started at %d", fi.Size(), round, start)
		}
		var reqs []ledger.ClaimRequest
		var cs []ledger.Completion
		for j := range 100 {
			key := fmt.Sprintf("grow-%03d-%03d", round, j)
			reqs = append(reqs, ledger.ClaimRequest{Key: key, Owner: "g", Lease: time.Hour})
			cs = append(cs, ledger.Completion{Key: key, Owner: "g", Result: big})
		}
		if _, err := db.ClaimBatch(ctx, reqs); err != nil {
			return err
		}
		for _, err := range db.CompleteBatch(ctx, cs) {
			if err != nil {
				return err
			}
		}
	}
}

// within runs fn and fails the test when it has not returned after
// socketDeadline.
func within(t *testing.T, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(socketDeadline):
		t.Fatalf("%s did not finish within %v", what, socketDeadline)
	}
}

// waitLog waits until the socket's log holds want.
func (s *socketSetup) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(socketDeadline)
	for !strings.Contains(s.logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the socket's log within %v:\n%s", want, socketDeadline, s.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLedgerSocket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const stalled = "stopped reading"

	// A client that asks for the list and never reads it: the ledger goes
	// on writing, even writes that grow the file, and the worker cuts the
	// connection off after its write timeout.
	t.Run("StalledListReader", func(t *testing.T) {
		t.Parallel()
		s := setupSocket(t, 20000, socketOptions{writeTimeout: 500 * time.Millisecond})
		conn, err := net.Dial("unix", socketPath(s.path))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /v1/list HTTP/1.1\r\nHost: ledger\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// Take the status line only: the listing has started.
		br := bufio.NewReaderSize(conn, 16)
		if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
			t.Fatalf("status line %q, %v", line, err)
		}

		within(t, "writes that grow the file while the client stalls", func() error { return growLedger(ctx, s.db, s.path) })
		within(t, "Stats while the client stalls", func() error { _, err := s.db.Stats(ctx); return err })

		s.waitLog(t, stalled)
		// What the worker had sent before it gave up, then the end: the
		// answer is cut off, not complete.
		conn.SetReadDeadline(time.Now().Add(socketDeadline))
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader("HTTP/1.1 200 OK\r\n"), br)), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("reading the stalled listing after the cut: %d bytes, %v; want it cut off", len(body), err)
		}
		if n := strings.Count(string(body), "\n"); n >= 20000 {
			t.Fatalf("the stalled client got all %d records", n)
		}
		// No handler is left running: Close shuts down at once.
		if err := s.sock.Close(); err != nil {
			t.Fatalf("close with the stalled connection cut: %v", err)
		}
	})

	// The admin command's side of a cut: a clear error, not a silent short
	// listing.
	t.Run("ClientSeesTheCut", func(t *testing.T) {
		t.Parallel()
		s := setupSocket(t, 20000, socketOptions{writeTimeout: 200 * time.Millisecond})
		c, err := dialLedgerSocket(ctx, socketPath(s.path))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := 0
		err = c.ForEach(ctx, ledger.Filter{}, func(ledger.Record) error {
			if n == 0 {
				s.waitLog(t, stalled)
			}
			n++
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "broke off") || !strings.Contains(err.Error(), "not read for") {
			t.Fatalf("listing cut off after %d records: err %v, want one saying it broke off", n, err)
		}
		if n >= 20000 {
			t.Fatalf("got all %d records although the listing was cut", n)
		}
	})

	// A socket left by a worker that died is replaced.
	t.Run("StaleSocketReplaced", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		db, err := ledger.Open(filepath.Join(dir, "ledger.db"), ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		path := socketPath(filepath.Join(dir, "ledger.db"))
		stale, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		stale.Close()
		sock, err := listenLedgerSocket(db, path, slog.New(slog.DiscardHandler), socketOptions{writeTimeout: socketWriteTimeout})
		if err != nil {
			t.Fatal(err)
		}
		defer sock.Close()
		c, err := dialLedgerSocket(ctx, path)
		if err != nil {
			t.Fatalf("dial the socket that replaced a stale one: %v", err)
		}
		c.Close()
	})

	t.Run("PathTooLong", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
		db, err := ledger.Open(filepath.Join(dir, "ledger.db"), ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		_, err = listenLedgerSocket(db, socketPath(filepath.Join(dir, "ledger.db")), slog.New(slog.DiscardHandler), socketOptions{writeTimeout: socketWriteTimeout})
		if err == nil || !strings.Contains(err.Error(), "unix socket allows") {
			t.Fatalf("socket at a path over the limit: %v, want an error naming the limit", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("left behind in the ledger's directory: %v", entries)
		}
	})

	// A listing read at an ordinary pace is complete, and the deadline
	// (renewed per record) does not cut it.
	t.Run("ListReadToTheEnd", func(t *testing.T) {
		t.Parallel()
		s := setupSocket(t, 3000, socketOptions{writeTimeout: socketWriteTimeout})
		c, err := dialLedgerSocket(ctx, socketPath(s.path))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var keys []string
		if err := c.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error { keys = append(keys, r.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 3000 || keys[0] != "k00000" || keys[2999] != "k02999" {
			t.Fatalf("listed %d records", len(keys))
		}
	})
}

// The socket keeps the overview it read, for every client that asks, for a
// time that grows with what it cost: a walk of every record is read again
// only once the last one is old enough, and a change made through the
// socket drops it.
func TestLedgerSocket_OverviewKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var took []time.Duration
	var mu sync.Mutex
	s := setupSocket(t, 100, socketOptions{writeTimeout: socketWriteTimeout, overviewKeep: func(d time.Duration) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		took = append(took, d)
		return time.Hour
	}})
	dial := func() *socketLedger {
		c, err := dialLedgerSocket(ctx, socketPath(s.path))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := dial(), dial()
	since := func() time.Time { return time.Now().Add(-time.Hour) }
	first, err := a.Overview(ctx, since())
	if err != nil {
		t.Fatal(err)
	}
	if first.InProgress != 100 {
		t.Fatalf("first overview: %+v", first.Stats)
	}
	// The worker goes on: a new claim, another client asking.
	if _, err := s.db.Claim(ctx, ledger.ClaimRequest{Key: "new", Owner: "o", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	second, err := b.Overview(ctx, since())
	if err != nil {
		t.Fatal(err)
	}
	if !second.Now.Equal(first.Now) || second.InProgress != 100 {
		t.Fatalf("an overview asked for again within its time was read again: read at %v, then %v; %d in progress", first.Now, second.Now, second.InProgress)
	}
	// Another activity window is another overview.
	other, err := b.Overview(ctx, time.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if other.Now.Equal(first.Now) || other.InProgress != 101 {
		t.Fatalf("an overview of another window: read at %v (the kept one at %v), %d in progress", other.Now, first.Now, other.InProgress)
	}
	// A change through the socket: the next overview is read again.
	if err := a.Forget(ctx, "k00000"); err != nil {
		t.Fatal(err)
	}
	third, err := a.Overview(ctx, since())
	if err != nil {
		t.Fatal(err)
	}
	if third.InProgress != 100 || !third.Now.After(first.Now) {
		t.Fatalf("the overview after a forget: read at %v, %d in progress; want a new read with 100", third.Now, third.InProgress)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(took) != 3 {
		t.Fatalf("%d overviews read, want 3", len(took))
	}
	// The rule: at least 5 s, a hundred times the read's time, at most
	// 2 minutes.
	for _, c := range []struct{ took, want time.Duration }{
		{time.Millisecond, 5 * time.Second}, {300 * time.Millisecond, 30 * time.Second}, {5 * time.Second, 2 * time.Minute},
	} {
		if got := overviewKeep(c.took); got != c.want {
			t.Errorf("an overview read in %v is kept %v, want %v", c.took, got, c.want)
		}
	}
}

// TestLedgerSocket_PrivateFromTheStart serves the socket under a umask of 0
// and looks at its final path as soon as the socket listens: nobody but the
// worker's user may ever be able to connect, not even for a moment.
// Not parallel: the umask belongs to the whole process.
func TestLedgerSocket_PrivateFromTheStart(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	db, err := ledger.Open(filepath.Join(dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	path := socketPath(filepath.Join(dir, "ledger.db"))
	listened := false
	var early os.FileInfo
	opts := socketOptions{writeTimeout: socketWriteTimeout, listening: func() {
		listened = true
		early, _ = os.Lstat(path)
	}}
	sock, err := listenLedgerSocket(db, path, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if !listened {
		t.Fatal("the listening hook was not called")
	}
	if early != nil && early.Mode().Perm()&0o077 != 0 {
		t.Fatalf("%s existed with mode %v while the socket was being set up", path, early.Mode())
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket of mode 0600", fi.Mode())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "ledger.db ledger.db.sock" {
		t.Fatalf("the ledger's directory holds %v, want the ledger and its socket only", names)
	}
	c, err := dialLedgerSocket(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := sock.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after Close: %v, want it removed", err)
	}
}

// socketReads is a ledger whose writes go to the file and whose reads (and
// the console's flow calls) go through the worker's socket, so that the
// behaviour suite holds the socket's calls to every backend's.
type socketReads struct {
	*ledger.DB
	sock *socketLedger
}

func (s socketReads) Get(ctx context.Context, key string) (ledger.Record, error) {
	return s.sock.Get(ctx, key)
}

func (s socketReads) ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error {
	return s.sock.ForEach(ctx, f, fn)
}

func (s socketReads) List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error) {
	return s.sock.List(ctx, f, after, limit)
}

func (s socketReads) Overview(ctx context.Context, since time.Time) (ledger.Overview, error) {
	return s.sock.Overview(ctx, since)
}

func (s socketReads) Stats(ctx context.Context) (ledger.Stats, error) { return s.sock.Stats(ctx) }

func (s socketReads) Processes(ctx context.Context) ([]ledger.Process, error) {
	return s.sock.Processes(ctx)
}

func (s socketReads) ListFlows(ctx context.Context) ([]ledger.FlowDoc, error) {
	return s.sock.ListFlows(ctx)
}

func (s socketReads) GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error) {
	return s.sock.GetFlow(ctx, scope)
}

func (s socketReads) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error) {
	return s.sock.PutFlow(ctx, doc, ifVersion)
}

func (s socketReads) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	return s.sock.DeleteFlow(ctx, scope, ifVersion)
}

func TestLedgerSocket_Suite(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.Ledger {
		// A short directory: a unix socket's path is at most 107 bytes.
		dir, err := os.MkdirTemp("", "sock")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "l.db")
		db, err := ledger.Open(path, ledger.Options{Retention: ledgertest.Retention, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		sock, err := listenLedgerSocket(db, socketPath(path), slog.New(slog.DiscardHandler), socketOptions{writeTimeout: socketWriteTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sock.Close() })
		c, err := dialLedgerSocket(context.Background(), socketPath(path))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return socketReads{DB: db, sock: c}
	})
}
