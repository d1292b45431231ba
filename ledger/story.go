package ledger

import (
	"encoding/binary"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// What a record keeps of its operation's story: the attempts that ended
// (Record.History) and, when the worker asks, the message itself
// (Record.Payload).
const (
	// MaxHistory is how many attempts Record.History keeps: the last.
	MaxHistory = 20
	// MaxAttemptError bounds Attempt.Error; longer texts are cut.
	MaxAttemptError = 512
	// MaxPayload bounds a kept payload: its body and its attributes'
	// names and values together, in bytes. What is longer is cut.
	MaxPayload = 16 << 10
	// MaxPayloadAttributes bounds how many attributes a payload keeps.
	MaxPayloadAttributes = 50
)

// AttemptOutcome is how an attempt ended.
type AttemptOutcome string

// The outcomes of an attempt.
const (
	// AttemptComplete: Complete recorded the work done.
	AttemptComplete AttemptOutcome = "complete"
	// AttemptFailed: Fail recorded a retryable failure.
	AttemptFailed AttemptOutcome = "failed"
	// AttemptFailedPermanently: Fail recorded a permanent failure.
	AttemptFailedPermanently AttemptOutcome = "failed_permanently"
	// AttemptLapsed: its lease lapsed and a claim took the operation
	// over; whether its work ran, and how far, is not known.
	AttemptLapsed AttemptOutcome = "lapsed"
	// AttemptSuperseded: its own process claimed the operation again
	// (ClaimRequest.Supersede), which ends a claim it no longer runs.
	AttemptSuperseded AttemptOutcome = "superseded"
)

// Attempt is one attempt of an operation that ended.
type Attempt struct {
	// Start is when the attempt started: by the caller's clock when the
	// completion or failure said (Completion.Started, Failure.Started),
	// else the time of its claim, by the ledger's clock.
	Start time.Time
	// End is when it ended, by the ledger's clock.
	End time.Time
	// Owner is its claim's owner token; the worker's are its process id,
	// a slash and a number.
	Owner   string
	Outcome AttemptOutcome
	// Error is a failure's text, cut to MaxAttemptError bytes.
	Error string
	// Derived says the attempt is not stored but read from the record
	// itself: the only attempt of a record that completed first time
	// (see Record.History).
	Derived bool
}

// Payload is a message as the worker passed it to the ledger to keep: its
// body and its string attributes, at most MaxPayload bytes together.
type Payload struct {
	Body       []byte
	Attributes map[string]string
	// Cut says the body or the attributes were cut to fit MaxPayload or
	// MaxPayloadAttributes.
	Cut bool
}

// Bounded returns a copy of p cut to MaxPayload bytes and
// MaxPayloadAttributes attributes (attributes in name order, then the
// body), with Cut set when anything was left out. nil stays nil.
func (p *Payload) Bounded() *Payload {
	if p == nil {
		return nil
	}
	out := &Payload{Cut: p.Cut}
	room := MaxPayload
	names := slices.Sorted(maps.Keys(p.Attributes))
	for _, name := range names {
		v := p.Attributes[name]
		if len(out.Attributes) == MaxPayloadAttributes || len(name)+len(v) > room {
			out.Cut = true
			continue
		}
		if out.Attributes == nil {
			out.Attributes = map[string]string{}
		}
		out.Attributes[name] = v
		room -= len(name) + len(v)
	}
	body := p.Body
	if len(body) > room {
		body, out.Cut = body[:room], true
		// A body of text is cut at a character's boundary.
		if utf8.Valid(p.Body) {
			for len(body) > 0 && !utf8.Valid(body) {
				body = body[:len(body)-1]
			}
		}
	}
	out.Body = slices.Clone(body)
	return out
}

// appendAttempt returns h with a appended, of the last MaxHistory at most,
// a's error cut. It never writes into h's array: records share theirs with
// the copies they were made from.
func appendAttempt(h []Attempt, a Attempt) []Attempt {
	a.Error = textcut.Cut(a.Error, MaxAttemptError)
	a.Derived = false
	if n := len(h) + 1 - MaxHistory; n > 0 {
		h = h[n:]
	}
	out := make([]Attempt, 0, len(h)+1)
	return append(append(out, h...), a)
}

// EndAttempt appends to rec's history the attempt of its current claim,
// which ends at now with outcome (and errText, for a failure), as every
// ledger does when Complete or Fail ends an attempt: it started at started
// when that is set, else at rec.Claimed. rec is the record before the
// transition (its Owner and Claimed are the claim's). A record's first
// attempt that completes is not stored (see Record.History): EndAttempt
// leaves rec's history empty then.
func EndAttempt(rec *Record, started, now time.Time, outcome AttemptOutcome, errText string) {
	if outcome == AttemptComplete && rec.Attempts == 0 && len(rec.History) == 0 {
		return
	}
	rec.History = appendAttempt(rec.History, attemptOf(rec, started, now, outcome, errText))
}

// attemptOf is the attempt of rec's current claim.
func attemptOf(rec *Record, started, now time.Time, outcome AttemptOutcome, errText string) Attempt {
	start := started
	if start.IsZero() || start.After(now) {
		start = rec.Claimed
	}
	return Attempt{Start: start, End: now, Owner: rec.Owner, Outcome: outcome, Error: errText}
}

// DeriveHistory fills the history of a record that completed its only
// attempt, which no ledger stores (see Record.History): its attempt is the
// record's claim, completion and owner. Backends call it on what Get reads.
func DeriveHistory(rec *Record) {
	if len(rec.History) == 0 && rec.State == StateComplete && rec.Attempts == 1 {
		rec.History = []Attempt{{Start: rec.Claimed, End: rec.Completed, Owner: rec.Owner, Outcome: AttemptComplete, Derived: true}}
	}
}

// ValidOutcome reports whether o is one of the outcomes of an attempt.
func ValidOutcome(o AttemptOutcome) bool {
	switch o {
	case AttemptComplete, AttemptFailed, AttemptFailedPermanently, AttemptLapsed, AttemptSuperseded:
		return true
	}
	return false
}

// outcomeCodes are the outcomes as the embedded ledger stores them.
var outcomeCodes = []AttemptOutcome{AttemptComplete, AttemptFailed, AttemptFailedPermanently, AttemptLapsed, AttemptSuperseded}

// EncodeHistory is the binary form of h, as the embedded ledger and
// DynamoDB store it: a version byte, the count, then per attempt its start
// and end as varint Unix nanoseconds, its outcome's code, and its owner and
// error length-prefixed. Later versions only append.
func EncodeHistory(h []Attempt) []byte {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(h)))
	for _, a := range h {
		b = binary.AppendVarint(b, unixNano(a.Start))
		b = binary.AppendVarint(b, unixNano(a.End))
		b = append(b, byte(slices.Index(outcomeCodes, a.Outcome)+1))
		for _, s := range [...]string{a.Owner, a.Error} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return b
}

