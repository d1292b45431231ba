package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// metric is the value of an unlabelled metric a worker serves at base.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	_, body := get(t, base+"/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s at %s", name, base)
	return 0
}

// sendBody sends one message to the test's queue.
func sendBody(e *procEnv, body string) {
	e.t.Helper()
	if _, err := e.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &e.queue.URL, MessageBody: aws.String(body)}); err != nil {
		e.t.Fatal(err)
	}
}

// flowStatus runs `sqsonce flow status --json`.
func (e *procEnv) flowStatus(extra ...string) flowStatusJSON {
	e.t.Helper()
	code, out := e.run("flow status --json", "", extra...)
	var st flowStatusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		e.t.Fatalf("flow status --json: exit %d:\n%s", code, out)
	}
	return st
}

// pauseOf is the pause of scope in st; nil when it has none.
func (st flowStatusJSON) pauseOf(scope string) *worker.PauseDoc {
	for _, p := range st.Pauses {
		if p.Scope == scope {
			return p.Pause
		}
	}
	return nil
}

// The operator pauses the intake by hand and resumes it, through every
// ledger: a running worker sees the pause, receives nothing while it
// lasts, is listed as paused, and goes on once resumed.
func TestFlow_PauseResume(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{BackendBbolt, BackendPostgres} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, "cat >/dev/null\necho \"$SQSONCE_KEY\" >>\"$STATE/done\"\n")
			if backend == BackendPostgres {
				e.vars = append(e.vars, newPostgresTable(t).vars("")...)
			}
			if code, out := e.run("ledger init", ""); code != 0 {
				t.Fatalf("ledger init: %d %s", code, out)
			}
			scope := queueNameOf(e.queue.URL) + " " + filepath.Join(e.dir, "handler.sh")
			cmd, out := e.start("run --log-format json")
			defer func() {
				cmd.Process.Signal(syscall.SIGTERM)
				wait(t, cmd, 20*time.Second)
			}()
			base := "http://" + adminAddr(t, e, out)
			sendBody(e, `{"id":"a"}`)
			e.waitFor("a to be done", 20*time.Second, func() bool { return len(e.lines("done")) == 1 })

			code, res := e.runArgs([]string{"flow", "pause", "--until", "10m", "--reason", "partner maintenance"}, "")
			if code != 0 || !strings.Contains(res, fmt.Sprintf("paused the intake of %q until ", scope)) || !strings.Contains(res, "it was not paused") {
				t.Fatalf("flow pause: exit %d:\n%s", code, res)
			}
			if !strings.Contains(res, `"msg":"flow: intake paused by hand"`) || !strings.Contains(res, `"reason":"partner maintenance"`) {
				t.Errorf("the pause is not logged with who and why:\n%s", res)
			}
			e.waitFor("the worker to see the pause", 15*time.Second, func() bool { return metric(t, base, "sqsonce_flow_paused") == 1 })
			// A long poll begun before the pause ends within the wait time
			// (1 s); from then on nothing is received.
			time.Sleep(2 * time.Second)
			received := metric(t, base, "sqsonce_messages_received_total")
			sendBody(e, `{"id":"b"}`)
			sendBody(e, `{"id":"c"}`)
			time.Sleep(3 * time.Second) // three long polls' worth
			if got := metric(t, base, "sqsonce_messages_received_total"); got != received {
				t.Errorf("received %v messages while paused", got-received)
			}
			if v, _ := sqstest.Count(t, e.client, e.queue.URL); v != 2 || len(e.lines("done")) != 1 {
				t.Errorf("while paused: %d visible in the queue, done %q; want 2 and only a", v, e.lines("done"))
			}
			if code, body := get(t, base+"/readyz"); code != 200 {
				t.Errorf("/readyz of a paused worker: %d %s", code, body)
			}
			if _, body := get(t, base+"/healthz"); !strings.Contains(body, `"paused":true`) {
				t.Errorf("/healthz does not say the intake is paused: %s", body)
			}

			var st flowStatusJSON
			e.waitFor("the registry to list the worker paused", 20*time.Second, func() bool {
				st = e.flowStatus()
				return len(st.Processes) == 1 && st.Processes[0].Paused
			})
			p := st.pauseOf(scope)
			by := actor(os.LookupEnv)
			if p == nil || p.State != worker.PausePaused || !p.Manual || p.Reason != "partner maintenance" || p.By != by || st.Scope != scope {
				t.Fatalf("status: %+v", st)
			}
			if proc := st.Processes[0]; proc.PID != cmd.Process.Pid || proc.Down || proc.PausedWhy != "partner maintenance" {
				t.Errorf("registry: %+v", proc)
			}
			code, res = e.run("flow status", "")
			for _, want := range []string{fmt.Sprintf("scope %q", scope), "state paused by hand: no probes", "reason partner maintenance",
				"by " + by, "expires ", "(in 9m", fmt.Sprintf(" %d ", cmd.Process.Pid), "yes: partner maintenance"} {
				if !strings.Contains(squash(res), want) {
					t.Errorf("flow status: exit %d, no %q in:\n%s", code, want, res)
				}
			}

			code, res = e.runArgs([]string{"flow", "resume", "--reason", "maintenance over"}, "")
			if code != 0 || !strings.Contains(res, fmt.Sprintf("resumed the intake of %q", scope)) || !strings.Contains(res, "it was paused by hand by "+by) {
				t.Fatalf("flow resume: exit %d:\n%s", code, res)
			}
			e.waitFor("b and c to be done", 20*time.Second, func() bool { return len(e.lines("done")) == 3 })
			if st := e.flowStatus(); len(st.Pauses) != 0 {
				t.Errorf("a pause left after the resume: %+v", st.Pauses)
			}
			if code, res := e.run("flow resume", ""); code != 0 || !strings.Contains(res, "is not paused: nothing to resume") {
				t.Errorf("a second resume: exit %d:\n%s", code, res)
			}
			if backend == BackendBbolt {
				// The worker's log says who paused and resumed through its
				// socket.
				logged := map[string]map[string]any{}
				for _, line := range strings.Split(out.String(), "\n") {
					var rec map[string]any
					if json.Unmarshal([]byte(line), &rec) == nil {
						if msg, ok := rec["msg"].(string); ok {
							logged[msg] = rec
						}
					}
				}
				paused, lifted := logged["flow: intake paused by hand through the worker socket"], logged["flow: pause lifted through the worker socket"]
				if paused == nil || paused["by"] != by || paused["reason"] != "partner maintenance" || paused["scope"] != scope {
					t.Errorf("the worker's log of the pause: %v", paused)
				}
				if lifted == nil || lifted["by"] != by || lifted["scope"] != scope {
					t.Errorf("the worker's log of the resume: %v", lifted)
				}
			}
		})
	}
}

