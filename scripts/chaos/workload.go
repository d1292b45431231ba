package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

// opClass is what an operation is expected to do.
type opClass int

const (
	classNormal    opClass = iota // succeeds at once
	classTransient                // fails k times (503), then succeeds
	classPermanent                // 422: dead-lettered, never done
	classConflict                 // payload A completes; payload B, same key, is dead-lettered
	classSlow                     // takes longer than the visibility timeout: heartbeats keep it
)

func (c opClass) String() string {
	return [...]string{"normal", "transient", "permanent", "conflict", "slow"}[c]
}

// pattern is how an operation's duplicates are sent.
type pattern int

const (
	patSingle     pattern = iota // once
	patBurst                     // several copies back to back
	patConcurrent                // several copies at once from several goroutines
	patScattered                 // copies at random moments of the main phase
)

// op is one operation of the workload.
type op struct {
	id      string
	class   opClass
	body    string // every delivery of the op carries exactly this body
	bodyB   string // classConflict: the other payload under the same key
	fail    int    // classTransient: 503s before success
	pattern pattern
	copies  int  // deliveries in the main phase
	late    bool // sent once more after it was done
}

// keylessMsg is a delivery without a usable operation key.
type keylessMsg struct {
	body string
	why  string
}

// workload is everything the campaign sends.
type workload struct {
	ops     []*op
	byID    map[string]*op
	keyless []keylessMsg
	// main is the main phase: units in sending order.
	main []unit
	// lateKeyless are keyless deliveries sent in the late phase.
	lateKeyless []string
}

// unit is one send: a batch of bodies in one SendMessageBatch, or one body
// sent by several goroutines at the same moment.
type unit struct {
	bodies     []string
	concurrent bool
}

// planned returns how many deliveries the workload sends, not counting the
// copies that lost acknowledgements add.
func (w *workload) planned() int {
	n := len(w.lateKeyless)
	for _, u := range w.main {
		n += len(u.bodies)
	}
	for _, o := range w.ops {
		if o.late {
			n++
		}
		if o.class == classConflict {
			n++
		}
	}
	return n
}

