package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsonce/sqsonce/ledger"
)

// SQSClient is the part of the SQS API the worker calls. *sqs.Client
// implements it.
type SQSClient interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// Ledger is the part of the operation ledger the worker uses. *ledger.DB
// implements it; so will shared backends.
type Ledger interface {
	ClaimBatch(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, error)
	// CompleteBatch records completions, one error per completion. The
	// worker gathers the completions that wait at the same moment into one
	// call, so that a shared ledger makes one round trip for them.
	CompleteBatch(ctx context.Context, cs []ledger.Completion) []error
	Fail(ctx context.Context, f ledger.Failure) error
	// ReleaseBatch gives back claims whose work never started, one error
	// per claim: the messages of a batch that a stop gives back.
	ReleaseBatch(ctx context.Context, refs []ledger.ClaimRef) []error
	// ExtendBatch renews leases, one error per claim: the heartbeat of
	// the claimed messages of one received batch.
	ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error
	Sweep(ctx context.Context) (int, error)
}

// Limits of SQS that bound the configuration.
const (
	MaxMessagesPerReceive = 10
	MaxWaitTime           = 20 * time.Second
	MaxVisibility         = 12 * time.Hour
)

// Limits of the other settings of Config.
const (
	MaxPollers        = 64
	MaxConcurrency    = 10000
	MaxHandlerTimeout = 12 * time.Hour
	MaxBackoff        = 12 * time.Hour
	MaxGrace          = time.Hour
)

// Defaults of Config: what a zero field means. Each setting's default,
// limits and meaning of zero are decided here, for library users and for
// the sqsonce command alike.
const (
	DefaultWaitTime           = 20 * time.Second
	DefaultMaxMessages        = MaxMessagesPerReceive
	DefaultVisibilityTimeout  = 60 * time.Second
	DefaultPollers            = 1
	DefaultConcurrency        = 8
	DefaultHandlerTimeout     = 20 * time.Second
	DefaultMinBackoff         = 5 * time.Second
	DefaultMaxBackoff         = 15 * time.Minute
	DefaultGrace              = 25 * time.Second
	DefaultSweepInterval      = 10 * time.Minute
	DefaultQueueStatsInterval = 30 * time.Second
)

// NoDelay, in a duration field of Config whose zero value picks a default
// (WaitTime, MinBackoff, MaxBackoff, Grace), means a duration of zero:
// short polling, a retry at once, no grace at shutdown. Other negative
// durations are invalid.
const NoDelay time.Duration = -1

// NoPrefetch, in Config.Prefetch, means no message is received before a
// handler is free for it.
const NoPrefetch = -1

// BodyMode says what a handler receives as the message body.
type BodyMode string

// Body modes.
const (
	// BodyPayload is the message's payload: the Message of an SNS envelope
	// when KeyConfig.SNS is on, else the body as received, and for a
	// pointer to an S3 object (Config.S3) the object's bytes. It is the
	// default (the zero BodyMode).
	BodyPayload BodyMode = "payload"
	// BodyAsReceived is the body exactly as SQS delivered it, an SNS
	// envelope or an S3 pointer included.
	BodyAsReceived BodyMode = "as_received"
)

