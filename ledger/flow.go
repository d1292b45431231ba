package ledger

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// FlowSchemaVersion is the version of what this code keeps for flow control
// (the failure classes and dead-letter marks of records, flow documents,
// rate buckets, concurrency slots and the process registry). Every backend
// records it in the ledger when it creates that state (the embedded ledger
// at Open, a shared one at Init) and reports it with FlowSchema: a ledger
// made by an older sqsonce reports 0, one upgraded by a newer sqsonce a
// higher number. It is apart from the core schema version, which stays as
// it was, so that an older sqsonce keeps working on an upgraded ledger.
const FlowSchemaVersion = 2

// Limits of flow control state.
const (
	// MaxFlowData is the largest FlowDoc.Data.
	MaxFlowData = 4096
	// MaxFlowName bounds a flow scope, a rate bucket's, a slot pool's
	// and a process's name, in bytes.
	MaxFlowName = MaxKeyLen
	// MaxSlotLimit bounds SlotRequest.Limit.
	MaxSlotLimit = 10_000
	// MaxSlotLease bounds the lease of a slot.
	MaxSlotLease = 24 * time.Hour
	// MaxReserve bounds a bucket's Burst.
	MaxReserve = 1_000_000
	// MaxTokens bounds the tokens of one Reservation: a worker asks for
	// a received batch's at a time (ten), and PostgreSQL plans a call
	// token by token, at a cost that grows faster than their number.
	MaxTokens = 1000
	// MaxProcessText bounds Process.Host, Version and Queue; longer
	// texts are cut. Process.PausedWhy is cut to MaxErrorLen.
	MaxProcessText = 2048
)

// How long flow state is kept once it has no use.
const (
	// FlowKeep is how long a flow document that expired or was deleted
	// is kept, absent to every read, so that its version number is not
	// used again (see PutFlow); then it is swept.
	FlowKeep = 24 * time.Hour
	// ProcessKeep is how long Processes still lists a process whose
	// registration expired (it stopped beating without RemoveProcess: it
	// was killed, or lost the ledger); then it is swept.
	ProcessKeep = 24 * time.Hour
	// BucketIdle is how long after its theoretical arrival time a rate
	// bucket is kept; an idle bucket is absent (a full burst) and swept.
	BucketIdle = time.Hour
	// SlotIdle is how long after its lease lapsed (or it was released)
	// a shared backend keeps a slot's row or item; then it is swept.
	SlotIdle = time.Hour
)

// validName checks a flow scope, bucket, pool or process name.
func validName(what, name string) error {
	switch {
	case name == "" || len(name) > MaxFlowName:
		return fmt.Errorf("%s %q: want 1 to %d bytes: %w", what, textcut.Cut(name, 64), MaxFlowName, ErrInvalidArgument)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s %q: not valid UTF-8: %w", what, name, ErrInvalidArgument)
	}
	return nil
}

// DeadLetter records on a record that its message is being dead-lettered
// (CopyID empty: the intent, recorded before the copy is sent) or was
// (CopyID set: the dead-letter queue accepted the copy, whose message id it
// is). See MarkDeadLettered.
type DeadLetter struct {
	Key string
	// Owner is the caller's owner token: the claim's, when the caller
	// holds one. A record in progress under another owner whose lease
	// has not lapsed is not marked (ErrNotOwner): another claim runs the
	// operation.
	Owner string
	// Reason says why, cut to MaxErrorLen bytes; empty keeps the
	// reason recorded before.
	Reason string
	// At is when the ledger recorded the mark, by its clock. It is set
	// by the ledger; a value given is ignored.
	At time.Time
	// CopyID is the message id of the copy in the dead-letter queue, cut
	// to MaxMessageIDLen bytes; empty keeps the one recorded before.
	CopyID string
}

