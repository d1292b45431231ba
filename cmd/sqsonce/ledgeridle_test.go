package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
)

// An idle worker's readiness and sqsonce_ledger_up follow its PostgreSQL
// ledger: no message arrives while the server is stopped and started again,
// and yet /readyz says not ready (the ledger down) while it is stopped, and
// ready once it is back; /healthz stays 200 throughout.
func TestMain_IdleWorkerFollowsLedger(t *testing.T) {
	t.Parallel()
	pg := pgtest.NewCluster(t)
	e := newEnv(t, false, "cat >/dev/null\necho \"$SQSONCE_KEY\" >>\"$STATE/effects\"\n")
	e.vars = append(e.vars, "SQSONCE_LEDGER_BACKEND=postgres", "SQSONCE_LEDGER_URL="+pg.URL(), "SQSONCE_LEDGER_TABLE=ops")
	e.initTable()
	cmd, out := e.start("run --log-format json")
	base := "http://" + adminAddr(t, e, out)

	// state is /readyz's status and sqsonce_ledger_up.
	state := func() (int, string, string) {
		code, body := get(t, base+"/readyz")
		_, metrics := get(t, base+"/metrics")
		up := "absent"
		for _, line := range strings.Split(metrics, "\n") {
			if v, ok := strings.CutPrefix(line, "sqsonce_ledger_up "); ok {
				up = v
			}
		}
		return code, strings.TrimSpace(body), up
	}
	waitState := func(what string, wantCode int, wantUp string) {
		t.Helper()
		var code int
		var body, up string
		e.waitFor(what, 60*time.Second, func() bool {
			code, body, up = state()
			return code == wantCode && up == wantUp
		})
		if hc, hbody := get(t, base+"/healthz"); hc != 200 {
			t.Fatalf("/healthz %d %s while %s: a liveness probe would restart a worker that waits on purpose", hc, hbody, what)
		}
		t.Logf("%s: /readyz %d %s, sqsonce_ledger_up %s", what, code, body, up)
	}

	waitState("ready with the ledger up", 200, "1")
	pg.Stop()
	stoppedAt := time.Now()
	waitState("not ready with the ledger stopped", 503, "0")
	t.Logf("not ready %v after the server stopped", time.Since(stoppedAt).Round(time.Millisecond))
	if _, body, _ := state(); !strings.Contains(body, `"ledger_down":true`) {
		t.Errorf("/readyz does not say that the ledger is down: %s", body)
	}
	pg.Start()
	startedAt := time.Now()
	waitState("ready with the ledger back", 200, "1")
	t.Logf("ready %v after the server started", time.Since(startedAt).Round(time.Millisecond))

	// Work runs again.
	e.sendOps([]string{`{"id":"after"}`})
	e.waitFor("the operation sent after the ledger came back", 30*time.Second, func() bool { return len(e.lines("effects")) == 1 })
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 30*time.Second); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"the ledger does not answer", "the ledger records claims again"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the worker's log:\n%s", want, warnings(out.String()))
		}
	}
}
