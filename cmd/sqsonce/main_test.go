package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// The test binary doubles as the sqsonce binary: with SQSONCE_TEST_AS_BINARY
// set it runs main, so the tests below can start, signal and kill real
// sqsonce processes. Its arguments are SQSONCE_TEST_ARGS split at white
// space, or, when that starts with "[", a JSON array of them (arguments
// with spaces).
func TestMain(m *testing.M) {
	if os.Getenv("SQSONCE_TEST_AS_BINARY") == "1" {
		args := strings.Fields(os.Getenv("SQSONCE_TEST_ARGS"))
		if raw := os.Getenv("SQSONCE_TEST_ARGS"); strings.HasPrefix(raw, "[") {
			if err := json.Unmarshal([]byte(raw), &args); err != nil {
				panic(err)
			}
		}
		os.Args = append([]string{"sqsonce"}, args...)
		main()
	}
	os.Exit(m.Run())
}

// env is a test's queue, files and environment for sqsonce processes.
type procEnv struct {
	t      *testing.T
	client *sqs.Client
	queue  sqstest.Queue
	dir    string
	vars   []string
}

func newEnv(t *testing.T, fifo bool, handler string) *procEnv {
	t.Helper()
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{FIFO: fifo, MaxReceiveCount: 5, VisibilityTimeout: 5 * time.Second})
	dir := t.TempDir()
	script := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nset -eu\n"+handler), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &procEnv{t: t, client: client, queue: q, dir: dir}
	// Configuration by the environment alone, as in a container.
	e.vars = []string{
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1",
		"SQSONCE_QUEUE_URL=" + q.URL,
		"SQSONCE_QUEUE_ENDPOINT=" + sqstest.Endpoint(t),
		"SQSONCE_QUEUE_WAIT_TIME=1s",
		"SQSONCE_QUEUE_VISIBILITY_TIMEOUT=2s",
		"SQSONCE_LEDGER_PATH=" + filepath.Join(dir, "ledger.db"),
		"SQSONCE_HANDLER_COMMAND=" + script,
		"SQSONCE_RETRY_MIN_BACKOFF=500ms",
		"SQSONCE_RETRY_MAX_BACKOFF=1s",
		"SQSONCE_SHUTDOWN_GRACE=15s",
		"SQSONCE_ADMIN_LISTEN=127.0.0.1:0",
		"SQSONCE_INGEST_ADMIN_LISTEN=127.0.0.1:0",
		"STATE=" + dir,
		// Under the race detector a process that exits 0 sleeps a second
		// first, for races of goroutines still running (the detector's
		// atexit_sleep_ms); races found while it runs are reported as ever.
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
	}
	return e
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start starts a real sqsonce process; its output can be read while it runs.
func (e *procEnv) start(args string, extra ...string) (*exec.Cmd, *syncBuffer) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), e.vars...), extra...)
	cmd.Env = append(cmd.Env, "SQSONCE_TEST_AS_BINARY=1", "SQSONCE_TEST_ARGS="+args)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

// runArgs is run with arguments that may hold spaces.
func (e *procEnv) runArgs(args []string, stdin string, extra ...string) (int, string) {
	e.t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.run(string(b), stdin, extra...)
}

// run runs a short sqsonce command to its end and returns its exit code.
func (e *procEnv) run(args string, stdin string, extra ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(append(os.Environ(), e.vars...), extra...), "SQSONCE_TEST_AS_BINARY=1", "SQSONCE_TEST_ARGS="+args)
	cmd.Stdin = strings.NewReader(stdin)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func (e *procEnv) waitFor(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *procEnv) queueEmpty() bool {
	v, n := sqstest.Count(e.t, e.client, e.queue.URL)
	return v == 0 && n == 0
}

func (e *procEnv) lines(name string) []string {
	b, _ := os.ReadFile(filepath.Join(e.dir, name))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (e *procEnv) ledger() *ledger.DB {
	e.t.Helper()
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	return db
}

func wait(t *testing.T, cmd *exec.Cmd, timeout time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("process did not exit within %v", timeout)
		return -1
	}
}