// Config configures a Worker. A zero field takes the default named on it;
// see NoDelay for a duration of zero where zero picks a default.
type Config struct {
	QueueURL          string        // required
	WaitTime          time.Duration // long poll per receive, whole seconds 0s..20s (NoDelay: short polling); default 20s
	MaxMessages       int           // per receive, 1..10; default 10
	VisibilityTimeout time.Duration // per receive and per heartbeat, also the ledger lease: whole seconds 1s..12h; default 60s
	Pollers           int           // concurrent receive loops, 1..64; default 1

	Key KeyConfig // required: where each message's operation key comes from

	// Body is what a handler's Message.Body holds; default BodyPayload.
	Body BodyMode

	Concurrency    int           // handlers running at once, 1..10000; default 8
	HandlerTimeout time.Duration // per attempt, up to 12h; default 20s, which with an exec command's 5s kill grace ends within the default Grace

	// Prefetch is how many messages may be received and claimed ahead of
	// free handlers, so that a handler that finishes starts the next
	// message at once instead of waiting for a receive's round trip and a
	// claim's commit. They wait claimed, kept out of sight by the
	// heartbeat, and are given back unstarted at a stop. 1..10000
	// (NoPrefetch: none); default 2 × Pollers × MaxMessages, two
	// receives' worth per poller: one received while the one before is
	// claimed and handed to the handlers, so that the pollers keep
	// receiving while every handler is busy (with one receive's worth,
	// pollers waited for room, and the worker reached 0.79 of what its
	// receives allow where SQS's round trip is 11 ms, against 0.90 with
	// two), and no more messages held from other workers on the queue
	// than that.
	Prefetch int

	// MinBackoff is the visibility after a first failed attempt, doubling
	// with each further attempt up to MaxBackoff: 0s..12h (NoDelay: at
	// once); default 5s. MaxBackoff is at least MinBackoff, at most 12h;
	// default 15m.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// Grace is how long running work may finish at shutdown, 0s..1h
	// (NoDelay: cancelled at once); default 25s.
	Grace time.Duration

	// Retention is the ledger's retention. It must outlast the longest a
	// claim is held (VisibilityTimeout plus HandlerTimeout), or a record
	// could expire while its work runs; zero skips that check. It is also
	// compared with the queues' message retention, to warn when duplicates
	// could slip through.
	Retention time.Duration
	// SweepInterval is how often expired ledger records are swept; default
	// 10m, negative disables sweeping.
	SweepInterval time.Duration

	Logger *slog.Logger // default slog.Default()

	// Registerer, when set, gets the worker's Prometheus metrics.
	Registerer prometheus.Registerer
	// QueueStatsInterval is how often, with a Registerer, Run reads the
	// depth of the queue and of its dead-letter queue for the metrics
	// (ReadQueueDepth: one GetQueueAttributes call per queue): at least
	// 1s; default 30s, negative reads none.
	QueueStatsInterval time.Duration
	// StallAfter is how long a receive loop may go without moving before
	// Health reports it not alive (a stuck receive); default WaitTime + 1m.
	StallAfter time.Duration

	// TracerProvider, when set, records a span for each attempt: a
	// handler's run from its start until its outcome is recorded (the
	// completion and the delete queued, the retry's back-off set, the
	// dead-lettering done). The span is of kind Consumer, named "<queue
	// name> process", a child of the producer's trace context when the
	// message carries one (Message.TraceParent), and linked to it; its
	// attributes are messaging.system ("aws_sqs"),
	// messaging.operation.type ("process"), messaging.destination.name,
	// messaging.message.id, sqsonce.key, sqsonce.attempt and
	// sqsonce.outcome (complete, complete_failed, retry, permanent or
	// lease_lost), with status Error and the error's text when the attempt
	// failed. The body is never recorded. Nil records no spans: the
	// producer's context, when there is one, is still handed to the work.
	TracerProvider trace.TracerProvider
	// S3, when set, reads the payloads of messages that point to an S3
	// object in the SQS Extended Client's format (see S3Pointer): the
	// object's bytes are the message's payload, for its key, its
	// fingerprint and the handler's Body. A pointer is only taken as one
	// with the ExtendedPayloadSize (or SQSLargePayloadSize) attribute. Nil
	// turns this off: a pointer body is handed on as it is.
	S3 S3Client
	// MaxPayload bounds the size of a payload read from S3, 1 byte to
	// MaxMaxPayload; default DefaultMaxPayload (64 MiB). A larger object
	// is a permanent failure: its message is dead-lettered.
	MaxPayload int64
	// DeleteObjects deletes a payload's S3 object once its message is
	// deleted with the operation complete (or a duplicate of a completed
	// one). Off by default: other consumers (an SNS fan-out) may still
	// need the object. A copy of the message delivered after its object
	// was deleted is dead-lettered with a reason saying the object is
	// gone. It needs S3.
	DeleteObjects bool
	// Flow protects what the handlers call: it pauses the intake during
	// an outage (on by default) and limits the rate and concurrency of
	// operations, fleet-wide on a shared ledger. See FlowConfig.
	Flow FlowConfig
	// Version names the program in the ledger's registry of processes.
	Version string
	// KeepBody passes each attempt's message (Message.Body and
	// Attributes) to the ledger with its completion or failure, which
	// keeps it, bounded, for an operator to read (ledger.Record.Payload).
	// Off by default: bodies may hold personal data.
	KeepBody bool

	// Buckets are the S3 buckets that payloads are read from (and, with
	// DeleteObjects, deleted from): whoever may send to the queue names
	// the bucket in the pointer, and the worker reads it with its own
	// credentials. A message whose pointer names another bucket is
	// dead-lettered with a reason naming the bucket, its object neither
	// read nor deleted. "*", alone, allows every bucket. Empty allows none:
	// every message that points to S3 is dead-lettered.
	Buckets []string
}

// ErrInvalidConfig is wrapped by every configuration error of New and
// Config.Validate.
var ErrInvalidConfig = errors.New("invalid worker configuration")

// FieldError is a problem with one field of Config. Config.Validate and New
// return them joined with errors.Join; each wraps ErrInvalidConfig.
type FieldError struct {
	Field string // as in Config: "Grace", "Key.Pointer"
	Want  string // what the field must be: "must be between 0s and 1h"
	Got   string // the value refused, formatted; "" when it says nothing
}

func (e *FieldError) Error() string {
	if e.Got == "" {
		return e.Field + ": " + e.Want
	}
	return e.Field + ": " + e.Want + ", got " + e.Got
}

// Unwrap returns ErrInvalidConfig.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

