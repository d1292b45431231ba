package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// How the dead letters are read: receives of ten messages with a
// visibility timeout of 0, so that none is hidden from the worker or a
// replay, until a receive brings nothing new.
const (
	deadLetterReceives = 10
	deadLetterMax      = 100
)

// noReason names the reason of a dead letter without SqsonceReason: SQS
// moved it after the queue's maxReceiveCount receives.
const noReason = "(no reason given: SQS moved it here after too many receives)"

// deadLetter is one message read from the dead-letter queue.
type deadLetter struct {
	ID       string
	Key      string
	KeyErr   string
	Reason   string
	Sent     time.Time
	Receives int
	Replays  int
}

// reasonGroup is the dead letters of one reason.
type reasonGroup struct {
	Reason string
	Count  int
	Keys   []string // up to 5
	Oldest time.Time
}

// keyGroup is the dead letters of one operation.
type keyGroup struct {
	Key     string
	Count   int
	Reasons []string
	Oldest  time.Time
	State   string // of its record: "" when it has none
	Error   string // the record's last error
}

// deadLetters is what was read of the dead-letter queue.
type deadLetters struct {
	Read     int
	ByReason []reasonGroup
	ByKey    []keyGroup
	Keyless  []deadLetter
	Oldest   time.Time // the oldest SentTimestamp read
	Err      string
	ReadAt   time.Time
}

// readDeadLetters reads up to deadLetterMax messages of the dead-letter
// queue without hiding or deleting any, groups them, and looks up the
// record of each operation.
func (h *Handler) readDeadLetters(ctx context.Context) *deadLetters {
	d := &deadLetters{ReadAt: h.cfg.now()}
	seen := map[string]bool{}
	var msgs []deadLetter
	for range deadLetterReceives {
		out, err := h.cfg.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            &h.cfg.DLQURL,
			MaxNumberOfMessages: 10,
			// VisibilityTimeout 0: see zeroVisibility; the SDK drops a 0 here.
			WaitTimeSeconds:             0,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameApproximateReceiveCount},
			MessageAttributeNames:       []string{"All"},
		}, zeroVisibility)
		if err != nil {
			d.Err = fmt.Sprintf("reading the dead-letter queue: %v", err)
			break
		}
		fresh := 0
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id] = true
			fresh++
			msgs = append(msgs, h.deadLetterOf(m))
		}
		if fresh == 0 || len(msgs) >= deadLetterMax {
			break
		}
	}
	d.Read = len(msgs)
	reasons := map[string]*reasonGroup{}
	keys := map[string]*keyGroup{}
	for _, m := range msgs {
		if d.Oldest.IsZero() || m.Sent.Before(d.Oldest) {
			d.Oldest = m.Sent
		}
		g := reasons[m.Reason]
		if g == nil {
			g = &reasonGroup{Reason: m.Reason, Oldest: m.Sent}
			reasons[m.Reason] = g
		}
		g.Count++
		if m.Sent.Before(g.Oldest) {
			g.Oldest = m.Sent
		}
		if m.Key == "" {
			d.Keyless = append(d.Keyless, m)
			continue
		}
		if len(g.Keys) < 5 && !slices.Contains(g.Keys, m.Key) {
			g.Keys = append(g.Keys, m.Key)
		}
		k := keys[m.Key]
		if k == nil {
			k = &keyGroup{Key: m.Key, Oldest: m.Sent}
			keys[m.Key] = k
		}
		k.Count++
		if !slices.Contains(k.Reasons, m.Reason) {
			k.Reasons = append(k.Reasons, m.Reason)
		}
		if m.Sent.Before(k.Oldest) {
			k.Oldest = m.Sent
		}
	}
	for _, g := range reasons {
		d.ByReason = append(d.ByReason, *g)
	}
	slices.SortFunc(d.ByReason, func(a, b reasonGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), a.Oldest.Compare(b.Oldest), strings.Compare(a.Reason, b.Reason))
	})
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, k := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rec, err := h.cfg.Ledger.Get(ctx, k.Key)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				k.State, k.Error = rec.State.String(), rec.LastError
				if rec.Permanent {
					k.State += " (permanent)"
				}
			case errors.Is(err, ledger.ErrNotFound):
			default:
				k.Error = "ledger: " + err.Error()
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		d.ByKey = append(d.ByKey, *k)
	}
	slices.SortFunc(d.ByKey, func(a, b keyGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), a.Oldest.Compare(b.Oldest), strings.Compare(a.Key, b.Key))
	})
	return d
}

