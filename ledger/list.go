package ledger

import (
	"bytes"
	"cmp"
	"context"
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
	}
	return nil
}

// Match reports whether r meets every condition of f. Liveness is not one
// of them: the caller judges it by its own clock.
func (f Filter) Match(r Record) bool {
	return f.matchHead(r.State, r.Updated) && strings.HasPrefix(r.Key, f.Prefix) && f.matchReason(r.LastError)
}

// matchHead checks the conditions that need no more than a record's state
// and last write.
func (f Filter) matchHead(state State, updated time.Time) bool {
	return (f.State == 0 || state == f.State) &&
		(f.Since.IsZero() || !updated.Before(f.Since)) &&
		(f.Until.IsZero() || updated.Before(f.Until))
}

// matchReason reports whether lastError contains f.Reason, ignoring case.
func (f Filter) matchReason(lastError string) bool {
	if f.Reason == "" {
		return true
	}
	return strings.Contains(strings.ToLower(lastError), strings.ToLower(f.Reason))
}

// Limits of List.
const (
	// DefaultListLimit is the page size of a List whose limit is 0.
	DefaultListLimit = 50
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// Page is one page of a List.
type Page struct {
	// Records match the filter, in the backend's order (key order, but
	// on DynamoDB).
	Records []Record
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
// order, starting after the key after ("" from the start). Next continues
// the listing. limit 0 means DefaultListLimit; more than MaxListLimit is
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
				// A complete record has no reason (a completion clears
				// it): a filter by reason needs no more than its head.
				h, ok := peekRecord(v)
				if ok && (!h.expires.After(now) || !f.matchHead(h.state, h.updated) || (f.Reason != "" && h.state == StateComplete)) {
					continue
				}
				r, err := decodeRecord(string(k), v)
				if err != nil {
					page.Unreadable++
					continue
				}
				if r.Expires.After(now) && f.Match(r) {
					attachFlow(tx, &r)
					page.Records = append(page.Records, r)
				}
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
	// OverviewFailureGroups is how many groups of failures an Overview
	// holds, the largest first.
	OverviewFailureGroups = 20
	// OverviewOwners is how many owners an Overview names, those with
	// the most claims first.
	OverviewOwners = 50
)

// Overview is what a console shows first of a ledger: the counts, the
// claims in progress, the failures by reason and the recent activity.
type Overview struct {
	// Stats are the counts by state and the oldest claim in progress.
	Stats
	// Estimate is empty when the counts are exact, and otherwise says how
	// they were estimated.
	Estimate string
	// OldestClaims are the in-progress records with the oldest claims
	// first, at most OverviewInProgress; those whose LeaseExpiry has
	// passed (by Now) are lapsed, to be taken over by a redelivery.
	OldestClaims []Record
	// Owners are the owners holding in-progress claims, the most claims
	// first, at most OverviewOwners.
	Owners []OwnerClaims
	// Failures are the failed records grouped by their LastError, the
	// largest groups first, at most OverviewFailureGroups.
	Failures []FailureGroup
	// Activity counts, per minute since the time asked for, the records
	// completed (by Completed) and the failed records whose last attempt
	// failed then (by Updated), oldest minute first; minutes with neither
	// are left out. A record counts once, as it stands now.
	Activity []Minute
	// Now is the backend's clock when the overview was read: lapsed
	// leases and the activity window are judged by it.
	Now time.Time
	// Partial is set when a bound on the reading cut it short, or it read
	// a sample: Owners, Failures and Activity then cover only the records
	// read (Scanned).
	Partial bool
	// Scanned is how many records were read for Owners, Failures and
	// Activity.
	Scanned int
}

// OwnerClaims is an owner and the claims it holds.
type OwnerClaims struct {
	Owner  string
	Claims int
	Lapsed int // claims whose lease has lapsed
}

// FailureGroup is the failed records of one reason.
type FailureGroup struct {
	Reason    string
	Count     int
	Permanent int    // of Count, those failed permanently
	Example   string // the key of one of them
	Last      time.Time
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
	minutes    map[int64]*Minute
	scanned    int
}

// maxGroups bounds the distinct reasons and owners a builder keeps; the
// rest are counted under the group named by overflowName.
const (
	maxGroups    = 10_000
	overflowName = "(other reasons)"
)

// NewOverviewBuilder returns a builder for an overview at now with
// activity since since.
func NewOverviewBuilder(now, since time.Time) *OverviewBuilder {
	return &OverviewBuilder{now: now, since: since, owners: map[string]*OwnerClaims{},
		failures: map[string]*FailureGroup{}, minutes: map[int64]*Minute{}}
}

// Add counts one live record.
func (b *OverviewBuilder) Add(r Record) {
	b.scanned++
	switch r.State {
	case StateInProgress:
		b.addInProgress(r)
	case StateComplete:
		b.addActivity(r.Completed, true)
	case StateFailed:
		b.addFailure(r)
	}
}

func (b *OverviewBuilder) addInProgress(r Record) {
	o := b.owners[r.Owner]
	if o == nil {
		if len(b.owners) >= maxGroups {
			return
		}
		o = &OwnerClaims{Owner: r.Owner}
		b.owners[r.Owner] = o
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
	b.addActivity(r.Updated, false)
	g := b.failures[r.LastError]
	if g == nil {
		name := r.LastError
		if len(b.failures) >= maxGroups {
			name = overflowName
		}
		if g = b.failures[name]; g == nil {
			g = &FailureGroup{Reason: name, Example: r.Key}
			b.failures[name] = g
		}
	}
	g.Count++
	if r.Permanent {
		g.Permanent++
	}
	if r.Updated.After(g.Last) {
		g.Last = r.Updated
	}
}

func (b *OverviewBuilder) addActivity(t time.Time, completed bool) {
	if t.IsZero() || t.Before(b.since) || t.After(b.now) {
		return
	}
	m := t.Unix() / 60
	bucket := b.minutes[m]
	if bucket == nil {
		bucket = &Minute{Start: time.Unix(m*60, 0)}
		b.minutes[m] = bucket
	}
	if completed {
		bucket.Completed++
	} else {
		bucket.Failed++
	}
}

// Overview returns what was added, with st as its counts.
func (b *OverviewBuilder) Overview(st Stats) Overview {
	b.trimInProgress()
	o := Overview{Stats: st, OldestClaims: b.inProgress, Now: b.now, Scanned: b.scanned}
	for _, v := range b.owners {
		o.Owners = append(o.Owners, *v)
	}
	slices.SortFunc(o.Owners, func(x, y OwnerClaims) int {
		return cmp.Or(cmp.Compare(y.Claims, x.Claims), strings.Compare(x.Owner, y.Owner))
	})
	o.Owners = o.Owners[:min(len(o.Owners), OverviewOwners)]
	for _, v := range b.failures {
		o.Failures = append(o.Failures, *v)
	}
	SortFailures(o.Failures)
	o.Failures = o.Failures[:min(len(o.Failures), OverviewFailureGroups)]
	for _, v := range b.minutes {
		o.Activity = append(o.Activity, *v)
	}
	slices.SortFunc(o.Activity, func(x, y Minute) int { return x.Start.Compare(y.Start) })
	return o
}

// SortFailures puts the largest groups first, then the most recent.
func SortFailures(gs []FailureGroup) {
	slices.SortFunc(gs, func(x, y FailureGroup) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), y.Last.Compare(x.Last), strings.Compare(x.Reason, y.Reason))
	})
}

