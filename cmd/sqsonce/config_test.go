package main

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sqsonce/sqsonce/worker"
)

const testQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"

// env returns a lookupEnv over vars.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// validConfig is DefaultConfig made valid by setting the one required key.
func validConfig() Config {
	c := DefaultConfig()
	c.Queue.URL = testQueueURL
	return c
}

// fullConfig is the configuration of testdata/full.toml.
func fullConfig() Config {
	return Config{
		Queue: QueueConfig{
			URL:               "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
			Region:            "eu-west-1",
			Endpoint:          "http://127.0.0.1:4566",
			WaitTime:          Duration{10 * time.Second},
			MaxMessages:       5,
			VisibilityTimeout: Duration{2 * time.Minute},
			Pollers:           4,
		},
		Key: KeyConfig{
			From:      KeyFromAttribute,
			Pointer:   "/detail/order~1id",
			Attribute: "OrderId",
			SNS:       true,
			OnMissing: OnMissingHash,
			Prefix:    "orders:",
		},
		Payload: PayloadConfig{
			S3:       false,
			MaxSize:  1 << 20,
			Bucket:   "orders-payloads",
			Buckets:  []string{"orders-payloads", "partner-payloads"},
			Endpoint: "http://127.0.0.1:4566",
		},
		Ledger: LedgerConfig{
			Backend:       BackendPostgres,
			Path:          "/srv/sqsonce/orders.db",
			URL:           "postgres://sqsonce@db.internal:5432/orders",
			Table:         "orders_ops",
			Region:        "eu-west-2",
			Endpoint:      "http://127.0.0.1:8000",
			Retention:     Duration{72 * time.Hour},
			CompleteDelay: Duration{5 * time.Millisecond},
			KeepBody:      true,
		},
		Handler: HandlerConfig{
			Type:           HandlerHTTP,
			Command:        []string{"/usr/bin/env", "handle", "--verbose"},
			URL:            "https://handler.internal/events",
			Timeout:        Duration{90 * time.Second},
			Concurrency:    32,
			RetryExitCodes: []int{75, 111},
			Body:           BodyAsReceived,
			Env:            []string{"PATH", "APP_*"},
		},
		Retry: RetryConfig{
			MinBackoff: Duration{time.Second},
			MaxBackoff: Duration{time.Hour},
		},
		Flow: FlowConfig{
			Mode:         "observe",
			Scope:        "orders partner-api",
			Pause:        false,
			PauseOn:      []string{"unavailable", "retry"},
			TripFailures: 20,
			TripWindow:   Duration{time.Minute},
			TripKeys:     5,
			TripRatio:    0.8,
			ProbeMax:     Duration{30 * time.Second},
			Rate:         50,
			Burst:        5,
			Concurrency:  16,
			Partition: []FlowPartition{
				{Pointer: "/tenant", Rate: 5},
				{Attribute: "Account", Rate: 0.5, Burst: 2, Concurrency: 3},
			},
		},
		Shutdown: ShutdownConfig{
			Grace: Duration{10 * time.Second},
		},
		Admin: AdminConfig{
			Listen: "10.0.0.5:9100",
			PProf:  true,
		},
		Ingest: IngestConfig{
			Listen:         "0.0.0.0:8443",
			AdminListen:    "10.0.0.5:9101",
			MaxBody:        100000,
			MaxInFlight:    64,
			RequestTimeout: Duration{9 * time.Second},
			RetryAfter:     Duration{30 * time.Second},
			Source: []IngestSource{
				{Name: "github", Path: "/hooks/github", Verify: "github", SecretEnv: "GITHUB_WEBHOOK_SECRETS"},
				{Name: "stripe", Path: "/hooks/stripe", Verify: "stripe", SecretFile: "/etc/sqsonce/stripe.secrets",
					Tolerance: Duration{10 * time.Minute}, QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo",
					KeyPointer: "/id", GroupPointer: "/data/object/customer", OnMissing: "reject"},
				{Name: "partner", Path: "/hooks/partner", Verify: "hmac-sha256", SecretFile: "/etc/sqsonce/partner.secrets",
					SignatureHeader: "X-Partner-Signature", KeyPointer: "/event/id", KeyPrefix: ptr("partner/"), OnMissing: "hash"},
			},
		},
		Console: ConsoleConfig{
			Listen:          "0.0.0.0:9465",
			Writes:          true,
			Auth:            "token",
			CredentialFile:  "/etc/sqsonce/console.token",
			SessionLifetime: Duration{8 * time.Hour},
			SecureCookie:    true,
			TrustedProxies:  []string{"127.0.0.1", "10.1.0.0/16"},
			AllowedHosts:    []string{"console.example.com", "ops.example.com:8443"},
		},
	}
}

// writeConfig writes content to a fresh file and returns its path.
func writeConfig(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sqsonce.toml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// problems splits an error from errors.Join into its parts.
func problems(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func assertConfig(t *testing.T, got, want Config) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	want := Config{
		Queue: QueueConfig{
			WaitTime:          Duration{20 * time.Second},
			MaxMessages:       10,
			VisibilityTimeout: Duration{60 * time.Second},
			Pollers:           1,
		},
		Key: KeyConfig{
			From:      "body",
			Pointer:   "/id",
			OnMissing: "reject",
		},
		Payload: PayloadConfig{S3: true, MaxSize: 64 << 20, Buckets: []string{}},
		Ledger: LedgerConfig{
			Backend:       "bbolt",
			Path:          "/var/lib/sqsonce/ledger.db",
			Table:         "sqsonce_operations",
			Retention:     Duration{336 * time.Hour},
			CompleteDelay: Duration{time.Millisecond},
		},
		Handler: HandlerConfig{
			Type:           "exec",
			Command:        []string{"/usr/local/bin/handle-event"},
			Timeout:        Duration{20 * time.Second},
			Concurrency:    8,
			RetryExitCodes: []int{75},
			Body:           BodyPayload,
			Env:            []string{"*"},
		},
		Retry: RetryConfig{
			MinBackoff: Duration{5 * time.Second},
			MaxBackoff: Duration{15 * time.Minute},
		},
		Flow: FlowConfig{Mode: "on", Pause: true, PauseOn: []string{"unavailable"}, TripFailures: 10, TripWindow: Duration{30 * time.Second},
			TripKeys: 3, TripRatio: 0.9, ProbeMax: Duration{10 * time.Second}, Burst: 1},
		Shutdown: ShutdownConfig{Grace: Duration{25 * time.Second}},
		Admin:    AdminConfig{Listen: "127.0.0.1:9464"},
		Ingest: IngestConfig{Listen: "127.0.0.1:8080", AdminListen: "127.0.0.1:9466", MaxInFlight: 256,
			RequestTimeout: Duration{8 * time.Second}, RetryAfter: Duration{5 * time.Second}},
		Console: ConsoleConfig{Listen: "127.0.0.1:9465", Auth: "none", SessionLifetime: Duration{12 * time.Hour}, TrustedProxies: []string{}, AllowedHosts: []string{}},
	}
	assertConfig(t, DefaultConfig(), want)

	// Only the queue URL is missing from the defaults.
	err := DefaultConfig().Validate()
	if got := problems(err); len(got) != 1 || got[0].Error() != "queue.url: is required: invalid configuration" {
		t.Errorf("DefaultConfig().Validate() = %v, want only queue.url required", err)
	}
	if err := validConfig().Validate(); err != nil {
		t.Errorf("defaults with a queue URL: %v", err)
	}

	// With the defaults a stop lets running work end by itself: the grace
	// covers the handler's timeout and an exec command's kill grace after
	// it, so that check has nothing to warn about.
	if d := DefaultConfig(); d.Shutdown.Grace.Duration < d.Handler.Timeout.Duration+5*time.Second {
		t.Errorf("shutdown.grace %v is shorter than handler.timeout %v plus the exec kill grace (5s)", d.Shutdown.Grace, d.Handler.Timeout)
	}

	// Each call returns its own lists.
	a := DefaultConfig()
	a.Handler.Command[0] = "changed"
	a.Handler.RetryExitCodes[0] = 1
	a.Handler.Env[0] = "changed"
	assertConfig(t, DefaultConfig(), want)
}

func TestLoadConfigFile(t *testing.T) {
	t.Parallel()
	urlOnly := map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}
	tests := []struct {
		name string
		path string
		vars map[string]string
		want Config
	}{
		{"every key set", "testdata/full.toml", nil, fullConfig()},
		{"only the queue url", "testdata/minimal.toml", nil, validConfig()},
		{"empty file", writeConfig(t, ""), urlOnly, validConfig()},
		{"empty sections", writeConfig(t, "[queue]\n[key]\n[ledger]\n[handler]\n[retry]\n[shutdown]\n"), urlOnly, validConfig()},
		{"empty list", writeConfig(t, "[handler]\nretry_exit_codes = []\n"), urlOnly,
			func() Config { c := validConfig(); c.Handler.RetryExitCodes = []int{}; return c }()},
		{"inline tables", writeConfig(t, "queue = { url = \""+testQueueURL+"\", pollers = 2 }\n"), nil,
			func() Config { c := validConfig(); c.Queue.Pollers = 2; return c }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := LoadConfig(tc.path, env(tc.vars))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			assertConfig(t, got, tc.want)
		})
	}
}

