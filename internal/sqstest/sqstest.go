package sqstest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqsclient"
)

// EndpointEnv names the environment variable holding the base URL of the
// local SQS-compatible server, e.g. "http://127.0.0.1:4566".
const EndpointEnv = "SQSONCE_TEST_SQS_ENDPOINT"

// Region is the AWS region clients from [NewClient] use.
const Region = "us-east-1"

// HTTPTimeout bounds every HTTP exchange of a client from [NewClient],
// including long polls (at most 20 s in SQS), so that a stuck request cannot
// hang a test.
const HTTPTimeout = 30 * time.Second

// opTimeout bounds each SQS call the helpers of this package make.
const opTimeout = 15 * time.Second

// ServerEnv names the environment variable that says which implementation
// of SQS answers at [EndpointEnv]: [Fauxqs] (also when it is unset) or
// [Moto]. scripts/with-sqs.sh and scripts/with-moto.sh set it.
const ServerEnv = "SQSONCE_TEST_SQS_SERVER"

// The implementations of SQS that the tests run against; see [Server].
const (
	// Fauxqs is fauxqs from the npm registry, as scripts/sqs/server.mjs
	// runs it: the server of `make test`.
	Fauxqs = "fauxqs"
	// Moto is Python moto, as scripts/moto/server.py runs it: the second
	// implementation of `make interop`. It serves SNS and S3 on the same
	// endpoint too.
	Moto = "moto"
)

// server is the local SQS-compatible server, found through [EndpointEnv].
var server = loopback.Server{
	Env:     EndpointEnv,
	Name:    "the local SQS-compatible server",
	Script:  "scripts/with-sqs.sh",
	Example: "http://127.0.0.1:4566",
	ImplEnv: ServerEnv,
	Impls:   []string{Fauxqs, Moto},
}

// Server returns which implementation of SQS answers at [Endpoint], from
// [ServerEnv]: [Fauxqs] or [Moto]. Tests that pin down where a server
// differs from Amazon SQS ask it; code that works on any server that
// behaves as SQS documents has no need to. An unknown value fails the test.
func Server(t testing.TB) string {
	t.Helper()
	return server.Impl(t)
}

// Endpoint returns the base URL of the local SQS-compatible server from
// [EndpointEnv]. If the variable is unset or empty, or does not name an
// http URL on a loopback address, Endpoint fails the test with t.Fatal; it
// never skips.
func Endpoint(t testing.TB) string {
	t.Helper()
	return server.Endpoint(t)
}

// NewClient returns an SQS client for the server at [Endpoint]: region
// [Region], static credentials "test"/"test", BaseEndpoint set to the
// server, the SDK's default retryer, and an HTTP client with [HTTPTimeout].
// If rt is non-nil it carries the requests (e.g. a [*Faults]); otherwise a
// clone of [http.DefaultTransport] without proxy does. Idle connections are
// closed when the test ends. optFns adjust the options last, e.g.
// func(o *sqs.Options) { o.RetryMaxAttempts = 1 } to disable retries.
func NewClient(t testing.TB, rt http.RoundTripper, optFns ...func(*sqs.Options)) *sqs.Client {
	t.Helper()
	endpoint, hc := clientParts(t, rt)
	return sqs.New(sqs.Options{
		Region:       Region,
		Credentials:  testCredentials,
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
	}, append([]func(*sqs.Options){sqsclient.InMemoryBodies}, optFns...)...)
}

// testCredentials are the static credentials of every client of this package.
var testCredentials = awscreds.NewStaticCredentialsProvider("test", "test", "")

// clientParts returns what every client of this package shares: the local
// server's [Endpoint], and an HTTP client with [HTTPTimeout] over rt (nil:
// a clone of [http.DefaultTransport] without proxy) whose idle connections
// are closed when the test ends.
func clientParts(t testing.TB, rt http.RoundTripper) (endpoint string, hc *http.Client) {
	t.Helper()
	endpoint = Endpoint(t)
	if rt == nil {
		rt = loopback.Transport()
	}
	hc = &http.Client{Transport: rt, Timeout: HTTPTimeout}
	t.Cleanup(hc.CloseIdleConnections)
	return endpoint, hc
}

