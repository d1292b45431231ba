package ledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Filter selects records for ForEach and List. The zero Filter selects
// every live record.
type Filter struct {
	State  State  // 0 = any state
	Prefix string // only keys that start with Prefix
	// Reason selects records whose LastError contains it, ignoring case.
	Reason string
	// Since and Until select records last written (Updated) at or after
	// Since and before Until. Zero: no bound.
	Since, Until time.Time
	// ReasonGroup selects records whose LastError is of that group
	// (ReasonGroup).
	ReasonGroup string
	// Permanent selects records by Record.Permanent, DeadLettered by
	// whether Record.DeadLettered is set: FlagAny (the zero Flag),
	// FlagSet or FlagUnset.
	Permanent, DeadLettered Flag
	// Newest asks List for the records last written first (see List).
	// ForEach walks in its own order whatever it says.
	Newest bool
}

// Flag is a condition of a Filter on a yes-or-no field.
type Flag int8

// The conditions of a Flag.
const (
	FlagAny   Flag = 0
	FlagSet   Flag = 1
	FlagUnset Flag = -1
)

// match reports whether set meets f.
func (f Flag) match(set bool) bool {
	return f == FlagAny || (f == FlagSet) == set
}

// Narrow reports whether f selects by more than a key prefix and a time
// window: a State, a reason, a Permanent or a DeadLettered condition.
func (f Filter) Narrow() bool {
	return f.State != 0 || f.Reason != "" || f.ReasonGroup != "" || f.Permanent != FlagAny || f.DeadLettered != FlagAny
}

// Validate reports a filter that can match nothing by mistake: a time
// window that ends before it starts, or a reason or prefix longer than any
// stored text. It wraps ErrInvalidArgument.
func (f Filter) Validate() error {
	switch {
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until):
		return fmt.Errorf("filter: since %s is not before until %s: %w",
			f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339), ErrInvalidArgument)
	case len(f.Reason) > MaxErrorLen:
		return fmt.Errorf("filter: reason of %d bytes, longer than %d: %w", len(f.Reason), MaxErrorLen, ErrInvalidArgument)
	case len(f.Prefix) > MaxKeyLen:
		return fmt.Errorf("filter: prefix of %d bytes, longer than %d: %w", len(f.Prefix), MaxKeyLen, ErrInvalidArgument)
	case len(f.ReasonGroup) > MaxErrorLen:
		return fmt.Errorf("filter: reason group of %d bytes, longer than %d: %w", len(f.ReasonGroup), MaxErrorLen, ErrInvalidArgument)
	case f.Permanent < FlagUnset || f.Permanent > FlagSet || f.DeadLettered < FlagUnset || f.DeadLettered > FlagSet:
		return fmt.Errorf("filter: a flag that is neither any, set nor unset: %w", ErrInvalidArgument)
	}
	return nil
}

// Match reports whether r, with its flow fields, meets every condition of
// f. Liveness is not one of them: the caller judges it by its own clock.
func (f Filter) Match(r Record) bool {
	return f.matchHead(r.State, r.Updated) && f.Permanent.match(r.Permanent) && f.DeadLettered.match(!r.DeadLettered.IsZero()) &&
		strings.HasPrefix(r.Key, f.Prefix) && f.matchReason(r.LastError)
}

// matchHead checks the conditions that need no more than a record's state
// and last write.
func (f Filter) matchHead(state State, updated time.Time) bool {
	return (f.State == 0 || state == f.State) &&
		(f.Since.IsZero() || !updated.Before(f.Since)) &&
		(f.Until.IsZero() || updated.Before(f.Until))
}

// matchReason reports whether lastError contains f.Reason, ignoring case,
// and is of f.ReasonGroup.
func (f Filter) matchReason(lastError string) bool {
	if f.ReasonGroup != "" && ReasonGroup(lastError) != f.ReasonGroup {
		return false
	}
	if f.Reason == "" {
		return true
	}
	return strings.Contains(strings.ToLower(lastError), strings.ToLower(f.Reason))
}

// wantsReason reports whether f selects by a reason, which a complete
// record never has (a completion clears it).
func (f Filter) wantsReason() bool { return f.Reason != "" || f.ReasonGroup != "" }

