package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCluster is the PostgreSQL cluster of the shared-ledger campaign: a
// throwaway one of its own, made as scripts/with-postgres.sh makes one
// (initdb --no-sync, a free port of 127.0.0.1, its socket in its
// directory), because the campaign stops it hard and restarts it while the
// workers run: stopping the server that scripts/with-postgres.sh started
// would break the other packages' tests that `make test` runs against it
// at the same time, and that server runs with synchronous_commit off, under
// which a server that stops hard loses transactions it already reported
// committed, which no ledger can survive. This one runs with
// synchronous_commit on and fsync off: a commit is in the operating system's
// hands before it is acknowledged, which outlives the server's death (the
// campaign stops the server, never the machine).
//
// The server runs as a child of the campaign (not daemonized by pg_ctl
// start), so that it dies with the campaign however the campaign ends;
// pg_ctl stops it. PostgreSQL refuses to run as root: as root, the cluster
// belongs to the unprivileged user nobody.
type pgCluster struct {
	bin    string // the server's bin directory
	dir    string // data/, the socket and server.log; owned by the server's user
	port   int
	cred   *syscall.Credential // the server's user, when the campaign runs as root
	offset time.Duration       // the server's clock against the hosts' (libfaketime); 0: the same clock

	mu     sync.Mutex
	server *exec.Cmd     // the postmaster now running, or nil
	exited chan struct{} // closed when it has exited
}

// pgSettings are the server's settings (see pgCluster).
const pgSettings = "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=on -c full_page_writes=off -c max_connections=100"

// startPGCluster makes a cluster in a temporary directory, with the
// newest PostgreSQL server that Debian's packages installed (as
// scripts/with-postgres.sh picks it), and starts it, its clock offset from
// the hosts' by offset.
func startPGCluster(ctx context.Context, offset time.Duration) (_ *pgCluster, err error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	version := func(p string) int { v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p)))); return v }
	sort.Slice(bins, func(i, j int) bool { return version(bins[i]) > version(bins[j]) })
	if len(bins) == 0 {
		return nil, errors.New("no PostgreSQL server under /usr/lib/postgresql/*/bin: run the campaign through scripts/with-postgres.sh (make chaos and make test do), which installs Debian's postgresql package")
	}
	if offset != 0 {
		if _, err := os.Stat(fakeTimeLib); err != nil {
			return nil, fmt.Errorf("a clock offset for PostgreSQL needs libfaketime (%s): install Debian's faketime package (make chaos-flow does): %w", fakeTimeLib, err)
		}
	}
	dir, err := os.MkdirTemp("", "sqsonce-chaos-pg-")
	if err != nil {
		return nil, err
	}
	c := &pgCluster{bin: filepath.Dir(bins[0]), dir: dir, offset: offset}
	defer func() {
		if err != nil {
			c.remove("")
		}
	}()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL does not run as root, and there is no user nobody to run it: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	if out, err := c.run(ctx, "initdb", "--no-sync", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	return c, c.start(ctx)
}

func (c *pgCluster) data() string { return filepath.Join(c.dir, "data") }

// run runs one of the server's programs as the server's user.
func (c *pgCluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// start starts the server, on the port it had before when it can, and
// waits until it accepts connections. It tries a few ports: another
// process may take a free port between the check and the start.
func (c *pgCluster) start(ctx context.Context) error {
	var last string
	for attempt := 0; attempt < 5; attempt++ {
		if c.port == 0 || attempt > 0 { // a port of 127.0.0.1 that nothing listens on now
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			c.port = ln.Addr().(*net.TCPAddr).Port
			ln.Close()
		}
		logf, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		args := append(strings.Fields(pgSettings), "-D", c.data(), "-p", strconv.Itoa(c.port), "-k", c.dir)
		cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...)
		cmd.Dir = c.dir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
		if c.offset != 0 {
			// libfaketime shifts the wall clock of the server's processes
			// (now(), clock_timestamp()), not their monotonic one.
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+fakeTimeLib, fmt.Sprintf("FAKETIME=%+d", int(c.offset.Seconds())),
				"FAKETIME_DONT_FAKE_MONOTONIC=1")
		}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
		c.mu.Lock()
		c.server, c.exited = cmd, exited
		c.mu.Unlock()
		if waitFor(ctx, 60*time.Second, func() bool { return !cmdAlive(exited) || pgPing(ctx, pgURL(c.addr()), 2*time.Second) == nil }) && cmdAlive(exited) {
			return nil
		}
		c.kill()
		last = tailFile(filepath.Join(c.dir, "server.log"), 5)
		if !strings.Contains(last, "could not bind") {
			break
		}
	}
	return fmt.Errorf("start PostgreSQL: %s", last)
}

// fakeTimeLib is libfaketime as Debian's faketime package installs it.
const fakeTimeLib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// clockOffset measures the server's clock against this host's: its
// clock_timestamp() less the middle of the query's round trip here.
func (c *pgCluster) clockOffset(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL(c.addr()))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var server time.Time
	before := time.Now()
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&server); err != nil {
		return 0, err
	}
	return server.Sub(before.Add(time.Since(before) / 2)), nil
}

// stopHard stops the server at once, as a crash would: pg_ctl stop -m
// immediate, no checkpoint; the next start recovers from the WAL.
func (c *pgCluster) stopHard(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "-t", "30", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w: %s", err, out)
	}
	c.mu.Lock()
	exited := c.exited
	c.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		return errors.New("pg_ctl stop -m immediate: the server did not exit")
	}
	return nil
}

// kill ends the server with SIGKILL, if it runs, and waits for it.
func (c *pgCluster) kill() {
	c.mu.Lock()
	cmd, exited := c.server, c.exited
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// addr is the server's address now.
func (c *pgCluster) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// pgURL is a connection string to the server at addr (host:port).
func pgURL(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// remove stops the server, copies its log to keepLog (when set) and removes
// its directory.
func (c *pgCluster) remove(keepLog string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.stopHard(ctx); err != nil {
		c.kill()
	}
	if b, err := os.ReadFile(filepath.Join(c.dir, "server.log")); err == nil && keepLog != "" {
		_ = os.WriteFile(keepLog, b, 0o644)
	}
	os.RemoveAll(c.dir)
}

// ping reports whether the server at url answers a query within d.
func pgPing(ctx context.Context, url string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}
