package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
)

// severalHandler records each execution twice: a line in started when it
// begins (key, worker, process group, attempt) and a line in effects when
// its work is done (key, worker, payload). The first attempt of a slow-*
// key takes a few seconds, long enough to kill its worker in the middle.
const severalHandler = `body=$(cat)
echo "$SQSONCE_KEY $WORKER $$ $SQSONCE_ATTEMPT" >>"$STATE/started"
case "$SQSONCE_KEY" in
slow-*) if [ "$SQSONCE_ATTEMPT" = 1 ]; then sleep 4; fi ;;
esac
echo "$SQSONCE_KEY $WORKER $body" >>"$STATE/effects"
`

// execLine is one line of started or effects.
type execLine struct {
	key, worker string
	pid         int    // started: the handler's process group
	body        string // effects: the payload
}

func (e *procEnv) execLines(name string) []execLine {
	var out []execLine
	for _, l := range e.lines(name) {
		// The payload may be empty: a handler whose worker was killed
		// before it passed the body on reads none.
		f := strings.SplitN(l, " ", 3)
		if len(f) < 2 || name == "started" && len(f) < 3 {
			e.t.Fatalf("%s: malformed line %q", name, l)
		}
		x := execLine{key: f[0], worker: f[1]}
		if name == "started" {
			x.pid, _ = strconv.Atoi(strings.Fields(f[2])[0])
		} else if len(f) == 3 {
			x.body = f[2]
		}
		out = append(out, x)
	}
	return out
}

// warnings are the lines of a JSON log at level WARN or ERROR.
func warnings(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// workerStats is the summary a worker logs when it stops.
func workerStats(t *testing.T, out string) map[string]float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["msg"] != "worker stopped" {
			continue
		}
		st := map[string]float64{}
		for k, v := range rec {
			if f, ok := v.(float64); ok {
				st[k] = f
			}
		}
		return st
	}
	t.Fatalf("no summary in the worker's log:\n%s", out)
	return nil
}