// A pause by hand replaces an automatic one and keeps its start; status
// shows what the worker keeps of each; every shared ledger takes them.
func TestFlow_SharedLedgers(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, "cat >/dev/null\n")
			table := b.new(t)
			e.vars = append(e.vars, table.vars("")...)
			if code, out := e.run("ledger init", ""); code != 0 {
				t.Fatalf("ledger init: %d %s", code, out)
			}
			scope := "orders-partner"
			e.vars = append(e.vars, "SQSONCE_FLOW_SCOPE="+scope)
			l := table.open(t)
			ctx := context.Background()
			since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
			auto := worker.PauseDoc{State: worker.PausePaused, Since: since, Reason: "the downstream is down: 503", By: "auto: w1",
				Next: time.Now().Add(time.Minute), Interval: 8 * time.Second, Probes: 4}
			data, _ := json.Marshal(auto)
			if _, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: scope, Data: data, TTL: time.Hour}, 0); err != nil {
				t.Fatal(err)
			}
			part := scope + " | pointer /tenant = t-1"
			ramp, _ := json.Marshal(worker.PauseDoc{State: worker.PauseRamping, Since: since, Reason: "tenant down", By: "auto: w2", Cap: 4})
			if _, err := l.PutFlow(ctx, ledger.FlowDoc{Scope: part, Data: ramp, TTL: time.Hour}, 0); err != nil {
				t.Fatal(err)
			}
			if err := l.(worker.FlowLedger).PutProcess(ctx, ledger.Process{ID: "w9", Host: "gone-host", PID: 7, Version: "v0.9", Queue: e.queue.URL,
				Started: since, TTL: time.Second}); err != nil {
				t.Fatal(err)
			}

			code, res := e.run("flow status", "")
			for _, want := range []string{fmt.Sprintf("scope %q", scope), "state paused: the handlers' downstream is down; one probe at a time",
				"probes failed 4", "next probe " + auto.Next.UTC().Format(time.RFC3339)[:16], fmt.Sprintf("scope %q", part), "state ramping up", "cap 4",
				"gone-host 7 v0.9"} {
				if !strings.Contains(squash(res), want) {
					t.Errorf("flow status: exit %d, no %q in:\n%s", code, want, res)
				}
			}
			if strings.Index(res, fmt.Sprintf("scope %q", scope)) > strings.Index(res, fmt.Sprintf("scope %q", part)) {
				t.Errorf("the configuration's scope is not first:\n%s", res)
			}
			e.waitFor("the process to look down", 30*time.Second, func() bool {
				st := e.flowStatus()
				return len(st.Processes) == 1 && st.Processes[0].Down
			})
			if _, res := e.run("flow status", ""); !strings.Contains(res, "(looks down)") || !strings.Contains(res, "1 worker(s) look down") {
				t.Errorf("a process without a beat is not said to look down:\n%s", res)
			}

			code, res = e.runArgs([]string{"flow", "pause", "--until", "2h", "--reason", "vendor asked us to stop"}, "")
			if code != 0 || !strings.Contains(res, "it was paused automatically since "+since.Format(time.RFC3339)) {
				t.Fatalf("flow pause over an automatic pause: exit %d:\n%s", code, res)
			}
			r, err := l.GetFlow(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			var got worker.PauseDoc
			if err := json.Unmarshal(r.Doc.Data, &got); err != nil || !got.Manual || got.State != worker.PausePaused || !got.Since.Equal(since) ||
				got.Reason != "vendor asked us to stop" || got.Probes != 0 || !got.Next.IsZero() {
				t.Fatalf("the pause written: %+v, %v", got, err)
			}
			if left := r.Doc.Expires.Sub(r.Now); left < 119*time.Minute || left > 2*time.Hour {
				t.Errorf("the pause expires in %v, want 2h", left)
			}
			// Longer than the queue's retention (4 days) from its start:
			// refused, naming the retention.
			code, res = e.run("flow pause --until 95h --reason longer", "")
			if code != exitUsage || !strings.Contains(res, "not below the queue's message retention (96h0m0s)") || !strings.Contains(res, "from "+since.Format(time.RFC3339)) {
				t.Errorf("a pause past the retention: exit %d:\n%s", code, res)
			}
			code, res = e.runArgs([]string{"flow", "pause", "--until", "2h", "--reason", "again"}, "", "SQSONCE_FLOW_MODE=observe")
			if code != 0 || !strings.Contains(res, `note: flow.mode is "observe" in this configuration: workers that run with it do not hold their intake for a pause`) {
				t.Errorf("a pause by a configuration that observes: exit %d:\n%s", code, res)
			}
			code, res = e.runArgs([]string{"flow", "resume", "--scope", part}, "")
			if code != 0 || !strings.Contains(res, "it was ramping up") {
				t.Errorf("resume of a partition value's scope: exit %d:\n%s", code, res)
			}
			if code, res = e.run("flow resume", ""); code != 0 {
				t.Fatalf("resume: exit %d:\n%s", code, res)
			}
			if docs, err := l.ListFlows(ctx); err != nil || len(docs) != 0 {
				t.Errorf("left after the resumes: %+v, %v", docs, err)
			}
		})
	}
}

