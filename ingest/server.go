package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsonce/sqsonce/internal/w3ctrace"
	"github.com/sqsonce/sqsonce/worker"
)

// SQSClient is the part of the SQS API the receiver calls. *sqs.Client
// implements it.
type SQSClient interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// The message attributes of an enqueued event. A worker reads the key back
// with key.from = "attribute" and key.attribute = AttrKey, without parsing
// the body. Each event also carries a W3C trace context in the attributes
// traceparent and (when not empty) tracestate: see Config.TracerProvider.
const (
	AttrKey        = "SqsonceKey"        // the operation key: the source's key prefix and the event id its signature covers
	AttrSource     = "SqsonceSource"     // Source.Name
	AttrReceivedAt = "SqsonceReceivedAt" // when the request arrived, RFC 3339 with nanoseconds, UTC
	// AttrDeliveryID is the sender's delivery id as it arrived, where the
	// scheme has one that is not the key (github: X-GitHub-Delivery), for
	// support: it is not signed, and nothing reads it. Left out when it is
	// longer than 256 bytes or not text SQS can carry.
	AttrDeliveryID = "SqsonceDeliveryId"
)

// Defaults and limits of Config.
const (
	DefaultMaxInFlight    = 256
	DefaultRequestTimeout = 8 * time.Second
	DefaultRetryAfter     = 5 * time.Second
	DefaultGrace          = 25 * time.Second
	// DefaultMaxMessageSize is SQS's limit for a message, body and
	// attributes, when the queue does not say its own.
	DefaultMaxMessageSize = 256 << 10
	// readHeaderTimeout bounds the wait for a request's headers.
	readHeaderTimeout = 5 * time.Second
	// maxHeaderBytes bounds a request's headers.
	maxHeaderBytes = 64 << 10
)

// Config configures a Server. A zero field takes the default named on it.
type Config struct {
	// Sources are the senders' endpoints. At least one; names and paths
	// unique.
	Sources []Source

	// MaxBody is the largest body accepted, in bytes; larger ones are
	// answered 413. Zero: what each queue takes (its MaximumMessageSize
	// less the attributes). It may only lower that.
	MaxBody int64

	// MaxInFlight bounds the requests handled at once; one more is
	// answered 503 at once. Default 256.
	MaxInFlight int

	// RequestTimeout bounds one request, from its first byte to the
	// answer: reading the body, verifying, and the send with its retries.
	// A send cut off by it is answered 503. It should stay below the
	// senders' own timeouts (10 s for GitHub's, for example), so that
	// they hear the answer. Default 8s.
	RequestTimeout time.Duration

	// RetryAfter is the Retry-After of a 503. Default 5s.
	RetryAfter time.Duration

	// Grace is how long a stop waits for the requests in flight. Default
	// 25s; NoDelay-like negative values are invalid.
	Grace time.Duration

	// Logger receives the receiver's log. Nil means slog.Default().
	Logger *slog.Logger

	// Registerer, when set, receives the receiver's metrics.
	Registerer prometheus.Registerer

	// TracerProvider, when set, records a producer span for each event
	// sent ("<queue name> send", attributes messaging.system "aws_sqs",
	// messaging.operation.type "send", messaging.destination.name,
	// messaging.message.id once sent, sqsonce.key, sqsonce.source; status
	// Error when the event was not queued; never the body). Its parent is
	// the request's traceparent and tracestate headers when they are
	// valid, and the event's traceparent attribute is the span's context.
	// Nil records no spans: the event carries the request's trace context
	// unchanged, or, without a valid one, a fresh context that is not
	// sampled (nothing of it is recorded here) but whose trace id ties
	// together what becomes of the event.
	TracerProvider trace.TracerProvider
}

// Server receives webhooks and enqueues them. Create it with New, serve
// with Run.
type Server struct {
	cfg     Config
	sqs     SQSClient
	log     *slog.Logger
	byPath  map[string]*source
	sources []*source
	slots   chan struct{}
	metrics *metrics
	now     func() time.Time
	tracer  trace.Tracer // nil: no spans

	ready    atomic.Bool // the queues were read and the listener serves
	draining atomic.Bool
	inFlight atomic.Int64
	stats    counters
}

