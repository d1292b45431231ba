//go:build unix

package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

// execScript returns the command that runs the shell script testdata/name.
func execScript(t *testing.T, name string, args ...string) []string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"/bin/sh", path}, args...)
}

func newExecHandler(t *testing.T, cfg worker.ExecConfig) *worker.ExecHandler {
	t.Helper()
	h, err := worker.NewExecHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func execMessage() *worker.Message {
	return &worker.Message{
		Key:          "orders:42",
		Body:         []byte(`{"order":42}`),
		MessageID:    "m-1",
		QueueURL:     "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
		Attempt:      2,
		ReceiveCount: 3,
	}
}

// execHandle calls h.Handle for m under a 10s deadline.
func execHandle(t *testing.T, h *worker.ExecHandler, m *worker.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return h.Handle(ctx, m)
}

// execWaitFile waits up to 5s for path to exist and returns its content.
func execWaitFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
	}
	t.Fatalf("%s did not appear within 5s", path)
	return ""
}

// execGone reports whether process pid has ended. An ended process whose
// parent has not reaped it yet (a zombie) counts as ended.
func execGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS != "linux" {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// execGrandchild reads the pid written to pidFile and kills that process at
// the end of the test if it is still there.
func execGrandchild(t *testing.T, pidFile string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(execWaitFile(t, pidFile)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %s: %q", pidFile, err)
	}
	t.Cleanup(func() {
		if !execGone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// execStopped runs h for m, waits for readyFile, ends the context with
// cause and returns what Handle returned and how long it took after that.
func execStopped(t *testing.T, h *worker.ExecHandler, m *worker.Message, readyFile string, cause error) (took time.Duration, err error) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, m) }()
	execWaitFile(t, readyFile)
	start := time.Now()
	cancel(cause)
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(5 * time.Second):
		t.Fatal("Handle did not return within 5s of the context ending")
		return 0, nil
	}
}

func TestNewExecHandler_Invalid(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]worker.ExecConfig{
		"no command":         {},
		"empty program":      {Command: []string{"", "x"}},
		"nul in argument":    {Command: []string{"/bin/echo", "a\x00b"}},
		"retry code 0":       {Command: []string{"/bin/true"}, RetryExitCodes: []int{0}},
		"retry code 256":     {Command: []string{"/bin/true"}, RetryExitCodes: []int{75, 256}},
		"retry code -1":      {Command: []string{"/bin/true"}, RetryExitCodes: []int{-1}},
		"negative killgrace": {Command: []string{"/bin/true"}, KillGrace: -time.Second},
	} {
		if _, err := worker.NewExecHandler(cfg); err == nil {
			t.Errorf("%s: NewExecHandler = nil error, want one", name)
		}
	}
	if _, err := worker.NewExecHandler(worker.ExecConfig{Command: []string{"true"}, RetryExitCodes: []int{1, 255}}); err != nil {
		t.Errorf("NewExecHandler: %v", err)
	}
}

func TestExecHandler_EnvAndStdin(t *testing.T) {
	t.Parallel()
	h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_env.sh")})
	for _, tc := range []struct {
		name, group, body string
	}{
		{"with group", "tenant-7", `{"order":42}`},
		{"without group", "", "line one\nline two\x00binary"},
		{"empty body", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := execMessage()
			m.GroupID = tc.group
			m.Body = []byte(tc.body)
			if err := execHandle(t, h, m); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			group := "SQSONCE_GROUP_ID unset"
			if tc.group != "" {
				group = "SQSONCE_GROUP_ID=" + tc.group
			}
			want := strings.Join([]string{
				"SQSONCE_KEY=orders:42",
				"SQSONCE_MESSAGE_ID=m-1",
				"SQSONCE_ATTEMPT=2",
				"SQSONCE_RECEIVE_COUNT=3",
				"SQSONCE_QUEUE_URL=https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
				group,
				"SQSONCE_TEST_INHERITED unset",
				"stdin=" + tc.body,
			}, "\n")
			if string(m.Result) != want {
				t.Errorf("Result:\n%s\nwant:\n%s", m.Result, want)
			}
		})
	}
}

