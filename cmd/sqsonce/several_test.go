package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
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

// logEvent is one line of a worker's JSON log about an operation.
type logEvent struct {
	msg, err string
}

// workerLog is what one worker's JSON log says about each operation key:
// the lines that name it (its "key" attribute, or a failed claim batch's
// error, which names its first key), in order.
type workerLog map[string][]logEvent

var claimErrorKey = regexp.MustCompile(`claim "([^"]+)"`)

func parseWorkerLog(out string) workerLog {
	l := workerLog{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg   string `json:"msg"`
			Key   string `json:"key"`
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		key := rec.Key
		if m := claimErrorKey.FindStringSubmatch(rec.Error); key == "" && m != nil {
			key = m[1]
		}
		if key != "" {
			l[key] = append(l[key], logEvent{rec.Msg, rec.Error})
		}
	}
	return l
}

// logged reports whether the worker logged, about key, a line that begins
// with one of msgs.
func (l workerLog) logged(key string, msgs ...string) bool {
	return l.count(key, msgs...) > 0
}

// count is the number of lines the worker logged about key that begin
// with one of msgs.
func (l workerLog) count(key string, msgs ...string) int {
	n := 0
	for _, e := range l[key] {
		for _, m := range msgs {
			if strings.HasPrefix(e.msg, m) {
				n++
				break
			}
		}
	}
	return n
}

// The lines of a worker's log that the explanations below read.
const (
	logComplete     = "operation complete" // at the debug level
	logTookOver     = "took over an operation whose lease had lapsed"
	logExtendFailed = "heartbeat: extending the lease failed"
	logClaimGone    = "heartbeat: the claim is no longer this worker's"
	logLeaseLost    = "lost the operation's lease while running"
	logNotRecorded  = "work done but not recorded complete"
	logInProgress   = "operation in progress under another claim"
	logUnconfirmed  = "could not confirm the claim's lease before starting the work"
	logClaimFailed  = "ledger claim failed: leaving the batch for redelivery"
	logClaimLost    = "lost the operation's claim before its work started"
)

// The windows docs/guarantees.md names (When an operation can run twice,
// Other caveats) in which the test accepts what it sees, each read from the
// workers' logs.
const (
	windowCrash = "window 1: its worker was killed (SIGKILL) with the operation in hand"
	// windowLease: the earlier attempt's worker could not renew the lease
	// in time (the ledger did not answer within a heartbeat) and then
	// found its claim gone (a heartbeat, the work cut off, or its
	// completion refused), and the later attempt's worker took the
	// operation over because the lease had lapsed.
	windowLease = "window 4: a lease that lapsed while the ledger did not answer in time, taken over by another claim"
	// caveatRedriven: a copy of an operation that ran, moved to the
	// dead-letter queue by SQS (no SqsonceReason) after its copies were put
	// back while the operation was in progress elsewhere or while the
	// ledger did not answer in time.
	caveatRedriven = "a duplicate that used up its receives while put back (the operation in progress elsewhere, or the ledger slow), dead-lettered by SQS's redrive"
)

// explainAgain says in which named window the operation key ran again, the
// i-th time of runs (all the workers that ran it, in order; i > 0), after
// it ran on runs[i-1], from the workers' logs (at the debug level), or
// returns "" when none explains it. killed is the worker that was killed,
// if any. No window explains a run after one of a worker that recorded
// every run of its own complete: it logged its completion as often as it
// ran the operation, and left no attempt unrecorded.
func explainAgain(logs map[string]workerLog, key string, runs []string, i int, killed string) string {
	prev, next := runs[i-1], runs[i]
	p, n := logs[prev], logs[next]
	if p.count(key, logComplete) >= countOf(runs, prev) {
		return ""
	}
	if prev == killed {
		return windowCrash
	}
	if p.logged(key, logExtendFailed) && p.logged(key, logClaimGone, logLeaseLost, logNotRecorded) && n.logged(key, logTookOver) {
		return windowLease
	}
	return ""
}

// countOf is the number of times w is in runs.
func countOf(runs []string, w string) int {
	n := 0
	for _, r := range runs {
		if r == w {
			n++
		}
	}
	return n
}

