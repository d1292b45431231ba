// Package worker consumes an SQS queue and runs each operation once.
//
// A Worker receives messages with long polls, derives each message's
// operation key from what the message is (a JSON field of the body, a
// message attribute or the FIFO deduplication id; never the delivery),
// claims the key in a Ledger with one atomic write, runs the Handler, records
// the operation complete durably and only then deletes the message. A
// failed attempt is recorded and the message is left to become visible
// again after a back-off; a permanent failure goes to the queue's
// dead-letter queue. Duplicate deliveries of a completed operation are
// deleted without running the work.
//
// The one window in which an operation can run twice is a crash after the
// Handler succeeded and before the completion was durable. The key is handed
// to the Handler (Message.Key, the SQSONCE_KEY variable of the exec handler,
// the Idempotency-Key header of the http handler) so that the system the work
// writes to can close that window too.
package worker
