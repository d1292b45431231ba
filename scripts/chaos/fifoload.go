package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// fifoClass is what an operation of the FIFO campaign is expected to do.
type fifoClass int

const (
	fifoNormal        fifoClass = iota // succeeds at once
	fifoTransient                      // fails 1-2 times (503), then succeeds
	fifoSlow                           // takes 1-6.5 s (2-8.5 s in a burst), some longer than the visibility timeout
	fifoPermanent                      // 422 for ever: dead-lettered, and again after every replay
	fifoBroken                         // 422 until the downstream is fixed: a replay after the fix completes it
	fifoConflictEarly                  // payload b sent right behind payload a; a fails permanently for half of them
	fifoConflictLate                   // payload a completes; payloads b and c are sent after it completed
	fifoKeyless                        // no operation key: dead-lettered, never replayed
	fifoClasses
)

func (c fifoClass) String() string {
	return [...]string{"normal", "transient", "slow", "permanent", "broken until fixed", "conflict (b right behind a)",
		"conflict (b and c after a completed)", "keyless"}[c]
}

// fifoOp is one operation of the FIFO campaign.
type fifoOp struct {
	id     string
	class  fifoClass
	group  string
	bodies []string // payload a, then the conflicting payloads
	// byKey: every send's deduplication id is the operation key, as
	// sqsonce ingest sends; otherwise each send has its own (a retry of a
	// send keeps it).
	byKey bool
	// aPermanent: fifoConflictEarly whose payload a fails permanently, so
	// that both payloads end up in the dead-letter queue under one failed
	// key.
	aPermanent bool
}

// fifoSend is one message the FIFO campaign sends.
type fifoSend struct {
	tag     string // its event.AttrSend attribute, unique
	op      *fifoOp
	variant int  // index into op.bodies
	late    bool // sent once payload a was applied
	// burst: > 0 for the sends of a burst (fifoWorkload.bursts), which
	// leave together, in order, in SendMessageBatch calls.
	burst int
	// group, when not empty, is the group the message is sent in, other
	// than its operation's: a copy of the operation in another group.
	group string

	// Set by the sender.
	dedup   string
	n       int // its place among its group's sends, from 1
	msgID   string
	dropped bool // SQS deduplicated it: nothing was enqueued
	sentAt  time.Time
}

func (s *fifoSend) body() string { return s.op.bodies[s.variant] }

// groupID is the message group s is sent in.
func (s *fifoSend) groupID() string {
	if s.group != "" {
		return s.group
	}
	return s.op.group
}

// shouldComplete reports whether the payload of s should complete: the
// first payload of an operation that neither fails for good nor is keyless
// (a conflicting payload must not, one that fails until the downstream is
// fixed need not).
func (s *fifoSend) shouldComplete() bool {
	if s.variant != 0 {
		return false
	}
	switch s.op.class {
	case fifoNormal, fifoTransient, fifoSlow, fifoConflictLate:
		return true
	case fifoConflictEarly:
		return !s.op.aPermanent
	}
	return false
}

// fifoWorkload is everything the FIFO campaign sends.
type fifoWorkload struct {
	ops  []*fifoOp
	byID map[string]*fifoOp
	main []*fifoSend // in sending order
	late []*fifoSend // conflicting payloads sent after their key completed
	tags map[string]*fifoSend
	// bursts is how many bursts main has: runs of 4 to 8 operations of one
	// ordinary group, sent together, the first and one in the middle slow
	// (2-8.5 s: often longer than the visibility timeout), so that one
	// receive takes several messages of the group and those behind a slow
	// one wait for it, kept by their worker for several beats. Half of
	// them send with them a copy of one of their waiting operations in
	// another ordinary group (crossCopies), as two producers that choose
	// groups differently would: another worker can receive that copy while
	// the operation waits in the first one's hands, and take its claim
	// over once its lease lapses (the ledger away, its worker stopped)
	// while the message ahead of it keeps its own.
	bursts, crossCopies int
}