// TestExecHandler_EnvOverridesInherited sets the test process's environment,
// so it cannot run in parallel with other tests.
func TestExecHandler_EnvOverridesInherited(t *testing.T) {
	t.Setenv("SQSONCE_KEY", "stale-key")
	t.Setenv("SQSONCE_ATTEMPT", "99")
	t.Setenv("SQSONCE_GROUP_ID", "stale-group")
	t.Setenv("SQSONCE_TEST_INHERITED", "yes")
	h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_env.sh")})
	m := execMessage()
	if err := execHandle(t, h, m); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	for _, want := range []string{
		"SQSONCE_KEY=orders:42\n",
		"SQSONCE_ATTEMPT=2\n",
		"SQSONCE_GROUP_ID unset\n",
		"SQSONCE_TEST_INHERITED=yes\n",
	} {
		if !strings.Contains(string(m.Result), want) {
			t.Errorf("Result does not contain %q:\n%s", want, m.Result)
		}
	}
}

// TestExecHandler_EnvAllowList sets the test process's environment, so it
// cannot run in parallel with other tests.
func TestExecHandler_EnvAllowList(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("APP_DSN", "db")
	t.Setenv("APP_MODE", "live")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("PGPASSWORD", "pg")
	withhold := []string{"AWS_SECRET_ACCESS_KEY", "PGPASSWORD"}
	for _, tc := range []struct {
		name     string
		env      []string
		withhold []string
		want     []string
		avoid    []string
	}{
		{"nil passes everything", nil, nil, []string{"AWS_SECRET_ACCESS_KEY=secret", "APP_DSN=db", "LANG=C.UTF-8", "PGPASSWORD=pg"}, nil},
		{"names and prefixes", []string{"LANG", "APP_*"}, nil, []string{"APP_DSN=db", "APP_MODE=live", "LANG=C.UTF-8"}, []string{"AWS_", "PATH=", "PGPASSWORD="}},
		{"none", []string{}, nil, nil, []string{"AWS_", "APP_", "LANG=", "PATH=", "PGPASSWORD="}},
		{"withheld from everything", nil, withhold, []string{"APP_DSN=db", "LANG=C.UTF-8"}, []string{"AWS_SECRET_ACCESS_KEY=", "PGPASSWORD="}},
		{"withheld from star and prefix", []string{"*", "AWS_*", "PG*"}, withhold, []string{"APP_DSN=db"}, []string{"AWS_SECRET_ACCESS_KEY=", "PGPASSWORD="}},
		{"withheld but named", []string{"*", "PGPASSWORD"}, withhold, []string{"APP_DSN=db", "PGPASSWORD=pg"}, []string{"AWS_SECRET_ACCESS_KEY="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHandler(t, worker.ExecConfig{Command: []string{"env"}, Env: tc.env, Withhold: tc.withhold})
			m := execMessage()
			if err := execHandle(t, h, m); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			lines := strings.Split(string(m.Result), "\n")
			has := func(prefix string) bool {
				return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
			}
			for _, w := range append(tc.want, "SQSONCE_KEY=orders:42") {
				if !has(w) {
					t.Errorf("the command's environment lacks %q:\n%s", w, m.Result)
				}
			}
			for _, a := range tc.avoid {
				if has(a) {
					t.Errorf("the command's environment has %q:\n%s", a, m.Result)
				}
			}
		})
	}
	for _, bad := range []string{"", "A=B", "A*B", "A B"} {
		if _, err := worker.NewExecHandler(worker.ExecConfig{Command: []string{"env"}, Env: []string{bad}}); err == nil {
			t.Errorf("Env %q accepted", bad)
		}
	}
}

func TestExecHandler_ExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code  int
		retry []int
		class string
	}{
		{0, nil, "done"},
		{75, nil, "retry"},
		{1, nil, "permanent"},
		{2, nil, "permanent"},
		{255, nil, "permanent"},
		{3, []int{3, 4}, "retry"},
		{4, []int{3, 4}, "retry"},
		{75, []int{3, 4}, "permanent"},
		{0, []int{3, 4}, "done"},
	} {
		t.Run(fmt.Sprintf("%d retry %v", tc.code, tc.retry), func(t *testing.T) {
			t.Parallel()
			var logs handlerLogs
			h := newExecHandler(t, worker.ExecConfig{
				Command:        execScript(t, "exec_exit.sh", strconv.Itoa(tc.code), "first problem", "", "the last problem"),
				RetryExitCodes: tc.retry,
				Logger:         logs.logger(),
			})
			m := execMessage()
			err := execHandle(t, h, m)
			if got := handlerClass(err); got != tc.class {
				t.Fatalf("Handle = %v (%s), want %s", err, got, tc.class)
			}
			if err != nil {
				want := fmt.Sprintf(`exit status %d; last stderr line: "the last problem"`, tc.code)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			recs := logs.records(t, "command stderr")
			if len(recs) != 2 || recs[0]["line"] != "first problem" || recs[1]["line"] != "the last problem" {
				t.Fatalf("stderr records %v, want the two non-blank lines", recs)
			}
			for _, r := range recs {
				if r["level"] != "WARN" || r["key"] != "orders:42" || r["message_id"] != "m-1" {
					t.Errorf("stderr record %v, want level WARN, key and message_id", r)
				}
			}
		})
	}
}

