package loopback

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
)

// Server describes a local server that tests need and how they find it.
type Server struct {
	// Env names the environment variable that holds the server's address,
	// e.g. "SQSONCE_TEST_SQS_ENDPOINT".
	Env string
	// Name says what the tests need, e.g. "the local SQS-compatible
	// server"; it completes "these tests need …".
	Name string
	// Script runs a command with the server available, e.g.
	// "scripts/with-sqs.sh".
	Script string
	// Example is a well-formed address, shown when Env holds something
	// else, e.g. "http://127.0.0.1:4566".
	Example string
	// ImplEnv names the environment variable that says which
	// implementation of the service answers at Env, e.g.
	// "SQSONCE_TEST_SQS_SERVER"; Impls lists the names it may hold, the
	// first being the one meant when it is unset or empty. Both are empty
	// for a server that has one implementation.
	ImplEnv string
	Impls   []string
}

// Lookup returns the value of s.Env without surrounding white space. When
// the variable is unset or empty, Lookup fails the test with t.Fatal and
// says how to run it with the server; it never skips.
func (s Server) Lookup(t testing.TB) string {
	t.Helper()
	raw := strings.TrimSpace(os.Getenv(s.Env))
	if raw == "" {
		t.Fatalf("%s is not set: these tests need %s; "+
			"run them with `make test` (or `%s go test ./...`)", s.Env, s.Name, s.Script)
	}
	return raw
}

// Endpoint returns the base URL of an HTTP server from s.Env, without a
// trailing slash. When the variable is unset or empty, or does not name an
// http URL on a loopback address, Endpoint fails the test with t.Fatal; it
// never skips.
func (s Server) Endpoint(t testing.TB) string {
	t.Helper()
	raw := s.Lookup(t)
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		t.Fatalf("%s=%q is not an http URL such as %s", s.Env, raw, s.Example)
	}
	if !IsHost(u.Hostname()) {
		t.Fatalf("%s=%q: tests only talk to a server on a loopback address", s.Env, raw)
	}
	return strings.TrimRight(raw, "/")
}

// Impl returns which implementation of the service answers at s.Env: the
// value of s.ImplEnv, or s.Impls[0] when it is unset or empty. Tests that
// pin down where an implementation differs from the real service ask it.
// Any other value fails the test with t.Fatal, naming the known ones.
func (s Server) Impl(t testing.TB) string {
	t.Helper()
	if s.ImplEnv == "" || len(s.Impls) == 0 {
		t.Fatalf("loopback: %s has no implementations to tell apart", s.Name)
	}
	v := strings.TrimSpace(os.Getenv(s.ImplEnv))
	if v == "" {
		return s.Impls[0]
	}
	if !slices.Contains(s.Impls, v) {
		t.Fatalf("%s=%q: want one of %s (unset means %s)", s.ImplEnv, v, strings.Join(s.Impls, ", "), s.Impls[0])
	}
	return v
}

// IsHost reports whether host, a name or an IP address without a port, is
// "localhost" or a loopback address.
func IsHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Transport returns a clone of [http.DefaultTransport] that never uses a
// proxy: the servers of tests are on loopback.
func Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	return tr
}