// TestMain_SeveralWorkers runs three workers on one queue and one shared
// ledger, with every operation delivered several times, then kills one of
// them in the middle of its work.
func TestMain_SeveralWorkers(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			st := b.new(t)
			e := newSharedEnv(t, st, "", severalHandler)
			// The lease is the visibility timeout: 3 s rather than 2 leaves
			// the heartbeats more room with three workers on two cores.
			e.vars = append(e.vars, "SQSONCE_QUEUE_VISIBILITY_TIMEOUT=3s")
			e.initTable()
			db := st.open(t)
			ctx := context.Background()

			names := []string{"w1", "w2", "w3"}
			workers := map[string]*exec.Cmd{}
			logs := map[string]*syncBuffer{}
			for _, w := range names {
				workers[w], logs[w] = e.start("run --log-format json", "WORKER="+w)
			}
			t.Cleanup(func() {
				if t.Failed() {
					for _, w := range names {
						t.Logf("%s's warnings and errors:\n%s", w, warnings(logs[w].String()))
					}
				}
			})

			// Every operation twice in one batch of sends, so that copies
			// reach the workers at once; a few with a conflicting copy
			// among them; then every operation again once it is done, a
			// few more conflicting.
			const ops = 60
			sent := map[string][]string{} // key -> bodies sent
			var first, again []string
			for i := range ops {
				key := fmt.Sprintf("op-%02d", i)
				body := fmt.Sprintf(`{"id":"%s","v":1}`, key)
				first = append(first, body, body)
				sent[key] = append(sent[key], body, body)
				if i%12 == 0 {
					other := fmt.Sprintf(`{"id":"%s","v":2}`, key)
					first = append(first, other)
					sent[key] = append(sent[key], other)
				}
			}
			e.sendOps(first)
			e.waitFor("every operation to run", 60*time.Second, func() bool { return len(counts(e.lines("effects"))) == ops })
			e.waitFor("the queue to empty", 60*time.Second, e.queueEmpty)
			for i := range ops {
				key := fmt.Sprintf("op-%02d", i)
				body := fmt.Sprintf(`{"id":"%s","v":1}`, key)
				again = append(again, body)
				sent[key] = append(sent[key], body)
				if i%12 == 6 {
					other := fmt.Sprintf(`{"id":"%s","v":3}`, key)
					again = append(again, other)
					sent[key] = append(sent[key], other)
				}
			}
			e.sendOps(again)
			e.waitFor("the queue to empty again", 60*time.Second, e.queueEmpty)

			// Each operation ran once; every copy whose payload differs
			// from the one that ran is in the dead-letter queue.
			executed := map[string]string{}
			for _, x := range e.execLines("effects") {
				if prev, ok := executed[x.key]; ok {
					t.Errorf("%s ran twice: %s, then %s by %s", x.key, prev, x.body, x.worker)
				}
				executed[x.key] = x.body
			}
			// A dead letter is sent before its message is deleted: when the
			// delete comes after the message's visibility lapsed (a worker
			// slowed down), the message comes back and is dead-lettered
			// again. So each conflicting copy is there at least once.
			wantDLQ, gotDLQ := map[string]int{}, map[string]int{}
			conflicting := 0
			for key, bodies := range sent {
				for _, body := range bodies {
					if body != executed[key] {
						wantDLQ[body]++
						conflicting++
					}
				}
			}
			e.waitFor("the conflicts in the dead-letter queue", 30*time.Second, func() bool {
				v, _ := sqstest.Count(t, e.client, e.queue.DLQURL)
				return v >= conflicting
			})
			deadLettered := 0
			for _, m := range sqstest.Drain(t, e.client, e.queue.DLQURL, 0, 0) {
				gotDLQ[aws.ToString(m.Body)]++
				deadLettered++
			}
			for body, n := range gotDLQ {
				if wantDLQ[body] == 0 {
					t.Errorf("dead-letter queue holds %s, which ran or was never sent", body)
				} else if n > wantDLQ[body] {
					t.Logf("%s dead-lettered %d times, sent %d times", body, n, wantDLQ[body])
				}
			}
			for body, n := range wantDLQ {
				if gotDLQ[body] < n {
					t.Errorf("%s sent %d times with a conflicting payload, dead-lettered %d times", body, n, gotDLQ[body])
				}
			}
			for key := range sent {
				if rec, err := db.Get(ctx, key); err != nil || rec.State != ledger.StateComplete {
					t.Errorf("%s: record %+v, %v", key, rec, err)
				}
			}
			byWorker := map[string]int{}
			for _, x := range e.execLines("effects") {
				byWorker[x.worker]++
			}
			t.Logf("%d operations, %d deliveries: %d executions (by worker %v), %d dead-lettered, after %v",
				ops, len(first)+len(again), len(executed), byWorker, deadLettered, time.Since(began).Round(time.Millisecond))
			if t.Failed() {
				t.FailNow()
			}

			// Kill a worker while its handler runs: the first to start
			// the first attempt of a slow operation.
			const killOps = 30
			var third []string
			var killKeys []string
			for i := range killOps {
				key := fmt.Sprintf("kill-%02d", i)
				if i%3 == 0 {
					key = fmt.Sprintf("slow-%02d", i)
				}
				killKeys = append(killKeys, key)
				third = append(third, fmt.Sprintf(`{"id":"%s"}`, key))
			}
			e.sendOps(third)
			var victim string
			e.waitFor("a slow operation to start", 30*time.Second, func() bool {
				for _, x := range e.execLines("started") {
					if strings.HasPrefix(x.key, "slow-") {
						victim = x.worker
						return true
					}
				}
				return false
			})
			killedAt := time.Now()
			workers[victim].Process.Kill() // SIGKILL: nothing released, nothing recorded
			wait(t, workers[victim], 10*time.Second)
			// Its handlers go with it, as systemd or a container runtime
			// would end them.
			killHandlers := func() {
				for _, x := range e.execLines("started") {
					if x.worker == victim && x.pid > 0 {
						syscall.Kill(-x.pid, syscall.SIGKILL)
					}
				}
			}
			killHandlers()
			t.Cleanup(killHandlers)
			// What the victim had started and not finished when it died.
			inFlight := map[string]bool{}
			for _, x := range e.execLines("started") {
				if x.worker == victim {
					inFlight[x.key] = true
				}
			}
			for _, x := range e.execLines("effects") {
				if x.worker == victim {
					delete(inFlight, x.key)
				}
			}

			e.waitFor("every operation of the killed worker to be taken over", 60*time.Second, func() bool {
				done := counts(e.lines("effects"))
				for _, k := range killKeys {
					if done[k] == 0 {
						return false
					}
				}
				return true
			})
			e.waitFor("the queue to empty after the kill", 60*time.Second, e.queueEmpty)
			tookOver := time.Since(killedAt)
			takeovers := 0
			for _, w := range names {
				if w == victim {
					continue
				}
				workers[w].Process.Signal(syscall.SIGTERM)
				if code := wait(t, workers[w], 30*time.Second); code != exitOK {
					t.Fatalf("%s: exit %d:\n%s", w, code, logs[w])
				}
				takeovers += int(workerStats(t, logs[w].String())["takeovers"])
			}

			starts, effects := map[string][]string{}, map[string][]string{}
			for _, x := range e.execLines("started") {
				starts[x.key] = append(starts[x.key], x.worker)
			}
			for _, x := range e.execLines("effects") {
				effects[x.key] = append(effects[x.key], x.worker)
			}
			twice := 0
			for _, k := range killKeys {
				s, f := starts[k], effects[k]
				switch {
				case len(f) == 0 || len(f) > 2 || len(s) > 2:
					t.Errorf("%s: started by %v, done by %v: want once, twice at most", k, s, f)
				case (len(s) == 2 || len(f) == 2) && !slices.Contains(s, victim):
					t.Errorf("%s: started by %v, done by %v: twice, but not in the killed worker's hands (%s)", k, s, f, victim)
				}
				if len(s) == 2 || len(f) == 2 {
					twice++
				}
				if rec, err := db.Get(ctx, k); err != nil || rec.State != ledger.StateComplete {
					t.Errorf("%s: record %+v, %v", k, rec, err)
				} else if inFlight[k] && rec.Attempts < 2 {
					t.Errorf("%s was running in the killed worker, yet its record shows %d attempt(s)", k, rec.Attempts)
				}
				if inFlight[k] && slices.Equal(f, []string{victim}) {
					t.Errorf("%s: only the killed worker did it", k)
				}
			}
			if takeovers < len(inFlight) {
				t.Errorf("%d takeovers logged for %d operations running in the killed worker", takeovers, len(inFlight))
			}
			if v, n := sqstest.Count(t, e.client, e.queue.DLQURL); v+n != deadLettered {
				t.Errorf("%d messages dead-lettered after the kill", v+n-deadLettered)
			}
			s, err := db.Stats(ctx)
			if err != nil || s.Complete != ops+killOps || s.InProgress != 0 || s.Failed != 0 {
				t.Errorf("stats %+v, %v", s, err)
			}
			t.Logf("killed %s with %d operations running: %d takeovers, %d operations started twice, all %d complete %v after the kill; %v in all",
				victim, len(inFlight), takeovers, twice, killOps, tookOver.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		})
	}
}