// Limits of List.
const (
	// DefaultListLimit is the page size of a List whose limit is 0.
	DefaultListLimit = 50
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// Page is one page of a List.
type Page struct {
	// Records match the filter, in the backend's order: key order, or
	// the newest first when Newest; on DynamoDB, a Scan's.
	Records []Record
	// Newest says the page is in the order Filter.Newest asks for.
	Newest bool
	// Next is the cursor of the following page: pass it to List as after.
	// It is empty when the listing has reached its end (a page that ends
	// just at the end may still have a Next, whose page is empty).
	Next string
	// Scanned is how many records List looked at to find Records. A
	// filter that matches few records may give a page with fewer records
	// than asked, or none, and a Next: each List looks at a bounded number
	// of records, so that a page view costs little however large the
	// ledger.
	Scanned int
	// Unreadable counts the records that could not be decoded and were
	// left out.
	Unreadable int
}

// CheckListLimit returns the page size for limit: DefaultListLimit for 0,
// limit itself up to MaxListLimit, an error wrapping ErrInvalidArgument
// otherwise.
func CheckListLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultListLimit, nil
	case limit < 0 || limit > MaxListLimit:
		return 0, fmt.Errorf("list: limit %d: want 1 to %d: %w", limit, MaxListLimit, ErrInvalidArgument)
	}
	return limit, nil
}

// listScan bounds how many records one List looks at, and listChunk how
// many one of its read transactions looks at.
const (
	listScan  = 50_000
	listChunk = 4096
)

// List returns a page of at most limit live records that match f, in key
// order, starting after the key after ("" from the start); with f.Newest,
// the records last written first (see listNewest), starting after the
// cursor after, which only a Page's Next gives. Next continues the
// listing. limit 0 means DefaultListLimit; more than MaxListLimit is
// refused.
//
// List looks at no more than a bounded number of records per call (about
// 50,000: some 80 ms on a small machine), each read transaction at no more
// than 4096, so that a sparse
// filter neither holds a transaction long (a writer that grows the file
// waits for every reader) nor takes long per page. Liveness is judged at
// the time of the call.
func (db *DB) List(ctx context.Context, f Filter, after string, limit int) (Page, error) {
	limit, err := CheckListLimit(limit)
	if err != nil {
		return Page{}, err
	}
	if err := f.Validate(); err != nil {
		return Page{}, err
	}
	if f.Newest {
		return db.listNewest(ctx, f, after, limit)
	}
	now := db.now()
	prefix := []byte(f.Prefix)
	var last []byte
	if after != "" {
		last = []byte(after)
	}
	var page Page
	for page.Scanned < listScan && len(page.Records) < limit {
		if err := ctx.Err(); err != nil {
			return Page{}, err
		}
		end := false
		err := db.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			k, v := c.Seek(prefix)
			if last != nil && bytes.Compare(last, prefix) >= 0 {
				k, v = c.Seek(last)
				if k != nil && bytes.Equal(k, last) {
					k, v = c.Next()
				}
			}
			for n := 0; n < listChunk && len(page.Records) < limit; k, v = c.Next() {
				if k == nil || !bytes.HasPrefix(k, prefix) {
					end = true
					return nil
				}
				n++
				page.Scanned++
				last = append(last[:0], k...)
				db.listOne(tx, &page, f, k, v, now)
			}
			if k == nil || !bytes.HasPrefix(k, prefix) {
				end = true // the page ended with the range
			}
			return nil
		})
		if err != nil {
			return Page{}, fmt.Errorf("list: %w", err)
		}
		if end {
			return page, nil
		}
	}
	page.Next = string(last)
	return page, nil
}

// listOne adds the record of key k, encoded as v, to page when it is live
// at now and matches f.
func (db *DB) listOne(tx *bolt.Tx, page *Page, f Filter, k, v []byte, now time.Time) bool {
	// A complete record has no reason (a completion clears it): a
	// filter by reason needs no more than its head.
	h, ok := peekRecord(v)
	if ok && (!h.expires.After(now) || !f.matchHead(h.state, h.updated) || !f.Permanent.match(h.permanent) ||
		(f.wantsReason() && h.state == StateComplete)) {
		return false
	}
	r, err := decodeRecord(string(k), v)
	if err != nil {
		page.Unreadable++
		return false
	}
	if !r.Expires.After(now) {
		return false
	}
	attachFlow(tx, &r)
	if !f.Match(r) {
		return false
	}
	page.Records = append(page.Records, r)
	return true
}

