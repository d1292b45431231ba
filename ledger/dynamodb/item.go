package dynamodb

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// Partition key values. An operation's item is opPrefix followed by its key;
// the schema item's key does not start with opPrefix, so no operation key
// can name it.
const (
	opPrefix  = "op#"
	schemaKey = "meta#schema"
)

// Attribute names. Every expression names them through placeholders
// ("#state"): several are reserved words of DynamoDB's expression language.
const (
	attrPK          = "pk"           // S: opPrefix + key
	attrVersion     = "v"            // N: itemVersion
	attrState       = "state"        // S: in_progress, complete or failed
	attrPermanent   = "permanent"    // BOOL
	attrFingerprint = "fingerprint"  // B; absent when empty
	attrAttempts    = "attempts"     // N
	attrOwner       = "owner"        // S; absent when empty
	attrLease       = "lease_expiry" // N: Unix nanoseconds, while in progress
	attrFirstSeen   = "first_seen"   // N: Unix nanoseconds
	attrClaimed     = "claimed"      // N: Unix nanoseconds
	attrUpdated     = "updated"      // N: Unix nanoseconds
	attrCompleted   = "completed"    // N: Unix nanoseconds, once complete
	attrExpires     = "expires"      // N: Unix nanoseconds, the exact expiry
	attrTTL         = "ttl"          // N: Unix seconds, the expiry rounded up, for TTL deletion
	attrLastError   = "last_error"   // S; absent when empty
	attrMessageID   = "message_id"   // S; absent when empty
	attrResult      = "result"       // B; absent when empty
	attrWriteID     = "write_id"     // S: the call that wrote the item last

	// The flow fields of a record, absent when zero (see flow.go).
	attrOwnFailures      = "own_failures"        // N
	attrOutageFailures   = "outage_failures"     // N
	attrDeadLettered     = "dead_lettered"       // N: Unix nanoseconds
	attrDeadLetterReason = "dead_letter_reason"  // S
	attrDeadLetterCopyID = "dead_letter_copy_id" // S

	attrSchemaVersion = "schema_version" // N, on the schema item
	attrSchemaWritten = "written"        // N: Unix nanoseconds, on the schema item
)

// itemVersion is the layout of an operation's item that this code writes
// (the attributes above). An item of a higher version is unreadable here
// (ErrSchema and ErrCorrupt), like a bbolt record of a newer version.
const itemVersion = 1

// State names as stored: the ledger's own names.
var (
	stateInProgress = ledger.StateInProgress.String()
	stateComplete   = ledger.StateComplete.String()
	stateFailed     = ledger.StateFailed.String()
)

func pkOf(key string) string { return opPrefix + key }

func strAV(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func binAV(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }
func boolAV(b bool) types.AttributeValue  { return &types.AttributeValueMemberBOOL{Value: b} }
func intAV(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func timeAV(t time.Time) types.AttributeValue { return intAV(t.UnixNano()) }

// ttlSeconds is t in Unix seconds, rounded up: TTL deletion never removes an
// item before its exact expiry.
func ttlSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func keyAttrs(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: strAV(pkOf(key))}
}

// storedAttempts is the attempts attribute of an item of rec: the attempts
// that started (Record.Attempts) and, while the item is in progress, its
// claim's. Counted so, a claim adds one to it whatever it takes (a new
// item, a failed one, one in progress whose attempt may have started), a
// completion and a failure leave it as it is, and a release takes one
// back: each is one update of the same form whatever the item held, so
// that a claim stays one conditional write. recordOf takes the claim's off
// again.
func storedAttempts(rec *ledger.Record) int {
	if rec.State == ledger.StateInProgress {
		return rec.Attempts + 1
	}
	return rec.Attempts
}

// itemOf is the whole item of rec, for a PutItem. rec.Updated and
// rec.Expires must be set.
func itemOf(rec *ledger.Record, writeID string) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		attrPK:        strAV(pkOf(rec.Key)),
		attrVersion:   intAV(itemVersion),
		attrState:     strAV(rec.State.String()),
		attrPermanent: boolAV(rec.Permanent),
		attrAttempts:  intAV(int64(storedAttempts(rec))),
		attrExpires:   timeAV(rec.Expires),
		attrTTL:       intAV(ttlSeconds(rec.Expires)),
		attrWriteID:   strAV(writeID),
	}
	for name, t := range map[string]time.Time{
		attrLease: rec.LeaseExpiry, attrFirstSeen: rec.FirstSeen, attrClaimed: rec.Claimed,
		attrUpdated: rec.Updated, attrCompleted: rec.Completed, attrDeadLettered: rec.DeadLettered,
	} {
		if !t.IsZero() {
			item[name] = timeAV(t)
		}
	}
	for name, n := range map[string]int{attrOwnFailures: rec.OwnFailures, attrOutageFailures: rec.OutageFailures} {
		if n != 0 {
			item[name] = intAV(int64(n))
		}
	}
	for name, s := range map[string]string{attrOwner: rec.Owner, attrLastError: rec.LastError, attrMessageID: rec.MessageID,
		attrDeadLetterReason: rec.DeadLetterReason, attrDeadLetterCopyID: rec.DeadLetterCopyID} {
		if s != "" {
			item[name] = strAV(s)
		}
	}
	for name, b := range map[string][]byte{attrFingerprint: rec.Fingerprint, attrResult: rec.Result} {
		if len(b) > 0 {
			item[name] = binAV(b)
		}
	}
	return item
}

