package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// Payloads in S3.
//
// The Amazon SQS Extended Client libraries (Java, Python and others) put a
// body that is too large for SQS into an S3 object and send, in its place,
// a pointer to it:
//
//	["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"}]
//
// with the message attribute ExtendedPayloadSize (older clients:
// SQSLargePayloadSize) holding the payload's size. With Config.S3 set, the
// worker reads such a message's object and uses it for everything a body is
// used for: the operation key, the payload fingerprint and the handler's
// Message.Body. See the Amazon SQS Extended Client Library for Java,
// https://github.com/awslabs/amazon-sqs-java-extended-client-lib, and its
// payload-offloading library for the format.

// S3Client is the part of the S3 API the worker calls to read payloads kept
// in S3 (and, with Config.DeleteObjects, to delete them). *s3.Client
// implements it. Reading needs only the s3:GetObject permission.
type S3Client interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// The Extended Client's names.
const (
	// S3PointerClass is the first element of a pointer body.
	S3PointerClass = "software.amazon.payloadoffloading.PayloadS3Pointer"
	// AttrExtendedPayloadSize is the message attribute (Number) that marks
	// a pointer body and holds the payload's size in bytes.
	AttrExtendedPayloadSize = "ExtendedPayloadSize"
	// AttrLegacyPayloadSize is the attribute older Extended Clients set
	// instead of AttrExtendedPayloadSize.
	AttrLegacyPayloadSize = "SQSLargePayloadSize"
)

// Limits of Config.MaxPayload.
const (
	DefaultMaxPayload int64 = 64 << 20
	// MaxMaxPayload is the Extended Client's own limit of 2 GB.
	MaxMaxPayload int64 = 2 << 30
)

// S3Pointer names the S3 object that holds a message's payload.
type S3Pointer struct {
	Bucket string `json:"s3BucketName"`
	Key    string `json:"s3Key"`
}

func (p S3Pointer) String() string { return "s3://" + p.Bucket + "/" + p.Key }

// Body returns the pointer body the Extended Client sends for p. It is sent
// with AttrExtendedPayloadSize set to the payload's size.
func (p S3Pointer) Body() string {
	b, _ := json.Marshal([]any{S3PointerClass, p})
	return string(b)
}

// HasPayloadSize reports whether attrs mark the body as a pointer to a
// payload in S3: AttrExtendedPayloadSize or AttrLegacyPayloadSize is
// present. Without either, a body is never taken for a pointer.
func HasPayloadSize(attrs map[string]types.MessageAttributeValue) bool {
	return sizeAttribute(attrs) != ""
}

// sizeAttribute is the name of the attribute that marks attrs' body as a
// pointer (AttrExtendedPayloadSize before AttrLegacyPayloadSize); "" when
// neither is present.
func sizeAttribute(attrs map[string]types.MessageAttributeValue) string {
	for _, name := range []string{AttrExtendedPayloadSize, AttrLegacyPayloadSize} {
		if _, ok := attrs[name]; ok {
			return name
		}
	}
	return ""
}

// ParseS3Pointer reads body as a pointer: exactly a two-element JSON array
// of S3PointerClass and an object with a non-empty s3BucketName and s3Key.
// Its error says what the body lacks.
func ParseS3Pointer(body []byte) (S3Pointer, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(body, &parts); err != nil {
		return S3Pointer{}, errors.New("the body is not a JSON array")
	}
	if len(parts) != 2 {
		return S3Pointer{}, fmt.Errorf("the body is an array of %d elements, not 2", len(parts))
	}
	var class string
	if err := json.Unmarshal(parts[0], &class); err != nil || class != S3PointerClass {
		return S3Pointer{}, fmt.Errorf("the body's first element is not %q", S3PointerClass)
	}
	var p S3Pointer
	if !bytes.HasPrefix(bytes.TrimSpace(parts[1]), []byte("{")) || json.Unmarshal(parts[1], &p) != nil {
		return S3Pointer{}, errors.New("the body's second element is not an object of s3BucketName and s3Key")
	}
	switch {
	case p.Bucket == "":
		return S3Pointer{}, errors.New("the pointer has no s3BucketName")
	case p.Key == "":
		return S3Pointer{}, errors.New("the pointer has no s3Key")
	}
	return p, nil
}

// AnyBucket, alone in Config.Buckets, allows every bucket.
const AnyBucket = "*"

// CheckBuckets reports whether buckets can be Config.Buckets: bucket
// names, or AnyBucket alone.
func CheckBuckets(buckets []string) error {
	for _, b := range buckets {
		switch {
		case b == "":
			return errors.New("a bucket name is empty")
		case b == AnyBucket && len(buckets) > 1:
			return fmt.Errorf("%q allows every bucket and stands alone", AnyBucket)
		case strings.ContainsAny(b, "/ \t\r\n"):
			return fmt.Errorf("%q is not a bucket name", b)
		}
	}
	return nil
}