// New validates cfg and returns its Server.
func New(cfg Config, client SQSClient) (*Server, error) {
	if client == nil {
		return nil, fmt.Errorf("nil SQS client: %w", ErrInvalidConfig)
	}
	cfg, sources, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		sqs:     client,
		log:     cfg.Logger,
		byPath:  map[string]*source{},
		sources: sources,
		slots:   make(chan struct{}, cfg.MaxInFlight),
		now:     time.Now,
	}
	for _, src := range sources {
		s.byPath[src.Path] = src
	}
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer("github.com/sqsonce/sqsonce/ingest")
	}
	s.metrics = newMetrics(s)
	if cfg.Registerer != nil {
		if err := s.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return s, nil
}

// Validate reports what New would refuse in cfg, every problem joined, each
// wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	_, _, err := c.prepare()
	return err
}

// SharedKeySpaces names, a sentence each, the sources of c that send to
// one queue with one key prefix: an event id sent by both is one operation
// to the worker, so the second is suppressed as a duplicate or
// dead-lettered as a conflict. Only prefixes set explicitly can be shared:
// the default ones are the sources' names, which are unique. Sources that
// cannot be prepared are left out.
func (c Config) SharedKeySpaces() []string {
	type space struct{ queue, prefix string }
	names := map[space][]string{}
	var order []space
	for _, src := range c.Sources {
		p, err := src.keyPrefix()
		if err != nil || src.QueueURL == "" {
			continue
		}
		sp := space{src.QueueURL, p}
		if names[sp] == nil {
			order = append(order, sp)
		}
		names[sp] = append(names[sp], src.Name)
	}
	var out []string
	for _, sp := range order {
		if n := names[sp]; len(n) > 1 {
			out = append(out, fmt.Sprintf("sources %s send to %s with one key prefix %q: the same event id from two of them is one operation, and only the first takes effect; give each its own key_prefix, or leave key_prefix unset",
				strings.Join(quoteAll(n), ", "), sp.queue, sp.prefix))
		}
	}
	return out
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// prepare fills the defaults of a copy of c and prepares its sources.
func (c Config) prepare() (Config, []*source, error) {
	err := c.setDefaults()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	var sources []*source
	names, paths := map[string]bool{}, map[string]string{}
	for _, src := range c.Sources {
		p, err := src.prepare()
		if err != nil {
			errs = append(errs, err)
		}
		if names[src.Name] {
			errs = append(errs, fmt.Errorf("source %q: the name is used twice: %w", src.Name, ErrInvalidConfig))
		}
		if other, ok := paths[src.Path]; ok {
			errs = append(errs, fmt.Errorf("source %q: path %s is already source %q's: %w", src.Name, src.Path, other, ErrInvalidConfig))
		}
		names[src.Name], paths[src.Path] = true, src.Name
		if p != nil {
			sources = append(sources, p)
		}
	}
	return c, sources, errors.Join(errs...)
}

func (c *Config) setDefaults() error {
	var errs []error
	if len(c.Sources) == 0 {
		errs = append(errs, errors.New("no source: at least one is required"))
	}
	switch {
	case c.MaxInFlight == 0:
		c.MaxInFlight = DefaultMaxInFlight
	case c.MaxInFlight < 0:
		errs = append(errs, fmt.Errorf("max in flight %d: must be at least 1", c.MaxInFlight))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"request timeout", &c.RequestTimeout, DefaultRequestTimeout}, {"retry after", &c.RetryAfter, DefaultRetryAfter}, {"grace", &c.Grace, DefaultGrace}} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0:
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.name, *d.v))
		}
	}
	if c.MaxBody < 0 {
		errs = append(errs, fmt.Errorf("max body %d: must not be negative", c.MaxBody))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalidConfig)
	}
	return nil
}

// queueInfo is what the receiver reads of a queue when it starts.
type queueInfo struct {
	fifo    bool
	maxSize int64 // MaximumMessageSize: body and attributes
}

