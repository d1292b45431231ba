package main

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/ingest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/worker"
)

// Configuration errors. Every error that LoadConfig returns for a bad file
// or a bad environment variable, and every error Validate returns, wraps
// ErrInvalidConfig. A file that cannot be read is not one of them: that
// error wraps the *fs.PathError from the operating system instead.
var (
	// ErrInvalidConfig marks a configuration that cannot be used: a value
	// that breaks a rule, a value of the wrong type, a key sqsonce does not
	// know, or an environment variable that does not parse.
	ErrInvalidConfig = errors.New("invalid configuration")

	// ErrUnknownKey marks a key or section in the configuration file that
	// sqsonce does not know, usually a misspelling. An error wrapping it also
	// wraps ErrInvalidConfig.
	ErrUnknownKey = errors.New("unknown key")
)

// envPrefix starts the name of every environment variable that overrides a
// key: SQSONCE_<SECTION>_<KEY>, upper-cased.
const envPrefix = "SQSONCE_"

// Values of KeyConfig.From.
const (
	KeyFromBody            = "body"
	KeyFromAttribute       = "attribute"
	KeyFromDeduplicationID = "deduplication_id"
)

// Values of KeyConfig.OnMissing.
const (
	OnMissingReject = "reject"
	OnMissingHash   = "hash"
)

// Values of HandlerConfig.Type.
const (
	HandlerExec = "exec"
	HandlerHTTP = "http"
)

// Values of HandlerConfig.Body.
const (
	BodyPayload    = string(worker.BodyPayload)
	BodyAsReceived = string(worker.BodyAsReceived)
)

// Config is the whole sqsonce configuration. It is plain data: build it with
// DefaultConfig or LoadConfig, and call Validate after changing it by hand.
// A Config returned by LoadConfig without error has passed Validate.
//
// Each field's toml tag is its key in the configuration file; the same
// tags name the environment variables (see EnvVars).
type Config struct {
	Queue    QueueConfig    `toml:"queue"`
	Key      KeyConfig      `toml:"key"`
	Payload  PayloadConfig  `toml:"payload"`
	Ledger   LedgerConfig   `toml:"ledger"`
	Handler  HandlerConfig  `toml:"handler"`
	Retry    RetryConfig    `toml:"retry"`
	Flow     FlowConfig     `toml:"flow"`
	Shutdown ShutdownConfig `toml:"shutdown"`
	Admin    AdminConfig    `toml:"admin"`
	Ingest   IngestConfig   `toml:"ingest"`
	Console  ConsoleConfig  `toml:"console"`
}

// QueueConfig says which SQS queue to consume and how to receive from it.
type QueueConfig struct {
	// URL is the queue URL. Required; an absolute http or https URL.
	URL string `toml:"url"`
	// Region is the AWS region of the queue. Empty means the region that
	// URL names (https://sqs.<region>.amazonaws.com/..., and the other
	// forms hostRegion reads), else the one Endpoint names, else the AWS
	// SDK's (AWS_REGION, AWS_DEFAULT_REGION, the profile's); with none of
	// them a command that calls AWS fails, naming what to set. When set it
	// must agree with the region URL and Endpoint name.
	Region string `toml:"region"`
	// Endpoint, when set, replaces the AWS endpoint with an SQS-compatible
	// one such as http://127.0.0.1:4566. Empty or an absolute http(s) URL.
	Endpoint string `toml:"endpoint"`
	// WaitTime is the long-poll wait of each receive: whole seconds, 0s to
	// 20s. 0s means short polling.
	WaitTime Duration `toml:"wait_time"`
	// MaxMessages is the most messages one receive returns: 1 to 10.
	MaxMessages int `toml:"max_messages"`
	// VisibilityTimeout is requested on each receive; a heartbeat extends
	// it while a handler runs. Whole seconds, 1s to 12h.
	VisibilityTimeout Duration `toml:"visibility_timeout"`
	// Pollers is the number of concurrent receive loops: 1 to 64.
	Pollers int `toml:"pollers"`
}

// KeyConfig says how the idempotency key of a message is found.
type KeyConfig struct {
	// From is where the key is read: KeyFromBody, KeyFromAttribute or
	// KeyFromDeduplicationID.
	From string `toml:"from"`
	// Pointer is the RFC 6901 JSON pointer to the key in the message body.
	// When From is KeyFromBody it must be non-empty and valid.
	Pointer string `toml:"pointer"`
	// Attribute is the name of the message attribute holding the key.
	// Required when From is KeyFromAttribute.
	Attribute string `toml:"attribute"`
	// SNS means the body is an SNS notification envelope: Pointer is read
	// from the envelope's Message, not from the body itself.
	SNS bool `toml:"sns"`
	// OnMissing is what happens to a message without a key: OnMissingReject
	// leaves it for the dead-letter queue and logs why; OnMissingHash keys it
	// by a hash of its payload.
	OnMissing string `toml:"on_missing"`
	// Prefix is prepended to every key. At most 128 bytes of valid UTF-8
	// without control characters; may be empty.
	Prefix string `toml:"prefix"`
}

// PayloadConfig says how payloads kept in S3 are read: the bodies that the
// Amazon SQS Extended Client libraries put in S3, sending a pointer to the
// object in their place.
type PayloadConfig struct {
	// S3 reads the payload of a pointer message (one with the attribute
	// ExtendedPayloadSize or SQSLargePayloadSize) from S3; the object is
	// the message's payload for its key and for the handler. false hands
	// a pointer body on as it is.
	S3 bool `toml:"s3"`
	// MaxSize is the largest payload read from S3, in bytes: 1 to 2 GiB.
	// A larger object is a permanent failure.
	MaxSize int `toml:"max_size"`
	// DeleteObjects deletes a payload's object once its message is deleted
	// with the operation complete. Needs S3.
	DeleteObjects bool `toml:"delete_objects"`
	// Bucket is where `sqsonce send` puts a body over SQS's limit; empty:
	// such a body is refused.
	Bucket string `toml:"bucket"`
	// Buckets are the buckets that payloads are read from (and, with
	// DeleteObjects, deleted from); a message that points to another is
	// dead-lettered, its object neither read nor deleted. ["*"] allows
	// every bucket. Empty means Bucket alone when it is set, else no
	// bucket: see allowedBuckets.
	Buckets []string `toml:"buckets"`
	// Endpoint, when set, replaces the AWS endpoint of S3 with an
	// S3-compatible one, addressed path-style (http://host/bucket/key).
	// Empty or an absolute http(s) URL.
	Endpoint string `toml:"endpoint"`
}

