package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConsoleConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		set  func(c *ConsoleConfig)
		want string // "" when valid
	}{
		{"Defaults", func(*ConsoleConfig) {}, ""},
		{"LoopbackWithoutCredential", func(c *ConsoleConfig) { c.Listen = "localhost:9000" }, ""},
		{"BeyondLoopbackWithoutCredential", func(c *ConsoleConfig) { c.Listen = "0.0.0.0:9465" }, "console.listen: 0.0.0.0:9465 reaches beyond loopback"},
		{"AllInterfacesWithoutCredential", func(c *ConsoleConfig) { c.Listen = ":9465" }, "console.listen: :9465 reaches beyond loopback"},
		{"WritesWithoutCredential", func(c *ConsoleConfig) { c.Writes = true }, "console.writes: needs console.auth"},
		{"TokenWithoutWhere", func(c *ConsoleConfig) { c.Auth = "token" }, "console.credential_file: console.auth = \"token\" needs its credential"},
		{"Both", func(c *ConsoleConfig) { c.Auth, c.CredentialFile, c.CredentialEnv = "basic", "/f", "V" }, "console.credential_env: set console.credential_file or console.credential_env, not both"},
		{"CredentialWithoutAuth", func(c *ConsoleConfig) { c.CredentialEnv = "V" }, "console.credential_env: console.auth = \"none\" takes no credential"},
		{"UnknownAuth", func(c *ConsoleConfig) { c.Auth = "oauth" }, "console.auth: must be one of none, token, basic"},
		{"BeyondLoopbackWithToken", func(c *ConsoleConfig) {
			c.Listen, c.Writes, c.Auth, c.CredentialEnv = "0.0.0.0:9465", true, "token", "T"
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.set(&c.Console)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid console settings refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("0123456789abcdef-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := consoleAuth(ConsoleConfig{Auth: "token", CredentialFile: file}, env(nil))
	if err != nil || a.Token != "0123456789abcdef-token" {
		t.Fatalf("token from a file: %+v, %v", a, err)
	}
	a, err = consoleAuth(ConsoleConfig{Auth: "basic", CredentialEnv: "CRED"}, env(map[string]string{"CRED": "ops:0123456789abcdefgh"}))
	if err != nil || a.User != "ops" || a.Password != "0123456789abcdefgh" {
		t.Fatalf("basic from a variable: %+v, %v", a, err)
	}
	for name, c := range map[string]struct {
		cfg  ConsoleConfig
		vars map[string]string
		want string
	}{
		"short token":  {ConsoleConfig{Auth: "token", CredentialEnv: "CRED"}, map[string]string{"CRED": "short"}, "at least 16"},
		"no colon":     {ConsoleConfig{Auth: "basic", CredentialEnv: "CRED"}, map[string]string{"CRED": "0123456789abcdefgh"}, "want user:password"},
		"unset":        {ConsoleConfig{Auth: "token", CredentialEnv: "CRED"}, nil, "CRED is not set"},
		"missing file": {ConsoleConfig{Auth: "token", CredentialFile: filepath.Join(dir, "none")}, nil, "no such file"},
	} {
		if _, err := consoleAuth(c.cfg, env(c.vars)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
