// Package loopback finds the local servers that tests talk to and reaches
// them: a server's address comes from an environment variable (set by
// scripts/with-sqs.sh, scripts/with-dynalite.sh, scripts/with-moto.sh or
// scripts/with-postgres.sh), must be on a loopback address, and is reached
// without a proxy; another variable may say which implementation of the
// service it is.
//
// sqstest, dynamotest and pgtest build on it; the binary never imports it.
package loopback
