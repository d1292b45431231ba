package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// holdDefaultAdminPorts keeps the default admin addresses, admin.listen's
// and ingest.admin_listen's, for the test: a lock file shared by every
// test process on the host (another package's run, another checkout's)
// lets one test at a time listen on them, and the addresses must be free
// of other processes. In CI a busy address fails the test; elsewhere it
// skips, naming it.
func holdDefaultAdminPorts(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sqsonce-test-default-admin-ports.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
	d := DefaultConfig()
	for _, addr := range []string{d.Admin.Listen, d.Ingest.AdminListen} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("the default admin address %s is taken by another process: %v", addr, err)
			}
			t.Skipf("the default admin address %s is taken by another process (%v): this test needs it free", addr, err)
		}
		ln.Close()
	}
}

// sqsonce run and sqsonce ingest run side by side on one configuration file
// that leaves both admin listeners at their defaults, as the systemd units
// in deploy/ run them on /etc/sqsonce/sqsonce.toml: each serves /healthz on
// its own address, `sqsonce health` reaches each, and check names both.
func TestMain_RunAndIngestOneConfig(t *testing.T) {
	t.Parallel()
	holdDefaultAdminPorts(t)
	e := newEnv(t, false, "cat >/dev/null\n")
	// One file holds the configuration: no SQSONCE_ variable.
	e.vars = slices.DeleteFunc(e.vars, func(v string) bool { return strings.HasPrefix(v, envPrefix) })
	config := filepath.Join(e.dir, "sqsonce.toml")
	err := os.WriteFile(config, fmt.Appendf(nil, `[queue]
url = %q
endpoint = %q
wait_time = "1s"
visibility_timeout = "5s"

[key]
from = "attribute"
attribute = "SqsonceKey"

[ledger]
path = %q

[handler]
command = [%q]

[ingest]
listen = "127.0.0.1:0"

[[ingest.source]]
name = "github"
path = "/hooks/github"
verify = "github"
secret_env = "TEST_GITHUB_SECRETS"
`, e.queue.URL, sqstest.Endpoint(t), filepath.Join(e.dir, "ledger.db"), filepath.Join(e.dir, "handler.sh")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	e.vars = append(e.vars, "TEST_GITHUB_SECRETS="+ingestSecret)

	started := regexp.MustCompile(`"msg":"admin listener started","address":"([^"]+)"`)
	d := DefaultConfig()
	want := map[string]string{"run": d.Admin.Listen, "ingest": d.Ingest.AdminListen}
	for _, command := range []string{"run", "ingest"} {
		cmd, out := e.start(command + " --config " + config + " --log-format json")
		var addr string
		e.waitFor(command+"'s admin listener", 30*time.Second, func() bool {
			if m := started.FindStringSubmatch(out.String()); m != nil {
				addr = m[1]
			}
			return addr != "" || strings.Contains(out.String(), "sqsonce "+command+":")
		})
		if addr != want[command] {
			t.Fatalf("sqsonce %s: admin listener on %q, want %s:\n%s", command, addr, want[command], out)
		}
		e.waitFor(command+"'s /healthz", 30*time.Second, func() bool { code, _ := get(t, "http://"+addr+"/healthz"); return code == 200 })
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			if code := wait(t, cmd, 30*time.Second); code != exitOK {
				t.Errorf("sqsonce %s: exit %d:\n%s", command, code, out)
			}
		})
	}
	// Both serve at once.
	for command, addr := range want {
		if code, body := get(t, "http://"+addr+"/healthz"); code != 200 {
			t.Errorf("sqsonce %s's /healthz on %s: %d %s", command, addr, code, body)
		}
	}
	for _, args := range []string{"health", "health --ingest"} {
		if code, out := e.run(args, ""); code != exitOK || !strings.Contains(out, `"ok":true`) {
			t.Errorf("sqsonce %s: exit %d: %s", args, code, out)
		}
	}
	_, out := e.run("check --config "+config, "")
	if w := "ok admin sqsonce run serves /metrics, /healthz and /readyz on 127.0.0.1:9464 (admin.listen), sqsonce ingest on 127.0.0.1:9466 (ingest.admin_listen)"; !strings.Contains(squash(out), w) {
		t.Errorf("check: no %q in:\n%s", w, out)
	}
	// One address for both: check says that the two cannot both run.
	_, out = e.run("check --config "+config, "", "SQSONCE_INGEST_ADMIN_LISTEN=:9464")
	if w := "warn admin admin.listen 127.0.0.1:9464 and ingest.admin_listen :9464 take one address: sqsonce run and sqsonce ingest cannot both run with this configuration"; !strings.Contains(squash(out), w) {
		t.Errorf("check: no %q in:\n%s", w, out)
	}
}

func TestSameAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:9464", "127.0.0.1:9466", false},
		{"127.0.0.1:9464", "127.0.0.1:9464", true},
		{"127.0.0.1:9464", ":9464", true},
		{"0.0.0.0:9464", "10.0.0.5:9464", true},
		{"[::]:9464", "127.0.0.1:9464", true},
		{"localhost:9464", "127.0.0.1:9464", true},
		{"10.0.0.5:9464", "10.0.0.6:9464", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"", "127.0.0.1:9464", false},
		{"", "", false},
	} {
		if got := sameAddress(tc.a, tc.b); got != tc.want {
			t.Errorf("sameAddress(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
