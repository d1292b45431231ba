package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// class is what an operation is expected to do. Its body says so to the
// handler (the downstream, or the chaos worker's transactional handler).
type class int

const (
	normal        class = iota // succeeds at once
	transient                  // fails 1-2 times (503, or a retryable error), then succeeds
	slow                       // takes a while, some longer than the visibility timeout
	permanent                  // fails for good (422): dead-lettered, never done
	broken                     // 422 until the downstream is fixed: a replay after the fix completes it
	conflict                   // payload a completes; the other payloads of its key are sent once it did
	conflictEarly              // payload b sent right behind payload a; a fails permanently for some
	keyless                    // no operation key: dead-lettered, never run
	poison                     // 503 on every execution: dead-lettered after its receives
	classes
)

func (c class) String() string {
	return [...]string{"normal", "transient", "slow", "permanent", "broken until fixed", "conflicting (sent after the first payload completed)",
		"conflicting (b right behind a)", "keyless", "poison"}[c]
}

// op is one operation of a workload.
type op struct {
	id     string
	class  class
	group  string   // its FIFO message group ("" on a standard queue)
	bodies []string // payload a, then the conflicting payloads
	// byKey: every send's deduplication id is the operation key, as
	// sqsonce ingest sends; otherwise each send has its own (FIFO).
	byKey bool
	// aPermanent: conflictEarly whose payload a fails permanently, so that
	// both payloads end up in the dead-letter queue under one failed key.
	aPermanent bool
}

// msg is one message a workload sends.
type msg struct {
	tag     string // its event.AttrSend attribute, unique; every copy keeps it
	op      *op
	variant int    // index into op.bodies
	group   string // when not empty, the group it is sent in, other than its operation's
	late    bool   // sent once its operation was applied a while ago (workload.lateAge), or at the end
	trickle bool   // with late: sent at a random moment of the late sending instead

	// Set by the sender.
	dedup   string
	id      string // the message id SQS answered
	dropped bool   // SQS deduplicated it at the send: nothing was enqueued
	sentAt  time.Time
	n       int // its place among its group's sends, from 1
}

func (m *msg) body() string { return m.op.bodies[m.variant] }

// groupID is the message group m is sent in.
func (m *msg) groupID() string {
	if m.group != "" {
		return m.group
	}
	return m.op.group
}

// shouldComplete reports whether the payload of m should complete: the
// first payload of an operation that neither fails for good nor is keyless
// (a conflicting payload must not, one that fails until the downstream is
// fixed need not).
func (m *msg) shouldComplete() bool {
	switch m.op.class {
	case normal, transient, slow, conflict:
		return m.variant == 0
	case conflictEarly:
		return m.variant == 0 && !m.op.aPermanent
	}
	return false
}

// unit is one send: one message, a batch of messages in SendMessageBatch
// calls (in order), or messages sent at the same moment from as many
// goroutines.
type unit struct {
	msgs       []*msg
	concurrent bool
}

// workload is everything a campaign sends: its operations, the main
// sending (paced by the campaign's timeline) and the late messages.
type workload struct {
	mu      sync.Mutex // ops and byID, which faults add to (extraOps)
	ops     []*op
	byID    map[string]*op
	main    []unit
	late    []*msg
	lateAge time.Duration // how long after its operation was applied a late message is sent
	tags    int
	// bursts counts the FIFO bursts of main: runs of 4 to 8 operations of
	// one group sent together, the first and one in the middle slow, so
	// that one receive takes several messages of the group and those
	// behind a slow one wait in the worker's hands for several beats;
	// crossCopies the bursts sent with a copy of one of their operations
	// in another group, as two producers that choose groups differently
	// would: another worker can receive that copy while the operation
	// waits in the first one's hands, and take its claim over once its
	// lease lapses.
	bursts, crossCopies int
}

func newWorkloadOf(lateAge time.Duration) *workload {
	return &workload{byID: map[string]*op{}, lateAge: lateAge}
}

func (w *workload) add(o *op) *op {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, o)
	w.byID[o.id] = o
	return o
}

func (w *workload) newMsg(o *op, variant int) *msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tags++
	return &msg{tag: "s-" + strconv.Itoa(w.tags), op: o, variant: variant}
}

// allOps returns the operations, also those that faults added.
func (w *workload) allOps() []*op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*op(nil), w.ops...)
}

func (w *workload) opByID(id string) *op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byID[id]
}