// allowedBuckets are the buckets payloads are read from, for
// worker.Config.Buckets: payload.buckets, or when it is empty
// payload.bucket (where `sqsonce send` puts them), or none.
func (p PayloadConfig) allowedBuckets() []string {
	switch {
	case len(p.Buckets) > 0:
		return p.Buckets
	case p.Bucket != "":
		return []string{p.Bucket}
	}
	return nil
}

// maxCompleteDelay bounds ledger.complete_delay: longer would only widen the
// time in which done work is not yet recorded.
const maxCompleteDelay = 100 * time.Millisecond

// Values of LedgerConfig.Backend.
const (
	BackendBbolt    = "bbolt"
	BackendPostgres = "postgres"
	BackendDynamoDB = "dynamodb"
)

// LedgerConfig says where processed keys are recorded and for how long.
type LedgerConfig struct {
	// Backend is where the ledger lives: BackendBbolt (a file, for one
	// worker process), BackendPostgres or BackendDynamoDB (shared by any
	// number of workers).
	Backend string `toml:"backend"`
	// Path is the ledger database file of the bbolt backend. Required for
	// it.
	Path string `toml:"path"`
	// URL is the PostgreSQL connection string (postgres://user@host/db or
	// key=value pairs); empty means the standard PG* environment
	// variables. Only for the postgres backend.
	URL string `toml:"url"`
	// Table is the table of the shared backends.
	Table string `toml:"table"`
	// Region and Endpoint are DynamoDB's region (empty: the queue's, as
	// QueueConfig.region finds it, else the AWS SDK's) and,
	// when set, an endpoint that replaces AWS's (an absolute http or https
	// URL). Only for the dynamodb backend.
	Region   string `toml:"region"`
	Endpoint string `toml:"endpoint"`
	// Retention is how long a key is remembered: 1m to 87600h (10 years).
	Retention Duration `toml:"retention"`
	// CompleteDelay is how long a completion that would commit alone waits
	// for other writes to share its commit: 0s (never) to 100ms.
	CompleteDelay Duration `toml:"complete_delay"`
	// KeepBody keeps each operation's message (its body and string
	// attributes, at most 16 KiB) in its record, for the console to show
	// (worker.Config.KeepBody). Off by default: bodies may hold personal
	// data.
	KeepBody bool `toml:"keep_body"`
}

// HandlerConfig says what handles a message.
type HandlerConfig struct {
	// Type is HandlerExec or HandlerHTTP.
	Type string `toml:"type"`
	// Command is the argv of the exec handler, run without a shell. For
	// HandlerExec it must be non-empty with a non-empty Command[0].
	Command []string `toml:"command"`
	// URL is the POST target of the http handler. For HandlerHTTP it must
	// be an absolute http or https URL.
	URL string `toml:"url"`
	// Timeout bounds one attempt: greater than 0s, at most 12h.
	Timeout Duration `toml:"timeout"`
	// Concurrency is the most messages handled at once: 1 to 10000.
	Concurrency int `toml:"concurrency"`
	// RetryExitCodes are the exec exit codes that mean "retry later". 0
	// means done and any code not listed means a permanent failure, so each
	// code must be 1 to 255.
	RetryExitCodes []int `toml:"retry_exit_codes"`
	// Body is what the handler receives: BodyPayload (the Message of an SNS
	// envelope when key.sns is on, else the body; for a pointer to a
	// payload in S3, the object) or BodyAsReceived (the body exactly as SQS
	// delivered it).
	Body string `toml:"body"`
	// Env lists the variables of sqsonce's own environment that the exec
	// handler's command inherits: names, or prefixes ending in "*". The
	// default ["*"] passes everything but sqsonce's own secrets
	// (ownSecrets), which pass only when named exactly; [] passes none.
	// The SQSONCE_* variables of the message are set either way.
	Env []string `toml:"env"`
}

// RetryConfig is the back-off after a failed attempt: the message's
// visibility timeout starts at MinBackoff and doubles on each further
// attempt, up to MaxBackoff.
type RetryConfig struct {
	// MinBackoff is the first back-off: 0s to 12h.
	MinBackoff Duration `toml:"min_backoff"`
	// MaxBackoff caps the back-off: at least MinBackoff, at most 12h.
	MaxBackoff Duration `toml:"max_backoff"`
}

// FlowConfig is flow control, which protects what the handlers call: it
// pauses the intake while the handlers' downstream is down, and limits how
// fast and how many operations start, for the handler's scope and for each
// value of a part of the message. The worker owns its defaults and limits
// (worker.FlowConfig); on a shared ledger they hold for every worker that
// shares it.
type FlowConfig struct {
	// Mode is "on", "observe" (report what the pause and the limits would
	// do, without doing it) or "off".
	Mode string `toml:"mode"`
	// Scope names what a pause and the limits apply to on every worker
	// sharing the ledger: at most maxScopeLen bytes. Empty means the
	// queue's name and the handler's target (see flowScope).
	Scope string `toml:"scope"`
	// Pause pauses the intake while the handlers' downstream is down;
	// false leaves every failure to the back-off and the dead-letter
	// queue.
	Pause bool `toml:"pause"`
	// PauseOn lists the failures that count towards a pause:
	// "unavailable" (an http handler's 5xx, 429, 408, refused
	// connections and timeouts; a Go handler's worker.Unavailable), which
	// must be listed, and "retry" (every other retryable failure: an exec
	// command's retry codes).
	PauseOn []string `toml:"pause_on"`
	// TripFailures counted failures within TripWindow, from TripKeys
	// distinct keys, that make TripRatio of the attempts ended in the
	// window, pause the intake.
	TripFailures int      `toml:"trip_failures"`
	TripWindow   Duration `toml:"trip_window"`
	TripKeys     int      `toml:"trip_keys"`
	TripRatio    float64  `toml:"trip_ratio"`
	// ProbeMax is the longest wait between two probes while paused.
	ProbeMax Duration `toml:"probe_max"`
	// Rate is how many operations start per second, at most (0: no
	// rate); Burst how many may start at once after a quiet spell.
	Rate  float64 `toml:"rate"`
	Burst int     `toml:"burst"`
	// Concurrency is how many operations run at once across the workers
	// sharing the ledger (0: no bound). It needs a shared ledger: on the
	// embedded one handler.concurrency is that bound.
	Concurrency int `toml:"concurrency"`
	// Partition limits each value of a part of the message on its own,
	// one [[flow.partition]] table each. In the environment,
	// SQSONCE_FLOW_PARTITION holds them all as a JSON array of objects
	// with the same keys.
	Partition []FlowPartition `toml:"partition"`
}