// unreadableError is an operation's item that cannot be decoded. It wraps
// ErrCorrupt, and ErrSchema too when the item is of a newer layout.
type unreadableError struct {
	key   string
	why   string
	newer bool
}

func (e *unreadableError) Error() string {
	return fmt.Sprintf("item of %q cannot be read: %s", e.key, e.why)
}

func (e *unreadableError) Unwrap() []error {
	if e.newer {
		return []error{ledger.ErrSchema, ledger.ErrCorrupt}
	}
	return []error{ledger.ErrCorrupt}
}

// recordOf decodes an operation's item. It fails with an *unreadableError.
func recordOf(item map[string]types.AttributeValue) (ledger.Record, error) {
	d := decoder{item: item}
	pk := d.str(attrPK, true, ledger.MaxKeyLen+len(opPrefix))
	key, ok := strings.CutPrefix(pk, opPrefix)
	if d.err == "" && !ok {
		d.err = fmt.Sprintf("partition key %q is not an operation's", pk)
	}
	r := ledger.Record{Key: key}
	if v := d.int(attrVersion, true, 1<<31); d.err == "" && v != itemVersion {
		if v > itemVersion {
			return ledger.Record{}, &unreadableError{key: key, newer: true,
				why: fmt.Sprintf("layout version %d, newer than %d: upgrade sqsonce", v, itemVersion)}
		}
		d.err = fmt.Sprintf("layout version %d", v)
	}
	switch st := d.str(attrState, true, 32); st {
	case stateInProgress:
		r.State = ledger.StateInProgress
	case stateComplete:
		r.State = ledger.StateComplete
	case stateFailed:
		r.State = ledger.StateFailed
	default:
		if d.err == "" {
			d.err = fmt.Sprintf("state %q", st)
		}
	}
	r.Permanent = d.bool(attrPermanent)
	r.Attempts = int(d.int(attrAttempts, true, 1<<31))
	if r.State == ledger.StateInProgress && r.Attempts > 0 {
		r.Attempts-- // the claim's own (see storedAttempts)
	}
	r.Fingerprint = d.bin(attrFingerprint, ledger.MaxFingerprintLen)
	r.Owner = d.str(attrOwner, false, ledger.MaxOwnerLen)
	r.LeaseExpiry = d.time(attrLease, false)
	r.FirstSeen = d.time(attrFirstSeen, true)
	r.Claimed = d.time(attrClaimed, true)
	r.Updated = d.time(attrUpdated, true)
	r.Completed = d.time(attrCompleted, false)
	r.Expires = d.time(attrExpires, true)
	r.LastError = d.str(attrLastError, false, ledger.MaxErrorLen)
	r.MessageID = d.str(attrMessageID, false, ledger.MaxMessageIDLen)
	r.Result = d.bin(attrResult, ledger.MaxResultLen)
	r.OwnFailures = int(d.int(attrOwnFailures, false, 1<<31))
	r.OutageFailures = int(d.int(attrOutageFailures, false, 1<<31))
	r.DeadLettered = d.time(attrDeadLettered, false)
	r.DeadLetterReason = d.str(attrDeadLetterReason, false, ledger.MaxErrorLen)
	r.DeadLetterCopyID = d.str(attrDeadLetterCopyID, false, ledger.MaxMessageIDLen)
	if d.err != "" {
		if key == "" {
			key = pk
		}
		return ledger.Record{}, &unreadableError{key: key, why: d.err}
	}
	return r, nil
}