// Validate checks a dead-letter mark as every ledger does: the key and an
// owner of 1 to MaxOwnerLen bytes. Errors wrap ErrInvalidKey or
// ErrInvalidArgument.
func (d *DeadLetter) Validate() error {
	if err := ValidateKey(d.Key); err != nil {
		return fmt.Errorf("mark dead-lettered: %w", err)
	}
	if d.Owner == "" || len(d.Owner) > MaxOwnerLen {
		return fmt.Errorf("mark dead-lettered %q: owner must be 1 to %d bytes: %w", d.Key, MaxOwnerLen, ErrInvalidArgument)
	}
	return nil
}

// MarkDeadLetter applies d to rec at now, as every ledger does: it sets
// DeadLettered, the reason and the copy's id (keeping those recorded before
// where d leaves them empty), and reports ErrNotOwner when rec is held by
// another owner's live lease. The caller stamps Updated and Expires.
func MarkDeadLetter(rec *Record, d *DeadLetter, now time.Time) error {
	if rec.State == StateInProgress && rec.Owner != d.Owner && rec.LeaseExpiry.After(now) {
		return fmt.Errorf("mark dead-lettered %q: in progress under claim %q, not %q: %w", d.Key, rec.Owner, d.Owner, ErrNotOwner)
	}
	rec.DeadLettered = now
	if d.Reason != "" {
		rec.DeadLetterReason = textcut.Cut(d.Reason, MaxErrorLen)
	}
	if d.CopyID != "" {
		rec.DeadLetterCopyID = textcut.Cut(d.CopyID, MaxMessageIDLen)
	}
	return nil
}

// ReasonGroup is the group of a dead-letter reason (or of any error text)
// for counting: the text with every word that carries an id replaced by
// '#'. A word is a run of letters, digits, '_', '-' and '.'; it carries an
// id when it holds a digit, or when it is a run of at least 8 hexadecimal
// letters. "GET /orders/8812: 503 from 10.0.0.7" and "GET /orders/17: 503
// from 10.0.0.9" are both "GET /orders/#: # from #".
func ReasonGroup(reason string) string {
	var b strings.Builder
	b.Grow(len(reason))
	word := func(r rune) bool {
		return r == '_' || r == '-' || r == '.' || r < utf8.RuneSelf && ('0' <= r && r <= '9' || 'a' <= r|0x20 && r|0x20 <= 'z')
	}
	for i := 0; i < len(reason); {
		r, n := utf8.DecodeRuneInString(reason[i:])
		if !word(r) {
			b.WriteString(reason[i : i+n])
			i += n
			continue
		}
		j := i
		digit, hex := false, true
		for j < len(reason) {
			c := rune(reason[j])
			if c >= utf8.RuneSelf || !word(c) {
				break
			}
			switch {
			case '0' <= c && c <= '9':
				digit = true
			case 'a' <= c|0x20 && c|0x20 <= 'f':
			default:
				hex = false
			}
			j++
		}
		w := reason[i:j]
		if digit || hex && len(w) >= 8 {
			b.WriteByte('#')
		} else {
			b.WriteString(w)
		}
		i = j
	}
	return b.String()
}

// FlowDoc is a small document that the worker keeps per scope (the pause,
// probe and ramp state of a queue's intake, say), opaque to the ledger and
// written with a compare-and-set on its version.
type FlowDoc struct {
	Scope string
	// Version counts the writes of the scope's document: PutFlow writes
	// ifVersion+1. A scope's versions never repeat, also across its
	// documents' deletions and expiries, as long as the ledger keeps its
	// tombstone (FlowKeep).
	Version int64
	// Data is the worker's, at most MaxFlowData bytes.
	Data []byte
	// Updated is when it was written, by the ledger's clock; set by the
	// ledger.
	Updated time.Time
	// Expires is when it stops being live, by the ledger's clock: from
	// then on it is absent to every read. Zero: never. PutFlow sets it
	// from TTL when TTL is positive.
	Expires time.Time
	// TTL, when positive, makes PutFlow set Expires to the ledger's now
	// plus TTL, so that the caller needs no clock of its own. It is not
	// stored: documents read back have TTL zero.
	TTL time.Duration
}