// FlowPartition is one [[flow.partition]]: a part of the message (a JSON
// pointer into the payload, or a message attribute) whose every value is
// limited on its own.
type FlowPartition struct {
	Pointer   string  `toml:"pointer" json:"pointer"`
	Attribute string  `toml:"attribute" json:"attribute"`
	Rate      float64 `toml:"rate" json:"rate"`
	// Burst 0 (or left out) means 1.
	Burst       int `toml:"burst" json:"burst"`
	Concurrency int `toml:"concurrency" json:"concurrency"`
}

// ShutdownConfig says how sqsonce stops.
type ShutdownConfig struct {
	// Grace is how long running handlers may finish after shutdown starts:
	// 0s to 1h.
	Grace Duration `toml:"grace"`
}

// AdminConfig says where `sqsonce run` serves its metrics and health
// checks. (`sqsonce ingest` serves its own on IngestConfig.AdminListen.)
type AdminConfig struct {
	// Listen is the host:port of the worker's admin HTTP listener; empty
	// disables it. Keep it on a loopback or private address (with pprof
	// on, it exposes profiles of the process).
	Listen string `toml:"listen"`
	// PProf serves the Go profiler under /debug/pprof/ on the admin
	// listeners, the worker's and the receiver's.
	PProf bool `toml:"pprof"`
}

// IngestConfig configures `sqsonce ingest`, the webhook receiver.
type IngestConfig struct {
	// Listen is the host:port the receiver serves.
	Listen string `toml:"listen"`
	// AdminListen is the host:port of the receiver's admin HTTP listener
	// (/metrics, /healthz, /readyz); empty disables it. It is not
	// admin.listen, so that `sqsonce run` and `sqsonce ingest` run side by
	// side on one configuration.
	AdminListen string `toml:"admin_listen"`
	// MaxBody is the largest request body taken, in bytes; 0 means what
	// each source's queue takes (its MaximumMessageSize less the
	// attributes). It may only lower that.
	MaxBody int `toml:"max_body"`
	// MaxInFlight bounds the requests handled at once: 1 to 100000.
	MaxInFlight int `toml:"max_in_flight"`
	// RequestTimeout bounds one request, the send to SQS included: 1s to
	// 60s. Keep it below the senders' own timeouts (10s for GitHub).
	RequestTimeout Duration `toml:"request_timeout"`
	// RetryAfter is the Retry-After of a 503: 1s to 1h.
	RetryAfter Duration `toml:"retry_after"`
	// Source lists the senders, one [[ingest.source]] table each.
	Source []IngestSource `toml:"source"`
}

// IngestSource is one [[ingest.source]]: a sender's endpoint. In the
// environment, SQSONCE_INGEST_SOURCE holds them all as a JSON array of
// objects with the same keys.
type IngestSource struct {
	Name string `toml:"name" json:"name"`
	Path string `toml:"path" json:"path"`
	// Verify is the signature scheme: stripe, github, standard,
	// hmac-sha256 or none (which must be said).
	Verify string `toml:"verify" json:"verify"`
	// SecretFile is a file of secrets, one a line; SecretEnv the name of a
	// variable holding whitespace-separated secrets. Exactly one, except
	// for verify = "none", which takes neither. Secrets never stand in the
	// configuration itself.
	SecretFile string `toml:"secret_file" json:"secret_file"`
	SecretEnv  string `toml:"secret_env" json:"secret_env"`
	// SignatureHeader is the header of verify = "hmac-sha256".
	SignatureHeader string `toml:"signature_header" json:"signature_header"`
	// Tolerance is how old a signed timestamp may be (stripe, standard):
	// empty means 5m.
	Tolerance Duration `toml:"tolerance" json:"tolerance"`
	// QueueURL is the queue the events go to; empty means queue.url.
	QueueURL string `toml:"queue_url" json:"queue_url"`
	// KeyPointer or KeyHeader says where the sender's event id is; empty
	// means the scheme's own (github: a SHA-256 of the body, standard: the
	// signed webhook-id, stripe: /id). KeyHeader may name only a header
	// the signature covers (standard's webhook-id; any for none).
	KeyHeader  string `toml:"key_header" json:"key_header"`
	KeyPointer string `toml:"key_pointer" json:"key_pointer"`
	// KeyPrefix is put before every key of the source; absent means the
	// name and a colon, "" keeps the bare event id.
	KeyPrefix *string `toml:"key_prefix" json:"key_prefix"`
	// GroupPointer is the body's value that is the FIFO message group;
	// empty means the key.
	GroupPointer string `toml:"group_pointer" json:"group_pointer"`
	// OnMissing is what a request without an event id gets: reject (400,
	// the default) or hash (keyed by a SHA-256 of its body).
	OnMissing string `toml:"on_missing" json:"on_missing"`
}

// ConsoleConfig configures `sqsonce console`, the web console.
type ConsoleConfig struct {
	// Listen is the host:port the console serves. Beyond loopback it
	// needs a credential (Auth).
	Listen string `toml:"listen"`
	// Writes enables replay, forget and export. It needs a credential.
	Writes bool `toml:"writes"`
	// Auth is the credential every page then needs: ConsoleAuthNone,
	// ConsoleAuthToken (a bearer token) or ConsoleAuthBasic (basic
	// authentication, user:password).
	Auth string `toml:"auth"`
	// CredentialFile is a file holding the token or user:password;
	// CredentialEnv the name of a variable holding it. Exactly one with a
	// credential, none without. Never the credential itself.
	CredentialFile string `toml:"credential_file"`
	CredentialEnv  string `toml:"credential_env"`
	// SessionLifetime is how long a sign-in with the token lasts; the
	// browser signs in again after it. Sign-out ends it sooner, and so
	// does a restart of the console.
	SessionLifetime Duration `toml:"session_lifetime"`
	// SecureCookie marks the sign-in cookie Secure (HTTPS only) whatever
	// the scheme of the request: for a console that browsers reach over
	// HTTPS through a proxy not listed in TrustedProxies.
	SecureCookie bool `toml:"secure_cookie"`
	// TrustedProxies are the addresses (an IP or a CIDR prefix) of the
	// reverse proxies whose X-Forwarded-Proto the console believes, to
	// mark the cookie Secure when the browser used HTTPS.
	TrustedProxies []string `toml:"trusted_proxies"`
	// AllowedHosts are the names (name or name:port) browsers reach the
	// console by, besides localhost, IP addresses and the host of
	// Listen: a request for any other Host is refused, as a page of
	// another site whose name was rebound to the console's address is.
	AllowedHosts []string `toml:"allowed_hosts"`
}