// explainRedriven says whether a copy of the operation key that ran,
// found in the dead-letter queue without sqsonce's reason, was moved there
// by SQS after the workers put its copies back (see caveatRedriven).
func explainRedriven(logs map[string]workerLog, key string) string {
	for _, l := range logs {
		if l.logged(key, logInProgress, logUnconfirmed, logClaimFailed, logClaimLost, logExtendFailed) {
			return caveatRedriven
		}
	}
	return ""
}

// logsAbout is what each worker logged about key, for a failure message.
func logsAbout(logs map[string]workerLog, key string) string {
	var b strings.Builder
	for _, w := range slices.Sorted(maps.Keys(logs)) {
		for _, e := range logs[w][key] {
			fmt.Fprintf(&b, "  %s: %s", w, e.msg)
			if e.err != "" {
				fmt.Fprintf(&b, " (%s)", e.err)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// severalLease is the workers' lease, their visibility timeout, which
// bounds each ledger call of a heartbeat too (a third of it) and each claim
// (half of it, 5 s at least): 3 s against the local servers, which answer
// within milliseconds (3 s rather than 2 leaves the heartbeats more room
// with three workers on two cores), and 15 s against moto, whose answers
// come seconds late on a loaded machine.
func severalLease(t *testing.T, backend string) time.Duration {
	if sqstest.Server(t) == "moto" || backend == BackendDynamoDB && dynamotest.Server(t) == "moto" {
		return 15 * time.Second
	}
	return 3 * time.Second
}

// TestMain_SeveralWorkers runs three workers on one queue and one shared
// ledger, with every operation delivered several times, then kills one of
// them in the middle of its work. Each operation runs once, or again only
// in a window docs/guarantees.md names, which the test reads from the workers' logs
// (as make chaos does from its workers' events): after the killed worker
// had it in hand, or when a lease lapsed while the ledger did not answer in
// time (a slow server on a loaded machine) and another claim took the
// operation over. A copy of an operation that ran reaches the dead-letter
// queue only by SQS's redrive after its copies were put back. Anything else
// fails the test, with what each worker logged about the operation.
func TestMain_SeveralWorkers(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			st := b.new(t)
			e := newSharedEnv(t, st, "", severalHandler)
			lease := severalLease(t, b.name)
			e.vars = append(e.vars, "SQSONCE_QUEUE_VISIBILITY_TIMEOUT="+lease.String())
			patience := max(60*time.Second, 6*lease) // for what waits on a lease
			e.initTable()
			db := st.open(t)
			ctx := context.Background()

			names := []string{"w1", "w2", "w3"}
			workers := map[string]*exec.Cmd{}
			logs := map[string]*syncBuffer{}
			for _, w := range names {
				// At the debug level each completion is logged: the
				// explanations below read them.
				workers[w], logs[w] = e.start("run --log-format json --log-level debug", "WORKER="+w)
			}
			readLogs := func() map[string]workerLog {
				l := map[string]workerLog{}
				for _, w := range names {
					l[w] = parseWorkerLog(logs[w].String())
				}
				return l
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
			waitStart, told := time.Now(), false
			e.waitFor("every operation to run", patience, func() bool {
				ran := counts(e.lines("effects"))
				if len(ran) == ops {
					return true
				}
				if !told && time.Since(waitStart) > patience-time.Second {
					// About to time out: say which did not run, and what the
					// dead-letter queue holds.
					told = true
					for i := range ops {
						if key := fmt.Sprintf("op-%02d", i); ran[key] == 0 {
							t.Logf("%s has not run; the workers' logs about it:\n%s", key, logsAbout(readLogs(), key))
						}
					}
					v, n := sqstest.Count(t, e.client, e.queue.DLQURL)
					t.Logf("the dead-letter queue holds %d visible, %d in flight", v, n)
				}
				return false
			})
			e.waitFor("the queue to empty", patience, e.queueEmpty)
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
			e.waitFor("the queue to empty again", patience, e.queueEmpty)

			// Each operation ran once, or again only in a window docs/guarantees.md
			// names, as the workers' logs show it; every copy whose payload
			// differs from the one that ran is in the dead-letter queue.
			wlogs := readLogs()
			executed := map[string]string{} // key -> the payload that ran
			ranBy := map[string][]string{}  // key -> the workers that ran it, in order
			for _, x := range e.execLines("effects") {
				ranBy[x.key] = append(ranBy[x.key], x.worker)
				if prev, ok := executed[x.key]; !ok {
					executed[x.key] = x.body
				} else if x.body != prev {
					t.Errorf("%s ran with two payloads: %s, then %s by %s", x.key, prev, x.body, x.worker)
				}
			}
			ranAgain := 0
			for key, runs := range ranBy {
				for i := 1; i < len(runs); i++ {
					why := explainAgain(wlogs, key, runs, i, "")
					if why == "" {
						t.Errorf("%s ran by %v: again by %s after %s, in no window docs/guarantees.md names; the workers' logs about it:\n%s", key, runs, runs[i], runs[i-1], logsAbout(wlogs, key))
						continue
					}
					ranAgain++
					t.Logf("%s ran by %v: %s", key, runs, why)
				}
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
			deadLettered, redriven := 0, 0
			withReason := map[string]bool{} // bodies of which sqsonce dead-lettered a copy
			for _, m := range sqstest.Drain(t, e.client, e.queue.DLQURL, 0, 0) {
				gotDLQ[aws.ToString(m.Body)]++
				if _, ok := m.MessageAttributes[worker.AttrReason]; ok {
					withReason[aws.ToString(m.Body)] = true
				}
				deadLettered++
			}
			wlogs = readLogs()
			for body, n := range gotDLQ {
				if wantDLQ[body] > 0 {
					if n > wantDLQ[body] {
						t.Logf("%s dead-lettered %d times, sent %d times", body, n, wantDLQ[body])
					}
					continue
				}
				// Not a conflicting copy: a copy of the payload that ran,
				// which only SQS's redrive may have moved there.
				var op struct{ ID string }
				json.Unmarshal([]byte(body), &op)
				why := ""
				if executed[op.ID] == body && !withReason[body] {
					why = explainRedriven(wlogs, op.ID)
				}
				if why == "" {
					t.Errorf("dead-letter queue holds %s (%d times), which ran or was never sent, and no named window explains it (dead-lettered by sqsonce: %v); the workers' logs about it:\n%s",
						body, n, withReason[body], logsAbout(wlogs, op.ID))
					continue
				}
				redriven += n
				t.Logf("dead-letter queue holds %s (%d times): %s", body, n, why)
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
			t.Logf("lease %v; %d operations, %d deliveries: %d executions (by worker %v; %d again in a named window), %d dead-lettered (%d duplicates redriven by SQS), after %v",
				lease, ops, len(first)+len(again), len(executed)+ranAgain, byWorker, ranAgain, deadLettered, redriven, time.Since(began).Round(time.Millisecond))
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
			// A handler it spawned just before it died writes its line in
			// started a moment later (later still on a loaded machine):
			// looked for again until well within a slow attempt's sleep,
			// so that none lives on to write its effect after another
			// worker's.
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				killHandlers()
			}
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

			e.waitFor("every operation of the killed worker to be taken over", patience, func() bool {
				done := counts(e.lines("effects"))
				for _, k := range killKeys {
					if done[k] == 0 {
						return false
					}
				}
				return true
			})
			e.waitFor("the queue to empty after the kill", patience, e.queueEmpty)
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
			// Each operation was done, and started or done again only in a
			// named window: after the killed worker had it in hand, or a
			// lease that lapsed while the ledger did not answer in time.
			wlogs = readLogs()
			twice := 0
			for _, k := range killKeys {
				s, f := starts[k], effects[k]
				if len(f) == 0 {
					t.Errorf("%s: started by %v, never done", k, s)
				}
				for _, runs := range [][]string{s, f} {
					for i := 1; i < len(runs); i++ {
						why := explainAgain(wlogs, k, runs, i, victim)
						switch why {
						case "":
							t.Errorf("%s: started by %v, done by %v: again by %s after %s, in no window docs/guarantees.md names (killed: %s); the workers' logs about it:\n%s",
								k, s, f, runs[i], runs[i-1], victim, logsAbout(wlogs, k))
						case windowCrash:
						default:
							t.Logf("%s: started by %v, done by %v: %s", k, s, f, why)
						}
					}
				}
				if len(s) > 1 || len(f) > 1 {
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

// The windows TestMain_SeveralWorkers accepts, read from logs written as
// the workers write them: each needs all of its evidence, and none covers a
// run after its worker recorded the operation complete.
func TestExplainAgain(t *testing.T) {
	t.Parallel()
	line := func(level, msg, key, err string) string {
		b, _ := json.Marshal(map[string]string{"time": "2026-01-01T00:00:00Z", "level": level, "msg": msg, "queue": "q", "message_id": "m-1", "key": key, "error": err})
		return string(b)
	}
	extendFailed := line("WARN", "heartbeat: extending the lease failed", "k", `extend "k": context deadline exceeded`)
	claimGone := line("WARN", "heartbeat: the claim is no longer this worker's", "k", `extend "k": operation owned by another claim`)
	notRecorded := line("ERROR", "work done but not recorded complete: leaving the message; its redelivery may run the work again", "k", "complete: operation owned by another claim")
	tookOver := line("WARN", "took over an operation whose lease had lapsed: its previous attempt may have been cut off, or may still be running on a host that stopped answering", "k", "")
	complete := line("DEBUG", "operation complete", "k", "")
	inProgress := line("INFO", "operation in progress under another claim: retry when it is settled or its lease lapses", "k", "")
	batchFailed := `{"time":"2026-01-01T00:00:00Z","level":"ERROR","msg":"ledger claim failed: leaving the batch for redelivery","queue":"q","error":"claim: claim \"k\": context deadline exceeded"}`
	other := line("WARN", "heartbeat: extending the lease failed", "other-key", "deadline")
	logs := func(w1, w2 []string) map[string]workerLog {
		return map[string]workerLog{"w1": parseWorkerLog(strings.Join(w1, "\n")), "w2": parseWorkerLog(strings.Join(w2, "\n"))}
	}
	for _, tc := range []struct {
		name   string
		logs   map[string]workerLog
		runs   []string
		killed string
		want   string
	}{
		{"LeaseLapsed", logs([]string{extendFailed, claimGone}, []string{tookOver}), []string{"w1", "w2"}, "", windowLease},
		{"LeaseLapsedCompletionRefused", logs([]string{extendFailed, notRecorded}, []string{tookOver}), []string{"w1", "w2"}, "", windowLease},
		{"LeaseLapsedSameWorker", logs([]string{extendFailed, claimGone, tookOver, complete}, nil), []string{"w1", "w1"}, "", windowLease},
		{"RecordedComplete", logs([]string{extendFailed, claimGone, complete}, []string{tookOver}), []string{"w1", "w2"}, "", ""},
		{"NoRenewalFailed", logs([]string{claimGone}, []string{tookOver}), []string{"w1", "w2"}, "", ""},
		{"RenewalFailedForAnotherKey", logs([]string{other, claimGone}, []string{tookOver}), []string{"w1", "w2"}, "", ""},
		{"ClaimNotLost", logs([]string{extendFailed}, []string{tookOver}), []string{"w1", "w2"}, "", ""},
		{"NoTakeover", logs([]string{extendFailed, claimGone}, nil), []string{"w1", "w2"}, "", ""},
		{"Killed", logs(nil, nil), []string{"w1", "w2"}, "w1", windowCrash},
		{"KilledAfterRecording", logs([]string{complete}, nil), []string{"w1", "w2"}, "w1", ""},
		{"AnotherKilled", logs(nil, nil), []string{"w1", "w2"}, "w2", ""},
	} {
		if got := explainAgain(tc.logs, "k", tc.runs, 1, tc.killed); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		logs map[string]workerLog
		want string
	}{
		{"PutBack", logs([]string{inProgress}, nil), caveatRedriven},
		{"ClaimBatchFailed", logs(nil, []string{batchFailed}), caveatRedriven},
		{"NeverPutBack", logs([]string{complete, other}, nil), ""},
	} {
		if got := explainRedriven(tc.logs, "k"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
