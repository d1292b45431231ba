package main

import (
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// A file of secrets that other users may read is taken, and warned about
// by name and mode: by check, and when the command that reads it starts.
func TestMain_SecretFileModes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	token := filepath.Join(e.dir, "console.token")
	hooks := filepath.Join(e.dir, "github.secrets")
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	write(token, "0123456789abcdef-console-token\n", 0o644)
	write(hooks, "webhook-secret-one\n", 0o644)
	vars := []string{
		"SQSONCE_CONSOLE_AUTH=token", "SQSONCE_CONSOLE_CREDENTIAL_FILE=" + token,
		"SQSONCE_INGEST_LISTEN=127.0.0.1:0",
		`SQSONCE_INGEST_SOURCE=[{"name": "github", "path": "/hooks/github", "verify": "github", "secret_file": "` + hooks + `"}]`,
	}
	tokenWarn := "warn secret file console.credential_file " + token + " has mode 0644, open to every user of the host"
	hooksWarn := `warn secret file ingest.source "github" secret_file ` + hooks + " has mode 0644, open to every user of the host"

	_, out := e.run("check", "", vars...)
	for _, want := range []string{tokenWarn, hooksWarn} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("check: no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "fail console") || strings.Contains(out, "fail ingest") {
		t.Errorf("check refused a file open to others; it should only warn:\n%s", out)
	}

	// The commands that read them start, and say so. (The console reads
	// an existing ledger.)
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, tc := range []struct {
		args, file, setting string
		extra               []string
	}{
		{"ingest --log-format json", hooks, `ingest.source \"github\" secret_file`, nil},
		{"console --log-format json", token, "console.credential_file", []string{"SQSONCE_CONSOLE_LISTEN=" + freePort(t)}},
	} {
		cmd, out := e.start(tc.args, append(vars, tc.extra...)...)
		want := `"msg":"a file of secrets is open to other users: make it 0600 or 0400 (a Kubernetes Secret volume: defaultMode: 0400)","setting":"` +
			tc.setting + `","file":"` + tc.file + `","mode":"0644"`
		started := regexp.MustCompile(`"msg":"(receiving webhooks|console listening)"`)
		deadline := time.Now().Add(30 * time.Second)
		for !started.MatchString(out.String()) && time.Now().Before(deadline) && !strings.Contains(out.String(), "sqsonce "+strings.Fields(tc.args)[0]+":") {
			time.Sleep(50 * time.Millisecond)
		}
		if !started.MatchString(out.String()) {
			t.Fatalf("%s did not start:\n%s", tc.args, out)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("%s: no warning %s in:\n%s", tc.args, want, out)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if code := wait(t, cmd, 30*time.Second); code != exitOK {
			t.Errorf("%s: exit %d:\n%s", tc.args, code, out)
		}
	}

	// Private files: no warning.
	for _, f := range []string{token, hooks} {
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, out = e.run("check", "", vars...)
	if strings.Contains(out, "secret file") {
		t.Errorf("check warns about private files:\n%s", out)
	}
}

// The rule for who else may use a file of secrets: libpq's for a client
// key. Group access is taken only to read and only from a file of root's (a
// Kubernetes Secret volume with an fsGroup is root's, 0440).
func TestExposedSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := os.Geteuid() == 0
	nobody := -1
	if root {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("running as root without a user nobody to own a file: %v", err)
		}
		nobody, _ = strconv.Atoi(u.Uid)
	}
	cases := []struct {
		mode   os.FileMode
		byRoot bool   // owned by root (else by another user); only as root
		who    string // "" when private
	}{
		{0o600, false, ""},
		{0o400, false, ""},
		{0o644, false, "every user of the host"},
		{0o604, false, "every user of the host"},
		{0o602, false, "every user of the host"},
		{0o640, false, "its group"},
		{0o660, false, "its group"},
		{0o440, true, ""},
		{0o640, true, ""},
		{0o660, true, "its group"},
		{0o644, true, "every user of the host"},
	}
	for i, tc := range cases {
		if !root && tc.byRoot {
			continue
		}
		path := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if root && !tc.byRoot {
			if err := os.Chown(path, nobody, -1); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		got := exposedSecrets([]secretFile{{"console.credential_file", path}})
		switch {
		case tc.who == "" && len(got) != 0:
			t.Errorf("mode %04o (root's: %v): %s", tc.mode, tc.byRoot, got[0])
		case tc.who != "" && (len(got) != 1 || got[0].who != tc.who || got[0].mode != tc.mode):
			t.Errorf("mode %04o (root's: %v): %v, want one file open to %s", tc.mode, tc.byRoot, got, tc.who)
		}
	}
	if got := exposedSecrets([]secretFile{{"console.credential_file", filepath.Join(dir, "missing")}}); len(got) != 0 {
		t.Errorf("a missing file: %v", got)
	}
}

// Every Secret volume of the Kubernetes manifests in deploy/ is mounted
// with defaultMode 0400: without it its files are 0644, which sqsonce reads
// with a warning.
func TestDeploy_SecretVolumesPrivate(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	volume := regexp.MustCompile(`^(\s*)secret:\s*$`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			m := volume.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			seen++
			private := false
			for _, l := range lines[i+1:] {
				if strings.TrimSpace(l) == "" || len(l)-len(strings.TrimLeft(l, " ")) <= len(m[1]) {
					break // the end of the volume's block
				}
				private = private || strings.TrimSpace(l) == "defaultMode: 0400"
			}
			if !private {
				t.Errorf("%s:%d: a Secret volume without defaultMode: 0400", f, i+1)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no Secret volume in the manifests: the test tested nothing")
	}
}
