package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// store is one write transaction's view of the buckets. Every change to a
// record goes through put or remove, which keep the expiry index, the
// in-flight index and the per-state counters in step with the records.
type store struct {
	tx        *bolt.Tx
	records   *bolt.Bucket
	expiry    *bolt.Bucket
	inflight  *bolt.Bucket
	meta      *bolt.Bucket
	now       time.Time
	retention time.Duration

	// counts gathers counter changes until flushCounts, which the
	// committer calls once per transaction.
	counts [numClasses]int64

	// Reused for every read and delete of the transaction: a cursor grows
	// its stack by allocation on each fresh seek, and bbolt's Get and
	// Delete make a fresh cursor each time. Made on first use.
	recordsCur, expiryCur, inflightCur *bolt.Cursor
	// key is scratch for the keys of lookups, deletes and puts (Put copies
	// its key; only values must outlive the call).
	key []byte
	// slab holds the encoded values this transaction puts, many to an
	// allocation: bbolt keeps each value until the commit, so a slab is
	// only ever appended to.
	slab []byte
	// read is the record get returned last, next the one transition
	// writes: a request's read and write, one at a time.
	read, next Record
	// flow is the view of the records' flow fields (see recflow.go).
	flow recFlowState
	// tally gathers the counters of tally.go until flushTally.
	tally tallyState
	// story is the payload a transition keeps, for transition to write.
	story *Payload
}

// slabSize is the size of one allocation of encoded values: a few dozen
// records of the usual size; the first of a transaction is smaller.
const (
	firstSlabSize = 1024
	slabSize      = 4096
)

func (db *DB) store(tx *bolt.Tx) *store {
	s := &store{
		tx:        tx,
		records:   tx.Bucket(bucketRecords),
		expiry:    tx.Bucket(bucketExpiry),
		inflight:  tx.Bucket(bucketInFlight),
		meta:      tx.Bucket(bucketMeta),
		now:       db.now(),
		retention: db.retention,
	}
	// The indexes are keyed by time: new entries go at the end and old ones
	// leave from the front, so their pages can be filled completely.
	s.expiry.FillPercent = 1
	s.inflight.FillPercent = 1
	return s
}

// seek returns the value of key in the bucket of c, or nil, as
// bbolt.Bucket.Get does, with the cursor on it. The buckets hold no nested
// buckets.
func seek(c *bolt.Cursor, key []byte) []byte {
	k, v := c.Seek(key)
	if v == nil || !bytes.Equal(k, key) {
		return nil
	}
	return v
}

// del deletes key from the bucket of c, if there, as bbolt.Bucket.Delete
// does.
func del(c *bolt.Cursor, key []byte) error {
	if k, _ := c.Seek(key); k == nil || !bytes.Equal(k, key) {
		return nil
	}
	return c.Delete()
}

func (s *store) recordsCursor() *bolt.Cursor {
	if s.recordsCur == nil {
		s.recordsCur = s.records.Cursor()
	}
	return s.recordsCur
}

func (s *store) expiryCursor() *bolt.Cursor {
	if s.expiryCur == nil {
		s.expiryCur = s.expiry.Cursor()
	}
	return s.expiryCur
}

func (s *store) inflightCursor() *bolt.Cursor {
	if s.inflightCur == nil {
		s.inflightCur = s.inflight.Cursor()
	}
	return s.inflightCur
}

// recordKey returns key as bytes in the scratch buffer, valid until the
// next use of the buffer.
func (s *store) recordKey(key string) []byte {
	s.key = append(s.key[:0], key...)
	return s.key
}

// indexKey returns the index key of t and key in the scratch buffer, valid
// until the next use of the buffer.
func (s *store) indexKey(t time.Time, key string) []byte {
	s.key = appendIndexKey(s.key[:0], t, key)
	return s.key
}