// listNewest is List with f.Newest: the records last written first,
// through an index in time order walked backwards: for records in
// progress the in-flight index (the latest claims first), for failed
// records the failed index (by their last write), for the others the
// expiry index, whose order is that of the last writes (the expiry is the
// last write plus the ledger's retention, unless the retention was changed
// since, or the claim's for a write within expirySlack of it: such a write
// sorts at its claim's place, and Since looks that much further back). A
// cursor is the index entry looked at last, in hexadecimal.
func (db *DB) listNewest(ctx context.Context, f Filter, after string, limit int) (Page, error) {
	now := db.now()
	index, shift := bucketExpiry, db.retention
	switch f.State {
	case StateInProgress:
		index, shift = bucketInFlight, -1 // claims: no bound by the time of the last write
	case StateFailed:
		index, shift = bucketFailed, 0
	}
	var last, stop []byte
	if after != "" {
		b, err := hex.DecodeString(after)
		if err != nil || len(b) < 8 {
			return Page{}, fmt.Errorf("list: cursor %q is not one that List gave: %w", after, ErrInvalidArgument)
		}
		last = b
	} else if !f.Until.IsZero() && shift >= 0 {
		last = indexKey(f.Until.Add(shift), "") // the walk starts before it
	}
	if !f.Since.IsZero() && shift >= 0 {
		since := f.Since
		if bytes.Equal(index, bucketExpiry) {
			since = since.Add(-expirySlack)
		}
		stop = indexKey(since.Add(shift), "")
	}
	page := Page{Newest: true}
	for page.Scanned < listScan && len(page.Records) < limit {
		if err := ctx.Err(); err != nil {
			return Page{}, err
		}
		end := false
		err := db.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(index).Cursor()
			records := tx.Bucket(bucketRecords)
			var k []byte
			if last == nil {
				k, _ = c.Last()
			} else if k, _ = c.Seek(last); k == nil {
				k, _ = c.Last()
			} else {
				k, _ = c.Prev() // Seek found the entry at or after last
			}
			for n := 0; n < listChunk && len(page.Records) < limit; k, _ = c.Prev() {
				if k == nil || stop != nil && bytes.Compare(k, stop) < 0 {
					end = true
					return nil
				}
				n++
				page.Scanned++
				last = append(last[:0], k...)
				_, key, err := splitIndexKey(k)
				if err != nil {
					continue
				}
				if v := records.Get([]byte(key)); v != nil {
					db.listOne(tx, &page, f, []byte(key), v, now)
				}
			}
			return nil
		})
		if err != nil {
			return Page{}, fmt.Errorf("list: %w", err)
		}
		if end {
			return page, nil
		}
	}
	page.Next = hex.EncodeToString(last)
	return page, nil
}

// head is the part of an encoded record that filters and counts need,
// read without copying anything.
type head struct {
	state                              State
	permanent                          bool
	lease, claimed, updated, completed time.Time
	expires                            time.Time
}

// peekRecord reads the head of an encoded record. ok is false when it
// cannot: decode it fully to find out what is wrong.
func peekRecord(b []byte) (h head, ok bool) {
	d := decoder{b: b}
	if d.byte() != recordVersion {
		return head{}, false
	}
	h.state = State(d.byte())
	h.permanent = d.byte()&1 != 0
	d.uvarint(1 << 31)
	times := [...]*time.Time{&h.lease, nil, &h.claimed, &h.updated, &h.completed, &h.expires}
	for _, t := range times {
		n := d.varint()
		if t != nil {
			*t = fromUnixNano(n)
		}
	}
	if d.err != nil || h.state < StateInProgress || h.state > StateFailed {
		return head{}, false
	}
	return h, true
}

// Limits of an Overview.
const (
	// OverviewInProgress is how many in-progress records an Overview
	// holds, the oldest claims first.
	OverviewInProgress = 50
	// OverviewFailureGroups is how many groups of failures, and of dead
	// letters, an Overview holds, the largest first.
	OverviewFailureGroups = 20
	// OverviewOwners is how many processes holding claims an Overview
	// names, those with the most claims first.
	OverviewOwners = 50
)

