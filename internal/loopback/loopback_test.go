package loopback_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sqsonce/sqsonce/internal/loopback"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as t.Fatalf does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// endpoint calls s.Endpoint and returns what it returned or the message it
// failed with.
func endpoint(t *testing.T, s loopback.Server) (url, fatal string) {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url = s.Endpoint(r)
	}()
	<-done
	return url, r.msg
}

// Not parallel: it sets environment variables.
func TestServer_Endpoint(t *testing.T) {
	s := loopback.Server{
		Env:     "SQSONCE_LOOPBACK_TEST_ENDPOINT",
		Name:    "the local thing",
		Script:  "scripts/with-thing.sh",
		Example: "http://127.0.0.1:1234",
	}
	for _, tc := range []struct {
		value, want, fatal string
	}{
		{value: " http://127.0.0.1:4566/ ", want: "http://127.0.0.1:4566"},
		{value: "http://localhost:4566", want: "http://localhost:4566"},
		{value: "http://[::1]:4566", want: "http://[::1]:4566"},
		{value: "", fatal: "SQSONCE_LOOPBACK_TEST_ENDPOINT is not set: these tests need the local thing; run them with `make test` (or `scripts/with-thing.sh go test ./...`)"},
		{value: "https://127.0.0.1:4566", fatal: "is not an http URL such as http://127.0.0.1:1234"},
		{value: "127.0.0.1:4566", fatal: "is not an http URL"},
		{value: "http://10.0.0.1:4566", fatal: "tests only talk to a server on a loopback address"},
		{value: "http://example.com", fatal: "tests only talk to a server on a loopback address"},
	} {
		t.Setenv(s.Env, tc.value)
		got, fatal := endpoint(t, s)
		switch {
		case tc.fatal == "" && (fatal != "" || got != tc.want):
			t.Errorf("%q: got %q (fatal %q), want %q", tc.value, got, fatal, tc.want)
		case tc.fatal != "" && !strings.Contains(fatal, tc.fatal):
			t.Errorf("%q: fatal %q, want it to say %q", tc.value, fatal, tc.fatal)
		}
	}
}

// Not parallel: it sets environment variables.
func TestServer_Impl(t *testing.T) {
	s := loopback.Server{
		Env:     "SQSONCE_LOOPBACK_TEST_ENDPOINT",
		Name:    "the local thing",
		ImplEnv: "SQSONCE_LOOPBACK_TEST_SERVER",
		Impls:   []string{"first", "second"},
	}
	for _, tc := range []struct {
		value, want, fatal string
	}{
		{value: "", want: "first"},
		{value: " second ", want: "second"},
		{value: "first", want: "first"},
		{value: "third", fatal: `SQSONCE_LOOPBACK_TEST_SERVER="third": want one of first, second (unset means first)`},
	} {
		t.Setenv(s.ImplEnv, tc.value)
		r := &fatalRecorder{TB: t}
		var got string
		done := make(chan struct{})
		go func() {
			defer close(done)
			got = s.Impl(r)
		}()
		<-done
		switch {
		case tc.fatal == "" && (r.msg != "" || got != tc.want):
			t.Errorf("%q: got %q (fatal %q), want %q", tc.value, got, r.msg, tc.want)
		case tc.fatal != "" && r.msg != tc.fatal:
			t.Errorf("%q: fatal %q, want %q", tc.value, r.msg, tc.fatal)
		}
	}
}

func TestIsHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"localhost":   true,
		"127.0.0.1":   true,
		"127.1.2.3":   true,
		"::1":         true,
		"0.0.0.0":     false,
		"10.0.0.1":    false,
		"example.com": false,
		"":            false,
	} {
		if got := loopback.IsHost(host); got != want {
			t.Errorf("IsHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestTransport(t *testing.T) {
	t.Parallel()
	if tr := loopback.Transport(); tr.Proxy != nil {
		t.Error("the transport uses a proxy")
	}
}
