package worker

import (
	"context"
	"net/url"
	"path"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsonce/sqsonce/internal/w3ctrace"
)

// Trace context: where a message's producer context is read from, and how
// one attempt is traced.
//
// The producer's context is the message's traceparent (and tracestate)
// attribute when it holds a valid one, else its AWSTraceHeader system
// attribute (X-Ray, Lambda) converted to W3C. Invalid values are ignored
// and logged at debug level; they never fail the message. Without a
// TracerProvider nothing else is done: the producer's context goes on to
// the handler as it was read, never as the attribute's text, which may hold
// what the worker does not read (the fields a later version of the
// traceparent adds, white space in a tracestate): a version 00 traceparent
// and the tracestate's members as parsed. With one, each attempt records a
// consumer span whose parent is the producer's context and which links to
// it, and the handler continues the consumer span's context.

// The outcomes of an attempt, in the sqsonce.outcome attribute of its span.
const (
	spanComplete       = "complete"        // recorded complete; the message is deleted
	spanCompleteFailed = "complete_failed" // the work was done but its completion could not be recorded
	spanRetry          = "retry"           // failed: left for a retry after a back-off
	spanPermanent      = "permanent"       // failed permanently: dead-lettered, or left for SQS's redrive
	spanLeaseLost      = "lease_lost"      // another claim took the operation over while it ran
)

// tracerName names the worker's tracer (its instrumentation scope).
const tracerName = "github.com/sqsonce/sqsonce/worker"

// QueueName is the last segment of a queue URL: the queue's name, as
// trace spans name it.
func QueueName(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return queueURL
	}
	return path.Base(u.Path)
}

// producerContext reads the producer's trace context of a message from its
// string attributes and system attributes, and sets m.TraceParent and
// m.TraceState to it. It returns an invalid context when there is none.
func producerContext(m *Message, system map[string]string, log *jobLog) trace.SpanContext {
	if tp, ok := m.Attributes[w3ctrace.TraceParent]; ok {
		sc, err := w3ctrace.Parse(tp)
		if err == nil {
			m.TraceParent = w3ctrace.Format(sc)
			if ts := m.Attributes[w3ctrace.TraceState]; ts != "" {
				if state, err := trace.ParseTraceState(ts); err == nil {
					sc = sc.WithTraceState(state)
					m.TraceState = state.String()
				} else {
					log.Debug("ignoring an invalid tracestate attribute", "tracestate", ts, "error", err)
				}
			}
			return sc
		}
		log.Debug("ignoring an invalid traceparent attribute", "traceparent", tp)
	}
	if h, ok := system[w3ctrace.AWSTraceHeader]; ok {
		sc, err := w3ctrace.FromAWSTraceHeader(h)
		if err == nil {
			m.TraceParent = w3ctrace.Format(sc)
			return sc
		}
		log.Debug("ignoring an invalid AWSTraceHeader", "aws_trace_header", h)
	}
	return trace.SpanContext{}
}

// attemptSpan is the span of one attempt; a zero attemptSpan records
// nothing.
type attemptSpan struct{ span trace.Span }

// traceAttempt returns the handler's context with the trace context the
// work continues. Without a tracer it is the producer's, if any. With one
// it starts the attempt's consumer span, child of and linked to the
// producer's context, and sets m.TraceParent and m.TraceState to the
// span's context.
func (w *Worker) traceAttempt(ctx context.Context, m *Message, producer trace.SpanContext) (context.Context, attemptSpan) {
	if w.tracer == nil {
		if producer.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
		}
		return ctx, attemptSpan{}
	}
	// The parent is the producer's context alone, never a span that the
	// worker's own context may carry.
	parent := context.Background()
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "aws_sqs"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", w.queueName),
			attribute.String("messaging.message.id", m.MessageID),
			attribute.String("sqsonce.key", m.Key),
			attribute.Int("sqsonce.attempt", m.Attempt),
		),
	}
	if producer.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(parent, producer)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
	}
	_, span := w.tracer.Start(parent, w.spanName, opts...)
	if sc := span.SpanContext(); sc.IsValid() {
		m.TraceParent = w3ctrace.Format(sc)
		m.TraceState = sc.TraceState().String()
	}
	return trace.ContextWithSpan(ctx, span), attemptSpan{span: span}
}

// end ends the span with the attempt's outcome; err, when not nil, is its
// failure.
func (a attemptSpan) end(outcome string, err error) {
	if a.span == nil {
		return
	}
	a.span.SetAttributes(attribute.String("sqsonce.outcome", outcome))
	if err != nil {
		a.span.SetStatus(codes.Error, err.Error())
	}
	a.span.End()
}

// spanNameOf is the consumer span's name for a queue, after OTel's
// messaging conventions: "<queue name> process".
func spanNameOf(queue string) string { return queue + " process" }