// What `sqsonce flow` refuses, and what it says on a ledger without a
// pause.
func TestFlow_Refusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "cat >/dev/null\n")
	for _, tc := range []struct {
		args string
		code int
		want string
	}{
		{"flow", exitUsage, "Commands:"},
		{"flow frobnicate", exitUsage, `unknown flow command "frobnicate"`},
		{"flow pause --reason x", exitUsage, "--until is required"},
		{"flow pause --until 10m", exitUsage, "--reason is required"},
		{"flow pause --until 2020-01-02T03:04:05Z --reason x", exitUsage, "--until 2020-01-02T03:04:05Z is not in the future"},
		{"flow pause --until soon --reason x", exitUsage, `--until "soon": want an RFC 3339 time`},
		{"flow pause --until -5m --reason x", exitUsage, "is not in the future"},
		{"flow status extra", exitUsage, "flow status takes no arguments"},
		{"flow status", exitFailure, "ledger.db: no such file or directory"},
	} {
		if code, out := e.run(tc.args, ""); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
	if code, out := e.run("ledger init", ""); code != 0 {
		t.Fatalf("ledger init: %d %s", code, out)
	}
	for _, tc := range []struct {
		args string
		code int
		want string
	}{
		{"flow pause --until 100h --reason x", exitUsage, "would last 100h0m0s, from "},
		{"flow pause --until 100h --reason x", exitUsage, "not below the queue's message retention (96h0m0s)"},
		{"flow resume", exitOK, "is not paused: nothing to resume"},
		{"flow status", exitOK, "no scope is paused"},
		{"flow status", exitOK, "no worker in the ledger's registry"},
		{"flow status --scope " + strings.Repeat("s", 600), exitUsage, "--scope: flow scope"},
	} {
		if code, out := e.run(tc.args, ""); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
	// The queue is read for its retention: without it, no pause.
	if code, out := e.run("flow pause --until 10m --reason x", "", "SQSONCE_QUEUE_URL="+e.queue.URL+"-missing"); code != exitFailure ||
		!strings.Contains(out, "cannot read the queue's message retention") {
		t.Errorf("a pause of a missing queue: exit %d:\n%s", code, out)
	}
}

// The systemd status line says when the intake is paused.
func TestNotifyStatus_Paused(t *testing.T) {
	t.Parallel()
	got := workerStatus(worker.Health{Running: true, Alive: true, Ready: true, Paused: true}, worker.Stats{})
	if !strings.HasPrefix(got, "intake paused (sqsonce flow status);") {
		t.Errorf("status %q", got)
	}
}
