package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// need finds a tool the test cannot do without. In CI a missing tool fails
// the test; elsewhere it skips, naming what to install.
func need(t *testing.T, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing (Debian package %s)", tool, pkg)
		}
		t.Skipf("%s is missing: install the Debian package %s", tool, pkg)
	}
	return p
}

// buildBinary builds sqsonce into a directory any user can read.
func buildBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sqsonce-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sqsonce")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDeploy_SystemdUnits checks the unit files with systemd-analyze verify,
// pointed at a real binary.
func TestDeploy_SystemdUnits(t *testing.T) {
	t.Parallel()
	analyze := need(t, "systemd-analyze", "systemd")
	bin := buildBinary(t)
	dir := t.TempDir()
	var units []string
	for src, dst := range map[string]string{"sqsonce.service": "sqsonce.service", "sqsonce@.service": "sqsonce@orders.service", "sqsonce-ingest.service": "sqsonce-ingest.service"} {
		b, err := os.ReadFile(filepath.Join("../../deploy/systemd", src))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		want := []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "DynamicUser=yes",
			"ProtectSystem=strict", "NoNewPrivileges=yes", "SystemCallFilter=@system-service"}
		if src != "sqsonce-ingest.service" { // the receiver keeps no state and runs no handlers
			want = append(want, "StateDirectory=sqsonce", "KillMode=mixed")
		} else {
			want = append(want, "ExecStart=/usr/local/bin/sqsonce ingest ")
		}
		for _, want := range want {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %s", src, want)
			}
		}
		path := filepath.Join(dir, dst)
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "/usr/local/bin/sqsonce", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, path)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// Every supervisor in deploy/, and the Dockerfile's `docker run` example
// (Docker waits only 10s by default), waits for a stop longer than the
// grace it gives sqsonce: the grace (the file's SQSONCE_SHUTDOWN_GRACE,
// else the default), then up to the exec kill grace for a command still
// running, then the release of what never started and the last ledger
// writes.
func TestDeploy_StopTimeouts(t *testing.T) {
	t.Parallel()
	const margin = worker.DefaultKillGrace + 5*time.Second // exec's kill grace and 5s to give back and flush
	timeout := regexp.MustCompile(`(?m)^(?:TimeoutStopSec=(\d+)s|\s*terminationGracePeriodSeconds: (\d+)|#\s+docker run .*--stop-timeout[ =](\d+) .*)$`)
	graceVar := regexp.MustCompile(`SQSONCE_SHUTDOWN_GRACE["]?[:,]\s*(?:value:\s*)?"([^"]+)"`)
	files, err := filepath.Glob("../../deploy/*/*")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../Dockerfile")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		grace := DefaultConfig().Shutdown.Grace.Duration
		if m := graceVar.FindSubmatch(b); m != nil {
			if grace, err = time.ParseDuration(string(m[1])); err != nil {
				t.Fatalf("%s: SQSONCE_SHUTDOWN_GRACE %q: %v", f, m[1], err)
			}
		}
		found := timeout.FindAllSubmatch(b, -1)
		for _, m := range found {
			secs, _ := strconv.Atoi(string(m[1]) + string(m[2]) + string(m[3]))
			checked++
			if stop := time.Duration(secs) * time.Second; stop < grace+margin {
				t.Errorf("%s: the supervisor kills after %v, less than shutdown.grace %v plus %v", f, stop, grace, margin)
			}
		}
		if filepath.Base(f) == "Dockerfile" && len(found) == 0 {
			t.Errorf("%s: its docker run example gives no --stop-timeout: Docker's default, 10s, cuts shutdown.grace %v short", f, grace)
		}
	}
	if checked < 7 { // three systemd units, three manifests, the Dockerfile's example
		t.Fatalf("found %d stop timeouts in deploy/ and the Dockerfile, want 7", checked)
	}
}

// imageUser is the user and group the Dockerfile runs sqsonce as (its
// USER line).
func imageUser(t *testing.T) (uid, gid string) {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Dockerfile: no USER UID:GID line")
	}
	return string(m[1]), string(m[2])
}

