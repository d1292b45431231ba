package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// The secrets sqsonce itself uses (AWS credentials, the ledger's password,
// webhook secrets, OTLP headers) do not reach an exec handler unless
// handler.env names them; everything else still does, and check says
// which secrets the command gets and which it does not.
func TestMain_HandlerSecrets(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"AWS_SECRET_ACCESS_KEY":             "aws-secret-key",
		"AWS_SESSION_TOKEN":                 "aws-session-token",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN": "aws-container-token",
		"PGPASSWORD":                        "pg-password",
		"PGPASSFILE":                        "/etc/sqsonce/pgpass",
		"GITHUB_WEBHOOK_SECRET":             "webhook-secret",
		"OTEL_EXPORTER_OTLP_HEADERS":        "Authorization=Bearer otlp-token",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer otlp-traces-token",
		"SQSONCE_LEDGER_URL":                "postgres://sqsonce:ledger-password@db.internal/orders",
	}
	extra := []string{
		"APP_SETTING=visible",
		`SQSONCE_INGEST_SOURCE=[{"name":"github","path":"/hooks/github","verify":"github","secret_env":"GITHUB_WEBHOOK_SECRET"}]`,
		"OTEL_TRACES_EXPORTER=none", // the headers are set, spans go nowhere
	}
	for name, v := range secrets {
		extra = append(extra, name+"="+v)
	}

	for _, tc := range []struct {
		name   string
		env    string   // handler.env
		passed []string // of the secrets, what the command gets
	}{
		{"Default", `["*"]`, nil},
		{"Named", `["*", "PGPASSWORD", "AWS_*"]`, []string{"PGPASSWORD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, `env > "$STATE/env-$SQSONCE_KEY"`+"\ncat >/dev/null\n")
			vars := append(append([]string{}, extra...), "SQSONCE_HANDLER_ENV="+tc.env)
			cmd, out := e.start("run", vars...)
			body := `{"id":"e-1"}`
			if _, err := e.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &e.queue.URL, MessageBody: &body}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(e.dir, "env-e-1")
			e.waitFor("the handler's environment", 30*time.Second, func() bool {
				b, err := os.ReadFile(path)
				return err == nil && strings.Contains(string(b), "SQSONCE_KEY=e-1")
			})
			cmd.Process.Signal(syscall.SIGTERM)
			if code := wait(t, cmd, 30*time.Second); code != 0 {
				t.Fatalf("run: exit %d:\n%s", code, out)
			}
			b, _ := os.ReadFile(path)
			got := map[string]string{}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					got[k] = v
				}
			}
			if got["APP_SETTING"] != "visible" {
				t.Errorf("APP_SETTING did not reach the command: its environment is\n%s", b)
			}
			leaked := false
			for name, v := range secrets {
				want := slices.Contains(tc.passed, name)
				if _, has := got[name]; has != want {
					t.Errorf("%s reached the command: %v, want %v", name, has, want)
				}
				if !want && strings.Contains(string(b), v) {
					t.Errorf("the value of %s is in the command's environment", name)
					leaked = true
				}
			}
			if leaked {
				t.Logf("the command's environment:\n%s", b)
			}

			code, report := e.run("check", "", vars...)
			report = squash(report)
			if tc.passed == nil {
				if strings.Contains(report, "warn handler env") {
					t.Errorf("check: exit %d, a warning about handler.env with nothing passed:\n%s", code, report)
				}
			} else if want := "warn handler env the command gets sqsonce's own secrets PGPASSWORD"; !strings.Contains(report, want) {
				t.Errorf("check: exit %d, no %q in:\n%s", code, want, report)
			}
			for name := range secrets {
				if !slices.Contains(tc.passed, name) && !strings.Contains(report, name) {
					t.Errorf("check does not say that %s is withheld:\n%s", name, report)
				}
			}
		})
	}
}

func TestHasPassword(t *testing.T) {
	t.Parallel()
	for conn, want := range map[string]bool{
		"":                                     false,
		"postgres://sqsonce@db/orders":         false,
		"postgres://sqsonce:pw@db/orders":      true,
		"postgresql://sqsonce:@db/orders":      true,
		"postgres://db/orders?password=pw":     true,
		"postgres://db/orders?sslmode=require": false,
		"host=db dbname=orders":                false,
		"host=db password=pw":                  true,
		"password = pw host=db":                true,
		"host=db passwordfile=x":               false,
	} {
		if got := hasPassword(conn); got != want {
			t.Errorf("hasPassword(%q) = %v, want %v", conn, got, want)
		}
	}
}
