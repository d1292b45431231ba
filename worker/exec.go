//go:build unix

package worker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// DefaultKillGrace is how long an exec command stopped because its context
// ended has between SIGTERM and SIGKILL when ExecConfig.KillGrace is zero.
const DefaultKillGrace = 5 * time.Second

// Defaults and limits of the exec handler.
const (
	execDefaultRetryCode = 75 // EX_TEMPFAIL from sysexits.h

	execMaxStdout      = 4096 // bytes of stdout kept as the result
	execMaxStderrLine  = 1024 // bytes of one stderr line logged
	execMaxStderrLines = 100  // stderr lines logged per run
	execMaxErrorTail   = 256  // bytes of the last stderr line put in an error
)

// How a stopped command's process group is watched until it is gone.
const (
	execPollMin    = 5 * time.Millisecond  // first wait between checks
	execPollMax    = 50 * time.Millisecond // longest wait between checks
	execKillSettle = time.Second           // how long to wait for it after SIGKILL
)

// The environment variables the exec handler sets for the command.
const (
	execEnvKey          = "SQSONCE_KEY"
	execEnvMessageID    = "SQSONCE_MESSAGE_ID"
	execEnvAttempt      = "SQSONCE_ATTEMPT"
	execEnvReceiveCount = "SQSONCE_RECEIVE_COUNT"
	execEnvQueueURL     = "SQSONCE_QUEUE_URL"
	execEnvGroupID      = "SQSONCE_GROUP_ID" // only for a message with a group id
	execEnvAttrPrefix   = "SQSONCE_ATTR_"    // one per message attribute
	execEnvTraceParent  = "TRACEPARENT"      // only for a message with a trace context
	execEnvTraceState   = "TRACESTATE"       // only with a non-empty tracestate
)

// ExecConfig configures an ExecHandler.
type ExecConfig struct {
	// Command is the program and its arguments. It is run directly, without
	// a shell; a program name without a slash is looked up in PATH when
	// each message is handled. Required, with a non-empty Command[0].
	Command []string
	// RetryExitCodes are the exit codes that mean "retry later", each 1 to
	// 255. Empty means [75] (EX_TEMPFAIL from sysexits.h).
	RetryExitCodes []int
	// Logger receives the command's stderr. Nil means slog.Default().
	Logger *slog.Logger
	// KillGrace is how long a command stopped because its context ended
	// has between SIGTERM and SIGKILL. Zero means DefaultKillGrace (5s);
	// it must not be negative.
	KillGrace time.Duration
	// Env lists the variables of the worker's environment that the command
	// inherits: exact names, or prefixes ending in "*" ("APP_*"; "*" alone
	// passes everything). Nil passes the whole environment but Withhold; a
	// non-nil empty list passes none. The SQSONCE_* variables of the
	// message are set either way.
	Env []string
	// Withhold names variables of the worker's environment that the command
	// does not inherit unless Env names them exactly: a prefix ("AWS_*")
	// or "*" does not pass them. They are the secrets the worker's process
	// uses itself (AWS credentials, a database password), which a command
	// has no need of by default. Nil withholds nothing.
	Withhold []string
}