// Duration is a time.Duration written as a Go duration string such as
// "20s", "15m" or "168h", in the file and in the environment.
type Duration struct {
	time.Duration
}

// UnmarshalText parses a Go duration string, as time.ParseDuration does.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf(`want a duration such as "20s" or "15m", got %q`, text)
	}
	if v < 0 {
		return fmt.Errorf("want a duration of 0s or more, got %q", text)
	}
	d.Duration = v
	return nil
}

// MarshalText writes d as String does; UnmarshalText reads it back to the
// same value.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// String is time.Duration's String without trailing zero units: "15m"
// rather than "15m0s", "168h" rather than "168h0m0s".
func (d Duration) String() string {
	s := d.Duration.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// DefaultConfig returns the configuration used for every key that neither
// the file nor the environment sets. It does not validate: Queue.URL has no
// default and must be set.
func DefaultConfig() Config {
	return Config{
		Queue: QueueConfig{
			URL:               "",
			Region:            "",
			Endpoint:          "",
			WaitTime:          Duration{worker.DefaultWaitTime},
			MaxMessages:       worker.DefaultMaxMessages,
			VisibilityTimeout: Duration{worker.DefaultVisibilityTimeout},
			Pollers:           worker.DefaultPollers,
		},
		Key: KeyConfig{
			From:      KeyFromBody,
			Pointer:   "/id",
			Attribute: "",
			SNS:       false,
			OnMissing: OnMissingReject,
			Prefix:    "",
		},
		Payload: PayloadConfig{
			S3:            true,
			MaxSize:       int(worker.DefaultMaxPayload),
			DeleteObjects: false,
			Bucket:        "",
			Buckets:       []string{},
			Endpoint:      "",
		},
		Ledger: LedgerConfig{
			Backend:       BackendBbolt,
			Path:          "/var/lib/sqsonce/ledger.db",
			Table:         defaultTable,
			Retention:     Duration{ledger.DefaultRetention},
			CompleteDelay: Duration{ledger.DefaultCompleteDelay},
		},
		Handler: HandlerConfig{
			Type:           HandlerExec,
			Command:        []string{"/usr/local/bin/handle-event"},
			URL:            "",
			Timeout:        Duration{worker.DefaultHandlerTimeout},
			Concurrency:    worker.DefaultConcurrency,
			RetryExitCodes: []int{75},
			Body:           BodyPayload,
			Env:            []string{"*"},
		},
		Retry: RetryConfig{
			MinBackoff: Duration{worker.DefaultMinBackoff},
			MaxBackoff: Duration{worker.DefaultMaxBackoff},
		},
		Flow: FlowConfig{
			Mode:         string(worker.FlowOn),
			Scope:        "",
			Pause:        true,
			PauseOn:      []string{string(worker.FailureUnavailable)},
			TripFailures: worker.DefaultTrip.Failures,
			TripWindow:   Duration{worker.DefaultTrip.Window},
			TripKeys:     worker.DefaultTrip.Keys,
			TripRatio:    worker.DefaultTrip.Ratio,
			ProbeMax:     Duration{worker.DefaultProbeMax},
			Rate:         0,
			Burst:        1,
			Concurrency:  0,
		},
		Shutdown: ShutdownConfig{
			Grace: Duration{worker.DefaultGrace},
		},
		Admin: AdminConfig{
			Listen: "127.0.0.1:9464",
		},
		Ingest: IngestConfig{
			Listen:         "127.0.0.1:8080",
			AdminListen:    "127.0.0.1:9466",
			MaxInFlight:    ingest.DefaultMaxInFlight,
			RequestTimeout: Duration{ingest.DefaultRequestTimeout},
			RetryAfter:     Duration{ingest.DefaultRetryAfter},
		},
		Console: ConsoleConfig{
			Listen:          "127.0.0.1:9465",
			Auth:            ConsoleAuthNone,
			SessionLifetime: Duration{console.DefaultSessionLifetime},
			TrustedProxies:  []string{},
			AllowedHosts:    []string{},
		},
	}
}

// LoadConfig builds the configuration: DefaultConfig, then the TOML file at
// path decoded over it, then the environment variables named by EnvVars,
// then Validate. path may be "" for a configuration from the environment
// alone. lookupEnv is normally os.LookupEnv; nil means no environment. A
// variable that is set, even to "", overrides the file.
//
// LoadConfig returns the zero Config with any error. An unreadable file
// gives an error naming the path and wrapping the *fs.PathError; every other
// error wraps ErrInvalidConfig: a TOML syntax error or a value of the wrong
// type (naming the line and key), every unknown key in the file (each also
// wrapping ErrUnknownKey), every bad environment variable, or every problem
// Validate finds. Problems of one stage are reported together, joined with
// errors.Join.
func LoadConfig(path string, lookupEnv func(string) (string, bool)) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		if err := decodeFile(path, &c); err != nil {
			return Config{}, err
		}
	}
	if err := applyEnv(&c, lookupEnv); err != nil {
		return Config{}, err
	}
	if err := c.validate(func(key string) string {
		if lookupEnv == nil {
			return ""
		}
		for _, s := range settings() {
			if _, set := lookupEnv(s.env); set && s.key == key {
				return s.env
			}
		}
		return ""
	}); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decodeFile decodes the TOML file at path onto c and rejects keys that c
// has no field for.
func decodeFile(path string, c *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		// The toml error already reads "toml: line N (last key "k"): ...".
		msg := strings.TrimPrefix(err.Error(), "toml: ")
		return fmt.Errorf("%s: %s: %w", path, msg, ErrInvalidConfig)
	}
	return unknownKeys(path, md)
}

// unknownKeys reports, in file order, each key of the decoded file that is
// not exactly a section or key of Config. md.Undecoded lists the keys no
// field took; the decoder also matches field names case-insensitively, so a
// key that is not spelt exactly as in Config ("URL" for "url") is unknown
// too, although it was decoded. Keys inside an unknown table are not
// reported again.
func unknownKeys(path string, md toml.MetaData) error {
	undecoded := make(map[string]bool)
	for _, k := range md.Undecoded() {
		undecoded[k.String()] = true
	}
	known := knownKeys()
	var (
		errs     []error
		reported []toml.Key
		seen     = make(map[string]bool)
	)
	for _, k := range md.Keys() {
		name := k.String()
		if seen[name] || (known[name] && !undecoded[name]) || underAny(k, reported) {
			continue
		}
		seen[name] = true
		reported = append(reported, k)
		errs = append(errs, fmt.Errorf("%s: %s: %w%s: %w", path, name, ErrUnknownKey, suggest(k, known), ErrInvalidConfig))
	}
	return errors.Join(errs...)
}