// DecodeHistory reads what EncodeHistory wrote. ok is false for what it
// cannot read, which counts as no history.
func DecodeHistory(b []byte) (h []Attempt, ok bool) {
	d := decoder{b: b}
	if v := d.byte(); d.err != nil || v < 1 {
		return nil, false
	}
	n := d.uvarint(MaxHistory)
	for range n {
		a := Attempt{Start: fromUnixNano(d.varint()), End: fromUnixNano(d.varint())}
		if c := int(d.byte()); c >= 1 && c <= len(outcomeCodes) {
			a.Outcome = outcomeCodes[c-1]
		}
		a.Owner = string(d.bytes(MaxOwnerLen))
		a.Error = string(d.bytes(MaxAttemptError))
		h = append(h, a)
	}
	if d.err != nil {
		return nil, false
	}
	return h, true
}

// EncodePayload is the binary form of p, as the embedded ledger and
// DynamoDB store it: a version byte, a flags byte (bit 0: Cut), the body
// length-prefixed, the count of attributes, then each attribute's name and
// value length-prefixed, in name order.
func EncodePayload(p *Payload) []byte {
	b := []byte{1, 0}
	if p.Cut {
		b[1] = 1
	}
	b = binary.AppendUvarint(b, uint64(len(p.Body)))
	b = append(b, p.Body...)
	b = binary.AppendUvarint(b, uint64(len(p.Attributes)))
	for _, name := range slices.Sorted(maps.Keys(p.Attributes)) {
		for _, s := range [...]string{name, p.Attributes[name]} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return b
}

// DecodePayload reads what EncodePayload wrote; nil for what it cannot
// read.
func DecodePayload(b []byte) *Payload {
	d := decoder{b: b}
	if v := d.byte(); d.err != nil || v < 1 {
		return nil
	}
	p := &Payload{Cut: d.byte()&1 != 0}
	p.Body = d.bytes(MaxPayload)
	n := d.uvarint(MaxPayloadAttributes)
	for range n {
		name := string(d.bytes(MaxPayload))
		value := string(d.bytes(MaxPayload))
		if p.Attributes == nil {
			p.Attributes = map[string]string{}
		}
		p.Attributes[name] = value
	}
	if d.err != nil {
		return nil
	}
	return p
}

// MinuteTally gathers counts of completions and failures per minute in
// memory, for a shared backend that adds them to its counters now and then
// (Due, Take) rather than with each transition, so that the writers of a
// fleet do not all update one row or item per minute. It is safe for
// concurrent use. Counts not yet taken are lost with the process.
type MinuteTally struct {
	mu     sync.Mutex
	counts map[int64][2]int
	taken  time.Time
}

// Add counts completed completions and failed failures at t.
func (m *MinuteTally) Add(t time.Time, completed, failed int) {
	if completed == 0 && failed == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[int64][2]int{}
	}
	if m.taken.IsZero() {
		// The first counts wait their turn like the next ones: the
		// first transitions of a process pay no write for them.
		m.taken = time.Now()
	}
	c := m.counts[t.Unix()/60]
	c[0] += completed
	c[1] += failed
	m.counts[t.Unix()/60] = c
}

// Due reports whether counts wait and none were taken for every.
func (m *MinuteTally) Due(every time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.counts) > 0 && time.Since(m.taken) >= every
}

// Take returns the counts gathered, by Unix minute, and starts again.
func (m *MinuteTally) Take() map[int64][2]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts
	m.counts, m.taken = nil, time.Now()
	return c
}

// Return gives back counts taken that could not be written.
func (m *MinuteTally) Return(c map[int64][2]int) {
	for minute, n := range c {
		m.Add(time.Unix(minute*60, 0), n[0], n[1])
	}
}

// MinuteFlush is how often a shared backend writes its MinuteTally.
const MinuteFlush = 5 * time.Second