// ExecHandler is a Handler that runs a command for each message. It is safe
// for concurrent use; each call of Handle runs its own process.
//
// The command gets the message body on stdin and the worker's environment
// (the part of it that ExecConfig.Env lets through, without what
// ExecConfig.Withhold names unless Env names it exactly) plus SQSONCE_KEY
// (Message.Key), SQSONCE_MESSAGE_ID, SQSONCE_ATTEMPT,
// SQSONCE_RECEIVE_COUNT, SQSONCE_QUEUE_URL, for a message with a group
// id SQSONCE_GROUP_ID, SQSONCE_ATTR_<NAME> for each of Message.Attributes
// up to MaxAttrValue bytes (NAME in upper case, with "_" for each character
// that is not a letter, a digit or "_"), and, for a message with a trace
// context, TRACEPARENT and (when not empty) TRACESTATE (Message.TraceParent
// and TraceState, the variables OpenTelemetry's SDKs read for a process's
// parent context). These replace inherited variables of the same names; an
// inherited SQSONCE_GROUP_ID, TRACEPARENT or TRACESTATE is removed for a
// message without one, and every inherited SQSONCE_ATTR_ variable is
// removed. The first 4096 bytes of stdout become Message.Result; the rest is read
// and discarded. Each stderr line is logged at Warn level with the
// attributes "key" and "message_id" (lines are cut to 1 KiB and at most 100
// lines are logged per run; the number of further lines is logged once at
// the end).
//
// Handle returns nil only when the command exited with status 0 and had not
// been stopped by Handle. Otherwise:
//
//   - an exit code listed in RetryExitCodes: a retryable error;
//   - any other non-zero exit code: a Permanent error;
//   - death by a signal not sent by Handle (the OOM killer, a crash): a
//     retryable error;
//   - failure to start the command (not found, not executable): a retryable
//     error, so that a broken deployment leaves messages to be retried
//     rather than sending all of them to the dead-letter queue;
//   - the context ending while the command runs (handler timeout, shutdown,
//     lost lease): the command is stopped and the error is retryable and
//     wraps ctx.Err(), whatever the command's exit status, since a command
//     that exits 0 on SIGTERM may have quit its work rather than finished
//     it. A command that had already exited when the context ended keeps
//     its exit status, even if it was not yet reaped (read on Linux).
//     The operation then runs again: if the command's effect had happened
//     before it was stopped, it happens twice, so give commands a timeout
//     that they finish well within.
//
// The command runs in a process group of its own. When the context ends,
// SIGTERM goes to the whole group and SIGKILL follows KillGrace later to
// whatever is left of it, so Handle may return up to KillGrace after the
// context ends. Descendants that leave the group (with setsid, say) are not
// stopped, and neither are descendants of a command that exits on its own;
// a descendant that keeps the command's stdout or stderr open after the
// command exits is cut off from it after KillGrace.
//
// Errors name the exit code or signal and end with the last line the
// command wrote to stderr, cut to 256 bytes.
type ExecHandler struct {
	argv      []string
	retry     []int
	log       *slog.Logger
	killGrace time.Duration
	env       []string // ExecConfig.Env; nil: everything
	withhold  []string // ExecConfig.Withhold
}

// NewExecHandler validates cfg and returns its handler.
func NewExecHandler(cfg ExecConfig) (*ExecHandler, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("exec handler: command is empty")
	}
	if cfg.Command[0] == "" {
		return nil, errors.New("exec handler: command[0] (the program) is empty")
	}
	for i, a := range cfg.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("exec handler: command[%d] has a NUL byte", i)
		}
	}
	for _, c := range cfg.RetryExitCodes {
		if c < 1 || c > 255 {
			return nil, fmt.Errorf("exec handler: retry exit code %d is not in 1..255", c)
		}
	}
	if cfg.KillGrace < 0 {
		return nil, fmt.Errorf("exec handler: kill grace %v is negative", cfg.KillGrace)
	}
	for _, name := range cfg.Env {
		if err := CheckEnvPattern(name); err != nil {
			return nil, fmt.Errorf("exec handler: env: %w", err)
		}
	}
	h := &ExecHandler{
		argv:      slices.Clone(cfg.Command),
		retry:     slices.Clone(cfg.RetryExitCodes),
		log:       cmp.Or(cfg.Logger, slog.Default()),
		killGrace: cmp.Or(cfg.KillGrace, DefaultKillGrace),
		env:       slices.Clone(cfg.Env), // keeps nil apart from empty
		withhold:  slices.Clone(cfg.Withhold),
	}
	if len(h.retry) == 0 {
		h.retry = []int{execDefaultRetryCode}
	}
	return h, nil
}

