// Package dynamotest is test support for code that talks to Amazon
// DynamoDB.
//
// Tests run against a real DynamoDB-compatible server listening on the
// loopback interface (dynalite, installed and started by
// scripts/with-dynalite.sh; or moto, started by scripts/with-moto.sh for
// `make interop`), never against a mock. The server's base URL is
// read from the environment variable SQSONCE_TEST_DYNAMODB_ENDPOINT; a test
// that needs the server and does not find it fails (it is not skipped), so
// run tests through `make test` or `scripts/with-dynalite.sh go test ./...`.
//
// The package provides:
//
//   - [Endpoint] and [NewClient]: a *dynamodb.Client for the local server
//     with static credentials, optionally over a custom
//     [net/http.RoundTripper];
//   - [Table]: a table name of the test's own, the table deleted when the
//     test ends;
//   - [Faults]: a RoundTripper that gives chosen requests lost answers,
//     connection resets, throttling, server errors or no answer at all.
//
// # The local server
//
// Where dynalite differs from DynamoDB, and what tests must not assume:
// it has no transactions (TransactWriteItems is an unknown operation), no
// TTL deletion (UpdateTimeToLive is an unknown operation, and
// DescribeTimeToLive answers DISABLED), and it ignores
// ReturnValuesOnConditionCheckFailure. Like DynamoDB it refuses reserved
// words such as state and owner as attribute names in expressions.
// scripts/dynalite/server.mjs keeps new tables CREATING for 50 ms. moto
// accepts UpdateTimeToLive ([Server] tells the two apart); its conditional
// writes are not atomic under concurrent requests, so
// scripts/moto/server.py handles DynamoDB requests one at a time.
package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqsclient"
)

// EndpointEnv names the environment variable holding the base URL of the
// local DynamoDB-compatible server, e.g. "http://127.0.0.1:4567".
const EndpointEnv = "SQSONCE_TEST_DYNAMODB_ENDPOINT"

// Region is the AWS region clients from [NewClient] use.
const Region = "us-east-1"

// HTTPTimeout bounds every HTTP exchange of a client from [NewClient], so
// that a stuck request cannot hang a test.
const HTTPTimeout = 30 * time.Second

// ServerEnv names the environment variable that says which implementation
// of DynamoDB answers at [EndpointEnv]: [Dynalite] (also when it is unset)
// or [Moto]. scripts/with-dynalite.sh and scripts/with-moto.sh set it.
const ServerEnv = "SQSONCE_TEST_DYNAMODB_SERVER"

// The implementations of DynamoDB that the tests run against; see [Server].
const (
	// Dynalite is dynalite from the npm registry, as
	// scripts/dynalite/server.mjs runs it: the server of `make test`.
	Dynalite = "dynalite"
	// Moto is Python moto, as scripts/moto/server.py runs it (DynamoDB
	// requests one at a time, so that conditional writes are atomic): the
	// second implementation of `make interop`.
	Moto = "moto"
)

// server is the local DynamoDB-compatible server, found through
// [EndpointEnv].
var server = loopback.Server{
	Env:     EndpointEnv,
	Name:    "the local DynamoDB-compatible server",
	Script:  "scripts/with-dynalite.sh",
	Example: "http://127.0.0.1:4567",
	ImplEnv: ServerEnv,
	Impls:   []string{Dynalite, Moto},
}

// Server returns which implementation of DynamoDB answers at [Endpoint],
// from [ServerEnv]: [Dynalite] or [Moto]. Tests whose expectations depend
// on what the service has (TTL deletion, transactions) ask it. An unknown
// value fails the test.
func Server(t testing.TB) string {
	t.Helper()
	return server.Impl(t)
}

// Endpoint returns the base URL of the local DynamoDB-compatible server
// from [EndpointEnv]. If the variable is unset or empty, or does not name
// an http URL on a loopback address, Endpoint fails the test with t.Fatal;
// it never skips.
func Endpoint(t testing.TB) string {
	t.Helper()
	return server.Endpoint(t)
}

// NewClient returns a DynamoDB client for the server at [Endpoint]. See
// [NewClientAt].
func NewClient(t testing.TB, rt http.RoundTripper, optFns ...func(*ddb.Options)) *ddb.Client {
	t.Helper()
	return NewClientAt(t, Endpoint(t), rt, optFns...)
}

// NewClientAt returns a DynamoDB client for the server at endpoint (which
// must be on loopback): region [Region], static credentials "test"/"test",
// the SDK's default retryer, and an HTTP client with [HTTPTimeout]. If rt
// is non-nil it carries the requests (e.g. a [*Faults]); otherwise a clone
// of [http.DefaultTransport] without proxy does. Idle connections are
// closed when the test ends. optFns adjust the options last, e.g.
// func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 } to disable retries.
func NewClientAt(t testing.TB, endpoint string, rt http.RoundTripper, optFns ...func(*ddb.Options)) *ddb.Client {
	t.Helper()
	if u, err := url.Parse(endpoint); err != nil || !loopback.IsHost(u.Hostname()) {
		t.Fatalf("dynamotest: %q is not a loopback URL", endpoint)
	}
	if rt == nil {
		rt = LoopbackTransport()
	}
	hc := &http.Client{Transport: rt, Timeout: HTTPTimeout}
	t.Cleanup(hc.CloseIdleConnections)
	return ddb.New(ddb.Options{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
	}, append([]func(*ddb.Options){inMemoryBodies}, optFns...)...)
}

// LoopbackTransport returns a clone of http.DefaultTransport that never
// uses a proxy (the test server is always on loopback) and keeps up to 100
// idle connections to it rather than net/http's 2, so that a client with
// many requests in flight (a ledger's batch) reuses its connections.
func LoopbackTransport() *http.Transport {
	tr := loopback.Transport()
	tr.MaxIdleConnsPerHost = 100
	return tr
}

// inMemoryBodies applies the module's fix for the SDK's request bodies (see
// internal/sqsclient) to DynamoDB clients.
func inMemoryBodies(o *ddb.Options) {
	o.HTTPClient = sqsclient.InMemory(o.HTTPClient)
}

var tableSeq atomic.Uint64

// Table returns a table name that no other test uses, derived from
// t.Name(), and deletes the table of that name, if one was made, when the
// test ends. It does not create the table: that is the code under test's
// job.
func Table(t testing.TB, c *ddb.Client) string {
	t.Helper()
	suffix := fmt.Sprintf("-%d-%08x", tableSeq.Add(1), rand.Uint32())
	prefix := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		default:
			return '-'
		}
	}, t.Name())
	if n := 200 - len(suffix); len(prefix) > n {
		prefix = prefix[:n]
	}
	name := "t-" + prefix + suffix
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := c.DeleteTable(ctx, &ddb.DeleteTableInput{TableName: aws.String(name)})
		var notFound *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &notFound) {
			t.Errorf("dynamotest: delete table %s: %v", name, err)
		}
	})
	return name
}
