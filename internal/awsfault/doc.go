// Package awsfault injects the faults of an AWS service into the requests of
// a real client: throttling, server errors, timeouts, connection resets and
// lost acknowledgements.
//
// A [Transport] sits between an SDK client and the transport that reaches
// the server. For each request it asks a choice function which fault, if
// any, the request gets, and counts what it was told. The test support
// packages decide how faults are chosen (sqstest draws them from seeded
// rates, dynamotest takes them from a script) and describe their service's
// error answers with a [Service]; the mechanics are here.
//
// Tests and test programs use it through those packages; the binary never
// does.
package awsfault
