package main

// Bad input to [flow], [[flow.partition]], `sqsonce flow` and `sqsonce
// check --sample`: each is refused with an error that names it, or read
// whole, never cut nor taken in part.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inputEnv is a configuration by the environment alone, with a bbolt
// ledger in dir; nothing here reaches SQS.
func inputEnv(dir string, extra ...string) map[string]string {
	env := map[string]string{
		"SQSONCE_QUEUE_URL":       testQueueURL,
		"SQSONCE_LEDGER_PATH":     filepath.Join(dir, "ledger.db"),
		"SQSONCE_HANDLER_COMMAND": "/bin/true",
		"SQSONCE_KEY_POINTER":     "/id",
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// inputRun runs Main in this process with args as they are (no splitting).
func inputRun(args []string, env map[string]string, stdin []byte) (int, string) {
	var stdout, stderr bytes.Buffer
	m := &Main{Stdin: bytes.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	code := m.Run(context.Background(), args)
	return code, stdout.String() + stderr.String()
}

// inputLoad is LoadConfig from env that reports a panic as a test failure.
func inputLoad(t *testing.T, env map[string]string) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("LoadConfig panicked: %v", r)
		}
	}()
	_, err = LoadConfig("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return err
}

// queue.pollers or queue.max_messages out of range, so that pollers x
// max_messages would exceed 10000: the key's own problem is reported, named
// with the variable that set it, not the worker's Prefetch, which the file
// has no key for (that panicked).
func TestFlowInput_PrefetchNotBlamed(t *testing.T) {
	for _, tc := range []struct{ kv, want string }{
		{"SQSONCE_QUEUE_POLLERS=2000", "queue.pollers: must be between 1 and 64, got 2000 (set by SQSONCE_QUEUE_POLLERS)"},
		{"SQSONCE_QUEUE_MAX_MESSAGES=100000", "queue.max_messages: must be between 1 and 10, got 100000 (set by SQSONCE_QUEUE_MAX_MESSAGES)"},
	} {
		t.Run(tc.kv, func(t *testing.T) {
			err := inputLoad(t, inputEnv(t.TempDir(), tc.kv))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "Prefetch") {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A problem of a key that the environment set names the variable, where
// the file and the environment may both set it; one of the file's does not.
func TestFlowInput_ProblemNamesItsVariable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sqsonce.toml")
	file := fmt.Sprintf("[queue]\nurl = %q\n[ledger]\npath = %q\n[handler]\ncommand = [\"/bin/true\"]\n[key]\npointer = \"/id\"\n[flow]\nrate = 5\nburst = 0\n", testQueueURL, filepath.Join(dir, "l.db"))
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path, func(k string) (string, bool) {
		if k == "SQSONCE_FLOW_RATE" {
			return "-1", true
		}
		return "", false
	})
	if err == nil {
		t.Fatal("no error")
	}
	problems := strings.Split(err.Error(), "\n")
	if len(problems) != 2 || !strings.HasPrefix(problems[0], "flow.rate: must be 0 (no rate)") || !strings.HasSuffix(problems[0], ", got -1 (set by SQSONCE_FLOW_RATE): invalid configuration") ||
		!strings.HasPrefix(problems[1], "flow.burst: must be between 1") || strings.Contains(problems[1], "set by") {
		t.Errorf("got the problems %q: want flow.rate's naming SQSONCE_FLOW_RATE, and flow.burst's (the file's) naming none", problems)
	}
}

// A --reason is printable text: a terminal escape, a bidirectional
// override or an invalid byte is refused (by pause and by resume), since
// status, pause and resume print it on operators' terminals; white space
// is collapsed as before. Text already in the ledger is printed escaped.
func TestFlowInput_PauseReasonPrintable(t *testing.T) {
	for _, r := range []string{"maint \x1b[2J\x1b[31mred", "db \u202emigration", "bad \xff byte"} {
		if _, err := parsePause("10m", r, time.Now()); err == nil || !strings.Contains(err.Error(), "printable") {
			t.Errorf("pause --reason %q: %v, want it refused as not printable", r, err)
		}
	}
	if p, err := parsePause("10m", "  db\tmigration \n by ops ", time.Now()); err != nil || p.reason != "db migration by ops" {
		t.Errorf("white space: %+v, %v", p, err)
	}
	dir := t.TempDir()
	env := inputEnv(dir)
	if code, out := inputRun([]string{"ledger", "init"}, env, nil); code != 0 {
		t.Fatalf("ledger init: %d %s", code, out)
	}
	if code, out := inputRun([]string{"flow", "resume", "--reason", "done \x1b[31m"}, env, nil); code != exitUsage || !strings.Contains(out, "printable") {
		t.Errorf("resume --reason with ESC: exit %d, want %d:\n%s", code, exitUsage, out)
	}
	if got := oneLine("a\x1b[31mred \u202e x\xff", 100); got != `a\x1b[31mred \u202e x`+"\ufffd" {
		t.Errorf("oneLine of a ledger text: %q", got)
	}
}

// --scope is checked as flow.scope is (no control characters, not blank),
// though at the ledger's length, for partition values' scopes.
func TestFlowInput_ScopeFlag(t *testing.T) {
	dir := t.TempDir()
	env := inputEnv(dir)
	if code, out := inputRun([]string{"ledger", "init"}, env, nil); code != 0 {
		t.Fatalf("ledger init: %d %s", code, out)
	}
	for _, s := range []string{"   ", "orders\nother", "a\x1b[31m"} {
		code, out := inputRun([]string{"flow", "status", "--scope", s}, env, nil)
		if code != exitUsage || !strings.Contains(out, "--scope") {
			t.Errorf("flow status --scope %q: exit %d, want %d naming --scope:\n%s", s, code, exitUsage, out)
		}
	}
	long := "orders /bin/true | pointer /tenant = " + strings.Repeat("t", 200)
	if code, out := inputRun([]string{"flow", "status", "--scope", long}, env, nil); code != 0 {
		t.Errorf("flow status --scope of a partition value's (%d bytes): exit %d:\n%s", len(long), code, out)
	}
}

// A flag of one flow command given to another is refused, not ignored:
// resume --until would resume at once.
func TestFlowInput_FlagsOfAnotherCommand(t *testing.T) {
	dir := t.TempDir()
	env := inputEnv(dir)
	if code, out := inputRun([]string{"ledger", "init"}, env, nil); code != 0 {
		t.Fatalf("ledger init: %d %s", code, out)
	}
	for _, args := range [][]string{
		{"flow", "status", "--until", "5m", "--reason", "x"},
		{"flow", "resume", "--until", "5m"},
		{"flow", "resume", "--json"},
		{"flow", "pause", "--json", "--until", "5m", "--reason", "x"},
	} {
		if code, out := inputRun(args, env, nil); code != exitUsage || !strings.Contains(out, "does not take --") {
			t.Errorf("%q: exit %d, want %d (a flag this command does not take):\n%s", args, code, exitUsage, out)
		}
	}
	if code, out := inputRun([]string{"flow", "status", "--json", "--scope", "orders /bin/true"}, env, nil); code != 0 {
		t.Errorf("status with its own flags: exit %d:\n%s", code, out)
	}
}

// SQSONCE_FLOW_PARTITION is one JSON array of objects whose keys are spelt
// exactly, once each, as in the file: nothing after the array, no key in
// another case, none twice, no object or null alone; a value of the wrong
// type names its key.
func TestFlowInput_EnvPartition(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`[{"pointer":"/t","rate":5}] [{"pointer":"/u","rate":1}]`, "got more after it"},
		{`[{"pointer":"/t","rate":5}] junk`, "got more after it"},
		{`[{"Pointer":"/t","RATE":5}]`, `item 1: unknown field "Pointer"`},
		{`[{"pointer":"/t","rate":5},{"pointer":"/u","rate":5,"pointer":"/v"}]`, `item 2: key "pointer" given twice`},
		{`{"pointer":"/t","rate":5}`, "want a JSON array of objects"},
		{`null`, "want a JSON array of objects"},
		{`[{"pointer":"/t","rate":"5"}]`, `"rate": want a JSON number, got string`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			err := inputLoad(t, inputEnv(t.TempDir(), "SQSONCE_FLOW_PARTITION="+tc.value))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "SQSONCE_FLOW_PARTITION") {
				t.Errorf("want an error naming SQSONCE_FLOW_PARTITION and %q, got %v", tc.want, err)
			}
		})
	}
	if err := inputLoad(t, inputEnv(t.TempDir(), `SQSONCE_FLOW_PARTITION=[{"pointer":"/t","rate":5},{"attribute":"Tenant","concurrency":2}]`)); err != nil {
		t.Errorf("a valid value: %v", err)
	}
}