// inspect reads every source's queue: whether it is FIFO, and how large a
// message it takes.
func (s *Server) inspect(ctx context.Context) error {
	cache := map[string]queueInfo{}
	for _, src := range s.sources {
		info, ok := cache[src.QueueURL]
		if !ok {
			out, err := s.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
				QueueUrl:       aws.String(src.QueueURL),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameMaximumMessageSize},
			})
			if err != nil {
				return fmt.Errorf("source %q: queue %s: %w", src.Name, src.QueueURL, err)
			}
			info.fifo = out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
			info.maxSize = DefaultMaxMessageSize
			if n, err := strconv.ParseInt(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)], 10, 64); err == nil && n > 0 {
				info.maxSize = n
			}
			cache[src.QueueURL] = info
		}
		if src.GroupPointer != "" && !info.fifo {
			return fmt.Errorf("source %q: group_pointer is for FIFO queues, and %s is a standard queue: %w", src.Name, src.QueueURL, ErrInvalidConfig)
		}
		src.queue = info
	}
	return nil
}

// Run reads the sources' queues, then serves ln until ctx ends. Then it
// stops accepting, lets the requests in flight finish (for up to
// Config.Grace; those still running then are cut off, and their senders
// retry), and returns nil. It returns an error when a queue cannot be read
// or ln fails. Run closes ln.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	if err := s.inspect(ctx); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       s.cfg.RequestTimeout,
		WriteTimeout:      s.cfg.RequestTimeout + 5*time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	for _, shared := range s.cfg.SharedKeySpaces() {
		s.log.Warn("sources share a key space", "problem", shared)
	}
	s.ready.Store(true)
	s.log.Info("receiving webhooks", "address", ln.Addr().String(), "sources", len(s.sources))

	select {
	case err := <-served:
		s.ready.Store(false)
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.ready.Store(false)
	s.log.Info("stopping: no new requests, finishing those in flight", "in_flight", s.inFlight.Load(), "grace", s.cfg.Grace)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown grace ran out: cutting off the requests still in flight", "in_flight", s.inFlight.Load())
		srv.Close()
	}
	<-served
	s.log.Info("stopped", s.Stats().logAttrs()...)
	return nil
}

// answer is the JSON body of every answer.
type answer struct {
	Status    string `json:"status"`               // "accepted" or "rejected" or "unavailable"
	Key       string `json:"key,omitempty"`        // the event's key, once known
	MessageID string `json:"message_id,omitempty"` // SQS's id of the enqueued message
	Error     string `json:"error,omitempty"`      // why it was not accepted
}

// ServeHTTP handles one webhook: 2xx only once SQS holds the event.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	src := s.byPath[r.URL.Path]
	if src == nil {
		s.stats.notFound.Add(1)
		s.reply(w, nil, http.StatusNotFound, answer{Status: "rejected", Error: "no source at " + r.URL.Path})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.reply(w, src, http.StatusMethodNotAllowed, answer{Status: "rejected", Error: "only POST"})
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.log.Warn("too many requests in flight: answered 503", "source", src.Name, "max_in_flight", s.cfg.MaxInFlight)
		s.unavailable(w, src, "too many requests in flight")
		return
	}
	s.inFlight.Add(1)
	defer func() {
		s.inFlight.Add(-1)
		<-s.slots
	}()
	received := s.now()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	s.handle(ctx, w, r, src, received)
}