// Queue identifies a queue made by [CreateQueue]. DLQURL and DLQARN are
// empty when the queue has no dead-letter queue.
type Queue struct {
	URL, ARN       string
	DLQURL, DLQARN string
}

// QueueOptions configures [CreateQueue].
type QueueOptions struct {
	// FIFO makes a FIFO queue (its name ends in ".fifo").
	FIFO bool
	// MaxReceiveCount > 0 gives the queue a dead-letter queue of the same
	// type with this maxReceiveCount in its RedrivePolicy; 0 means no DLQ.
	MaxReceiveCount int
	// VisibilityTimeout is the queue's default visibility timeout, rounded up
	// to whole seconds; 0 means 30 s.
	VisibilityTimeout time.Duration
	// ContentBasedDedup enables content-based deduplication; FIFO only.
	ContentBasedDedup bool
}

// Limits of SQS queue names.
const (
	maxQueueName = 80
	fifoSuffix   = ".fifo"
	dlqSuffix    = "-dlq"
)

var queueSeq atomic.Uint64

// queueName returns a fresh queue base name derived from the test name:
// characters SQS does not allow are replaced by '-', and the result is cut
// so that base+dlqSuffix+fifoSuffix fits in maxQueueName. A process-wide
// counter and a random part keep names unique across tests and across test
// binaries sharing one server.
func queueName(testName string) string {
	suffix := fmt.Sprintf("-%d-%08x", queueSeq.Add(1), rand.Uint32())
	prefix := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		default:
			return '-'
		}
	}, testName)
	if prefix == "" {
		prefix = "q"
	}
	if n := maxQueueName - len(dlqSuffix) - len(fifoSuffix) - len(suffix); len(prefix) > n {
		prefix = prefix[:n]
	}
	return prefix + suffix
}

// CreateQueue creates a queue with a unique name derived from t.Name() and
// configured by opt, and deletes it (and its DLQ) when the test ends. When
// opt.MaxReceiveCount > 0 the DLQ is created first, with the same type,
// visibility timeout and content-based deduplication, and the main queue's
// RedrivePolicy is {"deadLetterTargetArn": DLQ ARN, "maxReceiveCount": N}.
// Any failure is fatal to the test. Pass a client whose [Faults] (if any)
// leave CreateQueue, GetQueueAttributes and DeleteQueue alone.
func CreateQueue(t testing.TB, c *sqs.Client, opt QueueOptions) Queue {
	t.Helper()
	if opt.MaxReceiveCount < 0 {
		t.Fatalf("sqstest.CreateQueue: MaxReceiveCount %d < 0", opt.MaxReceiveCount)
	}
	if opt.VisibilityTimeout < 0 {
		t.Fatalf("sqstest.CreateQueue: VisibilityTimeout %v < 0", opt.VisibilityTimeout)
	}
	if opt.ContentBasedDedup && !opt.FIFO {
		t.Fatal("sqstest.CreateQueue: ContentBasedDedup needs FIFO")
	}
	vis := opt.VisibilityTimeout
	if vis == 0 {
		vis = 30 * time.Second
	}
	attrs := map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout): strconv.FormatInt(int64((vis+time.Second-1)/time.Second), 10),
	}
	if opt.FIFO {
		attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
	}
	if opt.ContentBasedDedup {
		attrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "true"
	}
	suffix := ""
	if opt.FIFO {
		suffix = fifoSuffix
	}

	base := queueName(t.Name())
	var q Queue
	if opt.MaxReceiveCount > 0 {
		q.DLQURL, q.DLQARN = createOne(t, c, base+dlqSuffix+suffix, attrs)
		policy, err := json.Marshal(struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     int    `json:"maxReceiveCount"`
		}{q.DLQARN, opt.MaxReceiveCount})
		if err != nil {
			t.Fatalf("sqstest.CreateQueue: encode RedrivePolicy: %v", err)
		}
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
	}
	q.URL, q.ARN = createOne(t, c, base+suffix, attrs)
	return q
}

