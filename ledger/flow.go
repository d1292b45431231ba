package ledger

import (
	"fmt"
	"math"
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
	// MaxReserve bounds Reservation.N and Reservation.Burst.
	MaxReserve = 1_000_000
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

// Reservation asks a rate bucket for tokens. A bucket follows the generic
// cell rate algorithm (GCRA): with T = 1/Rate and τ = (Burst−1)·T, the
// bucket holds a theoretical arrival time TAT; each token i is given at
// tat = max(TAT, now), starts max(0, tat − τ − now) from now, and moves
// TAT to tat + T. Tokens are given in order until N or until one would
// start later than Within.
type Reservation struct {
	Bucket string
	// Rate is the bucket's rate in tokens per second: more than 0, at
	// least one a day, at most 10⁹.
	Rate float64
	// Burst is how many tokens may start at once after the bucket was
	// idle: at least 1.
	Burst int
	// N is how many tokens to take: at least 1.
	N int
	// Within, when positive, takes only tokens that can start within
	// Within from now; zero takes N whatever their start.
	Within time.Duration
}

// Grant is what a reservation took.
type Grant struct {
	// Starts are when each token taken may start, as offsets from the
	// ledger's now at the reservation, ascending; at most N of them,
	// fewer when Within bounded them (none when not even the first
	// could start within it).
	Starts []time.Duration
	// Next is when a further token would start, from the same now.
	Next time.Duration
	// Now is that now: the ledger's clock when it took the tokens (the
	// host's on the embedded ledger and on DynamoDB, the server's on
	// PostgreSQL).
	Now time.Time
	// Rate and Burst are what the bucket held before this reservation:
	// the last other reserver's, or this one's own for a new or idle
	// bucket. When they differ from the reservation's, the callers
	// sharing the bucket disagree on its limits.
	Rate  float64
	Burst int
}

// Validate checks a reservation as every ledger does.
func (r *Reservation) Validate() error {
	if err := validName("rate bucket", r.Bucket); err != nil {
		return err
	}
	switch {
	case math.IsNaN(r.Rate) || r.Rate < 1.0/86400 || r.Rate > 1e9:
		return fmt.Errorf("rate bucket %q: rate %v: want 1/86400 to 10⁹ per second: %w", r.Bucket, r.Rate, ErrInvalidArgument)
	case r.Burst < 1 || r.Burst > MaxReserve:
		return fmt.Errorf("rate bucket %q: burst %d: want 1 to %d: %w", r.Bucket, r.Burst, MaxReserve, ErrInvalidArgument)
	case r.N < 1 || r.N > MaxReserve:
		return fmt.Errorf("rate bucket %q: n %d: want 1 to %d: %w", r.Bucket, r.N, MaxReserve, ErrInvalidArgument)
	case r.Within < 0 || r.Within > MaxRetention:
		return fmt.Errorf("rate bucket %q: within %v: want 0 to %v: %w", r.Bucket, r.Within, MaxRetention, ErrInvalidArgument)
	case float64(r.Burst+r.N)*float64(r.Interval()) > float64(MaxRetention):
		return fmt.Errorf("rate bucket %q: burst and n of %d tokens at %v per second span more than %v: %w",
			r.Bucket, r.Burst+r.N, r.Rate, MaxRetention, ErrInvalidArgument)
	}
	return nil
}

// ValidateReservations checks rs as every ledger does: each reservation, and
// each bucket named once (a caller that wants tokens of one bucket for
// several uses adds them up in one reservation).
func ValidateReservations(rs []Reservation) error {
	seen := make(map[string]bool, len(rs))
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return fmt.Errorf("reserve: %w", err)
		}
		if seen[rs[i].Bucket] {
			return fmt.Errorf("reserve: rate bucket %q named twice in one call: %w", rs[i].Bucket, ErrInvalidArgument)
		}
		seen[rs[i].Bucket] = true
	}
	return nil
}

// Interval is the emission interval T = 1/Rate, rounded to the nanosecond
// and at least one: what every ledger adds to a bucket's TAT per token.
func (r *Reservation) Interval() time.Duration {
	return max(time.Duration(math.Round(float64(time.Second)/r.Rate)), 1)
}

// Tolerance is τ = (Burst−1)·T.
func (r *Reservation) Tolerance() time.Duration {
	return time.Duration(r.Burst-1) * r.Interval()
}

// Fit is how many tokens r takes from a bucket whose TAT, raised to now,
// is from (from ≥ now), at now: N, or fewer when Within bounds them; none
// from a bucket reserved more than MaxRetention ahead, so that its TAT
// stays far from overflowing. Times are Unix nanoseconds, as the shared
// backends compute them.
func (r *Reservation) Fit(from, now int64) int {
	if from-now > int64(MaxRetention) {
		return 0
	}
	if r.Within <= 0 {
		return r.N
	}
	t := int64(r.Interval())
	// Token i starts within Within iff from + i·T − τ − now ≤ Within.
	room := int64(r.Within) + int64(r.Tolerance()) + now - from
	if room < 0 {
		return 0
	}
	return int(min(room/t+1, int64(r.N)))
}

// Granted is the grant of k tokens taken at now from a bucket whose TAT,
// raised to now, was from; rate and burst are what the bucket held. Times
// are Unix nanoseconds.
func (r *Reservation) Granted(from int64, k int, now int64, rate float64, burst int) Grant {
	t, tau := int64(r.Interval()), int64(r.Tolerance())
	g := Grant{Starts: make([]time.Duration, k), Rate: rate, Burst: burst, Now: time.Unix(0, now)}
	for i := range k {
		g.Starts[i] = time.Duration(max(0, from+int64(i)*t-tau-now))
	}
	g.Next = time.Duration(max(0, from+int64(k)*t-tau-now))
	return g
}

// Take applies r at now to a bucket whose TAT is tat (0 for a new bucket):
// the grant and the bucket's new TAT. Times are Unix nanoseconds.
func (r *Reservation) Take(tat, now int64, rate float64, burst int) (Grant, int64) {
	from := max(tat, now)
	k := r.Fit(from, now)
	return r.Granted(from, k, now, rate, burst), from + int64(k)*int64(r.Interval())
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
