package ledger

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// Limits on what a record stores.
const (
	// MaxKeyLen is the longest operation key, in bytes.
	MaxKeyLen = 512
	// MaxResultLen is the longest stored result; longer results are cut.
	MaxResultLen = 4096
	// MaxErrorLen is the longest stored error text; longer texts are cut.
	MaxErrorLen = 1024
	// MaxFingerprintLen is the longest payload fingerprint accepted.
	MaxFingerprintLen = 64
	// MaxOwnerLen bounds an owner token; MaxMessageIDLen the message id
	// kept for support (longer ids are cut).
	MaxOwnerLen     = 256
	MaxMessageIDLen = 256
)

// State is where an operation stands.
type State uint8

// The states of a record. The zero State matches any state in a Filter.
const (
	StateInProgress State = iota + 1 // claimed; the owner is running the work
	StateComplete                    // the work is done; duplicates are suppressed
	StateFailed                      // the last attempt failed; see Record.Permanent
)

// String returns the state's name as used in logs and configuration.
func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateComplete:
		return "complete"
	case StateFailed:
		return "failed"
	case 0:
		return "any"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseState parses a state name as printed by String.
func ParseState(s string) (State, error) {
	for _, st := range []State{StateInProgress, StateComplete, StateFailed} {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown state %q (want in_progress, complete or failed): %w", s, ErrInvalidArgument)
}

// Record is everything the ledger knows about one operation. Records returned
// by the ledger are copies: the caller owns them.
type Record struct {
	Key         string
	State       State
	Permanent   bool   // with StateFailed: the failure is permanent and Claim answers FailedPermanently
	Fingerprint []byte // of the payload first claimed under this key
	// Attempts counts the attempts that started. An attempt is counted
	// when it ends (Complete, Fail, and a completion committed with the
	// work's own writes), or when a claim takes the operation over from
	// one whose lease lapsed or that it supersedes, whose attempt may have
	// started (it cannot be told). A claim alone counts none: while the
	// record is in progress, its claim's attempt is not in Attempts (the
	// claim may be held before it starts, or released unstarted), and the
	// attempt it would start is number Attempts+1.
	Attempts    int
	Owner       string // owner token of the current claim, while in progress
	LeaseExpiry time.Time
	FirstSeen   time.Time // first claim
	Claimed     time.Time // start of the current or last attempt
	Updated     time.Time // last write
	Completed   time.Time
	Expires     time.Time // after this the record is treated as absent and swept
	LastError   string
	MessageID   string // the last SQS message id that touched the record, for support
	Result      []byte // stored result of the completed work, at most MaxResultLen bytes

	// OwnFailures and OutageFailures count the failures Fail recorded,
	// by Failure.Outage: the operation's own, and those of an outage of
	// what its work calls. A completion does not reset them.
	OwnFailures    int
	OutageFailures int
	// DeadLettered is when MarkDeadLettered last recorded that the
	// message is being, or was, sent to the dead-letter queue, with
	// DeadLetterReason and, once the queue accepted it, the copy's
	// message id; zero when not. A later Claim that takes the operation
	// clears the three.
	DeadLettered     time.Time
	DeadLetterReason string
	DeadLetterCopyID string

	// History is the attempts that ended, oldest first: the last
	// MaxHistory, appended by Complete, Fail and a claim that takes over
	// a claim in progress (AttemptLapsed, AttemptSuperseded). A record's
	// first attempt that completes is not stored: Get derives it from the
	// record (Attempt.Derived). Attempts made by a sqsonce that predates
	// the history are not in it: Attempts less the stored attempts is how
	// many are missing. Get fills History; List, ForEach and Overview
	// leave it nil.
	History []Attempt
	// Payload is the message as the last completion or failure that
	// passed one gave it (the worker's keep_body), bounded; nil when none
	// was kept. Get fills it; List, ForEach and Overview leave it nil.
	// A claim of an expired record starts without it.
	Payload *Payload
}

// ValidateKey reports whether key can be stored, wrapping ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("empty key: %w", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("key of %d bytes, longer than %d: %w", len(key), MaxKeyLen, ErrInvalidKey)
	case !utf8.ValidString(key):
		return fmt.Errorf("key %q is not valid UTF-8: %w", key, ErrInvalidKey)
	}
	return nil
}