// Bodies of the operations, as the handlers read them.
func normalBody(id string, amount int) string {
	return fmt.Sprintf(`{"id":%q,"amount":%d}`, id, amount)
}
func slowBody(id string, ms int) string { return fmt.Sprintf(`{"id":%q,"slow_ms":%d}`, id, ms) }
func transientBody(rng *rand.Rand, id string) string {
	if rng.IntN(2) == 0 {
		return fmt.Sprintf(`{"id":%q,"fail":%d,"retry_after":1}`, id, 1+rng.IntN(2))
	}
	return fmt.Sprintf(`{"id":%q,"fail":%d}`, id, 1+rng.IntN(2))
}
func variantBody(id string, v byte, amount int) string {
	return fmt.Sprintf(`{"id":%q,"variant":"%c","amount":%d}`, id, v, amount)
}

// keylessBody is the i-th body without a usable operation key.
func keylessBody(i int) string {
	return [...]string{"not json at all #%d", `{"no_id":%d}`, `{"id":{"nested":%d}}`, `{"id":"","n":%d}`, `{"id":null,"n":%d}`, `{"id":[%d]}`}[i%6]
}

// standardLoad makes about deliveries messages of ops operations for a
// standard queue: normal, transient, slow (5.5-6.5 s: longer than the
// visibility timeout), permanent and conflicting ones, 5 % of the normal
// ones sent once more after they were done, and 1 % keyless messages; each
// operation sent once, in a burst of 2-5 copies back to back, in 2-4 copies
// at the same moment, or in copies scattered over the sending.
func standardLoad(ops, deliveries int, lateAge time.Duration) func(*rand.Rand) *workload {
	return func(rng *rand.Rand) *workload {
		w := newWorkloadOf(lateAge)
		var seq []unit // each operation's first delivery, and its copies sent with it
		first := map[*op]int{}
		scattered := map[*op]int{}
		total := 0
		for i := range ops {
			id := fmt.Sprintf("op-%d", i)
			o := &op{id: id, class: normal, bodies: []string{normalBody(id, rng.IntN(100000))}}
			switch r := rng.Float64(); {
			case r < 0.012:
				o.class, o.bodies = permanent, []string{fmt.Sprintf(`{"id":%q,"permanent":true}`, id)}
			case r < 0.024:
				o.class, o.bodies = conflict, []string{variantBody(id, 'a', rng.IntN(1000)), variantBody(id, 'b', 1000+rng.IntN(1000))}
			case r < 0.04:
				o.class, o.bodies = slow, []string{slowBody(id, 5500+rng.IntN(1000))}
			case r < 0.18:
				o.class, o.bodies = transient, []string{transientBody(rng, id)}
			}
			w.add(o)
			u := unit{msgs: []*msg{w.newMsg(o, 0)}}
			switch r := rng.Float64(); {
			case r < 0.45:
			case r < 0.75:
				for range 1 + rng.IntN(4) {
					u.msgs = append(u.msgs, w.newMsg(o, 0))
				}
			case r < 0.9:
				u.concurrent = true
				for range 1 + rng.IntN(3) {
					u.msgs = append(u.msgs, w.newMsg(o, 0))
				}
			default:
				scattered[o] = 1 + rng.IntN(2)
			}
			total += len(u.msgs) + scattered[o]
			if o.class == normal && rng.Float64() < 0.05 {
				m := w.newMsg(o, 0)
				m.late = true
				w.late = append(w.late, m)
			}
			if o.class == conflict {
				m := w.newMsg(o, 1)
				m.late = true
				w.late = append(w.late, m)
			}
			seq = append(seq, u)
		}
		nKeyless := max(6, deliveries/100)
		total += nKeyless + len(w.late)
		// Scattered copies until the planned total reaches deliveries.
		for tries := 0; total < deliveries && tries < 10*deliveries; tries++ {
			if u := seq[rng.IntN(len(seq))]; len(u.msgs) == 1 {
				scattered[u.msgs[0].op]++
				total++
			}
		}
		rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
		for i, u := range seq {
			first[u.msgs[0].op] = i
		}
		extra := map[int][]*msg{} // scattered copies to send after a place
		for _, o := range w.ops {
			for range scattered[o] {
				at := first[o] + rng.IntN(len(seq)-first[o])
				extra[at] = append(extra[at], w.newMsg(o, 0))
			}
		}
		var keylessMain []*msg
		for i := range nKeyless {
			o := w.add(&op{id: fmt.Sprintf("keyless-%d", i), class: keyless, bodies: []string{fmt.Sprintf(keylessBody(i), i)}})
			m := w.newMsg(o, 0)
			if i < nKeyless-nKeyless/3 {
				keylessMain = append(keylessMain, m)
			} else {
				m.late, m.trickle = true, true
				w.late = append(w.late, m)
			}
		}
		// Batches of up to ten, in the order of the places; a unit of
		// copies sent at the same moment is its own.
		var cur []*msg
		flush := func() {
			if len(cur) > 0 {
				w.main = append(w.main, unit{msgs: cur})
				cur = nil
			}
		}
		push := func(m *msg) {
			if cur = append(cur, m); len(cur) == 10 || rng.IntN(4) == 0 {
				flush()
			}
		}
		for i, u := range seq {
			if u.concurrent {
				flush()
				w.main = append(w.main, u)
			} else {
				for _, m := range u.msgs {
					push(m)
				}
			}
			for _, m := range extra[i] {
				push(m)
			}
			if len(keylessMain) > 0 && rng.IntN(len(seq)) < 2*len(keylessMain) {
				push(keylessMain[0])
				keylessMain = keylessMain[1:]
			}
		}
		for _, m := range keylessMain {
			push(m)
		}
		flush()
		return w
	}
}

