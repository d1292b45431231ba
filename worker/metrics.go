package worker

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus metrics. Counters that Stats also
// reports read the same atomics, so the two never disagree. No metric has a
// per-key label: keys are unbounded.
//
// Every series whose label values are known in advance (each outcome, each
// SQS operation, each ledger call) is made at start, at zero, so that a
// rate or an alert over it works before its first event.
type metrics struct {
	handlerSeconds *prometheus.HistogramVec
	sqsRequests    *prometheus.CounterVec
	sqsErrors      *prometheus.CounterVec
	ledgerSeconds  *prometheus.HistogramVec
	ledgerErrors   *prometheus.CounterVec
	messageAge     prometheus.Histogram
	queueInfo      *prometheus.GaugeVec
	queueMessages  *prometheus.GaugeVec
	dlqMessages    *prometheus.GaugeVec

	// The series of each outcome and each ledger call, looked up once, so
	// that a message costs no label hashing and lookup.
	handlerSeries [numOutcomes]prometheus.Observer
	ledgerSeries  [numLedgerCalls]prometheus.Observer
	ledgerFailed  [numLedgerCalls]prometheus.Counter
}

// handlerOutcome is the outcome label of handlerSeconds.
type handlerOutcome int

const (
	outcomeDone handlerOutcome = iota
	outcomeRetry
	outcomePermanent
	outcomeLeaseLost
	numOutcomes
)

var outcomeLabels = [numOutcomes]string{"done", "retry", "permanent", "lease_lost"}

// handlerDuration returns the series of handlerSeconds for o.
func (m *metrics) handlerDuration(o handlerOutcome) prometheus.Observer {
	return m.handlerSeries[o]
}

// sqsOperations are the SQS calls the worker makes: the operation label of
// sqsRequests and sqsErrors.
var sqsOperations = []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
	"ChangeMessageVisibilityBatch", "SendMessage", "GetQueueAttributes", "GetQueueUrl"}

func newMetrics() *metrics {
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sqsonce", Name: name, Help: help}, labels)
	}
	gaugeVec := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sqsonce", Name: name, Help: help}, labels)
	}
	histogramVec := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "sqsonce", Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &metrics{
		handlerSeconds: histogramVec("handler_duration_seconds", "Time the handler took per attempt, by outcome (done, retry, permanent, lease_lost).",
			prometheus.ExponentialBuckets(0.001, 4, 10), "outcome"), // 1ms .. ~4.4min
		sqsRequests: counterVec("sqs_requests_total", "SQS API calls made, by operation.", "operation"),
		sqsErrors:   counterVec("sqs_request_errors_total", "SQS API calls that failed after the SDK's retries, by operation.", "operation"),
		ledgerSeconds: histogramVec("ledger_call_duration_seconds", "Time of the worker's calls to the ledger, on every backend, by call (claim_batch, complete_batch, fail, release_batch, extend_batch, sweep, ping).",
			prometheus.ExponentialBuckets(0.0001, 2, 18), "call"), // 0.1ms .. 13s
		ledgerErrors: counterVec("ledger_call_errors_total", "The worker's ledger calls that failed (the store did not answer or could not write; not an answer about a record, such as another claim owning it), by call.", "call"),
		messageAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sqsonce", Name: "received_message_age_seconds",
			Help: "Age of each message received, since SQS accepted it (its SentTimestamp), redeliveries included: how long messages wait before they are received.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600,
				3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600, 4 * 24 * 3600},
		}),
		queueInfo: gaugeVec("queue_info", "1, labelled with the queue this worker consumes, its dead-letter queue (empty without a redrive policy) and whether it is FIFO; set when Run has read the queue.",
			"queue", "dead_letter_queue", "fifo"),
		queueMessages: gaugeVec("queue_messages", "Messages in the queue as SQS's attributes count them (approximate), by state: visible (ApproximateNumberOfMessages), in_flight (received, not yet deleted or visible again: ApproximateNumberOfMessagesNotVisible), delayed. Read every QueueStatsInterval; absent while the read fails.",
			"queue", "state"),
		dlqMessages: gaugeVec("dead_letter_queue_messages", "Messages in the dead-letter queue of queue, as SQS's attributes count them (approximate), by state (visible, in_flight, delayed). Absent without a redrive policy and while the read fails.",
			"queue", "dead_letter_queue", "state"),
	}
	for o := range numOutcomes {
		m.handlerSeries[o] = m.handlerSeconds.WithLabelValues(outcomeLabels[o])
	}
	for c := range numLedgerCalls {
		m.ledgerSeries[c] = m.ledgerSeconds.WithLabelValues(ledgerCallLabels[c])
		m.ledgerFailed[c] = m.ledgerErrors.WithLabelValues(ledgerCallLabels[c])
	}
	for _, op := range sqsOperations {
		m.sqsRequests.WithLabelValues(op)
		m.sqsErrors.WithLabelValues(op)
	}
	return m
}

