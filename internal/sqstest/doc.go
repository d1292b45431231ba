// Package sqstest is test support for code that talks to Amazon SQS.
//
// Tests run against a real SQS-compatible server listening on the loopback
// interface (fauxqs, installed and started by scripts/with-sqs.sh), never
// against a mock. The server's base URL is read from the environment
// variable SQSONCE_TEST_SQS_ENDPOINT; a test that needs the server and does
// not find it fails (it is not skipped), so run tests through
// `make test` or `scripts/with-sqs.sh go test ./...`.
//
// The package provides:
//
//   - [Endpoint] and [NewClient]: an *sqs.Client for the local server with
//     static credentials, optionally over a custom [net/http.RoundTripper];
//   - [CreateQueue]: a uniquely named standard or FIFO queue, optionally with
//     a dead-letter queue, deleted when the test ends;
//   - [Drain] and [Count]: inspection of a queue's messages and counters;
//   - [Faults]: a RoundTripper that injects throttling, server errors,
//     timeouts, connection resets and lost acknowledgements into chosen SQS
//     operations, reproducibly from a seed.
//
// # The local server
//
// Queue URLs from the server look like
// http://sqs.us-east-1.localhost:PORT/000000000000/NAME and ARNs like
// arn:aws:sqs:us-east-1:000000000000:NAME; clients reach the server through
// BaseEndpoint only, never through the queue URL's host. Where the server
// differs from Amazon SQS, server_test.go asserts what it does, in tests
// commented "Differs from SQS". In short:
//
//   - GetQueueAttributes does not notice expired visibility timeouts until a
//     ReceiveMessage runs on the queue (counts stay "in flight");
//   - a FIFO ReceiveMessage returns at most one message per message group;
//   - ReceiveRequestAttemptId is ignored;
//   - message attributes come back even when not requested;
//   - DeleteMessage and DeleteMessageBatch accept any receipt handle, and a
//     stale one deletes nothing;
//   - messages moved to a DLQ carry no DeadLetterQueueSourceArn;
//   - ListDeadLetterSourceQueues and the message-move-task operations answer
//     InvalidAction;
//   - MessageRetentionPeriod is stored but messages never expire.
//
// Tests and test programs (scripts/chaos) import it; the binary never does.
package sqstest
