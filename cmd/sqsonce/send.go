package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsonce/sqsonce/internal/w3ctrace"
	"github.com/sqsonce/sqsonce/worker"
)

// maxBody is the largest message send sends (its body and its attributes:
// each attribute's name, type and value) and the largest batch of them:
// 256 KiB, the size at which the SQS Extended Client offloads a body, and
// what a queue takes unless its MaximumMessageSize was set lower.
const maxBody = 256 << 10

// maxInline is the longest body that send sends inline: the room that its
// traceparent attribute leaves under maxBody.
const maxInline = maxBody - (len(w3ctrace.TraceParent) + len("String") + w3ctrace.FormattedLen)

// sendCommand is `sqsonce send`: each line of JSON becomes one message.
func (m *Main) sendCommand(ctx context.Context, args []string) error {
	var c commonFlags
	fs := m.flagSet("send", "Usage: sqsonce send [--config FILE] [FILE|-]\n\nSend each line of JSON in FILE (default: standard input) as one message to\nthe configured queue. On a FIFO queue, MessageGroupId and\nMessageDeduplicationId are set from the operation key (key.pointer), so that\nSQS deduplicates resends. Each message carries a traceparent attribute: its\nproducer span's context when tracing is on, else a fresh unsampled one.\nPrints how many messages were sent.\n\nA line over SQS's 256 KiB limit is refused, unless payload.bucket names an\nS3 bucket: the line is then put there (s3:PutObject) under a random key, and\nthe message carries a pointer to it in the SQS Extended Client's format,\nwith the attribute ExtendedPayloadSize; the worker reads it back. The FIFO\nkeys still come from the line itself.", &c)
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("want at most one input file, got %q: %w", fs.Args(), errUsage)
	}
	tp, flush, err := m.newTracing(ctx, log)
	if err != nil {
		return err
	}
	defer flush()
	in := m.Stdin
	name := "standard input"
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, fs.Arg(0)
	}
	fifo := strings.HasSuffix(cfg.Queue.URL, ".fifo")
	var keyOf func([]byte) (string, error)
	if fifo {
		keyOf, err = worker.BodyKeyFunc(keyConfig(cfg.Key))
		if err != nil {
			return fmt.Errorf("a FIFO queue needs the key from the body to set MessageDeduplicationId: %v: %w", err, errUsage)
		}
	}
	// Read and check everything before sending anything.
	maxLine, tooLong := maxInline, fmt.Sprintf("longer than %d bytes, SQS's %d-byte message limit less the traceparent attribute (set payload.bucket to send it through S3)", maxInline, maxBody)
	if cfg.Payload.Bucket != "" {
		maxLine = max(cfg.Payload.MaxSize, maxInline)
		tooLong = fmt.Sprintf("longer than SQS's %d-byte message limit and than payload.max_size (%d bytes), the most the worker reads from S3", maxBody, cfg.Payload.MaxSize)
	}
	// A read from a terminal or a pipe cannot be cut short: it runs on its
	// own, and a signal ends the command while it waits (nothing is sent).
	type read struct {
		entries []types.SendMessageBatchRequestEntry
		err     error
	}
	lines := make(chan read, 1)
	go func() {
		entries, err := readLines(in, name, keyOf, maxLine, tooLong)
		lines <- read{entries, err}
	}()
	var entries []types.SendMessageBatchRequestEntry
	select {
	case r := <-lines:
		if r.err != nil {
			return r.err
		}
		entries = r.entries
	case <-ctx.Done():
		return fmt.Errorf("%v while reading %s: nothing was sent", context.Cause(ctx), name)
	}
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	if err := m.offload(ctx, cfg, entries); err != nil {
		return err
	}
	sent := 0
	tr := newSendTracer(tp, cfg.Queue.URL)
	for start, end := 0, 0; start < len(entries); start = end {
		end = batchEnd(entries, start)
		batch := entries[start:end]
		spans := tr.start(batch)
		out, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &cfg.Queue.URL, Entries: batch})
		spans.end(out, err)
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return fmt.Errorf("sent %d of %d messages, then: %w", sent, len(entries), err)
		}
		sent += len(out.Successful)
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return fmt.Errorf("sent %d of %d messages; %d refused, first: %s: %s", sent, len(entries), len(out.Failed), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	fmt.Fprintf(m.Stdout, "sent %d messages\n", sent)
	return nil
}

// batchEnd is where the batch that starts at entries[start] ends: at ten
// entries, or before the entry that would take the batch over SQS's limit
// of maxBody bytes for all its messages (bodies, attributes and the
// traceparent that each will carry), and after one entry at least.
func batchEnd(entries []types.SendMessageBatchRequestEntry, start int) int {
	size, end := 0, start
	for end < len(entries) && end-start < 10 {
		n := len(aws.ToString(entries[end].MessageBody)) + maxBody - maxInline
		for name, a := range entries[end].MessageAttributes {
			n += len(name) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
		}
		if end > start && size+n > maxBody {
			break
		}
		size += n
		end++
	}
	return end
}