// underAny reports whether k lies inside one of the tables in parents.
func underAny(k toml.Key, parents []toml.Key) bool {
	for _, p := range parents {
		if len(p) < len(k) && slices.Equal(p, k[:len(p)]) {
			return true
		}
	}
	return false
}

// suggest returns ` (did you mean "queue.url"?)` when a known key at the
// same depth and under the same parent is close to k, else "".
func suggest(k toml.Key, known map[string]bool) string {
	parent := toml.Key(k[:len(k)-1]).String()
	last := k[len(k)-1]
	best, bestDist := "", 3 // suggest only within an edit distance of 2
	for name := range known {
		p, l := "", name
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			p, l = name[:i], name[i+1:]
		}
		if p != parent {
			continue
		}
		d := editDistance(strings.ToLower(last), l)
		if d < bestDist || (d == bestDist && name < best) {
			best, bestDist = name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// setting is one key of the configuration file, found by reflection over
// the toml tags of Config and its section structs.
type setting struct {
	key   string // dotted TOML key, e.g. "queue.max_messages"
	env   string // overriding variable, e.g. "SQSONCE_QUEUE_MAX_MESSAGES"
	index []int  // field index path from Config to the value
}

// settings lists every key of Config in declaration order. Adding a tagged
// field to a section struct adds its key, its variable and its place in
// EnvVars.
var settings = sync.OnceValue(func() []setting {
	var out []setting
	root := reflect.TypeFor[Config]()
	for i := range root.NumField() {
		sf := root.Field(i)
		section := tomlName(sf)
		if sf.Type.Kind() != reflect.Struct {
			panic(fmt.Sprintf("config: section field %s is not a struct", sf.Name))
		}
		for j := range sf.Type.NumField() {
			ff := sf.Type.Field(j)
			key := tomlName(ff)
			out = append(out, setting{
				key:   section + "." + key,
				env:   envPrefix + strings.ToUpper(section+"_"+key),
				index: []int{i, j},
			})
		}
	}
	return out
})

// knownKeys is the set of every section and dotted key of Config.
func knownKeys() map[string]bool {
	known := make(map[string]bool)
	root := reflect.TypeFor[Config]()
	for _, s := range settings() {
		section, _, _ := strings.Cut(s.key, ".")
		known[section] = true
		known[s.key] = true
		// A list of tables ([[ingest.source]]): its keys too.
		if t := root.FieldByIndex(s.index).Type; t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
			for i := range t.Elem().NumField() {
				known[s.key+"."+tomlName(t.Elem().Field(i))] = true
			}
		}
	}
	return known
}

// tomlName is the key a struct field has in the file. Every field of
// Config and of its sections must have one.
func tomlName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
	if name == "" || name == "-" {
		panic(fmt.Sprintf("config: field %s has no toml key", sf.Name))
	}
	return name
}

// EnvVars returns the name of every environment variable LoadConfig reads,
// one per key, in the order of the configuration file: SQSONCE_QUEUE_URL,
// SQSONCE_QUEUE_REGION, ... The caller may modify the slice.
func EnvVars() []string {
	var names []string
	for _, s := range settings() {
		names = append(names, s.env)
	}
	return names
}

// keyEnv is the environment variable of the configuration key key
// ("console.listen": "SQSONCE_CONSOLE_LISTEN"). It panics for a key that
// Config does not have.
func keyEnv(key string) string {
	for _, s := range settings() {
		if s.key == key {
			return s.env
		}
	}
	panic("config: no key " + key)
}

// applyEnv sets every key whose variable lookupEnv finds, and reports every
// variable whose value does not parse.
func applyEnv(c *Config, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		return nil
	}
	root := reflect.ValueOf(c).Elem()
	var errs []error
	for _, s := range settings() {
		raw, ok := lookupEnv(s.env)
		if !ok {
			continue
		}
		if err := setText(root.FieldByIndex(s.index), raw); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w: %w", s.env, s.key, err, ErrInvalidConfig))
		}
	}
	return errors.Join(errs...)
}

// setText parses raw into v by v's type. Strings are taken as they are;
// other values are trimmed of surrounding white space. A list is a JSON
// array when it starts with "[", else a white-space separated string.
// v is changed only on success.
func setText(v reflect.Value, raw string) error {
	trimmed := strings.TrimSpace(raw)
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(trimmed))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(trimmed)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", raw)
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(trimmed)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", raw)
		}
		v.SetInt(int64(n))
	case reflect.Float64:
		f, err := strconv.ParseFloat(trimmed, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("want a number, got %q", raw)
		}
		v.SetFloat(f)
	case reflect.Slice:
		list := reflect.New(v.Type())
		objects := v.Type().Elem().Kind() == reflect.Struct
		if strings.HasPrefix(trimmed, "[") {
			if objects {
				// Keys are spelt exactly, once each, as in the file;
				// the decoder below would match them in any case and
				// keep the last of two.
				if err := exactKeys(trimmed, v.Type().Elem()); err != nil {
					return fmt.Errorf("%w, in %q", err, raw)
				}
			}
			dec := json.NewDecoder(strings.NewReader(trimmed))
			dec.DisallowUnknownFields()
			err := dec.Decode(list.Interface())
			if _, end := dec.Token(); err == nil && end != io.EOF {
				return fmt.Errorf("want one JSON array of %s, got more after it in %q", kindNoun(v.Type().Elem()), raw)
			}
			var te *json.UnmarshalTypeError
			switch {
			case errors.As(err, &te) && te.Field != "":
				return fmt.Errorf("%q: want a JSON %s, got %s, in %q", te.Field, jsonNoun(te.Type), te.Value, raw)
			case err != nil && strings.Contains(err.Error(), "unknown field"):
				return fmt.Errorf("%v in %q", err, raw)
			case err != nil:
				return fmt.Errorf("want a JSON array of %s, got %q", kindNoun(v.Type().Elem()), raw)
			}
		} else if objects {
			return fmt.Errorf("want a JSON array of %s, got %q", kindNoun(v.Type().Elem()), raw)
		} else {
			words := strings.Fields(trimmed)
			list.Elem().Set(reflect.MakeSlice(v.Type(), len(words), len(words)))
			for i, w := range words {
				if err := setText(list.Elem().Index(i), w); err != nil {
					return fmt.Errorf("item %d: %w", i+1, err)
				}
			}
		}
		v.Set(list.Elem())
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// exactKeys checks that data, a JSON array of objects, names in each
// object only keys of t's json tags, spelt exactly, each once.
func exactKeys(data string, t reflect.Type) error {
	var allowed []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			allowed = append(allowed, name)
		}
	}
	dec := json.NewDecoder(strings.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil // not an array: the decoder says so
	}
	for item := 1; dec.More(); item++ {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return nil
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			key, ok := tok.(string)
			if err != nil || !ok {
				return nil
			}
			switch {
			case !slices.Contains(allowed, key):
				return fmt.Errorf("item %d: unknown field %q (the fields are %s, spelt so)", item, key, strings.Join(allowed, ", "))
			case seen[key]:
				return fmt.Errorf("item %d: key %q given twice", item, key)
			}
			seen[key] = true
			var value json.RawMessage
			if err := dec.Decode(&value); err != nil {
				return nil
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil
		}
	}
	return nil
}