// newFIFOWorkload makes ops operations spread over groups message groups,
// about bursts of them in bursts (see fifoWorkload.bursts), plus groups
// of their own for the conflicts whose key completes and for
// the keyless messages: replay leaves their dead letters in place, and on
// a FIFO queue a message left holds back the rest of its group, so they
// would keep replay from the groups it has work in.
func newFIFOWorkload(rng *rand.Rand, ops, groups, bursts int) *fifoWorkload {
	w := &fifoWorkload{byID: map[string]*fifoOp{}, tags: map[string]*fifoSend{}}
	conflictGroups := max(2, groups/4)
	conflictGroup := func() string { return fmt.Sprintf("conflict%d", rng.IntN(conflictGroups)) }
	for i := range ops {
		o := &fifoOp{id: fmt.Sprintf("f-%d", i), group: fmt.Sprintf("g%d", rng.IntN(groups))}
		amount := rng.IntN(100000)
		switch r := rng.Float64(); {
		case r < 0.02:
			o.class, o.group = fifoKeyless, "keyless"
			if i%2 == 0 {
				o.bodies = []string{fmt.Sprintf(`{"no_id":%d}`, i)}
			} else {
				o.bodies = []string{fmt.Sprintf("not json #%d", i)}
			}
		case r < 0.08:
			o.class = fifoPermanent
			o.bodies = []string{fmt.Sprintf(`{"id":%q,"permanent":true}`, o.id)}
		case r < 0.13:
			o.class = fifoBroken
			o.bodies = []string{fmt.Sprintf(`{"id":%q,"broken":true,"amount":%d}`, o.id, amount)}
		case r < 0.19:
			o.class = fifoConflictEarly
			o.aPermanent = rng.IntN(2) == 0
			if !o.aPermanent {
				o.group = conflictGroup()
			}
			a := fmt.Sprintf(`{"id":%q,"variant":"a","amount":%d}`, o.id, amount)
			if o.aPermanent {
				a = fmt.Sprintf(`{"id":%q,"variant":"a","permanent":true}`, o.id)
			}
			o.bodies = []string{a, fmt.Sprintf(`{"id":%q,"variant":"b","amount":%d}`, o.id, 100000+amount)}
		case r < 0.24:
			o.class, o.group = fifoConflictLate, conflictGroup()
			o.bodies = []string{
				fmt.Sprintf(`{"id":%q,"variant":"a","amount":%d}`, o.id, amount),
				fmt.Sprintf(`{"id":%q,"variant":"b","amount":%d}`, o.id, 100000+amount),
				fmt.Sprintf(`{"id":%q,"variant":"c","amount":%d}`, o.id, 200000+amount),
			}
		case r < 0.27:
			o.class = fifoSlow
			o.bodies = []string{fmt.Sprintf(`{"id":%q,"slow_ms":%d}`, o.id, 1000+rng.IntN(5500))}
		case r < 0.39:
			o.class = fifoTransient
			if rng.IntN(2) == 0 {
				o.bodies = []string{fmt.Sprintf(`{"id":%q,"fail":%d,"retry_after":1}`, o.id, 1+rng.IntN(2))}
			} else {
				o.bodies = []string{fmt.Sprintf(`{"id":%q,"fail":%d}`, o.id, 1+rng.IntN(2))}
			}
		default:
			o.class = fifoNormal
			o.bodies = []string{fmt.Sprintf(`{"id":%q,"amount":%d}`, o.id, amount)}
		}
		switch o.class {
		case fifoNormal, fifoTransient, fifoSlow, fifoPermanent, fifoBroken:
			o.byKey = rng.IntN(4) == 0
		}
		w.ops = append(w.ops, o)
		w.byID[o.id] = o
	}

	// Bursts, among the operations of the ordinary groups that run or fail
	// by themselves (not the conflicts, whose groups are their own): an
	// operation and the next few in the sending order, moved into its
	// group and right behind it.
	order := rng.Perm(len(w.ops))
	burstOf := map[*fifoOp]int{}
	var members [][]*fifoOp // by burst, from 1
	members = append(members, nil)
	slowBody := func(o *fifoOp) {
		o.class = fifoSlow
		o.bodies = []string{fmt.Sprintf(`{"id":%q,"slow_ms":%d}`, o.id, 2000+rng.IntN(6500))}
	}
	inBurst := func(o *fifoOp) bool {
		switch o.class {
		case fifoNormal, fifoTransient, fifoSlow, fifoPermanent, fifoBroken:
			return burstOf[o] == 0
		}
		return false
	}
	for range bursts {
		at := rng.IntN(len(order))
		k := 4 + rng.IntN(5)
		var ms []*fifoOp
		for i := at; i < len(order) && len(ms) < k; i++ {
			if o := w.ops[order[i]]; inBurst(o) {
				ms = append(ms, o)
			}
		}
		if len(ms) < 4 {
			continue
		}
		b := len(members)
		for _, o := range ms {
			burstOf[o] = b
			o.group = ms[0].group
		}
		slowBody(ms[0])
		slowBody(ms[1+rng.IntN(len(ms)-2)])
		members = append(members, ms)
	}
	w.bursts = len(members) - 1
	// The sending order, each burst where its first operation was.
	var sendOrder []*fifoOp
	for _, i := range order {
		o := w.ops[i]
		switch b := burstOf[o]; {
		case b == 0:
			sendOrder = append(sendOrder, o)
		case members[b][0] == o:
			sendOrder = append(sendOrder, members[b]...)
		}
	}

	newSend := func(o *fifoOp, variant int) *fifoSend {
		s := &fifoSend{tag: fmt.Sprintf("s-%d", len(w.tags)), op: o, variant: variant}
		w.tags[s.tag] = s
		return s
	}
	// The first sends in a random order; a conflicting payload b right
	// behind its payload a; more copies of payload a: right behind it when
	// deduplicated by key (SQS drops them), at later places otherwise (the
	// ledger suppresses them, or dead-letters them as a failed operation).
	// A burst's places, and what lands between them, leave together.
	var seq [][]*fifoSend // per place: sends in order
	first := map[*fifoOp]int{}
	for _, o := range sendOrder {
		place := []*fifoSend{newSend(o, 0)}
		if o.class == fifoConflictEarly {
			place = append(place, newSend(o, 1))
		}
		if o.byKey && rng.IntN(3) == 0 {
			place = append(place, newSend(o, 0))
		}
		first[o] = len(seq)
		seq = append(seq, place)
	}
	extra := map[int][]*fifoSend{}
	for _, o := range w.ops {
		if o.byKey || o.class == fifoKeyless || o.class == fifoConflictLate || rng.IntN(4) != 0 {
			continue
		}
		for range 1 + rng.IntN(2) {
			at := first[o] + rng.IntN(len(seq)-first[o])
			extra[at] = append(extra[at], newSend(o, 0))
		}
	}
	// The copies in another group, right behind their bursts.
	cross := map[int]*fifoSend{} // burst -> its copy
	if groups > 1 {
		for b := 1; b < len(members); b++ {
			if rng.IntN(2) != 0 {
				continue
			}
			ms := members[b]
			var can []*fifoOp
			for _, o := range ms[1:] {
				// A copy deduplicated by key would be dropped at the send.
				if o.class != fifoSlow && !o.byKey {
					can = append(can, o)
				}
			}
			if len(can) == 0 {
				continue
			}
			o := can[rng.IntN(len(can))]
			s := newSend(o, 0)
			for s.group == "" || s.group == o.group {
				s.group = fmt.Sprintf("g%d", rng.IntN(groups))
			}
			cross[b] = s
		}
	}
	w.crossCopies = len(cross)
	for i, place := range seq {
		b := burstOf[place[0].op]
		if b != 0 && members[b][len(members[b])-1] != place[0].op {
			// Not the burst's last place: what comes behind it leaves
			// with it.
			for _, s := range extra[i] {
				s.burst = b
			}
		}
		for _, s := range place {
			s.burst = b
		}
		w.main = append(w.main, place...)
		if x := cross[b]; x != nil && members[b][len(members[b])-1] == place[0].op {
			x.burst = b
			w.main = append(w.main, x)
		}
		w.main = append(w.main, extra[i]...)
	}
	for _, o := range w.ops {
		if o.class == fifoConflictLate {
			for v := 1; v < len(o.bodies); v++ {
				s := newSend(o, v)
				s.late = true
				w.late = append(w.late, s)
			}
		}
	}
	return w
}