// Handle runs the command for m. See ExecHandler for what it returns.
func (h *ExecHandler) Handle(ctx context.Context, m *Message) error {
	name := h.argv[0]
	if ctx.Err() != nil {
		return fmt.Errorf("exec %s: not started: %w", name, handlerContextErr(ctx))
	}
	// os.Environ returns a copy, which these two filter in place.
	env, err := execEnviron(allowedEnv(os.Environ(), h.env, h.withhold), m)
	if err != nil {
		// The values come from the message, so every delivery fails alike.
		return Permanent(fmt.Errorf("exec %s: %w", name, err))
	}

	// The attributes go into what is logged rather than into a logger
	// made with With for every run: most commands log nothing, and With
	// formats its attributes at once.
	attrs := [2]slog.Attr{slog.String("key", m.Key), slog.String("message_id", m.MessageID)}
	stdout := &execStdout{}
	stderr := &execStderr{ctx: ctx, log: h.log, attrs: attrs}

	cmd := exec.CommandContext(ctx, name, h.argv[1:]...)
	cmd.Env = env
	// stdin is a pipe already holding the body (execFilledPipe), which
	// os/exec hands to the command as it is, with no goroutine to copy the
	// body and no second pipe, and which is closed here once the command
	// has started; or, where there is no such pipe (a larger body, not
	// Linux), a reader that os/exec copies into a pipe of its own while the
	// command runs.
	stdinFile := execFilledPipe(m.Body)
	if stdinFile != nil {
		cmd.Stdin = stdinFile
	} else {
		cmd.Stdin = bytes.NewReader(m.Body)
	}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = h.killGrace
	var stop execStop
	cmd.Cancel = func() error { return stop.terminate(cmd.Process) }

	err = cmd.Start()
	if stdinFile != nil {
		stdinFile.Close() // the command has its own copy
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("exec %s: not started: %w", name, handlerContextErr(ctx))
		}
		return fmt.Errorf("exec %s: start: %w", name, err)
	}
	waitErr := cmd.Wait()
	stderr.finish()
	m.Result = stdout.buf

	if at := stop.at.Load(); at != nil {
		// Setpgid: the group's id is the command's pid.
		execKillGroup(cmd.Process.Pid, at.Add(h.killGrace))
		return fmt.Errorf("exec %s: %w: stopped, %s%s", name, handlerContextErr(ctx), execHow(cmd.ProcessState), stderr.tail())
	}
	state := cmd.ProcessState
	if state == nil {
		return fmt.Errorf("exec %s: %w%s", name, waitErr, stderr.tail())
	}
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		h.log.LogAttrs(ctx, slog.LevelWarn, "a descendant of the command held its output open after it exited; cut off after the kill grace",
			attrs[0], attrs[1], slog.Duration("kill_grace", h.killGrace))
	}
	// ExitCode is -1 for a command killed by a signal.
	switch code := state.ExitCode(); {
	case code == 0:
		return nil
	case code > 0 && !slices.Contains(h.retry, code):
		return Permanent(fmt.Errorf("exec %s: %s%s", name, execHow(state), stderr.tail()))
	default: // a retry exit code, or killed by a signal Handle did not send
		return fmt.Errorf("exec %s: %s%s", name, execHow(state), stderr.tail())
	}
}

// CheckEnvPattern reports whether p can stand in ExecConfig.Env: a variable
// name, or a prefix of one followed by "*".
func CheckEnvPattern(p string) error {
	name := strings.TrimSuffix(p, "*")
	switch {
	case p == "":
		return errors.New("an empty name")
	case strings.ContainsAny(name, "=*\x00") || strings.ContainsFunc(name, unicode.IsSpace):
		return fmt.Errorf("%q is not a variable name, nor a prefix of one followed by *", p)
	}
	return nil
}

// EnvPasses reports whether the patterns of ExecConfig.Env let the variable
// name through to the command; nil patterns let everything through. A
// variable that ExecConfig.Withhold names passes only by its exact name:
// see EnvInherits.
func EnvPasses(patterns []string, name string) bool {
	if patterns == nil {
		return true
	}
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); (ok && strings.HasPrefix(name, prefix)) || name == p {
			return true
		}
	}
	return false
}

// EnvInherits reports whether the command inherits the variable name with
// ExecConfig.Env patterns and ExecConfig.Withhold withhold: a withheld
// variable only when patterns name it exactly, any other when EnvPasses.
func EnvInherits(patterns, withhold []string, name string) bool {
	if slices.Contains(withhold, name) {
		return slices.Contains(patterns, name)
	}
	return EnvPasses(patterns, name)
}

// allowedEnv returns the variables of environ that the command inherits
// (EnvInherits), in environ's own array; all of environ when patterns and
// withhold are nil.
func allowedEnv(environ, patterns, withhold []string) []string {
	if patterns == nil && withhold == nil {
		return environ
	}
	return slices.DeleteFunc(environ, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return !EnvInherits(patterns, withhold, name)
	})
}