func TestExecHandler_Signal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		signal string
		num    syscall.Signal
	}{
		{"KILL", syscall.SIGKILL},
		{"TERM", syscall.SIGTERM},
		{"USR1", syscall.SIGUSR1},
	} {
		t.Run(tc.signal, func(t *testing.T) {
			t.Parallel()
			var logs handlerLogs
			h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_signal.sh", tc.signal), Logger: logs.logger()})
			err := execHandle(t, h, execMessage())
			if got := handlerClass(err); got != "retry" {
				t.Fatalf("Handle = %v (%s), want retry", err, got)
			}
			want := fmt.Sprintf(`killed by signal %d (%v); last stderr line: "about to die"`, int(tc.num), tc.num)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		})
	}
}

func TestExecHandler_StartFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, program string }{
		{"missing path", filepath.Join(dir, "missing")},
		{"not in PATH", "sqsonce-test-no-such-command"},
		{"not executable", notExec},
		{"directory", dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			program := tc.program
			h := newExecHandler(t, worker.ExecConfig{Command: []string{program, "arg"}})
			m := execMessage()
			err := execHandle(t, h, m)
			if got := handlerClass(err); got != "retry" {
				t.Fatalf("Handle = %v (%s), want retry", err, got)
			}
			if !strings.Contains(err.Error(), program) {
				t.Errorf("error %q does not name %q", err, program)
			}
			if m.Result != nil {
				t.Errorf("Result = %q, want none", m.Result)
			}
		})
	}
}

func TestExecHandler_ContextAlreadyDone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	h := newExecHandler(t, worker.ExecConfig{Command: []string{"/bin/sh", "-c", `: >"$1"`, "sh", marker}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := h.Handle(ctx, execMessage())
	if got := handlerClass(err); got != "retry" || !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle = %v (%s), want a retryable error wrapping context.Canceled", err, got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}

func TestExecHandler_InvalidEnvValue(t *testing.T) {
	t.Parallel()
	h := newExecHandler(t, worker.ExecConfig{Command: []string{"/bin/true"}})
	m := execMessage()
	m.Key = "orders:\x0042"
	if err := execHandle(t, h, m); handlerClass(err) != "permanent" {
		t.Fatalf("Handle = %v, want permanent", err)
	}
}

// TestExecHandler_Stopped covers a command whose context ends while it runs:
// it is stopped, and the result is retryable whatever it exits with.
func TestExecHandler_Stopped(t *testing.T) {
	t.Parallel()
	t.Run("exits 0 on SIGTERM", func(t *testing.T) {
		t.Parallel()
		ready := filepath.Join(t.TempDir(), "ready")
		var logs handlerLogs
		h := newExecHandler(t, worker.ExecConfig{
			Command: execScript(t, "exec_term.sh", ready, "exit0"),
			Logger:  logs.logger(),
		})
		cause := errors.New("lease lost")
		took, err := execStopped(t, h, execMessage(), ready, cause)
		if got := handlerClass(err); got != "retry" {
			t.Fatalf("Handle = %v (%s), want retry", err, got)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Errorf("error %q does not wrap context.Canceled and the cause", err)
		}
		if !strings.Contains(err.Error(), `exit status 0; last stderr line: "got TERM"`) {
			t.Errorf("error %q does not say how the command ended", err)
		}
		if took > 2*time.Second {
			t.Errorf("Handle took %v after the context ended", took)
		}
	})
	t.Run("ignores SIGTERM", func(t *testing.T) {
		t.Parallel()
		ready := filepath.Join(t.TempDir(), "ready")
		grace := 300 * time.Millisecond
		h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_term.sh", ready, "ignore"), KillGrace: grace})
		took, err := execStopped(t, h, execMessage(), ready, nil)
		if got := handlerClass(err); got != "retry" {
			t.Fatalf("Handle = %v (%s), want retry", err, got)
		}
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "killed by signal 9") {
			t.Errorf("error %q, want one wrapping context.Canceled that names SIGKILL", err)
		}
		if took < grace-50*time.Millisecond || took > grace+2*time.Second {
			t.Errorf("Handle took %v after the context ended, want about the kill grace %v", took, grace)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ready := filepath.Join(t.TempDir(), "ready")
		h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_term.sh", ready, "plain")})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := h.Handle(ctx, execMessage())
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Handle took %v with a 300ms deadline", took)
		}
		if got := handlerClass(err); got != "retry" || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Handle = %v (%s), want a retryable error wrapping context.DeadlineExceeded", err, got)
		}
	})
}