// jsonNoun names a Go type as JSON calls its values.
func jsonNoun(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	}
	return t.String()
}

// kindNoun names the elements of a list in an error message.
func kindNoun(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int:
		return "integers"
	case reflect.String:
		return "strings"
	case reflect.Struct:
		return "objects"
	}
	return t.String()
}

// rule is one validation rule: the key it checks, when it applies (always,
// if when is nil) and the check, which describes the problem or returns nil.
type rule struct {
	key   string
	when  func(c *Config) bool
	check func(c *Config) error
}

// rules are the validation rules, one per key, in the order of the file.
var rules = []rule{
	{key: "queue.region", when: func(c *Config) bool { return c.Queue.Region != "" }, check: func(c *Config) error {
		q := c.Queue
		if strings.TrimSpace(q.Region) == "" || strings.ContainsFunc(q.Region, unicode.IsSpace) {
			return fmt.Errorf("must be a region name such as eu-west-1, got %q", q.Region)
		}
		for _, u := range []struct{ key, url string }{{"queue.url", q.URL}, {"queue.endpoint", q.Endpoint}} {
			if r := hostRegion(u.url); r != "" && r != q.Region {
				return fmt.Errorf("is %q, but %s (%s) is in %q: the two must agree", q.Region, u.key, u.url, r)
			}
		}
		return nil
	}},
	{
		key:  "queue.endpoint",
		when: func(c *Config) bool { return c.Queue.Endpoint != "" },
		check: func(c *Config) error {
			if err := httpURL(c.Queue.Endpoint); err != nil {
				return err
			}
			if a, b := hostRegion(c.Queue.URL), hostRegion(c.Queue.Endpoint); a != "" && b != "" && a != b {
				return fmt.Errorf("%s is in %q, but queue.url (%s) is in %q: the two must agree", c.Queue.Endpoint, b, c.Queue.URL, a)
			}
			return nil
		},
	},

	{key: "key.on_missing", check: func(c *Config) error { return oneOf(c.Key.OnMissing, OnMissingReject, OnMissingHash) }},

	{
		key:   "payload.delete_objects",
		when:  func(c *Config) bool { return c.Payload.DeleteObjects && !c.Payload.S3 },
		check: func(c *Config) error { return errors.New("needs payload.s3 = true") },
	},
	{
		key:   "payload.bucket",
		when:  func(c *Config) bool { return c.Payload.Bucket != "" },
		check: func(c *Config) error { return bucketName(c.Payload.Bucket) },
	},
	{
		key:  "payload.buckets",
		when: func(c *Config) bool { return len(c.Payload.Buckets) > 0 },
		check: func(c *Config) error {
			if err := worker.CheckBuckets(c.Payload.Buckets); err != nil {
				return err
			}
			var errs []error
			for _, b := range c.Payload.Buckets {
				if b != worker.AnyBucket {
					errs = append(errs, bucketName(b))
				}
			}
			return errors.Join(errs...)
		},
	},
	{
		key:   "payload.endpoint",
		when:  func(c *Config) bool { return c.Payload.Endpoint != "" },
		check: func(c *Config) error { return httpURL(c.Payload.Endpoint) },
	},

	{key: "ledger.backend", check: func(c *Config) error {
		return oneOf(c.Ledger.Backend, BackendBbolt, BackendPostgres, BackendDynamoDB)
	}},
	{
		key:  "ledger.path",
		when: func(c *Config) bool { return c.Ledger.Backend == BackendBbolt },
		check: func(c *Config) error {
			if strings.TrimSpace(c.Ledger.Path) == "" {
				return fmt.Errorf("is required when ledger.backend is %q", BackendBbolt)
			}
			return nil
		},
	},
	{
		key:   "ledger.table",
		when:  func(c *Config) bool { return c.Ledger.Backend != BackendBbolt },
		check: func(c *Config) error { return tableName(c.Ledger.Backend, c.Ledger.Table) },
	},
	{
		key:   "ledger.url",
		when:  func(c *Config) bool { return c.Ledger.URL != "" },
		check: func(c *Config) error { return postgresURL(c.Ledger.URL) },
	},
	{
		key:  "ledger.region",
		when: func(c *Config) bool { return c.Ledger.Region != "" },
		check: func(c *Config) error {
			if strings.ContainsFunc(c.Ledger.Region, unicode.IsSpace) {
				return fmt.Errorf("must be a region name such as eu-west-1, got %q", c.Ledger.Region)
			}
			return nil
		},
	},
	{
		key:   "ledger.endpoint",
		when:  func(c *Config) bool { return c.Ledger.Endpoint != "" },
		check: func(c *Config) error { return httpURL(c.Ledger.Endpoint) },
	},
	{key: "ledger.retention", check: func(c *Config) error { return durationBetween(c.Ledger.Retention, time.Minute, ledger.MaxRetention) }},
	{key: "ledger.complete_delay", check: func(c *Config) error { return durationBetween(c.Ledger.CompleteDelay, 0, maxCompleteDelay) }},

	{key: "handler.type", check: func(c *Config) error { return oneOf(c.Handler.Type, HandlerExec, HandlerHTTP) }},
	{
		key:   "handler.command",
		when:  func(c *Config) bool { return c.Handler.Type == HandlerExec },
		check: func(c *Config) error { return argv(c.Handler.Command) },
	},
	{
		key:   "handler.url",
		when:  func(c *Config) bool { return c.Handler.Type == HandlerHTTP },
		check: func(c *Config) error { return httpURL(c.Handler.URL) },
	},
	{key: "handler.retry_exit_codes", check: func(c *Config) error { return eachBetween(c.Handler.RetryExitCodes, 1, 255) }},
	{key: "handler.env", check: func(c *Config) error {
		var errs []error
		for _, p := range c.Handler.Env {
			if err := worker.CheckEnvPattern(p); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}},

	{key: "flow.mode", when: func(c *Config) bool { return c.Flow.Mode == "" }, check: func(c *Config) error {
		// The worker takes "" as its default; the file says what it means.
		return oneOf(c.Flow.Mode, string(worker.FlowOn), string(worker.FlowObserve), string(worker.FlowOff))
	}},
	{key: "flow.scope", when: func(c *Config) bool { return c.Flow.Scope != "" }, check: func(c *Config) error { return checkScope(c.Flow.Scope) }},
	{key: "flow.pause_on", check: func(c *Config) error {
		if !slices.Contains(c.Flow.PauseOn, string(worker.FailureUnavailable)) {
			return fmt.Errorf(`must list %q, the failures that say the downstream is down (they always count; flow.pause = false pauses on none), got %q`,
				worker.FailureUnavailable, c.Flow.PauseOn)
		}
		return nil
	}},
	{key: "flow.concurrency", when: func(c *Config) bool { return c.Flow.Concurrency > 0 && c.Ledger.Backend == BackendBbolt }, check: func(c *Config) error {
		return fmt.Errorf(`handler.concurrency already bounds one process; flow.concurrency needs a shared ledger (ledger.backend = %q or %q), got %d on %q`,
			BackendPostgres, BackendDynamoDB, c.Flow.Concurrency, BackendBbolt)
	}},
	{key: "flow.partition", when: func(c *Config) bool { return len(c.Flow.Partition) > 0 }, check: func(c *Config) error {
		var errs []error
		for i, p := range c.Flow.Partition {
			if n := len(p.Pointer) + len(p.Attribute); n > maxPartLen {
				errs = append(errs, fmt.Errorf("#%d: a pointer or attribute of %d bytes, over %d: the flow names it makes would not fit the ledger's", i+1, n, maxPartLen))
			}
		}
		return errors.Join(errs...)
	}},

	{
		key:   "admin.listen",
		when:  func(c *Config) bool { return c.Admin.Listen != "" },
		check: func(c *Config) error { return hostPort(c.Admin.Listen) },
	},

	{key: "ingest.listen", check: func(c *Config) error { return hostPort(c.Ingest.Listen) }},
	{
		key:   "ingest.admin_listen",
		when:  func(c *Config) bool { return c.Ingest.AdminListen != "" },
		check: func(c *Config) error { return hostPort(c.Ingest.AdminListen) },
	},
	{key: "ingest.max_body", check: func(c *Config) error { return between(c.Ingest.MaxBody, 0, 1<<30) }},
	{key: "ingest.max_in_flight", check: func(c *Config) error { return between(c.Ingest.MaxInFlight, 1, 100000) }},
	{key: "ingest.request_timeout", check: func(c *Config) error { return durationBetween(c.Ingest.RequestTimeout, time.Second, time.Minute) }},
	{key: "ingest.retry_after", check: func(c *Config) error { return durationBetween(c.Ingest.RetryAfter, time.Second, time.Hour) }},
	{key: "ingest.source", when: func(c *Config) bool { return len(c.Ingest.Source) > 0 }, check: checkIngestSources},

	{key: "console.listen", check: func(c *Config) error {
		if err := hostPort(c.Console.Listen); err != nil {
			return err
		}
		if c.Console.Auth == ConsoleAuthNone && !loopbackListen(c.Console.Listen) {
			return fmt.Errorf("%s reaches beyond loopback: it needs console.auth (a token or basic authentication), or a loopback address such as 127.0.0.1:9465", c.Console.Listen)
		}
		return nil
	}},
	{key: "console.writes", when: func(c *Config) bool { return c.Console.Writes && c.Console.Auth == ConsoleAuthNone }, check: func(c *Config) error {
		return errors.New(`needs console.auth = "token" or "basic": without a credential anyone who reaches the console could replay and forget`)
	}},
	{key: "console.auth", check: func(c *Config) error {
		return oneOf(c.Console.Auth, ConsoleAuthNone, ConsoleAuthToken, ConsoleAuthBasic)
	}},
	{key: "console.credential_file", check: func(c *Config) error {
		a, file, env := c.Console.Auth, c.Console.CredentialFile, c.Console.CredentialEnv
		switch {
		case a == ConsoleAuthNone && file != "":
			return errors.New(`console.auth = "none" takes no credential; set console.auth to "token" or "basic"`)
		case (a == ConsoleAuthToken || a == ConsoleAuthBasic) && file == "" && env == "":
			return fmt.Errorf("console.auth = %q needs its credential from console.credential_file or console.credential_env (never in the configuration)", a)
		}
		return nil
	}},
	{key: "console.session_lifetime", check: func(c *Config) error {
		return durationBetween(c.Console.SessionLifetime, time.Minute, maxSessionLifetime)
	}},
	{key: "console.trusted_proxies", check: func(c *Config) error {
		_, err := prefixes(c.Console.TrustedProxies)
		return err
	}},
	{key: "console.allowed_hosts", check: func(c *Config) error { return hostNames(c.Console.AllowedHosts) }},
	{key: "console.credential_env", when: func(c *Config) bool { return c.Console.CredentialEnv != "" }, check: func(c *Config) error {
		switch {
		case c.Console.Auth == ConsoleAuthNone:
			return errors.New(`console.auth = "none" takes no credential; set console.auth to "token" or "basic"`)
		case c.Console.CredentialFile != "":
			return errors.New("set console.credential_file or console.credential_env, not both")
		}
		return nil
	}},
}

// workerKeys names the file's key for each field of worker.Config that the
// file sets. The worker owns these settings: their defaults, their limits
// and the meaning of their zero are its own, and Validate reports its
// problems under these keys.
var workerKeys = map[string]string{
	"QueueURL":           "queue.url",
	"WaitTime":           "queue.wait_time",
	"MaxMessages":        "queue.max_messages",
	"VisibilityTimeout":  "queue.visibility_timeout",
	"Pollers":            "queue.pollers",
	"Key.From":           "key.from",
	"Key.Pointer":        "key.pointer",
	"Key.Attribute":      "key.attribute",
	"Key.Prefix":         "key.prefix",
	"Body":               "handler.body",
	"HandlerTimeout":     "handler.timeout",
	"Concurrency":        "handler.concurrency",
	"MinBackoff":         "retry.min_backoff",
	"MaxBackoff":         "retry.max_backoff",
	"Grace":              "shutdown.grace",
	"Retention":          "ledger.retention",
	"MaxPayload":         "payload.max_size",
	"Flow.Mode":          "flow.mode",
	"Flow.PauseOn":       "flow.pause_on",
	"Flow.Trip.Failures": "flow.trip_failures",
	"Flow.Trip.Window":   "flow.trip_window",
	"Flow.Trip.Keys":     "flow.trip_keys",
	"Flow.Trip.Ratio":    "flow.trip_ratio",
	"Flow.ProbeMax":      "flow.probe_max",
	"Flow.Rate":          "flow.rate",
	"Flow.Burst":         "flow.burst",
	"Flow.Concurrency":   "flow.concurrency",
}

// postgresURL accepts a postgres:// or postgresql:// URL or a connection
// string of key=value pairs, and says what is wrong without repeating a
// password.
func postgresURL(s string) error {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		if _, err := url.Parse(s); err != nil {
			return errors.New("is not a valid postgres:// URL")
		}
		return nil
	}
	if strings.Contains(s, "://") || !strings.Contains(s, "=") {
		return errors.New(`must be a postgres:// URL or key=value pairs such as "host=db dbname=orders"`)
	}
	return nil
}