// Two [[flow.partition]] of the same part of the message would share each
// value's bucket and slots under two limits (and the worker's reservations
// named the bucket twice, which every ledger refuses): refused, naming
// both.
func TestFlowInput_DuplicatePartition(t *testing.T) {
	for _, ps := range [][]FlowPartition{
		{{Pointer: "/tenant", Rate: 5}, {Pointer: "/tenant", Rate: 10}},
		{{Pointer: "/a~1b", Rate: 5}, {Attribute: "Tenant", Rate: 1}, {Pointer: "/a~1b", Concurrency: 2}},
		{{Attribute: "Tenant", Rate: 5}, {Attribute: "Tenant", Rate: 10}},
	} {
		c := validConfig()
		c.Flow.Partition = ps
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "than partition #1 does") {
			t.Errorf("%+v: %v, want it refused naming partition #1", ps, err)
		}
	}
	c := validConfig()
	c.Flow.Partition = []FlowPartition{{Pointer: "/tenant", Rate: 5}, {Pointer: "/account", Rate: 10}, {Attribute: "tenant", Rate: 1}}
	if err := c.Validate(); err != nil {
		t.Errorf("three parts: %v", err)
	}
}

// A partition's attribute, and key.attribute, must be a name SQS allows
// for a message attribute: any other can never match, and every message
// would fall in "(none)", or have no key.
func TestFlowInput_AttributeNames(t *testing.T) {
	for _, a := range []string{"Region ", "AWS.Region", "amazon.x", "a b", "x\ny", ".a", "a.", "a..b", strings.Repeat("a", 257)} {
		c := validConfig()
		c.Flow.Partition = []FlowPartition{{Attribute: a, Rate: 5}}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "flow.partition: #1") {
			t.Errorf("partition attribute %q: %v", a, err)
		}
		c = validConfig()
		c.Key.From, c.Key.Attribute, c.Key.Pointer = "attribute", a, ""
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "key.attribute") {
			t.Errorf("key.attribute %q: %v", a, err)
		}
	}
	for _, a := range []string{"Region", "tenant-id", "x_y.z", "AWSRegion"} {
		c := validConfig()
		c.Flow.Partition = []FlowPartition{{Attribute: a, Rate: 5}}
		if err := c.Validate(); err != nil {
			t.Errorf("partition attribute %q: %v", a, err)
		}
		c = validConfig()
		c.Key.From, c.Key.Attribute, c.Key.Pointer = "attribute", a, ""
		if err := c.Validate(); err != nil {
			t.Errorf("key.attribute %q: %v", a, err)
		}
	}
}

