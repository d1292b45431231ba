package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// How a worker run ended (or is to end).
const (
	endWindowA   = "window a"   // killed itself before the completion was durable
	endWindowB   = "window b"   // killed itself after the completion, before the delete
	endKill      = "kill"       // SIGKILL from the campaign at a random moment
	endInHandler = "in-handler" // SIGKILL while the downstream served its request
	endInTx      = "in-tx"      // SIGKILL inside a transactional handler's transaction, after its insert
	endTerm      = "term"       // SIGTERM, drained, exit 0
	endFailed    = "failed"     // anything else: a finding
	endRefused   = "refused"    // a start that had to fail (ledger locked, read-only or out of reach)
)

// killed reports whether a run that ended so was killed.
func killed(end string) bool {
	switch end {
	case endWindowA, endWindowB, endKill, endInHandler, endInTx:
		return true
	}
	return false
}

// proc is one worker process (a run).
type proc struct {
	id      int
	cmd     *exec.Cmd
	out     string // its output's file
	done    chan struct{}
	started time.Time

	mu       sync.Mutex
	signal   string // what the campaign did to it: endKill, endInHandler, endInTx, endTerm, endRefused
	signaled time.Time
	ended    time.Time
	state    *os.ProcessState
}

// startProc starts bin with args, its output going to the file out.
func startProc(id int, bin string, args []string, out string) (*proc, error) {
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The worker must not outlive the campaign if the campaign dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{id: id, cmd: cmd, out: out, done: make(chan struct{}), started: time.Now()}
	go func() {
		_ = cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.ended, p.state = time.Now(), cmd.ProcessState
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL once and records why. It reports whether this call
// killed a live process.
func (p *proc) kill(why string) bool {
	p.mu.Lock()
	if killed(p.signal) || !p.alive() {
		p.mu.Unlock()
		return false
	}
	p.signal = why
	if p.signaled.IsZero() {
		p.signaled = time.Now()
	}
	p.mu.Unlock()
	return p.cmd.Process.Signal(syscall.SIGKILL) == nil
}

// term sends SIGTERM and records it.
func (p *proc) term() {
	p.setSignal(endTerm)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

func (p *proc) setSignal(s string) {
	p.mu.Lock()
	p.signal = s
	if p.signaled.IsZero() { // the first: a second SIGTERM does not move it
		p.signaled = time.Now()
	}
	p.mu.Unlock()
}

// wait waits for the process to end, up to d. It reports whether it ended.
func (p *proc) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// exit describes how the process ended: signalled by SIGKILL, or its exit
// code (-1 while it runs).
func (p *proc) exit() (killed bool, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return false, -1
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal() == syscall.SIGKILL, -1
	}
	return false, p.state.ExitCode()
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if lines = append(lines, s.Text()); len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// outputHas reports whether the process's output contains s.
func (p *proc) outputHas(s string) bool {
	b, err := os.ReadFile(p.out)
	return err == nil && strings.Contains(string(b), s)
}

// buildBinaries builds the chaos worker and the sqsonce command from the
// same tree into dir. The chaos worker is built with the tag chaossocket
// and the ledger socket of `sqsonce run` (cmd/sqsonce/ledgersocket.go,
// unchanged, with the flow calls of flowsocket.go) added to its package
// through go build -overlay: a main package cannot be imported, and a copy
// would test the copy.
func buildBinaries(ctx context.Context, dir string, race bool, log io.Writer) (worker, sqsonce string, err error) {
	_, this, _, _ := runtime.Caller(0)
	workerDir, cmdDir := filepath.Join(filepath.Dir(this), "chaosworker"), filepath.Join(filepath.Dir(this), "..", "..", "cmd", "sqsonce")
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(workerDir, "zz_ledgersocket.go"): filepath.Join(cmdDir, "ledgersocket.go"), filepath.Join(workerDir, "zz_flowsocket.go"): filepath.Join(cmdDir, "flowsocket.go")}})
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := errors.Join(os.MkdirAll(dir, 0o755), os.WriteFile(overlayPath, overlay, 0o644)); err != nil {
		return "", "", err
	}
	args := []string{"build", "-tags", "chaossocket", "-overlay", overlayPath, "-o", dir + "/"}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, workerDir, cmdDir)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("go %s: %w", strings.Join(cmd.Args[1:], " "), err)
	}
	return filepath.Join(dir, "chaosworker"), filepath.Join(dir, "sqsonce"), nil
}