// defaultTable is the default ledger.table.
const defaultTable = "sqsonce_operations"

// tableName asks the backend whether name can be its table, and says what
// it wants without the backend's error sentinel.
func tableName(backend, name string) error {
	var err error
	switch backend {
	case BackendPostgres:
		err = postgres.CheckTable(name)
	case BackendDynamoDB:
		err = dynamodb.CheckTable(name)
	}
	if err != nil {
		return errors.New(strings.TrimSuffix(err.Error(), ": "+ledger.ErrInvalidArgument.Error()))
	}
	return nil
}

// bucketName accepts an S3 bucket name: 3 to 63 lower-case letters,
// digits, dots and hyphens, starting and ending with a letter or digit.
func bucketName(s string) error {
	ok := len(s) >= 3 && len(s) <= 63
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = alnum || (c == '.' || c == '-') && i > 0 && i < len(s)-1
	}
	if !ok {
		return fmt.Errorf("must be an S3 bucket name (3 to 63 lower-case letters, digits, dots and hyphens), got %q", s)
	}
	return nil
}

// hostPort accepts host:port with a numeric port, the host possibly empty
// (all interfaces).
func hostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port such as 127.0.0.1:9464, got %q", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port must be a number 0 to 65535, got %q", port)
	}
	return nil
}

