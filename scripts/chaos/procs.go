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
	"strings"
	"sync"
	"syscall"
	"time"
)

// How a worker run ended.
const (
	endWindowA   = "window a"   // killed itself before the completion was durable
	endWindowB   = "window b"   // killed itself after the completion, before the delete
	endKill      = "kill"       // SIGKILL from the campaign at a random moment
	endInHandler = "in-handler" // SIGKILL while the downstream served its request
	endInTx      = "in-tx"      // SIGKILL inside a transactional handler's transaction, after its insert
	endTerm      = "term"       // SIGTERM, drained, exit 0
	endFailed    = "failed"     // anything else: a finding
	endRefused   = "refused"    // a start that had to fail (ledger locked or read-only)
)

// proc is one worker process.
type proc struct {
	id      int
	cmd     *exec.Cmd
	stderr  string
	ledger  string
	done    chan struct{}
	started time.Time

	mu      sync.Mutex
	signal  string // what the campaign did to it: endKill, endInHandler, endInTx, endTerm
	killKey string // endInHandler, endInTx: the key whose request or transaction was in flight
	ended   time.Time
	state   *os.ProcessState
	waitErr error
}

// startProc starts bin with args, its output going to stderrPath.
func startProc(id int, bin string, args []string, stderrPath, ledgerPath string) (*proc, error) {
	f, err := os.Create(stderrPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	// The worker must not outlive the campaign if the campaign dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{id: id, cmd: cmd, stderr: stderrPath, ledger: ledgerPath, done: make(chan struct{}), started: time.Now()}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.ended = time.Now()
		p.state = cmd.ProcessState
		p.waitErr = err
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
func (p *proc) kill(why, key string) bool {
	p.mu.Lock()
	if p.signal == endKill || p.signal == endInHandler || p.signal == endInTx || !p.alive() {
		p.mu.Unlock()
		return false
	}
	p.signal, p.killKey = why, key
	p.mu.Unlock()
	return p.cmd.Process.Signal(syscall.SIGKILL) == nil
}

// term sends SIGTERM and records it.
func (p *proc) term() {
	p.mu.Lock()
	p.signal = endTerm
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

// wait waits for the process to end, up to d. It reports whether it ended.
func (p *proc) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// exit describes how the process ended: signalled by SIGKILL, or its exit
// code.
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

// tail returns the last n lines of the process's output.
func (p *proc) tail(n int) string {
	return tailFile(p.stderr, n)
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
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// outputHas reports whether the process's output contains s.
func (p *proc) outputHas(s string) bool {
	b, err := os.ReadFile(p.stderr)
	return err == nil && strings.Contains(string(b), s)
}

// buildBinaries builds the chaos worker, the downstream and the sqsonce
// command from the same tree into dir. The chaos worker gets the ledger
// socket of `sqsonce run` (cmd/sqsonce/ledgersocket.go and the flow calls
// of flowsocket.go, unchanged) added to
// its package through go build -overlay, with a small file that hands its
// serveLedgerSocket to the worker's serveSocket hook: a main package
// cannot be imported, and a copy would test the copy.
func buildBinaries(ctx context.Context, dir string, race bool, log io.Writer) (worker, downstream, sqsonce string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	const (
		workerPkg = "github.com/sqsonce/sqsonce/scripts/chaos/chaosworker"
		cmdPkg    = "github.com/sqsonce/sqsonce/cmd/sqsonce"
	)
	list := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", workerPkg, cmdPkg)
	list.Stderr = log
	out, err := list.Output()
	if err != nil {
		return "", "", "", fmt.Errorf("go list: %w", err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 2 {
		return "", "", "", fmt.Errorf("go list: want the directories of %s and %s, got %q", workerPkg, cmdPkg, out)
	}
	shim := filepath.Join(dir, "socket_shim.go")
	if err := os.WriteFile(shim, []byte(socketShim), 0o644); err != nil {
		return "", "", "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(dirs[0], "zz_ledgersocket.go"): filepath.Join(dirs[1], "ledgersocket.go"),
		filepath.Join(dirs[0], "zz_flowsocket.go"):   filepath.Join(dirs[1], "flowsocket.go"),
		filepath.Join(dirs[0], "zz_socket_shim.go"):  shim,
	}})
	if err != nil {
		return "", "", "", err
	}
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		return "", "", "", err
	}
	args := []string{"build", "-overlay", overlayPath, "-o", dir + "/"}
	if race {
		args = append(args, "-race")
	}
	args = append(args, workerPkg, "github.com/sqsonce/sqsonce/scripts/chaos/downstream", cmdPkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return "", "", "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	worker, downstream, sqsonce = filepath.Join(dir, "chaosworker"), filepath.Join(dir, "downstream"), filepath.Join(dir, "sqsonce")
	for _, b := range []string{worker, downstream, sqsonce} {
		if _, err := os.Stat(b); err != nil {
			return "", "", "", err
		}
	}
	return worker, downstream, sqsonce, nil
}

// socketShim is added to the chaos worker's package with
// cmd/sqsonce/ledgersocket.go: it sets the worker's hook to the socket
// server of `sqsonce run`.
const socketShim = `package main

import (
	"io"
	"log/slog"

	"github.com/sqsonce/sqsonce/ledger"
)

func init() {
	serveSocket = func(db *ledger.DB, path string, log *slog.Logger) (io.Closer, error) {
		s, err := serveLedgerSocket(db, path, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}
`

// startDownstream starts the downstream and returns its URL once it
// listens.
func startDownstream(ctx context.Context, bin, dir, control string) (*proc, string, error) {
	out := filepath.Join(dir, "downstream.out")
	p, err := startProc(0, bin, []string{"-dir", dir, "-control", control}, out, "")
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		b, _ := os.ReadFile(out)
		for _, line := range strings.Split(string(b), "\n") {
			if u, ok := strings.CutPrefix(line, "listening "); ok {
				return p, strings.TrimSpace(u), nil
			}
		}
		if !p.alive() {
			return nil, "", fmt.Errorf("downstream exited at start: %s", p.tail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill(endKill, "")
	return nil, "", errors.New("downstream did not start within 15s")
}
