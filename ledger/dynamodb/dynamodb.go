package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsonce/sqsonce/ledger"
)

// SchemaVersion is the schema this code writes and reads: the table's key
// schema and the layout of its items. Open refuses a table whose schema
// item records a higher version, with ErrSchema.
const SchemaVersion = 1

// Defaults of Options.
const (
	DefaultTable       = "sqsonce_operations"
	DefaultConcurrency = 10
	DefaultTimeout     = 10 * time.Second
	// MaxConcurrency bounds Options.Concurrency, and so the number of
	// requests one call has in flight and the segments of a parallel scan.
	MaxConcurrency = 100
)

// Client is the part of the DynamoDB API the ledger uses. *dynamodb.Client
// of the AWS SDK implements it. Open needs every method but CreateTable,
// DescribeTimeToLive and UpdateTimeToLive, which only Init calls.
type Client interface {
	GetItem(ctx context.Context, in *ddb.GetItemInput, optFns ...func(*ddb.Options)) (*ddb.GetItemOutput, error)
	PutItem(ctx context.Context, in *ddb.PutItemInput, optFns ...func(*ddb.Options)) (*ddb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *ddb.UpdateItemInput, optFns ...func(*ddb.Options)) (*ddb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *ddb.DeleteItemInput, optFns ...func(*ddb.Options)) (*ddb.DeleteItemOutput, error)
	Scan(ctx context.Context, in *ddb.ScanInput, optFns ...func(*ddb.Options)) (*ddb.ScanOutput, error)
	DescribeTable(ctx context.Context, in *ddb.DescribeTableInput, optFns ...func(*ddb.Options)) (*ddb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *ddb.CreateTableInput, optFns ...func(*ddb.Options)) (*ddb.CreateTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *ddb.DescribeTimeToLiveInput, optFns ...func(*ddb.Options)) (*ddb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *ddb.UpdateTimeToLiveInput, optFns ...func(*ddb.Options)) (*ddb.UpdateTimeToLiveOutput, error)
}

var _ Client = (*ddb.Client)(nil)

// Options configure Open and Init. The zero value of each field picks its
// default; Open and Init validate them once.
type Options struct {
	// Table is the table's name; DefaultTable when empty. Every host of
	// one queue must name the same table.
	Table string
	// Retention is how long a record is kept after its last write: zero
	// picks ledger.DefaultRetention, and it may not exceed
	// ledger.MaxRetention. Every host should use the same retention.
	Retention time.Duration
	// Now is this host's clock; time.Now when nil. DynamoDB has no clock
	// of its own for conditions: leases and expiries are compared with the
	// clock of the host that writes. See the package documentation on
	// clock skew.
	Now func() time.Time
	// Concurrency bounds the requests one call has in flight: the claims
	// and completions of a batch run in parallel, and Stats and Sweep scan
	// in this many segments. Zero picks DefaultConcurrency; at most
	// MaxConcurrency.
	Concurrency int
	// Timeout bounds each request to DynamoDB, the SDK's retries included;
	// zero picks DefaultTimeout. A request that runs out of it fails with
	// an error wrapping ledger.ErrUnavailable (its write may still have
	// taken effect; see the package documentation on lost answers). The
	// caller's context can end it sooner.
	Timeout time.Duration
}

var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// CheckTable reports whether name can be a DynamoDB table's name
// (Options.Table): 3 to 255 of a-z, A-Z, 0-9, '_', '-' and '.'. The error
// wraps ledger.ErrInvalidArgument.
func CheckTable(name string) error {
	if !tableName.MatchString(name) {
		return fmt.Errorf("table name %q: want 3 to 255 of a-z, A-Z, 0-9, '_', '-', '.': %w", name, ledger.ErrInvalidArgument)
	}
	return nil
}