// TestLoadConfigRoundTrip encodes configurations with the toml encoder and
// loads them back.
func TestLoadConfigRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"full", fullConfig()},
		{"defaults", validConfig()},
		{"sub-second durations", func() Config {
			c := validConfig()
			c.Handler.Timeout = Duration{1500 * time.Millisecond}
			c.Retry.MinBackoff = Duration{250 * time.Millisecond}
			c.Retry.MaxBackoff = Duration{time.Hour + 30*time.Minute + 5*time.Second}
			return c
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := toml.NewEncoder(&buf).Encode(tc.cfg); err != nil {
				t.Fatalf("encode: %v", err)
			}
			got, err := LoadConfig(writeConfig(t, buf.String()), nil)
			if err != nil {
				t.Fatalf("LoadConfig: %v\n%s", err, buf.String())
			}
			assertConfig(t, got, tc.cfg)
		})
	}
}

// TestExampleConfig keeps config.example.toml and DefaultConfig in step: the
// example must hold every key, each with a comment, at its default value.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	const path = "../../config.example.toml"

	got, err := LoadConfig(path, env(map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	assertConfig(t, got, validConfig())

	var raw map[string]map[string]any
	if _, err := toml.DecodeFile(path, &raw); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings() {
		section, key, _ := strings.Cut(s.key, ".")
		if reflect.TypeFor[Config]().FieldByIndex(s.index).Type.Kind() == reflect.Slice &&
			reflect.TypeFor[Config]().FieldByIndex(s.index).Type.Elem().Kind() == reflect.Struct {
			// A list of tables, empty by default: shown as a commented
			// example.
			if !bytes.Contains(data, []byte("# [["+s.key+"]]")) {
				t.Errorf("%s: no commented example of [[%s]]", path, s.key)
			}
			continue
		}
		if _, ok := raw[section][key]; !ok {
			t.Errorf("%s: key %s missing", path, s.key)
		}
	}

	keyLine := regexp.MustCompile(`^[a-z_]+ = `)
	sc := bufio.NewScanner(bytes.NewReader(data))
	prev := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if keyLine.MatchString(line) && !strings.HasPrefix(prev, "#") {
			t.Errorf("%s:%d: %q has no comment above it", path, n, line)
		}
		prev = line
	}
	for _, want := range []string{"SQSONCE_<SECTION>_<KEY>", "credentials"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("%s does not mention %q", path, want)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *Config)
		key    string
		want   string   // part of the problem
		others []string // keys of further problems the change causes
	}{
		{"queue url empty", func(c *Config) { c.Queue.URL = "" }, "queue.url", "is required", nil},
		{"queue url relative", func(c *Config) { c.Queue.URL = "sqs.us-east-1.amazonaws.com/1/q" }, "queue.url", "absolute http or https URL", nil},
		{"queue url scheme", func(c *Config) { c.Queue.URL = "ftp://example.com/q" }, "queue.url", `got "ftp://example.com/q"`, nil},
		{"queue url no host", func(c *Config) { c.Queue.URL = "https:///q" }, "queue.url", "absolute http or https URL", nil},
		{"queue region blank", func(c *Config) { c.Queue.Region = "  " }, "queue.region", `must be a region name such as eu-west-1, got "  "`, nil},
		{"queue region not the url's", func(c *Config) { c.Queue.Region = "eu-west-1" }, "queue.region", `is "eu-west-1", but queue.url (` + testQueueURL + `) is in "us-east-1": the two must agree`, nil},
		{"queue region not the endpoint's", func(c *Config) {
			c.Queue.URL, c.Queue.Region, c.Queue.Endpoint = "http://127.0.0.1:4566/1/q", "eu-west-1", "https://vpce-1-a.sqs.us-east-2.vpce.amazonaws.com"
		}, "queue.region", `is "eu-west-1", but queue.endpoint (https://vpce-1-a.sqs.us-east-2.vpce.amazonaws.com) is in "us-east-2"`, nil},
		{"queue endpoint not the url's region", func(c *Config) { c.Queue.Endpoint = "https://vpce-1-a.sqs.us-east-2.vpce.amazonaws.com" }, "queue.endpoint",
			`https://vpce-1-a.sqs.us-east-2.vpce.amazonaws.com is in "us-east-2", but queue.url (` + testQueueURL + `) is in "us-east-1"`, nil},
		{"queue endpoint no scheme", func(c *Config) { c.Queue.Endpoint = "localhost:4566" }, "queue.endpoint", "absolute http or https URL", nil},
		{"queue endpoint bad", func(c *Config) { c.Queue.Endpoint = "http://[::1" }, "queue.endpoint", "absolute http or https URL", nil},
		{"queue wait_time over", func(c *Config) { c.Queue.WaitTime = Duration{21 * time.Second} }, "queue.wait_time", "must be between 0s and 20s, got 21s", nil},
		{"queue wait_time negative", func(c *Config) { c.Queue.WaitTime = Duration{-time.Second} }, "queue.wait_time", "got -1s", nil},
		{"queue wait_time fraction", func(c *Config) { c.Queue.WaitTime = Duration{1500 * time.Millisecond} }, "queue.wait_time", "must be whole seconds, got 1.5s", nil},
		{"queue max_messages zero", func(c *Config) { c.Queue.MaxMessages = 0 }, "queue.max_messages", "must be between 1 and 10, got 0", nil},
		{"queue max_messages over", func(c *Config) { c.Queue.MaxMessages = 11 }, "queue.max_messages", "must be between 1 and 10, got 11", nil},
		{"queue visibility_timeout zero", func(c *Config) { c.Queue.VisibilityTimeout = Duration{0} }, "queue.visibility_timeout", "must be between 1s and 12h, got 0s", nil},
		{"queue visibility_timeout over", func(c *Config) { c.Queue.VisibilityTimeout = Duration{12*time.Hour + time.Second} }, "queue.visibility_timeout", "got 12h0m1s", nil},
		{"queue visibility_timeout fraction", func(c *Config) { c.Queue.VisibilityTimeout = Duration{2500 * time.Millisecond} }, "queue.visibility_timeout", "whole seconds", nil},
		{"queue pollers zero", func(c *Config) { c.Queue.Pollers = 0 }, "queue.pollers", "must be between 1 and 64, got 0", nil},
		{"queue pollers over", func(c *Config) { c.Queue.Pollers = 65 }, "queue.pollers", "got 65", nil},
		{"payload max_size zero", func(c *Config) { c.Payload.MaxSize = 0 }, "payload.max_size", "must be between 1 and 2147483648 bytes, got 0", nil},
		{"payload max_size over", func(c *Config) { c.Payload.MaxSize = 3 << 30 }, "payload.max_size", "got 3221225472", nil},
		{"payload delete_objects without s3", func(c *Config) { c.Payload.S3, c.Payload.DeleteObjects = false, true }, "payload.delete_objects", "needs payload.s3 = true", nil},
		{"payload bucket upper case", func(c *Config) { c.Payload.Bucket = "Orders" }, "payload.bucket", `must be an S3 bucket name (3 to 63 lower-case letters, digits, dots and hyphens), got "Orders"`, nil},
		{"payload bucket short", func(c *Config) { c.Payload.Bucket = "ab" }, "payload.bucket", "S3 bucket name", nil},
		{"payload bucket hyphen end", func(c *Config) { c.Payload.Bucket = "orders-" }, "payload.bucket", "S3 bucket name", nil},
		{"payload buckets bad name", func(c *Config) { c.Payload.Buckets = []string{"orders", "Partner"} }, "payload.buckets", `S3 bucket name (3 to 63 lower-case letters, digits, dots and hyphens), got "Partner"`, nil},
		{"payload buckets star with others", func(c *Config) { c.Payload.Buckets = []string{"*", "orders"} }, "payload.buckets", `"*" allows every bucket and stands alone`, nil},
		{"payload buckets empty name", func(c *Config) { c.Payload.Buckets = []string{""} }, "payload.buckets", "a bucket name is empty", nil},
		{"payload endpoint no scheme", func(c *Config) { c.Payload.Endpoint = "localhost:4566" }, "payload.endpoint", "absolute http or https URL", nil},
		{"key from unknown", func(c *Config) { c.Key.From = "header" }, "key.from", `must be one of body, attribute, deduplication_id, got "header"`, nil},
		{"key from empty", func(c *Config) { c.Key.From = "" }, "key.from", `got ""`, nil},
		{"key pointer empty", func(c *Config) { c.Key.Pointer = "" }, "key.pointer", "is required when keys come from the body", nil},
		{"key pointer relative", func(c *Config) { c.Key.Pointer = "id" }, "key.pointer", `starting with "/", got "id"`, nil},
		{"key pointer bad escape", func(c *Config) { c.Key.Pointer = "/a~2b" }, "key.pointer", `must escape "~" as "~0"`, nil},
		{"key pointer trailing tilde", func(c *Config) { c.Key.Pointer = "/a~" }, "key.pointer", `got "/a~"`, nil},
		{"key pointer invalid utf-8", func(c *Config) { c.Key.Pointer = "/a\xff" }, "key.pointer", "valid UTF-8", nil},
		{"key attribute missing", func(c *Config) { c.Key.From = KeyFromAttribute }, "key.attribute", "is required when keys come from a message attribute", nil},
		{"key on_missing unknown", func(c *Config) { c.Key.OnMissing = "drop" }, "key.on_missing", `must be one of reject, hash, got "drop"`, nil},
		{"key prefix long", func(c *Config) { c.Key.Prefix = strings.Repeat("a", 129) }, "key.prefix", "must be at most 128 bytes, got 129", nil},
		{"key prefix invalid utf-8", func(c *Config) { c.Key.Prefix = "a\xffb" }, "key.prefix", "valid UTF-8", nil},
		{"key prefix newline", func(c *Config) { c.Key.Prefix = "a\nb" }, "key.prefix", "control characters", nil},
		{"key prefix delete", func(c *Config) { c.Key.Prefix = "a\x7f" }, "key.prefix", "control characters", nil},
		{"ledger path empty", func(c *Config) { c.Ledger.Path = "" }, "ledger.path", `is required when ledger.backend is "bbolt"`, nil},
		{"ledger backend unknown", func(c *Config) { c.Ledger.Backend = "redis" }, "ledger.backend", `must be one of bbolt, postgres, dynamodb, got "redis"`, nil},
		{"ledger table bad", func(c *Config) { c.Ledger.Backend = BackendPostgres; c.Ledger.Table = "ops; drop" }, "ledger.table", `table "ops; drop": want a name of lower-case letters`, nil},
		{"ledger table upper case on postgres", func(c *Config) { c.Ledger.Backend = BackendPostgres; c.Ledger.Table = "Ops" }, "ledger.table", "lower-case", nil},
		{"ledger table short on dynamodb", func(c *Config) { c.Ledger.Backend = BackendDynamoDB; c.Ledger.Table = "op" }, "ledger.table", `table name "op": want 3 to 255`, nil},
		{"ledger endpoint relative", func(c *Config) { c.Ledger.Endpoint = "localhost:8000" }, "ledger.endpoint", "absolute http or https URL", nil},
		{"ledger retention short", func(c *Config) {
			c.Ledger.Retention = Duration{59 * time.Second}
			c.Queue.VisibilityTimeout, c.Handler.Timeout = Duration{20 * time.Second}, Duration{30 * time.Second}
		}, "ledger.retention", "must be between 1m and 87600h, got 59s", nil},
		{"ledger retention shorter than a claim", func(c *Config) { c.Ledger.Retention = Duration{70 * time.Second} }, "ledger.retention", "must be at least the visibility timeout plus the handler timeout (1m20s), the longest a claim is held, so that no record expires while its work runs, got 1m10s", nil},
		{"ledger retention past year 2262", func(c *Config) { c.Ledger.Retention = Duration{2500000 * time.Hour} }, "ledger.retention", "must be between 1m and 87600h", nil},
		{"ledger complete delay long", func(c *Config) { c.Ledger.CompleteDelay = Duration{time.Second} }, "ledger.complete_delay", "must be between 0s and 100ms, got 1s", nil},
		{"handler type unknown", func(c *Config) { c.Handler.Type = "grpc" }, "handler.type", `must be one of exec, http, got "grpc"`, nil},
		{"handler body unknown", func(c *Config) { c.Handler.Body = "envelope" }, "handler.body", `must be payload or as_received, got "envelope"`, nil},
		{"handler command missing", func(c *Config) { c.Handler.Command = nil }, "handler.command", `is required when handler.type is "exec"`, nil},
		{"handler command empty program", func(c *Config) { c.Handler.Command = []string{"", "x"} }, "handler.command", "must name a program", nil},
		{"handler url missing", func(c *Config) { c.Handler.Type = HandlerHTTP }, "handler.url", "is required", nil},
		{"handler url relative", func(c *Config) { c.Handler.Type = HandlerHTTP; c.Handler.URL = "/events" }, "handler.url", "absolute http or https URL", nil},
		{"handler timeout zero", func(c *Config) { c.Handler.Timeout = Duration{0} }, "handler.timeout", "must be greater than 0s and at most 12h, got 0s", nil},
		{"handler timeout negative", func(c *Config) { c.Handler.Timeout = Duration{-time.Second} }, "handler.timeout", "got -1s", nil},
		{"handler timeout over", func(c *Config) { c.Handler.Timeout = Duration{12*time.Hour + 1} }, "handler.timeout", "at most 12h", nil},
		{"handler concurrency zero", func(c *Config) { c.Handler.Concurrency = 0 }, "handler.concurrency", "must be between 1 and 10000, got 0", nil},
		{"handler concurrency over", func(c *Config) { c.Handler.Concurrency = 10001 }, "handler.concurrency", "got 10001", nil},
		{"handler retry code zero", func(c *Config) { c.Handler.RetryExitCodes = []int{75, 0} }, "handler.retry_exit_codes", "each must be between 1 and 255, got 0", nil},
		{"handler retry codes out of range", func(c *Config) { c.Handler.RetryExitCodes = []int{-1, 75, 256} }, "handler.retry_exit_codes", "got -1, 256", nil},
		{"handler env not a name", func(c *Config) { c.Handler.Env = []string{"PATH", "A=B"} }, "handler.env", `"A=B" is not a variable name`, nil},
		{"retry min_backoff negative", func(c *Config) { c.Retry.MinBackoff = Duration{-time.Second} }, "retry.min_backoff", "must be between 0s and 12h, got -1s", nil},
		{"retry min_backoff over", func(c *Config) { c.Retry.MinBackoff = Duration{13 * time.Hour} }, "retry.min_backoff", "got 13h", []string{"retry.max_backoff"}},
		{"retry max_backoff below min", func(c *Config) { c.Retry.MaxBackoff = Duration{time.Second} }, "retry.max_backoff", "must be at least the minimum back-off (5s), got 1s", nil},
		{"retry max_backoff over", func(c *Config) { c.Retry.MaxBackoff = Duration{13 * time.Hour} }, "retry.max_backoff", "must be between 0s and 12h, got 13h", nil},
		{"shutdown grace negative", func(c *Config) { c.Shutdown.Grace = Duration{-time.Second} }, "shutdown.grace", "must be between 0s and 1h, got -1s", nil},
		{"shutdown grace over", func(c *Config) { c.Shutdown.Grace = Duration{61 * time.Minute} }, "shutdown.grace", "got 1h1m", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			var keys []string
			found := false
			for _, p := range problems(err) {
				if !errors.Is(p, ErrInvalidConfig) {
					t.Errorf("problem %q does not wrap ErrInvalidConfig", p)
				}
				key, _, _ := strings.Cut(p.Error(), ": ")
				keys = append(keys, key)
				if key == tc.key {
					found = true
					if !strings.Contains(p.Error(), tc.want) {
						t.Errorf("problem %q does not contain %q", p, tc.want)
					}
					if !strings.HasSuffix(p.Error(), ": invalid configuration") {
						t.Errorf("problem %q does not end with the sentinel", p)
					}
				}
			}
			if !found {
				t.Errorf("no problem names %s in %q", tc.key, err)
			}
			if want := append([]string{tc.key}, tc.others...); !slices.Equal(keys, want) {
				t.Errorf("problems name keys %q, want %q", keys, want)
			}
		})
	}
}

