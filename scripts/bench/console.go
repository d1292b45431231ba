package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/ledger"
)

// The console comparison (-console-prefill, or alone with -console-cost):
// the sqsonce binary with the bbolt ledger at full speed (sqsonce-http in
// the stress profile), without a console and with one, in turn, round
// after round, on a ledger of each size of -console-prefill. "With one" is
// a real `sqsonce console` process on the worker's configuration, which
// reads the ledger through the worker's socket, and a client in the
// driver that keeps its pages open and refreshing as an operator's browser
// would, more often than the pages refresh themselves: the overview every
// -console-overview-every, and another page every
// -console-operations-every, in turn the first page of the operations,
// the failed operations to be retried (none here), the run's keys by
// prefix, one operation, the workers and the dead letters.
const (
	vPlain   = "without console"
	vConsole = "with console"
)

var consoleVariants = []string{vPlain, vConsole}

// The pages the console's client opens, as reported.
const (
	pageOverview    = "overview"
	pageOperations  = "operations"
	pageFailed      = "operations?state=retry"
	pagePrefix      = "operations?prefix"
	pageOperation   = "operation"
	pageWorkers     = "workers"
	pageDeadLetters = "dead-letters"
)

var consolePages = []string{pageOverview, pageOperations, pageFailed, pagePrefix, pageOperation, pageWorkers, pageDeadLetters}

// consoleStats is what the console and its client did during a run.
type consoleStats struct {
	cpu   float64       // seconds the console process used while its client browsed
	wall  time.Duration // how long the client browsed
	views map[string]int
	latMS map[string][]float64 // each view's time to the last byte of the page, in order
	// countsAge is the oldest the overview's counts were when a view
	// showed them (its "Read … ago").
	countsAge time.Duration
}

// firstMS is the time of the first view of each page: the slowest of
// them, and its page.
func (c *consoleStats) firstMS() (float64, string) {
	worst, page := 0.0, ""
	for p, ms := range c.latMS {
		if len(ms) > 0 && ms[0] > worst {
			worst, page = ms[0], p
		}
	}
	return worst, page
}

// readAgo reads the age of the overview's counts from its page ("Read 3s
// ago", "Read 1m 5s ago").
var readAgo = regexp.MustCompile(`Read ((?:[0-9]+[dhms] ?)+) ago`)

func parseAgo(page []byte) (time.Duration, bool) {
	m := readAgo.FindSubmatch(page)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(strings.ReplaceAll(string(m[1]), " ", ""))
	return d, err == nil
}

// consoleSection is the [console] table of the sqsonce binary's
// configuration: none when addr is empty.
func consoleSection(addr string) string {
	if addr == "" {
		return ""
	}
	return fmt.Sprintf("\n[console]\nlisten = %q\n", addr)
}

// consoleLedgerPath returns the ledger file that the console comparison's
// runs on a ledger of records records share, written first: records
// complete records (keys pre-<i>) by a separate sqsonce-go process, or an
// empty ledger. The file is there before the console starts (it needs one)
// and grows by each run's operations.
func (b *bench) consoleLedgerPath(ctx context.Context, records int) (string, error) {
	dir := filepath.Join(b.ledgerRoot(), fmt.Sprintf("console-%d", records))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "ledger.db")
	if records == 0 {
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			return "", err
		}
		return path, db.Close()
	}
	rep, err := b.prefillLedgerN(ctx, path, dir, records)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(b.log, "bench: %d records written in %.1fs, a file of %d MB\n", rep.PrefillRecords, time.Duration(rep.PrefillNS).Seconds(), fi.Size()>>20)
	return path, nil
}