// recordVersion is the encoding version written by this code. Decoding
// refuses versions it does not know with ErrSchema.
const recordVersion = 1

// encode appends the binary form of r (without its key) to b.
//
// Layout, version 1: version byte, state byte, flags byte (bit 0 permanent),
// attempts as uvarint, then times as varint Unix nanoseconds (0 for the zero
// time) in the order lease, first seen, claimed, updated, completed, expires,
// then length-prefixed byte strings: fingerprint, owner, last error, message
// id, result.
func (r *Record) encode(b []byte) []byte {
	b = slices.Grow(b, r.encodedLen())
	var flags byte
	if r.Permanent {
		flags |= 1
	}
	b = append(b, recordVersion, byte(r.State), flags)
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	for _, t := range [...]time.Time{r.LeaseExpiry, r.FirstSeen, r.Claimed, r.Updated, r.Completed, r.Expires} {
		b = binary.AppendVarint(b, unixNano(t))
	}
	for _, s := range [...][]byte{r.Fingerprint, []byte(r.Owner), []byte(r.LastError), []byte(r.MessageID), r.Result} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// encodedLen is at least the length of r's encoding.
func (r *Record) encodedLen() int {
	return 3 + binary.MaxVarintLen64*7 + 5*binary.MaxVarintLen16 +
		len(r.Fingerprint) + len(r.Owner) + len(r.LastError) + len(r.MessageID) + len(r.Result)
}

// decodeRecord decodes a record stored under key. It copies everything it
// keeps, so b may be memory owned by a transaction.
func decodeRecord(key string, b []byte) (Record, error) {
	d := decoder{b: b}
	r := Record{Key: key}
	version := d.byte()
	if d.err == nil && version != recordVersion {
		if version > recordVersion {
			return Record{}, fmt.Errorf("record %q has version %d, newer than %d: %w", key, version, recordVersion, ErrSchema)
		}
		return Record{}, fmt.Errorf("record %q has unknown version %d: %w", key, version, ErrCorrupt)
	}
	r.State = State(d.byte())
	flags := d.byte()
	r.Permanent = flags&1 != 0
	r.Attempts = int(d.uvarint(1 << 31))
	times := [...]*time.Time{&r.LeaseExpiry, &r.FirstSeen, &r.Claimed, &r.Updated, &r.Completed, &r.Expires}
	for _, t := range times {
		*t = fromUnixNano(d.varint())
	}
	r.Fingerprint = d.bytes(MaxFingerprintLen)
	r.Owner = string(d.bytes(MaxOwnerLen))
	r.LastError = string(d.bytes(MaxErrorLen))
	r.MessageID = string(d.bytes(MaxMessageIDLen))
	r.Result = d.bytes(MaxResultLen)
	if d.err == nil && (r.State < StateInProgress || r.State > StateFailed) {
		d.err = fmt.Errorf("state %d", r.State)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return Record{}, fmt.Errorf("decode record %q: %v: %w", key, d.err, ErrCorrupt)
	}
	return r, nil
}

// recordExpires reads only the expiry of an encoded record (the sixth time
// after the version, state, flags and attempts). An error means: decode it
// fully to find out what is wrong.
func recordExpires(b []byte) (time.Time, error) {
	d := decoder{b: b}
	if d.byte() != recordVersion {
		return time.Time{}, ErrCorrupt
	}
	d.byte()
	d.byte()
	d.uvarint(1 << 31)
	var t int64
	for range 6 {
		t = d.varint()
	}
	if d.err != nil {
		return time.Time{}, ErrCorrupt
	}
	return fromUnixNano(t), nil
}

// decoder reads the fields of an encoded record, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = fmt.Errorf("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad uvarint")
		return 0
	}
	if v > max {
		d.err = fmt.Errorf("value %d over %d", v, max)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed string of at most max bytes and copies it.
// An empty string decodes as nil.
func (d *decoder) bytes(max int) []byte {
	n := d.uvarint(uint64(max))
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = fmt.Errorf("truncated string")
		return nil
	}
	if n == 0 {
		return nil
	}
	s := make([]byte, n)
	copy(s, d.b)
	d.b = d.b[n:]
	return s
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
