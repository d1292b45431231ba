package ledger

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Get returns the live record of key, or ErrNotFound. An expired record that
// has not been swept yet is not live.
func (db *DB) Get(ctx context.Context, key string) (Record, error) {
	if err := ValidateKey(key); err != nil {
		return Record{}, fmt.Errorf("get: %w", err)
	}
	var rec Record
	err := db.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		r, err := decodeRecord(key, v)
		if err != nil {
			return err
		}
		if !r.Expires.After(db.now()) {
			return ErrNotFound
		}
		attachFlow(tx, &r)
		attachStory(tx, &r)
		rec = r
		return nil
	})
	if err != nil {
		return Record{}, fmt.Errorf("get %q: %w", key, err)
	}
	return rec, nil
}

// forEachPage bounds how many records ForEach copies out of one read
// transaction, and forEachScan how many it looks at, so that a transaction
// stays short whatever the filter.
const (
	forEachPage = 256
	forEachScan = 8 * forEachPage
)

// ForEach calls fn for each live record that matches f, in key order. It
// stops at the first error fn returns and returns it, or when ctx ends.
//
// The walk is not one snapshot: it reads the records a page at a time, each
// page in a short read transaction that has ended before fn is called, so
// however slowly fn runs (a client that stops reading, say), it holds no
// transaction and delays no write. Each live record that exists for the
// whole walk is seen exactly once; a record written or removed during the
// walk may or may not be seen, and never twice. Liveness is judged at the
// time the walk starts.
//
// A record that cannot be read (a damaged file) does not stop the walk: the
// others are all passed to fn, and ForEach then returns an error wrapping
// ErrCorrupt that counts the unreadable records and names the first.
func (db *DB) ForEach(ctx context.Context, f Filter, fn func(Record) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	now := db.now()
	prefix := []byte(f.Prefix)
	var after []byte // the last key read; nil before the first page
	page := make([]Record, 0, forEachPage)
	unreadable, firstUnreadable := 0, ""
	var firstErr error
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page = page[:0]
		end := false
		err := db.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			k, v := c.Seek(prefix)
			if after != nil {
				k, v = c.Seek(after)
				if k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			for scanned := 0; len(page) < forEachPage && scanned < forEachScan; k, v = c.Next() {
				if k == nil || !bytes.HasPrefix(k, prefix) {
					end = true
					return nil
				}
				scanned++
				after = append(after[:0], k...)
				r, err := decodeRecord(string(k), v)
				if err != nil {
					if unreadable == 0 {
						firstUnreadable, firstErr = string(k), err
					}
					unreadable++
					continue
				}
				if !r.Expires.After(now) {
					continue
				}
				attachFlow(tx, &r)
				if !f.Match(r) {
					continue
				}
				page = append(page, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if end {
			if unreadable > 0 {
				return fmt.Errorf("%d record(s) could not be read and were left out, the first %q (%v); `forget` removes one: %w",
					unreadable, firstUnreadable, firstErr, ErrCorrupt)
			}
			return nil
		}
	}
}

// Stats describes the ledger at one moment.
type Stats struct {
	InProgress        int
	Complete          int
	Failed            int // retryable
	FailedPermanently int
	// OldestInProgress is when the oldest in-progress attempt was claimed;
	// zero when none is in progress.
	OldestInProgress time.Time
	FileSize         int64
	Commits          uint64 // since Open
}

// Stats returns counts by state (kept as counters, so this does not scan the
// records), the oldest in-progress claim and the file size. Expired records
// not yet swept are still counted.
func (db *DB) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := db.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		counts := [numClasses]*int{&st.InProgress, &st.Complete, &st.Failed, &st.FailedPermanently}
		for i, p := range counts {
			*p = int(readCounter(meta, counterKeys[i]))
		}
		if k, _ := tx.Bucket(bucketInFlight).Cursor().First(); k != nil {
			t, _, err := splitIndexKey(k)
			if err != nil {
				return err
			}
			st.OldestInProgress = t
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	if fi, err := db.file.Stat(); err == nil {
		st.FileSize = fi.Size()
	}
	st.Commits = db.Commits()
	return st, nil
}

// Sweep removes every record that expired before now, in transactions of at
// most Options.SweepChunk records so that claims wait at most one chunk. It
// returns how many records it removed; on error, those removed so far stay
// removed.
//
// Records are stored in key order and expire in time order, so removing
// them through the expiry index touches a different page for nearly every
// record. When many records have expired (more than one in sixteen), Sweep
// walks the records in key order instead, which removes neighbours together;
// the expiry index then only holds the few that expired meanwhile.
//
// It then removes the flow state that has no more use (see the package
// documentation), which it does not count.
func (db *DB) Sweep(ctx context.Context) (int, error) {
	many, err := db.manyExpired()
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	total := 0
	if many {
		n, err := db.sweepByKey(ctx)
		total += n
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
	}
	n, err := db.sweepByIndex(ctx)
	total += n
	if err != nil {
		return total, fmt.Errorf("sweep: %w", err)
	}
	if err := db.sweepFlow(ctx); err != nil {
		return total, fmt.Errorf("sweep flow state: %w", err)
	}
	return total, nil
}

// manyExpired reports whether more than one record in sixteen has expired,
// counting expiry index entries no further than that.
func (db *DB) manyExpired() (bool, error) {
	many := false
	err := db.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var records uint64
		for _, k := range counterKeys {
			records += readCounter(meta, k)
		}
		limit := max(records/16, uint64(db.chunk))
		now := db.now()
		n := uint64(0)
		c := tx.Bucket(bucketExpiry).Cursor()
		for k, _ := c.First(); k != nil && n < limit; k, _ = c.Next() {
			t, _, err := splitIndexKey(k)
			if err != nil {
				return err
			}
			if t.After(now) {
				return nil
			}
			n++
		}
		many = n >= limit
		return nil
	})
	return many, err
}

