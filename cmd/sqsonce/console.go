package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// Values of ConsoleConfig.Auth.
const (
	ConsoleAuthNone  = "none"
	ConsoleAuthToken = "token"
	ConsoleAuthBasic = "basic"
)

const consoleSynopsis = `Usage: sqsonce console [--config FILE] [--listen HOST:PORT]

Serve the web console of the queue's ledger on --listen or console.listen
(default 127.0.0.1:9465): the operations by what will become of them, lapsed
leases, the workers up and down, paused scopes, failures and dead letters
by reason group, the queues' depths, the last three hours' completions and
failures, each operation's record, attempts and message, and the dead
letters (read without hiding or deleting them). /metrics serves the
console's own metrics.

Safe by default: read-only, and on loopback only. console.writes = true
enables replay and forget (each a dry run first), a pause and a resume of
the intake, and export; it needs a credential
(console.auth = "token" or "basic", read from console.credential_file or
the variable named by console.credential_env), which then guards every page
and /metrics.
Listening beyond loopback needs a credential too; serve it over TLS (a
reverse proxy) when it leaves the host. It answers only to localhost, IP
addresses, the host of console.listen and the names of
console.allowed_hosts.

With bbolt, the console reads through the running worker's ledger socket,
or opens the file for each page view while no worker holds it (so that a
worker can start at any time). SIGINT or SIGTERM stops it; a replay under
way finishes its moves in hand and gives the rest back.`

// consoleCommand is `sqsonce console`.
func (m *Main) consoleCommand(ctx context.Context, args []string) error {
	var c commonFlags
	fs := m.flagSet("console", consoleSynopsis, &c)
	c.keyFlag(fs, "listen", "console.listen", "the host:port to serve")
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	auth, err := consoleAuth(cfg.Console, m.LookupEnv)
	if err != nil {
		return err
	}
	warnExposedSecrets(log, consoleSecretFiles(cfg))
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	q, err := worker.InspectQueue(ctx, client, cfg.Queue.URL)
	if err != nil {
		return err
	}
	var s3c worker.S3Client
	if cfg.Payload.S3 {
		if s3c, err = newS3Client(ctx, cfg); err != nil {
			return err
		}
	}
	keyOf, err := worker.MessageKeyFuncS3(keyConfig(cfg.Key), s3c, int64(cfg.Payload.MaxSize))
	if err != nil {
		return fmt.Errorf("key: %v: %w", err, ErrInvalidConfig)
	}
	led, name, closeLedger, err := consoleLedger(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeLedger()
	proxies, err := prefixes(cfg.Console.TrustedProxies)
	if err != nil {
		return fmt.Errorf("console.trusted_proxies: %v: %w", err, ErrInvalidConfig)
	}
	reg := newRegistry()
	h, err := console.New(console.Config{
		Ledger: led, SQS: client, QueueURL: q.URL, QueueFIFO: q.FIFO, DLQURL: q.DLQURL, KeyOf: keyOf,
		Writes: cfg.Console.Writes, Auth: auth, LedgerName: name, Shell: consoleShell(c.config),
		SessionLifetime: cfg.Console.SessionLifetime.Duration, SecureCookie: cfg.Console.SecureCookie, TrustedProxies: proxies,
		AllowedHosts: consoleHosts(cfg.Console),
		Logger:       log, Registerer: reg, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	})
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	defer h.Close()
	ln, err := net.Listen("tcp", cfg.Console.Listen)
	if err != nil {
		return fmt.Errorf("console.listen %s: %w", cfg.Console.Listen, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	mode := "read-only"
	if cfg.Console.Writes {
		mode = "writes enabled"
	}
	log.Info("console listening", "url", "http://"+ln.Addr().String()+"/", "mode", mode, "auth", cfg.Console.Auth, "ledger", name)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case sig := <-m.Signals:
		log.Info("stop signal: closing the console", "signal", sig.String())
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	h.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		err = nil
	}
	<-served
	return err
}

// consoleShell is how the console's command lines start: with --config
// when the command was given one.
func consoleShell(config string) string {
	if config == "" {
		return "sqsonce"
	}
	return "sqsonce --config " + shellWord(config)
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@%+=,", c))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// consoleAuth reads the console's credential from its file or variable.
func consoleAuth(c ConsoleConfig, lookupEnv func(string) (string, bool)) (console.Auth, error) {
	if c.Auth == ConsoleAuthNone {
		return console.Auth{}, nil
	}
	var raw string
	switch {
	case c.CredentialFile != "":
		data, err := os.ReadFile(c.CredentialFile)
		if err != nil {
			return console.Auth{}, fmt.Errorf("console.credential_file: %w", err)
		}
		raw = strings.TrimSpace(string(data))
	default:
		v, ok := lookupEnv(c.CredentialEnv)
		if !ok {
			return console.Auth{}, fmt.Errorf("console.credential_env: the variable %s is not set: %w", c.CredentialEnv, ErrInvalidConfig)
		}
		raw = strings.TrimSpace(v)
	}
	where := "console.credential_file " + c.CredentialFile
	if c.CredentialFile == "" {
		where = "console.credential_env " + c.CredentialEnv
	}
	if c.Auth == ConsoleAuthToken {
		if utf8.RuneCountInString(raw) < minTokenLen || strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' }) {
			return console.Auth{}, fmt.Errorf("%s: want a token of at least %d characters without spaces: %w", where, minTokenLen, ErrInvalidConfig)
		}
		return console.Auth{Token: raw}, nil
	}
	user, pass, ok := strings.Cut(raw, ":")
	switch n := utf8.RuneCountInString(pass); {
	case !ok || user == "":
		return console.Auth{}, fmt.Errorf("%s: want user:password (a user name, a colon, then the password): %w", where, ErrInvalidConfig)
	case n < minTokenLen:
		return console.Auth{}, fmt.Errorf("%s: the password (after the colon; the user name does not count) has %d characters, want at least %d: %w", where, n, minTokenLen, ErrInvalidConfig)
	}
	return console.Auth{User: user, Password: pass}, nil
}

// minTokenLen is the fewest characters of a token, or of a password (the
// user name not counted), that the console takes.
const minTokenLen = 16

// maxSessionLifetime is the longest console.session_lifetime.
const maxSessionLifetime = 30 * 24 * time.Hour

// hostNames checks names of console.allowed_hosts: each a DNS name, with
// a port or without.
func hostNames(list []string) error {
	var bad []string
	for _, s := range list {
		name, port := s, ""
		if n, p, err := net.SplitHostPort(s); err == nil {
			name, port = n, p
		}
		if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 1 || n > 65535) || !dnsName(name) {
			bad = append(bad, fmt.Sprintf("%q", s))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("want names such as console.example.com or console.example.com:8443, got %s", strings.Join(bad, ", "))
	}
	return nil
}

// dnsName reports whether s is a DNS name: labels of letters, digits,
// hyphens and underscores, separated by dots.
func dnsName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || strings.ContainsFunc(label, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
		}) {
			return false
		}
	}
	return true
}

