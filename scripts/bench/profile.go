package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The profiles: what the contenders' world is like.
const (
	// pStress: the local server straight, answering in well under a
	// millisecond, and handlers that do nothing.
	pStress = "stress"
	// pRealistic: every contender's SQS requests go through the latency
	// proxy (latencyproxy), and each message's handler waits -work.
	pRealistic = "realistic"
)

var allProfiles = []string{pStress, pRealistic}

// runConfig is one configuration of the contenders' comparison: a
// profile and a number of handlers.
type runConfig struct {
	profile     string
	concurrency int
	work        time.Duration // per message
}

func (c runConfig) String() string { return fmt.Sprintf("%s/%d", c.profile, c.concurrency) }

// runConfigs lists the configurations in the order they run: each
// profile, at each number of handlers.
func (o *options) runConfigs() []runConfig {
	var cs []runConfig
	for _, p := range o.profiles {
		for _, n := range o.concurrency {
			c := runConfig{profile: p, concurrency: n}
			if p == pRealistic {
				c.work = o.work
			}
			cs = append(cs, c)
		}
	}
	return cs
}

// scInstances returns sqs-consumer's Consumers at n handlers:
// -sqs-consumer-instances, or with 0 as many as hold n handlers, 10 each.
func (o *options) scInstances(n int) int {
	if o.scInstancesFlag > 0 {
		return o.scInstancesFlag
	}
	return max((n+9)/10, 1)
}

// deletersOf returns baseline's delete loops in c.
func (o *options) deletersOf(c runConfig) int {
	switch {
	case o.baselineDeleters > 0:
		return o.baselineDeleters
	case c.profile == pRealistic:
		return 16 // sqsonce's worker has up to 16 deletes in flight
	}
	return 1
}

// pollersOf returns the receive loops contender runs with in c, and the
// handlers it has.
func (o *options) pollersOf(contender string, c runConfig) (pollers, handlers int) {
	if contender == cSQSConsumer {
		n := o.scInstances(c.concurrency)
		return n, 10 * n // a Consumer receives and handles one batch at a time
	}
	return o.loops(c), c.concurrency
}

// loops returns the receive loops of sqsonce and baseline in c:
// -sqsonce-pollers, or with 0 as many as sqs-consumer has Consumers, so
// that every contender receives with as many loops.
func (o *options) loops(c runConfig) int {
	if o.pollers > 0 {
		return o.pollers
	}
	return o.scInstances(c.concurrency)
}

// ledgerPollers returns the receive loops of each worker process in the
// ledger comparison: -sqsonce-pollers, or 1.
func (o *options) ledgerPollers() int { return max(o.pollers, 1) }

// helperProc is a child process of the driver that serves the runs: the
// latency proxy or the http handler's endpoint. It prints one JSON line
// of its addresses on stdout, and exits when its standard input closes.
type helperProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addrs map[string]string
	log   string
	done  chan struct{}
}