// sweepByKey walks the records in key order, removing expired ones, a chunk
// per transaction.
func (db *DB) sweepByKey(ctx context.Context) (int, error) {
	total := 0
	var resume []byte // the last key scanned; nil before the first chunk
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, done := 0, false
		err := db.write(ctx, func(s *store) error {
			n, done = 0, false
			var expired []*Record
			scanned := 0
			c := s.records.Cursor()
			k, v := c.First()
			if resume != nil {
				k, v = c.Seek(resume)
				if k != nil && bytes.Equal(k, resume) {
					k, v = c.Next()
				}
			}
			var last []byte
			for ; k != nil && len(expired) < db.chunk && scanned < 8*db.chunk; k, v = c.Next() {
				scanned++
				last = k
				if exp, err := recordExpires(v); err == nil && exp.After(s.now) {
					continue // live: no need to decode the rest
				}
				r, err := decodeRecord(string(k), v)
				if err != nil {
					continue // unreadable: it stays until it is forgotten
				}
				if !r.Expires.After(s.now) {
					expired = append(expired, &r)
				}
			}
			done = k == nil
			resume = append(resume[:0], last...)
			for _, r := range expired {
				if err := s.remove(r); err != nil {
					return err
				}
			}
			n = len(expired)
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if done {
			return total, nil
		}
	}
}

// sweepByIndex removes expired records in expiry order, through the index.
func (db *DB) sweepByIndex(ctx context.Context) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, last := 0, false
		err := db.write(ctx, func(s *store) error {
			n = 0
			var keys [][]byte
			c := s.expiry.Cursor()
			for k, _ := c.First(); k != nil && len(keys) < db.chunk; k, _ = c.Next() {
				t, _, err := splitIndexKey(k)
				if err != nil {
					return err
				}
				if t.After(s.now) {
					break
				}
				keys = append(keys, append([]byte(nil), k...))
			}
			for _, k := range keys {
				t, key, _ := splitIndexKey(k)
				old, err := s.get(key)
				if isUnreadable(err) {
					// The record stays until it is forgotten; its entry
					// goes, or every sweep would stop at it.
					if err := s.expiry.Delete(k); err != nil {
						return err
					}
					continue
				}
				if err != nil {
					return err
				}
				if old != nil && old.Expires.Equal(t) {
					if err := s.remove(old); err != nil {
						return err
					}
					n++
					continue
				}
				// An index entry with no matching record: drop it.
				if err := s.expiry.Delete(k); err != nil {
					return err
				}
			}
			last = len(keys) < db.chunk
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if last {
			return total, nil
		}
	}
}