// deadLetterOf reads what the console shows of a message.
func (h *Handler) deadLetterOf(m types.Message) deadLetter {
	d := deadLetter{ID: aws.ToString(m.MessageId), Reason: noReason}
	if v, ok := m.MessageAttributes[worker.AttrReason]; ok && aws.ToString(v.StringValue) != "" {
		d.Reason = aws.ToString(v.StringValue)
	}
	if v, ok := m.MessageAttributes["SqsonceReplays"]; ok {
		d.Replays, _ = strconv.Atoi(aws.ToString(v.StringValue))
	}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		d.Sent = time.UnixMilli(ms)
	}
	d.Receives, _ = strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	key, _, err := h.cfg.KeyOf(m)
	if err != nil {
		d.KeyErr = err.Error()
	} else {
		d.Key = key
	}
	return d
}

type deadLettersData struct {
	Configured bool
	DLQ        queueDepth
	Letters    *deadLetters
}

func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) {
	d := deadLettersData{Configured: h.cfg.DLQURL != ""}
	if d.Configured {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		defer cancel()
		d.DLQ = h.cache.depth(ctx, h.cfg.Refresh, h.cfg.SQS, h.cfg.DLQURL)
		d.Letters = h.cache.deadLetters(ctx, h.cfg.Refresh, h)
	}
	h.render(w, r, http.StatusOK, "deadletters", "Dead letters", d)
}

// queueDepth is what SQS reports of a queue's messages.
type queueDepth struct {
	URL                        string
	Visible, InFlight, Delayed int
	Err                        string
	ReadAt                     time.Time
}

// readDepth reads a queue's approximate counts.
func readDepth(ctx context.Context, c SQSClient, url string, now time.Time) queueDepth {
	q := queueDepth{URL: url, ReadAt: now}
	d, err := worker.ReadQueueDepth(ctx, c, url)
	if err != nil {
		q.Err = err.Error()
		return q
	}
	q.Visible, q.InFlight, q.Delayed = int(d.Visible), int(d.InFlight), int(d.Delayed)
	return q
}

// cache keeps the reads that every view of the overview shares for a
// short while, so that many open pages cost one read.
type cache struct {
	mu     sync.Mutex
	ov     ledger.Overview
	ovAt   time.Time
	ovMu   sync.Mutex // one overview read at a time
	depths map[string]queueDepth
	dl     *deadLetters
	dlMu   sync.Mutex
}

// overview returns the overview read within every, or reads it.
func (c *cache) overview(ctx context.Context, every time.Duration, read func(context.Context) (ledger.Overview, error)) (ledger.Overview, time.Time, error) {
	c.ovMu.Lock()
	defer c.ovMu.Unlock()
	c.mu.Lock()
	o, at := c.ov, c.ovAt
	c.mu.Unlock()
	if !at.IsZero() && time.Since(at) < every {
		return o, at, nil
	}
	o, err := read(ctx)
	if err != nil {
		return ledger.Overview{}, time.Now(), err
	}
	at = time.Now()
	c.mu.Lock()
	c.ov, c.ovAt = o, at
	c.mu.Unlock()
	return o, at, nil
}

// depth returns the queue's depth read within every, or reads it.
func (c *cache) depth(ctx context.Context, every time.Duration, client SQSClient, url string) queueDepth {
	c.mu.Lock()
	q, ok := c.depths[url]
	c.mu.Unlock()
	if ok && time.Since(q.ReadAt) < every && q.Err == "" {
		return q
	}
	q = readDepth(ctx, client, url, time.Now())
	c.mu.Lock()
	if c.depths == nil {
		c.depths = map[string]queueDepth{}
	}
	c.depths[url] = q
	c.mu.Unlock()
	return q
}

// deadLetters returns the dead letters read within every, or reads them.
func (c *cache) deadLetters(ctx context.Context, every time.Duration, h *Handler) *deadLetters {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	if c.dl != nil && time.Since(c.dl.ReadAt) < every && c.dl.Err == "" {
		return c.dl
	}
	c.dl = h.readDeadLetters(ctx)
	c.dl.ReadAt = time.Now()
	return c.dl
}

// forgetCached drops what the cache holds, after a change.
func (c *cache) forget() {
	c.mu.Lock()
	c.ovAt, c.depths = time.Time{}, nil
	c.mu.Unlock()
	c.dlMu.Lock()
	c.dl = nil
	c.dlMu.Unlock()
}