// overviewScan bounds how many records one Overview reads; overviewChunk
// how many one of its read transactions looks at.
const (
	overviewScan  = 5_000_000
	overviewChunk = 8192
)

// Overview reads the counts (kept as counters), the claims in progress
// (through the in-flight index) and, in one walk of the records in short
// read transactions, the failures and the activity since since. Only the
// failed and in-progress records are decoded whole. A ledger of more than
// about 5,000,000 records is read in part (Overview.Partial).
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
				b.addInProgress(r)
			}
			return nil
		})
		if err != nil {
			return Overview{}, fmt.Errorf("overview: %w", err)
		}
	}
	// The failures and the activity, in one walk of the records.
	var last []byte
	scanned := 0
	partial := false
	for done := false; !done; {
		if err := ctx.Err(); err != nil {
			return Overview{}, err
		}
		if scanned >= overviewScan {
			partial = true
			break
		}
		err := db.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			k, v := c.First()
			if last != nil {
				k, v = c.Seek(last)
				if k != nil && bytes.Equal(k, last) {
					k, v = c.Next()
				}
			}
			for n := 0; n < overviewChunk; k, v = c.Next() {
				if k == nil {
					done = true
					return nil
				}
				n++
				scanned++
				last = append(last[:0], k...)
				h, ok := peekRecord(v)
				if !ok || !h.expires.After(now) {
					continue
				}
				switch h.state {
				case StateComplete:
					b.addActivity(h.completed, true)
				case StateFailed:
					r, err := decodeRecord(string(k), v)
					if err == nil {
						b.addFailure(r)
					}
				}
			}
			return nil
		})
		if err != nil {
			return Overview{}, fmt.Errorf("overview: %w", err)
		}
	}
	o := b.Overview(st)
	o.Scanned, o.Partial = scanned, partial
	return o, nil
}