// fifoSender sends the FIFO campaign's messages one at a time, through a
// client that loses acknowledgements, and records what SQS answered.
type fifoSender struct {
	client   *sqs.Client
	queueURL string
	faults   *sqstest.Faults

	// mu is held for each send; a replay round holds it so that nothing is
	// sent while replay sends its copies.
	mu       sync.Mutex
	seq      map[string]int       // per group: sends so far
	ids      map[string]*fifoSend // message id -> the send that got it first
	accepted map[string]time.Time // deduplication id -> when SQS first enqueued a send with it
	sent     []*fifoSend          // in the order sent
	failures atomic.Int64         // send calls that failed and were retried
}

func newFIFOSender(endpoint, queueURL string, seed uint64, lostAck float64) *fifoSender {
	faults := sqstest.NewFaults(seed, loopbackTransport())
	faults.Set("SendMessage", sqstest.Rates{LostAck: lostAck, Throttle: lostAck / 4})
	faults.Set("SendMessageBatch", sqstest.Rates{LostAck: lostAck, Throttle: lostAck / 4})
	return &fifoSender{
		client:   newSQSClient(endpoint, &http.Client{Transport: faults, Timeout: 15 * time.Second}),
		queueURL: queueURL,
		faults:   faults,
		seq:      map[string]int{},
		ids:      map[string]*fifoSend{},
		accepted: map[string]time.Time{},
	}
}

// fifoDedupWindow is how long a FIFO queue drops sends with a deduplication
// id it has accepted, whatever became of that message: "any messages sent
// with the same MessageDeduplicationId are accepted successfully but aren't
// delivered during the 5-minute deduplication interval", and "Amazon SQS
// continues tracking the deduplication ID even after the message has been
// received and deleted" (SQS API Reference, SendMessage; Developer Guide,
// FIFO queue key terms).
const fifoDedupWindow = 5 * time.Minute