// TestExecHandler_KillsProcessGroup checks that a command stopped at its
// deadline has the processes it started stopped too, even one that ignores
// SIGTERM.
func TestExecHandler_KillsProcessGroup(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"wait", "wait-ignore"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			grace := 300 * time.Millisecond
			h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_spawn.sh", pidFile, mode), KillGrace: grace})
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- h.Handle(ctx, execMessage()) }()
			pid := execGrandchild(t, pidFile)
			if ctx.Err() != nil || execGone(pid) {
				t.Fatalf("grandchild %d started too late or is gone before the deadline", pid)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Handle did not return within 4s of the deadline")
			}
			if got := handlerClass(err); got != "retry" || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Handle = %v (%s), want a retryable error wrapping context.DeadlineExceeded", err, got)
			}
			if !execGone(pid) {
				t.Errorf("grandchild %d is still running after Handle returned", pid)
			}
		})
	}
}

// TestExecHandler_DescendantHoldsStdout covers a command that exits 0 and
// leaves a process holding its stdout: it is done, once the kill grace has
// passed.
func TestExecHandler_DescendantHoldsStdout(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	var logs handlerLogs
	h := newExecHandler(t, worker.ExecConfig{
		Command:   execScript(t, "exec_spawn.sh", pidFile, "exit"),
		KillGrace: 200 * time.Millisecond,
		Logger:    logs.logger(),
	})
	m := execMessage()
	start := time.Now()
	err := execHandle(t, h, m)
	took := time.Since(start)
	execGrandchild(t, pidFile)
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if string(m.Result) != "done\n" {
		t.Errorf("Result = %q, want %q", m.Result, "done\n")
	}
	if took > 2*time.Second {
		t.Errorf("Handle took %v", took)
	}
	if recs := logs.records(t, "a descendant of the command held its output open after it exited; cut off after the kill grace"); len(recs) != 1 {
		t.Errorf("%d warnings about the held output, want 1", len(recs))
	}
}

// TestExecHandler_OutputBounds runs a command writing 1 MiB to stdout and
// 252 lines to stderr: it must not block, and what is kept is bounded.
func TestExecHandler_OutputBounds(t *testing.T) {
	t.Parallel()
	var logs handlerLogs
	h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_noisy.sh"), Logger: logs.logger()})
	m := execMessage()
	start := time.Now()
	if err := execHandle(t, h, m); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Handle took %v", took)
	}
	if want := strings.Repeat("o", 4096); string(m.Result) != want {
		t.Errorf("Result has %d bytes, want the first 4096 of stdout", len(m.Result))
	}
	recs := logs.records(t, "command stderr")
	if len(recs) != 100 {
		t.Fatalf("%d stderr lines logged, want 100", len(recs))
	}
	for i, r := range recs {
		if want := fmt.Sprintf("stderr line %d", i+1); r["line"] != want || r["key"] != "orders:42" || r["message_id"] != "m-1" || r["level"] != "WARN" {
			t.Fatalf("stderr record %d = %v, want line %q at WARN with key and message_id", i, r, want)
		}
	}
	dropped := logs.records(t, "command stderr: further lines not logged")
	if len(dropped) != 1 || dropped[0]["lines_dropped"] != float64(152) || dropped[0]["key"] != "orders:42" {
		t.Errorf("dropped-lines records %v, want one saying 152", dropped)
	}
}

