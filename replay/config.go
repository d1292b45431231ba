package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// SQSClient is the part of the SQS API that replay calls. *sqs.Client
// implements it.
type SQSClient interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Ledger is the part of the operation ledger that replay reads and writes.
// *ledger.DB implements it; so does any access to a ledger that answers
// with the ledger package's errors.
type Ledger interface {
	// Get returns the live record of key, or an error wrapping
	// ledger.ErrNotFound.
	Get(ctx context.Context, key string) (ledger.Record, error)
	// Reset makes a failed operation claimable again. It fails with an
	// error wrapping ledger.ErrState for other states, and
	// ledger.ErrNotFound without a record.
	Reset(ctx context.Context, key string) error
}

// AttrReplays is the numeric message attribute that counts how many times a
// message was replayed from a dead-letter queue.
const AttrReplays = "SqsonceReplays"

// Limits of SQS that replay works within.
const (
	batchSize     = 10 // messages per receive, send batch and delete batch
	maxAttributes = 10 // message attributes per message
	maxHold       = 12 * time.Hour
)

// Config configures a Replayer. Start from DefaultConfig: a zero MaxReplays,
// Hold or Concurrency is invalid, not a default.
type Config struct {
	From string // source queue URL, usually a dead-letter queue; required
	To   string // target queue URL; required, and not From
	// ToFIFO says that To is a FIFO queue: copies then carry a message group
	// and a deduplication id (see the package documentation).
	ToFIFO bool

	// KeyOf derives a message's operation key and payload fingerprint
	// exactly as the worker that consumes To derives them
	// (worker.MessageKeyFunc); an error means the
	// message has no key. Required; called from several goroutines at once.
	KeyOf func(types.Message) (key string, fingerprint []byte, err error)

	Max        int     // move at most Max messages; 0: no limit
	MaxReplays int     // leave a message whose SqsonceReplays is MaxReplays or more; 1 or more
	Rate       float64 // move at most Rate messages a second; 0: no limit

	// KeyGlob moves only messages whose operation key matches it
	// (path.Match: * and ? do not match /); keyless messages never match.
	// "": every message.
	KeyGlob string
	// Since and Until move only messages sent (their SentTimestamp: when
	// they entered the source queue) at or after Since and before Until.
	// Zero: no bound.
	Since, Until time.Time
	// ReasonGroup moves only messages whose SqsonceReason is of that
	// group (ledger.ReasonGroup); NoReasonGroup selects those without
	// one (SQS moved them after too many receives). "": every message.
	ReasonGroup string
	// State moves only messages whose operation's record is in that
	// state; keyless messages and those without a record never match.
	// 0: any.
	State ledger.State

	DropComplete   bool // delete messages whose operation is complete instead of leaving them
	IncludeKeyless bool // move messages without an operation key as they are
	// DryRun decides and counts as usual but sends, deletes and resets
	// nothing; every message received is made visible again at the end.
	DryRun bool

	// Hold is how long received messages stay invisible while the run
	// lasts (rounded up to whole seconds): longer than the run, 1s to 12h.
	Hold time.Duration
	// Concurrency is how many movers work at once, each receiving, sending
	// and deleting up to ten messages at a time: 1 to 64.
	Concurrency int

	// Observe, when set, is told of each message received as it is
	// decided, before it is moved: a console shows a dry run's sample
	// with it. It is called from several goroutines at once and must be
	// quick.
	Observe func(Decision)

	Logger *slog.Logger // nil: slog.Default()
}

// Decision is what a run decided for one message.
type Decision struct {
	MessageID string
	Key       string // "" for a message without a key
	Action    Action
	// Why says why a message is left in the source; empty otherwise.
	Why string
}

// Action is what becomes of a message.
type Action string

// The actions of a Decision.
const (
	ActionMove  Action = "move"  // sent to the target, then deleted from the source
	ActionDrop  Action = "drop"  // deleted from the source: its operation is complete (DropComplete)
	ActionLeave Action = "leave" // left in the source
)

// NoReasonGroup is Config.ReasonGroup for the messages without a
// SqsonceReason.
const NoReasonGroup = "(none)"

// FilteredHold is how long a message that the filters leave stays out of
// sight after the run received it: it is made visible again at once but
// for this while, in which the run goes on to the messages it has not
// seen, and everyone else sees it again within it.
const FilteredHold = 5 * time.Second

// Defaults of DefaultConfig.
const (
	DefaultMaxReplays  = 3
	DefaultHold        = 5 * time.Minute
	DefaultConcurrency = 8
)

// DefaultConfig returns a Config with the defaults set: no limit on the
// number or rate of moves, MaxReplays 3, Hold 5 minutes, Concurrency 8.
// From, To, ToFIFO and KeyOf are for the caller to set.
func DefaultConfig() Config {
	return Config{MaxReplays: DefaultMaxReplays, Hold: DefaultHold, Concurrency: DefaultConcurrency}
}

// ErrInvalidConfig is wrapped by every configuration error of New and
// Config.Validate.
var ErrInvalidConfig = errors.New("invalid replay configuration")

// A FieldError says what is wrong with one field of a Config. It wraps
// ErrInvalidConfig.
type FieldError struct {
	Field   string // the field as Config names it, such as "Hold"
	Problem string // what is wrong, starting with the value: "0s: want 1s to 12h"
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

// Validate checks every field of c and returns nil, or one *FieldError per
// field that is wrong, joined with errors.Join. New calls it; call it
// beforehand to check settings before anything else is done with them.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if c.From == "" {
		bad("From", "is empty: want the source queue's URL")
	}
	if c.To == "" {
		bad("To", "is empty: want the target queue's URL")
	}
	if c.From != "" && c.From == c.To {
		bad("From", "%s: the same queue as the target", c.From)
	}
	if c.KeyOf == nil {
		bad("KeyOf", "is nil: want the worker's key derivation (worker.MessageKeyFunc)")
	}
	if c.Max < 0 {
		bad("Max", "%d: want 0 (no limit) or more", c.Max)
	}
	if c.MaxReplays < 1 {
		bad("MaxReplays", "%d: want 1 or more", c.MaxReplays)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) {
		bad("Rate", "%v: want 0 (no limit) or more", c.Rate)
	}
	if c.KeyGlob != "" {
		if _, err := path.Match(c.KeyGlob, ""); err != nil {
			bad("KeyGlob", "%q: %v", c.KeyGlob, err)
		}
	}
	if c.State != 0 && c.State.String() == fmt.Sprintf("state(%d)", uint8(c.State)) {
		bad("State", "%d: want in_progress, complete, failed or 0 (any)", c.State)
	}
	if len(c.ReasonGroup) > ledger.MaxErrorLen {
		bad("ReasonGroup", "of %d bytes: want at most %d", len(c.ReasonGroup), ledger.MaxErrorLen)
	}
	if !c.Since.IsZero() && !c.Until.IsZero() && !c.Since.Before(c.Until) {
		bad("Since", "%s: not before the end of the window, %s", c.Since.Format(time.RFC3339), c.Until.Format(time.RFC3339))
	}
	if c.Hold < time.Second || c.Hold > maxHold {
		bad("Hold", "%v: want 1s to 12h", c.Hold)
	}
	if c.Concurrency < 1 || c.Concurrency > 64 {
		bad("Concurrency", "%d: want 1 to 64", c.Concurrency)
	}
	return errors.Join(errs...)
}
