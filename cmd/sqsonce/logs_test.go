package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Logs write durations as text and states by name, under their usual keys,
// in JSON as in text; other values keep their kind.
func TestNewLogger_Readable(t *testing.T) {
	t.Parallel()
	noEnv := func(string) (string, bool) { return "", false }
	write := func(format string) string {
		var b bytes.Buffer
		log, err := newLogger(&b, format, "info", noEnv)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("work failed: will retry", "retry_in", 5*time.Second, "state", ledger.StateInProgress,
			"attempt", 3, "error", errors.New("boom"), slog.Group("lease", slog.Duration("left", 90*time.Second)))
		return b.String()
	}

	var got map[string]any
	if err := json.Unmarshal([]byte(write("json")), &got); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{"retry_in": "5s", "state": "in_progress", "attempt": 3.0, "error": "boom"} {
		if got[key] != want {
			t.Errorf("JSON %s = %#v, want %#v", key, got[key], want)
		}
	}
	if lease, _ := got["lease"].(map[string]any); lease["left"] != "1m30s" {
		t.Errorf("JSON lease = %#v, want left 1m30s", got["lease"])
	}

	text := write("text")
	for _, want := range []string{"retry_in=5s", "state=in_progress", "attempt=3", "lease.left=1m30s"} {
		if !strings.Contains(text, want) {
			t.Errorf("text: no %q in %s", want, text)
		}
	}
}

// A real worker's JSON log of a failed attempt gives its back-off as text.
func TestMain_RunLogsReadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 75\n")
	if code, out := e.run("send", `{"id":"log-1"}`+"\n"); code != 0 {
		t.Fatalf("send: exit %d: %s", code, out)
	}
	cmd, out := e.start("run", "SQSONCE_FLOW_MODE=off")
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var line map[string]any
	e.waitFor("a log line of a failed attempt", 30*time.Second, func() bool {
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == "work failed: will retry" {
				line = l
				return true
			}
		}
		return false
	})
	if s, ok := line["retry_in"].(string); !ok || s != "500ms" {
		t.Errorf("retry_in = %#v, want \"500ms\" (retry.min_backoff): %v", line["retry_in"], line)
	}
}

// The default ledger.retention outlasts a queue and a dead-letter queue
// made with SQS's default retention (4 days each): the worker does not warn
// at start.
func TestMain_RunDefaultRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	cmd, out := e.start("run")
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	e.waitFor("the worker to start", 30*time.Second, func() bool { return strings.Contains(out.String(), `"msg":"worker started"`) })
	if strings.Contains(out.String(), "ledger retention is shorter") {
		t.Fatalf("the default retention warns against SQS's default queues:\n%s", out)
	}
}