// offload puts each entry's body that is over SQS's limit into the
// payload bucket and makes the entry a pointer to it, as the SQS Extended
// Client does: the pointer body and the attribute ExtendedPayloadSize, the
// only message attribute send sets (SQS allows ten).
func (m *Main) offload(ctx context.Context, cfg Config, entries []types.SendMessageBatchRequestEntry) error {
	var s3c *s3.Client
	for i := range entries {
		e := &entries[i]
		body := aws.ToString(e.MessageBody)
		if len(body) <= maxInline {
			continue
		}
		if s3c == nil {
			var err error
			if s3c, err = newS3Client(ctx, cfg); err != nil {
				return err
			}
		}
		p := worker.S3Pointer{Bucket: cfg.Payload.Bucket, Key: randomKey()}
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &p.Bucket, Key: &p.Key, Body: strings.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		}); err != nil {
			return fmt.Errorf("put a %d-byte body into S3 bucket %s (payload.bucket): nothing was sent: %w", len(body), p.Bucket, err)
		}
		e.MessageBody = aws.String(p.Body())
		e.MessageAttributes = map[string]types.MessageAttributeValue{
			worker.AttrExtendedPayloadSize: {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(len(body)))},
		}
	}
	return nil
}

// randomKey is a random (version 4) UUID, the Extended Client's keys.
func randomKey() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// readLines turns each non-blank line into a batch entry, refusing lines that
// are not JSON, longer than maxLine (saying they are tooLong) or (on FIFO
// queues) have no operation key.
func readLines(r io.Reader, name string, keyOf func([]byte) (string, error), maxLine int, tooLong string) ([]types.SendMessageBatchRequestEntry, error) {
	var entries []types.SendMessageBatchRequestEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine+1)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, fmt.Errorf("%s line %d: not valid JSON: %w", name, n, errUsage)
		}
		e := types.SendMessageBatchRequestEntry{
			Id:          aws.String(strconv.Itoa(len(entries) % 10)),
			MessageBody: aws.String(string(line)),
		}
		if keyOf != nil {
			key, err := keyOf(line)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %v: %w", name, n, err, errUsage)
			}
			id := worker.DeduplicationID(key)
			e.MessageGroupId, e.MessageDeduplicationId = aws.String(id), aws.String(id)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, fmt.Errorf("%s: a line is %s: %w", name, tooLong, errUsage)
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return entries, nil
}

// sendTracer gives each message sent a traceparent attribute: the context
// of a producer span of its own when tracing is on, else a fresh context
// that is not sampled (no span of it is recorded), whose trace id still
// ties together what becomes of the message.
type sendTracer struct {
	tracer      trace.Tracer // nil: tracing is off
	queue, name string
}

func newSendTracer(tp trace.TracerProvider, queueURL string) sendTracer {
	t := sendTracer{queue: worker.QueueName(queueURL)}
	t.name = t.queue + " send"
	if tp != nil {
		t.tracer = tp.Tracer(tracerName)
	}
	return t
}

// sendSpans are the producer spans of one batch, by entry id; nil
// without tracing.
type sendSpans map[string]trace.Span

// start sets each entry's traceparent, starting its span first when
// tracing is on.
func (t sendTracer) start(batch []types.SendMessageBatchRequestEntry) sendSpans {
	var spans sendSpans
	if t.tracer != nil {
		spans = make(sendSpans, len(batch))
	}
	for i := range batch {
		sc := w3ctrace.New(0)
		if t.tracer != nil {
			_, span := t.tracer.Start(context.Background(), t.name, trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(
					attribute.String("messaging.system", "aws_sqs"),
					attribute.String("messaging.operation.type", "send"),
					attribute.String("messaging.destination.name", t.queue),
				))
			spans[aws.ToString(batch[i].Id)] = span
			sc = span.SpanContext()
		}
		if batch[i].MessageAttributes == nil {
			batch[i].MessageAttributes = map[string]types.MessageAttributeValue{}
		}
		batch[i].MessageAttributes[w3ctrace.TraceParent] = types.MessageAttributeValue{
			DataType: aws.String("String"), StringValue: aws.String(w3ctrace.Format(sc)),
		}
	}
	return spans
}

// end ends the spans with what SQS answered for their entries, each
// found by its entry's id.
func (s sendSpans) end(out *sqs.SendMessageBatchOutput, err error) {
	if len(s) == 0 {
		return
	}
	if err != nil {
		for _, span := range s {
			span.SetStatus(codes.Error, err.Error())
			span.End()
		}
		return
	}
	for _, ok := range out.Successful {
		if span, found := s[aws.ToString(ok.Id)]; found {
			span.SetAttributes(attribute.String("messaging.message.id", aws.ToString(ok.MessageId)))
			span.End()
			delete(s, aws.ToString(ok.Id))
		}
	}
	for _, f := range out.Failed {
		if span, found := s[aws.ToString(f.Id)]; found {
			span.SetStatus(codes.Error, aws.ToString(f.Code)+": "+aws.ToString(f.Message))
			span.End()
			delete(s, aws.ToString(f.Id))
		}
	}
	for _, span := range s {
		span.SetStatus(codes.Error, "no answer for this entry")
		span.End()
	}
}