// newWorkload makes about deliveries deliveries of ops operations.
func newWorkload(rng *rand.Rand, ops, deliveries int) *workload {
	w := &workload{byID: map[string]*op{}}
	for i := range ops {
		o := &op{id: fmt.Sprintf("op-%d", i), copies: 1}
		switch r := rng.Float64(); {
		case r < 0.012:
			o.class = classPermanent
			o.body = fmt.Sprintf(`{"id":%q,"permanent":true}`, o.id)
		case r < 0.024:
			o.class = classConflict
			o.body = fmt.Sprintf(`{"id":%q,"variant":"a","amount":%d}`, o.id, rng.IntN(1000))
			o.bodyB = fmt.Sprintf(`{"id":%q,"variant":"b","amount":%d}`, o.id, 1000+rng.IntN(1000))
		case r < 0.04:
			o.class = classSlow
			o.body = fmt.Sprintf(`{"id":%q,"slow_ms":%d}`, o.id, 5500+rng.IntN(1000))
		case r < 0.18:
			o.class = classTransient
			o.fail = 1 + rng.IntN(2)
			if rng.IntN(2) == 0 {
				o.body = fmt.Sprintf(`{"id":%q,"fail":%d,"retry_after":1}`, o.id, o.fail)
			} else {
				o.body = fmt.Sprintf(`{"id":%q,"fail":%d}`, o.id, o.fail)
			}
		default:
			o.body = fmt.Sprintf(`{"id":%q,"amount":%d}`, o.id, rng.IntN(100000))
		}
		switch r := rng.Float64(); {
		case r < 0.45:
			o.pattern = patSingle
		case r < 0.75:
			o.pattern, o.copies = patBurst, 2+rng.IntN(4)
		case r < 0.9:
			o.pattern, o.copies = patConcurrent, 2+rng.IntN(3)
		default:
			o.pattern, o.copies = patScattered, 2+rng.IntN(2)
		}
		o.late = o.class == classNormal && rng.Float64() < 0.05
		w.ops = append(w.ops, o)
		w.byID[o.id] = o
	}
	nKeyless := max(6, deliveries/100)
	for i := range nKeyless {
		var k keylessMsg
		switch i % 6 {
		case 0:
			k = keylessMsg{fmt.Sprintf("not json at all #%d", i), "not JSON"}
		case 1:
			k = keylessMsg{fmt.Sprintf(`{"no_id":%d}`, i), "no id"}
		case 2:
			k = keylessMsg{fmt.Sprintf(`{"id":{"nested":%d}}`, i), "id is an object"}
		case 3:
			k = keylessMsg{fmt.Sprintf(`{"id":"","n":%d}`, i), "id is empty"}
		case 4:
			k = keylessMsg{fmt.Sprintf(`{"id":null,"n":%d}`, i), "id is null"}
		default:
			k = keylessMsg{fmt.Sprintf(`{"id":[%d]}`, i), "id is an array"}
		}
		w.keyless = append(w.keyless, k)
	}

	// Scattered extra copies until the planned total reaches deliveries.
	total := nKeyless
	for _, o := range w.ops {
		total += o.copies
		if o.late {
			total++
		}
		if o.class == classConflict {
			total++
		}
	}
	for tries := 0; total < deliveries && tries < 10*deliveries; tries++ {
		o := w.ops[rng.IntN(len(w.ops))]
		if o.pattern == patSingle || o.pattern == patScattered {
			o.pattern = patScattered
			o.copies++
			total++
		}
	}

	// The main phase: each op's first delivery at a random place, bursts
	// right behind it, scattered copies later, concurrent copies as their
	// own unit.
	type slot struct {
		body       string
		concurrent int
	}
	var seq []slot
	for _, o := range w.ops {
		switch o.pattern {
		case patConcurrent:
			seq = append(seq, slot{body: o.body, concurrent: o.copies})
		default:
			seq = append(seq, slot{body: o.body})
		}
	}
	rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	first := map[string]int{}
	for i, s := range seq {
		first[s.body] = i
	}
	var out []slot
	extra := map[int][]string{} // scattered copies to insert after a position
	for _, o := range w.ops {
		if o.pattern != patScattered {
			continue
		}
		at := first[o.body]
		for range o.copies - 1 {
			pos := at + rng.IntN(len(seq)-at)
			extra[pos] = append(extra[pos], o.body)
		}
	}
	lateKeyless := nKeyless / 3
	keylessMain := w.keyless[:nKeyless-lateKeyless]
	for _, k := range w.keyless[nKeyless-lateKeyless:] {
		w.lateKeyless = append(w.lateKeyless, k.body)
	}
	for i, s := range seq {
		out = append(out, s)
		if s.concurrent == 0 {
			o := w.byID[idOf(s.body)]
			if o != nil && o.pattern == patBurst {
				for range o.copies - 1 {
					out = append(out, slot{body: s.body})
				}
			}
		}
		for _, b := range extra[i] {
			out = append(out, slot{body: b})
		}
		if len(keylessMain) > 0 && rng.IntN(len(seq)) < 2*len(keylessMain) {
			out = append(out, slot{body: keylessMain[0].body})
			keylessMain = keylessMain[1:]
		}
	}
	for _, k := range keylessMain {
		out = append(out, slot{body: k.body})
	}
	// Batches of up to ten; a concurrent slot is its own unit.
	var cur unit
	flush := func() {
		if len(cur.bodies) > 0 {
			w.main = append(w.main, cur)
			cur = unit{}
		}
	}
	for _, s := range out {
		if s.concurrent > 0 {
			flush()
			u := unit{concurrent: true}
			for range s.concurrent {
				u.bodies = append(u.bodies, s.body)
			}
			w.main = append(w.main, u)
			continue
		}
		cur.bodies = append(cur.bodies, s.body)
		if len(cur.bodies) == 10 || rng.IntN(4) == 0 {
			flush()
		}
	}
	flush()
	return w
}

// idOf returns the "id" string of a JSON body, or "".
func idOf(body string) string {
	var b struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal([]byte(body), &b) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(b.ID, &s) != nil {
		return ""
	}
	return s
}

// sender sends deliveries through an SQS client whose transport loses
// acknowledgements, and counts what the client saw succeed and what the
// server accepted.
type sender struct {
	client   *sqs.Client
	queueURL string
	faults   *sqstest.Faults

	sent     atomic.Int64 // deliveries the client saw succeed
	accepted *atomic.Int64
	failures atomic.Int64 // send calls that failed and were retried

	// tagged: every message sent carries the attribute event.AttrSend, a
	// tag of its own, which its copies keep (those that a lost
	// acknowledgement made too, since a retry sends the same tag); tags
	// holds the body of each tag sent.
	tagged bool
	tagMu  sync.Mutex
	tags   map[string]string
}

// tag returns a new tag for body, when the sender tags its messages (""
// otherwise).
func (s *sender) tag(body string) string {
	if !s.tagged {
		return ""
	}
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	if s.tags == nil {
		s.tags = map[string]string{}
	}
	t := "s-" + strconv.Itoa(len(s.tags)+1)
	s.tags[t] = body
	return t
}

// sentTags returns every tag sent, with its body.
func (s *sender) sentTags() map[string]string {
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	out := make(map[string]string, len(s.tags))
	for t, b := range s.tags {
		out[t] = b
	}
	return out
}