// Validate checks every rule, and the worker's settings with the worker's
// own validation, and returns nil or all problems joined with errors.Join,
// in the order of the file. Each problem reads "<key>: <problem>: invalid
// configuration" and wraps ErrInvalidConfig.
func (c Config) Validate() error { return c.validate(nil) }

// validate is Validate, naming after a key the environment variable that
// set it, when env (of a key) names one: the file and the environment may
// both set a key, and the problem is the variable's.
func (c Config) validate(env func(key string) string) error {
	type problem struct {
		key string
		err error
	}
	var problems []problem
	for _, r := range rules {
		if r.when != nil && !r.when(&c) {
			continue
		}
		if err := r.check(&c); err != nil {
			problems = append(problems, problem{r.key, err})
		}
	}
	order := map[string]int{}
	for i, s := range settings() {
		order[s.key] = i
	}
	if err := workerConfig(c, nil).Validate(); err != nil {
		root := reflect.ValueOf(c)
		for _, e := range unjoin(err) {
			var fe *worker.FieldError
			key, ok := "", errors.As(e, &fe)
			if ok && strings.HasPrefix(fe.Field, "Flow.Partitions[") {
				problems = append(problems, problem{"flow.partition", partitionProblem(c, fe)})
				continue
			}
			if ok {
				key, ok = workerKeys[fe.Field]
			}
			if !ok {
				// A field the file does not set: a defect of this program.
				panic(fmt.Sprintf("config: the worker refused a setting the file has no key for: %v", e))
			}
			if key == "flow.trip_keys" && slices.ContainsFunc(problems, func(p problem) bool { return p.key == "flow.trip_failures" }) {
				continue // its bound is trip_failures, already refused
			}
			got := fe.Got
			if v := root.FieldByIndex(settings()[order[key]].index); got != "" && v.Kind() != reflect.String && v.IsZero() {
				// workerConfig passed the file's zero on as a value the
				// worker refuses: say what the file says.
				got = fmt.Sprint(v.Interface())
			}
			msg := flowKeys.Replace(fe.Want)
			if got != "" {
				msg += ", got " + got
			}
			problems = append(problems, problem{key, errors.New(msg)})
		}
	}
	slices.SortStableFunc(problems, func(a, b problem) int { return order[a.key] - order[b.key] })
	errs := make([]error, len(problems))
	for i, p := range problems {
		by := ""
		if env != nil && env(p.key) != "" {
			by = " (set by " + env(p.key) + ")"
		}
		errs[i] = fmt.Errorf("%s: %w%s: %w", p.key, p.err, by, ErrInvalidConfig)
	}
	return errors.Join(errs...)
}

// unjoin returns the errors joined in err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// httpURL requires an absolute http or https URL with a host.
func httpURL(s string) error {
	if s == "" {
		return errors.New("is required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an absolute http or https URL, got %q", s)
	}
	return nil
}

// eachBetween requires lo <= v <= hi for every v, and names every v that
// is not.
func eachBetween(vs []int, lo, hi int) error {
	var bad []string
	for _, v := range vs {
		if v < lo || v > hi {
			bad = append(bad, strconv.Itoa(v))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("each must be between %d and %d, got %s", lo, hi, strings.Join(bad, ", "))
	}
	return nil
}

// oneOf requires v to be one of allowed, exactly.
func oneOf(v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("must be one of %s, got %q", strings.Join(allowed, ", "), v)
}

// between requires lo <= n <= hi.
func between(n, lo, hi int) error {
	if n < lo || n > hi {
		return fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
	}
	return nil
}

// durationBetween requires lo <= d <= hi.
func durationBetween(d Duration, lo, hi time.Duration) error {
	if d.Duration < lo || d.Duration > hi {
		return fmt.Errorf("must be between %v and %v, got %v", Duration{lo}, Duration{hi}, d)
	}
	return nil
}

// argv requires a command line whose first item names a program.
func argv(command []string) error {
	if len(command) == 0 {
		return fmt.Errorf("is required when handler.type is %q", HandlerExec)
	}
	if command[0] == "" {
		return errors.New("must name a program in its first item, got \"\"")
	}
	return nil
}
