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
	"github.com/sqsonce/sqsonce/replay"
	"github.com/sqsonce/sqsonce/worker"
)

// How the dead letters are read: receives of ten messages with a
// visibility timeout of 0, so that none is hidden from the worker or a
// replay, until a receive brings nothing new. SQS returns a sample of a
// large queue: the pages say how many were read.
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
	Group    string // replay.ReasonGroupOf: what a replay by group selects
	Sent     time.Time
	Receives int
	Replays  int
	Payload  *shownPayload // its body and string attributes, bounded
}

// reasonGroup is the dead letters read of one reason group.
type reasonGroup struct {
	Group   string
	Example string // a reason of the group
	Count   int
	Keys    []string // up to 5
	Oldest  time.Time
}

// keyGroup is the dead letters of one operation.
type keyGroup struct {
	Key     string
	Count   int
	Reasons []string
	Oldest  time.Time
	State   string // of its record: "" when it has none
	Error   string // the record's last error, or why it could not be read
}

// deadLetters is what was read of the dead-letter queue.
type deadLetters struct {
	Read     int
	ByReason []reasonGroup
	ByKey    []keyGroup
	Keyless  []deadLetter
	Oldest   time.Time // the oldest SentTimestamp read
	Err      string
	// LedgerErr says the ledger could not be read for the records of the
	// operations: their states are not known.
	LedgerErr string
	ReadAt    time.Time
}

// readDLQ reads up to most messages of the dead-letter queue without
// hiding or deleting any, and returns those keep wants, how many it read,
// and why it stopped early ("" when it did not).
func (h *Handler) readDLQ(ctx context.Context, most int, keep func(*deadLetter) bool) ([]deadLetter, int, string) {
	seen := map[string]bool{}
	var out []deadLetter
	for range deadLetterReceives {
		res, err := h.cfg.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            &h.cfg.DLQURL,
			MaxNumberOfMessages: 10,
			// VisibilityTimeout 0: see zeroVisibility; the SDK drops a 0 here.
			WaitTimeSeconds:             0,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameApproximateReceiveCount},
			MessageAttributeNames:       []string{"All"},
		}, zeroVisibility)
		if err != nil {
			return out, len(seen), fmt.Sprintf("reading the dead-letter queue: %v", err)
		}
		fresh := 0
		for _, m := range res.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id] = true
			fresh++
			if l := h.deadLetterOf(m); keep == nil || keep(&l) {
				out = append(out, l)
			}
		}
		if fresh == 0 || len(seen) >= most {
			break
		}
	}
	return out, len(seen), ""
}

// readDeadLetters reads up to deadLetterMax messages of the dead-letter
// queue without hiding or deleting any, groups them, and looks up the
// record of each operation.
func (h *Handler) readDeadLetters(ctx context.Context) *deadLetters {
	d := &deadLetters{ReadAt: h.cfg.now()}
	msgs, read, err := h.readDLQ(ctx, deadLetterMax, nil)
	d.Read, d.Err = read, err
	reasons := map[string]*reasonGroup{}
	keys := map[string]*keyGroup{}
	for _, m := range msgs {
		if d.Oldest.IsZero() || m.Sent.Before(d.Oldest) {
			d.Oldest = m.Sent
		}
		g := reasons[m.Group]
		if g == nil {
			g = &reasonGroup{Group: m.Group, Example: m.Reason, Oldest: m.Sent}
			reasons[m.Group] = g
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
		return cmp.Or(cmp.Compare(b.Count, a.Count), a.Oldest.Compare(b.Oldest), strings.Compare(a.Group, b.Group))
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
				k.State, k.Error = "unknown", "the ledger could not be read: "+err.Error()
				d.LedgerErr = err.Error()
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
	d := deadLetter{ID: aws.ToString(m.MessageId), Reason: noReason, Group: replay.ReasonGroupOf(m)}
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
	p := &ledger.Payload{Body: []byte(aws.ToString(m.Body))}
	for name, v := range m.MessageAttributes {
		if v.StringValue != nil {
			if p.Attributes == nil {
				p.Attributes = map[string]string{}
			}
			p.Attributes[name] = aws.ToString(v.StringValue)
		}
	}
	d.Payload = showPayload(p)
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
	Snap       *snapshot
	// DLQTotal is SQS's approximate count of the queue's messages.
	DLQTotal int
	Letters  *deadLetters
	// Key, when set, is the operation whose dead letters the page shows
	// (Mine), searched among Searched read.
	Key      string
	Mine     []deadLetter
	Searched int
	KeyErr   string
}

func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) {
	d := deadLettersData{Configured: h.cfg.DLQURL != "", Key: r.URL.Query().Get("key")}
	status := http.StatusOK
	if d.Configured {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		defer cancel()
		d.Snap = h.snap(ctx)
		d.DLQTotal = d.Snap.DLQ.Visible + d.Snap.DLQ.InFlight + d.Snap.DLQ.Delayed
		if d.Key != "" {
			if err := ledger.ValidateKey(d.Key); err != nil {
				h.fail(w, r, http.StatusBadRequest, "Not an operation key: "+err.Error())
				return
			}
			d.Mine, d.Searched, d.KeyErr = h.readDLQ(ctx, deadLetterMax, func(l *deadLetter) bool { return l.Key == d.Key })
		} else {
			d.Letters = h.cache.deadLetters(ctx, h.cfg.Refresh, h)
			if d.Letters.LedgerErr != "" {
				status = http.StatusBadGateway
			}
		}
		if d.Snap.OverviewErr != "" {
			status = http.StatusBadGateway
		}
	}
	h.render(w, r, status, "deadletters", "Dead letters", d)
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

// cache keeps the reads that every view shares for a short while
// (Config.Refresh), so that many open pages, refreshing themselves, cost
// one read of each.
type cache struct {
	snapMu sync.Mutex // one snapshot read at a time
	mu     sync.Mutex
	snap   *snapshot
	dl     *deadLetters
	dlMu   sync.Mutex
}

// snapshot returns the snapshot read within every, or reads it.
func (c *cache) snapshot(ctx context.Context, every time.Duration, read func(context.Context) *snapshot) *snapshot {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	c.mu.Lock()
	s := c.snap
	c.mu.Unlock()
	if s != nil && time.Since(s.readAt) < every {
		return s
	}
	s = read(ctx)
	c.mu.Lock()
	c.snap = s
	c.mu.Unlock()
	return s
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

// forget drops what the cache holds, after a change.
func (c *cache) forget() {
	c.mu.Lock()
	c.snap = nil
	c.mu.Unlock()
	c.dlMu.Lock()
	c.dl = nil
	c.dlMu.Unlock()
}