// fifoLoad makes ops operations for a FIFO queue, spread over groups
// message groups, about bursts of them in bursts (see workload.bursts),
// plus groups of their own for the conflicts whose key completes and for
// the keyless messages: replay leaves their dead letters in place, and on
// a FIFO queue a message left holds back the rest of its group, so they
// would keep replay from the groups it has work in. A quarter of the
// operations that may be sent again are deduplicated by key (some sent
// twice right away, which SQS drops), a quarter of the others sent again
// later.
func fifoLoad(ops, groups, bursts int) func(*rand.Rand) *workload {
	return func(rng *rand.Rand) *workload {
		w := newWorkloadOf(2 * time.Second)
		conflictGroup := func() string { return fmt.Sprintf("conflict%d", rng.IntN(max(2, groups/4))) }
		for i := range ops {
			id := fmt.Sprintf("f-%d", i)
			o := &op{id: id, class: normal, group: fmt.Sprintf("g%d", rng.IntN(groups))}
			amount := rng.IntN(100000)
			switch r := rng.Float64(); {
			case r < 0.02:
				o.class, o.group, o.bodies = keyless, "keyless", []string{fmt.Sprintf(keylessBody(i%2), i)}
			case r < 0.08:
				o.class, o.bodies = permanent, []string{fmt.Sprintf(`{"id":%q,"permanent":true}`, id)}
			case r < 0.13:
				o.class, o.bodies = broken, []string{fmt.Sprintf(`{"id":%q,"broken":true,"amount":%d}`, id, amount)}
			case r < 0.19:
				o.class, o.aPermanent = conflictEarly, rng.IntN(2) == 0
				o.bodies = []string{variantBody(id, 'a', amount), variantBody(id, 'b', 100000+amount)}
				if o.aPermanent {
					o.bodies[0] = fmt.Sprintf(`{"id":%q,"variant":"a","permanent":true}`, id)
				} else {
					o.group = conflictGroup()
				}
			case r < 0.24:
				o.class, o.group = conflict, conflictGroup()
				o.bodies = []string{variantBody(id, 'a', amount), variantBody(id, 'b', 100000+amount), variantBody(id, 'c', 200000+amount)}
			case r < 0.27:
				o.class, o.bodies = slow, []string{slowBody(id, 1000+rng.IntN(5500))}
			case r < 0.39:
				o.class, o.bodies = transient, []string{transientBody(rng, id)}
			default:
				o.bodies = []string{normalBody(id, amount)}
			}
			o.byKey = o.class <= broken && rng.IntN(4) == 0
			w.add(o)
		}

		// Bursts, among the operations of the ordinary groups that run or
		// fail by themselves: an operation and the next few in the sending
		// order, moved into its group and right behind it.
		order := rng.Perm(len(w.ops))
		burstOf := map[*op]int{}
		members := [][]*op{nil} // by burst, from 1
		for range bursts {
			var ms []*op
			at, k := rng.IntN(len(order)), 4+rng.IntN(5)
			for i := at; i < len(order) && len(ms) < k; i++ {
				if o := w.ops[order[i]]; o.class <= broken && burstOf[o] == 0 {
					ms = append(ms, o)
				}
			}
			if len(ms) < 4 {
				continue
			}
			for _, o := range ms {
				burstOf[o], o.group = len(members), ms[0].group
			}
			for _, o := range []*op{ms[0], ms[1+rng.IntN(len(ms)-2)]} {
				o.class, o.bodies = slow, []string{slowBody(o.id, 2000+rng.IntN(6500))}
			}
			members = append(members, ms)
		}
		w.bursts = len(members) - 1

		// The places in sending order, each burst where its first
		// operation was: a conflicting payload b right behind its payload
		// a, and a copy deduplicated by key right behind it for some.
		var seq [][]*msg
		first := map[*op]int{}
		for _, i := range order {
			o := w.ops[i]
			ms := []*op{o}
			if b := burstOf[o]; b != 0 {
				if members[b][0] != o {
					continue
				}
				ms = members[b]
			}
			for _, o := range ms {
				place := []*msg{w.newMsg(o, 0)}
				if o.class == conflictEarly {
					place = append(place, w.newMsg(o, 1))
				}
				if o.byKey && rng.IntN(3) == 0 {
					place = append(place, w.newMsg(o, 0))
				}
				first[o] = len(seq)
				seq = append(seq, place)
			}
		}
		// More copies of payload a at later places (the ledger suppresses
		// them, or dead-letters them as a failed operation).
		extra := map[int][]*msg{}
		for _, o := range w.ops {
			if o.byKey || o.class == keyless || o.class == conflict || rng.IntN(4) != 0 {
				continue
			}
			for range 1 + rng.IntN(2) {
				at := first[o] + rng.IntN(len(seq)-first[o])
				extra[at] = append(extra[at], w.newMsg(o, 0))
			}
		}
		// The copies in another group, sent with their bursts.
		cross := map[int]*msg{}
		for b := 1; b < len(members) && groups > 1; b++ {
			var can []*op
			for _, o := range members[b][1:] {
				if o.class != slow && !o.byKey { // a copy deduplicated by key would be dropped
					can = append(can, o)
				}
			}
			if rng.IntN(2) != 0 || len(can) == 0 {
				continue
			}
			m := w.newMsg(can[rng.IntN(len(can))], 0)
			for m.group == "" || m.group == m.op.group {
				m.group = fmt.Sprintf("g%d", rng.IntN(groups))
			}
			cross[b] = m
		}
		w.crossCopies = len(cross)
		// A burst leaves whole, with its copy in another group and what
		// lands between its places; every other message alone.
		var cur unit
		for i, place := range seq {
			b := burstOf[place[0].op]
			last := b == 0 || members[b][len(members[b])-1] == place[0].op
			if b == 0 {
				place, extra[i] = nil, append(place, extra[i]...)
			}
			cur.msgs = append(cur.msgs, place...)
			if b != 0 && last {
				if x := cross[b]; x != nil {
					cur.msgs = append(cur.msgs, x)
				}
				w.main, cur = append(w.main, cur), unit{}
			}
			for _, m := range extra[i] {
				if last {
					w.main = append(w.main, unit{msgs: []*msg{m}})
				} else {
					cur.msgs = append(cur.msgs, m)
				}
			}
		}
		for _, o := range w.ops {
			for v := 1; o.class == conflict && v < len(o.bodies); v++ {
				m := w.newMsg(o, v)
				m.late = true
				w.late = append(w.late, m)
			}
		}
		return w
	}
}