// register adds the worker's metrics to r.
func (w *Worker) register(r prometheus.Registerer) error {
	c := &w.stats
	counter := func(name, help string, v func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sqsonce", Name: name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(v()) })
	}
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "sqsonce", Name: name, Help: help}, v)
	}
	collectors := []prometheus.Collector{
		w.metrics.handlerSeconds, w.metrics.sqsRequests, w.metrics.sqsErrors,
		w.metrics.ledgerSeconds, w.metrics.ledgerErrors, w.metrics.messageAge,
		w.metrics.queueInfo, w.metrics.queueMessages, w.metrics.dlqMessages,
		counter("messages_received_total", "Messages received (deliveries).", c.received.Load, nil),
		counter("operations_claimed_total", "Operations claimed to run: attempts started.", c.claimed.Load, nil),
		counter("operations_completed_total", "Operations recorded complete (durably) by this process.", c.completed.Load, nil),
		counter("operations_failed_total", "Attempts that failed, by class.", c.retried.Load, prometheus.Labels{"class": "retryable"}),
		counter("operations_failed_total", "Attempts that failed, by class.", c.failedPermanently.Load, prometheus.Labels{"class": "permanent"}),
		counter("messages_dead_lettered_total", "Messages moved to the dead-letter queue.", c.deadLettered.Load, nil),
		counter("duplicates_suppressed_total", "Deliveries not run because of the ledger, by reason.", c.duplicates.Load, prometheus.Labels{"reason": "complete"}),
		counter("duplicates_suppressed_total", "Deliveries not run because of the ledger, by reason.", c.inProgressElsewhere.Load, prometheus.Labels{"reason": "in_progress"}),
		counter("duplicates_suppressed_total", "Deliveries not run because of the ledger, by reason.", c.redeliveredFailed.Load, prometheus.Labels{"reason": "failed_permanently"}),
		counter("messages_keyless_total", "Messages without a usable operation key.", c.keyless.Load, nil),
		counter("messages_conflicting_total", "Messages whose key was seen before with a different payload.", c.conflicts.Load, nil),
		counter("messages_unreadable_record_total", "Messages dead-lettered because their operation's ledger record could not be read.", c.unreadable.Load, nil),
		counter("messages_given_back_total", "Messages given back unstarted (FIFO order, shutdown).", c.givenBack.Load, nil),
		counter("lease_takeovers_total", "Operations taken over after another claim's lease lapsed.", c.takeovers.Load, nil),
		counter("lease_lost_total", "Attempts cut off because another claim took the operation over.", c.leaseLost.Load, nil),
		counter("complete_failures_total", "Work done whose completion could not be recorded (it may run again).", c.completeFailed.Load, nil),
		counter("messages_deleted_total", "Messages deleted from the queue.", c.deleted.Load, nil),
		counter("delete_failures_total", "Deletes that failed (the message comes back as a duplicate).", c.deleteFailed.Load, nil),
		counter("heartbeats_total", "Messages kept out of sight by a beat of their batch's heartbeat (running, waiting for a handler or behind their FIFO group, or settling).", c.heartbeats.Load, nil),
		counter("group_waited_total", "FIFO messages received behind another of their group, that waited for it to settle.", c.groupWaited.Load, nil),
		counter("group_wait_beats_total", "Heartbeat beats that kept FIFO messages waiting behind another of their group.", c.groupWaitBeats.Load, nil),
		counter("stale_claims_reclaimed_total", "Claims of this process that no handler here worked on (their failure or release could not be recorded), released and claimed again.", c.staleReclaimed.Load, nil),
		counter("receipts_lost_total", "FIFO messages that did not start because SQS no longer took their receipt handle: their visibility lapsed while they waited, and they were received again or moved to the dead-letter queue.", c.receiptLost.Load, nil),
		counter("s3_payloads_read_total", "Payloads read from S3 for messages that point there.", c.payloadsRead.Load, nil),
		counter("s3_payload_failures_total", "Pointer messages whose payload could not be read, by class.", c.payloadsRetried.Load, prometheus.Labels{"class": "retryable"}),
		counter("s3_payload_failures_total", "Pointer messages whose payload could not be read, by class.", c.payloadsRejected.Load, prometheus.Labels{"class": "permanent"}),
		counter("s3_objects_deleted_total", "Payload objects deleted from S3 after their message.", c.objectsDeleted.Load, nil),
		counter("s3_object_delete_failures_total", "Payload objects whose delete failed (left in S3).", c.objectDeleteFailed.Load, nil),
		gauge("work_in_flight", "Messages in hand: running, claimed ahead of a free handler, or being settled.",
			func() float64 { return float64(w.inFlight()) }),
		gauge("work_capacity", "Messages the worker holds at most: handlers plus those received ahead of a free handler (prefetch).",
			func() float64 { return float64(cap(w.slots)) }),
		gauge("handlers_running", "Handlers running now.", func() float64 { return float64(len(w.handlers)) }),
		gauge("handler_concurrency", "Handlers that may run at once.", func() float64 { return float64(cap(w.handlers)) }),
		gauge("last_receive_timestamp_seconds", "Unix time of the last receive call that succeeded, with or without messages (a long poll returns at least every queue.wait_time); 0 before the first.",
			func() float64 {
				w.healthMu.Lock()
				defer w.healthMu.Unlock()
				if w.lastReceive.IsZero() {
					return 0
				}
				return float64(w.lastReceive.UnixNano()) / 1e9
			}),
		gauge("ledger_up", "1 while the ledger records claims, 0 while new work waits for it.", func() float64 {
			if down, _ := w.ledgerState(); down {
				return 0
			}
			return 1
		}),
		counter("ledger_claim_failures_total", "Batches of claims the ledger could not record (the messages were given back).", c.claimFailures.Load, nil),
		gauge("flow_paused", "1 while flow control holds the intake of the handler's scope (its downstream is down, or an operator paused it), on this worker or any sharing the ledger; 0 otherwise.", func() float64 {
			if w.flow.pausedNow() {
				return 1
			}
			return 0
		}),
		gauge("flow_held", "Messages held for a pause or a rate or concurrency limit (claimed, kept out of sight, no attempt counted).", func() float64 { return float64(w.flow.heldCount()) }),
		counter("flow_pauses_total", "Pauses of the intake this worker found: an outage of the handlers' downstream.", c.flowPauses.Load, nil),
		counter("flow_probes_total", "Probes run while paused, by outcome.", func() int64 { return c.probes.Load() - c.probesFailed.Load() }, prometheus.Labels{"outcome": "answered"}),
		counter("flow_probes_total", "Probes run while paused, by outcome.", c.probesFailed.Load, prometheus.Labels{"outcome": "down"}),
		counter("flow_throttled_total", "Messages held for a rate or concurrency limit, each once per attempt (no attempt counted; never dead-lettered for it).", c.throttled.Load, nil),
		counter("flow_deferred_total", "Messages sent again with a delay (the original deleted once SQS took the copy) rather than held past what can be kept, or dead-lettered because of an outage.", c.deferred.Load, nil),
		counter("flow_observed_total", "What observe mode found and did not do, by action.", c.flowWouldPause.Load, prometheus.Labels{"action": "pause"}),
		counter("flow_observed_total", "What observe mode found and did not do, by action.", c.flowWouldHold.Load, prometheus.Labels{"action": "hold"}),
	}
	for _, col := range collectors {
		if err := r.Register(col); err != nil {
			return err
		}
	}
	return nil
}