// encode returns the encoding of rec, carved from the slab.
func (s *store) encode(rec *Record) []byte {
	if n := rec.encodedLen(); cap(s.slab)-len(s.slab) < n {
		size := slabSize
		if s.slab == nil {
			size = firstSlabSize // a lone write needs no more
		}
		s.slab = make([]byte, 0, max(n, size))
	}
	l := len(s.slab)
	s.slab = rec.encode(s.slab)
	return s.slab[l:len(s.slab):len(s.slab)]
}

// get returns the record under key, live or expired, or nil. The record is
// the store's: it is valid until the next get.
func (s *store) get(key string) (*Record, error) {
	v := seek(s.recordsCursor(), s.recordKey(key))
	if v == nil {
		return nil, nil
	}
	r, err := decodeRecord(key, v)
	if err != nil {
		return nil, &unreadableError{err: err}
	}
	s.readFlow(&r)
	s.read = r
	return &s.read, nil
}

// unreadableError is a stored record that could not be decoded. It is the
// answer for the request that read the record, not a failure of the
// transaction: the other requests sharing the commit go on. It wraps
// ErrCorrupt, and ErrSchema too when the record is of a newer version.
type unreadableError struct{ err error }

func (e *unreadableError) Error() string { return e.err.Error() }

func (e *unreadableError) Unwrap() []error { return []error{e.err, ErrCorrupt} }

func isUnreadable(err error) bool {
	if err == nil {
		return false
	}
	var u *unreadableError
	return errors.As(err, &u)
}

// live is get with expired records treated as absent. The expired record is
// returned as old so that a following put can clean up its index entries.
func (s *store) live(key string) (rec, old *Record, err error) {
	old, err = s.get(key)
	if err != nil || old == nil {
		return nil, old, err
	}
	if !old.Expires.After(s.now) {
		return nil, old, nil
	}
	return old, old, nil
}

// put writes rec over old (nil when there was none), stamping Updated and
// Expires and moving index entries and counters.
func (s *store) put(old *Record, rec *Record) error {
	rec.Updated = s.now
	rec.Expires = s.now.Add(s.retention)
	keep := keepsExpiry(old, rec)
	if keep {
		rec.Expires = old.Expires
	}
	if err := s.unindex(old, !keep); err != nil {
		return err
	}
	// bbolt keeps the value slice until the commit: never reuse it.
	if err := s.records.Put(s.recordKey(rec.Key), s.encode(rec)); err != nil {
		return err
	}
	if !keep {
		if err := s.expiry.Put(s.indexKey(rec.Expires, rec.Key), nil); err != nil {
			return err
		}
	}
	if rec.State == StateInProgress {
		if err := s.inflight.Put(s.indexKey(rec.Claimed, rec.Key), nil); err != nil {
			return err
		}
	}
	if err := s.putFlow(rec); err != nil {
		return err
	}
	if err := s.tallyFailure(rec, 1); err != nil {
		return err
	}
	return s.count(rec, 1)
}

// expirySlack is how long after a record's claim a write of that claim
// (its completion, say) may come and keep the claim's expiry.
const expirySlack = time.Second

// keepsExpiry reports whether rec, written over old, keeps old's Expires
// rather than take the write's time plus the retention: when it is a write
// of the same claim within expirySlack of it, and the retention did not
// shrink since. A busy worker completes most operations that soon: the
// completion then rewrites the record alone, where moving its expiry index
// entry would rewrite an older index page as well as the newest one in the
// same commit. A record is thus kept at least the retention after its
// claim, at most expirySlack less than after its last write.
func keepsExpiry(old, rec *Record) bool {
	if old == nil || old.Claimed.IsZero() || !old.Claimed.Equal(rec.Claimed) || old.Expires.After(rec.Expires) || rec.Expires.Sub(old.Expires) >= expirySlack {
		return false
	}
	d := rec.Updated.Sub(rec.Claimed)
	return d >= 0 && d < expirySlack
}