// decoder reads the attributes of an item, remembering the first problem.
type decoder struct {
	item map[string]types.AttributeValue
	err  string
}

func (d *decoder) get(name string, required bool) types.AttributeValue {
	v, ok := d.item[name]
	if !ok && required && d.err == "" {
		d.err = fmt.Sprintf("attribute %s missing", name)
	}
	return v
}

func (d *decoder) fail(name string, v types.AttributeValue) {
	if d.err == "" {
		d.err = fmt.Sprintf("attribute %s of type %T", name, v)
	}
}

func (d *decoder) str(name string, required bool, max int) string {
	v := d.get(name, required)
	if v == nil {
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		d.fail(name, v)
		return ""
	}
	if (len(s.Value) > max || !utf8.ValidString(s.Value)) && d.err == "" {
		d.err = fmt.Sprintf("attribute %s of %d bytes, over %d or not UTF-8", name, len(s.Value), max)
	}
	return s.Value
}

func (d *decoder) bin(name string, max int) []byte {
	v := d.get(name, false)
	if v == nil {
		return nil
	}
	b, ok := v.(*types.AttributeValueMemberB)
	if !ok {
		d.fail(name, v)
		return nil
	}
	if len(b.Value) > max && d.err == "" {
		d.err = fmt.Sprintf("attribute %s of %d bytes, over %d", name, len(b.Value), max)
	}
	if len(b.Value) == 0 {
		return nil
	}
	return append([]byte(nil), b.Value...)
}

func (d *decoder) bool(name string) bool {
	v := d.get(name, true)
	if v == nil {
		return false
	}
	b, ok := v.(*types.AttributeValueMemberBOOL)
	if !ok {
		d.fail(name, v)
		return false
	}
	return b.Value
}

func (d *decoder) int(name string, required bool, max int64) int64 {
	v := d.get(name, required)
	if v == nil {
		return 0
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, v)
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if (err != nil || i < 0 || i > max) && d.err == "" {
		d.err = fmt.Sprintf("attribute %s is %q, not an integer in [0, %d]", name, n.Value, max)
	}
	return i
}

func (d *decoder) time(name string, required bool) time.Time {
	v := d.get(name, required)
	if v == nil {
		return time.Time{}
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, v)
		return time.Time{}
	}
	ns, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		if d.err == "" {
			d.err = fmt.Sprintf("attribute %s is %q, not Unix nanoseconds", name, n.Value)
		}
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// expr gathers the placeholders of one request's expressions: DynamoDB
// refuses a placeholder that no expression uses, so each request declares
// only what it names.
type expr struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func newExpr() *expr {
	return &expr{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// n is the placeholder of attribute name.
func (e *expr) n(name string) string {
	e.names["#"+name] = name
	return "#" + name
}

// v is the placeholder ":label" of value av.
func (e *expr) v(label string, av types.AttributeValue) string {
	e.values[":"+label] = av
	return ":" + label
}

// vals returns the values, or nil when there are none (DynamoDB refuses an
// empty map).
func (e *expr) vals() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

func (e *expr) nameMap() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

// update builds an update expression from SET and REMOVE clauses.
type update struct {
	set, remove []string
}

func (u *update) String() string {
	var b strings.Builder
	if len(u.set) > 0 {
		b.WriteString("SET " + strings.Join(u.set, ", "))
	}
	if len(u.remove) > 0 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("REMOVE " + strings.Join(u.remove, ", "))
	}
	return b.String()
}

// newWriteID returns a token for one call's writes: a call whose answer
// was lost finds it in the item and knows the write took effect.
func newWriteID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
