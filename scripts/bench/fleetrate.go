package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/scripts/bench/internal/benchkit"
)

// The fleet-wide rate (-fleet-rate): -fleet-workers `sqsonce run`
// processes of the binary on one queue and one PostgreSQL ledger table
// (made with `sqsonce ledger init`), with [flow] rate = -fleet-rate and
// burst = 1, on a backlog of -fleet-n messages sent before they start.
// Their http handler POSTs to an endpoint in the driver that answers 200
// at once and records when it was called: the calls are the starts the
// rate allows. Each worker's URL has a query of its own (?worker=N), which
// the flow scope leaves out, so that the workers share one rate and the
// endpoint still tells them apart.

// fleetResult is what the fleet's run measured at its handler.
type fleetResult struct {
	rate        float64
	workers     int
	messages    int
	calls       int           // POSTs the endpoint answered
	keys        int           // distinct operations among them
	byWorker    []int         // calls per worker, in the workers' order
	first, last time.Time     // the first and the last call
	mostWhole   int           // most calls in a whole second of wall time
	mostSliding int           // most calls in any second, from any call on
	startup     time.Duration // first worker started to first call
	wall        time.Duration // first worker started to the queue empty
	logs        []string      // the workers' logs, for errors
}

// span is the time from the first call to the last.
func (f *fleetResult) span() time.Duration { return f.last.Sub(f.first) }

// sustained is the calls per second while the backlog waited: calls ÷
// the time from the first call to the last.
func (f *fleetResult) sustained() float64 { return float64(f.calls) / f.span().Seconds() }

func (f *fleetResult) line() string {
	return fmt.Sprintf("%d calls (%d operations; per worker %s) in %.1fs from the first to the last, start-up %dms: most in a whole second %d (%.2f×), in a sliding second %d (%.2f×), sustained %.1f/s (%.3f×) at a rate of %g",
		f.calls, f.keys, joinInts(f.byWorker), f.span().Seconds(), f.startup.Milliseconds(),
		f.mostWhole, float64(f.mostWhole)/f.rate, f.mostSliding, float64(f.mostSliding)/f.rate, f.sustained(), f.sustained()/f.rate, f.rate)
}

// callLog is the fleet's endpoint: it records each call's time, key and
// worker.
type callLog struct {
	mu       sync.Mutex
	at       []time.Time
	keys     map[string]int
	byWorker map[int]int
}