// Validate checks a document as every ledger does before it writes it.
func (d *FlowDoc) Validate() error {
	if err := validName("flow scope", d.Scope); err != nil {
		return err
	}
	switch {
	case len(d.Data) > MaxFlowData:
		return fmt.Errorf("flow %q: data of %d bytes, over %d: %w", d.Scope, len(d.Data), MaxFlowData, ErrInvalidArgument)
	case d.TTL < 0 || d.TTL > MaxRetention:
		return fmt.Errorf("flow %q: ttl %v: want 0 to %v: %w", d.Scope, d.TTL, MaxRetention, ErrInvalidArgument)
	}
	return nil
}

// ValidateScope checks a flow scope's name as every ledger does.
func ValidateScope(scope string) error { return validName("flow scope", scope) }

// FlowRead is a flow document as read, with the ledger's clock at the read.
type FlowRead struct {
	// Doc is the live document when Found. When not Found, Doc holds
	// only Scope and the Version of the scope's last document (0 when
	// there was none): the ifVersion a PutFlow needs is Doc.Version
	// either way.
	Doc   FlowDoc
	Found bool
	// Now is the ledger's clock at the read: the server's for
	// PostgreSQL, the host's for the embedded ledger and for DynamoDB.
	// A caller that must compare a document's times with the ledger's
	// clock compares them with Now (and its own clock's progress since),
	// never with its own clock.
	Now time.Time
}

// Live reports whether d is live at now: not deleted and not expired.
func (d *FlowDoc) Live(now time.Time) bool {
	return d.Expires.IsZero() || d.Expires.After(now)
}

// A Reservation takes rate tokens: each of its Tokens takes one token of
// every bucket it names, all at one start. A bucket follows the generic
// cell rate algorithm (GCRA): with T = 1/Rate and τ = (Burst−1)·T, it holds
// a theoretical arrival time TAT and lets a token start at max(now,
// TAT − τ), or at its NotBefore when that is later. A token's start is
// the latest its buckets allow; taking it moves each of its buckets' TAT
// to max(TAT, start) + T. Tokens are taken in order; one that would start
// later than its Within is not taken and moves nothing, and those after
// it are still tried. Because a token's buckets move together from its
// start, a message limited by several buckets (a handler's rate and a
// tenant's) never uses one bucket's token later than its time while
// another bucket holds it back.
type Reservation struct {
	Buckets []Bucket
	Tokens  []Token
}

// Bucket is a rate bucket and the limits its reserver sets.
type Bucket struct {
	Name string
	// Rate is the bucket's rate in tokens per second: at least one a
	// day, at most 10⁹.
	Rate float64
	// Burst is how many tokens may start at once after the bucket was
	// idle: at least 1.
	Burst int
}

// Token is one token asked for.
type Token struct {
	// Buckets are the buckets it takes from, as indexes into
	// Reservation.Buckets: at least one, each once.
	Buckets []int
	// Within, when positive, takes the token only when it can start
	// within Within from now; zero takes it whatever its start (up to
	// MaxRetention ahead).
	Within time.Duration
	// NotBefore, when positive, starts the token no sooner than
	// NotBefore from now, whatever its buckets allow: a turn in a
	// queue that begins when another bucket's token would be due.
	NotBefore time.Duration
}

// Grant is what a reservation took.
type Grant struct {
	// Now is the ledger's clock when it took the tokens (the host's on
	// the embedded ledger and on DynamoDB, the server's on PostgreSQL).
	Now time.Time
	// Starts are when each token starts, as offsets from Now; for a
	// token not taken, when it would have started.
	Starts []time.Duration
	// Taken tells, for each token, whether it was taken.
	Taken []bool
	// Next is, for each bucket, when a further token of it alone would
	// start, from Now.
	Next []time.Duration
	// Rates and Bursts are, for each bucket, what it held before this
	// reservation: the last reserver's limits, or this one's own for a
	// new bucket. When they differ from the reservation's,
	// the callers sharing the bucket disagree on its limits.
	Rates  []float64
	Bursts []int
}