// attrs returns the message attributes of a message with tag.
func attrs(tag string) map[string]types.MessageAttributeValue {
	if tag == "" {
		return nil
	}
	return map[string]types.MessageAttributeValue{event.AttrSend: {DataType: aws.String("String"), StringValue: aws.String(tag)}}
}

func newSender(endpoint, queueURL string, seed uint64, lostAck float64) *sender {
	accepted := &atomic.Int64{}
	faults := sqstest.NewFaults(seed, acceptCounter{base: loopbackTransport(), n: accepted})
	rates := sqstest.Rates{LostAck: lostAck, Throttle: lostAck / 4}
	faults.Set("SendMessage", rates)
	faults.Set("SendMessageBatch", rates)
	return &sender{
		client:   newSQSClient(endpoint, &http.Client{Transport: faults, Timeout: 15 * time.Second}),
		queueURL: queueURL,
		faults:   faults,
		accepted: accepted,
	}
}

// sendBatch sends bodies with SendMessageBatch, again and again for the
// entries that failed, up to a bound.
func (s *sender) sendBatch(ctx context.Context, bodies []string) error {
	left := make(map[string]string, len(bodies))
	tags := make(map[string]string, len(bodies))
	for i, b := range bodies {
		left[strconv.Itoa(i)] = b
		tags[strconv.Itoa(i)] = s.tag(b)
	}
	for attempt := 1; len(left) > 0; attempt++ {
		entries := make([]types.SendMessageBatchRequestEntry, 0, len(left))
		for id, b := range left {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(b), MessageAttributes: attrs(tags[id])})
		}
		out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.queueURL, Entries: entries})
		if err == nil {
			for _, ok := range out.Successful {
				delete(left, aws.ToString(ok.Id))
				s.sent.Add(1)
			}
			if len(left) == 0 {
				return nil
			}
		}
		s.failures.Add(1)
		if attempt == 20 || ctx.Err() != nil {
			return fmt.Errorf("send %d messages: gave up after %d attempts: %v", len(left), attempt, err)
		}
		sleepCtx(ctx, 100*time.Millisecond*time.Duration(min(attempt, 10)))
	}
	return nil
}

// sendOne sends one body with SendMessage, again until it succeeds, up to a
// bound.
func (s *sender) sendOne(ctx context.Context, body string) error {
	tag := s.tag(body)
	for attempt := 1; ; attempt++ {
		_, err := s.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &s.queueURL, MessageBody: aws.String(body), MessageAttributes: attrs(tag)})
		if err == nil {
			s.sent.Add(1)
			return nil
		}
		s.failures.Add(1)
		if attempt == 20 || ctx.Err() != nil {
			return fmt.Errorf("send a message: gave up after %d attempts: %v", attempt, err)
		}
		sleepCtx(ctx, 100*time.Millisecond*time.Duration(min(attempt, 10)))
	}
}

// sendUnit sends one unit; the copies of a concurrent unit leave together
// from as many goroutines.
func (s *sender) sendUnit(ctx context.Context, u unit) error {
	if !u.concurrent {
		return s.sendBatch(ctx, u.bodies)
	}
	start := make(chan struct{})
	errs := make([]error, len(u.bodies))
	var wg sync.WaitGroup
	for i, b := range u.bodies {
		wg.Go(func() {
			<-start
			errs[i] = s.sendOne(ctx, b)
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

// runMain sends the main phase's units from a few goroutines, unit i once
// due(i) holds.
func (s *sender) runMain(ctx context.Context, units []unit, due func(i int) bool) error {
	ch := make(chan unit)
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for u := range ch {
				if err := s.sendUnit(ctx, u); err != nil {
					select {
					case errc <- err:
					default:
					}
					cancel()
				}
			}
		})
	}
	var err error
	for i, u := range units {
		for !due(i) && ctx.Err() == nil {
			sleepCtx(ctx, 10*time.Millisecond)
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case ch <- u:
		case <-ctx.Done():
		}
	}
	close(ch)
	wg.Wait()
	select {
	case err = <-errc:
	default:
		err = ctx.Err()
	}
	return err
}

// acceptCounter counts the messages the server accepted: it sits under the
// fault injection, so a request whose acknowledgement is then lost is
// counted too.
type acceptCounter struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (a acceptCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	op := sqstest.Operation(req)
	resp, err := a.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || (op != "SendMessage" && op != "SendMessageBatch") {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	if op == "SendMessage" {
		a.n.Add(1)
		return resp, nil
	}
	var out struct {
		Successful []json.RawMessage `json:"Successful"`
	}
	if json.Unmarshal(body, &out) == nil {
		a.n.Add(int64(len(out.Successful)))
	}
	return resp, nil
}

func (a acceptCounter) CloseIdleConnections() {
	if c, ok := a.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
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
