package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

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
	Complete(ctx context.Context, c ledger.Completion) error
	Fail(ctx context.Context, f ledger.Failure) error
	Release(ctx context.Context, key, owner string) error
	Extend(ctx context.Context, key, owner string, lease time.Duration) (time.Time, error)
	Sweep(ctx context.Context) (int, error)
}

// Limits of SQS that bound the configuration.
const (
	MaxMessagesPerReceive = 10
	MaxWaitTime           = 20 * time.Second
	MaxVisibility         = 12 * time.Hour
)

// Config configures a Worker. Zero fields take the defaults named on them.
type Config struct {
	QueueURL          string        // required
	WaitTime          time.Duration // long poll per receive, whole seconds up to 20s; default 20s
	MaxMessages       int           // per receive, 1..10; default 10
	VisibilityTimeout time.Duration // per receive and per heartbeat, also the ledger lease; default 60s
	Pollers           int           // concurrent receive loops; default 1

	Key KeyConfig // required: where each message's operation key comes from

	Concurrency    int           // handlers running at once; default 8
	HandlerTimeout time.Duration // per attempt; default 30s

	MinBackoff time.Duration // visibility after a first failed attempt, doubling; default 5s
	MaxBackoff time.Duration // default 15m

	Grace time.Duration // at shutdown, how long running work may finish; default 25s

	// Retention is the ledger's retention. It is only compared with the
	// queues' message retention, to warn when duplicates could slip through.
	Retention time.Duration
	// SweepInterval is how often expired ledger records are swept; default
	// 10m, negative disables sweeping.
	SweepInterval time.Duration

	Logger *slog.Logger // default slog.Default()

	// Registerer, when set, gets the worker's Prometheus metrics.
	Registerer prometheus.Registerer
	// StallAfter is how long a receive loop may go without moving before
	// Health reports it not alive (a stuck receive); default WaitTime + 1m.
	StallAfter time.Duration
}

// ErrInvalidConfig is wrapped by every configuration error of New.
var ErrInvalidConfig = errors.New("invalid worker configuration")

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.WaitTime, 20*time.Second)
	def(&c.VisibilityTimeout, 60*time.Second)
	def(&c.HandlerTimeout, 30*time.Second)
	def(&c.MinBackoff, 5*time.Second)
	def(&c.MaxBackoff, 15*time.Minute)
	def(&c.Grace, 25*time.Second)
	def(&c.SweepInterval, 10*time.Minute)
	if c.MaxMessages == 0 {
		c.MaxMessages = MaxMessagesPerReceive
	}
	if c.Pollers == 0 {
		c.Pollers = 1
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	def(&c.StallAfter, c.WaitTime+time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig))
	}
	if c.QueueURL == "" {
		bad("QueueURL", "required")
	}
	if c.WaitTime < 0 || c.WaitTime > MaxWaitTime || c.WaitTime%time.Second != 0 {
		bad("WaitTime", "%v is not whole seconds in 0s..20s", c.WaitTime)
	}
	if c.MaxMessages < 1 || c.MaxMessages > MaxMessagesPerReceive {
		bad("MaxMessages", "%d is not in 1..10", c.MaxMessages)
	}
	if c.VisibilityTimeout < time.Second || c.VisibilityTimeout > MaxVisibility || c.VisibilityTimeout%time.Second != 0 {
		bad("VisibilityTimeout", "%v is not whole seconds in 1s..12h", c.VisibilityTimeout)
	}
	if c.Pollers < 1 {
		bad("Pollers", "%d is less than 1", c.Pollers)
	}
	if c.Concurrency < 1 {
		bad("Concurrency", "%d is less than 1", c.Concurrency)
	}
	if c.HandlerTimeout <= 0 {
		bad("HandlerTimeout", "%v is not positive", c.HandlerTimeout)
	}
	if c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff || c.MaxBackoff > MaxVisibility {
		bad("MinBackoff/MaxBackoff", "want 0 <= %v <= %v <= 12h", c.MinBackoff, c.MaxBackoff)
	}
	if c.Grace < 0 {
		bad("Grace", "%v is negative", c.Grace)
	}
	if _, err := newKeyer(c.Key); err != nil {
		bad("Key", "%v", err)
	}
	return errors.Join(errs...)
}
