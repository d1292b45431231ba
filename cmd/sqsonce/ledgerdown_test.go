package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

var receivesMetric = regexp.MustCompile(`(?m)^sqsonce_sqs_requests_total\{operation="ReceiveMessage"\} (\d+)$`)

// receives is how many ReceiveMessage calls the worker has made, from its
// /metrics.
func receives(t *testing.T, base string) int {
	t.Helper()
	code, body := get(t, base+"/metrics")
	m := receivesMetric.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("/metrics: %d, no ReceiveMessage count:\n%s", code, body)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestMain_SharedLedgerLost takes a running worker's shared store away and
// gives it back. The worker reaches the store through a TCP proxy that the
// test owns: refusing new connections and cutting the open ones is a store
// that went down (a failover); holding every byte (silent) is a store
// behind a network partition, which answers nothing and refuses nothing.
func TestMain_SharedLedgerLost(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		for _, how := range []string{"Refused", "Silent"} {
			if how == "Silent" && b.name != BackendPostgres {
				// Each silent run waits out the store's timeout (10 s). What
				// it checks beyond the refused run (a scrape that does not
				// wait on the store) is the same code for every backend;
				// the DynamoDB ledger's own tests give it requests that
				// get no answer.
				continue
			}
			t.Run(b.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				st := b.new(t)
				// Bytes for bytes: PostgreSQL's protocol or DynamoDB's HTTP alike.
				var addr string
				var lose, restore func()
				var silent *stallProxy
				if how == "Refused" {
					proxy := pgtest.NewProxy(t, st.addr)
					addr, lose, restore = proxy.Addr(), func() { proxy.Refuse(true); proxy.Cut() }, func() { proxy.Refuse(false) }
				} else {
					silent = newStallProxy(t, st.addr)
					addr, lose, restore = silent.Addr(), silent.Stall, silent.Resume
				}
				e := newSharedEnv(t, st, addr, "cat >/dev/null\necho \"$SQSONCE_KEY\" >>\"$STATE/effects\"\n")
				e.initTable()
				cmd, out := e.start("run --log-format json")
				base := "http://" + adminAddr(t, e, out)

				ops := func(prefix string, n int) []string {
					var bodies []string
					for i := range n {
						bodies = append(bodies, fmt.Sprintf(`{"id":"%s-%02d"}`, prefix, i))
					}
					return bodies
				}
				e.sendOps(ops("before", 10))
				// A store shared with other tests (moto under make interop)
				// can be slow to start with: what is tested comes after.
				for deadline := time.Now().Add(90 * time.Second); len(e.lines("effects")) != 10; time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						lines := strings.Split(out.String(), "\n")
						t.Fatalf("timed out after 90s waiting for the first operations: %d of 10 ran; the worker's last lines:\n%s", len(e.lines("effects")), strings.Join(lines[max(0, len(lines)-60):], "\n"))
					}
				}
				e.waitFor("the queue to empty", 30*time.Second, e.queueEmpty)
				e.waitFor("readiness", 15*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
				// The table's counts, read in the background of a scrape.
				const counted = `sqsonce_ledger_records{state="complete"} 10`
				e.waitFor("the counts in /metrics", 30*time.Second, func() bool { _, body := get(t, base+"/metrics"); return strings.Contains(body, counted) })

				lose()
				lostAt := time.Now()
				e.sendOps(ops("during", 20))
				const claimsFailed = "the ledger cannot record claims"
				if silent != nil {
					// A claim waits on the silent store: a scrape must not
					// wait on it too, or the metrics are lost (the scrape
					// times out) when they are needed most.
					e.waitFor("a claim to wait on the silent store", 30*time.Second, func() bool {
						_, body := get(t, base+"/readyz")
						return silent.Held() > 0 && !strings.Contains(body, `"in_flight":0`)
					})
					if strings.Contains(out.String(), claimsFailed) {
						t.Fatal("the claim failed before the scrape could be made")
					}
					scrapeAt := time.Now()
					receives(t, base)
					if strings.Contains(out.String(), claimsFailed) {
						t.Errorf("a scrape of /metrics waited on the silent store (%v), until the claim that waited on it had failed", time.Since(scrapeAt).Round(time.Millisecond))
					}
				}
				var body string
				e.waitFor("/readyz to say not ready", 60*time.Second, func() bool {
					var code int
					code, body = get(t, base+"/readyz")
					return code == 503
				})
				t.Logf("not ready %v after the store went away: %s", time.Since(lostAt).Round(time.Millisecond), strings.TrimSpace(body))
				if !strings.Contains(body, `"ledger_down":true`) {
					t.Errorf("/readyz does not say why it is not ready: %s", body)
				}
				if code, body := get(t, base+"/healthz"); code != 200 {
					t.Fatalf("/healthz while waiting for the ledger: %d %s: a liveness probe would restart a worker that waits on purpose", code, body)
				}

				// While the store is away: nothing runs, nothing is deleted,
				// nothing is received (but the one receive that may have been
				// under way when the claims failed).
				before := receives(t, base)
				for range 8 {
					if got := len(e.lines("effects")); got != 10 {
						t.Fatalf("%d operations ran without a ledger", got-10)
					}
					if v, n := sqstest.Count(t, e.client, e.queue.URL); v+n != 20 {
						t.Fatalf("%d visible + %d in flight without a ledger, want the 20 messages kept", v, n)
					}
					if v, n := sqstest.Count(t, e.client, e.queue.DLQURL); v+n != 0 {
						t.Fatalf("%d messages dead-lettered without a ledger", v+n)
					}
					if code, body := get(t, base+"/readyz"); code != 503 {
						t.Fatalf("/readyz while the store is away: %d %s", code, body)
					}
					time.Sleep(250 * time.Millisecond)
				}
				if after := receives(t, base); after-before > 1 {
					t.Fatalf("%d receives while the ledger was down", after-before)
				}
				if _, body := get(t, base+"/metrics"); !strings.Contains(body, counted) {
					t.Errorf("/metrics lost the last counts while the store was away")
				}

				restore()
				backAt := time.Now()
				e.waitFor("the worker to resume by itself", 60*time.Second, func() bool { return len(e.lines("effects")) == 30 })
				resumed := time.Since(backAt)
				e.waitFor("the queue to empty", 30*time.Second, e.queueEmpty)
				e.waitFor("readiness again", 30*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
				if _, body := get(t, base+"/readyz"); !strings.Contains(body, `"ledger_down":false`) {
					t.Errorf("/readyz with the ledger back: %s", body)
				}

				for key, n := range counts(e.lines("effects")) {
					if n != 1 {
						t.Errorf("%s ran %d times", key, n)
					}
				}
				db := st.open(t)
				for _, prefix := range []string{"before", "during"} {
					n := 10
					if prefix == "during" {
						n = 20
					}
					for i := range n {
						key := fmt.Sprintf("%s-%02d", prefix, i)
						if rec, err := db.Get(context.Background(), key); err != nil || rec.State != ledger.StateComplete {
							t.Errorf("%s: record %+v, %v", key, rec, err)
						}
					}
				}
				if v, n := sqstest.Count(t, e.client, e.queue.DLQURL); v+n != 0 {
					t.Errorf("%d messages dead-lettered", v+n)
				}
				cmd.Process.Signal(syscall.SIGTERM)
				if code := wait(t, cmd, 30*time.Second); code != exitOK {
					t.Fatalf("exit %d:\n%s", code, out)
				}
				if !strings.Contains(out.String(), "the ledger records claims again") {
					t.Errorf("no word of the ledger's return in the log:\n%s", out)
				}
				stats := workerStats(t, out.String())
				t.Logf("store away %v; back, all 20 ran %v later; %v claim failures, %v received in all",
					backAt.Sub(lostAt).Round(time.Millisecond), resumed.Round(time.Millisecond), stats["claim_failures"], stats["received"])
			})
		}
	}
}

// The status systemd shows says that the worker waits for its ledger.
func TestNotifyStatus_LedgerDown(t *testing.T) {
	t.Parallel()
	got := workerStatus(worker.Health{Running: true, Alive: true, LedgerDown: true}, worker.Stats{})
	if !strings.HasPrefix(got, "waiting for the ledger") {
		t.Fatalf("status %q", got)
	}
	if got := workerStatus(worker.Health{Running: true, Alive: true, Ready: true}, worker.Stats{}); !strings.HasPrefix(got, "consuming") {
		t.Fatalf("status %q", got)
	}
}