// bucketAllowed reports whether buckets (Config.Buckets) let a payload be
// read from bucket.
func bucketAllowed(buckets []string, bucket string) bool {
	return slices.Contains(buckets, bucket) || slices.Equal(buckets, []string{AnyBucket})
}

// notAllowed is the failure of a pointer to a bucket that payloads are not
// read from: permanent, its object neither read nor deleted.
func notAllowed(p S3Pointer) *payloadError {
	return &payloadError{permanent: true, err: fmt.Errorf("payload %s: the bucket %q is not one that payloads are read from: not read", p, p.Bucket)}
}

// payloadError is a payload that could not be read. A permanent one (no
// such object or bucket, access denied, too large, a malformed pointer)
// cannot be read by trying again: its message is dead-lettered. Another
// (a timeout, throttling, S3's 5xx) is retried after a back-off.
type payloadError struct {
	permanent bool
	err       error
}

func (e *payloadError) Error() string { return e.err.Error() }
func (e *payloadError) Unwrap() error { return e.err }

// readS3Payload reads the object p names, at most max bytes: a larger one
// is a permanent failure naming its size and the limit. It reads at most
// max+1 bytes, whatever the object's announced length.
func readS3Payload(ctx context.Context, c S3Client, p S3Pointer, max int64) ([]byte, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &p.Bucket, Key: &p.Key})
	if err != nil {
		return nil, classifyS3(p, err)
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > max {
		return nil, tooLarge(p, strconv.FormatInt(n, 10), max)
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, max+1))
	if err != nil {
		return nil, &payloadError{err: fmt.Errorf("read payload %s: %w", p, err)}
	}
	if int64(len(b)) > max {
		return nil, tooLarge(p, "more than "+strconv.FormatInt(max, 10), max)
	}
	return b, nil
}

func tooLarge(p S3Pointer, size string, max int64) error {
	return &payloadError{permanent: true, err: fmt.Errorf("payload %s is %s bytes, more than the limit of %d bytes", p, size, max)}
}

// classifyS3 tells a GetObject error that asking again cannot change (the
// object or bucket is not there, access is denied) from one that may pass.
func classifyS3(p S3Pointer, err error) error {
	var noKey *s3types.NoSuchKey
	var noBucket *s3types.NoSuchBucket
	var status interface{ HTTPStatusCode() int }
	var api smithy.APIError
	code := 0
	if errors.As(err, &status) {
		code = status.HTTPStatusCode()
	}
	switch {
	case errors.As(err, &noKey), errors.As(err, &api) && api.ErrorCode() == "NoSuchKey":
		return &payloadError{permanent: true, err: fmt.Errorf("payload %s is gone: no such key (deleted, expired, or never written): %w", p, err)}
	case errors.As(err, &noBucket), errors.As(err, &api) && api.ErrorCode() == "NoSuchBucket":
		return &payloadError{permanent: true, err: fmt.Errorf("payload %s is gone: no such bucket: %w", p, err)}
	case code == http.StatusNotFound:
		return &payloadError{permanent: true, err: fmt.Errorf("payload %s is gone (404): %w", p, err)}
	case code == http.StatusForbidden:
		return &payloadError{permanent: true, err: fmt.Errorf("payload %s: access denied (403): s3:GetObject on the bucket is needed: %w", p, err)}
	}
	return &payloadError{err: fmt.Errorf("read payload %s: %w", p, err)}
}

// readPayloads reads from S3 the payload of each job whose message points
// there (Config.S3 set, the size attribute present in the message's or the
// SNS envelope's attributes, the body or the envelope's Message a pointer):
// the object becomes the job's payload. They are read together, one
// request per pointer (at most a receive's ten), all bounded by half the
// visibility timeout and at most a minute, before the batch's claims. A
// job whose payload cannot be read gets payloadErr and is not claimed.
func (w *Worker) readPayloads(ctx context.Context, all []*job) {
	if w.cfg.S3 == nil {
		return
	}
	var todo []*job
	for _, j := range all {
		if j.opened.err != nil || !HasPayloadSize(j.opened.attrs) {
			continue
		}
		p, err := ParseS3Pointer(j.opened.payload)
		if err != nil {
			j.payloadErr = &payloadError{permanent: true, err: fmt.Errorf("the message has the %s attribute but no S3 pointer: %v", sizeAttribute(j.opened.attrs), err)}
			continue
		}
		if !bucketAllowed(w.cfg.Buckets, p.Bucket) {
			// No pointer is kept, so no object is deleted either.
			j.payloadErr = notAllowed(p)
			continue
		}
		j.pointer = &p
		todo = append(todo, j)
	}
	if len(todo) == 0 {
		return
	}
	// Half the visibility timeout, so that the messages are still out of
	// sight when their claims are written, and at most a minute.
	rctx, cancel := context.WithTimeout(ctx, min(w.cfg.VisibilityTimeout/2, time.Minute))
	defer cancel()
	var reads sync.WaitGroup
	for _, j := range todo {
		reads.Go(func() {
			b, err := readS3Payload(rctx, w.cfg.S3, *j.pointer, w.cfg.MaxPayload)
			if err != nil {
				if !errors.As(err, &j.payloadErr) {
					j.payloadErr = &payloadError{err: err}
				}
				return
			}
			w.stats.payloadsRead.Add(1)
			j.opened.payload = b
		})
	}
	reads.Wait()
}

