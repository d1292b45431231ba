package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

// adminAddr finds the admin listener's address in a process's JSON log.
func adminAddr(t *testing.T, e *procEnv, out *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`"msg":"admin listener started","address":"([^"]+)"`)
	var addr string
	e.waitFor("the admin listener", 15*time.Second, func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMain_Admin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "cat >/dev/null\n")
	e.run("send", "{\"id\":\"a\"}\n{\"id\":\"a\"}\n{\"id\":\"b\"}\n")
	cmd, out := e.start("run --log-format json", "SQSONCE_ADMIN_PPROF=false")
	base := "http://" + adminAddr(t, e, out)
	e.waitFor("the queue to empty", 20*time.Second, e.queueEmpty)

	e.waitFor("readiness", 10*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	if code, body := get(t, base+"/healthz"); code != 200 || !strings.Contains(body, `"alive":true`) {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	code, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		"sqsonce_operations_completed_total 2",
		`sqsonce_ledger_records{state="complete"} 2`,
		"sqsonce_ledger_oldest_in_progress_seconds 0",
		`sqsonce_sqs_requests_total{operation="ReceiveMessage"}`,
		"sqsonce_ledger_commit_duration_seconds_count",
		"sqsonce_handler_duration_seconds_bucket",
		"go_goroutines",
	} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(metrics, `key="`) {
		t.Error("a metric is labelled by operation key")
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ served with pprof off: %d", code)
	}
	// The container health check.
	addr := strings.TrimPrefix(base, "http://")
	if code, msg := e.run("health --addr "+addr, ""); code != exitOK || !strings.Contains(msg, `"alive":true`) {
		t.Errorf("sqsonce health: exit %d: %s", code, msg)
	}
	if code, msg := e.run("health", "", "SQSONCE_ADMIN_LISTEN=:1"); code != exitFailure || !strings.Contains(msg, "not healthy") {
		t.Errorf("sqsonce health on a closed port: exit %d: %s", code, msg)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 15*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestMain_AdminPProfAndBusyPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "cat >/dev/null\n")
	cmd, out := e.start("run --log-format json", "SQSONCE_ADMIN_PPROF=true")
	addr := adminAddr(t, e, out)
	if code, body := get(t, "http://"+addr+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d", code)
	}
	// A second worker asked to listen on the same port fails clearly.
	e2 := newEnv(t, false, "exit 0\n")
	code, msg := e2.run("run", "", "SQSONCE_ADMIN_LISTEN="+addr)
	if code != exitFailure || !strings.Contains(msg, "admin.listen") {
		t.Fatalf("busy admin port: exit %d: %s", code, msg)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	wait(t, cmd, 15*time.Second)
}

// notifySocket listens on a unixgram socket as systemd would and collects
// the datagrams.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []string
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	n := &notifySocket{path: filepath.Join(t.TempDir(), "notify.sock")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

func (n *notifySocket) count(prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, m := range n.msgs {
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, prefix) {
				c++
			}
		}
	}
	return c
}

func TestMain_SystemdNotify(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "cat >/dev/null\n")
	sock := listenNotify(t)
	cmd, out := e.start("run", "NOTIFY_SOCKET="+sock.path, "WATCHDOG_USEC=400000", "JOURNAL_STREAM=8:12345")
	e.waitFor("READY=1", 15*time.Second, func() bool { return sock.count("READY=1") == 1 })
	e.waitFor("watchdog pings", 5*time.Second, func() bool { return sock.count("WATCHDOG=1") >= 3 })
	if sock.count("STATUS=consuming") < 1 {
		t.Fatalf("no STATUS: %q", sock.msgs)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 15*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if sock.count("STOPPING=1") != 1 {
		t.Fatalf("no STOPPING=1: %q", sock.msgs)
	}
	// Under the journal, log lines carry no timestamp of their own.
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			if _, ok := rec["time"]; ok {
				t.Fatalf("log line with a time under JOURNAL_STREAM: %s", sc.Text())
			}
		}
	}
}

// TestNotifier_WatchdogStopsWhenStuck drives the notifier with a health that
// turns from alive to stuck, over a real socket.
func TestNotifier_WatchdogStopsWhenStuck(t *testing.T) {
	t.Parallel()
	sock := listenNotify(t)
	env := map[string]string{"NOTIFY_SOCKET": sock.path, "WATCHDOG_USEC": "200000"}
	n, err := newNotifier(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || n == nil || n.watchdog != 200*time.Millisecond {
		t.Fatalf("notifier %+v, %v", n, err)
	}
	defer n.close()
	var mu sync.Mutex
	h := worker.Health{Running: true, Alive: true, Ready: true}
	health := func() healthState { mu.Lock(); defer mu.Unlock(); return workerHealth(h) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.run(ctx, health, func() string { return "consuming" }); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for sock.count("WATCHDOG=1") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if sock.count("READY=1") != 1 || sock.count("WATCHDOG=1") < 3 {
		t.Fatalf("while alive: %q", sock.msgs)
	}
	mu.Lock()
	h.Alive, h.Ready = false, false
	mu.Unlock()
	time.Sleep(150 * time.Millisecond) // a ping may be on its way
	before := sock.count("WATCHDOG=1")
	time.Sleep(time.Second) // five watchdog intervals
	if after := sock.count("WATCHDOG=1"); after != before {
		t.Fatalf("%d watchdog pings while the loop was stuck", after-before)
	}
	cancel()
	<-done

	// Without NOTIFY_SOCKET there is no notifier, and a nil one is inert.
	n2, err := newNotifier(func(string) (string, bool) { return "", false })
	if n2 != nil || err != nil {
		t.Fatalf("no socket: %v %v", n2, err)
	}
	n2.send("READY=1")
	n2.run(context.Background(), health, nil)
	n2.close()
}
