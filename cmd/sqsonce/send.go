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
	fs := m.flagSet("send", "Usage: sqsonce send [--config FILE] [FILE|-]\n\nSend each line of JSON in FILE (default: standard input) as one message to\nthe configured queue. On a FIFO queue, MessageGroupId and\nMessageDeduplicationId are set from the operation key (key.pointer), so that\nSQS deduplicates resends. Each message carries a traceparent attribute: its\nproducer span's context when tracing is on, else a fresh unsampled one.\nPrints how many messages were sent.\n\nLines are sent as they are read, up to ten in one request: a line of\n`tail -f events.jsonl | sqsonce send` goes when it is written. A line that\nis not JSON (or on a FIFO queue has no key) stops the command with exit\nstatus 2, naming the line and what is wrong with it: the lines before it\nare sent, none after.\n\nA line over SQS's 256 KiB limit is refused, unless payload.bucket names an\nS3 bucket: the line is then put there (s3:PutObject) under a random key, and\nthe message carries a pointer to it in the SQS Extended Client's format,\nwith the attribute ExtendedPayloadSize; the worker reads it back. The FIFO\nkeys still come from the line itself.", &c)
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageErrorf("want at most one input file, got %q", fs.Args())
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
			return usageErrorf("a FIFO queue needs the key from the body to set MessageDeduplicationId: %v", err)
		}
	}
	maxLine, tooLong := maxInline, fmt.Sprintf("longer than %d bytes, SQS's %d-byte message limit less the traceparent attribute (set payload.bucket to send it through S3)", maxInline, maxBody)
	if cfg.Payload.Bucket != "" {
		maxLine = max(cfg.Payload.MaxSize, maxInline)
		tooLong = fmt.Sprintf("longer than SQS's %d-byte message limit and than payload.max_size (%d bytes), the most the worker reads from S3", maxBody, cfg.Payload.MaxSize)
	}
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	s := &sender{m: m, cfg: cfg, client: client, tr: newSendTracer(tp, cfg.Queue.URL)}

	// A read from a terminal or a pipe cannot be cut short: the lines are
	// read on their own, and a signal ends the command while it waits.
	// What was read is sent as it comes: a batch goes as soon as it is full
	// or no further line is waiting, so that a line of `tail -f | sqsonce
	// send` goes when it is written.
	lines := make(chan line, 10)
	done := make(chan struct{})
	defer close(done)
	go readLines(in, name, keyOf, maxLine, tooLong, lines, done)
	var batch []types.SendMessageBatchRequestEntry
	for {
		var l line
		var more bool
		select {
		case l, more = <-lines:
		case <-ctx.Done():
			return s.stopped(fmt.Errorf("%v while reading %s", context.Cause(ctx), name))
		}
		// Take what else is waiting, without waiting for more.
		for more && l.err == nil {
			batch = append(batch, l.entry)
			if len(batch) == 10 {
				break
			}
			select {
			case l, more = <-lines:
				continue
			default:
			}
			break
		}
		if err := s.send(ctx, batch); err != nil {
			return err
		}
		batch = batch[:0]
		switch {
		case l.err != nil:
			return s.stopped(l.err)
		case !more:
			fmt.Fprintf(m.Stdout, "sent %d messages\n", s.sent)
			return nil
		}
	}
}

// line is one line of send's input: a batch entry, or why there is none
// (and no line after it).
type line struct {
	entry types.SendMessageBatchRequestEntry
	err   error
}

// sender sends the entries of send's input, as they come, and counts them.
type sender struct {
	m      *Main
	cfg    Config
	client *sqs.Client
	s3c    *s3.Client // made at the first body that goes through S3
	tr     sendTracer
	sent   int
}

// stopped is send's error after err: it says how many messages were sent
// before it, and keeps err's exit status.
func (s *sender) stopped(err error) error {
	if s.sent == 0 {
		return fmt.Errorf("%w: nothing was sent", err)
	}
	return fmt.Errorf("%w: the %d messages before it were sent, nothing after", err, s.sent)
}

// send sends entries, in as few batches as SQS takes.
func (s *sender) send(ctx context.Context, entries []types.SendMessageBatchRequestEntry) error {
	if err := s.offload(ctx, entries); err != nil {
		return s.stopped(err)
	}
	for start, end := 0, 0; start < len(entries); start = end {
		end = batchEnd(entries, start)
		batch := entries[start:end]
		for i := range batch {
			batch[i].Id = aws.String(strconv.Itoa(i))
		}
		spans := s.tr.start(batch)
		out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.cfg.Queue.URL, Entries: batch})
		spans.end(out, err)
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return fmt.Errorf("sent %d messages, then: %w", s.sent, err)
		}
		s.sent += len(out.Successful)
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return fmt.Errorf("sent %d messages; %d refused, first: %s: %s", s.sent, len(out.Failed), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
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
func (s *sender) offload(ctx context.Context, entries []types.SendMessageBatchRequestEntry) error {
	for i := range entries {
		e := &entries[i]
		body := aws.ToString(e.MessageBody)
		if len(body) <= maxInline {
			continue
		}
		if s.s3c == nil {
			var err error
			if s.s3c, err = newS3Client(ctx, s.cfg); err != nil {
				return err
			}
		}
		p := worker.S3Pointer{Bucket: s.cfg.Payload.Bucket, Key: randomKey()}
		if _, err := s.s3c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &p.Bucket, Key: &p.Key, Body: strings.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		}); err != nil {
			return fmt.Errorf("put a %d-byte body into S3 bucket %s (payload.bucket): %w", len(body), p.Bucket, err)
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

// readLines turns each non-blank line of r into a batch entry on lines,
// as it is read, refusing (with an error on lines, which ends them) a line
// that is not JSON, longer than maxLine (saying it is tooLong) or (on FIFO
// queues, where keyOf is set) has no operation key. It closes lines at the
// end of r, and returns early when done is closed.
func readLines(r io.Reader, name string, keyOf func([]byte) (string, error), maxLine int, tooLong string, lines chan<- line, done <-chan struct{}) {
	put := func(l line) bool {
		select {
		case lines <- l:
			return true
		case <-done:
			return false
		}
	}
	defer close(lines)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine+1)
	for n := 1; sc.Scan(); n++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var v json.RawMessage
		if err := json.Unmarshal(text, &v); err != nil {
			put(line{err: usageErrorf("%s line %d: not valid JSON: %v", name, n, err)})
			return
		}
		e := types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(text))}
		if keyOf != nil {
			key, err := keyOf(text)
			if err != nil {
				put(line{err: usageErrorf("%s line %d: %v", name, n, err)})
				return
			}
			id := worker.DeduplicationID(key)
			e.MessageGroupId, e.MessageDeduplicationId = aws.String(id), aws.String(id)
		}
		if !put(line{entry: e}) {
			return
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			put(line{err: usageErrorf("%s: a line is %s", name, tooLong)})
			return
		}
		put(line{err: fmt.Errorf("read %s: %w", name, err)})
	}
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