// Overview is what a console shows first of a ledger: the counts, the
// claims in progress and the processes holding them, the failures and the
// dead letters by the group of their reason, and the recent activity.
type Overview struct {
	// Stats are the counts by state and the oldest claim in progress.
	Stats
	// FailedDeadLettered is how many of Stats.Failed (the retryable
	// failures) are marked dead-lettered: their message was sent to the
	// dead-letter queue, so nothing retries them until a replay. The
	// failures to be retried are Failed less these.
	FailedDeadLettered int
	// Estimate is empty when the counts are exact, and otherwise says how
	// they were estimated.
	Estimate string
	// OldestClaims are the in-progress records with the oldest claims
	// first, at most OverviewInProgress; those whose LeaseExpiry has
	// passed (by Now) are lapsed, to be taken over by a redelivery.
	OldestClaims []Record
	// Owners are the processes holding in-progress claims (the owner
	// tokens' ProcessOf), the most claims first, at most OverviewOwners.
	Owners []OwnerClaims
	// Failures are the failed records grouped by the group of their
	// LastError (ReasonGroup), the largest groups first, at most
	// OverviewFailureGroups of FailureGroups.
	Failures      []FailureGroup
	FailureGroups int
	// DeadLetters are the records marked dead-lettered, grouped by the
	// group of their DeadLetterReason, the largest first, at most
	// OverviewFailureGroups of DeadLetterGroups; DeadLettered counts them
	// all. Each counts what the ledger recorded: a message that SQS moved
	// without the worker marking it is not among them.
	DeadLetters      []DeadLetterGroup
	DeadLetterGroups int
	DeadLettered     int
	// Activity counts, per minute since the time asked for (at most
	// MinuteKeep ago), the completions and the failures recorded in that
	// minute, oldest minute first; minutes with neither are left out.
	// Each attempt that ended counts once, when it ended.
	Activity []Minute
	// Now is the backend's clock when the overview was read: lapsed
	// leases and the activity window are judged by it.
	Now time.Time
	// Partial is set when a bound on the reading cut it short, or it read
	// a sample: the parts that say so (Estimate) then cover only the
	// records read (Scanned).
	Partial bool
	// Scanned is how many records were read, where the overview reads
	// records rather than counters.
	Scanned int
}

// OwnerClaims is a process and the claims it holds.
type OwnerClaims struct {
	Owner  string // the process: ProcessOf its claims' owner tokens
	Claims int
	Lapsed int // claims whose lease has lapsed
}

// ProcessOf is the process of an owner token: the token up to its last
// slash, as the worker makes its tokens (its process id, a slash and a
// number); a token without a slash is its own process.
func ProcessOf(owner string) string {
	if i := strings.LastIndexByte(owner, '/'); i > 0 {
		return owner[:i]
	}
	return owner
}

// FailureGroup is the failed records of one reason group.
type FailureGroup struct {
	Group  string // ReasonGroup of their LastError
	Reason string // the LastError of the latest of them, an example
	Count  int
	// Permanent counts those of Count failed permanently, DeadLettered
	// the retryable ones marked dead-lettered: Count less both are to be
	// retried.
	Permanent    int
	DeadLettered int
	Example      string // the key of the latest of them
	Last         time.Time
}

// DeadLetterGroup is the records marked dead-lettered with one reason
// group.
type DeadLetterGroup struct {
	Group   string // ReasonGroup of their DeadLetterReason
	Reason  string // the reason of the latest mark, an example
	Count   int
	Example string // the key of the latest mark
	Last    time.Time
}

// Minute counts what happened in the minute that starts at Start.
type Minute struct {
	Start     time.Time
	Completed int
	Failed    int
}

// OverviewBuilder gathers an Overview from records read one at a time;
// backends that cannot group where the data is use it. Call Add for each
// live record, then Overview.
type OverviewBuilder struct {
	now, since time.Time
	inProgress []Record
	owners     map[string]*OwnerClaims
	failures   map[string]*FailureGroup
	dead       map[string]*DeadLetterGroup
	failedDead int
	scanned    int
}

// maxGroups bounds the distinct reason groups and processes a builder
// keeps; the rest are counted under the group named by overflowName.
const (
	maxGroups    = 10_000
	overflowName = "(other reasons)"
)

// NewOverviewBuilder returns a builder for an overview at now with
// activity since since.
func NewOverviewBuilder(now, since time.Time) *OverviewBuilder {
	return &OverviewBuilder{now: now, since: since, owners: map[string]*OwnerClaims{},
		failures: map[string]*FailureGroup{}, dead: map[string]*DeadLetterGroup{}}
}