// check --sample reads the whole body, from a file or stdin, up to the
// largest payload the worker reads; a larger one is refused, never cut
// (stdin was cut at 1 MiB and read as "not valid JSON"). --sample "" is a
// usage error, not a full check.
func TestFlowInput_Sample(t *testing.T) {
	body := []byte(fmt.Sprintf(`{"id":"a","pad":%q,"tenant":"acme"}`, strings.Repeat("x", 1<<20)))
	env := inputEnv(t.TempDir(), `SQSONCE_FLOW_PARTITION=[{"pointer":"/tenant","rate":5}]`)
	code, out := inputRun([]string{"check", "--sample", "-"}, env, body)
	if code != 0 || !strings.Contains(out, `= "acme"`) {
		t.Errorf("exit %d: a %d-byte body on stdin:\n%s", code, len(body), out)
	}
	env["SQSONCE_PAYLOAD_MAX_SIZE"] = "1048576"
	code, out = inputRun([]string{"check", "--sample", "-"}, env, body)
	if code == 0 || !strings.Contains(out, "stdin holds more than 1048576 bytes") {
		t.Errorf("exit %d: a body over payload.max_size:\n%s", code, out)
	}
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = inputRun([]string{"check", "--sample", path}, env, nil)
	if code == 0 || !strings.Contains(out, "big.json holds more than 1048576 bytes") {
		t.Errorf("exit %d: a file over payload.max_size:\n%s", code, out)
	}
	if code, out = inputRun([]string{"check", "--sample", ""}, env, nil); code != exitUsage || !strings.Contains(out, "--sample needs a file") {
		t.Errorf("--sample \"\": exit %d:\n%s", code, out)
	}
}

// check --sample of an SNS notification envelope, without key.sns, says
// where the key is (the subscription delivers envelopes); with key.sns the
// key is read from the envelope's Message.
func TestFlowInput_SampleSNSEnvelope(t *testing.T) {
	body := []byte(`{"Type":"Notification","MessageId":"m-1","TopicArn":"arn:aws:sns:us-east-1:000000000000:orders","Message":"{\"id\":\"order-7\"}"}`)
	env := inputEnv(t.TempDir())
	code, out := inputRun([]string{"check", "--sample", "-"}, env, body)
	if code == 0 || !strings.Contains(out, "the body is an SNS notification envelope: with key.sns = true") {
		t.Errorf("exit %d: an SNS envelope without key.sns:\n%s", code, out)
	}
	env["SQSONCE_KEY_SNS"] = "true"
	code, out = inputRun([]string{"check", "--sample", "-"}, env, body)
	if code != 0 || !strings.Contains(out, `"order-7"`) || strings.Contains(out, "SNS notification envelope") {
		t.Errorf("exit %d: an SNS envelope with key.sns:\n%s", code, out)
	}
	// A body that is no envelope gets no hint.
	code, out = inputRun([]string{"check", "--sample", "-"}, inputEnv(t.TempDir()), []byte(`{"other":1}`))
	if code == 0 || strings.Contains(out, "SNS") {
		t.Errorf("exit %d: a plain body without the key:\n%s", code, out)
	}
}