func TestExecHandler_LongStderrLine(t *testing.T) {
	t.Parallel()
	var logs handlerLogs
	long := strings.Repeat("é", 3000) // 6000 bytes
	h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_exit.sh", "1", long), Logger: logs.logger()})
	err := execHandle(t, h, execMessage())
	if handlerClass(err) != "permanent" {
		t.Fatalf("Handle = %v, want permanent", err)
	}
	recs := logs.records(t, "command stderr")
	if len(recs) != 1 || recs[0]["cut"] != true {
		t.Fatalf("stderr records %v, want one cut line", recs)
	}
	if line := recs[0]["line"].(string); len(line) != 1024 || line != long[:1024] {
		t.Errorf("logged line has %d bytes, want the first 1024", len(line))
	}
	if n := len(err.Error()); n > 400 {
		t.Errorf("error has %d bytes, want the stderr line cut: %q", n, err)
	}
	if !strings.Contains(err.Error(), strings.Repeat("é", 128)+`..."`) {
		t.Errorf("error %q does not end with 256 bytes of the line", err)
	}
}

func TestExecHandler_Concurrent(t *testing.T) {
	t.Parallel()
	h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_env.sh")})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			m := execMessage()
			m.Key = fmt.Sprintf("orders:%d", i)
			m.Body = []byte(m.Key)
			if err := execHandle(t, h, m); err != nil {
				t.Errorf("Handle: %v", err)
				return
			}
			if !strings.HasPrefix(string(m.Result), "SQSONCE_KEY="+m.Key+"\n") || !strings.HasSuffix(string(m.Result), "stdin="+m.Key) {
				t.Errorf("Result for %s:\n%s", m.Key, m.Result)
			}
		})
	}
	wg.Wait()
}

// BenchmarkExecHandler runs /bin/true for a small message, 16 at once, as
// the stress benchmark's sqsonce-exec does. own-cpu-ns/op is the CPU of this
// process per run (the handler's cost: environment, pipes, start, wait),
// without that of the children it waited for.
func BenchmarkExecHandler(b *testing.B) {
	h, err := worker.NewExecHandler(worker.ExecConfig{Command: []string{"/bin/true"}})
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := self()
	b.RunParallel(func(pb *testing.PB) {
		m := execMessage()
		for pb.Next() {
			if err := h.Handle(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64((self()-start).Nanoseconds())/float64(b.N), "own-cpu-ns/op")
}

// Message attributes reach the command as SQSONCE_ATTR_<NAME>; an
// inherited SQSONCE_ATTR_ variable does not, and a value that no
// variable can hold, or too long to pass, is left out. It sets the test
// process's environment, so it cannot run in parallel with other tests.
func TestExecHandler_Attributes(t *testing.T) {
	t.Setenv("SQSONCE_ATTR_STALE", "inherited")
	h := newExecHandler(t, worker.ExecConfig{Command: execScript(t, "exec_attrs.sh")})
	m := execMessage()
	m.Attributes = map[string]string{
		"EventType": "payment.succeeded",
		"order.id":  "42",
		"order-id":  "shadowed", // also SQSONCE_ATTR_ORDER_ID: the first name in byte order wins
		"Multi":     "line one\nline two",
		"Nul":       "a\x00b",
		"Long":      strings.Repeat("x", worker.MaxAttrValue+1),
		"Longest":   strings.Repeat("y", worker.MaxAttrValue),
		"batch_no":  "00",
	}
	if err := execHandle(t, h, m); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	want := strings.Join([]string{
		"SQSONCE_ATTR_BATCH_NO=00",
		"SQSONCE_ATTR_EVENTTYPE=payment.succeeded",
		"SQSONCE_ATTR_LONGEST=yyyyy... " + strconv.Itoa(len("SQSONCE_ATTR_LONGEST=")+worker.MaxAttrValue),
		"SQSONCE_ATTR_MULTI=line one", // its second line does not start with SQSONCE_ATTR_
		"SQSONCE_ATTR_ORDER_ID=shadowed",
		"multi: 17 bytes",
	}, "\n") + "\n"
	// "order-id" < "order.id" in byte order, so "order-id" is kept.
	if string(m.Result) != want {
		t.Errorf("Result:\n%s\nwant:\n%s", m.Result, want)
	}
}