// Add counts one live record, with its flow fields.
func (b *OverviewBuilder) Add(r Record) {
	b.scanned++
	switch r.State {
	case StateInProgress:
		b.AddInProgress(r)
	case StateFailed:
		b.addFailure(r)
	}
	if !r.DeadLettered.IsZero() {
		b.addDeadLetter(r)
	}
}

// AddInProgress counts one live record in progress.
func (b *OverviewBuilder) AddInProgress(r Record) {
	p := ProcessOf(r.Owner)
	o := b.owners[p]
	if o == nil {
		if len(b.owners) >= maxGroups {
			return
		}
		o = &OwnerClaims{Owner: p}
		b.owners[p] = o
	}
	o.Claims++
	if !r.LeaseExpiry.After(b.now) {
		o.Lapsed++
	}
	b.inProgress = append(b.inProgress, r)
	if len(b.inProgress) > 4*OverviewInProgress {
		b.trimInProgress()
	}
}

func (b *OverviewBuilder) trimInProgress() {
	slices.SortFunc(b.inProgress, func(x, y Record) int {
		return cmp.Or(x.Claimed.Compare(y.Claimed), strings.Compare(x.Key, y.Key))
	})
	b.inProgress = slices.Clip(b.inProgress[:min(len(b.inProgress), OverviewInProgress)])
}

func (b *OverviewBuilder) addFailure(r Record) {
	name := ReasonGroup(r.LastError)
	g := b.failures[name]
	if g == nil {
		if len(b.failures) >= maxGroups {
			name = overflowName
		}
		if g = b.failures[name]; g == nil {
			g = &FailureGroup{Group: name}
			b.failures[name] = g
		}
	}
	g.Count++
	switch {
	case r.Permanent:
		g.Permanent++
	case !r.DeadLettered.IsZero():
		g.DeadLettered++
		b.failedDead++
	}
	if !r.Updated.Before(g.Last) {
		g.Last, g.Example, g.Reason = r.Updated, r.Key, r.LastError
	}
}

func (b *OverviewBuilder) addDeadLetter(r Record) {
	name := ReasonGroup(r.DeadLetterReason)
	g := b.dead[name]
	if g == nil {
		if len(b.dead) >= maxGroups {
			name = overflowName
		}
		if g = b.dead[name]; g == nil {
			g = &DeadLetterGroup{Group: name}
			b.dead[name] = g
		}
	}
	g.Count++
	if !r.DeadLettered.Before(g.Last) {
		g.Last, g.Example, g.Reason = r.DeadLettered, r.Key, r.DeadLetterReason
	}
}

// Overview returns what was added, with st as its counts and activity as
// its activity.
func (b *OverviewBuilder) Overview(st Stats, activity []Minute) Overview {
	b.trimInProgress()
	o := Overview{Stats: st, OldestClaims: b.inProgress, Now: b.now, Scanned: b.scanned, FailedDeadLettered: b.failedDead}
	for _, v := range b.owners {
		o.Owners = append(o.Owners, *v)
	}
	SortOwners(o.Owners)
	o.Owners = o.Owners[:min(len(o.Owners), OverviewOwners)]
	for _, v := range b.failures {
		o.Failures = append(o.Failures, *v)
	}
	o.Failures, o.FailureGroups = TopFailures(o.Failures)
	for _, v := range b.dead {
		o.DeadLetters = append(o.DeadLetters, *v)
		o.DeadLettered += v.Count
	}
	o.DeadLetters, o.DeadLetterGroups = TopDeadLetters(o.DeadLetters)
	o.Activity = ActivitySince(activity, b.since)
	return o
}

// SortOwners puts the processes with the most claims first.
func SortOwners(os []OwnerClaims) {
	slices.SortFunc(os, func(x, y OwnerClaims) int {
		return cmp.Or(cmp.Compare(y.Claims, x.Claims), strings.Compare(x.Owner, y.Owner))
	})
}

// TopFailures sorts gs, the largest groups first, then the most recent,
// and returns the first OverviewFailureGroups and how many there were.
func TopFailures(gs []FailureGroup) ([]FailureGroup, int) {
	slices.SortFunc(gs, func(x, y FailureGroup) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), y.Last.Compare(x.Last), strings.Compare(x.Group, y.Group))
	})
	return gs[:min(len(gs), OverviewFailureGroups)], len(gs)
}