// sender sends a workload's messages through an SQS client whose transport
// loses acknowledgements, each tagged (event.AttrSend), and records what
// SQS answered.
type sender struct {
	client *sqs.Client
	queue  string
	fifo   bool
	faults *sqstest.Faults
	// gate: on a FIFO queue each send holds it whole, so that the order of
	// the sends is the order SQS enqueued them in; on a standard queue
	// sends share it. A replay round holds it whole: nothing is sent
	// meanwhile.
	gate sync.RWMutex

	mu       sync.Mutex
	seq      map[string]int       // per group: sends so far
	ids      map[string]bool      // message ids SQS answered
	accepted map[string]time.Time // deduplication id -> when SQS first enqueued a send with it
	sent     []*msg
}

func newSender(endpoint, queue string, fifo bool, seed uint64, lostAck float64) *sender {
	faults := sqstest.NewFaults(seed, loopbackTransport())
	faults.Set("SendMessageBatch", sqstest.Rates{LostAck: lostAck, Throttle: lostAck / 4})
	return &sender{client: newSQSClient(endpoint, &http.Client{Transport: faults, Timeout: 15 * time.Second}), queue: queue, fifo: fifo,
		faults: faults, seq: map[string]int{}, ids: map[string]bool{}, accepted: map[string]time.Time{}}
}