func (s *Server) handle(ctx context.Context, w http.ResponseWriter, r *http.Request, src *source, received time.Time) {
	log := s.log.With("source", src.Name, "remote", r.RemoteAddr)
	limit := src.queue.maxSize
	if s.cfg.MaxBody > 0 {
		limit = min(limit, s.cfg.MaxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		log.Warn("body too large: answered 413", "limit", limit)
		s.reply(w, src, http.StatusRequestEntityTooLarge, answer{Status: "rejected", Error: fmt.Sprintf("body larger than %d bytes", limit)})
		return
	case err != nil:
		// A client that stopped sending (the read timeout) or went away.
		log.Warn("could not read the body: answered 408", "error", err)
		s.reply(w, src, http.StatusRequestTimeout, answer{Status: "rejected", Error: "the body could not be read"})
		return
	}
	signedID, err := src.verifier.verify(r.Header, body, received)
	if err != nil {
		s.stats.unverified.Add(1)
		log.Warn("signature refused: answered 401", "error", err)
		s.reply(w, src, http.StatusUnauthorized, answer{Status: "rejected", Error: err.Error()})
		return
	}
	if i := invalidSQSChar(body); i >= 0 {
		log.Warn("body has a character SQS cannot carry: answered 400", "offset", i)
		s.reply(w, src, http.StatusBadRequest, answer{Status: "rejected", Error: fmt.Sprintf("body has a character at byte %d that SQS cannot carry (invalid UTF-8 or a control character)", i)})
		return
	}
	delivery := src.deliveryID(r.Header)
	if delivery != "" {
		log = log.With("delivery", delivery)
	}
	key, err := src.key(r.Header, body, signedID)
	if err != nil {
		s.stats.keyless.Add(1)
		log.Warn("no event id: answered 400", "error", err)
		s.reply(w, src, http.StatusBadRequest, answer{Status: "rejected", Error: err.Error()})
		return
	}
	if i := invalidSQSChar([]byte(key)); i >= 0 {
		// SQS holds a string attribute to the rules of a body (see
		// MessageAttributeValue in its API reference): its refusal would
		// be answered 503 and retried for ever. An id written as a JSON
		// escape (\uffff) passes the body's check and lands here.
		s.stats.keyless.Add(1)
		log.Warn("event id SQS cannot carry: answered 400", "offset", i)
		s.reply(w, src, http.StatusBadRequest, answer{Status: "rejected", Error: fmt.Sprintf("the event id has a character that SQS cannot carry in an attribute (at byte %d of the key)", i)})
		return
	}
	log = log.With("key", key)
	in := &sqs.SendMessageInput{
		QueueUrl:    aws.String(src.QueueURL),
		MessageBody: aws.String(string(body)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			AttrKey:        stringAttr(key),
			AttrSource:     stringAttr(src.Name),
			AttrReceivedAt: stringAttr(received.UTC().Format(time.RFC3339Nano)),
		},
	}
	if delivery != "" {
		in.MessageAttributes[AttrDeliveryID] = stringAttr(delivery)
	}
	span := s.traceEvent(r.Header, src, key, in)
	defer span.End()
	if size := messageSize(in); size > src.queue.maxSize {
		span.SetStatus(codes.Error, "too large")
		log.Warn("body too large with its attributes: answered 413", "size", size, "limit", src.queue.maxSize)
		s.reply(w, src, http.StatusRequestEntityTooLarge, answer{Status: "rejected", Key: key, Error: fmt.Sprintf("body and attributes of %d bytes are more than the queue takes (%d)", size, src.queue.maxSize)})
		return
	}
	if src.queue.fifo {
		group := key
		if src.group != nil {
			if group, err = src.group(body); err != nil {
				span.SetStatus(codes.Error, err.Error())
				log.Warn("no message group: answered 400", "error", err)
				s.reply(w, src, http.StatusBadRequest, answer{Status: "rejected", Key: key, Error: err.Error()})
				return
			}
		}
		in.MessageDeduplicationId = aws.String(worker.DeduplicationID(key))
		in.MessageGroupId = aws.String(worker.DeduplicationID(group))
	}
	start := s.now()
	out, err := s.sqs.SendMessage(ctx, in)
	s.metrics.sendSeconds.Observe(s.now().Sub(start).Seconds())
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		s.stats.sendFailed.Add(1)
		log.Error("send to SQS failed: answered 503, the sender will retry", "queue", src.QueueURL, "error", err)
		s.unavailable(w, src, "the event could not be queued; try again")
		return
	}
	span.SetAttributes(attribute.String("messaging.message.id", aws.ToString(out.MessageId)))
	s.stats.accepted.Add(1)
	log.Debug("event queued", "message_id", aws.ToString(out.MessageId))
	s.reply(w, src, http.StatusOK, answer{Status: "accepted", Key: key, MessageID: aws.ToString(out.MessageId)})
}

func (s *Server) unavailable(w http.ResponseWriter, src *source, reason string) {
	w.Header().Set("Retry-After", strconv.Itoa(int((s.cfg.RetryAfter+time.Second-1)/time.Second)))
	s.reply(w, src, http.StatusServiceUnavailable, answer{Status: "unavailable", Error: reason})
}

func (s *Server) reply(w http.ResponseWriter, src *source, code int, a answer) {
	name := ""
	if src != nil {
		name = src.Name
	}
	s.metrics.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(a)
}