// Validate checks a reservation as every ledger does: each bucket named
// once, every token naming at least one bucket, each at most once.
func (r *Reservation) Validate() error {
	if len(r.Buckets) == 0 || len(r.Tokens) == 0 {
		return fmt.Errorf("reserve: %d buckets, %d tokens: want at least one of each: %w", len(r.Buckets), len(r.Tokens), ErrInvalidArgument)
	}
	if len(r.Tokens) > MaxTokens {
		return fmt.Errorf("reserve: %d tokens in one call: want at most %d: %w", len(r.Tokens), MaxTokens, ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(r.Buckets))
	for i := range r.Buckets {
		b := &r.Buckets[i]
		if err := validName("rate bucket", b.Name); err != nil {
			return fmt.Errorf("reserve: %w", err)
		}
		switch {
		case math.IsNaN(b.Rate) || b.Rate < 1.0/86400 || b.Rate > 1e9:
			return fmt.Errorf("reserve: rate bucket %q: rate %v: want 1/86400 to 10⁹ per second: %w", b.Name, b.Rate, ErrInvalidArgument)
		case b.Burst < 1 || b.Burst > MaxReserve:
			return fmt.Errorf("reserve: rate bucket %q: burst %d: want 1 to %d: %w", b.Name, b.Burst, MaxReserve, ErrInvalidArgument)
		case float64(b.Burst)*float64(b.Interval()) > float64(MaxRetention):
			return fmt.Errorf("reserve: rate bucket %q: a burst of %d at %v per second spans more than %v: %w", b.Name, b.Burst, b.Rate, MaxRetention, ErrInvalidArgument)
		case seen[b.Name]:
			return fmt.Errorf("reserve: rate bucket %q named twice in one call: %w", b.Name, ErrInvalidArgument)
		}
		seen[b.Name] = true
	}
	for i, t := range r.Tokens {
		if len(t.Buckets) == 0 {
			return fmt.Errorf("reserve: token %d names no bucket: %w", i, ErrInvalidArgument)
		}
		if t.Within < 0 || t.Within > MaxRetention {
			return fmt.Errorf("reserve: token %d: within %v: want 0 to %v: %w", i, t.Within, MaxRetention, ErrInvalidArgument)
		}
		if t.NotBefore < 0 || t.NotBefore > MaxRetention {
			return fmt.Errorf("reserve: token %d: not before %v: want 0 to %v: %w", i, t.NotBefore, MaxRetention, ErrInvalidArgument)
		}
		for k, b := range t.Buckets {
			if b < 0 || b >= len(r.Buckets) || slices.Contains(t.Buckets[:k], b) {
				return fmt.Errorf("reserve: token %d: bucket index %d out of range or named twice: %w", i, b, ErrInvalidArgument)
			}
		}
	}
	return nil
}

// Interval is the emission interval T = 1/Rate, rounded up to the
// nanosecond (so that no second holds more than Rate tokens beyond the
// burst): what every ledger adds to a bucket's TAT per token.
func (b *Bucket) Interval() time.Duration {
	return max(time.Duration(math.Ceil(float64(time.Second)/b.Rate)), 1)
}

// Tolerance is τ = (Burst−1)·T.
func (b *Bucket) Tolerance() time.Duration {
	return time.Duration(b.Burst-1) * b.Interval()
}

// Plan applies r at now to its buckets, whose TATs are tats (0 for a new
// bucket) and whose held limits are rates and bursts (zero for a new
// bucket): the grant, and the buckets' new TATs in tats. Every ledger
// takes tokens with it, holding the buckets meanwhile. Times are Unix
// nanoseconds.
func (r *Reservation) Plan(tats []int64, rates []float64, bursts []int, now int64) Grant {
	g := Grant{Now: time.Unix(0, now), Starts: make([]time.Duration, len(r.Tokens)), Taken: make([]bool, len(r.Tokens)),
		Next: make([]time.Duration, len(r.Buckets)), Rates: make([]float64, len(r.Buckets)), Bursts: make([]int, len(r.Buckets))}
	for i := range r.Buckets {
		g.Rates[i], g.Bursts[i] = rates[i], bursts[i]
		if rates[i] == 0 {
			g.Rates[i], g.Bursts[i] = r.Buckets[i].Rate, r.Buckets[i].Burst
		}
	}
	for i, t := range r.Tokens {
		start := now + int64(t.NotBefore)
		for _, b := range t.Buckets {
			start = max(start, tats[b]-int64(r.Buckets[b].Tolerance()))
		}
		g.Starts[i] = time.Duration(start - now)
		if start-now > int64(MaxRetention) || t.Within > 0 && start-now > int64(t.Within) {
			continue
		}
		g.Taken[i] = true
		for _, b := range t.Buckets {
			tats[b] = max(tats[b], start) + int64(r.Buckets[b].Interval())
		}
	}
	for i := range r.Buckets {
		g.Next[i] = time.Duration(max(0, tats[i]-int64(r.Buckets[i].Tolerance())-now))
	}
	return g
}

// SlotRequest asks for concurrency slots of a pool: at most Limit slots of a
// pool are held at once, by all owners together.
type SlotRequest struct {
	Pool string
	// Limit is how many slots the pool has: indexes 0 to Limit−1. A
	// slot of a higher index (the limit was lowered) is never handed
	// out; its holder keeps it until it releases it or its lease lapses.
	Limit int
	// N is how many free slots to take: at least 1. Fewer, or none,
	// are taken when fewer are free.
	N int
	// Owner holds the slots taken; ExtendSlots and ReleaseSlots name it.
	Owner string
	// Lease is how long the slots hold without an ExtendSlots: a slot
	// whose lease lapsed is free, by the ledger's clock.
	Lease time.Duration
}

// Slot is one concurrency slot held.
type Slot struct {
	Pool  string
	Index int
	Owner string
}

// Validate checks a slot request as every ledger does.
func (r *SlotRequest) Validate() error {
	if err := validName("slot pool", r.Pool); err != nil {
		return err
	}
	switch {
	case r.Limit < 1 || r.Limit > MaxSlotLimit:
		return fmt.Errorf("slot pool %q: limit %d: want 1 to %d: %w", r.Pool, r.Limit, MaxSlotLimit, ErrInvalidArgument)
	case r.N < 1:
		return fmt.Errorf("slot pool %q: n %d: want at least 1: %w", r.Pool, r.N, ErrInvalidArgument)
	case r.Owner == "" || len(r.Owner) > MaxOwnerLen:
		return fmt.Errorf("slot pool %q: owner must be 1 to %d bytes: %w", r.Pool, MaxOwnerLen, ErrInvalidArgument)
	}
	if err := ValidateSlotLease(r.Lease); err != nil {
		return fmt.Errorf("slot pool %q: %w", r.Pool, err)
	}
	return nil
}

// ValidateSlotRequests checks rs as every ledger does: each request, and
// each pool named once.
func ValidateSlotRequests(rs []SlotRequest) error {
	seen := make(map[string]bool, len(rs))
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return fmt.Errorf("take slots: %w", err)
		}
		if seen[rs[i].Pool] {
			return fmt.Errorf("take slots: pool %q named twice in one call: %w", rs[i].Pool, ErrInvalidArgument)
		}
		seen[rs[i].Pool] = true
	}
	return nil
}