// createOne creates one queue, registers its deletion and returns its URL
// and ARN.
func createOne(t testing.TB, c *sqs.Client, name string, attrs map[string]string) (queueURL, arn string) {
	t.Helper()
	ctx, cancel := opContext(t)
	defer cancel()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("sqstest: create queue %s: %v", name, err)
	}
	queueURL = aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)}); err != nil {
			t.Errorf("sqstest: delete queue %s: %v", queueURL, err)
		}
	})
	ga, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("sqstest: get ARN of queue %s: %v", name, err)
	}
	arn = ga.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		t.Fatalf("sqstest: queue %s has no QueueArn attribute", name)
	}
	return queueURL, arn
}

// opContext returns a context for one helper call, bounded by opTimeout and
// by the test's own context.
func opContext(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), opTimeout)
}

// Drain receives messages from queueURL without deleting them, asking for all
// system attributes and all message attributes, and returns them in the
// order received. Received messages stay in flight for wait + 30 s and then
// become visible again; a message received more than once during one Drain
// is returned once (first receipt).
//
// Drain stops as soon as it holds maxMessages messages (if maxMessages > 0).
// Otherwise, with wait > 0 it keeps receiving (long polls of at most 2 s)
// until wait has passed, and returns within about wait; with wait == 0 it
// short-polls until a receive brings nothing new. Errors are fatal.
func Drain(t testing.TB, c *sqs.Client, queueURL string, maxMessages int, wait time.Duration) []types.Message {
	t.Helper()
	start := time.Now()
	deadline := start.Add(wait)
	seen := make(map[string]bool)
	var out []types.Message
	for {
		n := 10
		if maxMessages > 0 {
			n = min(n, maxMessages-len(out))
		}
		// Whole seconds left before the deadline, between 0 and 2.
		waitSeconds := min(max(int(time.Until(deadline)/time.Second), 0), 2)
		ctx, cancel := opContext(t)
		res, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(queueURL),
			MaxNumberOfMessages: int32(n),
			WaitTimeSeconds:     int32(waitSeconds),
			// Long enough that messages received early do not come back
			// and crowd out the rest before the drain ends.
			VisibilityTimeout:           int32(max(wait, 0)/time.Second) + 30,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		cancel()
		if err != nil {
			t.Fatalf("sqstest.Drain %s: %v", queueURL, err)
		}
		fresh := 0
		for _, m := range res.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id] = true
			out = append(out, m)
			fresh++
		}
		switch {
		case maxMessages > 0 && len(out) >= maxMessages:
			return out
		case wait <= 0 && fresh == 0:
			return out
		case wait > 0 && !time.Now().Before(deadline):
			return out
		case time.Since(start) > wait+opTimeout:
			// Only reachable with wait == 0 on a queue that never runs dry.
			return out
		case len(res.Messages) == 0 && waitSeconds == 0:
			// Less than a second left: short polls, gently.
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Count returns the queue's ApproximateNumberOfMessages (visible) and
// ApproximateNumberOfMessagesNotVisible (in flight). Errors are fatal.
func Count(t testing.TB, c *sqs.Client, queueURL string) (visible, inflight int) {
	t.Helper()
	ctx, cancel := opContext(t)
	defer cancel()
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatalf("sqstest.Count %s: %v", queueURL, err)
	}
	parse := func(name types.QueueAttributeName) int {
		s, ok := out.Attributes[string(name)]
		if !ok {
			t.Fatalf("sqstest.Count %s: attribute %s missing", queueURL, name)
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("sqstest.Count %s: attribute %s=%q: %v", queueURL, name, s, err)
		}
		return n
	}
	return parse(types.QueueAttributeNameApproximateNumberOfMessages),
		parse(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
}
