package worker

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueDepth is what SQS's attributes say of the messages in a queue. The
// counts are approximate (SQS's own word), and say nothing of the age of
// the oldest message: on AWS that is the CloudWatch metric
// ApproximateAgeOfOldestMessage, not an attribute.
type QueueDepth struct {
	Visible  int64 // ApproximateNumberOfMessages: waiting to be received
	InFlight int64 // ApproximateNumberOfMessagesNotVisible: received, not yet deleted or visible again
	Delayed  int64 // ApproximateNumberOfMessagesDelayed: sent with a delay not yet over
}

// depthAttributes are the attributes ReadQueueDepth asks for.
var depthAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// QueueAttributesReader reads a queue's attributes: what ReadQueueDepth
// needs of an SQS client.
type QueueAttributesReader interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// ReadQueueDepth reads the depth of the queue at url with one
// GetQueueAttributes call. An attribute SQS leaves out counts as zero; one
// that is not a number is an error.
func ReadQueueDepth(ctx context.Context, c QueueAttributesReader, url string) (QueueDepth, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: depthAttributes})
	if err != nil {
		return QueueDepth{}, fmt.Errorf("read the depth of queue %s: %w", url, err)
	}
	var d QueueDepth
	for i, dst := range []*int64{&d.Visible, &d.InFlight, &d.Delayed} { // in the order of depthAttributes
		name := depthAttributes[i]
		v, ok := out.Attributes[string(name)]
		if !ok {
			continue
		}
		if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
			return QueueDepth{}, fmt.Errorf("read the depth of queue %s: attribute %s is %q, not a count", url, name, v)
		}
	}
	return d, nil
}

// queueStatsTimeout bounds one read of a queue's depth, retries included.
const queueStatsTimeout = 10 * time.Second

// watchQueue sets the queue's info gauge and reads the depth of the queue
// and of its dead-letter queue into the metrics now and then every
// QueueStatsInterval, in a goroutine of its own, until ctx ends or the
// returned func is called: that func stops the reading and waits for it.
// Without a Registerer, or with a negative interval, it reads nothing. Run
// calls it once it knows the queue.
func (w *Worker) watchQueue(ctx context.Context) (stop func()) {
	var dlq string
	if w.queue.dlqURL != "" {
		dlq = QueueName(w.queue.dlqURL)
	}
	w.metrics.queueInfo.WithLabelValues(w.queueName, dlq, strconv.FormatBool(w.queue.fifo)).Set(1)
	if w.cfg.Registerer == nil || w.cfg.QueueStatsInterval < 0 {
		return func() {}
	}
	return inBackground(ctx, func(ctx context.Context) {
		t := time.NewTicker(w.cfg.QueueStatsInterval)
		defer t.Stop()
		failing := false
		for {
			err := w.readQueueStats(ctx)
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				w.log.Warn("cannot read the queue's depth for the metrics: its gauges are absent until it can", "error", err)
				failing = true
			case err == nil && failing:
				w.log.Info("the queue's depth can be read again")
				failing = false
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// readQueueStats reads the depth of the queue and of its dead-letter queue
// into their gauges, and returns the first error.
func (w *Worker) readQueueStats(ctx context.Context) error {
	err := w.readDepth(ctx, w.cfg.QueueURL, w.metrics.queueMessages, w.queueName)
	if w.queue.dlqURL != "" && ctx.Err() == nil {
		err = cmp.Or(err, w.readDepth(ctx, w.queue.dlqURL, w.metrics.dlqMessages, w.queueName, QueueName(w.queue.dlqURL)))
	}
	return err
}

// readDepth reads the depth of the queue at url into gauges, a series for
// each state labelled with labels and the state. When the read fails the
// series are removed, so that a graph shows a gap rather than an old count.
// When ctx ends meanwhile it leaves them and returns ctx's error.
func (w *Worker) readDepth(ctx context.Context, url string, gauges *prometheus.GaugeVec, labels ...string) error {
	rctx, cancel := context.WithTimeout(ctx, queueStatsTimeout)
	d, err := ReadQueueDepth(rctx, w.sqs, url)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err() // stopping: the last counts stay
	}
	for state, n := range map[string]int64{"visible": d.Visible, "in_flight": d.InFlight, "delayed": d.Delayed} {
		series := append(labels[:len(labels):len(labels)], state)
		if err != nil {
			gauges.DeleteLabelValues(series...)
		} else {
			gauges.WithLabelValues(series...).Set(float64(n))
		}
	}
	return err
}