func TestMain_Usage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args string
		env  []string
		code int
		want string
	}{
		{"", nil, exitUsage, "Commands:"},
		{"frobnicate", nil, exitUsage, `unknown command "frobnicate"`},
		{"version", nil, exitOK, "sqsonce "},
		{"run --help", nil, exitOK, "SQSONCE_QUEUE_URL"},
		{"help", nil, exitOK, "flow      pause and resume the intake by hand"},
		{"flow --help", nil, exitOK, "pause --until T --reason TEXT"},
		{"flow pause --help", nil, exitOK, "-until string"},
		{"run --help", nil, exitOK, "SQSONCE_FLOW_PARTITION"},
		{"check --help", nil, exitOK, "-sample-attribute value"},
		{"send --help", nil, exitOK, "MessageDeduplicationId"},
		{"ingest --help", nil, exitOK, "OTEL_TRACES_EXPORTER"},
		{"run --no-such-flag", nil, exitUsage, "no-such-flag"},
		{"run --log-format xml", []string{"SQSONCE_QUEUE_URL=http://127.0.0.1:1/q"}, exitUsage, "--log-format"},
		{"run", []string{"SQSONCE_QUEUE_URL="}, exitUsage, "queue.url"},
		{"run", []string{"SQSONCE_QUEUE_URL=http://127.0.0.1:1/q", "SQSONCE_QUEUE_MAX_MESSAGES=11"}, exitUsage, "queue.max_messages"},
		{"run --config /does/not/exist.toml", nil, exitFailure, "/does/not/exist.toml"},
		{"run extra", []string{"SQSONCE_QUEUE_URL=http://127.0.0.1:1/q"}, exitUsage, "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			code, out := runMain(tc.args, env)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d; output should contain %q:\n%s", code, tc.code, tc.want, out)
			}
			// The mark of a usage error (exit status 2) is not a reason.
			if strings.Contains(out, ": usage") {
				t.Errorf("the error ends in the word of its exit status:\n%s", out)
			}
		})
	}
}

// runMain runs Main in this process with env as its whole environment and
// returns the exit code and what it printed.
func runMain(args string, env map[string]string) (int, string) {
	var stdout, stderr bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	code := m.Run(context.Background(), strings.Fields(args))
	return code, stdout.String() + stderr.String()
}