// resolve fills the defaults of o and validates it.
func (o Options) resolve() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := CheckTable(o.Table); err != nil {
		return o, fmt.Errorf("dynamodb ledger: %w", err)
	}
	if o.Retention < 0 {
		return o, fmt.Errorf("dynamodb ledger: negative retention %v: %w", o.Retention, ledger.ErrInvalidArgument)
	}
	if o.Retention == 0 {
		o.Retention = ledger.DefaultRetention
	}
	if o.Retention > ledger.MaxRetention {
		return o, fmt.Errorf("dynamodb ledger: retention %v is longer than %v: %w", o.Retention, ledger.MaxRetention, ledger.ErrInvalidArgument)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Concurrency < 0 || o.Concurrency > MaxConcurrency {
		return o, fmt.Errorf("dynamodb ledger: concurrency %d, want 1 to %d (0 for %d): %w", o.Concurrency, MaxConcurrency, DefaultConcurrency, ledger.ErrInvalidArgument)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("dynamodb ledger: negative timeout %v: %w", o.Timeout, ledger.ErrInvalidArgument)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o, nil
}

// Ledger is a ledger on a DynamoDB table, shared by every process that opens
// the same table. It is safe for concurrent use by many goroutines. It holds
// no goroutine and no connection of its own: the client does.
type Ledger struct {
	client      Client
	table       *string
	retention   time.Duration
	now         func() time.Time
	concurrency int
	timeout     time.Duration

	mu     sync.RWMutex // guards closed and calls.Add
	closed bool
	calls  sync.WaitGroup

	flow flowState // see flow.go
	// minutes gathers the completions and failures per minute that this
	// process recorded, written every ledger.MinuteFlush (see story.go).
	minutes ledger.MinuteTally
}

// Open opens the ledger on the table that opts name, which Init must have
// created. It fails with an error wrapping ledger.ErrNoSchema (naming
// `sqsonce ledger init`) when the table or its schema item is missing,
// ledger.ErrSchema when the schema item records a newer version,
// ledger.ErrCorrupt when the table has another key schema, and
// ledger.ErrUnavailable when DynamoDB does not answer within opts.Timeout
// per request. The client stays the caller's: Close does not close it.
func Open(ctx context.Context, client Client, opts Options) (*Ledger, error) {
	if client == nil {
		return nil, fmt.Errorf("dynamodb ledger: nil client: %w", ledger.ErrInvalidArgument)
	}
	opts, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	l := &Ledger{
		client:      client,
		table:       aws.String(opts.Table),
		retention:   opts.Retention,
		now:         opts.Now,
		concurrency: opts.Concurrency,
		timeout:     opts.Timeout,
	}
	if err := l.check(ctx); err != nil {
		return nil, fmt.Errorf("open dynamodb ledger: %w", err)
	}
	if err := l.checkFlowSchema(ctx); err != nil {
		return nil, fmt.Errorf("open dynamodb ledger: %w", err)
	}
	return l, nil
}

// check verifies that the table is active, has the ledger's key schema and
// a schema item of a version this code reads.
func (l *Ledger) check(ctx context.Context) error {
	var out *ddb.DescribeTableOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: l.table})
		return err
	})
	if err != nil {
		return err
	}
	if err := checkTable(out.Table, *l.table); err != nil {
		return err
	}
	item, err := l.getItem(ctx, schemaKey)
	if err != nil {
		return err
	}
	if item == nil {
		return fmt.Errorf("table %s has no schema item (an interrupted init?): run `sqsonce ledger init`: %w", *l.table, ledger.ErrNoSchema)
	}
	return checkSchema(item, *l.table)
}

// checkTable verifies a table's status and key schema.
func checkTable(t *types.TableDescription, name string) error {
	if t == nil {
		return fmt.Errorf("table %s: no description: %w", name, ledger.ErrUnavailable)
	}
	switch t.TableStatus {
	case types.TableStatusActive, types.TableStatusUpdating:
	case types.TableStatusCreating:
		return fmt.Errorf("table %s is still being created: %w", name, ledger.ErrUnavailable)
	default:
		return fmt.Errorf("table %s is %s: %w", name, t.TableStatus, ledger.ErrUnavailable)
	}
	if len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != attrPK || t.KeySchema[0].KeyType != types.KeyTypeHash {
		return fmt.Errorf("table %s does not have the key schema of a sqsonce ledger (a partition key %q of type S alone): not a ledger table: %w",
			name, attrPK, ledger.ErrCorrupt)
	}
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == attrPK && a.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("table %s: partition key %q of type %s, want S: not a ledger table: %w", name, attrPK, a.AttributeType, ledger.ErrCorrupt)
		}
	}
	return nil
}

// checkSchema reads the schema item's version.
func checkSchema(item map[string]types.AttributeValue, table string) error {
	d := decoder{item: item}
	v := d.int(attrSchemaVersion, true, 1<<31)
	if d.err != "" {
		return fmt.Errorf("table %s: schema item unreadable: %s: %w", table, d.err, ledger.ErrCorrupt)
	}
	if v > SchemaVersion {
		return fmt.Errorf("table %s has schema %d, this sqsonce reads up to %d: upgrade sqsonce: %w", table, v, SchemaVersion, ledger.ErrSchema)
	}
	return nil
}

// Close ends the ledger's use of the table: it waits for calls in flight to
// finish, and later calls fail with ledger.ErrClosed. It does not close the
// client. Close is safe to call more than once.
func (l *Ledger) Close() error {
	if l.enter() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		l.flushMinutes(ctx) // the counts this process gathered
		cancel()
		l.calls.Done()
	}
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.calls.Wait()
	return nil
}

// enter registers a call in flight, or fails when the ledger is closed.
// The call must end with l.calls.Done.
func (l *Ledger) enter() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ledger.ErrClosed
	}
	l.calls.Add(1)
	return nil
}