// traceEvent sets the trace context attributes of an event's message and
// returns its producer span: a span that records nothing without a tracer.
func (s *Server) traceEvent(h http.Header, src *source, key string, in *sqs.SendMessageInput) trace.Span {
	// Only what was parsed and validated is handed on, formatted anew:
	// never the request's text (a later version's extra fields, white
	// space).
	var tp, ts string
	incoming, err := w3ctrace.Parse(h.Get(w3ctrace.TraceParent))
	if err == nil {
		if state, err := trace.ParseTraceState(h.Get(w3ctrace.TraceState)); err == nil {
			incoming = incoming.WithTraceState(state)
		}
		tp, ts = w3ctrace.Format(incoming), incoming.TraceState().String()
	}
	span := trace.SpanFromContext(context.Background()) // records nothing
	if s.tracer != nil {
		parent := context.Background()
		if incoming.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(parent, incoming)
		}
		queue := worker.QueueName(src.QueueURL)
		_, span = s.tracer.Start(parent, queue+" send", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.system", "aws_sqs"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", queue),
				attribute.String("sqsonce.key", key),
				attribute.String("sqsonce.source", src.Name),
			))
		sc := span.SpanContext()
		tp, ts = w3ctrace.Format(sc), sc.TraceState().String()
	}
	if tp == "" {
		tp = w3ctrace.Format(w3ctrace.New(0))
	}
	in.MessageAttributes[w3ctrace.TraceParent] = stringAttr(tp)
	if ts != "" {
		in.MessageAttributes[w3ctrace.TraceState] = stringAttr(ts)
	}
	return span
}

func stringAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// messageSize is the size SQS counts for a message: its body and, for each
// attribute, its name, data type and value.
func messageSize(in *sqs.SendMessageInput) int64 {
	n := int64(len(aws.ToString(in.MessageBody)))
	for name, v := range in.MessageAttributes {
		n += int64(len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue))
	}
	return n
}

// invalidSQSChar returns the offset of the first byte of body that an SQS
// message body cannot hold, or -1. SQS takes #x9, #xA, #xD, #x20 to
// #xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF, as valid UTF-8.
func invalidSQSChar(body []byte) int {
	for i := 0; i < len(body); {
		r, size := utf8.DecodeRune(body[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return i
		case r == 0x9 || r == 0xA || r == 0xD:
		case r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE, r == 0xFFFF:
			return i
		}
		i += size
	}
	return -1
}

// Health is what the receiver says of itself.
type Health struct {
	Ready    bool // serving: its queues were read and it accepts requests
	Draining bool // stopping: no new requests
	InFlight int  // requests being handled
}

// Health returns the receiver's health. Safe to call at any time.
func (s *Server) Health() Health {
	return Health{Ready: s.ready.Load(), Draining: s.draining.Load(), InFlight: int(s.inFlight.Load())}
}

// Stats counts what the receiver did since it was created.
type Stats struct {
	Accepted   int64 // events SQS accepted (answered 200)
	Unverified int64 // requests whose signature was refused (401)
	Keyless    int64 // requests without an event id (400)
	SendFailed int64 // events SQS did not accept in time (503)
	NotFound   int64 // requests to a path of no source (404)
}

type counters struct {
	accepted, unverified, keyless, sendFailed, notFound atomic.Int64
}

// Stats returns the receiver's counters. Safe to call at any time.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{Accepted: c.accepted.Load(), Unverified: c.unverified.Load(), Keyless: c.keyless.Load(),
		SendFailed: c.sendFailed.Load(), NotFound: c.notFound.Load()}
}

func (st Stats) logAttrs() []any {
	return []any{"accepted", st.Accepted, "unverified", st.Unverified, "keyless", st.Keyless, "send_failed", st.SendFailed, "not_found", st.NotFound}
}

// metrics are the receiver's Prometheus metrics. No label holds a key.
type metrics struct {
	requests    *prometheus.CounterVec
	sendSeconds prometheus.Histogram
	inFlight    prometheus.GaugeFunc
}

func newMetrics(s *Server) *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sqsonce", Subsystem: "ingest", Name: "requests_total",
			Help: "Webhook requests answered, by source and status code.",
		}, []string{"source", "code"}),
		sendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sqsonce", Subsystem: "ingest", Name: "send_duration_seconds",
			Help:    "Time of one SendMessage to SQS, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1ms .. 8s
		}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sqsonce", Subsystem: "ingest", Name: "in_flight",
			Help: "Webhook requests being handled now.",
		}, func() float64 { return float64(s.inFlight.Load()) }),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.sendSeconds, m.inFlight} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
