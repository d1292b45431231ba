package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// check prints what flow control will do, and warns where it cannot work
// or where a pause in the ledger grows old.
func TestMain_CheckFlow(t *testing.T) {
	t.Parallel()

	t.Run("Settings", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		scope := queueNameOf(e.queue.URL) + " " + filepath.Join(e.dir, "handler.sh")
		code, out := e.run("check", "")
		for _, want := range []string{
			`ok flow on; scope "` + scope + `" (its pause and limits hold for every worker sharing the ledger)`,
			"ok flow pause after 10 counted errors (unavailable) within 30s from 3 keys, 90 % of the attempts that ended, and no success; then one probe at a time, at most 10s apart",
			"ok flow limits none (flow.rate, flow.concurrency)",
			"ok flow deferral a message that cannot be held any longer",
			"is sent again to " + e.queue.URL + " with a delay, the original deleted once SQS took the copy: this host needs sqs:SendMessage on that queue",
		} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("exit %d, no %q in:\n%s", code, want, out)
			}
		}
		if strings.Contains(out, "flow paused") || strings.Contains(out, "warn flow") {
			t.Errorf("a flow warning without a reason:\n%s", out)
		}

		code, out = e.run("check", "", "SQSONCE_FLOW_RATE=0.5", "SQSONCE_FLOW_BURST=2", "SQSONCE_FLOW_PAUSE_ON=unavailable retry",
			`SQSONCE_FLOW_PARTITION=[{"pointer": "/tenant", "rate": 5}, {"attribute": "Region", "concurrency": 2}]`, "SQSONCE_FLOW_MODE=observe")
		if code != 0 {
			t.Errorf("warnings alone must not fail: exit %d:\n%s", code, out)
		}
		for _, want := range []string{
			`ok flow observe (flow.mode): what the pause and the limits would do is logged and counted (sqsonce_flow_observed_total), not done; scope "` + scope + `"`,
			"after 10 counted errors (unavailable, retry) within 30s",
			"ok flow limits rate 0.5/s (burst 2)",
			"ok flow partition #1 pointer /tenant: rate 5/s (burst 1) for each value; a message without one is under the scope's limits only",
			"ok flow partition #2 attribute Region: concurrency 2 in this worker for each value",
			"warn flow rate flow.rate 0.5/s starts 1 of a full receive (queue.max_messages 10) within the visibility timeout (2s): the rest of each receive waits, held or deferred; raise queue.visibility_timeout to 20s, or lower queue.max_messages to 1",
		} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		// A rate that starts a full receive in time: no warning.
		if _, out := e.run("check", "", "SQSONCE_FLOW_RATE=5"); strings.Contains(out, "warn flow rate") {
			t.Errorf("a rate of 5/s with visibility 2s warned for 10 messages:\n%s", out)
		}

		_, out = e.run("check", "", "SQSONCE_FLOW_PAUSE=false", "SQSONCE_FLOW_CONCURRENCY=4")
		for _, want := range []string{"fail config", "flow.concurrency: handler.concurrency already bounds one process; flow.concurrency needs a shared ledger"} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("flow.concurrency on bbolt: no %q in:\n%s", want, out)
			}
		}
		_, out = e.run("check", "", "SQSONCE_FLOW_PAUSE=false")
		if !strings.Contains(squash(out), "ok flow pause none (flow.pause = false)") || strings.Contains(out, "flow deferral") {
			t.Errorf("no pause, no limits: nothing is deferred:\n%s", out)
		}
		_, out = e.run("check", "", "SQSONCE_FLOW_MODE=off")
		if !strings.Contains(squash(out), "ok flow off (flow.mode): no pause and no limits") || strings.Contains(out, "flow pause") {
			t.Errorf("off:\n%s", out)
		}

		fifo := sqstest.CreateQueue(t, e.client, sqstest.QueueOptions{FIFO: true})
		_, out = e.run("check", "", "SQSONCE_QUEUE_URL="+fifo.URL)
		if !strings.Contains(squash(out), "ok flow deferral none on a FIFO queue: its messages are never sent again") {
			t.Errorf("FIFO:\n%s", out)
		}
	})

	// On a shared ledger the rate lives with its bucket: check compares
	// the configured limits with those the bucket holds.
	for _, b := range sharedBackends {
		t.Run("RateBucket/"+b.name, func(t *testing.T) {
			t.Parallel()
			st := b.new(t)
			e := newSharedEnv(t, st, "", "exit 0\n")
			e.initTable()
			scope := queueNameOf(e.queue.URL) + " " + filepath.Join(e.dir, "handler.sh")
			_, out := e.run("check", "", "SQSONCE_FLOW_RATE=40")
			if want := `ok flow rate bucket "` + scope + `": no worker has taken its tokens yet`; !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
			db := st.open(t)
			if _, err := db.(worker.FlowLedger).Reserve(context.Background(), ledger.Reservation{Buckets: []ledger.Bucket{{Name: scope, Rate: 40, Burst: 1}},
				Tokens: []ledger.Token{{Buckets: []int{0}}}}); err != nil {
				t.Fatal(err)
			}
			_, out = e.run("check", "", "SQSONCE_FLOW_RATE=40")
			if want := `ok flow rate bucket "` + scope + `" holds rate 40/s (burst 1), as configured`; !strings.Contains(squash(out), want) || strings.Contains(out, "warn flow rate bucket") {
				t.Errorf("no %q in:\n%s", want, out)
			}
			_, out = e.run("check", "", "SQSONCE_FLOW_RATE=50", "SQSONCE_FLOW_BURST=2")
			if want := `warn flow rate bucket "` + scope + `" holds rate 40/s (burst 1), from the worker that last took its tokens; this configuration says 50/s (burst 2)`; !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		})
	}

	t.Run("Paused", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		if code, out := e.run("ledger init", ""); code != 0 {
			t.Fatalf("ledger init: %d %s", code, out)
		}
		scope := queueNameOf(e.queue.URL) + " " + filepath.Join(e.dir, "handler.sh")
		if code, out := e.run("flow pause --until 30m --reason deploying", ""); code != 0 {
			t.Fatalf("flow pause: %d %s", code, out)
		}
		code, out := e.run("check", "")
		want := regexp.MustCompile(`warn flow paused "` + regexp.QuoteMeta(scope) + `" is paused by hand by \S+ since \S+ \(deploying\): \d+s old; ` +
			"`sqsonce flow status` shows it, `sqsonce flow resume` ends it")
		if code != 0 || !want.MatchString(squash(out)) {
			t.Errorf("exit %d, no %s in:\n%s", code, want, out)
		}

		// Paused automatically three days ago, a partition value for a
		// day: the first's age approaches the queue's retention (4 days).
		db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		put := func(scope string, since time.Time) {
			r, err := db.GetFlow(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(worker.PauseDoc{State: worker.PausePaused, Since: since, Reason: "the downstream is down: 503", By: "auto: w1"})
			if _, err := db.PutFlow(ctx, ledger.FlowDoc{Scope: scope, Data: data, TTL: time.Hour}, r.Doc.Version); err != nil {
				t.Fatal(err)
			}
		}
		put(scope, time.Now().Add(-72*time.Hour))
		put(scope+" | pointer /tenant = t-1", time.Now().Add(-24*time.Hour))
		put("another-queue handler", time.Now().Add(-72*time.Hour))
		db.Close()
		_, out = e.run("check", "")
		for _, want := range []string{
			`warn flow paused "` + scope + `" is paused automatically since`,
			"72h0m0s old, approaching the queue's message retention (96h0m0s): messages expire in SQS after it, paused or not",
			`warn flow paused "` + scope + ` | pointer /tenant = t-1" is paused automatically since`,
			"24h0m0s old; `sqsonce flow status` shows it",
		} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		if strings.Contains(out, "another-queue") {
			t.Errorf("check warned of another scope's pause:\n%s", out)
		}
	})

	// --sample reads a message as the worker would, and asks nothing of
	// AWS: here there is no region, no credentials and no queue.
	t.Run("Sample", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		sample := func(body string) string {
			p := filepath.Join(dir, "sample-"+strings.NewReplacer("/", "", "{", "", "}", "", `"`, "", ":", "", ",", "").Replace(body)+".json")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		env := map[string]string{
			"SQSONCE_QUEUE_URL":      "http://127.0.0.1:1/000000000000/orders",
			"SQSONCE_LEDGER_PATH":    filepath.Join(dir, "ledger.db"),
			"SQSONCE_HANDLER_TYPE":   "http",
			"SQSONCE_HANDLER_URL":    "https://partner.example/api?token=x",
			"SQSONCE_FLOW_PARTITION": `[{"pointer": "/tenant", "rate": 5}, {"attribute": "Region", "concurrency": 2}]`,
			"AWS_REGION":             "", "AWS_ACCESS_KEY_ID": "", "AWS_CONFIG_FILE": filepath.Join(dir, "none"),
		}
		code, out := runMain("check --sample "+sample(`{"id":"p-1","tenant":"t-7"}`)+" --sample-attribute Region=eu", env)
		for _, want := range []string{
			`ok flow on; scope "orders https://partner.example/api"`,
			`ok sample key ` + filepath.Join(dir, "sample-idp-1tenantt-7.json") + `: "p-1"`,
			`ok sample partition #1 pointer /tenant = "t-7": limited on its own, as "orders https://partner.example/api | pointer /tenant = t-7"`,
			`ok sample partition #2 attribute Region = "eu": limited on its own, as "orders https://partner.example/api | attribute Region = eu"`,
		} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("exit %d, no %q in:\n%s", code, want, out)
			}
		}
		if code != 0 || regexp.MustCompile(`(?m)^(ok|warn|fail) +(region|credentials|queue|ledger|handler) `).MatchString(out) {
			t.Errorf("exit %d: --sample checked more than the configuration and the sample:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "ledger.db")); !os.IsNotExist(err) {
			t.Errorf("--sample made a ledger: %v", err)
		}

		code, out = runMain("check --sample "+sample(`{"id":"p-2","tenant":{"name":"x"}}`), env)
		for _, want := range []string{
			`warn sample partition #1 pointer /tenant: none (pointer /tenant: value is an object, not a string or number): under the scope's limits only, in the "(none)" partition`,
			`warn sample partition #2 attribute Region: none (the message has no attribute "Region")`,
		} {
			if code != 0 || !strings.Contains(squash(out), want) {
				t.Errorf("exit %d, no %q in:\n%s", code, want, out)
			}
		}
		code, out = runMain("check --sample "+sample(`{"tenant":"t-7"}`), env)
		if code != exitFailure || !strings.Contains(squash(out), `fail sample key`) || !strings.Contains(out, `no field "id"`) ||
			!strings.Contains(out, "the worker would dead-letter it") {
			t.Errorf("a sample without a key: exit %d:\n%s", code, out)
		}
		if code, out := runMain("check --sample "+filepath.Join(dir, "missing.json"), env); code != exitFailure || !strings.Contains(out, "missing.json: no such file") {
			t.Errorf("a missing sample: exit %d:\n%s", code, out)
		}
		if code, out := runMain("check --sample-attribute Region=eu", env); code != exitUsage || !strings.Contains(out, "--sample-attribute needs --sample") {
			t.Errorf("an attribute without a sample: exit %d:\n%s", code, out)
		}
		if code, out := runMain("check --sample x --sample-attribute Region", env); code != exitUsage || !strings.Contains(out, `want NAME=VALUE, got "Region"`) {
			t.Errorf("an attribute without a value: exit %d:\n%s", code, out)
		}
	})
}