// TopDeadLetters is TopFailures for dead-letter groups.
func TopDeadLetters(gs []DeadLetterGroup) ([]DeadLetterGroup, int) {
	slices.SortFunc(gs, func(x, y DeadLetterGroup) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), y.Last.Compare(x.Last), strings.Compare(x.Group, y.Group))
	})
	return gs[:min(len(gs), OverviewFailureGroups)], len(gs)
}

// ActivitySince is the minutes of ms that start at since or later, oldest
// first, without empty ones.
func ActivitySince(ms []Minute, since time.Time) []Minute {
	var out []Minute
	for _, m := range ms {
		if !m.Start.Before(since.Truncate(time.Minute)) && (m.Completed > 0 || m.Failed > 0) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(x, y Minute) int { return x.Start.Compare(y.Start) })
	return out
}

// Overview reads the counts, the failures and the dead letters by group
// and the activity from the counters the ledger keeps (see tally.go), and
// the claims in progress through the in-flight index: no record but those
// in progress is read, however large the ledger.
func (db *DB) Overview(ctx context.Context, since time.Time) (Overview, error) {
	st, err := db.Stats(ctx)
	if err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	now := db.now()
	b := NewOverviewBuilder(now, since)
	// The claims in progress, oldest first, from the in-flight index.
	var afterIdx []byte
	for done := false; !done; {
		if err := ctx.Err(); err != nil {
			return Overview{}, err
		}
		err := db.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketInFlight).Cursor()
			records := tx.Bucket(bucketRecords)
			k, _ := c.First()
			if afterIdx != nil {
				k, _ = c.Seek(afterIdx)
				if k != nil && bytes.Equal(k, afterIdx) {
					k, _ = c.Next()
				}
			}
			for n := 0; n < listChunk; k, _ = c.Next() {
				if k == nil {
					done = true
					return nil
				}
				n++
				afterIdx = append(afterIdx[:0], k...)
				_, key, err := splitIndexKey(k)
				if err != nil {
					continue
				}
				v := records.Get([]byte(key))
				if v == nil {
					continue
				}
				r, err := decodeRecord(key, v)
				if err != nil || r.State != StateInProgress || !r.Expires.After(now) {
					continue
				}
				b.AddInProgress(r)
			}
			return nil
		})
		if err != nil {
			return Overview{}, fmt.Errorf("overview: %w", err)
		}
	}
	var failures []FailureGroup
	var dead []DeadLetterGroup
	var activity []Minute
	err = db.view(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketFailGroups).ForEach(func(k, v []byte) error {
			g := decodeFailGroup(v)
			if g.n > 0 {
				failures = append(failures, FailureGroup{Group: groupName(k), Reason: g.reason, Count: int(g.n),
					Permanent: int(g.permanent), DeadLettered: int(g.dead), Example: g.key, Last: fromUnixNano(g.last)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		examples := tx.Bucket(bucketDeadGroups)
		err = tx.Bucket(bucketDeadLetters).ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				return nil
			}
			e := decodeExample(examples.Get(k))
			dead = append(dead, DeadLetterGroup{Group: groupName(k), Count: int(binary.BigEndian.Uint64(v)),
				Reason: e.reason, Example: e.key, Last: fromUnixNano(e.last)})
			return nil
		})
		if err != nil {
			return err
		}
		c := tx.Bucket(bucketMinutes).Cursor()
		from := binary.BigEndian.AppendUint64(nil, uint64(max(since.Unix()/60, 0)))
		for k, v := c.Seek(from); k != nil; k, v = c.Next() {
			if len(k) == 8 && len(v) == 16 {
				activity = append(activity, Minute{Start: time.Unix(int64(binary.BigEndian.Uint64(k))*60, 0),
					Completed: int(binary.BigEndian.Uint64(v[:8])), Failed: int(binary.BigEndian.Uint64(v[8:]))})
			}
		}
		return nil
	})
	if err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	o := b.Overview(st, activity)
	for _, g := range failures {
		o.FailedDeadLettered += g.DeadLettered
	}
	o.Failures, o.FailureGroups = TopFailures(failures)
	for _, g := range dead {
		o.DeadLettered += g.Count
	}
	o.DeadLetters, o.DeadLetterGroups = TopDeadLetters(dead)
	return o, nil
}