func TestValidateMessage(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Queue.MaxMessages = 11
	const want = "queue.max_messages: must be between 1 and 10, got 11: invalid configuration"
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Queue.URL = ""
	c.Queue.MaxMessages = 0
	c.Key.OnMissing = "drop"
	c.Handler.Concurrency = -1
	c.Shutdown.Grace = Duration{2 * time.Hour}
	err := c.Validate()
	got := problems(err)
	want := []string{"queue.url", "queue.max_messages", "key.on_missing", "handler.concurrency", "shutdown.grace"}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(want), err)
	}
	for i, p := range got {
		if !strings.HasPrefix(p.Error(), want[i]+": ") || !errors.Is(p, ErrInvalidConfig) {
			t.Errorf("problem %d = %q, want one about %s wrapping ErrInvalidConfig", i, p, want[i])
		}
	}
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"defaults", func(c *Config) {}},
		{"plain http queue url", func(c *Config) { c.Queue.URL = "http://localhost:4566/000000000000/q" }},
		{"endpoint", func(c *Config) { c.Queue.Endpoint = "http://127.0.0.1:4566" }},
		{"short polling", func(c *Config) { c.Queue.WaitTime = Duration{0} }},
		{"longest poll", func(c *Config) { c.Queue.WaitTime = Duration{20 * time.Second} }},
		{"one message", func(c *Config) { c.Queue.MaxMessages = 1 }},
		{"shortest visibility", func(c *Config) { c.Queue.VisibilityTimeout = Duration{time.Second} }},
		{"longest visibility", func(c *Config) { c.Queue.VisibilityTimeout = Duration{12 * time.Hour} }},
		{"most pollers", func(c *Config) { c.Queue.Pollers = 64 }},
		{"root pointer", func(c *Config) { c.Key.Pointer = "/" }},
		{"escaped pointer", func(c *Config) { c.Key.Pointer = "/a~0b/c~1d/~01" }},
		{"unicode pointer", func(c *Config) { c.Key.Pointer = "/détail/ид" }},
		{"attribute, no pointer", func(c *Config) { c.Key.From = KeyFromAttribute; c.Key.Attribute = "Id"; c.Key.Pointer = "" }},
		{"deduplication id, no pointer", func(c *Config) { c.Key.From = KeyFromDeduplicationID; c.Key.Pointer = "bad~" }},
		{"hash", func(c *Config) { c.Key.OnMissing = OnMissingHash }},
		{"longest prefix", func(c *Config) { c.Key.Prefix = strings.Repeat("é", 64) }},
		{"shortest retention", func(c *Config) {
			c.Ledger.Retention = Duration{time.Minute}
			c.Queue.VisibilityTimeout = Duration{30 * time.Second}
			c.Handler.Timeout = Duration{30 * time.Second}
		}},
		{"short polling", func(c *Config) { c.Queue.WaitTime = Duration{} }},
		{"dynamodb table with dots and dashes", func(c *Config) { c.Ledger.Backend = BackendDynamoDB; c.Ledger.Table = "orders.sqsonce-ops" }},
		{"postgres table in a schema", func(c *Config) { c.Ledger.Backend = BackendPostgres; c.Ledger.Table = "ops.sqsonce_operations" }},
		{"retry at once, then back off", func(c *Config) {
			c.Retry.MinBackoff = Duration{}
			c.Retry.MaxBackoff = Duration{2 * time.Second}
		}},
		{"no complete delay", func(c *Config) { c.Ledger.CompleteDelay = Duration{} }},
		{"http handler without command", func(c *Config) {
			c.Handler.Type = HandlerHTTP
			c.Handler.URL = "https://handler.internal/events"
			c.Handler.Command = nil
		}},
		{"exec with empty argument", func(c *Config) { c.Handler.Command = []string{"handle", ""} }},
		{"shortest timeout", func(c *Config) { c.Handler.Timeout = Duration{1} }},
		{"longest timeout", func(c *Config) { c.Handler.Timeout = Duration{12 * time.Hour} }},
		{"most concurrency", func(c *Config) { c.Handler.Concurrency = 10000 }},
		{"edge retry codes", func(c *Config) { c.Handler.RetryExitCodes = []int{1, 255} }},
		{"no retry codes", func(c *Config) { c.Handler.RetryExitCodes = nil }},
		{"no back-off", func(c *Config) { c.Retry.MinBackoff = Duration{0}; c.Retry.MaxBackoff = Duration{0} }},
		{"longest back-off", func(c *Config) {
			c.Retry.MinBackoff = Duration{12 * time.Hour}
			c.Retry.MaxBackoff = Duration{12 * time.Hour}
		}},
		{"no grace", func(c *Config) { c.Shutdown.Grace = Duration{0} }},
		{"longest grace", func(c *Config) { c.Shutdown.Grace = Duration{time.Hour} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.mutate(&c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}

// A 0s in the file is zero for the worker too, never its default, and a 0
// that is not a value for the worker is refused by name, not defaulted.
func TestWorkerConfig_ZeroIsAValue(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Queue.WaitTime, c.Retry.MinBackoff, c.Retry.MaxBackoff, c.Shutdown.Grace = Duration{}, Duration{}, Duration{}, Duration{}
	w := workerConfig(c, nil)
	for name, d := range map[string]time.Duration{"WaitTime": w.WaitTime, "MinBackoff": w.MinBackoff, "MaxBackoff": w.MaxBackoff, "Grace": w.Grace} {
		if d != worker.NoDelay {
			t.Errorf("%s = %v, want worker.NoDelay (zero, not the default)", name, d)
		}
	}
	if err := w.Validate(); err != nil {
		t.Errorf("the worker refuses what the file accepts: %v", err)
	}
	c = validConfig()
	c.Handler.Concurrency = 0
	c.Queue.VisibilityTimeout = Duration{}
	err := c.Validate()
	for _, want := range []string{"queue.visibility_timeout: must be between 1s and 12h, got 0s", "handler.concurrency: must be between 1 and 10000, got 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
}

func TestLoadConfigUnknownKeys(t *testing.T) {
	t.Parallel()
	const path = "testdata/unknown.toml"
	_, err := LoadConfig(path, nil)
	if err == nil {
		t.Fatal("LoadConfig succeeded, want an error")
	}
	if !errors.Is(err, ErrUnknownKey) || !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error %q does not wrap ErrUnknownKey and ErrInvalidConfig", err)
	}
	want := []string{
		path + ": verbose: unknown key: invalid configuration",
		path + ": queue.visiblity_timeout: unknown key (did you mean queue.visibility_timeout?): invalid configuration",
		path + ": queue.URL: unknown key (did you mean queue.url?): invalid configuration",
		path + ": queue.tls: unknown key: invalid configuration",
		path + ": metrics: unknown key: invalid configuration",
	}
	var got []string
	for _, p := range problems(err) {
		got = append(got, p.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("got problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoadConfigUnknownKeysInline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		toml string
		want string
	}{
		{"top-level section", "[queues]\nurl = \"x\"\n", "queues: unknown key (did you mean queue?)"},
		{"nested key", "[handler]\nretry_exit_code = [75]\n", "handler.retry_exit_code: unknown key (did you mean handler.retry_exit_codes?)"},
		{"dotted key", "queue.wait = \"1s\"\n", "queue.wait: unknown key"},
		{"section case", "[Queue]\nurl = \"x\"\n", "Queue: unknown key (did you mean queue?)"},
		{"array of tables", "[[hooks]]\nurl = \"x\"\n[[hooks]]\nurl = \"y\"\n", "hooks: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadConfig(writeConfig(t, tc.toml), env(map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}))
			if got := problems(err); len(got) != 1 || !strings.Contains(got[0].Error(), tc.want) || !errors.Is(err, ErrUnknownKey) {
				t.Errorf("LoadConfig error = %v, want one unknown key %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigWrongTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		toml string
		want []string // parts of the error
	}{
		{"string for int", "[queue]\nmax_messages = \"ten\"\n", []string{"line 2", "queue.max_messages", "type string"}},
		{"string for bool", "[queue]\n\n[key]\nsns = \"yes\"\n", []string{"line 4", "key.sns"}},
		{"int for duration", "[queue]\nwait_time = 20\n", []string{"line 2", "queue.wait_time", `want a duration such as "20s"`}},
		{"bad duration", "[retry]\nmax_backoff = \"soon\"\n", []string{"line 2", "retry.max_backoff", `got "soon"`}},
		{"string for list", "[handler]\ncommand = \"/bin/handle --fast\"\n", []string{"line 2", "handler.command"}},
		{"strings for int list", "[handler]\nretry_exit_codes = [\"75\"]\n", []string{"line 2", "handler.retry_exit_codes"}},
		{"value for section", "queue = \"https://example.com\"\n", []string{"line 1", "queue"}},
		{"syntax", "[queue]\nurl = https://example.com\n", []string{"line 2"}},
		{"duplicate key", "[queue]\npollers = 1\npollers = 2\n", []string{"line 3", "pollers"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tc.toml)
			_, err := LoadConfig(path, env(map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			for _, w := range append([]string{path + ": "}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfigEnvOverrides(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		vars  map[string]string
		field func(c Config) any
		want  any
	}{
		{"string", map[string]string{"SQSONCE_LEDGER_PATH": "/tmp/ledger.db"},
			func(c Config) any { return c.Ledger.Path }, "/tmp/ledger.db"},
		{"string kept verbatim", map[string]string{"SQSONCE_KEY_PREFIX": " env: "},
			func(c Config) any { return c.Key.Prefix }, " env: "},
		{"string set empty", map[string]string{"SQSONCE_QUEUE_ENDPOINT": ""},
			func(c Config) any { return c.Queue.Endpoint }, ""},
		{"int", map[string]string{"SQSONCE_QUEUE_MAX_MESSAGES": " 3 "},
			func(c Config) any { return c.Queue.MaxMessages }, 3},
		{"bool", map[string]string{"SQSONCE_KEY_SNS": "false"},
			func(c Config) any { return c.Key.SNS }, false},
		{"payload bool", map[string]string{"SQSONCE_PAYLOAD_S3": "true"},
			func(c Config) any { return c.Payload.S3 }, true},
		{"bool short form", map[string]string{"SQSONCE_KEY_SNS": "0"},
			func(c Config) any { return c.Key.SNS }, false},
		{"duration", map[string]string{"SQSONCE_HANDLER_TIMEOUT": "45s"},
			func(c Config) any { return c.Handler.Timeout }, Duration{45 * time.Second}},
		{"compound duration", map[string]string{"SQSONCE_LEDGER_RETENTION": "1h30m"},
			func(c Config) any { return c.Ledger.Retention }, Duration{90 * time.Minute}},
		{"list as JSON", map[string]string{"SQSONCE_HANDLER_COMMAND": `["/bin/sh", "-c", "echo hi there"]`},
			func(c Config) any { return c.Handler.Command }, []string{"/bin/sh", "-c", "echo hi there"}},
		{"list as words", map[string]string{"SQSONCE_HANDLER_COMMAND": " /usr/bin/handle  --fast\t-v\n"},
			func(c Config) any { return c.Handler.Command }, []string{"/usr/bin/handle", "--fast", "-v"}},
		{"int list as JSON", map[string]string{"SQSONCE_HANDLER_RETRY_EXIT_CODES": "[1, 2]"},
			func(c Config) any { return c.Handler.RetryExitCodes }, []int{1, 2}},
		{"int list as words", map[string]string{"SQSONCE_HANDLER_RETRY_EXIT_CODES": "75 76"},
			func(c Config) any { return c.Handler.RetryExitCodes }, []int{75, 76}},
		{"int list set empty", map[string]string{"SQSONCE_HANDLER_RETRY_EXIT_CODES": ""},
			func(c Config) any { return c.Handler.RetryExitCodes }, []int{}},
		{"int list empty JSON", map[string]string{"SQSONCE_HANDLER_RETRY_EXIT_CODES": "[]"},
			func(c Config) any { return c.Handler.RetryExitCodes }, []int{}},
		{"env list set empty", map[string]string{"SQSONCE_HANDLER_ENV": ""},
			func(c Config) any { return c.Handler.Env }, []string{}},
		{"enum", map[string]string{"SQSONCE_KEY_FROM": "body"},
			func(c Config) any { return c.Key.From }, "body"},
		{"unrelated variables", map[string]string{"SQSONCE_QUEUE": "x", "SQSONCE_UNKNOWN_KEY": "y"},
			func(c Config) any { return c }, fullConfig()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := LoadConfig("testdata/full.toml", env(tc.vars))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if g := tc.field(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("got %#v, want %#v", g, tc.want)
			}
			// Everything else keeps the file's value.
			want := fullConfig()
			for name := range tc.vars {
				for _, s := range settings() {
					if s.env == name {
						f := reflect.ValueOf(&want).Elem().FieldByIndex(s.index)
						f.Set(reflect.ValueOf(got).FieldByIndex(s.index))
					}
				}
			}
			assertConfig(t, got, want)
		})
	}
}

// TestLoadConfigEnvOnly configures every key from the environment, without a
// file.
func TestLoadConfigEnvOnly(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"SQSONCE_QUEUE_URL":                "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
		"SQSONCE_QUEUE_REGION":             "eu-west-1",
		"SQSONCE_QUEUE_ENDPOINT":           "http://127.0.0.1:4566",
		"SQSONCE_QUEUE_WAIT_TIME":          "10s",
		"SQSONCE_QUEUE_MAX_MESSAGES":       "5",
		"SQSONCE_QUEUE_VISIBILITY_TIMEOUT": "2m",
		"SQSONCE_QUEUE_POLLERS":            "4",
		"SQSONCE_KEY_FROM":                 "attribute",
		"SQSONCE_KEY_POINTER":              "/detail/order~1id",
		"SQSONCE_KEY_ATTRIBUTE":            "OrderId",
		"SQSONCE_KEY_SNS":                  "true",
		"SQSONCE_KEY_ON_MISSING":           "hash",
		"SQSONCE_KEY_PREFIX":               "orders:",
		"SQSONCE_PAYLOAD_S3":               "false",
		"SQSONCE_PAYLOAD_MAX_SIZE":         "1048576",
		"SQSONCE_PAYLOAD_DELETE_OBJECTS":   "false",
		"SQSONCE_PAYLOAD_BUCKET":           "orders-payloads",
		"SQSONCE_PAYLOAD_BUCKETS":          "orders-payloads partner-payloads",
		"SQSONCE_PAYLOAD_ENDPOINT":         "http://127.0.0.1:4566",
		"SQSONCE_LEDGER_BACKEND":           "postgres",
		"SQSONCE_LEDGER_PATH":              "/srv/sqsonce/orders.db",
		"SQSONCE_LEDGER_URL":               "postgres://sqsonce@db.internal:5432/orders",
		"SQSONCE_LEDGER_TABLE":             "orders_ops",
		"SQSONCE_LEDGER_REGION":            "eu-west-2",
		"SQSONCE_LEDGER_ENDPOINT":          "http://127.0.0.1:8000",
		"SQSONCE_LEDGER_RETENTION":         "72h",
		"SQSONCE_LEDGER_COMPLETE_DELAY":    "5ms",
		"SQSONCE_LEDGER_KEEP_BODY":         "true",
		"SQSONCE_HANDLER_TYPE":             "http",
		"SQSONCE_HANDLER_COMMAND":          "/usr/bin/env handle --verbose",
		"SQSONCE_HANDLER_URL":              "https://handler.internal/events",
		"SQSONCE_HANDLER_TIMEOUT":          "1m30s",
		"SQSONCE_HANDLER_CONCURRENCY":      "32",
		"SQSONCE_HANDLER_RETRY_EXIT_CODES": "[75, 111]",
		"SQSONCE_HANDLER_BODY":             "as_received",
		"SQSONCE_HANDLER_ENV":              "PATH APP_*",
		"SQSONCE_RETRY_MIN_BACKOFF":        "1s",
		"SQSONCE_RETRY_MAX_BACKOFF":        "1h",
		"SQSONCE_FLOW_MODE":                "observe",
		"SQSONCE_FLOW_SCOPE":               "orders partner-api",
		"SQSONCE_FLOW_PAUSE":               "false",
		"SQSONCE_FLOW_PAUSE_ON":            "unavailable retry",
		"SQSONCE_FLOW_TRIP_FAILURES":       "20",
		"SQSONCE_FLOW_TRIP_WINDOW":         "1m",
		"SQSONCE_FLOW_TRIP_KEYS":           "5",
		"SQSONCE_FLOW_TRIP_RATIO":          "0.8",
		"SQSONCE_FLOW_PROBE_MAX":           "30s",
		"SQSONCE_FLOW_RATE":                "50",
		"SQSONCE_FLOW_BURST":               "5",
		"SQSONCE_FLOW_CONCURRENCY":         "16",
		"SQSONCE_FLOW_PARTITION":           `[{"pointer": "/tenant", "rate": 5}, {"attribute": "Account", "rate": 0.5, "burst": 2, "concurrency": 3}]`,
		"SQSONCE_SHUTDOWN_GRACE":           "10s",
		"SQSONCE_ADMIN_LISTEN":             "10.0.0.5:9100",
		"SQSONCE_ADMIN_PPROF":              "true",
		"SQSONCE_INGEST_LISTEN":            "0.0.0.0:8443",
		"SQSONCE_INGEST_ADMIN_LISTEN":      "10.0.0.5:9101",
		"SQSONCE_INGEST_MAX_BODY":          "100000",
		"SQSONCE_INGEST_MAX_IN_FLIGHT":     "64",
		"SQSONCE_INGEST_REQUEST_TIMEOUT":   "9s",
		"SQSONCE_INGEST_RETRY_AFTER":       "30s",
		"SQSONCE_INGEST_SOURCE": `[{"name": "github", "path": "/hooks/github", "verify": "github", "secret_env": "GITHUB_WEBHOOK_SECRETS"},
			{"name": "stripe", "path": "/hooks/stripe", "verify": "stripe", "secret_file": "/etc/sqsonce/stripe.secrets", "tolerance": "10m",
			 "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo", "key_pointer": "/id", "group_pointer": "/data/object/customer", "on_missing": "reject"},
			{"name": "partner", "path": "/hooks/partner", "verify": "hmac-sha256", "secret_file": "/etc/sqsonce/partner.secrets",
			 "signature_header": "X-Partner-Signature", "key_pointer": "/event/id", "key_prefix": "partner/", "on_missing": "hash"}]`,
		"SQSONCE_CONSOLE_LISTEN":           "0.0.0.0:9465",
		"SQSONCE_CONSOLE_WRITES":           "true",
		"SQSONCE_CONSOLE_AUTH":             "token",
		"SQSONCE_CONSOLE_CREDENTIAL_FILE":  "/etc/sqsonce/console.token",
		"SQSONCE_CONSOLE_CREDENTIAL_ENV":   "",
		"SQSONCE_CONSOLE_SESSION_LIFETIME": "8h",
		"SQSONCE_CONSOLE_SECURE_COOKIE":    "true",
		"SQSONCE_CONSOLE_TRUSTED_PROXIES":  "127.0.0.1 10.1.0.0/16",
		"SQSONCE_CONSOLE_ALLOWED_HOSTS":    `["console.example.com", "ops.example.com:8443"]`,
	}
	if len(vars) != len(EnvVars()) {
		t.Fatalf("test sets %d variables, EnvVars lists %d", len(vars), len(EnvVars()))
	}
	got, err := LoadConfig("", env(vars))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	assertConfig(t, got, fullConfig())

	// The queue URL alone is enough.
	got, err = LoadConfig("", env(map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	assertConfig(t, got, validConfig())

	// Without it, validation names it.
	_, err = LoadConfig("", nil)
	if !errors.Is(err, ErrInvalidConfig) || err.Error() != "queue.url: is required: invalid configuration" {
		t.Errorf("LoadConfig with nothing = %v", err)
	}
}

func TestLoadConfigBadEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, variable, value, want string
	}{
		{"int", "SQSONCE_QUEUE_MAX_MESSAGES", "ten", `want an integer, got "ten"`},
		{"int empty", "SQSONCE_HANDLER_CONCURRENCY", "", `want an integer, got ""`},
		{"bool", "SQSONCE_KEY_SNS", "maybe", `want true or false, got "maybe"`},
		{"duration", "SQSONCE_QUEUE_WAIT_TIME", "20", `want a duration such as "20s" or "15m", got "20"`},
		{"list JSON", "SQSONCE_HANDLER_COMMAND", `["/bin/handle", `, "want a JSON array of strings"},
		{"list JSON types", "SQSONCE_HANDLER_COMMAND", `["/bin/handle", 1]`, "want a JSON array of strings"},
		{"int list JSON", "SQSONCE_HANDLER_RETRY_EXIT_CODES", `[75, "76"]`, "want a JSON array of integers"},
		{"int list words", "SQSONCE_HANDLER_RETRY_EXIT_CODES", "75 x", `item 2: want an integer, got "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadConfig("testdata/full.toml", env(map[string]string{tc.variable: tc.value}))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			key := ""
			for _, s := range settings() {
				if s.env == tc.variable {
					key = s.key
				}
			}
			prefix := tc.variable + " (" + key + "): "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q followed by %q", err, prefix, tc.want)
			}
		})
	}

	// Every bad variable is reported.
	_, err := LoadConfig("", env(map[string]string{
		"SQSONCE_QUEUE_URL":      testQueueURL,
		"SQSONCE_QUEUE_POLLERS":  "many",
		"SQSONCE_SHUTDOWN_GRACE": "forever",
	}))
	if got := problems(err); len(got) != 2 ||
		!strings.HasPrefix(got[0].Error(), "SQSONCE_QUEUE_POLLERS (queue.pollers): ") ||
		!strings.HasPrefix(got[1].Error(), "SQSONCE_SHUTDOWN_GRACE (shutdown.grace): ") {
		t.Errorf("LoadConfig error = %v, want both variables", err)
	}
}

func TestLoadConfigUnreadableFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name     string
		path     string
		notExist bool
	}{
		{"missing", filepath.Join(dir, "missing.toml"), true},
		{"directory", dir, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadConfig(tc.path, env(map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q does not name %s", err, tc.path)
			}
			if errors.Is(err, fs.ErrNotExist) != tc.notExist {
				t.Errorf("errors.Is(%q, fs.ErrNotExist) = %v", err, !tc.notExist)
			}
			if errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %q wraps ErrInvalidConfig, want only the file error", err)
			}
		})
	}
}

func TestEnvVars(t *testing.T) {
	t.Parallel()
	want := []string{
		"SQSONCE_QUEUE_URL",
		"SQSONCE_QUEUE_REGION",
		"SQSONCE_QUEUE_ENDPOINT",
		"SQSONCE_QUEUE_WAIT_TIME",
		"SQSONCE_QUEUE_MAX_MESSAGES",
		"SQSONCE_QUEUE_VISIBILITY_TIMEOUT",
		"SQSONCE_QUEUE_POLLERS",
		"SQSONCE_KEY_FROM",
		"SQSONCE_KEY_POINTER",
		"SQSONCE_KEY_ATTRIBUTE",
		"SQSONCE_KEY_SNS",
		"SQSONCE_KEY_ON_MISSING",
		"SQSONCE_KEY_PREFIX",
		"SQSONCE_PAYLOAD_S3",
		"SQSONCE_PAYLOAD_MAX_SIZE",
		"SQSONCE_PAYLOAD_DELETE_OBJECTS",
		"SQSONCE_PAYLOAD_BUCKET",
		"SQSONCE_PAYLOAD_BUCKETS",
		"SQSONCE_PAYLOAD_ENDPOINT",
		"SQSONCE_LEDGER_BACKEND",
		"SQSONCE_LEDGER_PATH",
		"SQSONCE_LEDGER_URL",
		"SQSONCE_LEDGER_TABLE",
		"SQSONCE_LEDGER_REGION",
		"SQSONCE_LEDGER_ENDPOINT",
		"SQSONCE_LEDGER_RETENTION",
		"SQSONCE_LEDGER_COMPLETE_DELAY",
		"SQSONCE_LEDGER_KEEP_BODY",
		"SQSONCE_HANDLER_TYPE",
		"SQSONCE_HANDLER_COMMAND",
		"SQSONCE_HANDLER_URL",
		"SQSONCE_HANDLER_TIMEOUT",
		"SQSONCE_HANDLER_CONCURRENCY",
		"SQSONCE_HANDLER_RETRY_EXIT_CODES",
		"SQSONCE_HANDLER_BODY",
		"SQSONCE_HANDLER_ENV",
		"SQSONCE_RETRY_MIN_BACKOFF",
		"SQSONCE_RETRY_MAX_BACKOFF",
		"SQSONCE_FLOW_MODE",
		"SQSONCE_FLOW_SCOPE",
		"SQSONCE_FLOW_PAUSE",
		"SQSONCE_FLOW_PAUSE_ON",
		"SQSONCE_FLOW_TRIP_FAILURES",
		"SQSONCE_FLOW_TRIP_WINDOW",
		"SQSONCE_FLOW_TRIP_KEYS",
		"SQSONCE_FLOW_TRIP_RATIO",
		"SQSONCE_FLOW_PROBE_MAX",
		"SQSONCE_FLOW_RATE",
		"SQSONCE_FLOW_BURST",
		"SQSONCE_FLOW_CONCURRENCY",
		"SQSONCE_FLOW_PARTITION",
		"SQSONCE_SHUTDOWN_GRACE",
		"SQSONCE_ADMIN_LISTEN",
		"SQSONCE_ADMIN_PPROF",
		"SQSONCE_INGEST_LISTEN",
		"SQSONCE_INGEST_ADMIN_LISTEN",
		"SQSONCE_INGEST_MAX_BODY",
		"SQSONCE_INGEST_MAX_IN_FLIGHT",
		"SQSONCE_INGEST_REQUEST_TIMEOUT",
		"SQSONCE_INGEST_RETRY_AFTER",
		"SQSONCE_INGEST_SOURCE",
		"SQSONCE_CONSOLE_LISTEN",
		"SQSONCE_CONSOLE_WRITES",
		"SQSONCE_CONSOLE_AUTH",
		"SQSONCE_CONSOLE_CREDENTIAL_FILE",
		"SQSONCE_CONSOLE_CREDENTIAL_ENV",
		"SQSONCE_CONSOLE_SESSION_LIFETIME",
		"SQSONCE_CONSOLE_SECURE_COOKIE",
		"SQSONCE_CONSOLE_TRUSTED_PROXIES",
		"SQSONCE_CONSOLE_ALLOWED_HOSTS",
	}
	got := EnvVars()
	if !slices.Equal(got, want) {
		t.Errorf("EnvVars() =\n%q\nwant\n%q", got, want)
	}
	got[0] = "changed"
	if EnvVars()[0] != want[0] {
		t.Error("EnvVars returned a shared slice")
	}

	// Every key is covered by a validation rule, so a new key cannot be
	// added without deciding what a valid value is.
	ruled := make(map[string]bool)
	for _, r := range rules {
		ruled[r.key] = true
	}
	for _, key := range workerKeys {
		ruled[key] = true
	}
	for _, s := range settings() {
		if !ruled[s.key] && s.key != "key.sns" && s.key != "flow.pause" && s.key != "admin.pprof" && s.key != "payload.s3" && s.key != "console.writes" && s.key != "console.secure_cookie" && s.key != "ledger.keep_body" {
			t.Errorf("no validation rule for %s", s.key)
		}
	}
}

func TestDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		text string
	}{
		{0, "0s"},
		{1500 * time.Millisecond, "1.5s"},
		{20 * time.Second, "20s"},
		{15 * time.Minute, "15m"},
		{90 * time.Second, "1m30s"},
		{168 * time.Hour, "168h"},
		{time.Hour + 30*time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h0m1s"},
		{10*time.Minute + 500*time.Millisecond, "10m0.5s"},
		{10 * time.Millisecond, "10ms"},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			t.Parallel()
			text, err := Duration{tc.d}.MarshalText()
			if err != nil || string(text) != tc.text {
				t.Errorf("MarshalText(%d) = %q, %v, want %q", tc.d, text, err, tc.text)
			}
			var d Duration
			if err := d.UnmarshalText(text); err != nil || d.Duration != tc.d {
				t.Errorf("UnmarshalText(%q) = %v, %v, want %v", text, d.Duration, err, tc.d)
			}
		})
	}
	for _, bad := range []string{"", "20", "soon", "1d", " 20s", "-1m"} {
		var d Duration
		if err := d.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded", bad)
		}
	}
}

// FuzzLoadConfig loads arbitrary files: LoadConfig must not panic, must
// return only valid configurations, and must explain every rejection with
// ErrInvalidConfig since the file itself is always readable.
func FuzzLoadConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.toml")
	seeds = append(seeds, "../../config.example.toml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("[queue]\nmax_messages = \"ten\"\n"))
	f.Add([]byte("queue = 5\n[[key]]\nfrom = 1\n"))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "sqsonce.toml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path, nil)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Errorf("LoadConfig returned an invalid config: %v", err)
		}
	})
}

// handler.env = [] passes nothing to the command, not everything.
func TestHandlerEnvEmptyPassesNothing(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "[queue]\nurl = \""+testQueueURL+"\"\n[handler]\nenv = []\n")
	c, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Handler.envPatterns()
	if p == nil || len(p) != 0 || worker.EnvPasses(p, "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("handler.env = [] became %#v", p)
	}
	if d := DefaultConfig().Handler.envPatterns(); !worker.EnvPasses(d, "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("the default %q does not pass everything", d)
	}
}

func ptr[T any](v T) *T { return &v }

// payload.buckets, when empty, is payload.bucket alone, else no bucket.
func TestAllowedBuckets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    PayloadConfig
		want []string
	}{
		{PayloadConfig{}, nil},
		{PayloadConfig{Buckets: []string{}}, nil},
		{PayloadConfig{Bucket: "sent-here"}, []string{"sent-here"}},
		{PayloadConfig{Bucket: "sent-here", Buckets: []string{"a-b", "c-d"}}, []string{"a-b", "c-d"}},
		{PayloadConfig{Buckets: []string{"*"}}, []string{"*"}},
	} {
		if got := tc.p.allowedBuckets(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: allowedBuckets() = %q, want %q", tc.p, got, tc.want)
		}
	}
}