// payloadFailed settles a message whose payload could not be read, before
// any claim: a permanent failure goes to the dead-letter queue with the
// reason, another comes back after the back-off of its receive count. It
// returns the message's end.
func (w *Worker) payloadFailed(j *job, log *jobLog) state {
	err := j.payloadErr
	if err.permanent {
		w.stats.payloadsRejected.Add(1)
		log.Warn("the message's payload in S3 cannot be read: rejected", "reason", err)
		return w.deadLetter(j, "payload unreadable: "+err.Error(), log)
	}
	w.stats.payloadsRetried.Add(1)
	wait := backoff(max(j.receives, 1), w.cfg.MinBackoff, w.cfg.MaxBackoff)
	log.Warn("the message's payload in S3 could not be read: will retry", "error", err, "retry_in", wait)
	w.comeBack(j, givenBack, wait)
	return givenBack
}

// afterDelete is what to do once j's message is deleted with its operation
// complete: with Config.DeleteObjects, delete its payload's object; nil
// otherwise. A failed object delete is logged and leaves the object.
func (w *Worker) afterDelete(j *job, log *jobLog) func() {
	if !w.cfg.DeleteObjects || j.pointer == nil {
		return nil
	}
	p, l := *j.pointer, *log
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), sqsCallTimeout)
		defer cancel()
		if _, err := w.cfg.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &p.Bucket, Key: &p.Key}); err != nil {
			w.stats.objectDeleteFailed.Add(1)
			l.Warn("could not delete the payload's S3 object: it stays", "object", p.String(), "error", err)
			return
		}
		w.stats.objectsDeleted.Add(1)
		l.Debug("deleted the payload's S3 object", "object", p.String())
	}
}

// MessageKeyFuncS3 is MessageKeyFuncS3Buckets reading from any bucket a
// pointer names.
func MessageKeyFuncS3(cfg KeyConfig, c S3Client, maxPayload int64) (func(m types.Message) (key string, fingerprint []byte, err error), error) {
	return MessageKeyFuncS3Buckets(cfg, c, maxPayload, []string{AnyBucket})
}

// MessageKeyFuncS3Buckets is MessageKeyFunc for messages that may point to
// their payload in S3, derived as a worker with Config.S3 and
// Config.Buckets derives them: from the object, read through c (at most
// maxPayload bytes; 0 means DefaultMaxPayload) when buckets allows its
// bucket (as Config.Buckets does). A payload that cannot be read, or is
// in a bucket not allowed, gives an error that wraps ErrNoKey and says
// why. Each call that meets a pointer reads its object, bounded by a
// minute. A nil c reads no object: pointers are keyed as the bodies they
// are. It is safe for concurrent use.
func MessageKeyFuncS3Buckets(cfg KeyConfig, c S3Client, maxPayload int64, buckets []string) (func(m types.Message) (key string, fingerprint []byte, err error), error) {
	if maxPayload == 0 {
		maxPayload = DefaultMaxPayload
	}
	if err := CheckBuckets(buckets); err != nil {
		return nil, fmt.Errorf("buckets: %w", err)
	}
	buckets = slices.Clone(buckets)
	k, err := newKeyer(cfg)
	if err != nil {
		return nil, err
	}
	return func(m types.Message) (string, []byte, error) {
		o := k.open([]byte(aws.ToString(m.Body)), m.MessageAttributes)
		if c != nil && o.err == nil && HasPayloadSize(o.attrs) {
			p, err := ParseS3Pointer(o.payload)
			if err != nil {
				return "", nil, fmt.Errorf("%w: the message has the %s attribute but no S3 pointer: %v", ErrNoKey, sizeAttribute(o.attrs), err)
			}
			if !bucketAllowed(buckets, p.Bucket) {
				return "", nil, fmt.Errorf("%w: payload unreadable: %v", ErrNoKey, notAllowed(p))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b, err := readS3Payload(ctx, c, p, maxPayload)
			if err != nil {
				return "", nil, fmt.Errorf("%w: payload unreadable: %v", ErrNoKey, err)
			}
			o.payload = b
		}
		d, err := k.deriveOpened(o, m.Attributes)
		return d.key, d.fingerprint, err
	}, nil
}