// consoleHosts are the names the console answers to besides localhost and
// IP addresses: the host of console.listen when it is a name, and
// console.allowed_hosts.
func consoleHosts(c ConsoleConfig) []string {
	hosts := slices.Clone(c.AllowedHosts)
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			hosts = append(hosts, host)
		}
	}
	return hosts
}

// prefixes reads addresses written as an IP (one address) or a CIDR
// prefix, and names each one that is neither.
func prefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var bad []string
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		} else {
			bad = append(bad, fmt.Sprintf("%q", s))
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("want IP addresses or CIDR prefixes such as 127.0.0.1 or 10.0.0.0/8, got %s", strings.Join(bad, ", "))
	}
	return out, nil
}

// loopbackListen reports whether a listen address reaches only this host.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// consoleLedger opens the configured ledger for the console: a shared one
// directly; a bbolt file through the running worker's socket, or the file
// itself while no worker holds it (see fileOrSocket).
func consoleLedger(ctx context.Context, cfg Config) (console.Ledger, string, func(), error) {
	if cfg.Ledger.Backend != BackendBbolt {
		st, err := openStore(ctx, cfg, nil)
		if err != nil {
			return nil, "", nil, err
		}
		name := "PostgreSQL table " + cfg.Ledger.Table
		if cfg.Ledger.Backend == BackendDynamoDB {
			name = "DynamoDB table " + cfg.Ledger.Table
		}
		return st, name, func() { st.Close() }, nil
	}
	if _, err := os.Stat(cfg.Ledger.Path); err != nil {
		return nil, "", nil, fmt.Errorf("ledger %s: %w", cfg.Ledger.Path, err)
	}
	f := &fileOrSocket{path: cfg.Ledger.Path, retention: cfg.Ledger.Retention.Duration}
	return f, "bbolt file " + cfg.Ledger.Path, f.Close, nil
}

// fileOrSocket reaches a bbolt ledger for the console without keeping a
// worker from it: through the worker's socket when a worker runs, else by
// opening the file, which it closes again after idleClose without a call,
// so that a worker starting meanwhile gets the file within its lock
// timeout.
type fileOrSocket struct {
	path      string
	retention time.Duration

	mu     sync.Mutex
	db     *ledger.DB
	opened time.Time     // when db was opened
	closed chan struct{} // closed when db is closed
	rest   time.Time     // the file is not opened again before then
	users  int
	timer  *time.Timer
	sock   *socketLedger
}

// How the console shares the file with a worker that may start at any
// time: it closes the file idleClose after the last call, and never keeps
// it open longer than maxHold in a row, however busy it is (page views
// that overlap, an export); then it leaves it alone for restGap, in which
// a worker waiting for the lock gets it (bbolt tries every 50 ms, for the
// worker's ledger.lock_timeout, 2 s by default).
const (
	idleClose = 500 * time.Millisecond
	maxHold   = time.Second
	restGap   = 300 * time.Millisecond
)

// access is what fileOrSocket calls: the file or the socket.
type access = console.Ledger