// inFlight is the number of messages in hand: received and not settled
// yet (running, waiting for a handler or their group, or being settled).
// A poller's slots held for a receive in flight are not messages.
func (w *Worker) inFlight() int { return int(w.inHand.Load()) }

// instrumented counts the calls and errors of an SQSClient.
type instrumented struct {
	SQSClient
	m *metrics
}

func (c instrumented) observe(op string, err error) {
	c.m.sqsRequests.WithLabelValues(op).Inc()
	if err != nil {
		c.m.sqsErrors.WithLabelValues(op).Inc()
	}
}

// call makes the call of the SQS operation op that f makes, and counts it.
func call[In, Out any](c instrumented, op string, f func(context.Context, In, ...func(*sqs.Options)) (Out, error),
	ctx context.Context, in In, opts []func(*sqs.Options)) (Out, error) {
	out, err := f(ctx, in, opts...)
	c.observe(op, err)
	return out, err
}

func (c instrumented) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.SQSClient.ReceiveMessage(ctx, in, opts...)
	if ctx.Err() == nil { // a long poll cut short by shutdown is no error
		c.observe("ReceiveMessage", err)
	}
	if err == nil && out != nil {
		now := time.Now()
		for _, m := range out.Messages {
			sent, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
			if err == nil {
				c.m.messageAge.Observe(max(now.Sub(time.UnixMilli(sent)).Seconds(), 0))
			}
		}
	}
	return out, err
}

