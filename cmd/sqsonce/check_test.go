package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

func TestMain_Check(t *testing.T) {
	t.Parallel()

	// The default handler.timeout, shutdown.grace and ledger.retention
	// among them: the defaults open no window that check warns about, on
	// a queue and a dead-letter queue made with SQS's default retention (4
	// days each).
	t.Run("AllGood", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		e.vars = slices.DeleteFunc(e.vars, func(v string) bool { return strings.HasPrefix(v, "SQSONCE_SHUTDOWN_GRACE=") })
		code, out := e.run("check", "", "SQSONCE_QUEUE_VISIBILITY_TIMEOUT=30s",
			"AWS_SECRET_ACCESS_KEY=secret", "SQSONCE_HANDLER_ENV=PATH HOME")
		if code != 0 || strings.Contains(out, "fail") || strings.Contains(out, "warn") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		// The local server's queue URL names the region (fauxqs's), or
		// none (moto's), and then AWS_REGION does.
		region := "ok region us-east-1 (from queue.url)"
		if sqstest.Server(t) == "moto" {
			region = "ok region us-east-1 (from the AWS SDK's chain"
		}
		for _, want := range []string{"ok config", region, "ok credentials", "ok queue", "message retention 96h0m0s", "ok dead-letter queue",
			"(retention 96h0m0s)", "ok retention ledger.retention 336h covers the queues' 192h0m0s", "ok ledger", "will be created", "ok handler", "ok tracing off"} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		if _, err := os.Stat(filepath.Join(e.dir, "ledger.db")); !os.IsNotExist(err) {
			t.Error("check created the ledger file")
		}
	})

	t.Run("Tracing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		code, out := e.run("check", "", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318")
		if !strings.Contains(squash(out), "ok tracing spans exported by OTLP over HTTP to http://127.0.0.1:4318 (OTEL_EXPORTER_OTLP_ENDPOINT)") {
			t.Errorf("exit %d, no tracing line for an endpoint in:\n%s", code, out)
		}
		// A configuration error, as for sqsonce run: exit status 2.
		code, out = e.run("check", "", "OTEL_TRACES_EXPORTER=zipkin")
		if code != exitUsage || !strings.Contains(squash(out), `fail tracing OTEL_TRACES_EXPORTER="zipkin": supported: otlp`) {
			t.Errorf("an exporter that is not built in: exit %d:\n%s", code, out)
		}
	})

	t.Run("Warnings", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		client := sqstest.NewClient(t, nil)
		bare := sqstest.CreateQueue(t, client, sqstest.QueueOptions{})
		code, out := e.run("check", "", "SQSONCE_QUEUE_URL="+bare.URL, "SQSONCE_LEDGER_RETENTION=1h", "SQSONCE_HANDLER_TIMEOUT=1m",
			"AWS_SECRET_ACCESS_KEY=secret", `SQSONCE_HANDLER_ENV=["*", "AWS_SECRET_ACCESS_KEY"]`)
		if code != 0 {
			t.Fatalf("warnings alone must not fail: exit %d:\n%s", code, out)
		}
		for _, want := range []string{"warn dead-letter queue", "warn retention", "warn timeouts", "warn shutdown",
			"warn handler env the command gets sqsonce's own secrets AWS_SECRET_ACCESS_KEY, which handler.env names"} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
	})

	// An exec command that outlasts handler.timeout has 5 s between SIGTERM
	// and SIGKILL: the grace must cover both, as config.example.toml says.
	// An http handler has no such 5 s.
	t.Run("Grace", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		for _, tc := range []struct {
			env  []string
			want string // "" for no warning about the shutdown
		}{
			{[]string{"SQSONCE_HANDLER_TIMEOUT=12s", "SQSONCE_SHUTDOWN_GRACE=15s"},
				"warn shutdown shutdown.grace 15s is shorter than handler.timeout 12s plus the 5s an exec command has between SIGTERM and SIGKILL"},
			{[]string{"SQSONCE_HANDLER_TIMEOUT=10s", "SQSONCE_SHUTDOWN_GRACE=15s"}, ""},
			{[]string{"SQSONCE_HANDLER_TIMEOUT=20s", "SQSONCE_SHUTDOWN_GRACE=15s"},
				"warn shutdown shutdown.grace 15s is shorter than handler.timeout 20s"},
			{[]string{"SQSONCE_HANDLER_TIMEOUT=12s", "SQSONCE_SHUTDOWN_GRACE=15s", "SQSONCE_HANDLER_TYPE=http", "SQSONCE_HANDLER_URL=" + srv.URL}, ""},
		} {
			code, out := e.run("check", "", tc.env...)
			if code == exitUsage {
				t.Fatalf("%q: exit %d:\n%s", tc.env, code, out)
			}
			got := regexp.MustCompile(`(?m)^warn +shutdown .*$`).FindString(out)
			if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(squash(got), tc.want) {
				t.Errorf("%q: shutdown line %q, want %q", tc.env, got, tc.want)
			}
		}
	})

	// Without credentials anywhere (as on a laptop against a local server)
	// check says what is missing and what to set, not only what the
	// instance metadata service answered, and asks nothing else of AWS.
	t.Run("NoCredentials", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		none := filepath.Join(e.dir, "none")
		code, out := e.run("check", "", "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
			"AWS_CONFIG_FILE="+none, "AWS_SHARED_CREDENTIALS_FILE="+none, "AWS_WEB_IDENTITY_TOKEN_FILE=",
			"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=", "AWS_CONTAINER_CREDENTIALS_FULL_URI=", "HOME="+e.dir,
			"AWS_EC2_METADATA_DISABLED=true")
		if code != exitFailure {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		want := "fail credentials no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for a local SQS-compatible server any values do), no AWS profile"
		if !strings.Contains(squash(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
		if regexp.MustCompile(`(?m)^(ok|warn|fail) +queue `).MatchString(out) {
			t.Errorf("the queue was asked for without credentials:\n%s", out)
		}
		if strings.Contains(out, "SDK ") {
			t.Errorf("the AWS SDK's own log lines are among check's:\n%s", out)
		}
	})

	// check creates nothing: not the ledger, nor its directory.
	t.Run("LedgerCreatesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		dir := filepath.Join(e.dir, "state", "sqsonce")
		code, out := e.run("check", "", "SQSONCE_LEDGER_PATH="+filepath.Join(dir, "ledger.db"))
		if want := "ok ledger " + filepath.Join(dir, "ledger.db") + " will be created, with its directory " + dir + " (" + e.dir + " is writable)"; !strings.Contains(squash(out), want) {
			t.Errorf("exit %d, no %q in:\n%s", code, want, out)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "state")); !os.IsNotExist(err) {
			t.Errorf("check created the ledger's directory: %v", err)
		}

		file := filepath.Join(e.dir, "a-file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out = e.run("check", "", "SQSONCE_LEDGER_PATH="+filepath.Join(file, "sub", "ledger.db"))
		if want := "fail ledger cannot create " + filepath.Join(file, "sub", "ledger.db") + ": " + file + " is not a directory"; code != exitFailure || !strings.Contains(squash(out), want) {
			t.Errorf("exit %d, no %q in:\n%s", code, want, out)
		}

		if os.Geteuid() == 0 {
			return // root may write anywhere
		}
		locked := filepath.Join(e.dir, "locked")
		if err := os.Mkdir(locked, 0o500); err != nil {
			t.Fatal(err)
		}
		code, out = e.run("check", "", "SQSONCE_LEDGER_PATH="+filepath.Join(locked, "sub", "ledger.db"))
		if want := "fail ledger cannot create " + filepath.Join(locked, "sub", "ledger.db") + ": " + locked + " is not writable"; code != exitFailure || !strings.Contains(squash(out), want) {
			t.Errorf("exit %d, no %q in:\n%s", code, want, out)
		}
	})

	t.Run("Failures", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		cmd, _ := e.start("run") // holds the ledger
		defer func() { cmd.Process.Signal(syscall.SIGTERM); wait(t, cmd, 15*time.Second) }()
		e.waitFor("the ledger file", 15*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(e.dir, "ledger.db.sock"))
			return err == nil
		})
		code, out := e.run("check", "",
			"SQSONCE_QUEUE_URL="+e.queue.URL[:strings.LastIndexByte(e.queue.URL, '/')]+"/no-such-queue",
			"SQSONCE_HANDLER_COMMAND=/no/such/handler")
		if code != exitFailure {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		for _, want := range []string{"fail queue", "does not exist", "fail ledger", "another sqsonce process", "fail handler"} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		// A queue URL that names no region, and no region anywhere else:
		// nothing of AWS is asked, and the rest is checked all the same.
		code, out = e.run("check", "",
			"SQSONCE_QUEUE_URL="+sqstest.Endpoint(t)+"/000000000000/"+path.Base(e.queue.URL),
			"AWS_REGION=", "AWS_DEFAULT_REGION=", "AWS_PROFILE=", "AWS_CONFIG_FILE="+filepath.Join(e.dir, "none"))
		if code != exitUsage {
			t.Fatalf("no region (a configuration error, as for sqsonce run): exit %d:\n%s", code, out)
		}
		for _, want := range []string{"fail region queue.region: no region", "fail ledger", "ok tracing"} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no region: no %q in:\n%s", want, out)
			}
		}
		if regexp.MustCompile(`(?m)^(ok|warn|fail) +(queue|credentials) `).MatchString(out) {
			t.Errorf("no region: AWS was asked:\n%s", out)
		}
	})

	t.Run("HTTPHandler", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodHead {
				t.Errorf("check sent %s: it must not run work", r.Method)
			}
			w.WriteHeader(http.StatusMethodNotAllowed)
		}))
		defer srv.Close()
		code, out := e.run("check", "", "SQSONCE_HANDLER_TYPE=http", "SQSONCE_HANDLER_URL="+srv.URL)
		if code != 0 || !strings.Contains(squash(out), "ok handler") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		code, out = e.run("check", "", "SQSONCE_HANDLER_TYPE=http", "SQSONCE_HANDLER_URL=http://127.0.0.1:1/")
		if code != exitFailure || !strings.Contains(out, "does not answer") {
			t.Fatalf("closed server: exit %d:\n%s", code, out)
		}
	})

	t.Run("PayloadBucket", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		s3c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, s3c)
		endpoint := "SQSONCE_PAYLOAD_ENDPOINT=" + sqstest.Endpoint(t)
		code, out := e.run("check", "", "SQSONCE_PAYLOAD_BUCKET="+bucket, endpoint, "SQSONCE_PAYLOAD_DELETE_OBJECTS=true")
		for _, want := range []string{"ok payload bucket " + bucket + " exists and this host may read it (s3:GetObject)", "ok payload send"} {
			if !strings.Contains(squash(out), want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		if strings.Contains(out, "fail payload") || strings.Contains(out, "warn payload") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if out, err := s3c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket}); err != nil || len(out.Contents) != 0 {
			t.Fatalf("check left objects behind: %v, %v", out, err)
		}

		code, out = e.run("check", "", "SQSONCE_PAYLOAD_BUCKET="+bucket+"-missing", endpoint)
		if code != exitFailure || !strings.Contains(squash(out), "fail payload bucket "+bucket+"-missing: no such bucket") {
			t.Fatalf("missing bucket: exit %d:\n%s", code, out)
		}

		// S3 in front of which a policy without s3:GetObject stands: every
		// read answers 403, as S3 does to a reader without the permission.
		deny := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
		}))
		defer deny.Close()
		code, out = e.run("check", "", "SQSONCE_PAYLOAD_BUCKET="+bucket, "SQSONCE_PAYLOAD_ENDPOINT="+deny.URL)
		if code != exitFailure || !strings.Contains(squash(out), "fail payload bucket "+bucket+": access denied: this host's credentials lack s3:GetObject on the bucket") {
			t.Fatalf("denied: exit %d:\n%s", code, out)
		}

		code, out = e.run("check", "", "SQSONCE_PAYLOAD_BUCKET="+bucket, "SQSONCE_PAYLOAD_ENDPOINT=http://"+closedAddr(t))
		if code != exitFailure || !strings.Contains(squash(out), "fail payload bucket "+bucket+": S3 is unreachable") {
			t.Fatalf("unreachable: exit %d:\n%s", code, out)
		}
	})

	// check says where payloads are read from: the endpoint, the region
	// and the buckets; and warns when SQS is a local server while payloads
	// would still be read from AWS's S3.
	t.Run("PayloadSource", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		local := sqstest.Endpoint(t)
		for _, tc := range []struct {
			env   []string
			want  []string
			avoid []string
		}{
			{[]string{"SQSONCE_PAYLOAD_BUCKETS=orders-payloads"}, []string{
				"ok payload read from AWS's S3 in us-east-1, from orders-payloads only (payload.buckets)",
				"warn payload endpoint queue.endpoint sends the SQS calls to " + local + ", but payload.endpoint is not set: payloads are read from AWS's S3 in us-east-1",
			}, nil},
			{[]string{"SQSONCE_PAYLOAD_BUCKETS=orders-payloads", "SQSONCE_PAYLOAD_ENDPOINT=" + local}, []string{
				"ok payload read from " + local + " (payload.endpoint, path-style, region us-east-1), from orders-payloads only",
			}, []string{"warn payload endpoint"}},
			{nil, []string{"ok payload no bucket is allowed: a message that points to its payload in S3 is dead-lettered"}, []string{"warn payload"}},
			{[]string{"SQSONCE_PAYLOAD_BUCKETS=*", "SQSONCE_PAYLOAD_DELETE_OBJECTS=true", "SQSONCE_PAYLOAD_ENDPOINT=" + local}, []string{
				"warn payload read from " + local + " (payload.endpoint, path-style, region us-east-1), from any bucket a message names",
				"and its object deleted (payload.delete_objects)",
			}, nil},
			{[]string{"SQSONCE_PAYLOAD_S3=false", "SQSONCE_PAYLOAD_BUCKETS=orders-payloads"}, nil, []string{" payload "}},
		} {
			code, out := e.run("check", "", tc.env...)
			for _, want := range tc.want {
				if !strings.Contains(squash(out), want) {
					t.Errorf("%q: exit %d, no %q in:\n%s", tc.env, code, want, out)
				}
			}
			for _, avoid := range tc.avoid {
				if strings.Contains(squash(out), avoid) {
					t.Errorf("%q: exit %d, %q in:\n%s", tc.env, code, avoid, out)
				}
			}
		}
	})

	// A configuration that is not valid exits with status 2 from check as
	// from run: a bad value, a key sqsonce does not know, a record that
	// could expire while its work runs.
	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		unknown := filepath.Join(e.dir, "unknown.toml")
		if err := os.WriteFile(unknown, []byte("[queue]\nmax_mesages = 5\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args string
			env  []string
			want string
		}{
			{"", []string{"SQSONCE_QUEUE_MAX_MESSAGES=99"}, "queue.max_messages"},
			{"--config " + unknown, nil, "queue.max_mesages: unknown key"},
			{"", []string{"SQSONCE_LEDGER_RETENTION=2m", "SQSONCE_HANDLER_TIMEOUT=3m"},
				"ledger.retention: must be at least the visibility timeout plus the handler timeout (3m2s)"},
		} {
			code, out := e.run("check "+tc.args, "", tc.env...)
			if code != exitUsage || !strings.Contains(squash(out), "fail config") || !strings.Contains(out, tc.want) {
				t.Errorf("check %s %q: exit %d, want %d and %q:\n%s", tc.args, tc.env, code, exitUsage, tc.want, out)
			}
			code, out = e.run("run "+tc.args, "", tc.env...)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("run %s %q: exit %d, want %d and %q:\n%s", tc.args, tc.env, code, exitUsage, tc.want, out)
			}
		}
	})
}

// squash collapses runs of spaces, so that checks do not depend on the
// table's column widths.
func squash(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