// execEnviron returns base without the variables the handler sets, followed
// by those variables for m. It removes them from base's own array.
func execEnviron(base []string, m *Message) ([]string, error) {
	own := []string{
		execEnvKey + "=" + m.Key,
		execEnvMessageID + "=" + m.MessageID,
		execEnvAttempt + "=" + strconv.Itoa(m.Attempt),
		execEnvReceiveCount + "=" + strconv.Itoa(m.ReceiveCount),
		execEnvQueueURL + "=" + m.QueueURL,
	}
	if m.GroupID != "" {
		own = append(own, execEnvGroupID+"="+m.GroupID)
	}
	own = append(own, attrEnviron(m.Attributes)...)
	if m.TraceParent != "" {
		own = append(own, execEnvTraceParent+"="+m.TraceParent)
		if m.TraceState != "" {
			own = append(own, execEnvTraceState+"="+m.TraceState)
		}
	}
	for _, kv := range own {
		if name, value, _ := strings.Cut(kv, "="); strings.IndexByte(value, 0) >= 0 {
			return nil, fmt.Errorf("environment variable %s has a NUL byte", name)
		}
	}
	env := slices.DeleteFunc(base, func(kv string) bool {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case execEnvKey, execEnvMessageID, execEnvAttempt, execEnvReceiveCount, execEnvQueueURL, execEnvGroupID,
			execEnvTraceParent, execEnvTraceState:
			return true
		default:
			return strings.HasPrefix(name, execEnvAttrPrefix)
		}
	})
	return slices.Concat(env, own), nil // one array of the size needed
}

// attrEnviron returns the message attributes as SQSONCE_ATTR_<NAME>
// variables: the name in upper case with each character other than a
// letter, a digit or "_" made "_". Of names that become one variable, the
// first in byte order is kept; a value with a NUL byte, which no
// environment can hold, or longer than MaxAttrValue is left out.
func attrEnviron(attrs map[string]string) []string {
	if len(attrs) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(attrs))
	out := make([]string, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		v := attrs[name]
		if len(v) > MaxAttrValue || strings.IndexByte(v, 0) >= 0 {
			continue
		}
		env := execEnvAttrPrefix + strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z':
				return r - 'a' + 'A'
			case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
				return r
			}
			return '_'
		}, name)
		if seen[env] {
			continue
		}
		seen[env] = true
		out = append(out, env+"="+v)
	}
	return out
}

// execStop records whether Handle stopped the command, and when.
type execStop struct {
	at atomic.Pointer[time.Time] // nil while Handle has not stopped it
}

// terminate is the command's Cancel: it sends SIGTERM to the command's
// process group unless the command has already exited, in which case it
// exited on its own before the context ended and its exit status stands:
// whether it was waited for already, or has exited and waits to be reaped
// (on Linux, where that can be read). Otherwise the command counts as
// stopped, whatever it exits with: a command that exits 0 on SIGTERM may
// have quit its work rather than finished it.
func (s *execStop) terminate(p *os.Process) error {
	if err := p.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) || execExited(p.Pid) {
		return os.ErrProcessDone
	}
	now := time.Now()
	err := syscall.Kill(-p.Pid, syscall.SIGTERM)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	s.at.Store(&now)
	return err
}

// execKillGroup waits until no process of group pgid is left running or
// deadline passes, then sends SIGKILL to whatever is left of the group and
// waits a little longer for it to die.
func execKillGroup(pgid int, deadline time.Time) {
	wait, killed := execPollMin, false
	for execGroupRunning(pgid) {
		left := time.Until(deadline)
		if left <= 0 {
			if killed {
				return
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			killed, deadline, wait = true, time.Now().Add(execKillSettle), execPollMin
			continue
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, execPollMax)
	}
}

// execGroupRunning reports whether a process of group pgid may still be
// running. On Linux, a group whose processes have all exited but not been
// reaped yet (zombies, left to a parent that reaps late or never, such as a
// container's init that is not one) counts as not running.
func execGroupRunning(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	if runtime.GOOS != "linux" {
		return true
	}
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	want := strconv.Itoa(pgid)
	for _, e := range dir {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		// A process gone meanwhile has no stat to read.
		if state, pgrp, ok := execProcStat(e.Name()); ok && pgrp == want && state != "Z" && state != "X" {
			return true
		}
	}
	return false
}

// execExited reports whether process pid has exited and waits to be
// reaped (a zombie). Only Linux tells; elsewhere it reports false.
func execExited(pid int) bool {
	if runtime.GOOS != "linux" {
		return false
	}
	state, _, ok := execProcStat(strconv.Itoa(pid))
	return ok && (state == "Z" || state == "X")
}

// execProcStat reads the state and process group of a process from
// /proc/PID/stat on Linux.
func execProcStat(pid string) (state, pgrp string, ok bool) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", "", false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 3 {
		return "", "", false
	}
	return f[0], f[2], true
}