func TestMain_Send(t *testing.T) {
	t.Parallel()

	t.Run("Standard", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		code, out := e.run("send", "{\"id\":\"a\"}\n\n{\"id\":\"b\"}\n")
		if code != 0 || !strings.Contains(out, "sent 2 messages") {
			t.Fatalf("exit %d: %s", code, out)
		}
		if v, _ := sqstest.Count(t, e.client, e.queue.URL); v != 2 {
			t.Fatalf("%d messages in the queue", v)
		}
		// A bad line says what is wrong with it, and stops the command:
		// the lines before it are sent, none after it.
		code, out = e.run("send", "{\"id\":\"c\"}\nnot json\n{\"id\":\"d\"}\n")
		want := "standard input line 2: not valid JSON: invalid character 'o' in literal null (expecting 'u'): the 1 messages before it were sent, nothing after"
		if code != exitUsage || !strings.Contains(out, want) {
			t.Fatalf("bad line: exit %d, want %d and %q:\n%s", code, exitUsage, want, out)
		}
		if v, _ := sqstest.Count(t, e.client, e.queue.URL); v != 3 {
			t.Fatalf("%d messages in the queue, want 3: the 2 sent before and the line before the bad one", v)
		}
		code, out = e.run("send", "{\"id\":\n")
		if want := "standard input line 1: not valid JSON: unexpected end of JSON input: nothing was sent"; code != exitUsage || !strings.Contains(out, want) {
			t.Fatalf("bad first line: exit %d, want %d and %q:\n%s", code, exitUsage, want, out)
		}
	})

	// Lines are sent as they come: a line written to a pipe that stays
	// open (tail -f | sqsonce send) reaches the queue before the input ends.
	t.Run("Streams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(append(os.Environ(), e.vars...), "SQSONCE_TEST_AS_BINARY=1", "SQSONCE_TEST_ARGS=send")
		out := &syncBuffer{}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = r, out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		for i := 1; i <= 2; i++ {
			fmt.Fprintf(w, "{\"id\":\"s-%d\"}\n", i)
			e.waitFor(fmt.Sprintf("line %d in the queue while the input is open", i), 30*time.Second, func() bool {
				v, n := sqstest.Count(t, e.client, e.queue.URL)
				return v+n == i
			})
		}
		w.Close()
		if code := wait(t, cmd, 30*time.Second); code != 0 || !strings.Contains(out.String(), "sent 2 messages") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})

	// A line over SQS's limit goes to S3, and the message points to it in
	// the SQS Extended Client's format.
	t.Run("LargeThroughS3", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		s3c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, s3c)
		big := `{"id":"big-1","blob":"` + strings.Repeat("x", 300<<10) + `"}`
		code, out := e.run("send", big+"\n")
		if code != exitUsage || !strings.Contains(out, "set payload.bucket to send it through S3") {
			t.Fatalf("without a bucket: exit %d: %s", code, out)
		}
		code, out = e.run("send", big+"\n{\"id\":\"small\"}\n", "SQSONCE_PAYLOAD_BUCKET="+bucket, "SQSONCE_PAYLOAD_ENDPOINT="+sqstest.Endpoint(t))
		if code != 0 || !strings.Contains(out, "sent 2 messages") {
			t.Fatalf("exit %d: %s", code, out)
		}
		msgs := sqstest.Drain(t, e.client, e.queue.URL, 2, 5*time.Second)
		if len(msgs) != 2 {
			t.Fatalf("%d messages", len(msgs))
		}
		var pointers int
		for _, m := range msgs {
			body := aws.ToString(m.Body)
			if body == `{"id":"small"}` {
				if _, ok := m.MessageAttributes[worker.AttrExtendedPayloadSize]; ok || len(m.MessageAttributes) != 1 {
					t.Errorf("the small line has attributes %v, want its traceparent alone", m.MessageAttributes)
				}
				continue
			}
			pointers++
			p, err := worker.ParseS3Pointer([]byte(body))
			if err != nil || p.Bucket != bucket {
				t.Fatalf("body %.200s: %+v, %v", body, p, err)
			}
			if !strings.HasPrefix(body, `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":`) {
				t.Errorf("body %s", body)
			}
			a := m.MessageAttributes[worker.AttrExtendedPayloadSize]
			if aws.ToString(a.DataType) != "Number" || aws.ToString(a.StringValue) != strconv.Itoa(len(big)) {
				t.Errorf("ExtendedPayloadSize %s %s, want Number %d", aws.ToString(a.DataType), aws.ToString(a.StringValue), len(big))
			}
			got, ok := sqstest.GetObject(t, s3c, p.Bucket, p.Key)
			if !ok || string(got) != big {
				t.Fatalf("the object holds %d bytes (found: %v), want the line's %d", len(got), ok, len(big))
			}
		}
		if pointers != 1 {
			t.Fatalf("%d pointer messages", pointers)
		}
		code, out = e.run("send", big+"\n", "SQSONCE_PAYLOAD_BUCKET="+bucket, "SQSONCE_PAYLOAD_MAX_SIZE=1000")
		if code != exitUsage || !strings.Contains(out, "and than payload.max_size (1000 bytes)") {
			t.Fatalf("over max_size: exit %d: %s", code, out)
		}
	})

	// On FIFO queues a line sent through S3 is deduplicated by its own
	// key, not by the pointer's random object key.
	t.Run("LargeThroughS3FIFO", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, true, "exit 0\n")
		s3c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, s3c)
		big := `{"id":"big-fifo","blob":"` + strings.Repeat("x", 300<<10) + `"}`
		for range 2 {
			code, out := e.run("send", big+"\n", "SQSONCE_PAYLOAD_BUCKET="+bucket, "SQSONCE_PAYLOAD_ENDPOINT="+sqstest.Endpoint(t))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
		}
		msgs := sqstest.Drain(t, e.client, e.queue.URL, 10, 2*time.Second)
		if len(msgs) != 1 {
			t.Fatalf("%d messages after sending one operation twice", len(msgs))
		}
		id := worker.DeduplicationID("big-fifo")
		if g, d := msgs[0].Attributes["MessageGroupId"], msgs[0].Attributes["MessageDeduplicationId"]; g != id || d != id {
			t.Fatalf("group %q, deduplication id %q, want %q", g, d, id)
		}
		if _, err := worker.ParseS3Pointer([]byte(aws.ToString(msgs[0].Body))); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("FIFOKeysFromTheOperation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, true, "exit 0\n")
		input := filepath.Join(e.dir, "in.jsonl")
		os.WriteFile(input, []byte("{\"id\":\"evt_1\",\"n\":1}\n{\"id\":\"evt_2\"}\n"), 0o600)
		for range 2 { // a resend is dropped by SQS's deduplication
			if code, out := e.run("send "+input, ""); code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
		}
		msgs := sqstest.Drain(t, e.client, e.queue.URL, 10, time.Second)
		if len(msgs) != 2 {
			t.Fatalf("%d messages after sending 2 operations twice", len(msgs))
		}
		for _, m := range msgs {
			if g, d := m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]; !strings.HasPrefix(g, "evt_") || g != d {
				t.Fatalf("group %q, deduplication id %q", g, d)
			}
		}
		if code, out := e.run("send", "{\"other\":1}\n"); code != exitUsage || !strings.Contains(out, "line 1") {
			t.Fatalf("keyless line on FIFO: exit %d: %s", code, out)
		}
	})
}

