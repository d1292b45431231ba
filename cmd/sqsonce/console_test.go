package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

func TestConsoleConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		set  func(c *ConsoleConfig)
		want string // "" when valid
	}{
		{"Defaults", func(*ConsoleConfig) {}, ""},
		{"LoopbackWithoutCredential", func(c *ConsoleConfig) { c.Listen = "localhost:9000" }, ""},
		{"BeyondLoopbackWithoutCredential", func(c *ConsoleConfig) { c.Listen = "0.0.0.0:9465" }, "console.listen: 0.0.0.0:9465 reaches beyond loopback"},
		{"AllInterfacesWithoutCredential", func(c *ConsoleConfig) { c.Listen = ":9465" }, "console.listen: :9465 reaches beyond loopback"},
		{"WritesWithoutCredential", func(c *ConsoleConfig) { c.Writes = true }, "console.writes: needs console.auth"},
		{"TokenWithoutWhere", func(c *ConsoleConfig) { c.Auth = "token" }, "console.credential_file: console.auth = \"token\" needs its credential"},
		{"Both", func(c *ConsoleConfig) { c.Auth, c.CredentialFile, c.CredentialEnv = "basic", "/f", "V" }, "console.credential_env: set console.credential_file or console.credential_env, not both"},
		{"CredentialWithoutAuth", func(c *ConsoleConfig) { c.CredentialEnv = "V" }, "console.credential_env: console.auth = \"none\" takes no credential"},
		{"UnknownAuth", func(c *ConsoleConfig) { c.Auth = "oauth" }, "console.auth: must be one of none, token, basic"},
		{"ShortSession", func(c *ConsoleConfig) { c.SessionLifetime = Duration{time.Second} }, "console.session_lifetime: must be between 1m and 720h"},
		{"LongSession", func(c *ConsoleConfig) { c.SessionLifetime = Duration{1000 * time.Hour} }, "console.session_lifetime: must be between 1m and 720h"},
		{"TrustedProxies", func(c *ConsoleConfig) { c.TrustedProxies = []string{"127.0.0.1", "::1", "10.0.0.0/8", "fd00::/8"} }, ""},
		{"BadTrustedProxy", func(c *ConsoleConfig) { c.TrustedProxies = []string{"10.0.0.1", "proxy.internal", "10.0.0.0/33"} },
			`console.trusted_proxies: want IP addresses or CIDR prefixes such as 127.0.0.1 or 10.0.0.0/8, got "proxy.internal", "10.0.0.0/33"`},
		{"AllowedHosts", func(c *ConsoleConfig) {
			c.AllowedHosts = []string{"console.example.com", "ops.example.com:8443", "box_1.lan."}
		}, ""},
		{"BadAllowedHosts", func(c *ConsoleConfig) {
			c.AllowedHosts = []string{"ok.example", "https://console.example.com", "a.example:0", "*.example", "", "a b"}
		}, `console.allowed_hosts: want names such as console.example.com or console.example.com:8443, got "https://console.example.com", "a.example:0", "*.example", "", "a b"`},
		{"BeyondLoopbackWithToken", func(c *ConsoleConfig) {
			c.Listen, c.Writes, c.Auth, c.CredentialEnv = "0.0.0.0:9465", true, "token", "T"
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.set(&c.Console)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid console settings refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("0123456789abcdef-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := consoleAuth(ConsoleConfig{Auth: "token", CredentialFile: file}, env(nil))
	if err != nil || a.Token != "0123456789abcdef-token" {
		t.Fatalf("token from a file: %+v, %v", a, err)
	}
	a, err = consoleAuth(ConsoleConfig{Auth: "basic", CredentialEnv: "CRED"}, env(map[string]string{"CRED": "ops:0123456789abcdefgh"}))
	if err != nil || a.User != "ops" || a.Password != "0123456789abcdefgh" {
		t.Fatalf("basic from a variable: %+v, %v", a, err)
	}
	for name, c := range map[string]struct {
		cfg  ConsoleConfig
		vars map[string]string
		want string
	}{
		"short token": {ConsoleConfig{Auth: "token", CredentialEnv: "CRED"}, map[string]string{"CRED": "short"}, "at least 16"},
		"no colon":    {ConsoleConfig{Auth: "basic", CredentialEnv: "CRED"}, map[string]string{"CRED": "0123456789abcdefgh"}, "want user:password"},
		// The user name does not count towards the password's 16.
		"short password": {ConsoleConfig{Auth: "basic", CredentialEnv: "CRED"}, map[string]string{"CRED": "operations-team:short-pass"},
			"console.credential_env CRED: the password (after the colon; the user name does not count) has 10 characters, want at least 16"},
		// Characters, not bytes: nine of two bytes each are nine.
		"short in bytes": {ConsoleConfig{Auth: "basic", CredentialEnv: "CRED"}, map[string]string{"CRED": "ops:ééééééééé"}, "has 9 characters"},
		"token in bytes": {ConsoleConfig{Auth: "token", CredentialEnv: "CRED"}, map[string]string{"CRED": "ééééééééé"}, "at least 16 characters"},
		"unset":          {ConsoleConfig{Auth: "token", CredentialEnv: "CRED"}, nil, "CRED is not set"},
		"missing file":   {ConsoleConfig{Auth: "token", CredentialFile: filepath.Join(dir, "none")}, nil, "no such file"},
	} {
		if _, err := consoleAuth(c.cfg, env(c.vars)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// freePort returns a loopback address with a port free just now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// sqsonce console on a bbolt ledger that no worker holds reads the file
// itself, and lets go of it between page views: a worker started while the
// console runs gets the file, and the console then reads through the
// worker's socket, and from the file again once the worker has stopped.
func TestConsole_FileWithoutWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, `echo "{\"receipt\":\"r-$SQSONCE_KEY\"}"
`)
	ctx := context.Background()
	path := filepath.Join(e.dir, "ledger.db")
	db, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"order-1", "order-2", "order-3"} {
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "host-a/1", Lease: time.Minute, MessageID: "m-" + key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Complete(ctx, ledger.Completion{Key: "order-1", Owner: "host-a/1", Result: []byte(`{"receipt":"r-order-1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Fail(ctx, ledger.Failure{Key: "order-2", Owner: "host-a/1", Err: "card <declined> by the bank", Permanent: true}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	addr := freePort(t)
	console, consoleOut := e.start("console", "SQSONCE_CONSOLE_LISTEN="+addr)
	base := "http://" + addr
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v; the console's output:\n%s", path, err, consoleOut)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	e.waitFor("the console to listen", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/static/console.css")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	want := func(what, page string, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(page, p) {
				t.Errorf("%s: no %q in the page:\n%s", what, p, page)
			}
		}
	}

	code, page := get("/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, page)
	}
	want("overview from the file", page, "bbolt file "+path,
		`<span class="n">1</span> in progress`, `<span class="n">1</span> complete`, `<span class="n">1</span> failed permanently`,
		"card &lt;declined&gt; by the bank", "<code>host-a/1</code>")
	code, page = get("/operation?" + url.Values{"key": {"order-1"}}.Encode())
	if code != http.StatusOK {
		t.Fatalf("operation: %d\n%s", code, page)
	}
	want("operation order-1 from the file", page, "order-1", "complete", "m-order-1",
		"{&#34;receipt&#34;:&#34;r-order-1&#34;}", "sqsonce ledger get order-1")
	if code, page = get("/operation?key=nothing-here"); code != http.StatusNotFound {
		t.Errorf("an operation the ledger does not have: %d, want 404\n%s", code, page)
	}

	// The console read the file a moment ago: a worker starts now, and
	// waits for the file (its lock timeout is 2 s) no longer than the
	// console keeps it after a page view. Nobody looks at the console
	// meanwhile: each page view keeps the file a while longer.
	worker, workerOut := e.start("run")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the worker's output:\n%s\nthe console's:\n%s", workerOut, consoleOut)
		}
	})
	e.sendOps([]string{`{"id":"order-4"}`})
	e.waitFor("the worker to take order-4", 30*time.Second, func() bool {
		if strings.Contains(workerOut.String(), "sqsonce run: ") {
			t.Fatalf("the worker did not start while the console ran:\n%s", workerOut)
		}
		_, err := os.Stat(path + ".sock")
		return err == nil && e.queueEmpty()
	})
	// The console now reads through the worker's socket: the file is the
	// worker's.
	code, page = get("/operation?key=order-4")
	if code != http.StatusOK {
		t.Fatalf("operation through the worker: %d\n%s", code, page)
	}
	want("operation order-4 through the worker", page, "complete", "r-order-4")
	// The overview is kept for 5 s (console.Config.Refresh): it shows the
	// new completion once it is read again.
	e.waitFor("the overview through the worker to count 2 complete", 30*time.Second, func() bool {
		_, page = get("/")
		return strings.Contains(page, `<span class="n">2</span> complete`)
	})
	want("overview through the worker", page, "card &lt;declined&gt; by the bank")

	// The worker stops; the console reads the file again.
	worker.Process.Signal(syscall.SIGTERM)
	if code := wait(t, worker, 30*time.Second); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, workerOut)
	}
	code, page = get("/operation?key=order-4")
	if code != http.StatusOK {
		t.Fatalf("operation after the worker stopped: %d\n%s", code, page)
	}
	want("operation order-4 from the file again", page, "r-order-4")

	console.Process.Signal(syscall.SIGTERM)
	if code := wait(t, console, 30*time.Second); code != 0 {
		t.Fatalf("console exit %d:\n%s", code, consoleOut)
	}
	// It let go of the file: a third process opens it at once.
	db, err = ledger.Open(path, ledger.Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("the ledger after the console stopped: %v", err)
	}
	db.Close()
}

// A console that keeps reading the file (page views in a row, with no
// worker running) still lets a worker that starts take the file within its
// lock timeout: the console never holds it for long in a row.
func TestConsole_BusyConsoleLetsWorkerStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	path := filepath.Join(e.dir, "ledger.db")
	db, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	addr := freePort(t)
	console, consoleOut := e.start("console", "SQSONCE_CONSOLE_LISTEN="+addr)
	t.Cleanup(func() {
		console.Process.Signal(syscall.SIGTERM)
		wait(t, console, 30*time.Second)
	})
	base := "http://" + addr
	e.waitFor("the console to answer from the file", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	// Views every 100 ms: each would keep the file another idle period.
	stop := make(chan struct{})
	var views sync.WaitGroup
	views.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if resp, err := http.Get(base + "/operations"); err == nil {
				resp.Body.Close()
			}
		}
	})
	defer views.Wait()
	defer close(stop)
	time.Sleep(time.Second)
	worker, workerOut := e.start("run")
	e.waitFor("the worker to hold the file and serve its socket", 30*time.Second, func() bool {
		if worker.ProcessState != nil || strings.Contains(workerOut.String(), "sqsonce run: ") {
			t.Fatalf("the worker did not start while the console read the file:\n%s\nthe console's output:\n%s", workerOut, consoleOut)
		}
		_, err := os.Stat(path + ".sock")
		return err == nil
	})
	worker.Process.Signal(syscall.SIGTERM)
	if code := wait(t, worker, 30*time.Second); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, workerOut)
	}
}

// consoleToken is the token of the consoles the guard tests start.
const consoleToken = "console-guard-token-0123456789"

// startGuardedConsole starts `sqsonce console` with writes on and the given
// credential settings, and returns its base URL and output.
func startGuardedConsole(t *testing.T, e *procEnv, extra ...string) (string, *syncBuffer) {
	t.Helper()
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	addr := freePort(t)
	env := append([]string{"SQSONCE_CONSOLE_LISTEN=" + addr, "SQSONCE_CONSOLE_WRITES=true"}, extra...)
	console, out := e.start("console", env...)
	t.Cleanup(func() {
		console.Process.Signal(syscall.SIGTERM)
		wait(t, console, 30*time.Second)
		if t.Failed() {
			t.Logf("the console's output:\n%s", out)
		}
	})
	base := "http://" + addr
	e.waitFor("the console to listen", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/static/console.css")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return base, out
}

// guardGet sends a GET to the console, adjusted by set, and returns the
// status and body.
func guardGet(t *testing.T, url string, set func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(req)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// consoleSessions signs in to a console whose proxy is 127.0.0.1 and
// whose sessions last 90 minutes: each sign-in is a session of its own,
// Secure behind an HTTPS proxy, and sign-out ends it.
func consoleSessions(t *testing.T, base string) {
	t.Helper()
	post := func(path string, form url.Values, cookie *http.Cookie) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("X-Forwarded-Proto", "https")
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	signIn := func() *http.Cookie {
		t.Helper()
		resp := post("/sign-in", url.Values{"token": {consoleToken}, "next": {"/operations"}}, nil)
		cs := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 || !cs[0].Secure || cs[0].MaxAge != 90*60 {
			t.Fatalf("sign-in through an HTTPS proxy: %d, cookies %v: want one Secure cookie for 90 minutes", resp.StatusCode, cs)
		}
		return cs[0]
	}
	a, b := signIn(), signIn()
	if a.Value == b.Value {
		t.Errorf("two sign-ins gave the same cookie")
	}
	withCookie := func(c *http.Cookie) func(*http.Request) { return func(r *http.Request) { r.AddCookie(c) } }
	if code, _ := guardGet(t, base+"/operations", withCookie(a)); code != http.StatusOK {
		t.Fatalf("a page with the sign-in cookie: %d", code)
	}
	if resp := post("/sign-out", nil, a); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if code, _ := guardGet(t, base+"/operations", withCookie(a)); code != http.StatusUnauthorized {
		t.Errorf("a page with the cookie of a session signed out: %d, want 401", code)
	}
	if code, _ := guardGet(t, base+"/operations", withCookie(b)); code != http.StatusOK {
		t.Errorf("a page with the other session's cookie: %d, want 200", code)
	}
}

// sqsonce console guards its /metrics like its pages, and the page that
// asks for the credential tells nothing of the installation.
func TestConsole_Guard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		cred func(*http.Request)
	}{
		{"Token", []string{"SQSONCE_CONSOLE_AUTH=token", "SQSONCE_CONSOLE_CREDENTIAL_ENV=CONSOLE_CRED", "CONSOLE_CRED=" + consoleToken,
			"SQSONCE_CONSOLE_TRUSTED_PROXIES=127.0.0.1", "SQSONCE_CONSOLE_SESSION_LIFETIME=90m"},
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+consoleToken) }},
		{"Basic", []string{"SQSONCE_CONSOLE_AUTH=basic", "SQSONCE_CONSOLE_CREDENTIAL_ENV=CONSOLE_CRED", "CONSOLE_CRED=ops:" + consoleToken},
			func(r *http.Request) { r.SetBasicAuth("ops", consoleToken) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, "exit 0\n")
			base, _ := startGuardedConsole(t, e, tc.env...)
			secrets := []string{e.queue.URL, e.queue.DLQURL, e.dir, "writes enabled", ">Replay<"}
			for _, path := range []string{"/metrics", "/", "/operations", "/sign-in"} {
				code, body := guardGet(t, base+path, nil)
				if path != "/sign-in" && code != http.StatusUnauthorized {
					t.Errorf("GET %s without the credential: %d, want 401", path, code)
				}
				for _, s := range secrets {
					if strings.Contains(body, s) {
						t.Errorf("GET %s without the credential (%d) shows %q:\n%s", path, code, s, body)
					}
				}
			}
			code, body := guardGet(t, base+"/metrics", tc.cred)
			if code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
				t.Errorf("GET /metrics with the credential: %d\n%s", code, body)
			}
			code, body = guardGet(t, base+"/", tc.cred)
			if code != http.StatusOK || !strings.Contains(body, e.queue.URL) || !strings.Contains(body, "writes enabled") {
				t.Errorf("GET / with the credential: %d\n%s", code, body)
			}
			if tc.name == "Token" {
				consoleSessions(t, base)
			}
		})
	}

	// A page of another site whose name was rebound to 127.0.0.1 is
	// refused, even on a console without a credential; the console's
	// own names are answered.
	t.Run("Host", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		base, _ := startGuardedConsole(t, e, "SQSONCE_CONSOLE_WRITES=false", "SQSONCE_CONSOLE_ALLOWED_HOSTS=console.example.com ops.example.com:8443")
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
		for host, want := range map[string]int{
			"attacker.example:" + port:    http.StatusMisdirectedRequest,
			"attacker.example":            http.StatusMisdirectedRequest,
			"ops.example.com:" + port:     http.StatusMisdirectedRequest,
			"127.0.0.1:" + port:           http.StatusOK,
			"localhost:" + port:           http.StatusOK,
			"[::1]:" + port:               http.StatusOK,
			"console.example.com":         http.StatusOK,
			"console.example.com:" + port: http.StatusOK,
			"ops.example.com:8443":        http.StatusOK,
		} {
			for _, path := range []string{"/", "/metrics", "/operations"} {
				code, body := guardGet(t, base+path, func(r *http.Request) { r.Host = host })
				if code != want {
					t.Errorf("GET %s with Host %s: %d, want %d\n%s", path, host, code, want, body)
				}
				if code == http.StatusMisdirectedRequest && (strings.Contains(body, e.queue.URL) || !strings.Contains(body, "console.allowed_hosts")) {
					t.Errorf("GET %s with Host %s: the refusal shows the queue or does not name console.allowed_hosts:\n%s", path, host, body)
				}
			}
		}
	})
}

// --listen sets console.listen, over SQSONCE_CONSOLE_LISTEN and the file,
// and is held to the same rules: beyond loopback it needs a credential.
func TestMain_ConsoleListenFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	addr := freePort(t)
	console, out := e.start(`["console", "--listen", "`+addr+`"]`, "SQSONCE_CONSOLE_LISTEN=127.0.0.1:1")
	defer func() { console.Process.Signal(syscall.SIGTERM); wait(t, console, 15*time.Second) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the console's output:\n%s", out)
		}
	})
	e.waitFor("the console to listen on --listen's address", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/static/console.css")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	code, msg := e.runArgs([]string{"console", "--listen", "0.0.0.0:1"}, "")
	if want := "console.listen: 0.0.0.0:1 reaches beyond loopback: it needs console.auth"; code != exitUsage || !strings.Contains(msg, want) {
		t.Fatalf("--listen beyond loopback without a credential: exit %d, want %d and %q:\n%s", code, exitUsage, want, msg)
	}
}