// The Kubernetes manifests run sqsonce as the image's user.
func TestDeploy_ImageUser(t *testing.T) {
	t.Parallel()
	uid, gid := imageUser(t)
	files, err := filepath.Glob("../../deploy/kubernetes/*")
	if err != nil {
		t.Fatal(err)
	}
	id := regexp.MustCompile(`(?m)^\s*(runAsUser|runAsGroup|fsGroup): (\d+)$`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range id.FindAllSubmatch(b, -1) {
			seen++
			want := gid
			if string(m[1]) == "runAsUser" {
				want = uid
			}
			if string(m[2]) != want {
				t.Errorf("%s: %s %s, but the image runs as %s:%s", f, m[1], m[2], uid, gid)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no runAsUser in deploy/kubernetes: the test tested nothing")
	}
}

// TestDeploy_ContainerLikeRun runs the binary as a container would: a
// read-only root file system, the image's non-root user (the Dockerfile's
// USER), no $HOME, configuration from the environment alone, the ledger on
// a writable volume; then SIGTERM with work in flight must drain within a
// Kubernetes-style 30s grace.
func TestDeploy_ContainerLikeRun(t *testing.T) {
	t.Parallel()
	unshare := need(t, "unshare", "util-linux")
	need(t, "setpriv", "util-linux")
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a mount namespace with a read-only root")
	}
	uid, gid := imageUser(t)
	bin := buildBinary(t)
	binDir := filepath.Dir(bin)
	volume := filepath.Join(binDir, "volume")
	os.Mkdir(volume, 0o777)
	os.Chmod(volume, 0o777)
	handler := filepath.Join(binDir, "handler.sh")
	os.WriteFile(handler, []byte(`#!/bin/sh
set -eu
cat >/dev/null
echo "$SQSONCE_KEY" >>"$VOLUME/started"
sleep 2
echo "$SQSONCE_KEY" >>"$VOLUME/effects"
`), 0o755)

	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{MaxReceiveCount: 5})
	for i := range 4 {
		body := fmt.Sprintf(`{"id":"c-%d"}`, i)
		if _, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: &body}); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{
		"PATH=/usr/bin:/bin", "VOLUME=" + volume,
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1",
		"SQSONCE_QUEUE_URL=" + q.URL, "SQSONCE_QUEUE_ENDPOINT=" + sqstest.Endpoint(t),
		"SQSONCE_QUEUE_WAIT_TIME=1s", "SQSONCE_LEDGER_PATH=" + volume + "/ledger.db",
		"SQSONCE_HANDLER_COMMAND=" + handler, "SQSONCE_SHUTDOWN_GRACE=25s", "SQSONCE_ADMIN_LISTEN=127.0.0.1:0",
	}
	// The volume is bind-mounted onto itself so it stays writable when the
	// root is remounted read-only.
	script := fmt.Sprintf(`set -e
mount --bind %[1]s %[1]s
mount -o remount,ro,bind /
touch /probe 2>/dev/null && { echo "root is writable"; exit 9; }
exec setpriv --reuid %[4]s --regid %[5]s --clear-groups --inh-caps=-all env -i %[2]s %[3]s run --log-format json`,
		volume, strings.Join(env, " "), bin, uid, gid)
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := func(name string) int {
		b, err := os.ReadFile(filepath.Join(volume, name))
		if err != nil {
			return 0
		}
		return strings.Count(string(b), "\n")
	}
	deadline := time.Now().Add(20 * time.Second)
	for lines("started") < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("work did not start:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lines("effects") == 4 {
		t.Fatal("work finished before the signal: the test proves nothing")
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	code := wait(t, cmd, 30*time.Second)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, out)
	}
	if n := lines("effects"); n != 4 {
		t.Fatalf("%d of 4 operations finished during the drain:\n%s", n, out)
	}
	for _, bad := range []string{"read-only file system", "permission denied", "$HOME"} {
		if strings.Contains(strings.ToLower(out.String()), strings.ToLower(bad)) {
			t.Fatalf("log mentions %q:\n%s", bad, out)
		}
	}
	visible, inflight := sqstest.Count(t, client, q.URL)
	if visible+inflight != 0 {
		t.Fatalf("%d messages left after a clean drain", visible+inflight)
	}
	t.Logf("drained 4 running operations in %v after SIGTERM (limit 30s)", took.Round(time.Millisecond))
}

// Every SQSONCE_* variable the deployment examples set is one sqsonce reads:
// a misspelt name would be ignored in production.
func TestDeploy_ManifestVariables(t *testing.T) {
	t.Parallel()
	known := map[string]bool{"SQSONCE_CONFIG": true}
	for _, v := range EnvVars() {
		known[v] = true
	}
	files, err := filepath.Glob("../../deploy/*/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deployment files: %v", err)
	}
	name := regexp.MustCompile(`SQSONCE_[A-Z_]+`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range name.FindAllString(string(b), -1) {
			seen++
			if !known[v] {
				t.Errorf("%s sets %s, which sqsonce does not read", f, v)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no SQSONCE_ variable in the deployment files: the test tested nothing")
	}
}