// Validate reports every problem of c, with the defaults filled in, as
// FieldErrors joined with errors.Join; nil when New would accept c.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		switch *d {
		case 0:
			*d = v
		case NoDelay:
			*d = 0
		}
	}
	def(&c.WaitTime, DefaultWaitTime)
	def(&c.MinBackoff, DefaultMinBackoff)
	def(&c.MaxBackoff, DefaultMaxBackoff)
	def(&c.Grace, DefaultGrace)
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, DefaultVisibilityTimeout)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, DefaultHandlerTimeout)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.QueueStatsInterval = cmp.Or(c.QueueStatsInterval, DefaultQueueStatsInterval)
	c.MaxMessages = cmp.Or(c.MaxMessages, DefaultMaxMessages)
	c.Pollers = cmp.Or(c.Pollers, DefaultPollers)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	switch c.Prefetch {
	case 0:
		// Of the values in range: a Pollers or MaxMessages out of range
		// is reported under its own name, not this one's.
		c.Prefetch = 2 * min(max(c.Pollers, 1), MaxPollers) * min(max(c.MaxMessages, 1), MaxMessagesPerReceive)
	case NoPrefetch:
		c.Prefetch = 0
	}
	c.MaxPayload = cmp.Or(c.MaxPayload, DefaultMaxPayload)
	c.StallAfter = cmp.Or(c.StallAfter, c.WaitTime+time.Minute)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Flow.Scope == "" {
		c.Flow.Scope = QueueName(c.QueueURL)
	}
	c.Flow.setDefaults()
}

// validate checks c after setDefaults.
func (c *Config) validate() error {
	var errs []error
	bad := func(field, got, want string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Want: fmt.Sprintf(want, args...), Got: got})
	}
	between := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(field, strconv.Itoa(v), "must be between %d and %d", lo, hi)
		}
	}
	durationBetween := func(field string, d, lo, hi time.Duration, whole bool) {
		switch {
		case d < lo || d > hi:
			bad(field, short(d), "must be between %v and %v", short(lo), short(hi))
		case whole && d%time.Second != 0:
			bad(field, short(d), "must be whole seconds")
		}
	}
	if u, err := url.Parse(c.QueueURL); c.QueueURL == "" {
		bad("QueueURL", "", "is required")
	} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("QueueURL", strconv.Quote(c.QueueURL), "must be an absolute http or https URL")
	}
	durationBetween("WaitTime", c.WaitTime, 0, MaxWaitTime, true)
	between("MaxMessages", c.MaxMessages, 1, MaxMessagesPerReceive)
	durationBetween("VisibilityTimeout", c.VisibilityTimeout, time.Second, MaxVisibility, true)
	between("Pollers", c.Pollers, 1, MaxPollers)
	errs = append(errs, c.Key.validate()) // nil when valid: errors.Join drops it
	switch c.Body {
	case "", BodyPayload, BodyAsReceived:
	default:
		bad("Body", strconv.Quote(string(c.Body)), "must be %s or %s", BodyPayload, BodyAsReceived)
	}
	between("Concurrency", c.Concurrency, 1, MaxConcurrency)
	if c.Prefetch < 0 || c.Prefetch > MaxConcurrency {
		bad("Prefetch", strconv.Itoa(c.Prefetch), "must be between 1 and %d, or NoPrefetch", MaxConcurrency)
	}
	if c.HandlerTimeout <= 0 || c.HandlerTimeout > MaxHandlerTimeout {
		bad("HandlerTimeout", short(c.HandlerTimeout), "must be greater than 0s and at most %v", short(MaxHandlerTimeout))
	}
	durationBetween("MinBackoff", c.MinBackoff, 0, MaxBackoff, false)
	if c.MaxBackoff < c.MinBackoff {
		bad("MaxBackoff", short(c.MaxBackoff), "must be at least the minimum back-off (%v)", short(c.MinBackoff))
	} else {
		durationBetween("MaxBackoff", c.MaxBackoff, 0, MaxBackoff, false)
	}
	durationBetween("Grace", c.Grace, 0, MaxGrace, false)
	if held := c.VisibilityTimeout + c.HandlerTimeout; c.Retention > 0 && c.Retention < held {
		bad("Retention", short(c.Retention), "must be at least the visibility timeout plus the handler timeout (%v), "+
			"the longest a claim is held, so that no record expires while its work runs", short(held))
	}
	if c.QueueStatsInterval > 0 && c.QueueStatsInterval < time.Second {
		bad("QueueStatsInterval", short(c.QueueStatsInterval), "must be at least 1s, or negative to read none")
	}
	if c.MaxPayload < 1 || c.MaxPayload > MaxMaxPayload {
		bad("MaxPayload", strconv.FormatInt(c.MaxPayload, 10), "must be between 1 and %d bytes", MaxMaxPayload)
	}
	if c.DeleteObjects && c.S3 == nil {
		bad("DeleteObjects", "", "needs an S3 client (S3) to delete objects with")
	}
	if err := CheckBuckets(c.Buckets); err != nil {
		bad("Buckets", "", "%v", err)
	}
	c.Flow.validate(bad)
	return errors.Join(errs...)
}

// short formats d without trailing zero units: "15m" rather than "15m0s".
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