// call runs one request with the ledger's timeout and classifies its
// error (see classify).
func (l *Ledger) call(ctx context.Context, fn func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return classify(ctx, cctx, fn(cctx), l.timeout, *l.table)
}

// classify turns a request's error into the ledger's: a failed condition
// stays as it is (callers look for it); the caller's context ending wraps
// the context's error; a missing table wraps ErrNoSchema; no answer within
// the timeout, throttling that the SDK gave up on, connection errors and
// server errors wrap ErrUnavailable.
func classify(ctx, cctx context.Context, err error, timeout time.Duration, table string) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	case cctx.Err() != nil:
		return fmt.Errorf("no answer from DynamoDB within %v: %w: %w", timeout, ledger.ErrUnavailable, err)
	}
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return fmt.Errorf("table %s does not exist: run `sqsonce ledger init`: %w: %w", table, ledger.ErrNoSchema, err)
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
	}
	return err
}

// unavailableCodes are error codes, beyond the SDK's throttling codes, that
// say the service could not do the request now.
var unavailableCodes = map[string]bool{
	"InternalServerError":              true,
	"InternalFailure":                  true,
	"ServiceUnavailable":               true,
	"RequestTimeout":                   true,
	"RequestTimeoutException":          true,
	"TransactionConflictException":     true,
	"ReplicatedWriteConflictException": true,
}

// unavailable reports whether err says the store could not be reached or
// could not do the request now, rather than that the request was wrong.
func unavailable(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code := apiErr.ErrorCode()
		if _, ok := retry.DefaultThrottleErrorCodes[code]; ok || unavailableCodes[code] {
			return true
		}
	}
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) && respErr.HTTPStatusCode() >= 500 {
		return true
	}
	var sendErr *smithyhttp.RequestSendError
	var deserErr *smithy.DeserializationError
	if errors.As(err, &sendErr) || errors.As(err, &deserErr) {
		return true
	}
	return retry.RetryableConnectionError{}.IsErrorRetryable(err) == aws.TrueTernary
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// getItem reads the item under pk with a strongly consistent read; nil when
// there is none.
func (l *Ledger) getItem(ctx context.Context, pk string) (map[string]types.AttributeValue, error) {
	var out *ddb.GetItemOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.GetItem(ctx, &ddb.GetItemInput{
			TableName:      l.table,
			Key:            map[string]types.AttributeValue{attrPK: strAV(pk)},
			ConsistentRead: aws.Bool(true),
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// read returns the record of key as stored, expired or not, or nil when
// there is none. An item that cannot be decoded is an *unreadableError.
func (l *Ledger) read(ctx context.Context, key string) (*ledger.Record, error) {
	item, err := l.getItem(ctx, pkOf(key))
	if err != nil || item == nil {
		return nil, err
	}
	rec, err := recordOf(item)
	if err != nil {
		return nil, err
	}
	storyOf(item, &rec)
	return &rec, nil
}

// live is read with an expired record treated as absent.
func (l *Ledger) live(ctx context.Context, key string, now time.Time) (*ledger.Record, error) {
	rec, err := l.read(ctx, key)
	if err != nil || rec == nil {
		return nil, err
	}
	if !rec.Expires.After(now) {
		return nil, nil
	}
	return rec, nil
}

func isUnreadable(err error) bool {
	var u *unreadableError
	return errors.As(err, &u)
}

// stamp sets what every write sets: the time of the write and the expiry.
func (l *Ledger) stamp(rec *ledger.Record, now time.Time) {
	rec.Updated = now
	rec.Expires = now.Add(l.retention)
}

// stampSet adds the clauses that stamp a write to u: updated, expires, ttl
// and the write id.
func (l *Ledger) stampSet(e *expr, u *update, now time.Time, writeID string) {
	exp := now.Add(l.retention)
	u.set = append(u.set,
		e.n(attrUpdated)+" = "+e.v("now", timeAV(now)),
		e.n(attrExpires)+" = "+e.v("exp", timeAV(exp)),
		e.n(attrTTL)+" = "+e.v("ttl", intAV(ttlSeconds(exp))),
		e.n(attrWriteID)+" = "+e.v("wid", strAV(writeID)),
	)
}

// checkLease refuses a lease longer than the retention: the in-progress
// record would expire while its owner still holds the lease and runs the
// work.
func (l *Ledger) checkLease(op, key string, lease time.Duration) error {
	if lease > l.retention {
		return fmt.Errorf("%s %q: lease %v is longer than the ledger's retention %v: the record would expire while the work runs: %w",
			op, key, lease, l.retention, ledger.ErrInvalidArgument)
	}
	return nil
}

// maxTries bounds how often one call writes again because the item changed
// between its conditional write and the read that followed.
const maxTries = 10

// errContended is the error of a call that gave up after maxTries.
func errContended(op, key string) error {
	return fmt.Errorf("%s %q: the item changed under %d conditional writes in a row: %w", op, key, maxTries, ledger.ErrUnavailable)
}