// runConsoleCost runs the console comparison.
func (b *bench) runConsoleCost(ctx context.Context) ([]*result, error) {
	o := b.o
	cfg := runConfig{profile: pStress, concurrency: o.consoleConcurrency}
	var results []*result
	for _, records := range o.consolePrefill {
		path, err := b.consoleLedgerPath(ctx, records)
		if err != nil {
			return nil, fmt.Errorf("console comparison: the ledger of %d records: %w", records, err)
		}
		label := fmt.Sprintf("console/%d", records)
		run := func(variant string, round, n int) (*result, error) {
			x := runExtra{ledger: path, console: variant == vConsole}
			if o.cpuprofile != "" && round > 0 {
				if err := os.MkdirAll(o.cpuprofile, 0o755); err != nil {
					return nil, err
				}
				name := "plain"
				if x.console {
					name = "console"
				}
				x.profile = filepath.Join(o.cpuprofile, fmt.Sprintf("sqsonce-http-ledger%d-%s-round%d.prof", records, name, round))
			}
			r, err := b.runOneExtra(ctx, cSqsonceHTTP, cfg, round, n, 1, x)
			if err != nil {
				return nil, fmt.Errorf("console comparison, ledger of %d records, round %d, %s: %w", records, round, variant, err)
			}
			r.variant, r.consoleLedger = variant, records
			return r, nil
		}
		if o.warmup > 0 {
			for _, v := range consoleVariants {
				r, err := run(v, 0, min(o.warmup, o.consoleMessages))
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(b.log, "%-15s warm-up  %-15s %s\n", label, v, r.consoleLine())
			}
		}
		for round := 1; round <= o.consoleRounds; round++ {
			for _, v := range consoleVariants {
				r, err := run(v, round, o.consoleMessages)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(b.log, "%-15s round %d  %-15s %s\n", label, round, v, r.consoleLine())
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// consoleLine is a run of the console comparison, for the log.
func (r *result) consoleLine() string {
	s := r.line()
	if c := r.console; c != nil {
		first, page := c.firstMS()
		s += fmt.Sprintf("  console: CPU %.2fs in %.1fs (%.1f%% of a core), views %s; slowest first view %.0f ms (%s); counts at most %v old",
			c.cpu, c.wall.Seconds(), 100*c.cpu/c.wall.Seconds(), c.viewsText(), first, page, c.countsAge)
	}
	return s
}

// viewsText says how many pages of each kind the client opened and how
// long the median one took.
func (c *consoleStats) viewsText() string {
	var parts []string
	for _, p := range consolePages {
		if n := c.views[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (p50 %.0f ms)", p, n, median(c.latMS[p])))
		}
	}
	return strings.Join(parts, ", ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// consoleProc is a `sqsonce console` process beside a run's worker, and
// the client that browses it.
type consoleProc struct {
	cmd    *exec.Cmd
	base   string // http://host:port
	log    string
	exited chan error
	every  time.Duration // the overview's
	opsEvr time.Duration // an operations page's

	stopped bool
	exitErr error

	// The client, while it browses.
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	stats  consoleStats
	errs   []error
	cpu0   float64
	start  time.Time
}

// startConsole starts `sqsonce console --config config`, which listens on
// addr, and waits until it answers (it reads no ledger until a page asks).
func (b *bench) startConsole(config, runDir, addr string) (*consoleProc, error) {
	c := &consoleProc{base: "http://" + addr, log: filepath.Join(runDir, "console.log"), exited: make(chan error, 1),
		every: b.o.consoleOverviewEvery, opsEvr: b.o.consoleOperationsEvery}
	c.cmd = exec.Command(b.exe[cSqsonceHTTP], "console", "--config", config, "--log-format", "json")
	c.cmd.Env = b.o.goEnv(append(os.Environ(), "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench", "AWS_EC2_METADATA_DISABLED=true"))
	logf, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sqsonce console: %w", err)
	}
	go func() { c.exited <- c.cmd.Wait() }()
	client := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(c.base + "/static/console.css")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		select {
		case err := <-c.exited:
			c.stopped, c.exitErr = true, err
			return nil, fmt.Errorf("sqsonce console exited at start (%v); its log: %s", err, tail(c.log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("sqsonce console did not answer on %s within 30s; its log: %s", c.base, tail(c.log))
		}
	}
}

// browse starts the client once the worker's ledger socket (sock) is
// there: the console then reads through it, as it does beside a running
// worker. It opens the overview every c.every, and an operations page
// every c.opsEvr, each kind from its own goroutine, as two browser tabs
// would; a page that is late is not made up for.
func (c *consoleProc) browse(sock string, runID int) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.stats = consoleStats{views: map[string]int{}, latMS: map[string][]float64{}}
	ops := []struct{ kind, path string }{
		{pageOperations, "/operations"},
		{pageFailed, "/operations?state=failed"},
		{pagePrefix, fmt.Sprintf("/operations?prefix=op-%d-", runID)},
		{pageOperation, fmt.Sprintf("/operation?key=op-%d-0", runID)},
		{pageWorkers, "/workers"},
		{pageDeadLetters, "/dead-letters"},
	}
	ready := make(chan struct{})
	c.wg.Go(func() {
		defer close(ready)
		for {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		own, _, err := procCPU(c.cmd.Process.Pid)
		if err != nil {
			c.fail(err)
		}
		c.mu.Lock()
		c.cpu0, c.start = own, time.Now()
		c.mu.Unlock()
	})
	loop := func(every time.Duration, next func(i int) (string, string)) {
		c.wg.Go(func() {
			select {
			case <-ready:
			case <-ctx.Done():
				return
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for i := 0; ctx.Err() == nil; i++ {
				kind, path := next(i)
				c.view(ctx, kind, path)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		})
	}
	loop(c.every, func(int) (string, string) { return pageOverview, "/" })
	loop(c.opsEvr, func(i int) (string, string) { p := ops[i%len(ops)]; return p.kind, p.path })
}

// view opens one page and reads it whole. An operation that is not in the
// ledger yet answers 404, which is a page like any other.
func (c *consoleProc) view(ctx context.Context, kind, path string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		c.fail(err)
		return
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.fail(fmt.Errorf("GET %s: %w", path, err))
		}
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	ms := float64(time.Since(t0).Microseconds()) / 1000
	switch {
	case err != nil:
		if ctx.Err() == nil {
			c.fail(fmt.Errorf("GET %s: %w", path, err))
		}
		return
	case resp.StatusCode != http.StatusOK && !(kind == pageOperation && resp.StatusCode == http.StatusNotFound):
		c.fail(fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, body))
		return
	case kind == pageOverview && strings.Contains(string(body), "could not be read"):
		c.fail(fmt.Errorf("GET %s: the overview could not read the ledger: %.300s", path, body))
		return
	}
	c.mu.Lock()
	c.stats.views[kind]++
	c.stats.latMS[kind] = append(c.stats.latMS[kind], ms)
	if kind == pageOverview {
		if age, ok := parseAgo(body); ok {
			c.stats.countsAge = max(c.stats.countsAge, age)
		} else {
			c.errs = append(c.errs, fmt.Errorf("GET %s: the overview does not say how old its counts are: %.300s", path, body))
		}
	}
	c.mu.Unlock()
}

func (c *consoleProc) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// stopBrowsing stops the client and returns what it and the console did.
// A page that failed fails the run: its figures would not be a console's.
func (c *consoleProc) stopBrowsing() (*consoleStats, error) {
	own, _, cpuErr := procCPU(c.cmd.Process.Pid)
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("the console's client: %w (and %d more); the console's log: %s", c.errs[0], len(c.errs)-1, tail(c.log))
	}
	if c.start.IsZero() {
		return nil, errors.New("the console's client never started: the worker's ledger socket did not appear")
	}
	if cpuErr != nil {
		return nil, cpuErr
	}
	st := c.stats
	st.cpu, st.wall = own-c.cpu0, time.Since(c.start)
	return &st, nil
}

// stop ends the console (SIGTERM, then SIGKILL) and returns its exit
// error. It is safe to call more than once.
func (c *consoleProc) stop() error {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
	if c.stopped {
		return c.exitErr
	}
	c.stopped = true
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		if err != nil {
			c.exitErr = fmt.Errorf("sqsonce console: %v; its log: %s", err, tail(c.log))
		}
	case <-time.After(20 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
		c.exitErr = fmt.Errorf("sqsonce console did not stop within 20s of SIGTERM; its log: %s", tail(c.log))
	}
	return c.exitErr
}

// fetchProfile writes a CPU profile of the sqsonce binary's first seconds,
// from its admin listener (admin.pprof), to path.
func fetchProfile(admin string, seconds int, path string) error {
	c := http.Client{Timeout: time.Duration(seconds+30) * time.Second}
	var resp *http.Response
	var err error
	// The worker has just started: its listener comes up in a moment.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if resp, err = c.Get("http://" + admin + "/debug/pprof/profile?seconds=" + strconv.Itoa(seconds)); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeConsole writes the console comparison: a table per ledger size.
func writeConsole(w io.Writer, b *bench, results []*result) {
	o := b.o
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	cfg := runConfig{profile: pStress, concurrency: o.consoleConcurrency}
	p("## The console's cost\n\n")
	gogc := "GOGC=" + o.gogc
	if o.gogc == "default" {
		gogc = "GOGC unset (the binary's own default, 400)"
	}
	p("The sqsonce binary at full speed, without a console and with one open and refreshing: sqsonce-http in the stress profile "+
		"(the local server straight, an endpoint that answers at once), %d handlers, %d receive loops, the bbolt ledger, %s for the worker and the console; "+
		"%d rounds of %d messages, each round without then with the console. Each cell: median (min–max) over the rounds.\n\n",
		cfg.concurrency, o.loops(cfg), gogc, o.consoleRounds, o.consoleMessages)
	p("- **with console**: a `sqsonce console` process on the worker's configuration, started before the worker, which reads the ledger through the worker's socket, "+
		"and a client in the driver that opens the overview every %v and another page every %v (in turn: the first page of the operations, newest first; "+
		"`?state=retry`, the failures to be retried, none here; the run's keys by prefix; one operation; the workers; the dead letters), each from a goroutine of its own like two browser tabs, "+
		"from the moment the worker's socket is there until the queue is empty. The pages refresh themselves every 5 to 30 s: this is more. "+
		"The console keeps what the pages of live state share (the ledger's overview, registry and pause states, the queues' depths) for %v (`console.DefaultRefresh`); "+
		"the ledger's overview reads counters and indexes, not the records, so its cost does not grow with the ledger. The queues have no dead-letter queue.\n",
		o.consoleOverviewEvery, o.consoleOperationsEvery, console.DefaultRefresh)
	p("- **ledger**: one file per size, shared by that size's runs (each adds its %d records): the size's complete records (keys `pre-<i>`, written first by a separate process) "+
		"and the earlier runs'.\n\n", o.consoleMessages)

	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	mConsoleCPU := func(r *result) float64 {
		if r.console == nil {
			return math.NaN()
		}
		return r.console.cpu
	}
	mConsoleBusy := func(r *result) float64 {
		if r.console == nil {
			return math.NaN()
		}
		return 100 * r.console.cpu / r.console.wall.Seconds()
	}
	mActive := func(r *result) float64 { return r.active.Seconds() }
	mFirst := func(r *result) float64 {
		if r.console == nil {
			return math.NaN()
		}
		ms, _ := r.console.firstMS()
		return ms
	}
	mAge := func(r *result) float64 {
		if r.console == nil {
			return math.NaN()
		}
		return r.console.countsAge.Seconds()
	}
	views := func(page string) func(*result) float64 {
		return func(r *result) float64 {
			if r.console == nil {
				return math.NaN()
			}
			return float64(r.console.views[page])
		}
	}
	latency := func(page string) func(*result) float64 {
		return func(r *result) float64 {
			if r.console == nil {
				return math.NaN()
			}
			return median(r.console.latMS[page])
		}
	}
	for _, records := range o.consolePrefill {
		by := map[string][]*result{}
		for _, r := range results {
			if r.consoleLedger == records {
				by[r.variant] = append(by[r.variant], r)
			}
		}
		if len(by[vPlain]) == 0 || len(by[vConsole]) == 0 {
			continue
		}
		p("### A ledger of %d records before the first run\n\n", records)
		p("| | msg/s | run s | worker CPU s / 1k msg | peak RSS MB | server CPU s / 1k msg | machine busy %% | other load %% | console CPU s per run | console CPU %% of a core | overview views | overview p50 ms | other views | operations p50 ms | `state=retry` p50 ms | prefix p50 ms | slowest first view ms | counts' age, most s |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, v := range consoleVariants {
			rs := by[v]
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v,
				spreadOf(rs, mThroughput).cell(0), spreadOf(rs, mActive).cell(1), spreadOf(rs, mCPU).cell(3), spreadOf(rs, mRSS).cell(1),
				spreadOf(rs, mServerCPU).cell(3), spreadOf(rs, mBusy).cell(0), spreadOf(rs, mOther).cell(0),
				spreadOf(rs, mConsoleCPU).cell(2), spreadOf(rs, mConsoleBusy).cell(1),
				spreadOf(rs, views(pageOverview)).cell(0), spreadOf(rs, latency(pageOverview)).cell(1),
				spreadOf(rs, func(r *result) float64 {
					n := 0.0
					for _, pg := range consolePages[1:] {
						n += views(pg)(r)
					}
					return n
				}).cell(0), spreadOf(rs, latency(pageOperations)).cell(1), spreadOf(rs, latency(pageFailed)).cell(1),
				spreadOf(rs, latency(pagePrefix)).cell(1), spreadOf(rs, mFirst).cell(0), spreadOf(rs, mAge).cell(1))
		}
		med := func(v string, f func(*result) float64) float64 { return spreadOf(by[v], f).med }
		ratio := med(vConsole, mThroughput) / med(vPlain, mThroughput)
		var perRound []float64
		for i := range min(len(by[vPlain]), len(by[vConsole])) {
			perRound = append(perRound, by[vConsole][i].throughput/by[vPlain][i].throughput)
		}
		slices.Sort(perRound)
		p("\n- with ÷ without, medians: msg/s %.3f× (the rounds' ratios: %s), worker CPU per message %.2f×.\n",
			ratio, joinFloats(perRound, 3), med(vConsole, mCPU)/med(vPlain, mCPU))
		p("- target, a worker at full speed loses at most 5 %% of its throughput with a console open and refreshing: %.1f %% lost — %s\n",
			100*(1-ratio), verdict(ratio >= 0.95))
		worstFirst, worstFilter, oldest := 0.0, 0.0, 0.0
		for _, r := range by[vConsole] {
			worstFirst = max(worstFirst, mFirst(r))
			worstFilter = max(worstFilter, latency(pageFailed)(r), latency(pagePrefix)(r), latency(pageOperations)(r))
			oldest = max(oldest, mAge(r))
		}
		rss := med(vConsole, mRSS) - med(vPlain, mRSS)
		p("- target, every page's first view under 1 s: the slowest, over the rounds, %.0f ms — %s\n", worstFirst, verdict(worstFirst < 1000))
		p("- target, a filtered list under 100 ms a page: the slowest median of the lists, over the rounds, %.0f ms — %s\n", worstFilter, verdict(worstFilter < 100))
		p("- target, counts no older than 30 s: the oldest the overview showed, %.0f s — %s\n", oldest, verdict(oldest <= 30))
		p("- target, a worker's RSS not above 100 MB for having served the console: its peak RSS with ÷ without, medians, %+.1f MB — %s\n\n", rss, verdict(rss <= 100))
	}
	p("Notes: msg/s and CPU as in the contenders' tables (the worker's CPU includes serving the console through its socket); " +
		"console CPU: the `sqsonce console` process's own, from /proc/PID/stat, while its client browsed (not in the other load); a view's time is the client's, to the page's last byte; " +
		"a page that failed would have failed the run.\n\n")
	p("### Runs, in the order they ran\n\n```\n")
	for _, r := range results {
		p("console/%-8d round %d  %-15s %s\n", r.consoleLedger, r.round, r.variant, r.consoleLine())
	}
	p("```\n\n")
}

func joinFloats(xs []float64, dec int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', dec, 64)
	}
	return strings.Join(parts, ", ")
}