// execHow says how a process ended.
func execHow(state *os.ProcessState) string {
	if state == nil {
		return "exit status unknown"
	}
	switch ws, ok := state.Sys().(syscall.WaitStatus); {
	case ok && ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ok && ws.Signaled():
		s := fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
		if ws.CoreDump() {
			s += ", core dumped"
		}
		return s
	}
	return state.String()
}

// execStdout keeps the first execMaxStdout bytes written to it and discards
// the rest, so the command never blocks on a full pipe.
type execStdout struct {
	buf []byte // nil while nothing was written
}

func (w *execStdout) Write(p []byte) (int, error) {
	if room := execMaxStdout - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// ReadFrom copies r (the command's stdout) through Write: os/exec copies the
// pipe with it, in execReadBuf bytes, instead of a 32 KiB buffer of its own
// for every run.
func (w *execStdout) ReadFrom(r io.Reader) (int64, error) { return execCopy(w, r) }

// execReadBuf is the buffer in which the command's stdout and stderr are
// read: a page, what a pipe hands over at once when the command writes
// little.
const execReadBuf = 4096

// execCopy writes what it reads from r to w until r ends.
func execCopy(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, execReadBuf)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			w.Write(buf[:k]) // execStdout and execStderr never fail
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// execStderr logs what is written to it line by line, within bounds, and
// remembers the last non-blank line. It never fails a write, so the command
// never blocks on a full pipe.
type execStderr struct {
	ctx     context.Context
	log     *slog.Logger
	attrs   [2]slog.Attr // key and message id, first in every record
	line    []byte       // the current line, up to execMaxStderrLine bytes
	cut     bool         // the current line was longer
	last    string       // the last non-blank line
	logged  int
	dropped int
}

func (w *execStderr) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		chunk, after, found := bytes.Cut(rest, []byte{'\n'})
		room := execMaxStderrLine - len(w.line)
		w.line = append(w.line, chunk[:min(room, len(chunk))]...)
		w.cut = w.cut || len(chunk) > room
		if !found {
			break
		}
		w.emit()
		rest = after
	}
	return len(p), nil
}

// ReadFrom copies r (the command's stderr) through Write; see execStdout.
func (w *execStderr) ReadFrom(r io.Reader) (int64, error) { return execCopy(w, r) }

// emit logs the current line and starts the next.
func (w *execStderr) emit() {
	line := strings.ToValidUTF8(string(bytes.TrimRight(w.line, "\r")), "\uFFFD")
	cut := w.cut
	w.line, w.cut = w.line[:0], false
	if strings.TrimSpace(line) == "" {
		return
	}
	w.last = line
	if w.logged >= execMaxStderrLines {
		w.dropped++
		return
	}
	w.logged++
	attrs := []slog.Attr{w.attrs[0], w.attrs[1], slog.String("line", line)}
	if cut {
		attrs = append(attrs, slog.Bool("cut", true))
	}
	w.log.LogAttrs(w.ctx, slog.LevelWarn, "command stderr", attrs...)
}

// finish logs a last line without a newline and how many lines were not
// logged. Call it once the command's output is closed.
func (w *execStderr) finish() {
	if len(w.line) > 0 {
		w.emit()
	}
	if w.dropped > 0 {
		w.log.LogAttrs(w.ctx, slog.LevelWarn, "command stderr: further lines not logged",
			w.attrs[0], w.attrs[1], slog.Int("lines_logged", w.logged), slog.Int("lines_dropped", w.dropped))
	}
}

// tail formats the last stderr line for an error, or returns "".
func (w *execStderr) tail() string {
	if w.last == "" {
		return ""
	}
	return fmt.Sprintf("; last stderr line: %q", textcut.Mark(w.last, execMaxErrorTail, "..."))
}