func (c *callLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var body struct {
		ID string `json:"id"`
	}
	err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
	worker, _ := strconv.Atoi(r.URL.Query().Get("worker"))
	c.mu.Lock()
	c.at = append(c.at, at)
	if err == nil {
		c.keys[body.ID]++
	}
	c.byWorker[worker]++
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// mostInSeconds returns the most of the sorted times at in any whole
// second of wall time (Unix seconds), and in any second that starts at
// one of them.
func mostInSeconds(at []time.Time) (whole, sliding int) {
	bySecond := map[int64]int{}
	for _, t := range at {
		bySecond[t.Unix()]++
	}
	for _, n := range bySecond {
		whole = max(whole, n)
	}
	j := 0
	for i := range at {
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		sliding = max(sliding, j-i)
	}
	return whole, sliding
}

// runFleetRate runs the fleet on a fresh queue and a fresh table, and
// stops its workers (SIGTERM, then SIGKILL) whatever the outcome.
func (b *bench) runFleetRate(ctx context.Context) (*fleetResult, error) {
	o := b.o
	b.seq++
	runID := b.seq
	runDir := filepath.Join(b.dir, fmt.Sprintf("run-%02d-fleet-rate", runID))
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("bench-%d-fleet-%s", runID, strconv.FormatInt(time.Now().UnixNano(), 36))
	q, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		return nil, fmt.Errorf("create queue: %w", err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	defer b.client.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: &queueURL})

	calls := &callLog{keys: map[string]int{}, byWorker: map[int]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: calls, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	table := fmt.Sprintf("bench_fleet%d", runID)
	configs := make([]string, o.fleetWorkers)
	for i := range configs {
		configs[i] = filepath.Join(runDir, fmt.Sprintf("sqsonce-%d.toml", i+1))
		err := os.WriteFile(configs[i], fmt.Appendf(nil, `[queue]
url = %q
endpoint = %q
region = %q
wait_time = "20s"
max_messages = 10
visibility_timeout = "60s"
pollers = 1

[key]
from = "body"
pointer = "/id"

[ledger]
backend = "postgres"
url = %q
table = %q

[handler]
type = "http"
url = %q
concurrency = 16

[flow]
rate = %s
burst = 1

[admin]
listen = ""
`, queueURL, b.endpoint, benchkit.Region, b.shared.pgURL, table, fmt.Sprintf("http://%s/?worker=%d", ln.Addr(), i+1),
			strconv.FormatFloat(o.fleetRate, 'g', -1, 64)), 0o600)
		if err != nil {
			return nil, err
		}
	}
	env := o.goEnv(append(os.Environ(), "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench", "AWS_EC2_METADATA_DISABLED=true"))
	initCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	initCmd := exec.CommandContext(initCtx, b.fleetBin, "ledger", "init", "--config", configs[0])
	initCmd.Env = env
	if out, err := initCmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("sqsonce ledger init: %v: %s", err, out)
	}
	defer b.dropPGTable(context.WithoutCancel(ctx), table)

	b.waitQuiet(ctx)
	if _, err := b.fill(ctx, queueURL, runID, o.fleetMessages, 1); err != nil {
		return nil, err
	}
	if n, err := b.queueCount(ctx, queueURL); err != nil || n != o.fleetMessages {
		return nil, fmt.Errorf("queue holds %d messages after the fill, want %d (%v)", n, o.fleetMessages, err)
	}

	f := &fleetResult{rate: o.fleetRate, workers: o.fleetWorkers, messages: o.fleetMessages}
	type exit struct {
		i   int
		err error
	}
	exited := make(chan exit, o.fleetWorkers)
	var procs []*exec.Cmd
	running := 0
	// stop ends the workers still running and keeps each one's exit.
	waitErrs := make([]error, o.fleetWorkers)
	stop := func() {
		if running == 0 {
			return
		}
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		kill := time.After(60 * time.Second)
		for running > 0 {
			select {
			case e := <-exited:
				running--
				waitErrs[e.i] = e.err
			case <-kill:
				for _, p := range procs {
					p.Process.Kill()
				}
				kill = nil
			}
		}
	}
	defer stop()
	t0 := time.Now()
	for i, config := range configs {
		log := filepath.Join(runDir, fmt.Sprintf("stderr-%d.log", i+1))
		f.logs = append(f.logs, log)
		lf, err := os.Create(log)
		if err != nil {
			return nil, err
		}
		defer lf.Close()
		cmd := exec.Command(b.fleetBin, "run", "--config", config, "--log-format", "json")
		cmd.Env, cmd.Stdout, cmd.Stderr = env, lf, lf
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start sqsonce run: %w", err)
		}
		procs = append(procs, cmd)
		running++
		go func() { exited <- exit{i, cmd.Wait()} }()
	}

	// The workers run until stopped: wait for the queue to be empty (a
	// message is deleted after its completion, so after its call).
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	deadline := time.NewTimer(o.runTimeout)
	defer deadline.Stop()
	select {
	case err := <-b.waitEmpty(waitCtx, queueURL):
		if err != nil {
			return nil, fmt.Errorf("the fleet's run was interrupted: %w", err)
		}
	case e := <-exited:
		running--
		return nil, fmt.Errorf("worker %d exited early (%v); its log: %s", e.i+1, e.err, tail(f.logs[e.i]))
	case <-deadline.C:
		return nil, fmt.Errorf("the fleet did not finish %d messages within %v; the first worker's log: %s", o.fleetMessages, o.runTimeout, tail(f.logs[0]))
	}
	f.wall = time.Since(t0)
	stop()
	for i, err := range waitErrs {
		if err != nil {
			return nil, fmt.Errorf("worker %d: %v; its log: %s", i+1, err, tail(f.logs[i]))
		}
	}

	calls.mu.Lock()
	defer calls.mu.Unlock()
	at := slices.Clone(calls.at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	f.calls, f.keys = len(at), len(calls.keys)
	for i := range o.fleetWorkers {
		f.byWorker = append(f.byWorker, calls.byWorker[i+1])
	}
	if f.calls < 2 {
		return nil, fmt.Errorf("the endpoint was called %d times for %d messages", f.calls, o.fleetMessages)
	}
	f.first, f.last = at[0], at[len(at)-1]
	f.startup = f.first.Sub(t0)
	f.mostWhole, f.mostSliding = mostInSeconds(at)
	if f.keys != o.fleetMessages {
		return nil, fmt.Errorf("the endpoint saw %d operations in %d calls, want %d: %s", f.keys, f.calls, o.fleetMessages, f.line())
	}
	return f, nil
}

// writeFleetRate writes the fleet-wide rate's section of the report.
func writeFleetRate(w io.Writer, b *bench, f *fleetResult) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	p("## A fleet-wide rate on PostgreSQL\n\n")
	p("%d `sqsonce run` processes (`%s`) on one queue of the local server and one PostgreSQL ledger table (made with `sqsonce ledger init`), "+
		"`[flow] rate = %g, burst = 1`, 16 handlers and one receive loop each; an http handler whose endpoint, in the driver, answers 200 at once and records when it was called; "+
		"%d messages sent before the workers started. Whole seconds are the driver's wall clock's; a sliding second starts at any call.\n\n",
		f.workers, b.o.bin, f.rate, f.messages)
	p("| workers | rate / s | calls | operations | calls per worker | first → last call s | most in a whole second | most in a sliding second | sustained / s | start-up ms |\n")
	p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	p("| %d | %g | %d | %d | %s | %.2f | %d | %d | %.1f | %d |\n\n", f.workers, f.rate, f.calls, f.keys, joinInts(f.byWorker),
		f.span().Seconds(), f.mostWhole, f.mostSliding, f.sustained(), f.startup.Milliseconds())
	whole, sliding, sustained := float64(f.mostWhole)/f.rate, float64(f.mostSliding)/f.rate, f.sustained()/f.rate
	p("- held within %.2f× in every whole second (bound 1.1×) — %s\n", whole, verdict(whole <= 1.1))
	p("- at most %.2f× in any sliding second\n", sliding)
	p("- sustained %.3f× of the rate (want ≥ 0.95×): %d calls ÷ %.2f s from the first to the last — %s\n\n", sustained, f.calls, f.span().Seconds(), verdict(sustained >= 0.95))
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}
