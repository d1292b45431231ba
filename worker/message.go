package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is one delivery handed to a Handler. The Handler may set Result;
// everything else is read-only.
type Message struct {
	Key string // the operation key, with its prefix
	// Body is the message's payload: the Message of an SNS envelope when
	// KeyConfig.SNS is on, else the body as received; and when that is a
	// pointer to an S3 object (see Config.S3), the object's bytes. With
	// Config.Body BodyAsReceived it is always the body as received.
	Body            []byte
	MessageID       string // SQS message id of this delivery
	QueueURL        string
	Attempt         int // this operation's attempt number in the ledger, from 1
	ReceiveCount    int // SQS ApproximateReceiveCount of this message
	GroupID         string
	DeduplicationID string
	SentAt          time.Time
	// Attributes holds the message attributes that have a string value
	// (String and Number ones), and with KeyConfig.SNS those of the SNS
	// envelope's MessageAttributes too; the message's own win on a name
	// given in both.
	Attributes map[string]string
	// Owner is this attempt's owner token in the ledger: the claim the
	// worker holds for the operation. A handler that records the
	// completion itself, in the transaction of its own writes (package
	// pgtx), names it; after a takeover it is no longer the record's
	// owner, and that completion fails.
	Owner string
	// TraceParent and TraceState are the W3C trace context the work
	// continues: the context of the attempt's span when the worker records
	// one (Config.TracerProvider), else the producer's as the message
	// carried it (its traceparent and tracestate attributes, or its
	// AWSTraceHeader converted), else empty. Either is written anew from
	// what was parsed and checked: a version 00 traceparent (of a later
	// version only the fields version 00 has), a tracestate of valid
	// members, never a control character. The handler's context carries
	// the same (trace.SpanContextFromContext).
	TraceParent string
	TraceState  string

	// Result is stored with the completed operation (cut to 4 KiB) and
	// shown for its duplicates.
	Result []byte
}

// Handler runs the work of one operation. It returns nil when the work is
// done, and only then: a nil return lets the worker record the operation
// complete and delete the message. An error leaves the message to be
// retried; wrap it with Permanent to send the message to the dead-letter
// queue instead, or with RetryAfter to choose the back-off.
//
// Handle is called concurrently, up to the configured concurrency. Its
// context ends when the handler timeout passes, when the shutdown grace
// runs out, or when the worker loses the operation's lease. It carries the
// trace context of Message.TraceParent, when there is one: the attempt's
// span when one is recorded (trace.SpanFromContext), else the producer's
// as a remote span context (trace.SpanContextFromContext).
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// PermanentError marks a failure that retrying cannot fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + errString(e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a permanent failure: the operation is recorded as
// failed permanently and its message goes to the dead-letter queue at once.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}

// RetryError asks for the next attempt after a given delay.
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("retry after %v: %s", e.After, errString(e.Err))
}
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter marks err as retryable after d instead of the configured
// back-off (bounded by SQS's 12-hour visibility limit).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryError{After: d, Err: err}
}

// UnavailableError says that what the handler calls is down, not that
// its message is at fault: the failures that flow control counts towards
// pausing the intake (see FlowConfig). The message is retried like any
// retryable failure; After, when not zero, is when the downstream said to
// come back (its Retry-After), which sets the first probe's delay.
type UnavailableError struct {
	After time.Duration
	Err   error
}

func (e *UnavailableError) Error() string { return "unavailable: " + errString(e.Err) }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable marks err as the downstream being down, d (zero: unknown)
// the time it asked for before the next call. The message's own back-off
// is unchanged: wrap the result with RetryAfter to set that too. The http
// handler returns it for 408, 429 and 5xx answers, for requests that got
// no answer and for those cut off by the handler's timeout.
func Unavailable(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("downstream unavailable")
	}
	return &UnavailableError{After: max(d, 0), Err: err}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
