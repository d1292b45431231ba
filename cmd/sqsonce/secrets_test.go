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

// The secrets sqsonce itself uses (AWS credentials and what yields them,
// PostgreSQL's password, key passphrase and the files that hold them,
// webhook secrets, the console's credential, OTLP headers) do not reach an
// exec handler unless handler.env names them; everything else still does,
// and check says which secrets the command gets and which it does not.
func TestMain_HandlerSecrets(t *testing.T) {
	t.Parallel()
	// The AWS SDK reads its shared files at start: they exist, empty.
	dir := t.TempDir()
	for _, name := range []string{"aws-credentials", "aws-config"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secrets := map[string]string{
		"AWS_ACCESS_KEY":                         "legacy-access-key",
		"AWS_SECRET_ACCESS_KEY":                  "aws-secret-key",
		"AWS_SECRET_KEY":                         "legacy-secret",
		"AWS_SESSION_TOKEN":                      "aws-session-token",
		"AWS_SECURITY_TOKEN":                     "aws-security-token",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN":      "aws-container-token",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": filepath.Join(dir, "container-token"),
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "http://127.0.0.1:1/creds-full",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/creds-relative",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            filepath.Join(dir, "web-identity-token"),
		"AWS_SHARED_CREDENTIALS_FILE":            filepath.Join(dir, "aws-credentials"),
		"AWS_CONFIG_FILE":                        filepath.Join(dir, "aws-config"),
		"AWS_LOGIN_CACHE_DIRECTORY":              filepath.Join(dir, "login-cache"),
		"PGPASSWORD":                             "pg-password",
		"PGPASSFILE":                             "/etc/sqsonce/pgpass",
		"PGSSLPASSWORD":                          "pg-ssl-key-passphrase",
		"PGSSLKEY":                               "/etc/sqsonce/pg-client.key",
		"PGSERVICEFILE":                          "/etc/sqsonce/pg_service.conf",
		"GITHUB_WEBHOOK_SECRET":                  "webhook-secret",
		"CONSOLE_TOKEN":                          "console-token",
		"OTEL_EXPORTER_OTLP_HEADERS":             "Authorization=Bearer otlp-token",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":      "Authorization=Bearer otlp-traces-token",
		"SQSONCE_LEDGER_URL":                     "postgres://sqsonce@db.internal/orders?sslmode=verify-full&sslpassword=ledger-url-key-passphrase",
	}
	extra := []string{
		"APP_SETTING=visible",
		`SQSONCE_INGEST_SOURCE=[{"name":"github","path":"/hooks/github","verify":"github","secret_env":"GITHUB_WEBHOOK_SECRET"}]`,
		"SQSONCE_CONSOLE_AUTH=token", "SQSONCE_CONSOLE_CREDENTIAL_ENV=CONSOLE_TOKEN",
		"OTEL_TRACES_EXPORTER=none", // the headers are set, spans go nowhere
	}
	for name, v := range secrets {
		extra = append(extra, name+"="+v)
	}
	var all []string
	for name := range secrets {
		all = append(all, name)
	}
	slices.Sort(all)

	for _, tc := range []struct {
		name   string
		env    string   // handler.env
		passed []string // of the secrets, what the command gets
	}{
		{"Default", `["*"]`, nil},
		{"OneNamed", `["*", "PGPASSWORD", "AWS_*", "PG*"]`, []string{"PGPASSWORD"}},
		{"AllNamed", `["*", "` + strings.Join(all, `", "`) + `"]`, all},
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
			} else {
				const want = "warn handler env the command gets sqsonce's own secrets "
				_, warned, _ := strings.Cut(report, want)
				warned, _, _ = strings.Cut(warned, "\n")
				for _, name := range tc.passed {
					if !slices.Contains(strings.Split(strings.Split(warned, ", which")[0], ", "), name) {
						t.Errorf("check: exit %d, %s not named after %q in:\n%s", code, name, want, report)
					}
				}
			}
			for name := range secrets {
				if !slices.Contains(tc.passed, name) && !strings.Contains(report, name) {
					t.Errorf("check does not say that %s is withheld:\n%s", name, report)
				}
			}
		})
	}
}

func TestLedgerURLSecret(t *testing.T) {
	t.Parallel()
	for conn, want := range map[string]bool{
		"":                                     false,
		"postgres://sqsonce@db/orders":         false,
		"postgres://sqsonce:pw@db/orders":      true,
		"postgresql://sqsonce:@db/orders":      true,
		"postgres://db/orders?password=pw":     true,
		"postgres://db/orders?sslmode=require": false,
		"postgres://db/orders?sslmode=verify-full&sslpassword=k": true,
		"postgres://db/orders?passfile=/etc/pgpass":              true,
		"postgres://db/orders?sslkey=/etc/client.key":            true,
		"postgres://db/orders?sslcert=/etc/client.crt":           false,
		"postgres://db/orders?service=orders&servicefile=/s":     true,
		"host=db dbname=orders":                                  false,
		"host=db password=pw":                                    true,
		"password = pw host=db":                                  true,
		"host=db passwordfile=x":                                 false,
		"host=db sslpassword=k":                                  true,
		"host=db sslkey=/etc/client.key sslcert=/etc/client.crt": true,
		"host=db passfile=/etc/pgpass":                           true,
		"host=db servicefile=/s service=orders":                  true,
		"host=db sslcert=/etc/client.crt service=orders":         false,
	} {
		if got := ledgerURLSecret(conn); got != want {
			t.Errorf("ledgerURLSecret(%q) = %v, want %v", conn, got, want)
		}
	}
}
