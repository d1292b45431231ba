// Package sqstest is test support for code that talks to Amazon SQS.
//
// Tests run against a real SQS-compatible server listening on the loopback
// interface (fauxqs, installed and started by scripts/with-sqs.sh; or moto,
// started by scripts/with-moto.sh for `make interop`), never against a
// mock. The server's base URL is read from the environment variable
// SQSONCE_TEST_SQS_ENDPOINT; a test that needs the server and does not find
// it fails (it is not skipped), so run tests through `make test` or
// `scripts/with-sqs.sh go test ./...`. [Server] says which implementation
// it is (SQSONCE_TEST_SQS_SERVER).
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
//     operations, and failures of single entries into batch calls,
//     reproducibly from a seed;
//   - [NewSNSClient] and [NewS3Client]: SNS and S3, which both servers
//     serve at the same endpoint.
//
// # The local servers
//
// Queue URLs look like http://sqs.us-east-1.localhost:PORT/000000000000/NAME
// (fauxqs) or http://127.0.0.1:PORT/123456789012/NAME (moto), and ARNs like
// arn:aws:sqs:us-east-1:ACCOUNT:NAME; clients reach the server through
// BaseEndpoint only, never through the queue URL's host. Where a server
// differs from Amazon SQS, server_test.go asserts what it does, in tests
// commented "Differs from SQS". Code under test must work on a server that
// behaves as SQS documents, whichever of them it runs on. In short:
//
//   - fauxqs: GetQueueAttributes does not notice expired visibility timeouts
//     until a ReceiveMessage runs on the queue (counts stay "in flight");
//     message attributes come back even when not requested; DeleteMessage and
//     DeleteMessageBatch accept any receipt handle, and a stale one deletes
//     nothing (scripts/sqs/server.mjs refuses a lapsed FIFO handle, as SQS
//     does); ChangeMessageVisibility takes up to 43,200 s at any time
//     (scripts/sqs/server.mjs limits a message's visibility to 12 hours from
//     its receive, as SQS does); ListDeadLetterSourceQueues and the
//     message-move-task operations answer InvalidAction; MessageRetentionPeriod
//     is stored but messages never expire. A FIFO ReceiveMessage returns at
//     most one message per group in fauxqs itself, and none of a group with a
//     message in flight; scripts/sqs/server.mjs makes it return as many of one
//     group as it can, in order, up to the group's first message in flight, as
//     SQS does, and give a group's messages back in order.
//   - moto: a deduplicated FIFO send is answered with a new MessageId that no
//     message has; on a standard queue a stale receipt handle changes the
//     message's visibility; a deleted message's handle gets
//     ReceiptHandleIsInvalid (fauxqs: MessageNotInflight); the
//     message-move-task operations answer HTTP 500. In moto itself a FIFO
//     receive skips a group with a message in flight, a group comes back out of
//     order when several of its messages' visibility timeouts end together, a
//     long poll can take a group's message while another receive holds the
//     group, a stale receipt handle deletes its message, a FIFO receipt handle
//     never expires, the 12-hour limit of a message's visibility counts from
//     its send, a batch call fails as a whole for an entry refused for anything
//     but an invalid handle, and deduplication forgets an id once its message
//     is deleted; scripts/moto/server.py corrects these, as SQS documents them.
//   - both: ReceiveRequestAttemptId is ignored; messages moved to a DLQ
//     carry no DeadLetterQueueSourceArn.
//
// Tests and test programs (scripts/chaos) import it; the binary never does.
package sqstest