func (c instrumented) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return call(c, "DeleteMessageBatch", c.SQSClient.DeleteMessageBatch, ctx, in, opts)
}

func (c instrumented) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return call(c, "ChangeMessageVisibility", c.SQSClient.ChangeMessageVisibility, ctx, in, opts)
}

func (c instrumented) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return call(c, "ChangeMessageVisibilityBatch", c.SQSClient.ChangeMessageVisibilityBatch, ctx, in, opts)
}

func (c instrumented) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return call(c, "SendMessage", c.SQSClient.SendMessage, ctx, in, opts)
}

func (c instrumented) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return call(c, "GetQueueAttributes", c.SQSClient.GetQueueAttributes, ctx, in, opts)
}

func (c instrumented) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return call(c, "GetQueueUrl", c.SQSClient.GetQueueUrl, ctx, in, opts)
}

// Health is the worker's state as health checks see it.
type Health struct {
	Running bool // Run has started and not yet returned
	// Alive: every receive loop turned recently or is waiting for handler
	// capacity, or the worker is draining. False when a loop is stuck (a
	// receive that never returns).
	Alive bool
	// Ready: a receive succeeded recently (or the loops are waiting for
	// capacity after one did), and the ledger records claims (a ledger
	// that is a Pinger is pinged while the worker is idle: see Pinger).
	// False before the first successful receive.
	Ready bool
	// LedgerDown: the ledger's last claims could not be recorded: no new
	// work starts until it can.
	LedgerDown bool
	// Paused: flow control holds the intake (the handlers' downstream is
	// down, or an operator paused it); it receives nothing on purpose.
	Paused      bool
	Draining    bool      // shutdown has begun
	LastReceive time.Time // last successful receive; zero before the first
	InFlight    int       // messages being handled now
}

// pollerState is what a receive loop reports about itself.
type pollerState struct {
	turned  time.Time // last time the loop moved
	waiting bool      // blocked waiting for a free handler slot
}

// Health returns the worker's health. Safe to call at any time.
func (w *Worker) Health() Health {
	w.healthMu.Lock()
	defer w.healthMu.Unlock()
	now := w.now()
	h := Health{
		Running:     w.running,
		Draining:    w.draining,
		LastReceive: w.lastReceive,
		InFlight:    w.inFlight(),
	}
	// While draining the loops have stopped on purpose: still alive.
	h.Alive = w.running
	allWaiting := true
	for _, p := range w.pollers {
		if !w.draining && !p.waiting && now.Sub(p.turned) > w.cfg.StallAfter {
			h.Alive = false
		}
		allWaiting = allWaiting && p.waiting
	}
	recent := !w.lastReceive.IsZero() && (allWaiting || now.Sub(w.lastReceive) <= w.cfg.StallAfter)
	h.LedgerDown, _ = w.ledgerState()
	h.Paused = w.flow != nil && w.flow.pausedNow()
	// A paused intake receives nothing on purpose: it is ready.
	h.Ready = h.Alive && !w.draining && (recent || h.Paused) && !h.LedgerDown
	return h
}

// turn records that poller i moved (waiting: it now waits for capacity).
func (w *Worker) turn(i int, waiting bool) {
	w.healthMu.Lock()
	w.pollers[i] = pollerState{turned: w.now(), waiting: waiting}
	w.healthMu.Unlock()
}

func (w *Worker) received() {
	w.healthMu.Lock()
	w.lastReceive = w.now()
	w.healthMu.Unlock()
}