// ValidateSlot checks a slot named to ExtendSlots or ReleaseSlots as every
// ledger does.
func ValidateSlot(s Slot) error {
	if err := validName("slot pool", s.Pool); err != nil {
		return err
	}
	switch {
	case s.Index < 0 || s.Index >= MaxSlotLimit:
		return fmt.Errorf("slot pool %q: index %d: want 0 to %d: %w", s.Pool, s.Index, MaxSlotLimit-1, ErrInvalidArgument)
	case s.Owner == "" || len(s.Owner) > MaxOwnerLen:
		return fmt.Errorf("slot pool %q: owner must be 1 to %d bytes: %w", s.Pool, MaxOwnerLen, ErrInvalidArgument)
	}
	return nil
}

// ValidateSlotLease checks the lease of ExtendSlots as every ledger does:
// more than 0, at most MaxSlotLease.
func ValidateSlotLease(lease time.Duration) error {
	if lease <= 0 || lease > MaxSlotLease {
		return fmt.Errorf("slot lease %v: want more than 0, at most %v: %w", lease, MaxSlotLease, ErrInvalidArgument)
	}
	return nil
}

// Process is a worker process in the registry.
type Process struct {
	// ID is the worker's owner id (host/pid/random): unique to the
	// process.
	ID      string
	Host    string
	PID     int
	Version string // the sqsonce version
	Queue   string
	// Started is when the process started, by its own clock.
	Started time.Time
	// Beat is when the process last wrote its registration, by the
	// ledger's clock; set by the ledger.
	Beat time.Time
	// BeatAge is how long ago Beat was, by the ledger's clock when
	// Processes read it; set by Processes. A caller judges a process
	// down from it, not from Beat and its own clock.
	BeatAge   time.Duration
	InHand    int // messages the process holds
	Paused    bool
	PausedWhy string
	// Expires is when the registration lapses, by the ledger's clock.
	// PutProcess sets it from TTL when TTL is positive. A lapsed
	// registration is still listed for ProcessKeep, then swept.
	Expires time.Time
	// TTL, when positive, makes PutProcess set Expires to the ledger's
	// now plus TTL (three beat intervals, say). It is not stored.
	TTL time.Duration
}