// with runs fn on the worker's socket or the file.
func (f *fileOrSocket) with(ctx context.Context, fn func(access) error) error {
	a, release, err := f.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	return fn(a)
}

func (f *fileOrSocket) acquire(ctx context.Context) (access, func(), error) {
	for {
		f.mu.Lock()
		var wait <-chan struct{}
		var pause time.Duration
		switch {
		case f.db != nil && time.Since(f.opened) > maxHold:
			wait = f.closed // held long enough: the calls in flight end it
		case f.db == nil && time.Now().Before(f.rest):
			pause = time.Until(f.rest)
		default:
			a, release, err := f.acquireLocked(ctx)
			f.mu.Unlock()
			return a, release, err
		}
		f.mu.Unlock()
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		} else {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, nil, ctx.Err()
			}
		}
	}
}

func (f *fileOrSocket) acquireLocked(ctx context.Context) (access, func(), error) {
	if f.db != nil {
		f.users++
		if f.timer != nil {
			f.timer.Stop()
		}
		return f.db, f.release, nil
	}
	if f.sock != nil {
		if _, err := f.sock.Stats(ctx); err == nil {
			return f.sock, func() {}, nil
		}
		f.sock.Close()
		f.sock = nil
	}
	if c, err := dialLedgerSocket(ctx, socketPath(f.path)); err == nil {
		f.sock = c
		return c, func() {}, nil
	}
	db, err := ledger.Open(f.path, ledger.Options{Retention: f.retention, LockTimeout: 200 * time.Millisecond})
	if errors.Is(err, ledger.ErrLocked) {
		// A worker holds it and its socket did not answer just now.
		c, serr := dialLedgerSocket(ctx, socketPath(f.path))
		if serr != nil {
			return nil, nil, fmt.Errorf("%w; and its worker's socket %s: %v", err, socketPath(f.path), serr)
		}
		f.sock = c
		return c, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	f.db, f.users, f.opened, f.closed = db, 1, time.Now(), make(chan struct{})
	return db, f.release, nil
}

// closeLocked closes the file, and keeps it closed for restGap.
func (f *fileOrSocket) closeLocked() {
	f.db.Close()
	f.db = nil
	close(f.closed)
	f.rest = time.Now().Add(restGap)
}

// release ends a call on the file; the last one closes it after idleClose.
func (f *fileOrSocket) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users--
	if f.users > 0 || f.db == nil {
		return
	}
	if time.Since(f.opened) > maxHold {
		f.closeLocked()
		return
	}
	db := f.db
	f.timer = time.AfterFunc(idleClose, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.db == db && f.users == 0 {
			f.closeLocked()
		}
	})
}

// Close closes the file or the socket's connections.
func (f *fileOrSocket) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer != nil {
		f.timer.Stop()
	}
	if f.db != nil {
		f.closeLocked()
	}
	if f.sock != nil {
		f.sock.Close()
		f.sock = nil
	}
}

func (f *fileOrSocket) Get(ctx context.Context, key string) (rec ledger.Record, err error) {
	err = f.with(ctx, func(a access) error { rec, err = a.Get(ctx, key); return err })
	return rec, err
}

func (f *fileOrSocket) List(ctx context.Context, fl ledger.Filter, after string, limit int) (p ledger.Page, err error) {
	err = f.with(ctx, func(a access) error { p, err = a.List(ctx, fl, after, limit); return err })
	return p, err
}

func (f *fileOrSocket) Overview(ctx context.Context, since time.Time) (o ledger.Overview, err error) {
	err = f.with(ctx, func(a access) error { o, err = a.Overview(ctx, since); return err })
	return o, err
}

func (f *fileOrSocket) Forget(ctx context.Context, key string) error {
	return f.with(ctx, func(a access) error { return a.Forget(ctx, key) })
}

func (f *fileOrSocket) Reset(ctx context.Context, key string) error {
	return f.with(ctx, func(a access) error { return a.Reset(ctx, key) })
}

// Every ledger the console may be given is one.
var (
	_ console.Ledger = (*ledger.DB)(nil)
	_ console.Ledger = (*socketLedger)(nil)
	_ console.Ledger = (*fileOrSocket)(nil)
	_ console.Ledger = store(nil)
)

// consoleExposure is the check's line on the console's exposure.
func consoleExposure(c ConsoleConfig) (level, text string) {
	where := "loopback only"
	if !loopbackListen(c.Listen) {
		where = "beyond loopback (serve it over TLS through a reverse proxy)"
	}
	mode := "read-only"
	if c.Writes {
		mode = "writes enabled (replay, forget, export)"
	}
	cred := "no credential"
	switch {
	case c.Auth != ConsoleAuthNone && c.CredentialFile != "":
		cred = c.Auth + " from " + c.CredentialFile
	case c.Auth != ConsoleAuthNone:
		cred = c.Auth + " from $" + c.CredentialEnv
	}
	level = "ok"
	if !loopbackListen(c.Listen) {
		level = "warn"
	}
	return level, fmt.Sprintf("off until `sqsonce console` runs; then on %s, %s, %s, %s", c.Listen, where, mode, cred)
}
