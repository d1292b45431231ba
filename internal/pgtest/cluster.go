package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a PostgreSQL server of one test's own, which the test may
// stop and start again while its clients run; the server of [URL] is shared
// by every test, and stopping it would break them. It is made as
// scripts/with-postgres.sh makes one: initdb --no-sync, fsync off, a free
// port of 127.0.0.1 (kept across restarts), its socket in its own
// directory. The server is a child of the test process and is killed with
// it; as root it runs as the user nobody, since PostgreSQL refuses root.
// The server binaries are Debian's, under /usr/lib/postgresql/*/bin, which
// scripts/with-postgres.sh installs when they are missing.
//
// A Cluster is safe for use by one goroutine at a time.
type Cluster struct {
	t    testing.TB
	bin  string // the server's bin directory
	dir  string // data/, the socket and server.log; the server's user owns it
	port int
	cred *syscall.Credential // the server's user, as root

	mu     sync.Mutex
	server *osexec.Cmd   // the postmaster running now, or nil
	exited chan struct{} // closed when it has exited
}

// clusterSettings are the server's settings: a test's, not durable.
const clusterSettings = "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50"

// NewCluster makes a cluster in a temporary directory and starts it; it
// is stopped and removed when the test ends. A missing server or a
// cluster that does not start fails the test.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := newestBin()
	if bin == "" {
		t.Fatal("no PostgreSQL server under /usr/lib/postgresql/*/bin: run the test through scripts/with-postgres.sh, which installs Debian's postgresql package")
	}
	dir, err := os.MkdirTemp("", "sqsonce-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, bin: bin, dir: dir}
	t.Cleanup(func() {
		c.stop("immediate")
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("PostgreSQL does not run as root, and there is no user nobody to run it: %v", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := c.run("initdb", "--no-sync", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c.Start()
	return c
}

// URL is the server's connection string, the same across restarts.
func (c *Cluster) URL() string {
	return "postgres://postgres@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) + "/postgres?sslmode=disable"
}

// Start starts the server on its port and waits until it answers a query.
func (c *Cluster) Start() {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := append(strings.Fields(clusterSettings), "-D", c.data(), "-p", strconv.Itoa(c.port), "-k", c.dir)
	cmd := osexec.Command(filepath.Join(c.bin, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start PostgreSQL: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	c.mu.Lock()
	c.server, c.exited = cmd, exited
	c.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			c.t.Fatalf("PostgreSQL exited at start (its port %d taken since?):\n%s", c.port, c.logTail())
		default:
		}
		if c.answers() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("PostgreSQL did not answer within 60s of its start:\n%s", c.logTail())
}

// Stop stops the server as an operator would (pg_ctl stop -m fast): the
// server ends its clients' sessions and refuses new connections until
// Start.
func (c *Cluster) Stop() {
	c.t.Helper()
	if err := c.stop("fast"); err != nil {
		c.t.Fatal(err)
	}
}

// stop stops the server, if it runs, in the pg_ctl mode given, and waits
// for it to exit.
func (c *Cluster) stop(mode string) error {
	c.mu.Lock()
	cmd, exited := c.server, c.exited
	c.server = nil
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	out, err := c.run("pg_ctl", "-D", c.data(), "-m", mode, "-w", "-t", "30", "stop")
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("pg_ctl stop -m %s: the server did not exit (%v: %s)", mode, err, out)
	}
	return nil
}

// answers reports whether the server answers a query within 2 s.
func (c *Cluster) answers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one) == nil
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

// run runs one of the server's programs as the server's user.
func (c *Cluster) run(name string, args ...string) (string, error) {
	cmd := osexec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// logTail is the end of the server's log.
func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// newestBin is the bin directory of the newest PostgreSQL server that
// Debian's packages installed, as scripts/with-postgres.sh picks it, or "".
func newestBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(bin string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		ok := true
		for _, p := range []string{"postgres", "initdb", "pg_ctl"} {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}