// startHelper starts the program built for name with args and reads its
// addresses.
func (b *bench) startHelper(name string, args ...string) (*helperProc, error) {
	h := &helperProc{name: name, log: filepath.Join(b.dir, name+".log"), done: make(chan struct{})}
	h.cmd = exec.Command(b.exe[name], args...)
	logf, err := os.Create(h.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	h.cmd.Stderr = logf
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	h.cmd.Stdout = &firstLine{ch: lines}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { h.cmd.Wait(); close(h.done) }()
	select {
	case line := <-lines:
		if json.Unmarshal([]byte(line), &h.addrs) == nil && h.addrs["addr"] != "" {
			return h, nil
		}
	case <-h.done:
	case <-time.After(10 * time.Second):
	}
	h.stop()
	return nil, fmt.Errorf("%s did not say where it listens; its log: %s", name, tail(h.log))
}

// firstLine sends the first line written to it on ch, and discards the
// rest.
type firstLine struct {
	ch   chan<- string
	buf  []byte
	sent bool
}

func (w *firstLine) Write(p []byte) (int, error) {
	if !w.sent {
		w.buf = append(w.buf, p...)
		if i := strings.IndexByte(string(w.buf), '\n'); i >= 0 {
			w.ch <- string(w.buf[:i])
			w.sent, w.buf = true, nil
		}
	}
	return len(p), nil
}

// cpu returns the helper's CPU seconds so far, NaN when unknown.
func (h *helperProc) cpu() float64 {
	if h == nil {
		return math.NaN()
	}
	own, _, err := procCPU(h.cmd.Process.Pid)
	if err != nil {
		return math.NaN()
	}
	return own
}

// stop ends the helper: its standard input closes, then SIGTERM, then
// SIGKILL.
func (h *helperProc) stop() {
	if h == nil {
		return
	}
	h.stdin.Close()
	select {
	case <-h.done:
		return
	case <-time.After(2 * time.Second):
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-h.done
	}
}

// getJSON fetches a helper's figures.
func getJSON(url string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// proxyStats are the latency proxy's figures (latencyproxy's Stats).
type proxyStats struct {
	Actions map[string]*proxyAction `json:"actions"`
	Delays  []int64                 `json:"delays"`
	StepNS  int64                   `json:"step_ns"`
}

type proxyAction struct {
	Requests      int64   `json:"requests"`
	Errors        int64   `json:"errors"`
	DelayNS       int64   `json:"delay_ns"`
	QuickRequests int64   `json:"quick_requests"`
	QuickNS       int64   `json:"quick_ns"`
	RoundTrips    []int64 `json:"round_trips"`
}

// proxyStats reads the proxy's figures so far; nil without a proxy or
// when they cannot be read.
func (b *bench) proxyStats() *proxyStats {
	if b.proxy == nil {
		return nil
	}
	var s proxyStats
	if err := getJSON("http://"+b.proxy.addrs["control"]+"/stats", &s); err != nil {
		fmt.Fprintf(b.log, "bench: the latency proxy's figures: %v\n", err)
		return nil
	}
	return &s
}

func subHist(a, b []int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i]
		if i < len(b) {
			out[i] -= b[i]
		}
	}
	return out
}

// minus returns the figures of the time between before and s.
func (s *proxyStats) minus(before *proxyStats) *proxyStats {
	d := &proxyStats{Actions: map[string]*proxyAction{}, Delays: subHist(s.Delays, before.Delays), StepNS: s.StepNS}
	for k, a := range s.Actions {
		c := *a
		if p := before.Actions[k]; p != nil {
			c.Requests -= p.Requests
			c.Errors -= p.Errors
			c.DelayNS -= p.DelayNS
			c.QuickRequests -= p.QuickRequests
			c.QuickNS -= p.QuickNS
			c.RoundTrips = subHist(a.RoundTrips, p.RoundTrips)
		}
		if c.Requests > 0 {
			d.Actions[k] = &c
		}
	}
	return d
}

// histQuantile returns the q-quantile of a histogram of step-wide buckets,
// in ms (a bucket's middle), NaN when empty.
func histQuantile(h []int64, stepNS int64, q float64) float64 {
	var n int64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= max(rank, 1) {
			return (float64(i) + 0.5) * float64(stepNS) / 1e6
		}
	}
	return float64(len(h)) * float64(stepNS) / 1e6
}

// fillProxy puts what the proxy saw during a run into r.
func (r *result) fillProxy(s *proxyStats) {
	r.proxyReqs = map[string]int64{}
	var delayNS, n int64
	for k, a := range s.Actions {
		r.proxyReqs[k] = a.Requests
		delayNS += a.DelayNS
		n += a.Requests
	}
	if n > 0 {
		r.delayMean = float64(delayNS) / float64(n) / 1e6
	}
	r.delayP50 = histQuantile(s.Delays, s.StepNS, 0.50)
	r.delayP99 = histQuantile(s.Delays, s.StepNS, 0.99)
	if a := s.Actions["ReceiveMessage"]; a != nil && a.QuickRequests > 0 {
		r.rxRTT = float64(a.QuickNS) / float64(a.QuickRequests) / 1e6
		r.rxRTTp50 = histQuantile(a.RoundTrips, s.StepNS, 0.50)
	}
}