// Validate checks a process as every ledger does before it writes it, and
// cuts its texts to their bounds.
func (p *Process) Validate() error {
	if err := validName("process", p.ID); err != nil {
		return err
	}
	switch {
	case p.TTL < 0 || p.TTL > MaxRetention:
		return fmt.Errorf("process %q: ttl %v: want 0 to %v: %w", p.ID, p.TTL, MaxRetention, ErrInvalidArgument)
	case p.TTL == 0 && p.Expires.IsZero():
		return fmt.Errorf("process %q: neither ttl nor expires: %w", p.ID, ErrInvalidArgument)
	case p.PID < 0 || p.InHand < 0:
		return fmt.Errorf("process %q: negative pid or in-hand count: %w", p.ID, ErrInvalidArgument)
	}
	p.Host = textcut.Cut(p.Host, MaxProcessText)
	p.Version = textcut.Cut(p.Version, MaxProcessText)
	p.Queue = textcut.Cut(p.Queue, MaxProcessText)
	p.PausedWhy = textcut.Cut(p.PausedWhy, MaxErrorLen)
	return nil
}

// CountFailure counts f in rec's failures by its class, as every ledger
// does when it records a failure.
func CountFailure(rec *Record, f *Failure) {
	if f.Outage {
		rec.OutageFailures++
	} else {
		rec.OwnFailures++
	}
}

// ClearDeadLetter clears rec's dead-letter mark, as every ledger does when
// a claim takes the operation (a replayed message, say).
func ClearDeadLetter(rec *Record) {
	rec.DeadLettered = time.Time{}
	rec.DeadLetterReason = ""
	rec.DeadLetterCopyID = ""
}