// remove deletes old and its index entries.
func (s *store) remove(old *Record) error {
	if err := s.unindex(old, true); err != nil {
		return err
	}
	if err := s.removeFlow(old.Key); err != nil {
		return err
	}
	if err := s.removeStory(old.Key); err != nil {
		return err
	}
	return del(s.recordsCursor(), s.recordKey(old.Key))
}

// removeUnreadable deletes the record of key, which cannot be decoded, and
// its entry in the in-flight index, found by its key. Its expiry index
// entry cannot be found without the record's time: the sweep drops it as an
// entry without a record. The per-state counters still count the record,
// whose state is unknown.
func (s *store) removeUnreadable(key string) error {
	if err := s.removeFlow(key); err != nil {
		return err
	}
	if err := s.removeStory(key); err != nil {
		return err
	}
	// Its failure, if it was one, is still counted: the next Open
	// rebuilds the counters.
	if err := s.meta.Put(metaTallyStale, []byte{1}); err != nil {
		return err
	}
	if err := del(s.recordsCursor(), s.recordKey(key)); err != nil {
		return err
	}
	var stale [][]byte
	c := s.inflight.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) >= 8 && string(k[8:]) == key {
			stale = append(stale, append([]byte(nil), k...))
		}
	}
	for _, k := range stale {
		if err := s.inflight.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// unindex removes old's index entries (its expiry index entry only when
// expiry is set) and takes it out of the counters.
func (s *store) unindex(old *Record, expiry bool) error {
	if old == nil {
		return nil
	}
	if expiry {
		if err := del(s.expiryCursor(), s.indexKey(old.Expires, old.Key)); err != nil {
			return err
		}
	}
	if old.State == StateInProgress {
		if err := del(s.inflightCursor(), s.indexKey(old.Claimed, old.Key)); err != nil {
			return err
		}
	}
	if err := s.tallyFailure(old, -1); err != nil {
		return err
	}
	return s.count(old, -1)
}

// Counters, one per class of record, kept in the meta bucket so that Stats
// does not scan.
const (
	classInProgress = iota
	classComplete
	classFailed
	classFailedPermanently
	numClasses
)

var counterKeys = [numClasses][]byte{
	[]byte("count.in_progress"),
	[]byte("count.complete"),
	[]byte("count.failed"),
	[]byte("count.failed_permanently"),
}

func class(r *Record) int {
	switch {
	case r.State == StateInProgress:
		return classInProgress
	case r.State == StateComplete:
		return classComplete
	case r.Permanent:
		return classFailedPermanently
	}
	return classFailed
}

func (s *store) count(r *Record, delta int64) error {
	s.counts[class(r)] += delta
	return nil
}

func (s *store) addCount(c int, delta int64) error {
	k := counterKeys[c]
	n := int64(readCounter(s.meta, k)) + delta
	if n < 0 {
		n = 0
	}
	return s.meta.Put(k, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// flushCounts writes the counter changes gathered since the last flush.
func (s *store) flushCounts() error {
	for c, delta := range s.counts {
		if delta != 0 {
			if err := s.addCount(c, delta); err != nil {
				return err
			}
			s.counts[c] = 0
		}
	}
	return nil
}

func readCounter(meta *bolt.Bucket, k []byte) uint64 {
	v := meta.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// indexKey is the big-endian Unix nanoseconds of t followed by key, so that
// a cursor walks an index in time order.
func indexKey(t time.Time, key string) []byte {
	return appendIndexKey(make([]byte, 0, 8+len(key)), t, key)
}

// appendIndexKey appends the index key of t and key to b.
func appendIndexKey(b []byte, t time.Time, key string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(unixNano(t)))
	return append(b, key...)
}

func splitIndexKey(k []byte) (time.Time, string, error) {
	if len(k) < 8 {
		return time.Time{}, "", fmt.Errorf("index entry of %d bytes: %w", len(k), ErrCorrupt)
	}
	return fromUnixNano(int64(binary.BigEndian.Uint64(k[:8]))), string(k[8:]), nil
}