// configuredDelayMean is the mean delay the proxy is set to give.
func (o *options) configuredDelayMean() time.Duration {
	return time.Duration((1-o.latencyTailShare)*float64(o.latency) + o.latencyTailShare*0.875*float64(o.latencyTail))
}

// ceilingOf returns the most messages per second that can flow in r's
// configuration: each of P pollers brings at most 10 messages per receive
// round trip R (the run's measured mean receive round trip through the
// proxy, or the configured mean delay when not measured), and each of the
// handlers takes W per message: min(P × 10 / R, handlers / W).
func (b *bench) ceilingOf(r *result) (ceiling, rtt float64) {
	pollers, handlers := b.o.pollersOf(r.contender, r.cfg)
	rtt = r.rxRTT
	if math.IsNaN(rtt) || rtt <= 0 {
		rtt = float64(b.o.configuredDelayMean()) / 1e6
	}
	ceiling = float64(pollers) * 10 / (rtt / 1000)
	if r.cfg.work > 0 {
		ceiling = min(ceiling, float64(handlers)/r.cfg.work.Seconds())
	}
	return ceiling, rtt
}

// workStats reads the http handler endpoint's count of requests, -1 when
// unknown.
func (b *bench) workRequests() int64 {
	if b.workSrv == nil {
		return -1
	}
	var s struct {
		Requests int64 `json:"requests"`
	}
	if err := getJSON("http://"+b.workSrv.addrs["addr"]+"/stats", &s); err != nil {
		return -1
	}
	return s.Requests
}

// execFloor is how fast this machine starts processes, parallel at once:
// the best of execFloorReps tries of runs processes each.
type execFloor struct {
	parallel, runs int
	goRate         float64 // /bin/true through os/exec, from parallel goroutines, per second
	xargsRate      float64 // xargs -P parallel -n 1 /bin/true, per second; NaN without xargs
}

const execFloorReps = 3

// measureExecFloor runs /bin/true runs times, parallel at once, from Go
// (as sqsonce's exec handler starts its commands) and with xargs, each
// execFloorReps times, and keeps the best rates: other work on the
// machine only lowers them.
func measureExecFloor(ctx context.Context, runs, parallel int) (execFloor, error) {
	f := execFloor{parallel: parallel, runs: runs, xargsRate: math.NaN()}
	xargs, xargsErr := exec.LookPath("xargs")
	for range execFloorReps {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, parallel)
		t0 := time.Now()
		for range parallel {
			wg.Go(func() {
				for next.Add(1) <= int64(runs) {
					if err := exec.CommandContext(ctx, "/bin/true").Run(); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return f, fmt.Errorf("exec floor: /bin/true: %w", err)
		}
		f.goRate = max(f.goRate, float64(runs)/time.Since(t0).Seconds())

		if xargsErr == nil {
			cmd := exec.CommandContext(ctx, xargs, "-P", strconv.Itoa(parallel), "-n", "1", "/bin/true")
			cmd.Stdin = strings.NewReader(strings.Repeat("x\n", runs))
			t0 = time.Now()
			if err := cmd.Run(); err == nil {
				rate := float64(runs) / time.Since(t0).Seconds()
				if math.IsNaN(f.xargsRate) || rate > f.xargsRate {
					f.xargsRate = rate
				}
			}
		}
	}
	return f, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// scrapeSQSRequests reads sqsonce's admin /metrics for the SQS calls it
// made, by operation (sqsonce_sqs_requests_total); nil when it cannot.
func scrapeSQSRequests(addr string) map[string]int64 {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	counts := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	const prefix = `sqsonce_sqs_requests_total{operation="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		op, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err == nil {
			counts[op] = int64(v)
		}
	}
	if len(counts) == 0 {
		return nil
	}
	return counts
}

// goEnv returns env with the Go contenders' GOGC: -gogc, or none for
// "default".
func (o *options) goEnv(env []string) []string {
	env = envWithout(env, "GOGC")
	if o.gogc != "default" {
		env = append(env, "GOGC="+o.gogc)
	}
	return env
}

// envWithout returns env without the variables named name.
func envWithout(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