// fifoDedupWindow is how long a FIFO queue drops sends with a deduplication
// id it has accepted, whatever became of that message: "any messages sent
// with the same MessageDeduplicationId are accepted successfully but aren't
// delivered during the 5-minute deduplication interval", and "Amazon SQS
// continues tracking the deduplication ID even after the message has been
// received and deleted" (SQS API Reference, SendMessage; Developer Guide,
// FIFO queue key terms).
const fifoDedupWindow = 5 * time.Minute

// send sends u: each message again until SQS answers it, up to a bound.
func (s *sender) send(ctx context.Context, u unit) error {
	if s.fifo {
		s.gate.Lock()
		defer s.gate.Unlock()
	} else {
		s.gate.RLock()
		defer s.gate.RUnlock()
	}
	if !u.concurrent {
		for len(u.msgs) > 0 {
			n := min(len(u.msgs), 10)
			if err := s.batch(ctx, u.msgs[:n]); err != nil {
				return err
			}
			u.msgs = u.msgs[n:]
		}
		return nil
	}
	start := make(chan struct{})
	errs := make([]error, len(u.msgs))
	var wg sync.WaitGroup
	for i, m := range u.msgs {
		wg.Go(func() {
			<-start
			errs[i] = s.batch(ctx, []*msg{m})
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

// batch sends ms (ten at most) with SendMessageBatch, and again the
// entries that failed, in order, up to a bound. SQS
// drops a FIFO message as a duplicate, and answers with success all the
// same, when an earlier send with its deduplication id was enqueued less
// than fifoDedupWindow before. What the answer then says is not
// documented: fauxqs names the earlier message, moto a new message id that
// no message has; either marks the message dropped.
func (s *sender) batch(ctx context.Context, ms []*msg) (err error) {
	for attempt := 1; len(ms) > 0; attempt++ {
		start := time.Now()
		entries := make([]types.SendMessageBatchRequestEntry, len(ms))
		for i, m := range ms {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(m.body()),
				MessageAttributes: map[string]types.MessageAttributeValue{event.AttrSend: {DataType: aws.String("String"), StringValue: aws.String(m.tag)}}}
			if s.fifo {
				m.dedup = m.tag
				if m.op.byKey {
					m.dedup = worker.DeduplicationID(m.op.id)
				}
				entries[i].MessageGroupId, entries[i].MessageDeduplicationId = aws.String(m.groupID()), aws.String(m.dedup)
			}
		}
		ids := map[string]string{}
		var out *sqs.SendMessageBatchOutput
		out, err = s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.queue, Entries: entries})
		for i := 0; err == nil && i < len(out.Successful); i++ {
			ids[aws.ToString(out.Successful[i].Id)] = aws.ToString(out.Successful[i].MessageId)
		}
		var rest []*msg
		for i, m := range ms {
			if id, ok := ids[strconv.Itoa(i)]; ok {
				s.sentAs(m, id, start)
			} else {
				rest = append(rest, m)
			}
		}
		if ms = rest; len(ms) == 0 {
			break
		}
		if attempt == 20 || ctx.Err() != nil {
			return fmt.Errorf("send %d messages from %s: gave up after %d attempts: %v", len(ms), ms[0].tag, attempt, err)
		}
		sleepCtx(ctx, 100*time.Millisecond*time.Duration(min(attempt, 10)))
	}
	return nil
}

// sentAs records that SQS answered the send of m, made at start, with
// message id: an id that an earlier send got, or a deduplication id that
// an earlier send had enqueued less than fifoDedupWindow before start,
// means SQS dropped m as a duplicate.
func (s *sender) sentAs(m *msg, id string, start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.id = id
	first, repeat := s.accepted[m.dedup]
	m.dropped = s.fifo && (s.ids[id] || repeat && start.Sub(first) < fifoDedupWindow)
	if !m.dropped {
		s.ids[id] = true
		s.accepted[m.dedup] = time.Now()
	}
	s.seq[m.groupID()]++
	m.n, m.sentAt = s.seq[m.groupID()], time.Now()
	s.sent = append(s.sent, m)
}

// sentMsgs returns the messages SQS answered, in the order it did.
func (s *sender) sentMsgs() []*msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*msg(nil), s.sent...)
}

// idOf returns the "id" string of a JSON body, or "".
func idOf(body string) string {
	var b struct {
		ID any `json:"id"`
	}
	_ = json.Unmarshal([]byte(body), &b)
	s, _ := b.ID.(string)
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