// send sends s, again with the same deduplication id until SQS answers,
// up to a bound. SQS drops s as a duplicate, and answers with success all
// the same, when an earlier send with its deduplication id was enqueued
// less than fifoDedupWindow before. What the answer then says is not
// documented: fauxqs names the earlier message, moto a new message id that
// no message has; either marks s dropped.
func (f *fifoSender) send(ctx context.Context, s *fifoSend) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := time.Now()
	s.dedup = dedupOf(s)
	in := &sqs.SendMessageInput{
		QueueUrl:               &f.queueURL,
		MessageBody:            aws.String(s.body()),
		MessageGroupId:         aws.String(s.groupID()),
		MessageDeduplicationId: aws.String(s.dedup),
		MessageAttributes:      sendAttrs(s),
	}
	for attempt := 1; ; attempt++ {
		out, err := f.client.SendMessage(ctx, in)
		if err == nil {
			f.sentAs(s, aws.ToString(out.MessageId), start)
			return nil
		}
		f.failures.Add(1)
		if attempt == 20 || ctx.Err() != nil {
			return fmt.Errorf("send %s: gave up after %d attempts: %v", s.tag, attempt, err)
		}
		sleepCtx(ctx, 100*time.Millisecond*time.Duration(min(attempt, 10)))
	}
}

// sendBatch sends ss, in order, with SendMessageBatch, ten at a time: the
// messages of one call enter the queue together, so that a receive can
// take them all. Entries that failed are sent again, in order, with their
// deduplication ids, up to a bound.
func (f *fifoSender) sendBatch(ctx context.Context, ss []*fifoSend) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(ss) > 0 {
		left := ss[:min(len(ss), 10)]
		ss = ss[len(left):]
		for attempt := 1; len(left) > 0; attempt++ {
			start := time.Now()
			entries := make([]types.SendMessageBatchRequestEntry, len(left))
			for i, s := range left {
				s.dedup = dedupOf(s)
				entries[i] = types.SendMessageBatchRequestEntry{
					Id:                     aws.String(strconv.Itoa(i)),
					MessageBody:            aws.String(s.body()),
					MessageGroupId:         aws.String(s.groupID()),
					MessageDeduplicationId: aws.String(s.dedup),
					MessageAttributes:      sendAttrs(s),
				}
			}
			out, err := f.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &f.queueURL, Entries: entries})
			if err == nil {
				ids := map[string]string{}
				for _, e := range out.Successful {
					ids[aws.ToString(e.Id)] = aws.ToString(e.MessageId)
				}
				var rest []*fifoSend
				for i, s := range left {
					if id, ok := ids[strconv.Itoa(i)]; ok {
						f.sentAs(s, id, start)
					} else {
						rest = append(rest, s)
					}
				}
				if left = rest; len(left) == 0 {
					break
				}
			}
			f.failures.Add(1)
			if attempt == 20 || ctx.Err() != nil {
				return fmt.Errorf("send %d messages from %s: gave up after %d attempts: %v", len(left), left[0].tag, attempt, err)
			}
			sleepCtx(ctx, 100*time.Millisecond*time.Duration(min(attempt, 10)))
		}
	}
	return nil
}

// dedupOf is the deduplication id of s: the operation key's when its
// operation's sends are deduplicated by key (as sqsonce ingest sends), its
// own tag otherwise.
func dedupOf(s *fifoSend) string {
	if s.op.byKey {
		return worker.DeduplicationID(s.op.id)
	}
	return s.tag
}

// sendAttrs are the message attributes of s: its tag.
func sendAttrs(s *fifoSend) map[string]types.MessageAttributeValue {
	return map[string]types.MessageAttributeValue{
		event.AttrSend: {DataType: aws.String("String"), StringValue: aws.String(s.tag)},
	}
}

// sentAs records that SQS answered the send of s, made at start, with
// message id: an id that an earlier send got, or a deduplication id that
// an earlier send had enqueued less than fifoDedupWindow before start,
// means SQS dropped s as a duplicate.
func (f *fifoSender) sentAs(s *fifoSend, id string, start time.Time) {
	s.msgID = id
	_, idSeen := f.ids[id]
	first, repeat := f.accepted[s.dedup]
	s.dropped = idSeen || repeat && start.Sub(first) < fifoDedupWindow
	if !s.dropped {
		f.ids[id] = s
		f.accepted[s.dedup] = time.Now()
	}
	f.seq[s.groupID()]++
	s.n = f.seq[s.groupID()]
	s.sentAt = time.Now()
	f.sent = append(f.sent, s)
}