func TestMain_RunProcess(t *testing.T) {
	t.Parallel()

	t.Run("SIGTERMDrainsRunningWork", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, `cat >/dev/null
echo "$SQSONCE_KEY" >>"$STATE/started"
sleep 1
echo "$SQSONCE_KEY" >>"$STATE/effects"
`)
		var input strings.Builder
		for i := range 6 {
			fmt.Fprintf(&input, "{\"id\":\"op-%d\"}\n", i)
		}
		if code, out := e.run("send", input.String()); code != 0 {
			t.Fatalf("send: %d %s", code, out)
		}
		cmd, out := e.start("run --log-format json")
		e.waitFor("work to start", 15*time.Second, func() bool { return len(e.lines("started")) >= 6 })
		cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, cmd, 15*time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM:\n%s", code, out)
		}
		if got := len(e.lines("effects")); got != 6 {
			t.Fatalf("%d effects after a drain, want 6:\n%s", got, out)
		}
		if !e.queueEmpty() {
			t.Fatalf("messages left after a clean drain:\n%s", out)
		}
		if !strings.Contains(out.String(), `"completed":6`) {
			t.Fatalf("no summary of counts on exit:\n%s", out)
		}
	})

	// A line over SQS's limit, sent through S3, is one operation for the
	// worker: keyed by the line, its handler given the line; a resend of
	// it is suppressed, and with delete_objects its objects go.
	t.Run("LargeThroughS3", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, `cat >"$STATE/body-$SQSONCE_KEY"
echo "$SQSONCE_KEY" >>"$STATE/effects"
`)
		s3c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, s3c)
		e.vars = append(e.vars, "SQSONCE_PAYLOAD_BUCKET="+bucket, "SQSONCE_PAYLOAD_ENDPOINT="+sqstest.Endpoint(t), "SQSONCE_PAYLOAD_DELETE_OBJECTS=true")
		big := `{"id":"big-1","blob":"` + strings.Repeat("z", 300<<10) + `"}`
		for range 2 {
			if code, out := e.run("send", big+"\n"); code != 0 {
				t.Fatalf("send: %d %s", code, out)
			}
		}
		cmd, out := e.start("run --log-format json")
		e.waitFor("the queue to empty", 20*time.Second, e.queueEmpty)
		e.waitFor("the objects' deletes", 10*time.Second, func() bool {
			l, err := s3c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
			return err == nil && len(l.Contents) == 0
		})
		cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, cmd, 15*time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if got := e.lines("effects"); len(got) != 1 || got[0] != "big-1" {
			t.Fatalf("effects %q:\n%s", got, out)
		}
		if b, err := os.ReadFile(filepath.Join(e.dir, "body-big-1")); err != nil || string(b) != big {
			t.Fatalf("the handler got %d bytes (%v), want the line's %d", len(b), err, len(big))
		}
		if strings.Contains(out.String(), "SDK ") {
			t.Errorf("the AWS SDK logs on its own:\n%s", out)
		}
		for _, want := range []string{`"completed":1`, `"duplicates":1`, `"payloads_rejected":0`, `"objects_deleted":2`} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("no %s in:\n%s", want, out)
			}
		}
	})

	t.Run("SecondSignalCutsTheGrace", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, `cat >/dev/null
echo started >>"$STATE/started"
sleep 30
echo done >>"$STATE/effects"
`)
		e.run("send", "{\"id\":\"long\"}\n")
		cmd, out := e.start("run")
		e.waitFor("work to start", 15*time.Second, func() bool { return len(e.lines("started")) == 1 })
		cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGTERM)
		start := time.Now()
		if code := wait(t, cmd, 12*time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %v to stop after the second signal", d)
		}
		if len(e.lines("effects")) != 0 {
			t.Fatal("the cut work reported an effect")
		}
		// Not acknowledged: the message is still there for the next worker.
		v, n := sqstest.Count(t, e.client, e.queue.URL)
		if v+n != 1 {
			t.Fatalf("%d visible + %d in flight after an interrupted attempt, want the message kept", v, n)
		}
		rec, err := e.ledger().Get(context.Background(), "long")
		if err != nil || rec.State != ledger.StateFailed || rec.Permanent {
			t.Fatalf("record %+v, %v", rec, err)
		}
	})

	t.Run("KilledWorkerIsTakenOver", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, `cat >/dev/null
echo $$ >>"$STATE/pids"
if [ ! -e "$STATE/hang-once" ]; then : >"$STATE/hang-once"; sleep 60; fi
echo "$SQSONCE_KEY attempt=$SQSONCE_ATTEMPT" >>"$STATE/effects"
`)
		e.run("send", "{\"id\":\"crash\"}\n")
		first, _ := e.start("run")
		e.waitFor("the handler to start", 15*time.Second, func() bool { return len(e.lines("pids")) == 1 })
		first.Process.Kill() // SIGKILL: no chance to release anything
		wait(t, first, 5*time.Second)
		if pid, err := strconv.Atoi(e.lines("pids")[0]); err == nil {
			syscall.Kill(pid, syscall.SIGKILL) // the orphaned handler, as systemd would
		}
		second, out := e.start("run")
		e.waitFor("the operation to complete", 30*time.Second, func() bool { return len(e.lines("effects")) == 1 })
		e.waitFor("the queue to empty", 15*time.Second, e.queueEmpty)
		second.Process.Signal(syscall.SIGTERM)
		if code := wait(t, second, 15*time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if got := e.lines("effects"); len(got) != 1 || got[0] != "crash attempt=2" {
			t.Fatalf("effects %q", got)
		}
		if !strings.Contains(out.String(), "took over") {
			t.Fatalf("no takeover logged:\n%s", out)
		}
	})

	t.Run("SecondProcessOnTheLedgerFails", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		first, _ := e.start("run")
		e.waitFor("the ledger file", 10*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(e.dir, "ledger.db"))
			return err == nil
		})
		time.Sleep(200 * time.Millisecond)
		code, out := e.run("run", "")
		if code != exitFailure || !strings.Contains(out, "another sqsonce process") {
			t.Fatalf("second process: exit %d:\n%s", code, out)
		}
		first.Process.Signal(syscall.SIGTERM)
		if code := wait(t, first, 15*time.Second); code != 0 {
			t.Fatalf("first process exit %d", code)
		}
	})

	t.Run("HTTPHandler", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		got := make(chan string, 10)
		srv := newIdempotentServer(got)
		defer srv.Close()
		e.run("send", "{\"id\":\"h-1\"}\n{\"id\":\"h-1\"}\n{\"id\":\"h-2\"}\n")
		cmd, out := e.start("run", "SQSONCE_HANDLER_TYPE=http", "SQSONCE_HANDLER_URL="+srv.URL)
		e.waitFor("the queue to empty", 20*time.Second, e.queueEmpty)
		cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, cmd, 15*time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		close(got)
		var keys []string
		for k := range got {
			keys = append(keys, k)
		}
		if len(keys) != 2 {
			t.Fatalf("the HTTP endpoint saw keys %v, want h-1 and h-2 once each", keys)
		}
	})
}

// sanity: the example configuration file drives a real process too.
func TestMain_ExampleConfigRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "cat >/dev/null\necho \"$SQSONCE_KEY\" >>\"$STATE/effects\"\n")
	e.run("send", "{\"id\":\"x\"}\n")
	cmd, out := e.start("run --config ../../config.example.toml")
	e.waitFor("the operation", 20*time.Second, func() bool { return len(e.lines("effects")) == 1 })
	cmd.Process.Signal(syscall.SIGTERM)
	if code := wait(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// newIdempotentServer answers POSTs and sends each request's
// Idempotency-Key to got.
func newIdempotentServer(got chan<- string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Idempotency-Key")
		w.WriteHeader(http.StatusCreated)
	}))
}
